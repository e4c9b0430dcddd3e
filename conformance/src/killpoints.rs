//! Kill points inside a step, found from outside the consumer (Linux, ptrace and seccomp).
//!
//! A SIGKILL keeps the page cache: what a killed process leaves on disk is exactly what its
//! files hold at the moment it dies, whether or not it synced them. So the moment right after
//! each state-changing system call on a file of the consumer's store is a place where a crash
//! can split a step: a *kill point*. A traced process runs under a seccomp filter that stops it
//! (`SECCOMP_RET_TRACE`) at the entry of every call of `CALLS`; the tracer, a thread of its own
//! per traced process (ptrace requests must come from the thread that traces), resolves which
//! file the call touches, lets the call finish, and while the process is stopped right after it
//! copies the store's files: a `Snapshot`, the store a SIGKILL at that moment would have left.
//! Threads and children are followed (`PTRACE_O_TRACECLONE`, `TRACEFORK`, `TRACEVFORK`), and
//! every tracee dies with the tracer (`PTRACE_O_EXITKILL`).
//!
//! Kill points are recorded only while a `Window` is open (the harness opens one for each
//! request that is a model step, and closes it when the reply has arrived: every call that
//! came before the reply was recorded before the process could write the reply). Judging a
//! snapshot (reading the copied store with a fresh reader) is the harness's.
//!
//! Assumed, not tested: a consumer whose other threads keep writing while one is stopped at a
//! kill point could show a copy no single kill leaves (a spurious divergence, never a missed
//! one); writes through a shared memory mapping show at the next traced call, not at their own
//! moment (`msync` is traced).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most kill points judged per step; past it a seeded sample of this many is kept (reservoir
/// sampling, so every point is equally likely) and the summary says how many were found.
pub const POINTS_PER_STEP_MAX: usize = 64;

/// The largest store copied at a kill point: a window holds at most `POINTS_PER_STEP_MAX`
/// copies in memory, so 16 MiB bounds a window at 1 GiB.
pub const SNAPSHOT_BYTES_MAX: u64 = 16 << 20;

/// The most files outside the store a window names (`Window::outside`).
const OUTSIDE_MAX: usize = 16;

/// How long `Traced::status` waits for a process's end to be reaped before saying it is unknown.
const STATUS_WAIT_MS: u64 = 5_000;

/// The files that are the consumer's store: everything under `root`, or (this consumer, whose
/// store file sits beside the log) the entries of `root` whose names start with `prefix`.
#[derive(Clone, Debug)]
pub struct Scope {
    root: PathBuf,
    prefix: Option<String>,
    /// What a power cut would leave, followed from the syncs (`durable`), when judged.
    durability: Option<Durability>,
}

impl Scope {
    /// Every file under `dir` (a protocol consumer's store directory).
    pub fn directory(dir: &Path) -> io::Result<Scope> {
        Ok(Scope { root: dir.canonicalize()?, prefix: None, durability: None })
    }

    /// The entries of `dir` named `prefix...` (`store.db`, `store.db-journal`, `store.db-wal`).
    pub fn files(dir: &Path, prefix: &str) -> io::Result<Scope> {
        Ok(Scope { root: dir.canonicalize()?, prefix: Some(prefix.to_string()), durability: None })
    }

    /// The same files, with what a power cut would leave of them followed by `durability`
    /// (shared by every process of the store): each kill point and each window's close then
    /// carry that state too.
    pub fn with_durability(self, durability: Option<Durability>) -> Scope {
        Scope { durability, ..self }
    }

    /// The durable view of this store, when power cuts are judged.
    pub fn durability(&self) -> Option<&Durability> {
        self.durability.as_ref()
    }

    /// The path relative to the scope's root when it is in the scope. A path is compared after
    /// removing `.` and `..` lexically (the tracer resolves relative names against the
    /// process's working directory or directory descriptor, both canonical).
    fn relative(&self, path: &Path) -> Option<PathBuf> {
        let mut normal = PathBuf::new();
        for component in path.components() {
            match component {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                Component::Prefix(_) | Component::RootDir | Component::Normal(_) => normal.push(component),
            }
        }
        let relative = normal.strip_prefix(&self.root).ok()?.to_path_buf();
        match &self.prefix {
            None => Some(relative),
            // The directory itself (a directory fsync after a file's creation) counts too.
            Some(_) if relative.as_os_str().is_empty() => Some(relative),
            Some(prefix) => {
                let first = relative.components().next()?;
                first.as_os_str().to_string_lossy().starts_with(prefix.as_str()).then_some(relative)
            }
        }
    }
}

/// One entry of a copied store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    Directory,
    File(Vec<u8>),
}

/// The store's files as a SIGKILL at one moment leaves them: paths relative to the scope's root.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Snapshot {
    pub entries: BTreeMap<PathBuf, Entry>,
}

