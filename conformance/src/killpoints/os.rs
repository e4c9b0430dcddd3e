//! The tracer itself: the seccomp filter of the calls that change files, ptrace's stops and
//! the resolution of the file each call touches (`/proc/PID/fd`, `/proc/PID/cwd`, the
//! process's memory for a path argument, `/proc/PID/maps` for `msync`).

use super::{Scope, Shared, TraceError};
use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{self, Signal};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, IoSliceMut};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// Where a call's file is named.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// A file descriptor in argument `.0`.
    Fd(usize),
    /// A path in argument `path`, relative to the directory descriptor in `dirfd` (or the
    /// working directory).
    Path { dirfd: Option<usize>, path: usize },
    /// An address of a file mapping in argument `.0` (`msync`).
    Mapping(usize),
}

/// A state-changing call: its number, name, the files it names, and (the opening calls) the
/// argument whose `O_CREAT` or `O_TRUNC` bit makes it one.
struct Call {
    nr: libc::c_long,
    name: &'static str,
    targets: &'static [Target],
    flags: Option<u8>,
}

const fn call(nr: libc::c_long, name: &'static str, targets: &'static [Target]) -> Call {
    Call { nr, name, targets, flags: None }
}

const FD0: &[Target] = &[Target::Fd(0)];
const PATH0: &[Target] = &[Target::Path { dirfd: None, path: 0 }];
const AT_PATH1: &[Target] = &[Target::Path { dirfd: Some(0), path: 1 }];

/// Every call that changes a file or a directory entry (a SIGKILL after it keeps the change),
/// the kill points' candidates; the others (reads, `openat` without `O_CREAT`/`O_TRUNC`) run
/// unstopped.
const CALLS: &[Call] = &[
    call(libc::SYS_write, "write", FD0),
    call(libc::SYS_pwrite64, "pwrite64", FD0),
    call(libc::SYS_writev, "writev", FD0),
    call(libc::SYS_pwritev, "pwritev", FD0),
    call(libc::SYS_pwritev2, "pwritev2", FD0),
    call(libc::SYS_ftruncate, "ftruncate", FD0),
    call(libc::SYS_fallocate, "fallocate", FD0),
    call(libc::SYS_fsync, "fsync", FD0),
    call(libc::SYS_fdatasync, "fdatasync", FD0),
    call(libc::SYS_sync_file_range, "sync_file_range", FD0),
    call(libc::SYS_copy_file_range, "copy_file_range", &[Target::Fd(2)]),
    call(libc::SYS_sendfile, "sendfile", FD0),
    call(libc::SYS_splice, "splice", &[Target::Fd(2)]),
    call(libc::SYS_msync, "msync", &[Target::Mapping(0)]),
    call(libc::SYS_syncfs, "syncfs", FD0),
    call(libc::SYS_sync, "sync", &[]),
    call(libc::SYS_truncate, "truncate", PATH0),
    call(libc::SYS_unlinkat, "unlinkat", AT_PATH1),
    call(libc::SYS_renameat, "renameat", RENAMEAT),
    call(libc::SYS_renameat2, "renameat2", RENAMEAT),
    call(libc::SYS_mkdirat, "mkdirat", AT_PATH1),
    call(libc::SYS_linkat, "linkat", &[Target::Path { dirfd: Some(2), path: 3 }]),
    call(libc::SYS_symlinkat, "symlinkat", &[Target::Path { dirfd: Some(1), path: 2 }]),
    Call { nr: libc::SYS_openat, name: "openat", targets: AT_PATH1, flags: Some(2) },
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_unlink, "unlink", PATH0),
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_rename, "rename", &[Target::Path { dirfd: None, path: 0 }, Target::Path { dirfd: None, path: 1 }]),
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_mkdir, "mkdir", PATH0),
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_rmdir, "rmdir", PATH0),
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_link, "link", &[Target::Path { dirfd: None, path: 1 }]),
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_symlink, "symlink", &[Target::Path { dirfd: None, path: 1 }]),
    #[cfg(target_arch = "x86_64")]
    call(libc::SYS_creat, "creat", PATH0),
    #[cfg(target_arch = "x86_64")]
    Call { nr: libc::SYS_open, name: "open", targets: PATH0, flags: Some(1) },
];

/// What a call makes durable (`Durability`), when it succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Durable {
    Nothing,
    /// The content of the file it names, or the entries of the directory it names.
    Named,
    /// Everything (`sync`, `syncfs`).
    Everything,
    /// A write: its file's content when the descriptor was opened `O_SYNC` or `O_DSYNC`.
    IfSyncOpen,
}

/// What `call` with `args` makes durable: an `fsync` or `fdatasync` its file (or directory),
/// an `msync` with `MS_SYNC` its mapped file, `sync` and `syncfs` everything, a write its
/// file when its descriptor is synchronous (or `pwritev2` with `RWF_DSYNC` or `RWF_SYNC`).
/// `sync_file_range` makes nothing durable: it neither flushes the disk's cache nor the
/// file's metadata.
fn durable_by(call: &Call, args: &[u64; 6]) -> Durable {
    match call.name {
        "fsync" | "fdatasync" => Durable::Named,
        "msync" if args[2] & libc::MS_SYNC as u64 != 0 => Durable::Named,
        "sync" | "syncfs" => Durable::Everything,
        "pwritev2" if args[5] & (libc::RWF_DSYNC | libc::RWF_SYNC) as u64 != 0 => Durable::Named,
        "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => Durable::IfSyncOpen,
        _ => Durable::Nothing,
    }
}

