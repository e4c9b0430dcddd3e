//! A simulated disk, for tests and `consumer power-cuts` ([`Storage::Simulated`]): it keeps,
//! in memory, per file its durable content and the writes and truncations not synced yet, and
//! per directory its durable entries and the creations and renames not synced yet.
//!
//! What a process sees is the newest state, as through the page cache. A file's `sync` makes
//! its pending operations durable; a directory's entries become durable only when that
//! directory is synced. [`SimDisk::power_cut`] keeps a seeded random subset of the pending
//! operations and applies it in a random order, garbles some kept writes (random bytes inside
//! the written range, or a torn final sector that keeps only a prefix of its new bytes), drops
//! the rest, and invalidates every open handle and lock: the processes died with the power.
//!
//! Not modelled: a disk that lies about fsync (a synced byte never changes), damage outside a
//! written range, reordering across an fsync (what was synced stays), and the details of
//! metadata journaling (pending directory operations are independent, not a journal's ordered
//! prefix, which is harsher than ext4 or XFS). Files are never removed; inodes are kept for
//! the life of the disk, which is a test's.
//!
//! [`SimDisk::flip_durable`] damages a durable byte at rest, and [`SimDisk::tear_last_write`]
//! lands one pending write torn, deterministically ([`SimDisk::pending_writes`] lists them):
//! the power-cut runs' damage classes.
//!
//! [`SimDisk::fail_reads`] makes the next reads of one file fail with the given error kinds
//! (an `Interrupted` read, or an I/O error), so the log's handling of failed reads is tested.
//!
//! [`SimDisk::halt_at`] stops a writer at one operation: that operation fails (undone, or
//! done when the halt is after it) and the caller stops there, as if the power went then,
//! while the disk serves everyone else until the test calls `power_cut`.
//! [`SimDisk::halt_at_op`] stops it before the n-th operation a halt can name, whichever it
//! is, so a run can put the cut between every two disk operations of a step ([`SimDisk::ops`]
//! counts them).
//!
//! A leaf of `log`: `storage.rs` dispatches to it.
//!
//! [`Storage::Simulated`]: super::storage::Storage::Simulated

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// How a file is opened: each of the `OpenOptions` the log uses, named (here, in the leaf,
/// because both storages take it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpenMode {
    Read,
    Write,
    ReadWrite,
    /// `File::create`: written, created if missing, truncated if not.
    Truncate,
    /// Created if missing, every write at its end (`repairs.log`).
    Append,
    /// Written, created if missing, never truncated (the writer lock).
    Keep,
}

/// A torn write keeps a prefix of its last sector of this size.
const SECTOR_BYTES: usize = 512;
/// Each pending operation survives a power cut with probability 1 in this.
const KEEP_ONE_IN: u64 = 2;
/// A kept write is garbled with probability 1 in this, and torn with the same probability.
const DAMAGE_ONE_IN: u64 = 4;
/// At most this many bytes of a garbled write are replaced by random ones.
const GARBLED_BYTES_MAX: u64 = 3;

/// SplitMix64: a small, seeded, deterministic generator (no clock, no global state).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0) has no value to return");
        self.next_u64() % bound
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            let other = self.below(last as u64 + 1) as usize;
            items.swap(last, other);
        }
    }
}

/// A disk operation a halt can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimOp {
    /// A write to the file at the path.
    Write,
    /// A sync of the file at the path.
    Sync,
    /// A rename onto the path.
    Rename,
    /// A sync of the directory at the path.
    SyncDir,
}

/// Where a writer is stopped: the first `op` on `path` after `halt_at`, before it or (`after`)
/// once it is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Halt {
    pub op: SimOp,
    pub path: PathBuf,
    pub after: bool,
}

/// What a power cut did with the pending operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    pub kept: u64,
    pub dropped: u64,
    /// Kept writes with random bytes in their range.
    pub garbled: u64,
    /// Kept writes whose last sector holds only a prefix of its new bytes.
    pub torn: u64,
}

/// The simulated disk; clones share it.
#[derive(Clone)]
pub struct SimDisk {
    inner: Arc<Mutex<Disk>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimDisk({})", self.lock().root.display())
    }
}