impl Snapshot {
    /// Copies the scope's files into memory.
    pub fn take(scope: &Scope) -> io::Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        let mut bytes = 0u64;
        let mut pending = vec![PathBuf::new()];
        while let Some(relative) = pending.pop() {
            let dir = scope.root.join(&relative);
            let mut names: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
            names.sort_by_key(|entry| entry.file_name());
            for entry in names {
                let path = relative.join(entry.file_name());
                let name = entry.file_name().to_string_lossy().into_owned();
                if relative.as_os_str().is_empty() && scope.prefix.as_ref().is_some_and(|p| !name.starts_with(p)) {
                    continue;
                }
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    snapshot.entries.insert(path.clone(), Entry::Directory);
                    pending.push(path);
                } else if kind.is_file() {
                    let content = std::fs::read(entry.path())?;
                    bytes += content.len() as u64;
                    if bytes > SNAPSHOT_BYTES_MAX {
                        let text = format!("the store holds more than {SNAPSHOT_BYTES_MAX} bytes: too large to copy at every kill point");
                        return Err(io::Error::other(text));
                    }
                    snapshot.entries.insert(path, Entry::File(content));
                } else {
                    let text =
                        format!("{} is neither a file nor a directory: it cannot be copied", entry.path().display());
                    return Err(io::Error::other(text));
                }
            }
        }
        Ok(snapshot)
    }

    /// Writes the copy into `dir` (which must exist and be empty).
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        for (path, entry) in &self.entries {
            match entry {
                Entry::Directory => std::fs::create_dir_all(dir.join(path))?,
                Entry::File(content) => std::fs::write(dir.join(path), content)?,
            }
        }
        Ok(())
    }
}

/// One kill point: the `ordinal`-th state-changing call of the window, and the store after it.
#[derive(Clone, Debug)]
pub struct KillPoint {
    pub ordinal: usize,
    pub syscall: &'static str,
    /// The file the call changed, relative to the store's root (empty: the root directory).
    pub file: PathBuf,
    pub snapshot: Snapshot,
    /// The store a power cut right after the call leaves (when power cuts are judged).
    pub power_cut: Option<Arc<Snapshot>>,
}

impl fmt::Display for KillPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = if self.file.as_os_str().is_empty() { ".".into() } else { self.file.display().to_string() };
        write!(f, "{} on {file}", self.syscall)
    }
}

/// What one window recorded: how many kill points it found, and those kept (in order).
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub found: usize,
    pub points: Vec<KillPoint>,
    /// Files outside the store that the process opened for writing in the window and that
    /// still exist as regular files when it closed (a temporary file removed meanwhile, a
    /// device, `/proc` and `/sys` are left out): the open call and the file's real path.
    pub outside: Vec<(&'static str, PathBuf)>,
    /// Store files the process has mapped shared and writable by the window's close: its
    /// stores to that memory change the file with no call a kill point could follow.
    pub mapped: Vec<PathBuf>,
    /// Syncs under the store (of a file or a directory) in the window.
    pub syncs: usize,
}

/// Whether a file opened for writing outside the store holds no state of the consumer's: a
/// device (`/dev/null`, a terminal; `/dev/shm` is a file system like any other), the kernel's
/// files, Python's byte-code cache (`__pycache__`), or one gone by the window's close (a
/// temporary file).
fn holds_no_state(path: &Path) -> bool {
    let kernel = ["/proc", "/sys"].iter().any(|root| path.starts_with(root));
    let device = path.starts_with("/dev") && !path.starts_with("/dev/shm");
    // Python's byte-code cache, written at an import: made again from the source when missing.
    let cache = path.components().any(|part| part.as_os_str() == "__pycache__");
    kernel || device || cache || !std::fs::metadata(path).is_ok_and(|meta| meta.is_file())
}

/// Why a process cannot be traced.
#[derive(Debug)]
pub enum TraceError {
    /// The command could not be started at all.
    Spawn(io::Error),
    /// ptrace or seccomp was refused (`PTRACE_TRACEME`, the filter), or is not on this system.
    NotPermitted(String),
    /// The process ended before it ran the command (an exec that failed).
    Ended(String),
    /// A copy of the store failed at a kill point.
    Snapshot(String),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Spawn(error) => write!(f, "cannot start it: {error}"),
            TraceError::NotPermitted(why) => write!(f, "it cannot be traced ({why})"),
            TraceError::Ended(status) => write!(f, "it ended ({status}) before it ran"),
            TraceError::Snapshot(why) => write!(f, "its store could not be copied at a kill point: {why}"),
        }
    }
}

impl std::error::Error for TraceError {}

/// A kill after the store's next calls, in free-running mode: `remaining` counts down at each
/// successful state-changing call under the scope, and the call that takes it to zero is the
/// one the process dies right after.
#[derive(Clone, Copy, Debug)]
struct Trigger {
    remaining: u64,
    /// The `k` drawn: `remaining` at arming.
    after_calls: u64,
    /// Count only the calls that make data durable (`SYNC_CALLS`): a kill right after a
    /// transaction's commit reached the disk.
    syncs_only: bool,
    /// Freeze (every thread held, a zombie) instead of killing, after passing this many more
    /// locks taken on store files (`Traced::arm_freeze`).
    freeze: Option<u64>,
}

/// A freeze counted down, on its way to where it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FreezeDue {
    /// Transactions the thread still begins before the freeze can land.
    transactions_left: u64,
    /// Whether the thread's last lock call on a store file released one (or it made none
    /// since the countdown): its next lock taking begins a transaction. SQLite takes several
    /// locks as a transaction begins (the database file's, the WAL index's read mark, the
    /// writer's) and releases them as it ends.
    released: bool,
    /// Whether the thread was seen locking or unlocking a store file since the countdown
    /// ended: such a store is locked per transaction, and the freeze waits for a lock taking.
    store_locks: bool,
}

/// The most call times a watch keeps (`Traced::watch_store_calls`).
const WATCHED_MAX: usize = 100_000;