/// Whether descriptor `fd` of `pid` was opened `O_SYNC` or `O_DSYNC` (its `fdinfo` flags).
fn sync_open(pid: Pid, fd: i32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else { return false };
    let flags = text.lines().find_map(|line| line.strip_prefix("flags:")).map(str::trim);
    flags
        .and_then(|octal| i64::from_str_radix(octal, 8).ok())
        .is_some_and(|flags| flags & i64::from(libc::O_DSYNC) != 0)
}

/// The `fcntl` commands that set or clear a record lock.
const LOCK_COMMANDS: [libc::c_int; 4] = [libc::F_SETLK, libc::F_SETLKW, libc::F_OFD_SETLK, libc::F_OFD_SETLKW];

/// A record lock call on a store file, followed to its exit: the file, what it does, and
/// whether it began a transaction (no lock held beyond the baseline when it was asked).
struct LockCall {
    file: PathBuf,
    kind: LockKind,
    range: (i64, i64),
}

/// The calls that put a file in place, or change one, by path: their last target is where.
const PLACING_CALLS: [&str; 8] =
    ["rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat", "truncate"];

const RENAMEAT: &[Target] = &[Target::Path { dirfd: Some(0), path: 1 }, Target::Path { dirfd: Some(2), path: 3 }];

/// The flags that make an open a change: it may create the file or empty it.
const CHANGING_OPEN_FLAGS: libc::c_int = libc::O_CREAT | libc::O_TRUNC;

/// The flags that stop an open for the tracer: a change, or an open for writing (which, while
/// a window is open, must name a file under the store: `Window::outside`).
const STOPPING_OPEN_FLAGS: [libc::c_int; 4] = [libc::O_CREAT, libc::O_TRUNC, libc::O_WRONLY, libc::O_RDWR];

#[cfg(target_arch = "x86_64")]
const ARCH: seccompiler::TargetArch = seccompiler::TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: seccompiler::TargetArch = seccompiler::TargetArch::aarch64;

/// The filter: every call of `CALLS` stops the process for its tracer; everything else runs.
fn filter() -> Result<BpfProgram, TraceError> {
    let refuse = |error: seccompiler::BackendError| TraceError::NotPermitted(format!("seccomp filter: {error}"));
    let mut rules = BTreeMap::new();
    for call in CALLS {
        let conditions = match call.flags {
            None => Vec::new(),
            Some(argument) => {
                let mut alternatives = Vec::new();
                for flag in STOPPING_OPEN_FLAGS {
                    let bit = u64::from(flag.unsigned_abs());
                    let condition =
                        SeccompCondition::new(argument, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(bit), bit)
                            .map_err(refuse)?;
                    alternatives.push(SeccompRule::new(vec![condition]).map_err(refuse)?);
                }
                alternatives
            }
        };
        rules.insert(call.nr, conditions);
    }
    // A shared writable mapping: its stores to memory change the file with no call to stop at.
    let bit = |argument: u8, bit: libc::c_int| {
        let bit = u64::from(bit.unsigned_abs());
        SeccompCondition::new(argument, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(bit), bit).map_err(refuse)
    };
    let shared_writable = vec![bit(2, libc::PROT_WRITE)?, bit(3, libc::MAP_SHARED)?];
    rules.insert(libc::SYS_mmap, vec![SeccompRule::new(shared_writable).map_err(refuse)?]);
    // Record locks set and cleared (a transaction's begin and end, `Traced::arm_hold`).
    let mut locks = Vec::new();
    for command in LOCK_COMMANDS {
        let value = u64::from(command.unsigned_abs());
        let condition = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value).map_err(refuse)?;
        locks.push(SeccompRule::new(vec![condition]).map_err(refuse)?);
    }
    rules.insert(libc::SYS_fcntl, locks);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Trace(0), ARCH).map_err(refuse)?;
    BpfProgram::try_from(filter).map_err(refuse)
}

pub fn supported() -> Result<(), TraceError> {
    filter().map(|_| ())
}

pub fn kill(pid: i32) {
    let _ = signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
}

type Ready = Sender<Result<(i32, Option<ChildStdin>, Option<ChildStdout>), TraceError>>;

/// Sends `signal` (a number) to one process; an unknown number or a gone process is ignored.
pub fn signal(pid: i32, signal: i32) {
    if let Ok(signal) = Signal::try_from(signal) {
        let _ = signal::kill(Pid::from_raw(pid), signal);
    }
}