struct Disk {
    /// The directory every path lives under; it always exists, durably.
    root: PathBuf,
    /// Counts power cuts: a handle or lock from an earlier boot is dead.
    boot: u64,
    /// Every file ever created, by inode number.
    files: Vec<FileState>,
    /// Every directory that exists (is reachable from the root), by path.
    dirs: BTreeMap<PathBuf, DirState>,
    locks: BTreeSet<PathBuf>,
    halt: Option<Armed>,
    halted: bool,
    /// The operation the last halt stopped.
    halted_op: Option<(SimOp, PathBuf)>,
    /// Operations a halt can name, done or halted, since the disk was made.
    ops: u64,
    /// Per path, the errors its next `read_at` calls return, one each, in order.
    read_faults: BTreeMap<PathBuf, VecDeque<io::ErrorKind>>,
}

/// The armed halt.
enum Armed {
    Named(Halt),
    /// Before the operation after `remaining` more.
    Nth {
        remaining: u64,
    },
}

#[derive(Default)]
struct FileState {
    durable: Vec<u8>,
    live: Vec<u8>,
    pending: Vec<FileOp>,
}

enum FileOp {
    Write { offset: usize, bytes: Vec<u8> },
    SetLen(usize),
}

#[derive(Default)]
struct DirState {
    durable: BTreeMap<OsString, Entry>,
    live: BTreeMap<OsString, Entry>,
    pending: Vec<DirOp>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(usize),
    Dir,
}

enum DirOp {
    Link(OsString, Entry),
    Rename(OsString, OsString),
}

/// An open file of the simulated disk.
pub struct SimFile {
    disk: SimDisk,
    inode: usize,
    path: PathBuf,
    boot: u64,
}

/// The held lock of a path; dropping it releases the lock (unless a power cut did).
pub struct SimLock {
    disk: SimDisk,
    path: PathBuf,
    boot: u64,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file or directory (simulated)", path.display()))
}

/// The parent directory and the name of `path`.
fn split(path: &Path) -> io::Result<(&Path, OsString)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name.to_os_string())),
        _ => Err(not_found(path)),
    }
}

impl SimDisk {
    /// An empty disk whose root directory `root` exists durably.
    pub fn new(root: &Path) -> SimDisk {
        let dirs = BTreeMap::from([(root.to_path_buf(), DirState::default())]);
        let disk = Disk {
            root: root.to_path_buf(),
            boot: 0,
            files: Vec::new(),
            dirs,
            locks: BTreeSet::new(),
            halt: None,
            halted: false,
            halted_op: None,
            ops: 0,
            read_faults: BTreeMap::new(),
        };
        SimDisk { inner: Arc::new(Mutex::new(disk)) }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.inner.lock().expect("the simulated disk's lock is never held across a panic")
    }

    /// Stops the writer at the first operation `halt` names (see the module documentation).
    pub fn halt_at(&self, halt: Halt) {
        let mut disk = self.lock();
        disk.halt = Some(Armed::Named(halt));
        disk.halted = false;
    }

    /// Stops the writer before the `n`-th operation a halt can name (a write, a file's sync, a
    /// rename, a directory's sync), counted from now: `0` is the next one, whichever it is.
    pub fn halt_at_op(&self, n: u64) {
        let mut disk = self.lock();
        disk.halt = Some(Armed::Nth { remaining: n });
        disk.halted = false;
    }

    /// The next reads (`read_at`, and the reads `read_exact_at` makes) of the file at `path`
    /// fail, one with each of `kinds` in order; reads after those succeed.
    pub fn fail_reads(&self, path: &Path, kinds: &[io::ErrorKind]) {
        self.lock().read_faults.entry(path.to_path_buf()).or_default().extend(kinds);
    }

    /// The operations a halt can name done so far (halted ones included).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The operation the last halt stopped, and its path.
    pub fn halted_op(&self) -> Option<(SimOp, PathBuf)> {
        self.lock().halted_op.clone()
    }

    /// Whether the armed halt stopped an operation.
    pub fn halted(&self) -> bool {
        self.lock().halted
    }

    /// The length of the file at `path`, as a process sees it now.
    pub fn len(&self, path: &Path) -> io::Result<u64> {
        let disk = self.lock();
        let inode = disk.file(path)?;
        Ok(disk.files[inode].live.len() as u64)
    }