/// The calls that make written data durable.
pub const SYNC_CALLS: [&str; 4] = ["fsync", "fdatasync", "sync_file_range", "msync"];

/// Where an armed kill struck: the call it followed, the file it changed, and how many calls
/// under the store the process had made since it was armed (the `k` drawn).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strike {
    pub syscall: &'static str,
    pub file: PathBuf,
    pub after_calls: u64,
    /// Only syncs were counted (`Traced::arm`'s `syncs_only`).
    pub syncs_only: bool,
}

impl fmt::Display for Strike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = if self.file.as_os_str().is_empty() { ".".into() } else { self.file.display().to_string() };
        let counted = if self.syncs_only { "sync" } else { "write or sync" };
        let nth = ordinal(self.after_calls);
        write!(f, "right after {} on {file}, its {nth} {counted} under the store since armed", self.syscall)
    }
}

/// 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st.
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What the tracer thread and the harness share.
#[derive(Default)]
struct State {
    window: Option<OpenWindow>,
    /// Free-running mode: every call under the scope is counted, with or without a window.
    free: bool,
    /// Successful state-changing calls under the scope (free-running mode), and the syncs
    /// among them.
    store_calls: u64,
    sync_calls: u64,
    /// An armed kill (free-running mode).
    trigger: Option<Trigger>,
    /// A kill counted down, due at this thread's next system call.
    striking: Option<(i32, Strike)>,
    /// Where the armed kill struck, once it has.
    struck: Option<Strike>,
    /// The kill counted down is a freeze (`Traced::arm_freeze`).
    freeze_due: Option<FreezeDue>,
    /// A freeze struck and not yet thawed: every thread is held in a stop of the tracer's.
    frozen: bool,
    /// The harness asked the tracer to let a frozen process run again.
    thaw: bool,
    /// When each call under the store completed, while watched (at most `WATCHED_MAX`).
    watched: Option<Vec<Instant>>,
    /// Every live tracee (the process, its threads and children), for a kill.
    live: BTreeSet<i32>,
    /// Store files the process mapped shared and writable (`Window::mapped`).
    mapped: BTreeSet<PathBuf>,
    /// A hold armed (`Traced::arm_hold`): transaction begins still to pass.
    hold: Option<u64>,
    /// Whether a hold landed since it was armed.
    held: bool,
    /// How the traced process ended, once reaped.
    ended: Option<String>,
    /// The tracer stopped on an error of its own.
    failure: Option<String>,
}

struct OpenWindow {
    scope: Scope,
    window: Window,
    /// SplitMix64's state: which points a full window keeps.
    sample: u64,
    failure: Option<String>,
}

impl OpenWindow {
    fn next_random(&mut self) -> u64 {
        self.sample = self.sample.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.sample;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Records a file opened for writing outside the store (once per path).
    fn record_outside(&mut self, call: &'static str, path: PathBuf) {
        if self.window.outside.len() < OUTSIDE_MAX && !self.window.outside.iter().any(|(_, seen)| *seen == path) {
            self.window.outside.push((call, path));
        }
    }

    /// Records a kill point: kept while the window has room, else in place of a kept one with
    /// probability `POINTS_PER_STEP_MAX / found` (reservoir sampling).
    fn record(&mut self, syscall: &'static str, file: PathBuf) {
        self.window.found += 1;
        let ordinal = self.window.found;
        let slot = if self.window.points.len() < POINTS_PER_STEP_MAX {
            None
        } else {
            let pick = usize::try_from(self.next_random() % ordinal as u64).expect("an index");
            if pick >= POINTS_PER_STEP_MAX {
                return;
            }
            Some(pick)
        };
        let snapshot = match Snapshot::take(&self.scope) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                self.failure.get_or_insert_with(|| error.to_string());
                return;
            }
        };
        let power_cut = self.scope.durability.as_ref().map(Durability::cut);
        let point = KillPoint { ordinal, syscall, file, snapshot, power_cut };
        match slot {
            None => self.window.points.push(point),
            Some(pick) => self.window.points[pick] = point,
        }
    }
}

struct Shared {
    state: Mutex<State>,
    ended: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What `Traced::start` gives: the process, and its stdin and stdout when they are piped.
type Started = (Traced, Option<ChildStdin>, Option<ChildStdout>);

/// A process started under the tracer.
pub struct Traced {
    pid: i32,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Kills a traced process, its threads and children, from any thread; the tracer reaps them.
#[derive(Clone)]
pub struct Killer {
    shared: Arc<Shared>,
}

impl Killer {
    /// The process and every thread and child of it still alive.
    pub fn pids(&self) -> Vec<i32> {
        self.shared.lock().live.iter().copied().collect()
    }

    /// Its successful syncs under the store so far.
    pub fn sync_calls(&self) -> u64 {
        self.shared.lock().sync_calls
    }

    /// SIGKILL to every live process and thread of it.
    pub fn kill(&self) {
        for pid in self.pids() {
            os::kill(pid);
        }
    }
}

impl Traced {
    /// Starts `command` (its stdin and stdout piped) traced, with `scope` as its store, and a
    /// window open from its first instruction: a process's start is a step (a restart claims
    /// its epochs), and it may write before it reads anything (`close_window` ends it).
    pub fn spawn(command: Command, scope: Scope) -> Result<(Traced, ChildStdin, ChildStdout), TraceError> {
        let window = OpenWindow { scope: scope.clone(), window: Window::default(), sample: 0, failure: None };
        let state = State { window: Some(window), ..State::default() };
        let (traced, stdin, stdout) = Traced::start(command, scope, state, true)?;
        Ok((traced, stdin.expect("piped"), stdout.expect("piped")))
    }