/// The tracer thread: starts `command` traced, reports it started (or why not), then serves
/// its stops until every tracee is gone. `piped`: its stdin and stdout are pipes handed back
/// (and stderr inherited); otherwise its streams are the ones the caller set.
pub fn trace(mut command: Command, scope: Scope, shared: Arc<Shared>, ready: Ready, piped: bool) {
    let program = match filter() {
        Ok(program) => program,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    if piped {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    }
    // SAFETY: between fork and exec the closure only makes system calls (ptrace, prctl,
    // seccomp): it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            ptrace::traceme().map_err(io::Error::from)?;
            seccompiler::apply_filter(&program).map_err(|_| io::Error::last_os_error())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) if error.raw_os_error() == Some(libc::EPERM) => {
            let why = format!("ptrace or seccomp refused: {error}; is the harness in a container without ptrace?");
            let _ = ready.send(Err(TraceError::NotPermitted(why)));
            return;
        }
        Err(error) => {
            let _ = ready.send(Err(TraceError::Spawn(error)));
            return;
        }
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid fits i32"));
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    // The first stop is the exec's SIGTRAP; until the options are set the filter's stops
    // cannot reach the tracer, and nothing but the exec ran.
    match waitpid(pid, Some(WaitPidFlag::__WALL)) {
        Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
        Ok(other) => {
            kill(pid.as_raw());
            let _ = waitpid(pid, Some(WaitPidFlag::__WALL));
            let _ = ready.send(Err(TraceError::Ended(format!("{other:?}"))));
            return;
        }
        Err(error) => {
            let _ = ready.send(Err(TraceError::NotPermitted(format!("waitpid: {error}"))));
            return;
        }
    }
    let options = Options::PTRACE_O_TRACESYSGOOD
        | Options::PTRACE_O_TRACESECCOMP
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_EXITKILL;
    if let Err(error) = ptrace::setoptions(pid, options).and_then(|()| ptrace::cont(pid, None)) {
        kill(pid.as_raw());
        let _ = ready.send(Err(TraceError::NotPermitted(format!("ptrace options: {error}"))));
        return;
    }
    shared.lock().live.insert(pid.as_raw());
    if ready.send(Ok((pid.as_raw(), stdin, stdout))).is_err() {
        kill(pid.as_raw());
    }
    // The std handle is not waited on: this thread reaps every tracee.
    drop(child);
    let mut tracer = Tracer {
        root: pid,
        scope,
        shared,
        pending: BTreeMap::new(),
        opening: BTreeMap::new(),
        placing: BTreeMap::new(),
        started: BTreeSet::new(),
        held: Vec::new(),
        stopped: BTreeSet::new(),
        locks: BTreeMap::new(),
        baseline: None,
        locking: BTreeMap::new(),
    };
    tracer.serve();
}

/// A call followed to its exit: its name, the file it changes (relative to the store's
/// root), what it makes durable and where that is read (`/proc/PID/fd/N`, or a mapped file).
struct Pending {
    name: &'static str,
    file: PathBuf,
    durable: Durable,
    open: Option<PathBuf>,
}

struct Tracer {
    root: Pid,
    scope: Scope,
    shared: Arc<Shared>,
    /// Per stopped thread, the call it is in and the file it changes (recorded at its exit).
    pending: BTreeMap<Pid, Pending>,
    /// Threads in an open for writing (while a window is open), checked at its exit.
    opening: BTreeMap<Pid, &'static str>,
    /// Threads in a rename, link or truncation whose destination is outside the store (while a
    /// window is open), checked at its exit.
    placing: BTreeMap<Pid, (&'static str, PathBuf)>,
    /// Auto-attached tracees whose first stop (a SIGSTOP) was seen.
    started: BTreeSet<Pid>,
    /// While frozen: every stop not yet resumed, to be handled as usual at the thaw.
    held: Vec<WaitStatus>,
    /// Threads sent the freeze's SIGSTOP whose stop for it has not been seen: it is dropped.
    stopped: BTreeSet<Pid>,
    /// The record locks the process holds on store files: per file, the byte ranges (start,
    /// end; `i64::MAX` for "to the end").
    locks: BTreeMap<PathBuf, BTreeSet<(i64, i64)>>,
    /// The locks held when the hold was armed (a database kept open holds some throughout).
    baseline: Option<BTreeMap<PathBuf, BTreeSet<(i64, i64)>>>,
    /// Per thread, the lock call it is in (at its exit the held ranges change).
    locking: BTreeMap<Pid, LockCall>,
}

/// How often a frozen tracer looks for a thaw.
const FROZEN_POLL: std::time::Duration = std::time::Duration::from_millis(2);

impl Tracer {
    fn serve(&mut self) {
        loop {
            let frozen = self.shared.lock().frozen;
            let mut flags = WaitPidFlag::__WALL | WaitPidFlag::__WNOTHREAD;
            if frozen {
                // Nothing would wake a blocking wait for the thaw: every thread is held.
                flags |= WaitPidFlag::WNOHANG;
                if self.shared.lock().thaw {
                    self.thaw();
                    continue;
                }
            }
            let status = match waitpid(None, Some(flags)) {
                Ok(WaitStatus::StillAlive) => {
                    std::thread::sleep(FROZEN_POLL);
                    continue;
                }
                Ok(status) => status,
                Err(Errno::EINTR) => continue,
                Err(Errno::ECHILD) => return,
                Err(error) => {
                    self.shared.lock().failure.get_or_insert_with(|| format!("waitpid: {error}"));
                    return;
                }
            };
            if let Err(error) = self.handle(status) {
                // A tracee that died under a request (ESRCH) is reaped by the next wait.
                if error != Errno::ESRCH {
                    self.shared.lock().failure.get_or_insert_with(|| format!("ptrace: {error}"));
                }
            }
        }
    }