    /// Test only, damage at rest: XORs `mask` into byte `byte` of the durable content of the
    /// file at `path` (a bit rot, a misdirected write). Processes see it after the next power
    /// cut, which rebuilds what they see from the durable content; until then the page cache
    /// keeps its copy. A byte past the durable content is `InvalidInput`.
    pub fn flip_durable(&self, path: &Path, byte: u64, mask: u8) -> io::Result<()> {
        let mut disk = self.lock();
        let inode = disk.file(path)?;
        let durable = &mut disk.files[inode].durable;
        let len = durable.len();
        let at = usize::try_from(byte).ok().filter(|&at| at < len).ok_or_else(|| {
            let what = format!("{}: byte {byte} is past the {len} durable bytes", path.display());
            io::Error::new(io::ErrorKind::InvalidInput, what)
        })?;
        durable[at] ^= mask;
        Ok(())
    }

    /// Test only: the byte ranges of the pending (not yet durable) writes of the file at
    /// `path`, oldest first.
    pub fn pending_writes(&self, path: &Path) -> io::Result<Vec<std::ops::Range<u64>>> {
        let disk = self.lock();
        let inode = disk.file(path)?;
        let ranges = disk.files[inode].pending.iter().filter_map(|op| match op {
            FileOp::Write { offset, bytes } => Some(*offset as u64..(offset + bytes.len()) as u64),
            FileOp::SetLen(_) => None,
        });
        Ok(ranges.collect())
    }

    /// Test only, a deterministic torn write: the last pending write of the file at `path`
    /// lands on the durable content with only its first `keep` bytes; the rest of its range
    /// keeps the durable bytes (zeros past their end), as a write the power tore. It is no
    /// longer pending (the file's other pending operations stay pending). Returns the write's
    /// byte range; `InvalidInput` when the file has no pending write.
    pub fn tear_last_write(&self, path: &Path, keep: u64) -> io::Result<std::ops::Range<u64>> {
        let mut disk = self.lock();
        let inode = disk.file(path)?;
        let file = &mut disk.files[inode];
        let last = file.pending.iter().rposition(|op| matches!(op, FileOp::Write { .. }));
        let Some(FileOp::Write { offset, mut bytes }) = last.map(|at| file.pending.remove(at)) else {
            let what = format!("{}: no pending write to tear", path.display());
            return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        };
        let keep = usize::try_from(keep).unwrap_or(usize::MAX).min(bytes.len());
        for (at, byte) in bytes.iter_mut().enumerate().skip(keep) {
            *byte = file.durable.get(offset + at).copied().unwrap_or(0);
        }
        let range = offset as u64..(offset + bytes.len()) as u64;
        FileOp::Write { offset, bytes }.apply_to(&mut file.durable);
        Ok(range)
    }

    /// The power goes: see the module documentation. Deterministic for `seed`.
    pub fn power_cut(&self, seed: u64) -> Cut {
        let mut disk = self.lock();
        let mut rng = SplitMix64::new(seed);
        let mut cut = Cut::default();
        for file in &mut disk.files {
            file.cut(&mut rng, &mut cut);
        }
        for dir in disk.dirs.values_mut() {
            dir.cut(&mut rng, &mut cut);
        }
        disk.drop_unreachable_dirs();
        disk.boot += 1;
        disk.locks.clear();
        disk.halt = None;
        disk.halted = false;
        cut
    }

    pub(super) fn open(&self, path: &Path, mode: OpenMode) -> io::Result<SimFile> {
        let mut disk = self.lock();
        let inode = disk.open(path, mode)?;
        Ok(SimFile { disk: self.clone(), inode, path: path.to_path_buf(), boot: disk.boot })
    }