    /// Starts `command` traced in free-running mode: its standard streams as the caller set
    /// them, no window, every state-changing call under `scope` counted, and a kill armed with
    /// `arm` striking right after the call that reaches its count.
    pub fn spawn_free(command: Command, scope: Scope) -> Result<Traced, TraceError> {
        let state = State { free: true, ..State::default() };
        Traced::start(command, scope, state, false).map(|(traced, _, _)| traced)
    }

    fn start(command: Command, scope: Scope, state: State, piped: bool) -> Result<Started, TraceError> {
        let shared = Arc::new(Shared { state: Mutex::new(state), ended: Condvar::new() });
        let (ready, started) = std::sync::mpsc::channel();
        let tracer_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("kill-point tracer".into())
            .spawn(move || os::trace(command, scope, tracer_shared, ready, piped))
            .map_err(TraceError::Spawn)?;
        match started.recv() {
            Ok(Ok((pid, stdin, stdout))) => Ok((Traced { pid, shared, thread: Some(thread) }, stdin, stdout)),
            Ok(Err(error)) => {
                let _ = thread.join();
                Err(error)
            }
            Err(_) => {
                let _ = thread.join();
                Err(TraceError::NotPermitted("the tracer thread ended".into()))
            }
        }
    }

    /// Free-running mode: SIGKILL the process (every thread and child) right after its
    /// `after_calls`-th state-changing call under the store from now (at least 1), at the
    /// calling thread's next system call (what it did in memory in between is done).
    /// With `syncs_only`, only the calls that make data durable count (`SYNC_CALLS`).
    pub fn arm(&self, after_calls: u64, syncs_only: bool) {
        let after_calls = after_calls.max(1);
        self.shared.lock().trigger = Some(Trigger { remaining: after_calls, after_calls, syncs_only, freeze: None });
    }

    /// As `arm`, but the process is frozen instead of killed: the calling thread held at its
    /// next call and every other thread stopped (a SIGSTOP the tracer intercepts and never
    /// delivers), all held until `thaw`. A zombie: frozen while its group moves on.
    ///
    /// The freeze lands where the thread holds no lock of the store and has its work in hand,
    /// once it has begun `transactions_passed` transactions: as it begins the next, taking a
    /// lock on a store file after releasing the last (records fetched, not yet written). A
    /// store the thread never locked or unlocked since the countdown (plain files) has no such
    /// moment: the freeze lands at its first call outside the store. With 0 the freeze falls
    /// before its next transaction; with 1 or 2 it can fall between two transactions of one
    /// record (a check in one, the write in the next), which is where an application that
    /// checks its fence or its dedup table outside the writing transaction is caught.
    pub fn arm_freeze(&self, after_calls: u64, syncs_only: bool, transactions_passed: u64) {
        let after_calls = after_calls.max(1);
        let freeze = Some(transactions_passed);
        self.shared.lock().trigger = Some(Trigger { remaining: after_calls, after_calls, syncs_only, freeze });
    }

    /// Holds the process (every thread, as a freeze does, until `thaw`) as it begins its next
    /// transaction on the store after passing `begins_passed` of them: as one of its threads
    /// takes a lock on a store file while the process holds none beyond those it held when
    /// armed, before the lock is taken. With 0 it is held before its first transaction; with 1
    /// between its first and its second, where a consumer that checks its fence in one
    /// transaction and writes in another has checked and not yet written. A store the process
    /// never locks is never held there (`held` says whether it was).
    pub fn arm_hold(&self, begins_passed: u64) {
        let mut state = self.shared.lock();
        state.hold = Some(begins_passed);
        state.held = false;
    }

    /// Whether an armed hold landed (the process is frozen there until `thaw`).
    pub fn held(&self) -> bool {
        self.shared.lock().held
    }

    /// Takes back a hold that has not landed.
    pub fn disarm_hold(&self) {
        self.shared.lock().hold = None;
    }

    /// Records when each successful call under the store completes, from now on.
    pub fn watch_store_calls(&self) {
        self.shared.lock().watched = Some(Vec::new());
    }

    /// The times recorded since `watch_store_calls`, and the watch ended.
    pub fn take_watched(&self) -> Vec<Instant> {
        self.shared.lock().watched.take().unwrap_or_default()
    }

    /// Whether a freeze struck and the process is held.
    pub fn frozen(&self) -> bool {
        self.shared.lock().frozen
    }

    /// Lets a frozen process run on from where each thread was held (the intercepted
    /// SIGSTOPs are dropped); the tracer resumes them within a few milliseconds.
    pub fn thaw(&self) {
        let mut state = self.shared.lock();
        if state.frozen {
            state.thaw = true;
            // The freeze is over: the process is live again, not one a kill ended.
            state.struck = None;
        }
    }

    /// Takes back an armed kill that has not struck; `false` when it already struck.
    pub fn disarm(&self) -> bool {
        let mut state = self.shared.lock();
        let armed = state.trigger.take().is_some();
        armed | state.striking.take().is_some()
    }