    /// Resumes every held thread as its stop asks, dropping the freeze's SIGSTOPs.
    fn thaw(&mut self) {
        {
            let mut state = self.shared.lock();
            state.frozen = false;
            state.thaw = false;
        }
        for status in std::mem::take(&mut self.held) {
            if let Err(error) = self.handle(status) {
                if error != Errno::ESRCH {
                    self.shared.lock().failure.get_or_insert_with(|| format!("ptrace: {error}"));
                }
            }
        }
    }

    fn handle(&mut self, status: WaitStatus) -> nix::Result<()> {
        let exit = matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..));
        if !exit && self.shared.lock().frozen {
            self.held.push(status);
            return Ok(());
        }
        match status {
            WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _) => {
                self.pending.remove(&pid);
                self.opening.remove(&pid);
                self.placing.remove(&pid);
                let mut state = self.shared.lock();
                state.live.remove(&pid.as_raw());
                if pid == self.root {
                    state.ended = Some(describe(status));
                    self.shared.ended.notify_all();
                }
                Ok(())
            }
            WaitStatus::PtraceEvent(pid, _, event) if event == libc::PTRACE_EVENT_SECCOMP => self.on_entry(pid),
            WaitStatus::PtraceEvent(pid, _, event) => {
                let forked = [libc::PTRACE_EVENT_FORK, libc::PTRACE_EVENT_VFORK, libc::PTRACE_EVENT_CLONE];
                if forked.contains(&event) {
                    let child = i32::try_from(ptrace::getevent(pid)?).unwrap_or(0);
                    self.shared.lock().live.insert(child);
                }
                ptrace::cont(pid, None)
            }
            WaitStatus::PtraceSyscall(pid) => self.on_exit(pid),
            WaitStatus::Stopped(pid, Signal::SIGSTOP) if self.stopped.remove(&pid) => ptrace::cont(pid, None),
            WaitStatus::Stopped(pid, signal) => {
                // A new tracee's first stop, or a group stop (no signal information): resume
                // it without a signal; any other signal is delivered.
                let first = pid != self.root && signal == Signal::SIGSTOP && self.started.insert(pid);
                if first {
                    self.shared.lock().live.insert(pid.as_raw());
                }
                let deliver = !first && ptrace::getsiginfo(pid).is_ok();
                ptrace::cont(pid, deliver.then_some(signal))
            }
            WaitStatus::Continued(_) | WaitStatus::StillAlive => Ok(()),
        }
    }

    /// The seccomp stop, at a changing call's entry: while a window is open and the call
    /// touches the store, stop again at its exit; else let it run.
    fn on_entry(&mut self, pid: Pid) -> nix::Result<()> {
        // The call's number and arguments, read once per stop.
        let info = syscall_info(pid)?;
        if info.op != libc::PTRACE_SYSCALL_INFO_SECCOMP {
            return self.resume(pid);
        }
        // SAFETY: `op` says the union holds the seccomp stop's fields.
        let (nr, args) = unsafe { (info.u.seccomp.nr, info.u.seccomp.args) };
        self.note_mapping(pid, nr, &args);
        if nr == libc::SYS_fcntl as u64 {
            return self.on_lock(pid, &args);
        }
        let open = {
            let state = self.shared.lock();
            state.window.is_some() || state.free
        };
        let Some(call) = CALLS.iter().find(|call| u64::try_from(call.nr).is_ok_and(|known| known == nr)) else {
            return self.resume(pid);
        };
        // A sync changes what a power cut leaves whenever it falls, in a window or not.
        let durable = match self.scope.durability() {
            Some(_) => durable_by(call, &args),
            None => Durable::Nothing,
        };
        let syncing = matches!(durable, Durable::Named | Durable::Everything);
        if !open && !syncing {
            return self.resume(pid);
        }
        // An open for writing without O_CREAT or O_TRUNC changes nothing by itself: not a kill
        // point, but (in a window) where it leads is checked at its exit.
        let (changing, writing) = match call.flags {
            Some(argument) => {
                let flags = args[usize::from(argument)] as libc::c_int;
                let changing = flags & CHANGING_OPEN_FLAGS != 0;
                (changing, changing || flags & libc::O_ACCMODE != libc::O_RDONLY)
            }
            None => (true, call.name == "creat"),
        };
        let windowed = self.shared.lock().window.is_some();
        if writing && windowed {
            self.opening.insert(pid, call.name);
        }
        // A file put in place by a rename or a link, or cut by path, outside the store: state
        // kept where no copy of the store directory holds it (a temporary name renamed out).
        if windowed && PLACING_CALLS.contains(&call.name) {
            let destination = call.targets.last().and_then(|&target| resolve(pid, target, &args));
            if let Some(path) = destination.filter(|path| self.scope.relative(path).is_none()) {
                self.placing.insert(pid, (call.name, path));
            }
        }
        let file = changing
            .then(|| call.targets.iter().find_map(|&t| resolve(pid, t, &args).and_then(|p| self.scope.relative(&p))))
            .flatten();
        // `sync` names no file; `syncfs` names any on the file system: both reach the store.
        let file = match durable {
            Durable::Everything => Some(PathBuf::new()),
            Durable::Nothing | Durable::Named | Durable::IfSyncOpen => file,
        };
        if let Some(file) = file {
            let open = match call.targets.first() {
                Some(Target::Fd(index)) => Some(PathBuf::from(format!("/proc/{pid}/fd/{}", args[*index] as i32))),
                Some(Target::Mapping(index)) => mapping_path(pid, args[*index]),
                Some(Target::Path { .. }) | None => None,
            };
            self.pending.insert(pid, Pending { name: call.name, file, durable, open });
        }
        match self.pending.contains_key(&pid) || self.opening.contains_key(&pid) || self.placing.contains_key(&pid) {
            true => ptrace::syscall(pid, None),
            false => self.resume(pid),
        }
    }

    /// At a record lock's entry on a store file: an armed hold lands here when the call takes
    /// a lock while the process holds none beyond its baseline (a transaction begins) and no
    /// begin is left to pass; the call is followed to its exit, where the held ranges change.
    fn on_lock(&mut self, pid: Pid, args: &[u64; 6]) -> nix::Result<()> {
        let file = i32::try_from(args[0]).ok().and_then(|fd| fd_path(pid, fd)).and_then(|p| self.scope.relative(&p));
        let Some((file, (kind, range))) = file.zip(lock_request(pid, args)) else { return self.resume(pid) };
        let hold = self.shared.lock().hold;
        if let Some(left) = hold {
            if self.baseline.is_none() {
                self.baseline = Some(self.locks.clone());
            }
            let begins = kind == LockKind::Take && Some(&self.locks) == self.baseline.as_ref();
            if begins && left == 0 {
                return self.hold_here(pid);
            }
            if begins {
                self.shared.lock().hold = Some(left - 1);
            }
        } else {
            self.baseline = None;
        }
        self.locking.insert(pid, LockCall { file, kind, range });
        ptrace::syscall(pid, None)
    }

    /// Holds every thread: this one at its call's entry (handled again at the thaw), the
    /// others by a SIGSTOP the tracer keeps (`strike_now`'s freeze, the same way).
    fn hold_here(&mut self, pid: Pid) -> nix::Result<()> {
        let mut state = self.shared.lock();
        state.hold = None;
        state.held = true;
        state.frozen = true;
        let others: Vec<i32> = state.live.iter().copied().filter(|&other| other != pid.as_raw()).collect();
        drop(state);
        self.baseline = None;
        self.held.push(WaitStatus::PtraceEvent(pid, Signal::SIGTRAP, libc::PTRACE_EVENT_SECCOMP));
        for other in others {
            // SAFETY: tkill only sends a signal; a thread gone meanwhile makes it fail.
            if unsafe { libc::syscall(libc::SYS_tkill, other, libc::SIGSTOP) } == 0 {
                self.stopped.insert(Pid::from_raw(other));
            }
        }
        Ok(())
    }

    /// At a record lock's exit: the ranges it took or released, once it succeeded.
    fn lock_done(&mut self, pid: Pid, info: &libc::ptrace_syscall_info) {
        let Some(LockCall { file, kind, range }) = self.locking.remove(&pid) else { return };
        // SAFETY: an exit stop holds the exit's fields.
        if info.op != libc::PTRACE_SYSCALL_INFO_EXIT || unsafe { info.u.exit.is_error } != 0 {
            return;
        }
        let held = self.locks.entry(file.clone()).or_default();
        match kind {
            LockKind::Take => {
                held.insert(range);
            }
            LockKind::Release => held.retain(|&(start, end)| start < range.0 || end > range.1),
        }
        // A file with no lock left is no entry: the comparison with the baseline is by ranges.
        if held.is_empty() {
            self.locks.remove(&file);
        }
    }

    /// At a shared writable `mmap`'s entry: a store file it maps is remembered (SQLite's WAL
    /// index, `-shm`, is left out: SQLite rebuilds it from the WAL, which it writes by calls).
    fn note_mapping(&mut self, pid: Pid, nr: u64, args: &[u64; 6]) {
        if nr != libc::SYS_mmap as u64 {
            return;
        }
        let Some(file) = fd_path(pid, args[4] as i32).and_then(|path| self.scope.relative(&path)) else { return };
        if !file.to_string_lossy().ends_with("-shm") {
            self.shared.lock().mapped.insert(file);
        }
    }

    /// At a rename's, link's or truncation's exit (in a window): its destination outside the
    /// store, once it succeeded, by its directory's real path (a symlinked directory followed).
    fn check_placed(&mut self, pid: Pid, info: &libc::ptrace_syscall_info) {
        let Some((name, path)) = self.placing.remove(&pid) else { return };
        // SAFETY: an exit stop holds the exit's fields.
        if info.op != libc::PTRACE_SYSCALL_INFO_EXIT || unsafe { info.u.exit.is_error } != 0 {
            return;
        }
        let real = match (path.parent().and_then(|dir| dir.canonicalize().ok()), path.file_name()) {
            (Some(dir), Some(name)) => dir.join(name),
            _ => path,
        };
        if self.scope.relative(&real).is_none() {
            if let Some(window) = self.shared.lock().window.as_mut() {
                window.record_outside(name, real);
            }
        }
    }

    /// At an open's exit (in a window): the file it opened for writing, by its descriptor's
    /// real path (a symlink followed), when that is outside the store.
    fn check_opened(&mut self, pid: Pid, info: &libc::ptrace_syscall_info) {
        let Some(name) = self.opening.remove(&pid) else { return };
        if info.op != libc::PTRACE_SYSCALL_INFO_EXIT {
            return;
        }
        // SAFETY: an exit stop holds the exit's fields.
        let (failed, value) = unsafe { (info.u.exit.is_error != 0, info.u.exit.sval) };
        let Some(path) = (!failed).then(|| i32::try_from(value).ok().and_then(|fd| fd_path(pid, fd))).flatten() else {
            return;
        };
        if self.scope.relative(&path).is_none() {
            if let Some(window) = self.shared.lock().window.as_mut() {
                window.record_outside(name, path);
            }
        }
    }

    /// Lets a thread run to its next seccomp stop, or, while a freeze due at it steps it call
    /// by call (`strike_now`), to its next system call.
    fn resume(&self, pid: Pid) -> nix::Result<()> {
        let stepping = self.shared.lock().striking.as_ref().is_some_and(|(thread, _)| *thread == pid.as_raw());
        match stepping {
            true => ptrace::syscall(pid, None),
            false => ptrace::cont(pid, None),
        }
    }

    /// The exit of a call that touches the store: a kill point when it succeeded.
    fn on_exit(&mut self, pid: Pid) -> nix::Result<()> {
        if self.strike_now(pid) {
            // Every tracee is dead or dying: this one is left stopped for SIGKILL.
            return Ok(());
        }
        let info = syscall_info(pid)?;
        if info.op == libc::PTRACE_SYSCALL_INFO_ENTRY {
            // Kernels before 4.8 report the entry after the seccomp stop: on to the exit.
            return ptrace::syscall(pid, None);
        }
        self.check_opened(pid, &info);
        self.check_placed(pid, &info);
        self.lock_done(pid, &info);
        if let Some(Pending { name, file, durable, open }) = self.pending.remove(&pid) {
            // SAFETY: an exit stop holds the exit's fields.
            let failed = info.op == libc::PTRACE_SYSCALL_INFO_EXIT && unsafe { info.u.exit.is_error } != 0;
            if !failed {
                let synced = self.follow_sync(pid, durable, &file, open.as_deref());
                let mut state = self.shared.lock();
                if let Some(error) = synced {
                    state.failure.get_or_insert(error);
                }
                let counted = matches!(durable, Durable::Named | Durable::Everything);
                if let Some(window) = state.window.as_mut().filter(|_| counted) {
                    window.window.syncs += 1;
                }
                if state.free {
                    state.store_calls += 1;
                    if super::SYNC_CALLS.contains(&name) {
                        state.sync_calls += 1;
                    }
                    if let Some(watched) = state.watched.as_mut().filter(|w| w.len() < super::WATCHED_MAX) {
                        watched.push(std::time::Instant::now());
                    }
                    if count_down(&mut state, pid, name, &file) {
                        // Stop again at this thread's next call, where the kill strikes.
                        return ptrace::syscall(pid, None);
                    }
                }
                if let Some(window) = state.window.as_mut() {
                    window.record(name, file);
                }
            }
        }
        self.resume(pid)
    }

    /// A kill that counted down at this thread's last call strikes at its next one: every
    /// tracee is SIGKILLed while this thread is held at that call's entry. Between the two
    /// calls the thread ran only in user space, so what it did in memory (SQLite's WAL index
    /// in a shared mapping, which makes a commit visible to the other connections) is done and
    /// nothing more: the latest moment a crash "right after" the call can fall.
    fn strike_now(&mut self, pid: Pid) -> bool {
        let mut state = self.shared.lock();
        let due = state.striking.as_ref().is_some_and(|(thread, _)| *thread == pid.as_raw());
        if !due {
            return false;
        }
        if let Some(due) = state.freeze_due {
            // A freeze waits until the thread holds no lock of the store and has its work in
            // hand: as a transaction begins (a lock on a store file taken after a release),
            // past the transactions it is to pass; in a store it never locks, at its first
            // call outside the store.
            // Frozen inside a transaction it would hold the database's lock, and every other
            // instance would wait on it instead of taking its partitions over: not a zombie, a
            // stall. Frozen at a call outside the store, right after its commit, it would wake
            // with nothing in hand and learn its partitions moved before it wrote again.
            drop(state);
            let Ok(info) = syscall_info(pid) else { return false };
            if info.op != libc::PTRACE_SYSCALL_INFO_ENTRY {
                return false;
            }
            let in_store = self.touches_store(pid, &info);
            let lock = in_store.then(|| lock_kind(pid, &info)).flatten();
            let mut due = due;
            due.store_locks |= lock.is_some();
            let lands = match lock {
                // A lock taken with none held since the last release: a transaction begins.
                Some(LockKind::Take) if due.released => {
                    due.released = false;
                    match due.transactions_left {
                        0 => true,
                        _ => {
                            due.transactions_left -= 1;
                            false
                        }
                    }
                }
                Some(LockKind::Take) => false,
                Some(LockKind::Release) => {
                    due.released = true;
                    false
                }
                None => !in_store && !due.store_locks && due.transactions_left == 0,
            };
            state = self.shared.lock();
            if !lands {
                state.freeze_due = Some(due);
                return false;
            }
        }
        let (_, strike) = state.striking.take().expect("checked");
        if state.freeze_due.is_some() {
            // Frozen, not killed: this thread stays held at its call's entry; every other one
            // is stopped by a SIGSTOP of its own, which the tracer holds and later drops.
            state.freeze_due = None;
            state.frozen = true;
            state.struck = Some(strike);
            let others: Vec<i32> = state.live.iter().copied().filter(|&other| other != pid.as_raw()).collect();
            drop(state);
            self.held.push(WaitStatus::PtraceSyscall(pid));
            for other in others {
                // SAFETY: tkill only sends a signal; a thread gone meanwhile makes it fail.
                if unsafe { libc::syscall(libc::SYS_tkill, other, libc::SIGSTOP) } == 0 {
                    self.stopped.insert(Pid::from_raw(other));
                }
            }
            return true;
        }
        for &pid in &state.live {
            kill(pid);
        }
        state.struck = Some(strike);
        true
    }
}