    pub(super) fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let disk = self.lock();
        let inode = disk.file(path)?;
        Ok(disk.files[inode].live.clone())
    }

    pub(super) fn exists(&self, path: &Path) -> bool {
        let disk = self.lock();
        disk.dirs.contains_key(path) || disk.entry(path).is_ok()
    }

    pub(super) fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        let (parent, name) = split(path)?;
        let dir = disk.dirs.get_mut(parent).ok_or_else(|| not_found(parent))?;
        if dir.live.contains_key(&name) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists", path.display())));
        }
        dir.apply(DirOp::Link(name, Entry::Dir));
        disk.dirs.insert(path.to_path_buf(), DirState::default());
        Ok(())
    }

    /// Renames within one directory (the only renames the log makes), onto any existing entry.
    pub(super) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.halting(SimOp::Rename, to, |disk| {
            let ((parent, from_name), (to_parent, to_name)) = (split(from)?, split(to)?);
            if parent != to_parent {
                return Err(io::Error::other("the simulated disk renames within one directory only"));
            }
            let dir = disk.dirs.get_mut(parent).ok_or_else(|| not_found(parent))?;
            if !dir.live.contains_key(&from_name) {
                return Err(not_found(from));
            }
            dir.apply(DirOp::Rename(from_name, to_name));
            Ok(())
        })
    }

    pub(super) fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.lock();
        disk.halting(SimOp::SyncDir, path, |disk| {
            disk.dirs.get_mut(path).ok_or_else(|| not_found(path))?.sync();
            Ok(())
        })
    }

    pub(super) fn try_lock(&self, path: &Path) -> io::Result<Option<SimLock>> {
        let mut disk = self.lock();
        disk.open(path, OpenMode::Keep)?;
        if !disk.locks.insert(path.to_path_buf()) {
            return Ok(None);
        }
        Ok(Some(SimLock { disk: self.clone(), path: path.to_path_buf(), boot: disk.boot }))
    }
}

impl Disk {
    fn entry(&self, path: &Path) -> io::Result<Entry> {
        let (parent, name) = split(path)?;
        let dir = self.dirs.get(parent).ok_or_else(|| not_found(path))?;
        dir.live.get(&name).copied().ok_or_else(|| not_found(path))
    }

    /// The inode of the file at `path`.
    fn file(&self, path: &Path) -> io::Result<usize> {
        match self.entry(path)? {
            Entry::File(inode) => Ok(inode),
            Entry::Dir => Err(io::Error::other(format!("{} is a directory", path.display()))),
        }
    }

    fn open(&mut self, path: &Path, mode: OpenMode) -> io::Result<usize> {
        let creates = match mode {
            OpenMode::Read | OpenMode::Write | OpenMode::ReadWrite => false,
            OpenMode::Truncate | OpenMode::Append | OpenMode::Keep => true,
        };
        match self.file(path) {
            Ok(inode) => {
                if mode == OpenMode::Truncate {
                    self.files[inode].apply(FileOp::SetLen(0));
                }
                Ok(inode)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && creates => {
                let (parent, name) = split(path)?;
                let dir = self.dirs.get_mut(parent).ok_or_else(|| not_found(parent))?;
                let inode = self.files.len();
                dir.apply(DirOp::Link(name, Entry::File(inode)));
                self.files.push(FileState::default());
                Ok(inode)
            }
            Err(e) => Err(e),
        }
    }

    /// Runs `op` on `path` unless the armed halt names it: then it fails, undone (a halt
    /// before it) or done (after it), and the halt is spent.
    fn halting<T>(&mut self, op: SimOp, path: &Path, run: impl FnOnce(&mut Disk) -> io::Result<T>) -> io::Result<T> {
        self.ops += 1;
        let after = match &mut self.halt {
            Some(Armed::Named(halt)) if halt.op == op && halt.path == path => Some(halt.after),
            Some(Armed::Nth { remaining: 0 }) => Some(false),
            Some(Armed::Nth { remaining }) => {
                *remaining -= 1;
                None
            }
            Some(Armed::Named(_)) | None => None,
        };
        let Some(after) = after else { return run(self) };
        self.halt = None;
        self.halted = true;
        self.halted_op = Some((op, path.to_path_buf()));
        if after {
            run(self)?;
        }
        let when = if after { "after" } else { "before" };
        Err(io::Error::other(format!("simulated power cut {when} {op:?} of {}", path.display())))
    }

    /// Forgets the directories whose entry in their parent a power cut dropped, and their
    /// descendants (parents sort before their children).
    fn drop_unreachable_dirs(&mut self) {
        let mut reachable = BTreeSet::new();
        for path in self.dirs.keys() {
            let linked = match (path.parent(), path.file_name()) {
                _ if *path == self.root => true,
                (Some(parent), Some(name)) => {
                    reachable.contains(parent) && self.dirs[parent].live.get(name) == Some(&Entry::Dir)
                }
                _ => false,
            };
            if linked {
                reachable.insert(path.clone());
            }
        }
        self.dirs.retain(|path, _| reachable.contains(path));
    }
}

impl FileOp {
    fn apply_to(&self, content: &mut Vec<u8>) {
        match self {
            FileOp::Write { offset, bytes } => {
                let end = offset + bytes.len();
                if content.len() < end {
                    content.resize(end, 0);
                }
                content[*offset..end].copy_from_slice(bytes);
            }
            FileOp::SetLen(len) => content.resize(*len, 0),
        }
    }
}

impl FileState {
    fn apply(&mut self, op: FileOp) {
        op.apply_to(&mut self.live);
        self.pending.push(op);
    }