    /// Where the armed kill struck, once it has.
    pub fn struck(&self) -> Option<Strike> {
        self.shared.lock().struck.clone()
    }

    /// How the process ended, once it is reaped (`None` while it runs).
    pub fn ended(&self) -> Option<String> {
        self.shared.lock().ended.clone()
    }

    /// Successful state-changing calls under the store so far (free-running mode).
    pub fn store_calls(&self) -> u64 {
        self.shared.lock().store_calls
    }

    /// A handle that can kill this process from another thread (the proxy's, at a commit).
    pub fn killer(&self) -> Killer {
        Killer { shared: Arc::clone(&self.shared) }
    }

    /// The process and every thread and child of it still alive.
    pub fn pids(&self) -> Vec<i32> {
        self.shared.lock().live.iter().copied().collect()
    }

    /// Sends `signal` to the process itself (a polite stop: SIGTERM); the tracer delivers it.
    pub fn signal(&self, signal: i32) {
        os::signal(self.pid, signal);
    }

    /// An error of the tracer's own (ptrace failed), if one happened.
    pub fn failure(&self) -> Option<String> {
        self.shared.lock().failure.clone()
    }

    /// The traced process's id.
    pub fn id(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Starts recording kill points (those of a step); `seed` picks the sample of a full window.
    pub fn open_window(&self, scope: &Scope, seed: u64) {
        let window = OpenWindow { scope: scope.clone(), window: Window::default(), sample: seed, failure: None };
        self.shared.lock().window = Some(window);
    }

    /// Stops recording and returns what the window found, its points in the order they came.
    pub fn close_window(&self) -> Result<Window, TraceError> {
        let mut state = self.shared.lock();
        if let Some(failure) = state.failure.clone() {
            return Err(TraceError::NotPermitted(failure));
        }
        let Some(open) = state.window.take() else { return Ok(Window::default()) };
        if let Some(failure) = open.failure {
            return Err(TraceError::Snapshot(failure));
        }
        let mut window = open.window;
        window.points.sort_by_key(|point| point.ordinal);
        window.outside.retain(|(_, path)| !holds_no_state(path));
        window.mapped = state.mapped.iter().cloned().collect();
        Ok(window)
    }

    /// SIGKILL to the process and every thread and child it started, then waits for the tracer.
    pub fn kill(&mut self) {
        let live: Vec<i32> = self.shared.lock().live.iter().copied().collect();
        for pid in live {
            os::kill(pid);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// How the process ended (waiting a little for it to be reaped), for an error message.
    pub fn status(&mut self) -> String {
        let state = self.shared.lock();
        let wait = Duration::from_millis(STATUS_WAIT_MS);
        let (state, _) = self
            .shared
            .ended
            .wait_timeout_while(state, wait, |state| state.ended.is_none())
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.ended.clone().unwrap_or_else(|| "status unknown: not reaped".to_string())
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether this system can trace at all (Linux on x86-64 or AArch64).
pub fn supported() -> Result<(), TraceError> {
    os::supported()
}

mod durable;
pub use durable::Durability;

#[cfg(all(target_os = "linux", target_env = "gnu", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod os;

#[cfg(not(all(target_os = "linux", target_env = "gnu", any(target_arch = "x86_64", target_arch = "aarch64"))))]
mod os {
    use super::{Scope, Shared, TraceError};
    use std::process::{ChildStdin, ChildStdout, Command};
    use std::sync::mpsc::Sender;
    use std::sync::Arc;

    const WHY: &str = "kill points inside steps need Linux's ptrace and seccomp on x86-64 or AArch64";

    pub fn supported() -> Result<(), TraceError> {
        Err(TraceError::NotPermitted(WHY.into()))
    }

    pub fn trace(
        _: Command,
        _: Scope,
        _: Arc<Shared>,
        ready: Sender<Result<(i32, Option<ChildStdin>, Option<ChildStdout>), TraceError>>,
        _: bool,
    ) {
        let _ = ready.send(Err(TraceError::NotPermitted(WHY.into())));
    }

    pub fn kill(_: i32) {}

    pub fn signal(_: i32, _: i32) {}
}

#[cfg(test)]
mod tests {
    use super::{Durability, Entry, Scope, Traced};
    use std::io::{BufRead, BufReader, Write};
    use std::path::Path;
    use std::process::Command;

    /// A shell that creates, writes, renames and removes files in its store, and writes one
    /// file outside it, between reading a line and answering one: each change in the store is
    /// a kill point, in order, and each copy shows the store right after that change.
    #[test]
    fn every_change_under_the_store_is_a_kill_point_with_the_store_right_after_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = dir.path().join("store");
        std::fs::create_dir(&store).expect("the store directory");
        let script = "read line; cd store; printf ab > a; mv a b; mkdir d; printf x > ../outside; rm b; echo done";
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).current_dir(dir.path());
        let scope = Scope::directory(&store).expect("a scope");
        let (mut traced, mut stdin, stdout) = Traced::spawn(command, scope.clone()).expect("traced");
        traced.open_window(&scope, 1);
        writeln!(stdin, "go").expect("a line");
        let mut reply = String::new();
        BufReader::new(stdout).read_line(&mut reply).expect("a reply");
        assert_eq!(reply, "done\n");
        let window = traced.close_window().expect("a window");
        traced.kill();
        let seen: Vec<String> = window.points.iter().map(|point| point.to_string()).collect();
        let names: Vec<&str> = window.points.iter().map(|point| point.syscall).collect();
        assert_eq!(window.found, window.points.len(), "{seen:?}");
        assert!(names.len() >= 5, "{seen:?}");
        let first = &window.points[0];
        assert_eq!((first.syscall, first.file.as_path()), ("openat", Path::new("a")), "{seen:?}");
        assert_eq!(first.snapshot.entries.get(Path::new("a")), Some(&Entry::File(Vec::new())), "{seen:?}");
        let written = &window.points[1];
        assert_eq!(written.syscall, "write", "{seen:?}");
        assert_eq!(written.snapshot.entries.get(Path::new("a")), Some(&Entry::File(b"ab".to_vec())));
        let renamed = window.points.iter().position(|p| p.syscall.starts_with("rename")).expect("a rename");
        let after = &window.points[renamed].snapshot.entries;
        assert!(after.get(Path::new("a")).is_none() && after.contains_key(Path::new("b")), "{seen:?}");
        let last = window.points.last().expect("a last point");
        assert!(last.syscall.starts_with("unlink"), "{seen:?}");
        assert_eq!(last.snapshot.entries.keys().collect::<Vec<_>>(), [Path::new("d")], "{seen:?}");
        assert!(window.points.iter().all(|point| !point.file.starts_with("..")), "{seen:?}");
        assert_eq!(std::fs::read(dir.path().join("outside")).expect("written"), b"x");
    }

    /// With a durable view, each kill point carries what a power cut there leaves: a file's
    /// content once it is synced (coreutils `sync FILE` is an fsync), its name once its
    /// directory is (`sync .`), and nothing of a file made since: a table of the kill point
    /// (by call and file) and the files its cut holds.
    #[test]
    fn a_kill_points_power_cut_holds_what_was_synced_before_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = dir.path().join("store");
        std::fs::create_dir(&store).expect("the store directory");
        std::fs::write(store.join("old"), "old").expect("a file of the baseline");
        let script =
            "read line; cd store; printf a > a; sync a; sync .; printf b > b; sync b; printf x > old; echo done";
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).current_dir(dir.path());
        let durability = Durability::baseline(&Scope::directory(&store).expect("a scope")).expect("a baseline");
        let scope = Scope::directory(&store).expect("a scope").with_durability(Some(durability.clone()));
        let (mut traced, mut stdin, stdout) = Traced::spawn(command, scope.clone()).expect("traced");
        traced.open_window(&scope, 1);
        writeln!(stdin, "go").expect("a line");
        let mut reply = String::new();
        BufReader::new(stdout).read_line(&mut reply).expect("a reply");
        let window = traced.close_window().expect("a window");
        traced.kill();
        let cut_at = |syscall: &str, file: &str| {
            let point = window.points.iter().rev().find(|p| p.syscall == syscall && p.file == Path::new(file));
            let cut = point.and_then(|p| p.power_cut.clone()).unwrap_or_else(|| panic!("no {syscall} on {file}"));
            let files: Vec<(String, Vec<u8>)> = cut
                .entries
                .iter()
                .filter_map(|(path, entry)| match entry {
                    Entry::File(content) => Some((path.display().to_string(), content.clone())),
                    Entry::Directory => None,
                })
                .collect();
            files
        };
        let file = |name: &str, content: &str| (name.to_string(), content.as_bytes().to_vec());
        let table = [
            ("write", "a", vec![file("old", "old")]),
            ("fsync", "a", vec![file("old", "old")]),
            ("fsync", "", vec![file("a", "a"), file("old", "old")]),
            ("fsync", "b", vec![file("a", "a"), file("old", "old")]),
            ("write", "old", vec![file("a", "a"), file("old", "old")]),
        ];
        for (syscall, name, expected) in table {
            assert_eq!(cut_at(syscall, name), expected, "the cut right after {syscall} on '{name}'");
        }
        assert_eq!(window.syncs, 3, "fsync of a, of the directory and of b");
        assert_eq!(durability.syncs(), 3);
    }

    /// A temporary directory with `store/` and a FIFO `gate` beside it: a script that starts
    /// with `read go < ../gate` waits there until the test has armed its kill.
    fn gated_store() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = dir.path().join("store");
        std::fs::create_dir(&store).expect("the store directory");
        let gate = dir.path().join("gate");
        let gate_name = std::ffi::CString::new(gate.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(gate_name.as_ptr(), 0o600) }, 0, "the gate FIFO");
        (dir, store, gate)
    }