impl Tracer {
    /// Makes what a successful call synced durable (`Durability`); an error as text.
    fn follow_sync(
        &self,
        pid: Pid,
        durable: Durable,
        file: &std::path::Path,
        open: Option<&std::path::Path>,
    ) -> Option<String> {
        let durability = self.scope.durability()?;
        let path = self.scope.root.join(file);
        let synced = match (durable, open) {
            (Durable::Nothing, _) => return None,
            (Durable::Everything, _) => durability.synced_all(),
            (Durable::IfSyncOpen, Some(open)) => {
                let fd = open.file_name().and_then(|name| name.to_str()).and_then(|n| n.parse().ok());
                match fd.is_some_and(|fd| sync_open(pid, fd)) {
                    true => durability.synced(&path, open),
                    false => return None,
                }
            }
            (Durable::Named, Some(open)) => durability.synced(&path, open),
            (Durable::IfSyncOpen | Durable::Named, None) => return None,
        };
        synced.err().map(|error| format!("following a sync of {}: {error}", path.display()))
    }

    /// Whether a call, at its entry, works on a store file through its first argument (a
    /// descriptor): a lock, a write, a sync, a close of the database.
    fn touches_store(&self, pid: Pid, info: &libc::ptrace_syscall_info) -> bool {
        // SAFETY: an entry stop holds the entry's fields.
        let first = unsafe { info.u.entry.args[0] };
        let Ok(fd) = i32::try_from(first) else { return false };
        fd_path(pid, fd).is_some_and(|path| self.scope.relative(&path).is_some())
    }
}