    fn sync(&mut self) {
        self.durable.clone_from(&self.live);
        self.pending.clear();
    }

    /// The power cut of one file: a random subset of its pending operations, in a random
    /// order, some writes damaged, lands on the durable content.
    fn cut(&mut self, rng: &mut SplitMix64, cut: &mut Cut) {
        for op in survivors(std::mem::take(&mut self.pending), rng, cut) {
            let op = match op {
                FileOp::Write { offset, bytes } => {
                    FileOp::Write { offset, bytes: damage(offset, bytes, &self.durable, rng, cut) }
                }
                FileOp::SetLen(len) => FileOp::SetLen(len),
            };
            op.apply_to(&mut self.durable);
        }
        self.live.clone_from(&self.durable);
    }
}

impl DirState {
    fn apply(&mut self, op: DirOp) {
        op.apply_to(&mut self.live);
        self.pending.push(op);
    }

    fn sync(&mut self) {
        self.durable.clone_from(&self.live);
        self.pending.clear();
    }

    fn cut(&mut self, rng: &mut SplitMix64, cut: &mut Cut) {
        for op in survivors(std::mem::take(&mut self.pending), rng, cut) {
            op.apply_to(&mut self.durable);
        }
        self.live.clone_from(&self.durable);
    }
}

impl DirOp {
    /// A rename whose source the cut dropped (or never made durable) does nothing.
    fn apply_to(&self, entries: &mut BTreeMap<OsString, Entry>) {
        match self {
            DirOp::Link(name, entry) => {
                entries.insert(name.clone(), *entry);
            }
            DirOp::Rename(from, to) => {
                if let Some(entry) = entries.remove(from) {
                    entries.insert(to.clone(), entry);
                }
            }
        }
    }
}

/// A random subset of `pending`, in a random order.
fn survivors<T>(pending: Vec<T>, rng: &mut SplitMix64, cut: &mut Cut) -> Vec<T> {
    let total = pending.len() as u64;
    let mut kept: Vec<T> = pending.into_iter().filter(|_| rng.below(KEEP_ONE_IN) == 0).collect();
    rng.shuffle(&mut kept);
    cut.kept += kept.len() as u64;
    cut.dropped += total - kept.len() as u64;
    kept
}

/// A kept write as it lands: intact, with a few random bytes, or torn (its last sector keeps
/// only a prefix of the new bytes; the rest of that sector keeps what `old` had, or zeros).
fn damage(offset: usize, mut bytes: Vec<u8>, old: &[u8], rng: &mut SplitMix64, cut: &mut Cut) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    match rng.below(DAMAGE_ONE_IN) {
        0 => {
            for _ in 0..=rng.below(GARBLED_BYTES_MAX) {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] = rng.next_u64() as u8;
            }
            cut.garbled += 1;
        }
        1 => {
            let end = offset + bytes.len();
            let sector = ((end - 1) / SECTOR_BYTES * SECTOR_BYTES).max(offset);
            let torn_from = sector + rng.below((end - sector) as u64) as usize;
            for at in torn_from..end {
                bytes[at - offset] = old.get(at).copied().unwrap_or(0);
            }
            cut.torn += 1;
        }
        _ => {}
    }
    bytes
}

impl SimFile {
    /// Runs `op` on the disk, refusing a handle from before a power cut.
    fn with<T>(&self, op: impl FnOnce(&mut Disk) -> io::Result<T>) -> io::Result<T> {
        let mut disk = self.disk.lock();
        if disk.boot != self.boot {
            let what = "a handle opened before a simulated power cut";
            return Err(io::Error::other(format!("{}: {what}", self.path.display())));
        }
        op(&mut disk)
    }