    /// Free-running mode: an armed kill strikes right after the k-th call under the store (or
    /// the k-th sync), at the calling process's next call, so nothing after that call runs;
    /// calls outside the store are not counted. A table of (k, syncs only) and the files the
    /// kill must leave.
    #[test]
    fn an_armed_kill_strikes_right_after_the_kth_store_call_and_nothing_after_it_runs() {
        // Each `sync FILE` is an fsync of that file (coreutils), in a child process. The script
        // waits on a FIFO outside the store until the kill is armed: calls count from arming, so
        // a script that ran ahead of `arm` would shift every count.
        let script = "read go < ../gate; printf x > ../outside; printf a > a; sync a; printf b > b; sync b; \
                      printf c > c; sync c; printf d > d";
        type Case = (u64, bool, &'static str, &'static [&'static str], &'static [&'static str]);
        let table: [Case; 4] = [
            (1, false, "openat", &["a"], &["b"]),
            (2, false, "write", &["a"], &["b"]),
            (2, true, "fsync", &["a", "b"], &["c"]),
            (3, true, "fsync", &["a", "b", "c"], &["d"]),
        ];
        for (after_calls, syncs_only, syscall, present, absent) in table {
            let (dir, store, gate) = gated_store();
            let mut command = Command::new("sh");
            command.arg("-c").arg(script).current_dir(&store);
            command.stdin(std::process::Stdio::null());
            let traced = Traced::spawn_free(command, Scope::directory(&store).expect("a scope"));
            let mut traced = traced.expect("traced");
            traced.arm(after_calls, syncs_only);
            std::fs::write(&gate, b"go\n").expect("the gate opened");
            let started = std::time::Instant::now();
            while traced.ended().is_none() && started.elapsed() < std::time::Duration::from_secs(20) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let case = format!("k {after_calls}, syncs only {syncs_only}");
            let strike = traced.struck().unwrap_or_else(|| panic!("{case}: no strike ({:?})", traced.ended()));
            assert_eq!(
                (strike.syscall, strike.after_calls, strike.syncs_only),
                (syscall, after_calls, syncs_only),
                "{case}"
            );
            assert_eq!(traced.ended().as_deref(), Some("signal: 9 (SIGKILL)"), "{case}");
            for name in present {
                assert!(store.join(name).exists(), "{case}: {name} missing");
            }
            for name in absent {
                assert!(!store.join(name).exists(), "{case}: {name} written after the kill");
            }
            assert_eq!(std::fs::read(dir.path().join("outside")).expect("written"), b"x", "{case}");
            traced.kill();
        }
    }

    /// A freeze holds the process right after the k-th store call, every process of it
    /// stopped: nothing after that call runs until the thaw, and then everything does, the
    /// process ending as it would have (the intercepted SIGSTOPs never delivered).
    #[test]
    fn a_frozen_process_runs_nothing_until_thawed_and_then_runs_to_its_end() {
        let (dir, store, gate) = gated_store();
        // A background child ticking outside the store shows that every process is held.
        let script = "read go < ../gate; (while :; do date +%s%N >> ../ticks; sleep 0.01; done) & \
                      printf a > a; sync a; printf b > b; sync b; kill $!";
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).current_dir(&store).stdin(std::process::Stdio::null());
        let traced = Traced::spawn_free(command, Scope::directory(&store).expect("a scope")).expect("traced");
        traced.arm_freeze(1, true, 0);
        std::fs::write(&gate, b"go\n").expect("the gate opened");
        let started = std::time::Instant::now();
        while !traced.frozen() && started.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(traced.frozen(), "no freeze ({:?})", traced.ended());
        let strike = traced.struck().expect("a strike");
        assert_eq!((strike.syscall, strike.file.as_path()), ("fsync", Path::new("a")));
        let ticks = || std::fs::read_to_string(dir.path().join("ticks")).unwrap_or_default().lines().count();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let before = ticks();
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert_eq!(ticks(), before, "the background child ran while frozen");
        assert!(!store.join("b").exists(), "b written while frozen");
        assert!(traced.ended().is_none(), "it ended while frozen");
        traced.thaw();
        let thawed = std::time::Instant::now();
        while traced.ended().is_none() && thawed.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(traced.ended().as_deref(), Some("exit status: 0"));
        assert!(store.join("b").exists(), "b not written after the thaw");
        assert!(!traced.frozen());
    }

    /// In a store it locks, a freeze passes the transactions it is told to (a lock taken after
    /// a release), then lands as the next begins, never at a call outside the store: with 0
    /// before the first "transaction" after the sync, with 1 between the first and the
    /// second, with 2 after both (the call outside the store between the second and the third
    /// passed). A table of (transactions passed, what the lock file holds while frozen);
    /// python3 takes the record locks (`fcntl.lockf`).
    #[test]
    fn a_freeze_passes_the_store_locks_it_is_told_to_before_it_lands() {
        if Command::new("python3").arg("-c").arg("import fcntl").status().map_or(true, |status| !status.success()) {
            assert!(std::env::var_os("CI").is_none(), "python3 is missing in CI");
            eprintln!("skipped: python3 not installed (bash scripts/setup.sh installs it)");
            return;
        }
        let program = "import os, fcntl\n\
                       a = os.open('a', os.O_WRONLY | os.O_CREAT); l = os.open('l', os.O_RDWR | os.O_CREAT)\n\
                       one, two, three = b'1', b'2', b'3'\n\
                       os.write(a, one); os.fsync(a)\n\
                       fcntl.lockf(l, fcntl.LOCK_EX); os.write(l, one); fcntl.lockf(l, fcntl.LOCK_UN)\n\
                       fcntl.lockf(l, fcntl.LOCK_EX); os.write(l, two); fcntl.lockf(l, fcntl.LOCK_UN)\n\
                       open('../between', 'w').close()\n\
                       fcntl.lockf(l, fcntl.LOCK_EX); os.write(l, three); fcntl.lockf(l, fcntl.LOCK_UN)\n\
                       open('../after', 'w').close()\n";
        for (transactions_passed, held) in [(0, ""), (1, "1"), (2, "12")] {
            let (dir, store, gate) = gated_store();
            let mut command = Command::new("sh");
            command.arg("-c").arg("read go < ../gate; exec python3 -c \"$0\"").arg(program);
            command.current_dir(&store).stdin(std::process::Stdio::null());
            let traced = Traced::spawn_free(command, Scope::directory(&store).expect("a scope")).expect("traced");
            traced.arm_freeze(1, true, transactions_passed);
            std::fs::write(&gate, b"go\n").expect("the gate opened");
            let started = std::time::Instant::now();
            while !traced.frozen() && started.elapsed() < std::time::Duration::from_secs(20) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert!(traced.frozen(), "{transactions_passed}: no freeze ({:?})", traced.ended());
            std::thread::sleep(std::time::Duration::from_millis(100));
            let lock_file = std::fs::read_to_string(store.join("l")).expect("the lock file");
            assert_eq!(lock_file, held, "{transactions_passed} transactions passed");
            assert!(!dir.path().join("after").exists(), "{transactions_passed}: it ran on while frozen");
            let between = dir.path().join("between").exists();
            assert_eq!(
                between,
                transactions_passed == 2,
                "{transactions_passed}: the call outside the store ran or not"
            );
            traced.thaw();
            let thawed = std::time::Instant::now();
            while traced.ended().is_none() && thawed.elapsed() < std::time::Duration::from_secs(20) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_eq!(traced.ended().as_deref(), Some("exit status: 0"), "{transactions_passed}");
            assert_eq!(std::fs::read_to_string(store.join("l")).expect("the lock file"), "123");
        }
    }

    /// A hold lands as the process begins its transaction after passing the ones it is told
    /// to (a record lock taken while it holds none), before the lock is taken, never inside
    /// one; held, it runs nothing until the thaw; told to pass more than it begins, it never
    /// lands. A table of (begins passed, what the lock file holds while held; `None`: never
    /// held); python3 takes the record locks (`fcntl.lockf`), one request at a time.
    #[test]
    fn a_hold_lands_as_a_transaction_begins_past_the_ones_it_passes() {
        if Command::new("python3").arg("-c").arg("import fcntl").status().map_or(true, |status| !status.success()) {
            assert!(std::env::var_os("CI").is_none(), "python3 is missing in CI");
            eprintln!("skipped: python3 not installed (bash scripts/setup.sh installs it)");
            return;
        }
        let program = "import os, sys, fcntl\n\
                       l = os.open('l', os.O_RDWR | os.O_CREAT)\n\
                       print('ready', flush=True)\n\
                       sys.stdin.readline()\n\
                       for text in (b'1', b'2', b'3'):\n\
                       \x20   fcntl.lockf(l, fcntl.LOCK_EX); os.write(l, text); fcntl.lockf(l, fcntl.LOCK_UN)\n\
                       print('done', flush=True)\n";
        let table: [(u64, Option<&str>); 4] = [(0, Some("")), (1, Some("1")), (2, Some("12")), (3, None)];
        for (begins_passed, held_content) in table {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = dir.path().join("store");
            std::fs::create_dir(&store).expect("the store directory");
            let mut command = Command::new("python3");
            command.arg("-c").arg(program).current_dir(&store);
            let scope = Scope::directory(&store).expect("a scope");
            let (mut traced, mut stdin, stdout) = Traced::spawn(command, scope).expect("traced");
            let (lines, replies) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    if lines.send(line.expect("a line")).is_err() {
                        return;
                    }
                }
            });
            let wait = std::time::Duration::from_secs(20);
            assert_eq!(replies.recv_timeout(wait).expect("ready"), "ready");
            traced.close_window().expect("the start's window");
            traced.arm_hold(begins_passed);
            writeln!(stdin, "go").expect("a line");
            let case = format!("{begins_passed} begins passed");
            let started = std::time::Instant::now();
            while !traced.held() && started.elapsed() < std::time::Duration::from_secs(2) {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            match held_content {
                Some(content) => {
                    assert!(traced.held(), "{case}: never held");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    assert_eq!(std::fs::read_to_string(store.join("l")).expect("the lock file"), content, "{case}");
                    assert!(replies.try_recv().is_err(), "{case}: it replied while held");
                    traced.thaw();
                }
                None => assert!(!traced.held(), "{case}: held"),
            }
            assert_eq!(replies.recv_timeout(wait).expect("a reply"), "done", "{case}");
            assert_eq!(std::fs::read_to_string(store.join("l")).expect("the lock file"), "123", "{case}");
            traced.disarm_hold();
            traced.kill();
        }
    }

    /// A path is in a directory scope when it lies under the root after `.` and `..` are
    /// removed; a prefix scope takes the root's entries of that name and the root itself.
    #[test]
    fn a_scope_takes_the_paths_under_its_root_and_no_others() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path().canonicalize().expect("canonical");
        let whole = Scope::directory(&root).expect("a scope");
        let store = Scope::files(&root, "store.db").expect("a scope");
        let table = [
            ("store.db", true, true),
            ("store.db-journal", true, true),
            ("log/partition-0.log", true, false),
            ("sub/../store.db-wal", true, true),
            ("", true, true),
            ("../elsewhere", false, false),
        ];
        for (relative, in_whole, in_store) in table {
            let path = root.join(relative);
            assert_eq!(whole.relative(&path).is_some(), in_whole, "{relative} in the directory scope");
            assert_eq!(store.relative(&path).is_some(), in_store, "{relative} in the store.db scope");
        }
        assert!(whole.relative(Path::new("/")).is_none());
    }
}