/// What a record lock call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LockKind {
    /// A read or write lock taken (SQLite's locks, at a transaction's start).
    Take,
    /// A lock released.
    Release,
}

/// Whether a call, at its entry, sets a record lock (`fcntl` F_SETLK, F_SETLKW or their
/// open-file forms), and whether it takes or releases one.
fn lock_kind(pid: Pid, info: &libc::ptrace_syscall_info) -> Option<LockKind> {
    // SAFETY: an entry stop holds the entry's fields.
    let (nr, args) = unsafe { (info.u.entry.nr, info.u.entry.args) };
    if nr != libc::SYS_fcntl as u64 {
        return None;
    }
    lock_request(pid, &args).map(|(kind, _)| kind)
}

/// What a record lock call asks (`fcntl` with a lock command, at its entry): take or release,
/// and the byte range (start, end; a length of 0 runs to the end). Only `SEEK_SET` ranges are
/// read (SQLite's and `lockf`'s from the start); others are taken as the whole file.
fn lock_request(pid: Pid, args: &[u64; 6]) -> Option<(LockKind, (i64, i64))> {
    let command = args[1] as u32 as i32;
    if !LOCK_COMMANDS.contains(&command) {
        return None;
    }
    // `struct flock`: l_type, l_whence (shorts), then l_start and l_len (off_t, aligned).
    let mut bytes = [0u8; 24];
    let address = usize::try_from(args[2]).ok()?;
    let remote = [RemoteIoVec { base: address, len: bytes.len() }];
    let read = process_vm_readv(pid, &mut [IoSliceMut::new(&mut bytes)], &remote);
    if !read.is_ok_and(|n| n == bytes.len()) {
        return None;
    }
    let short = |at: usize| i16::from_ne_bytes([bytes[at], bytes[at + 1]]);
    let long = |at: usize| i64::from_ne_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    let kind = if short(0) == libc::F_UNLCK as i16 { LockKind::Release } else { LockKind::Take };
    let range = match (short(2) == libc::SEEK_SET as i16, long(8), long(16)) {
        (true, start, 0) => (start, i64::MAX),
        (true, start, length) if length > 0 => (start, start.saturating_add(length)),
        _ => (0, i64::MAX),
    };
    Some((kind, range))
}