    pub(super) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with(|disk| {
            if let Some(kind) = disk.read_faults.get_mut(&self.path).and_then(VecDeque::pop_front) {
                return Err(io::Error::new(kind, format!("simulated read error of {}", self.path.display())));
            }
            let live = &disk.files[self.inode].live;
            let from = (offset as usize).min(live.len());
            let count = buf.len().min(live.len() - from);
            buf[..count].copy_from_slice(&live[from..from + count]);
            Ok(count)
        })
    }

    /// As `FileExt::read_exact_at`: an `Interrupted` read is retried.
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if got < buf.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "failed to fill whole buffer"));
        }
        Ok(())
    }

    pub(super) fn read_range(&self, from: u64, to: u64) -> io::Result<Vec<u8>> {
        self.with(|disk| {
            let live = &disk.files[self.inode].live;
            let (from, to) = ((from as usize).min(live.len()), (to as usize).min(live.len()));
            Ok(live[from..to.max(from)].to_vec())
        })
    }

    pub(super) fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.with(|disk| {
            disk.halting(SimOp::Write, &self.path, |disk| {
                let op = FileOp::Write { offset: offset as usize, bytes: bytes.to_vec() };
                disk.files[self.inode].apply(op);
                Ok(())
            })
        })
    }

    pub(super) fn append(&self, bytes: &[u8]) -> io::Result<()> {
        let len = self.len()?;
        self.write_all_at(bytes, len)
    }

    pub(super) fn len(&self) -> io::Result<u64> {
        self.with(|disk| Ok(disk.files[self.inode].live.len() as u64))
    }

    pub(super) fn set_len(&self, len: u64) -> io::Result<()> {
        self.with(|disk| {
            disk.files[self.inode].apply(FileOp::SetLen(len as usize));
            Ok(())
        })
    }

    pub(super) fn sync(&self) -> io::Result<()> {
        self.with(|disk| {
            disk.halting(SimOp::Sync, &self.path, |disk| {
                disk.files[self.inode].sync();
                Ok(())
            })
        })
    }
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut disk = self.disk.lock();
        if disk.boot == self.boot {
            disk.locks.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds enough for a 1-in-2 survival to show both ways.
    const SEEDS: u64 = 64;

    fn disk() -> SimDisk {
        SimDisk::new(Path::new("/sim"))
    }

    /// Over `SEEDS` power cuts of the state `prepare` makes, how many leave `survived` true.
    fn survivals(prepare: impl Fn(&SimDisk), survived: impl Fn(&SimDisk) -> bool) -> u64 {
        (0..SEEDS)
            .filter(|&seed| {
                let disk = disk();
                prepare(&disk);
                disk.power_cut(seed);
                survived(&disk)
            })
            .count() as u64
    }

    fn write(disk: &SimDisk, path: &str, bytes: &[u8], sync: bool) {
        let file = disk.open(Path::new(path), OpenMode::Keep).unwrap();
        file.write_all_at(bytes, 0).unwrap();
        if sync {
            file.sync().unwrap();
        }
    }

    fn holds(disk: &SimDisk, path: &str, bytes: &[u8]) -> bool {
        disk.read(Path::new(path)).is_ok_and(|found| found == bytes)
    }

    #[test]
    fn an_unsynced_write_can_vanish_and_a_synced_one_never_does() {
        let synced_file = |disk: &SimDisk| {
            write(disk, "/sim/a", b"durable", true);
            disk.sync_dir(Path::new("/sim")).unwrap();
        };
        let unsynced = survivals(
            |disk| {
                synced_file(disk);
                disk.open(Path::new("/sim/a"), OpenMode::Write).unwrap().write_all_at(b"DURABLE!", 0).unwrap();
            },
            |disk| holds(disk, "/sim/a", b"DURABLE!"),
        );
        assert!(0 < unsynced && unsynced < SEEDS, "an unsynced write survived {unsynced} of {SEEDS} cuts");
        let synced = survivals(synced_file, |disk| holds(disk, "/sim/a", b"durable"));
        assert_eq!(synced, SEEDS, "a synced write must survive every cut");
    }

    #[test]
    fn a_rename_or_a_creation_needs_its_directory_synced() {
        let renamed = |sync_dir: bool| {
            survivals(
                |disk| {
                    write(disk, "/sim/a.tmp", b"new", true);
                    disk.rename(Path::new("/sim/a.tmp"), Path::new("/sim/a")).unwrap();
                    if sync_dir {
                        disk.sync_dir(Path::new("/sim")).unwrap();
                    }
                },
                |disk| holds(disk, "/sim/a", b"new"),
            )
        };
        let unsynced = renamed(false);
        assert!(0 < unsynced && unsynced < SEEDS, "an unsynced rename survived {unsynced} of {SEEDS} cuts");
        assert_eq!(renamed(true), SEEDS, "a rename followed by the directory's sync must survive");
        let created = survivals(
            |disk| {
                disk.create_dir(Path::new("/sim/d")).unwrap();
                write(disk, "/sim/d/f", b"x", true);
            },
            |disk| disk.exists(Path::new("/sim/d/f")),
        );
        assert!(created < SEEDS, "a new directory whose parent was never synced survived every cut");
    }

    #[test]
    fn a_kept_write_is_sometimes_garbled_or_torn_but_never_outside_its_range() {
        let mut cut = Cut::default();
        for seed in 0..SEEDS {
            let disk = disk();
            write(&disk, "/sim/a", &[7; 1000], true);
            disk.sync_dir(Path::new("/sim")).unwrap();
            disk.open(Path::new("/sim/a"), OpenMode::Write).unwrap().write_all_at(&[9; 1000], 1000).unwrap();
            let this = disk.power_cut(seed);
            (cut.garbled, cut.torn) = (cut.garbled + this.garbled, cut.torn + this.torn);
            let content = disk.read(Path::new("/sim/a")).unwrap();
            assert_eq!(content[..1000], [7; 1000], "seed {seed}: a synced byte changed");
        }
        assert!(cut.garbled > 0 && cut.torn > 0, "{cut:?}");
    }

    #[test]
    fn a_flipped_durable_byte_shows_after_the_cut_and_a_torn_write_keeps_its_prefix() {
        let disk = disk();
        write(&disk, "/sim/a", b"abcdef", true);
        disk.sync_dir(Path::new("/sim")).unwrap();
        disk.flip_durable(Path::new("/sim/a"), 1, 0x20).unwrap();
        assert!(holds(&disk, "/sim/a", b"abcdef"), "the page cache keeps its copy until the cut");
        assert!(disk.flip_durable(Path::new("/sim/a"), 6, 1).is_err());
        disk.open(Path::new("/sim/a"), OpenMode::Write).unwrap().write_all_at(b"UVWX", 1).unwrap();
        assert_eq!(disk.pending_writes(Path::new("/sim/a")).unwrap(), vec![1..5]);
        assert_eq!(disk.tear_last_write(Path::new("/sim/a"), 2).unwrap(), 1..5);
        assert!(disk.tear_last_write(Path::new("/sim/a"), 2).is_err(), "nothing pending is left");
        disk.power_cut(0);
        assert!(holds(&disk, "/sim/a", b"aUVdef"), "{:?}", disk.read(Path::new("/sim/a")));
    }

    #[test]
    fn handles_and_locks_die_with_the_power_and_a_halt_stops_one_operation() {
        let disk = disk();
        write(&disk, "/sim/a", b"x", true);
        let file = disk.open(Path::new("/sim/a"), OpenMode::ReadWrite).unwrap();
        let lock = disk.try_lock(Path::new("/sim/lock")).unwrap();
        assert!(lock.is_some() && disk.try_lock(Path::new("/sim/lock")).unwrap().is_none());
        disk.halt_at(Halt { op: SimOp::Sync, path: PathBuf::from("/sim/a"), after: false });
        file.write_all_at(b"y", 0).unwrap();
        assert!(file.sync().is_err() && disk.halted());
        assert!(file.sync().is_ok(), "a halt stops one operation only");
        let ops = disk.ops();
        disk.halt_at_op(1);
        file.write_all_at(b"z", 0).unwrap();
        assert!(file.sync().is_err() && disk.halted());
        assert_eq!((disk.ops(), disk.halted_op()), (ops + 2, Some((SimOp::Sync, PathBuf::from("/sim/a")))));
        disk.power_cut(0);
        assert!(file.read_at(&mut [0], 0).is_err(), "a handle from before the cut is dead");
        assert!(disk.try_lock(Path::new("/sim/lock")).unwrap().is_some(), "the cut released the lock");
        drop(lock);
    }
}