/// Counts an armed kill down at a successful call under the store; at zero, the kill is due
/// at `pid`'s next call (`Tracer::strike_now`).
fn count_down(state: &mut super::State, pid: Pid, name: &'static str, file: &std::path::Path) -> bool {
    let Some(trigger) = state.trigger.as_mut() else { return false };
    if trigger.syncs_only && !super::SYNC_CALLS.contains(&name) {
        return false;
    }
    trigger.remaining -= 1;
    if trigger.remaining > 0 {
        return false;
    }
    let (after_calls, syncs_only, freeze) = (trigger.after_calls, trigger.syncs_only, trigger.freeze);
    state.trigger = None;
    state.freeze_due =
        freeze.map(|transactions_left| super::FreezeDue { transactions_left, store_locks: false, released: true });
    let strike = super::Strike { syscall: name, file: file.to_path_buf(), after_calls, syncs_only };
    state.striking = Some((pid.as_raw(), strike));
    true
}

/// `PTRACE_GET_SYSCALL_INFO`, with the buffer's size where the kernel reads it (nix 0.30's
/// `ptrace::syscall_info` passes 0, so the kernel fills nothing).
fn syscall_info(pid: Pid) -> nix::Result<libc::ptrace_syscall_info> {
    let mut info = std::mem::MaybeUninit::<libc::ptrace_syscall_info>::zeroed();
    let size = std::mem::size_of::<libc::ptrace_syscall_info>();
    // SAFETY: the kernel writes at most `size` bytes into `info`, which has that size; a
    // zeroed `ptrace_syscall_info` (integers and a union of integers) is a valid value.
    let written = unsafe { libc::ptrace(libc::PTRACE_GET_SYSCALL_INFO, pid.as_raw(), size, info.as_mut_ptr()) };
    if written < 0 {
        return Err(Errno::last());
    }
    // SAFETY: zeroed, then written by the kernel.
    Ok(unsafe { info.assume_init() })
}

fn describe(status: WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exit status: {code}"),
        WaitStatus::Signaled(_, signal, _) => format!("signal: {} ({signal})", signal as i32),
        other => format!("{other:?}"),
    }
}

/// The file a call's argument names, as an absolute path; `None` for a pipe, a socket, an
/// address outside any file mapping or memory that cannot be read.
fn resolve(pid: Pid, target: Target, args: &[u64; 6]) -> Option<PathBuf> {
    match target {
        Target::Fd(index) => fd_path(pid, i32::try_from(args[index]).ok()?),
        Target::Mapping(index) => mapping_path(pid, args[index]),
        Target::Path { dirfd, path } => {
            let name = PathBuf::from(read_string(pid, args[path])?);
            if name.is_absolute() {
                return Some(name);
            }
            // A 32-bit descriptor (AT_FDCWD is -100) passed in a 64-bit register.
            let dirfd = dirfd.map(|index| args[index] as u32 as i32).filter(|&fd| fd != libc::AT_FDCWD);
            let base = match dirfd {
                Some(fd) => fd_path(pid, fd)?,
                None => std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?,
            };
            Some(base.join(name))
        }
    }
}

fn fd_path(pid: Pid, fd: i32) -> Option<PathBuf> {
    let link = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    let text = link.to_string_lossy();
    let text = text.strip_suffix(" (deleted)").unwrap_or(&text);
    text.starts_with('/').then(|| PathBuf::from(text))
}

fn mapping_path(pid: Pid, address: u64) -> Option<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (low, high) = fields.next()?.split_once('-')?;
        let (low, high) = (u64::from_str_radix(low, 16).ok()?, u64::from_str_radix(high, 16).ok()?);
        let path = fields.nth(4)?;
        ((low..high).contains(&address) && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

/// A NUL-terminated string of the tracee's memory (at most `PATH_MAX` bytes), read a page at a
/// time so that no read crosses into an unmapped page.
fn read_string(pid: Pid, address: u64) -> Option<String> {
    const PAGE: u64 = 4096;
    const PATH_MAX: usize = 4096;
    let mut bytes = Vec::new();
    let mut at = address;
    while bytes.len() < PATH_MAX {
        let chunk = usize::try_from(PAGE - at % PAGE).ok()?;
        let mut buffer = vec![0u8; chunk];
        let remote = [RemoteIoVec { base: usize::try_from(at).ok()?, len: chunk }];
        let read = process_vm_readv(pid, &mut [IoSliceMut::new(&mut buffer)], &remote).ok()?;
        if let Some(end) = buffer[..read].iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&buffer[..end]);
            return String::from_utf8(bytes).ok();
        }
        bytes.extend_from_slice(&buffer[..read]);
        at += read as u64;
        if read == 0 {
            return None;
        }
    }
    None
}
