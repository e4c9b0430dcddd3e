//! The corruption campaign: every byte of every file header flipped, a seeded sample of the
//! acknowledgement record's padding and of the frames, files swapped between partitions and a
//! partition's files replaced by another log's; then `status`, `append`, `consume` (the
//! existing group and a fresh one), `repair` (and `repair --gap` where the plain repair
//! refuses) run in process, and every case judged against the ground truth of what was
//! acknowledged (docs/corruption.md).
//!
//! Three reported losses follow the campaign as named tests.
//!
//! Reproduce: `cargo test -p consumer --test corruption -- --nocapture`.

use consumer::crash::CrashPlan;
use consumer::log::{
    decode_delta, encode_delta, Log, LogError, LogIdentity, Producer, RepairAction, RepairOptions, SplitMix64,
};
use consumer::owner::{check_log, OnFenced, Owner, OwnerError, Settings};
use consumer::store::{Location, Store, StoreOptions};
use consumer::strategy::{LogCheck, OutOfRange, Strategy};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The campaign's seed: the sampled bytes, the flipped bits and the payloads all come from it.
const SEED: u64 = 0x00C0_FFEE_2026_1204;
/// The campaign stops adding cases once it has run this long (the whole test stays under 60 s).
const TIME_CAP: Duration = Duration::from_secs(40);
const PARTITIONS: u32 = 2;
/// The acknowledgement record's slots start at bytes 0 and `SLOT_STRIDE` (`log/ack.rs`).
const SLOT_STRIDE: u64 = 4096;
/// Sampled bytes per partition: of the acknowledgement record's padding, and of the frames.
const PADDING_SAMPLES: usize = 6;
const FRAME_SAMPLES: usize = 20;
/// The group consumed before the damage, and the owner every group starts with.
const GROUP: &str = "g";
const OWNER: &str = "o0";

// ----------------------------------------------------------------------------------------
// Adapters: the only places the merger of the log's format v3 and gap repair must touch.
// ----------------------------------------------------------------------------------------

/// Why `repair` did not repair.
#[derive(Debug)]
enum RepairFailure {
    /// A refusal (`LogError::is_refusal`, the command line's exit 4).
    Refused(String),
    /// Another error (exit 2).
    Error(String),
}

/// What a repair changed and named.
#[derive(Debug, Default)]
struct RepairReport {
    actions: Vec<String>,
    /// Acknowledged records it removed or accepted as lost, per partition.
    named: Vec<(u32, Range<u64>)>,
    /// Offsets it recorded as a gap (`--gap`), per partition.
    gaps: Vec<(u32, Range<u64>)>,
    /// Each partition's end after it.
    ends: Vec<u64>,
}

/// `consumer repair [--gap]` in process (`main.rs`'s `repair`): the log first, then every
/// group of the store moved back to its partitions' new ends, and every gap recorded in every
/// group's resets.
fn repair(dir: &Path, identity: LogIdentity, store: &mut Store, gap: bool) -> Result<RepairReport, RepairFailure> {
    let options = RepairOptions { gap };
    let repaired = Log::repair_with(dir, identity, options, |_| {}).map_err(|error| log_failure(&error))?;
    let mut report = RepairReport { ends: repaired.ends.clone(), ..RepairReport::default() };
    for action in &repaired.actions {
        report.actions.push(action.to_string());
        named_by(action, &mut report);
    }
    let groups = store.groups().map_err(|error| RepairFailure::Error(error.to_string()))?;
    for group in groups {
        for (partition, &end) in (0..).zip(&repaired.ends) {
            store.rewind_to_log_end(&group, partition, end).map_err(|error| RepairFailure::Error(error.to_string()))?;
        }
        for (partition, gap) in &repaired.gaps {
            store
                .record_gap(&group, *partition, gap.clone())
                .map_err(|error| RepairFailure::Error(error.to_string()))?;
        }
    }
    Ok(report)
}

/// The acknowledged records a repair action names as removed or lost (into `report.named`)
/// or as a gap (into `report.gaps`).
fn named_by(action: &RepairAction, report: &mut RepairReport) {
    match action {
        RepairAction::LostAcknowledged { partition, offsets, .. } => report.named.push((*partition, offsets.clone())),
        RepairAction::RecreatedPartition { partition, lost: Some(lost), .. } => {
            report.named.push((*partition, lost.clone()))
        }
        // How many it held is unknown: the action names all of them.
        RepairAction::RecreatedPartition { partition, lost: None, .. } => report.named.push((*partition, 0..u64::MAX)),
        // Acknowledged or not, everything after the intact records is named as removed.
        RepairAction::CutUnknown { partition, kept_records, .. } => {
            report.named.push((*partition, *kept_records..u64::MAX))
        }
        RepairAction::RecordedGap { partition, offsets, .. } => report.gaps.push((*partition, offsets.clone())),
        RepairAction::RecreatedDirectory { .. }
        | RepairAction::RecreatedIdentity { .. }
        | RepairAction::Adopted { .. }
        | RepairAction::RewroteHeader { .. }
        | RepairAction::CutUnacknowledged { .. }
        | RepairAction::RebuiltAck { .. }
        | RepairAction::RecreatedStart { .. }
        | RepairAction::MovedStart { .. } => {}
    }
}

fn log_failure(error: &LogError) -> RepairFailure {
    if error.is_refusal() {
        RepairFailure::Refused(error.to_string())
    } else {
        RepairFailure::Error(error.to_string())
    }
}

// ----------------------------------------------------------------------------------------
// A data directory: the log (`log/`) and the SQLite store (`store.db`), as `consumer init`.
// ----------------------------------------------------------------------------------------

/// A temporary directory, in memory when the machine has /dev/shm (fsyncs cost nothing there).
fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("onceproof-corruption-").tempdir_in(shm);
    builder.or_else(|_| tempfile::tempdir()).expect("a temporary directory")
}

fn log_dir(root: &Path) -> PathBuf {
    root.join("log")
}

fn location(root: &Path) -> Location {
    Location::Sqlite(root.join("store.db"))
}

fn open_store(root: &Path) -> Result<Store, String> {
    Store::open_at(&location(root), StoreOptions::default()).map_err(|error| error.to_string())
}

/// A new data directory with `partitions` partitions (`consumer init`).
fn init(root: &Path, partitions: u32) -> LogIdentity {
    let identity = Log::init(&log_dir(root), partitions).expect("create the log");
    Store::create_at(&location(root), identity, StoreOptions::default()).expect("create the store");
    identity
}

/// What one consume run did to a group, per partition: (next offset before, after), and the
/// total before and after.
struct ConsumeRun {
    before: Vec<u64>,
    after: Vec<u64>,
    total_before: i64,
    total_after: i64,
    /// The error the run stopped with, if any.
    error: Option<(bool, String)>,
    /// The offsets the run skipped with a recorded reset (retention: `--on-out-of-range
    /// earliest`), per partition.
    skipped: Vec<(u32, Range<u64>)>,
}

fn resets(root: &Path, group: &str) -> Vec<(u32, Range<u64>)> {
    let Ok(store) = open_store(root) else { return Vec::new() };
    let rows = store.resets(Some(group)).unwrap_or_default();
    rows.into_iter().map(|row| (row.partition, row.from..row.to)).collect()
}

fn group_state(root: &Path, group: &str) -> Option<(Vec<u64>, i64)> {
    let store = open_store(root).ok()?;
    let mut next = Vec::new();
    for partition in 0..store.partitions() {
        next.push(store.progress(group, partition).ok()?.next_offset);
    }
    Some((next, store.total(group).ok()?))
}

/// `consumer consume --group GROUP --strategy atomic-fenced` in process: `check_log`, then an
/// owner run to the end of the log.
fn consume_once(root: &Path, identity: LogIdentity, group: &str) -> Result<(), OwnerError> {
    let store = Store::open_at(&location(root), StoreOptions::default())?;
    let mut log = Log::open_reader(&log_dir(root), identity)?;
    check_log(&store, &mut log, group, LogCheck::default())?;
    // A fresh group starts below the retained start: it skips to it, recording the reset.
    let settings = Settings { on_out_of_range: OutOfRange::Earliest, ..Settings::new(Strategy::AtomicFenced) };
    let mut owner = Owner::start(store, log, group, OWNER, settings, CrashPlan::none())?;
    owner.run_to_end(OnFenced::Stop)?;
    Ok(())
}

fn consume(root: &Path, identity: LogIdentity, group: &str) -> ConsumeRun {
    let (before, total_before) = group_state(root, group).unwrap_or((vec![0; identity.partitions as usize], 0));
    let earlier = resets(root, group);
    let error = consume_once(root, identity, group).err().map(|error| (error.is_refusal(), error.to_string()));
    let (after, total_after) = group_state(root, group).unwrap_or_else(|| (before.clone(), total_before));
    let mut skipped = resets(root, group);
    skipped.drain(..earlier.len().min(skipped.len()));
    ConsumeRun { before, after, total_before, total_after, error, skipped }
}

/// The log before the damage: what was acknowledged, per partition, offset by offset, and
/// each partition's start (records below it were retained away).
struct Base {
    dir: tempfile::TempDir,
    identity: LogIdentity,
    truth: Vec<Vec<i64>>,
    starts: Vec<u64>,
}

/// Where partition 0's start is moved to (retention), so the start files differ.
const RETAINED: u64 = 2;

/// A log of 2 partitions written the way producers write it (single-record appends, plain and
/// idempotent batches), consumed by group `g` (3 records of partition 0, 10 of partition 1),
/// then appended to again (12 and 14 records: `g` is behind on both, the files differ in
/// length) and partition 0 retained below offset 2. Payloads are distinct values drawn from
/// `payload_seed`.
fn build_base(payload_seed: u64) -> Base {
    let dir = temp_dir();
    let identity = init(dir.path(), PARTITIONS);
    let mut rng = SplitMix64::new(payload_seed);
    let mut truth = vec![Vec::new(); PARTITIONS as usize];
    let mut values = |n: usize, truth: &mut Vec<i64>| -> Vec<Vec<u8>> {
        let batch: Vec<i64> = (0..n).map(|_| 1 + rng.below(1_000_000) as i64).collect();
        truth.extend(&batch);
        batch.into_iter().map(encode_delta).collect()
    };
    let (mut log, _) = Log::open_writer(&log_dir(dir.path()), identity).expect("open the writer");
    for _ in 0..3 {
        let payload = values(1, &mut truth[0]);
        log.append(0, &payload[0]).expect("append");
    }
    for _ in 0..2 {
        let payload = values(1, &mut truth[1]);
        log.append(1, &payload[0]).expect("append");
    }
    let batch = values(3, &mut truth[1]);
    log.append_idempotent(1, Producer { id: 9, epoch: 0 }, 0, &batch).expect("append idempotently");
    let batch = values(5, &mut truth[1]);
    log.append_batch(1, &batch).expect("append a batch");
    drop(log);
    consume_once(dir.path(), identity, GROUP).expect("consume the base");
    let (mut log, _) = Log::open_writer(&log_dir(dir.path()), identity).expect("open the writer");
    let batch = values(4, &mut truth[0]);
    log.append_batch(0, &batch).expect("append a batch");
    let batch = values(3, &mut truth[0]);
    log.append_idempotent(0, Producer { id: 7, epoch: 0 }, 0, &batch).expect("append idempotently");
    for _ in 0..2 {
        let payload = values(1, &mut truth[0]);
        log.append(0, &payload[0]).expect("append");
    }
    let batch = values(4, &mut truth[1]);
    log.append_idempotent(1, Producer { id: 9, epoch: 0 }, 3, &batch).expect("append idempotently");
    log.retain_before(0, RETAINED).expect("retention");
    drop(log);
    Base { dir, identity, truth, starts: vec![RETAINED, 0] }
}

/// Copies a data directory (the log's files and the store) to a new temporary one.
fn copy_data_dir(from: &Path) -> tempfile::TempDir {
    let to = temp_dir();
    std::fs::create_dir(log_dir(to.path())).expect("make log/");
    for entry in std::fs::read_dir(log_dir(from)).expect("list log/") {
        let entry = entry.expect("an entry of log/");
        if entry.file_type().expect("its type").is_file() {
            std::fs::copy(entry.path(), log_dir(to.path()).join(entry.file_name())).expect("copy a log file");
        }
    }
    std::fs::copy(from.join("store.db"), to.path().join("store.db")).expect("copy the store");
    to
}

fn partition_file(root: &Path, partition: u32, kind: &str) -> PathBuf {
    log_dir(root).join(format!("partition-{partition}.{kind}"))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).len()
}

fn flip(path: &Path, at: u64, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes[at as usize] ^= mask;
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

// ----------------------------------------------------------------------------------------
// The damage.
// ----------------------------------------------------------------------------------------

/// The file kinds of a partition.
const KINDS: [&str; 3] = ["log", "ack", "start"];

#[derive(Clone, Debug)]
enum Damage {
    /// XOR `mask` into byte `at` of `file` (a name in the log directory).
    Flip { file: String, at: u64, mask: u8 },
    /// Swap these kinds of file between partitions 0 and 1.
    Swap(Vec<&'static str>),
    /// Replace partition `.0`'s files by the other log's.
    Foreign(u32),
}

impl Damage {
    fn apply(&self, root: &Path, foreign: &Path) {
        match self {
            Damage::Flip { file, at, mask } => flip(&log_dir(root).join(file), *at, *mask),
            Damage::Swap(kinds) => {
                for kind in kinds {
                    let (a, b) = (partition_file(root, 0, kind), partition_file(root, 1, kind));
                    let parked = log_dir(root).join(format!("swap.{kind}"));
                    std::fs::rename(&a, &parked).expect("park a file");
                    std::fs::rename(&b, &a).expect("move a file");
                    std::fs::rename(&parked, &b).expect("move a file");
                }
            }
            Damage::Foreign(partition) => {
                for kind in KINDS {
                    let from = partition_file(foreign, *partition, kind);
                    std::fs::copy(from, partition_file(root, *partition, kind)).expect("copy a foreign file");
                }
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Damage::Flip { file, at, mask } => format!("{file} byte {at} ^ {mask:#04x}"),
            Damage::Swap(kinds) => format!("swap {} of partitions 0 and 1", kinds.join(", ")),
            Damage::Foreign(partition) => format!("partition {partition}'s files from another log"),
        }
    }
}

/// The header lengths, discovered from the files (never hard-coded, so a new format version
/// changes nothing here): a new partition file is its header alone; the start and identity
/// files are flipped whole; an acknowledgement slot's record ends at its last nonzero byte.
struct Layout {
    data_header: u64,
    start_len: u64,
    identity_len: u64,
    ack_record: u64,
}

fn discover_layout(base: &Base) -> Layout {
    let fresh = temp_dir();
    Log::init(&log_dir(fresh.path()), 1).expect("a fresh log");
    let data_header = file_len(&partition_file(fresh.path(), 0, "log"));
    let start_len = file_len(&partition_file(fresh.path(), 0, "start"));
    let identity_len = file_len(&log_dir(fresh.path()).join("identity"));
    let mut ack_record = 0;
    for root in [fresh.path(), base.dir.path()] {
        let partitions = if root == fresh.path() { 1 } else { PARTITIONS };
        for partition in 0..partitions {
            let bytes = std::fs::read(partition_file(root, partition, "ack")).expect("read an ack file");
            for slot in bytes.chunks(SLOT_STRIDE as usize) {
                let used = slot.iter().rposition(|&byte| byte != 0).map_or(0, |last| last + 1);
                ack_record = ack_record.max(used as u64);
            }
        }
    }
    assert!(data_header > 0 && start_len > 0 && identity_len > 0 && ack_record > 0, "every header has bytes");
    assert!(ack_record < SLOT_STRIDE, "an acknowledgement slot has padding");
    Layout { data_header, start_len, identity_len, ack_record }
}

/// The damage classes, in the order of the table.
const CLASSES: [&str; 11] = [
    "header: data file",
    "header: start file",
    "header: ack slot record",
    "header: identity",
    "ack slot padding (sample)",
    "frames (sample)",
    "swap .log",
    "swap .ack",
    "swap .start",
    "swap all three",
    "foreign partition",
];

/// Both flips of one byte: every bit, and one bit drawn from `rng`.
fn flips(class: usize, file: &str, at: u64, rng: &mut SplitMix64, into: &mut Vec<(usize, Damage)>) {
    into.push((class, Damage::Flip { file: file.to_string(), at, mask: 0xFF }));
    into.push((class, Damage::Flip { file: file.to_string(), at, mask: 1 << rng.below(8) }));
}

/// Every case, classes interleaved (round robin), so that the time cap keeps every class.
fn cases(base: &Base, layout: &Layout, rng: &mut SplitMix64) -> Vec<(usize, Damage)> {
    let mut per_class: Vec<Vec<(usize, Damage)>> = vec![Vec::new(); CLASSES.len()];
    for partition in 0..PARTITIONS {
        let (log, start, ack) = (
            format!("partition-{partition}.log"),
            format!("partition-{partition}.start"),
            format!("partition-{partition}.ack"),
        );
        for at in 0..layout.data_header {
            flips(0, &log, at, rng, &mut per_class[0]);
        }
        for at in 0..layout.start_len {
            flips(1, &start, at, rng, &mut per_class[1]);
        }
        for slot in 0..2 {
            for at in 0..layout.ack_record {
                flips(2, &ack, slot * SLOT_STRIDE + at, rng, &mut per_class[2]);
            }
            for _ in 0..PADDING_SAMPLES / 2 {
                let at = slot * SLOT_STRIDE + layout.ack_record + rng.below(SLOT_STRIDE - layout.ack_record);
                flips(4, &ack, at, rng, &mut per_class[4]);
            }
        }
        let len = file_len(&partition_file(base.dir.path(), partition, "log"));
        for _ in 0..FRAME_SAMPLES / 2 {
            let at = layout.data_header + rng.below(len - layout.data_header);
            flips(5, &log, at, rng, &mut per_class[5]);
        }
    }
    for at in 0..layout.identity_len {
        flips(3, "identity", at, rng, &mut per_class[3]);
    }
    for (class, kind) in [(6, "log"), (7, "ack"), (8, "start")] {
        per_class[class].push((class, Damage::Swap(vec![kind])));
    }
    per_class[9].push((9, Damage::Swap(KINDS.to_vec())));
    for partition in 0..PARTITIONS {
        per_class[10].push((10, Damage::Foreign(partition)));
    }
    let mut all = Vec::new();
    let longest = per_class.iter().map(Vec::len).max().unwrap_or(0);
    for index in 0..longest {
        for class in &per_class {
            all.extend(class.get(index).cloned());
        }
    }
    all
}

// ----------------------------------------------------------------------------------------
// One case: the commands, and the verdict from the ground truth.
// ----------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Refused,
    Repaired,
    Gapped,
    Clean,
    /// Stopped by an error that is not a refusal (exit 2, e.g. "not a log file"): nothing
    /// proceeded, but it is not the refusal (exit 4) the log owes.
    Errored,
    /// Failed: see `Verdict::lost`, `Verdict::twice`, `Verdict::inconsistent`.
    Failed,
}

#[derive(Debug)]
struct Verdict {
    outcome: Outcome,
    /// Acknowledged records not readable at their offset with their payload, and not named.
    lost: Vec<(u32, u64)>,
    /// Consume runs whose total does not match the records at the offsets they consumed.
    twice: Vec<String>,
    /// A repaired log that does not read back consistently.
    inconsistent: Vec<String>,
    /// Records named by a gap.
    gap_named: u64,
    refusals: Vec<String>,
    errors: Vec<String>,
    actions: Vec<String>,
}

/// What a case knows: the ground truth, now, and what the commands said.
struct Tracker {
    /// Every acknowledged record (partition, offset, value): the base's and those appended
    /// after the damage.
    acknowledged: Vec<(u32, u64, i64)>,
    /// What each offset holds now (`None`: nothing, a gap, or removed by a repair).
    now: Vec<Vec<Option<i64>>>,
    named: Vec<(u32, Range<u64>)>,
    gaps: Vec<(u32, Range<u64>)>,
    refusals: Vec<String>,
    errors: Vec<String>,
    twice: Vec<String>,
    actions: Vec<String>,
    next_value: i64,
}

impl Tracker {
    fn new(base: &Base, first_value: i64) -> Tracker {
        let mut acknowledged = Vec::new();
        let mut now = Vec::new();
        for ((partition, values), &start) in (0..).zip(&base.truth).zip(&base.starts) {
            let kept = (0..).zip(values).filter(|&(offset, _)| offset >= start);
            acknowledged.extend(kept.map(|(offset, &value)| (partition, offset, value)));
            // Retained records are not readable, but `repair` may make them so again.
            now.push(values.iter().copied().map(Some).collect());
        }
        Tracker {
            acknowledged,
            now,
            named: Vec::new(),
            gaps: Vec::new(),
            refusals: Vec::new(),
            errors: Vec::new(),
            twice: Vec::new(),
            actions: Vec::new(),
            next_value: first_value,
        }
    }

    fn note(&mut self, command: &str, refusal: bool, error: impl std::fmt::Display) {
        let line = format!("{command}: {error}");
        if refusal {
            self.refusals.push(line);
        } else {
            self.errors.push(line);
        }
    }

    fn note_log(&mut self, command: &str, error: &LogError) {
        self.note(command, error.is_refusal(), error);
    }

    /// `status`: a reader and a view of each partition.
    fn status(&mut self, root: &Path, identity: LogIdentity) {
        match Log::open_reader(&log_dir(root), identity) {
            Ok(mut log) => {
                for partition in 0..identity.partitions {
                    if let Err(error) = log.view(partition) {
                        self.note_log("status", &error);
                    }
                }
            }
            Err(error) => self.note_log("status", &error),
        }
    }

    /// `append`: one new record to each partition; an `Ok` acknowledges it.
    /// Returns the partitions the writer accepted (appended to).
    fn append(&mut self, root: &Path, identity: LogIdentity) -> Vec<u32> {
        let mut accepted = Vec::new();
        let mut log = match Log::open_writer(&log_dir(root), identity) {
            Ok((log, _tail_repairs)) => log,
            Err(error) => {
                self.note_log("append", &error);
                return accepted;
            }
        };
        for partition in 0..identity.partitions {
            let value = self.next_value;
            self.next_value += 1;
            match log.append(partition, &encode_delta(value)) {
                Ok(offset) => {
                    accepted.push(partition);
                    self.acknowledged.push((partition, offset, value));
                    let now = &mut self.now[partition as usize];
                    if now.len() <= offset as usize {
                        now.resize(offset as usize + 1, None);
                    }
                    now[offset as usize] = Some(value);
                }
                Err(error) => self.note_log("append", &error),
            }
        }
        accepted
    }

    /// Right after an append: a partition the writer accepted must hold every acknowledged
    /// record, readable with its value. What it does not hold the writer cut: only a repair or
    /// a gap naming it later excuses it, not an error that stands at the end.
    fn cut_by_writer(&self, root: &Path, identity: LogIdentity, accepted: &[u32]) -> Vec<(u32, u64)> {
        let Ok(mut log) = Log::open_reader(&log_dir(root), identity) else { return Vec::new() };
        let mut cut = Vec::new();
        for &(partition, offset, value) in self.acknowledged.iter().filter(|(p, _, _)| accepted.contains(p)) {
            let readable = log.read(partition, offset).ok().and_then(|record| decode_delta(&record.payload));
            if readable != Some(value) {
                cut.push((partition, offset));
            }
        }
        cut
    }

    /// `consume --group group`, its total checked against the records at the offsets it
    /// consumed.
    fn consume(&mut self, root: &Path, identity: LogIdentity, group: &str) -> ConsumeRun {
        let run = consume(root, identity, group);
        if let Some((refusal, error)) = &run.error {
            self.note(&format!("consume {group}"), *refusal, error);
        }
        let mut expected = 0;
        let mut beyond = Vec::new();
        for (partition, (&from, &to)) in run.before.iter().zip(&run.after).enumerate() {
            for offset in from..to {
                let skipped = |(p, offsets): &(u32, Range<u64>)| *p as usize == partition && offsets.contains(&offset);
                if run.skipped.iter().any(skipped) {
                    continue;
                }
                match self.now[partition].get(offset as usize) {
                    Some(value) => expected += value.unwrap_or(0),
                    None => beyond.push((partition, offset)),
                }
            }
        }
        let applied = run.total_after - run.total_before;
        if applied != expected || !beyond.is_empty() {
            self.twice.push(format!(
                "group {group} moved {:?} -> {:?} and added {applied}, but the records acknowledged at those \
                 offsets sum to {expected}{}",
                run.before,
                run.after,
                if beyond.is_empty() { String::new() } else { format!(" (and {beyond:?} were never acknowledged)") }
            ));
        }
        run
    }

    /// `repair`, then `repair --gap` where the plain one refuses. Returns whether a repair ran.
    fn repair(&mut self, root: &Path, identity: LogIdentity) -> Option<bool> {
        let mut store = match open_store(root) {
            Ok(store) => store,
            Err(error) => {
                self.note("repair", false, error);
                return None;
            }
        };
        let mut gap = false;
        let report = match repair(&log_dir(root), identity, &mut store, false) {
            Ok(report) => report,
            Err(RepairFailure::Refused(error)) => {
                self.note("repair", true, &error);
                gap = true;
                match repair(&log_dir(root), identity, &mut store, true) {
                    Ok(report) => report,
                    Err(RepairFailure::Refused(error)) => {
                        self.note("repair --gap", true, error);
                        return None;
                    }
                    Err(RepairFailure::Error(error)) => {
                        self.note("repair --gap", false, error);
                        return None;
                    }
                }
            }
            Err(RepairFailure::Error(error)) => {
                self.note("repair", false, error);
                return None;
            }
        };
        self.actions.extend(report.actions.iter().cloned());
        for (partition, offsets) in report.named.iter().chain(&report.gaps) {
            let now = &mut self.now[*partition as usize];
            for offset in offsets.start..offsets.end.min(now.len() as u64) {
                now[offset as usize] = None;
            }
        }
        for (partition, &end) in report.ends.iter().enumerate() {
            self.now[partition].truncate(end as usize);
        }
        self.named.extend(report.named);
        self.gaps.extend(report.gaps);
        Some(gap)
    }

    fn is_named(&self, partition: u32, offset: u64) -> bool {
        self.named.iter().chain(&self.gaps).any(|(p, offsets)| *p == partition && offsets.contains(&offset))
    }

    /// Every acknowledged record readable at its offset with its payload, or named, or behind a
    /// standing error (the log refuses to be read: nothing proceeds past it).
    fn lost(&self, root: &Path, identity: LogIdentity) -> Vec<(u32, u64)> {
        let Ok(mut log) = Log::open_reader(&log_dir(root), identity) else { return Vec::new() };
        let mut lost = Vec::new();
        for &(partition, offset, value) in &self.acknowledged {
            let readable = match log.read(partition, offset) {
                Ok(record) => decode_delta(&record.payload) == Some(value),
                Err(LogError::OffsetOutOfRange { .. }) => false,
                Err(_) => continue,
            };
            if !readable && !self.is_named(partition, offset) {
                lost.push((partition, offset));
            }
        }
        lost
    }
}

/// After a repair: the log reads back whole (no damage, every record from start to end), and a
/// fresh group's consume totals exactly what it reads.
fn check_repaired(root: &Path, identity: LogIdentity, fresh: &ConsumeRun) -> Vec<String> {
    let mut problems = Vec::new();
    let mut log = match Log::open_reader(&log_dir(root), identity) {
        Ok(log) => log,
        Err(error) => return vec![format!("the repaired log does not open: {error}")],
    };
    let mut sum = 0;
    for partition in 0..identity.partitions {
        match log.view(partition) {
            Ok(view) => {
                if let Some(damage) = view.damage {
                    problems.push(format!("partition {partition} is still damaged: {}", damage.reason));
                }
                // A recorded gap holds no record: its offsets were named when it was made.
                let readable =
                    (view.start..view.end).filter(|offset| !view.gaps.iter().any(|gap| gap.contains(offset)));
                for offset in readable {
                    match log.read(partition, offset).map(|record| decode_delta(&record.payload)) {
                        Ok(Some(value)) => sum += value,
                        Ok(None) => problems.push(format!("partition {partition} offset {offset} is not a delta")),
                        Err(error) => problems.push(format!("partition {partition} offset {offset}: {error}")),
                    }
                }
            }
            Err(error) => problems.push(format!("partition {partition}: {error}")),
        }
    }
    if let Some((_, error)) = &fresh.error {
        problems.push(format!("a fresh group's consume after the repair failed: {error}"));
    }
    if fresh.total_after != sum {
        problems.push(format!("a fresh group totals {} after the repair, the log reads {sum}", fresh.total_after));
    }
    problems
}

fn run_case(base: &Base, foreign: &Base, damage: &Damage, number: usize) -> Verdict {
    let dir = copy_data_dir(base.dir.path());
    let (root, identity) = (dir.path(), base.identity);
    damage.apply(root, foreign.dir.path());
    let mut t = Tracker::new(base, 10_000_000 + 1_000 * number as i64);
    t.status(root, identity);
    let accepted = t.append(root, identity);
    let cut = t.cut_by_writer(root, identity, &accepted);
    t.consume(root, identity, GROUP);
    t.consume(root, identity, "fresh-before-repair");
    let repaired = t.repair(root, identity);
    t.append(root, identity);
    t.consume(root, identity, GROUP);
    let fresh = t.consume(root, identity, "fresh-after-repair");
    let mut inconsistent = Vec::new();
    if repaired.is_some() && !t.actions.is_empty() {
        inconsistent = check_repaired(root, identity, &fresh);
    }
    let mut lost = t.lost(root, identity);
    lost.extend(cut.into_iter().filter(|&(partition, offset)| !t.is_named(partition, offset)));
    lost.sort_unstable();
    lost.dedup();
    let gap_named = t.gaps.iter().map(|(_, offsets)| offsets.end.saturating_sub(offsets.start)).sum();
    let outcome = if !lost.is_empty() || !t.twice.is_empty() || !inconsistent.is_empty() {
        Outcome::Failed
    } else if repaired == Some(true) && !t.gaps.is_empty() {
        Outcome::Gapped
    } else if repaired.is_some() && !t.actions.is_empty() {
        Outcome::Repaired
    } else if !t.refusals.is_empty() {
        Outcome::Refused
    } else if !t.errors.is_empty() {
        Outcome::Errored
    } else {
        Outcome::Clean
    };
    Verdict {
        outcome,
        lost,
        twice: t.twice,
        inconsistent,
        gap_named,
        refusals: t.refusals,
        errors: t.errors,
        actions: t.actions,
    }
}

// ----------------------------------------------------------------------------------------
// The campaign and its table.
// ----------------------------------------------------------------------------------------

#[derive(Clone, Copy, Default)]
struct Counts {
    cases: u64,
    refused: u64,
    repaired: u64,
    gapped: u64,
    gap_named: u64,
    clean: u64,
    errored: u64,
    lost: u64,
    twice: u64,
    inconsistent: u64,
}

impl Counts {
    fn add(&mut self, verdict: &Verdict) {
        self.cases += 1;
        match verdict.outcome {
            Outcome::Refused => self.refused += 1,
            Outcome::Repaired => self.repaired += 1,
            Outcome::Gapped => self.gapped += 1,
            Outcome::Clean => self.clean += 1,
            Outcome::Errored => self.errored += 1,
            Outcome::Failed => {}
        }
        self.gap_named += verdict.gap_named;
        self.lost += u64::from(!verdict.lost.is_empty());
        self.twice += u64::from(!verdict.twice.is_empty());
        self.inconsistent += u64::from(!verdict.inconsistent.is_empty());
    }

    fn markdown_row(&self, name: &str) -> String {
        format!(
            "| {name} | {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
            self.cases,
            self.refused,
            self.repaired,
            self.gapped,
            self.gap_named,
            self.clean,
            self.errored,
            self.lost,
            self.twice,
            self.inconsistent
        )
    }
}

#[test]
fn corruption_campaign() {
    let started = Instant::now();
    let base = build_base(SEED);
    let foreign = build_base(SEED ^ 0xF0F0_F0F0);
    assert_ne!(base.identity.id, foreign.identity.id, "the foreign log has an identity of its own");
    let layout = discover_layout(&base);
    let mut rng = SplitMix64::new(SEED);
    let all = cases(&base, &layout, &mut rng);
    let planned = all.len();
    let mut per_class = [Counts::default(); CLASSES.len()];
    let mut total = Counts::default();
    let mut failures = Vec::new();
    for (number, (class, damage)) in all.iter().enumerate() {
        if started.elapsed() >= TIME_CAP {
            break;
        }
        let verdict = run_case(&base, &foreign, damage, number);
        per_class[*class].add(&verdict);
        total.add(&verdict);
        let judged = matches!(verdict.outcome, Outcome::Failed | Outcome::Errored);
        if judged && failures.len() < 12 {
            failures.push(format!(
                "[{}] {}: lost {:?}; applied twice {:?}; inconsistent {:?}; refusals {:?}; errors {:?}; repair {:?}",
                CLASSES[*class],
                damage.describe(),
                verdict.lost,
                verdict.twice,
                verdict.inconsistent,
                verdict.refusals,
                verdict.errors,
                verdict.actions
            ));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut markdown = vec![
        format!(
            "Seed {SEED:#x}; headers discovered: data file {} bytes, start file {}, acknowledgement slot record {}, \
             identity {}; {} of {planned} planned cases ran in {seconds:.1} s (cap {} s).",
            layout.data_header,
            layout.start_len,
            layout.ack_record,
            layout.identity_len,
            total.cases,
            TIME_CAP.as_secs()
        ),
        String::new(),
        "| damage class | cases | refused | repaired | gapped (records named) | clean | errored (not a refusal) | \
         silently lost | applied twice | inconsistent after repair |"
            .to_string(),
        "|---|---|---|---|---|---|---|---|---|---|".to_string(),
    ];
    for (name, counts) in CLASSES.iter().zip(&per_class) {
        markdown.push(counts.markdown_row(name));
    }
    markdown.push(total.markdown_row("**all**"));
    let markdown = markdown.join("\n");
    for failure in &failures {
        println!("failed: {failure}");
    }
    println!("{markdown}");
    println!(
        "corruption campaign: cases {}, refused {}, repaired {}, gapped {} ({} records named), clean {}, silently \
         lost {}, applied twice {}, {seconds:.1} s",
        total.cases, total.refused, total.repaired, total.gapped, total.gap_named, total.clean, total.lost, total.twice
    );
    println!(
        "  also: errored (not a refusal) {}, inconsistent after repair {}; {} of {planned} planned cases ran",
        total.errored, total.inconsistent, total.cases
    );
    write_table(&markdown);
    for (name, counts) in CLASSES.iter().zip(&per_class) {
        assert!(
            counts.cases > 0,
            "damage class {name} produced no case (the time cap cut it): the campaign is vacuous"
        );
    }
    assert_eq!(total.lost, 0, "acknowledged records silently lost:\n{}", failures.join("\n"));
    assert_eq!(total.twice, 0, "records applied twice:\n{}", failures.join("\n"));
    assert_eq!(total.inconsistent, 0, "repaired logs inconsistent:\n{}", failures.join("\n"));
    // Every case ends refused in one line, repaired, gapped on request or clean: an error that
    // is not a refusal (exit 2, "bad input") is the wrong answer to damaged data.
    assert_eq!(total.errored, 0, "damage answered by an error that is not a refusal:\n{}", failures.join("\n"));
}

/// With `CORRUPTION_TABLE=write`, replaces the table between the markers of
/// docs/corruption.md with this run's (a test run leaves the tree as it found it otherwise).
fn write_table(markdown: &str) {
    if std::env::var("CORRUPTION_TABLE").as_deref() != Ok("write") {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/corruption.md");
    let Ok(text) = std::fs::read_to_string(&path) else { return };
    let (begin, end) = ("<!-- table:begin -->", "<!-- table:end -->");
    let (Some(from), Some(to)) = (text.find(begin), text.find(end)) else { return };
    let updated = format!("{}{begin}\n{markdown}\n{}", &text[..from], &text[to..]);
    if updated != text {
        std::fs::write(&path, updated).expect("write docs/corruption.md");
    }
}

// ----------------------------------------------------------------------------------------
// Three reported losses, reproduced: a flipped newest acknowledgement slot, swapped and
// foreign partition files, and a flipped byte in the middle of a partition.
// ----------------------------------------------------------------------------------------

/// A data directory with one partition, as `consumer init`, and its identity.
fn one_partition() -> (tempfile::TempDir, LogIdentity) {
    let dir = temp_dir();
    let identity = init(dir.path(), 1);
    (dir, identity)
}

fn append_all(root: &Path, identity: LogIdentity, batches: &[(i64, usize)], single: bool) {
    let (mut log, _) = Log::open_writer(&log_dir(root), identity).expect("open the writer");
    for &(delta, count) in batches {
        if single {
            for _ in 0..count {
                log.append(0, &encode_delta(delta)).expect("append");
            }
        } else {
            log.append_batch(0, &vec![encode_delta(delta); count]).expect("append a batch");
        }
    }
}

/// The byte position of record `offset`'s last payload byte, in a partition file whose records
/// all have 8-byte payloads (so every frame has the same length).
fn last_payload_byte(root: &Path, records: u64, offset: u64) -> u64 {
    let header = discover_data_header();
    let frame = (file_len(&partition_file(root, 0, "log")) - header) / records;
    header + offset * frame + frame - 1
}

fn discover_data_header() -> u64 {
    let fresh = temp_dir();
    Log::init(&log_dir(fresh.path()), 1).expect("a fresh log");
    file_len(&partition_file(fresh.path(), 0, "log"))
}

/// Which of `offsets` of partition 0 read back with `delta`.
fn unreadable(root: &Path, identity: LogIdentity, offsets: Range<u64>, delta: i64) -> Vec<u64> {
    let mut log = Log::open_reader(&log_dir(root), identity).expect("open a reader");
    offsets
        .filter(|&offset| log.read(0, offset).ok().and_then(|record| decode_delta(&record.payload)) != Some(delta))
        .collect()
}

/// After `init` and two `append --delta 1 --count 5`, byte 33 of
/// `log/partition-0.ack` (in the newest slot) is flipped: the next append keeps all 10 records,
/// and a new group totals 110 after appending delta 100.
#[test]
fn a_flipped_newest_ack_slot_loses_no_acknowledged_record() {
    let (dir, identity) = one_partition();
    let root = dir.path();
    append_all(root, identity, &[(1, 5), (1, 5)], false);
    flip(&partition_file(root, 0, "ack"), 33, 0xFF);
    let (mut log, tails) = Log::open_writer(&log_dir(root), identity).expect("the next append opens the log");
    let offset = log.append(0, &encode_delta(100)).expect("the next append");
    drop(log);
    assert_eq!(unreadable(root, identity, 0..10, 1), Vec::<u64>::new(), "records lost (the writer cut {tails:?})");
    assert_eq!(offset, 10, "the append must follow the 10 acknowledged records (the writer cut {tails:?})");
    consume_once(root, identity, "new").expect("a new group consumes");
    let total = open_store(root).expect("the store").total("new").expect("its total");
    assert_eq!(total, 110, "a new group totals every acknowledged record and the new one");
}

/// Partitions' files swapped (each kind alone and all together) or replaced by
/// another log's are refused, never applied.
#[test]
fn swapped_and_foreign_partition_files_are_refused_never_applied() {
    let base = build_base(SEED);
    let foreign = build_base(SEED ^ 0xF0F0_F0F0);
    let mut damages: Vec<Damage> = KINDS.iter().map(|kind| Damage::Swap(vec![kind])).collect();
    damages.push(Damage::Swap(KINDS.to_vec()));
    damages.extend((0..PARTITIONS).map(Damage::Foreign));
    let mut failures = Vec::new();
    for (number, damage) in damages.iter().enumerate() {
        let verdict = run_case(&base, &foreign, damage, number);
        if verdict.outcome != Outcome::Refused || !verdict.twice.is_empty() || !verdict.lost.is_empty() {
            failures.push(format!("{}: {verdict:?}", damage.describe()));
        }
    }
    assert!(failures.is_empty(), "not refused:\n{}", failures.join("\n"));
}

/// One flipped bit in record 100 of 200 single-record appends. Readers
/// read 0..100 and stop there; `repair` without the gap refuses (or names exactly 100..101 and
/// keeps 101..200); `repair --gap` keeps 101..200 readable and records the gap for the group.
#[test]
fn a_flipped_bit_in_the_middle_keeps_the_records_after_it() {
    let (dir, identity) = one_partition();
    let root = dir.path();
    append_all(root, identity, &[(1, 200)], true);
    consume_once(root, identity, GROUP).expect("the group consumes the log");
    let at = last_payload_byte(root, 200, 100);
    flip(&partition_file(root, 0, "log"), at, 0x01);

    assert_eq!(unreadable(root, identity, 0..100, 1), Vec::<u64>::new(), "readers read 0..100");
    let mut log = Log::open_reader(&log_dir(root), identity).expect("open a reader");
    assert!(log.read(0, 100).is_err(), "readers stop before the damaged record 100");
    drop(log);

    let plain = copy_data_dir(root);
    let mut store = open_store(plain.path()).expect("the store");
    match repair(&log_dir(plain.path()), identity, &mut store, false) {
        Err(RepairFailure::Refused(_)) => {}
        Ok(report) => {
            assert_eq!(report.named, vec![(0, 100..101)], "repair names exactly the damaged record: {report:?}");
            let lost = unreadable(plain.path(), identity, 101..200, 1);
            assert_eq!(lost, Vec::<u64>::new(), "repair without the gap removed intact records: {report:?}");
        }
        Err(failure) => panic!("repair without the gap: {failure:?}"),
    }

    let mut store = open_store(root).expect("the store");
    let report = repair(&log_dir(root), identity, &mut store, true).expect("repair --gap");
    drop(store);
    assert_eq!(report.gaps, vec![(0, 100..101)], "the gap is the damaged record: {report:?}");
    assert!(report.named.iter().all(|(_, offsets)| offsets.is_empty()), "repair --gap removed records: {report:?}");
    assert_eq!(unreadable(root, identity, 101..200, 1), Vec::<u64>::new(), "repair --gap keeps 101..200");
    assert_eq!(unreadable(root, identity, 0..100, 1), Vec::<u64>::new(), "repair --gap keeps 0..100");
    // The group had read record 100 before the damage: it skips nothing, and no row claims it
    // did. A group that reaches the gap records its skip.
    assert_eq!(resets(root, GROUP), vec![], "the group read record 100 before the damage");
    consume_once(root, identity, "fresh").expect("a fresh group consumes the repaired log");
    assert_eq!(open_store(root).expect("the store").total("fresh").expect("total"), 199, "every record but the gap");
    assert_eq!(resets(root, "fresh"), vec![(0, 100..101)], "the fresh group's skip of the gap is recorded");
}

/// One byte flipped inside a 1,000-record batch names at most that
/// batch, and the records after it are kept.
#[test]
fn a_flipped_byte_inside_a_batch_names_at_most_that_batch() {
    let (dir, identity) = one_partition();
    let root = dir.path();
    append_all(root, identity, &[(1, 10)], true);
    append_all(root, identity, &[(2, 1000)], false);
    append_all(root, identity, &[(3, 10)], true);
    consume_once(root, identity, GROUP).expect("the group consumes the log");
    let at = last_payload_byte(root, 1020, 510) - 3;
    flip(&partition_file(root, 0, "log"), at, 0xFF);
    let mut store = open_store(root).expect("the store");
    let report = match repair(&log_dir(root), identity, &mut store, false) {
        Ok(report) => report,
        Err(RepairFailure::Refused(_)) => repair(&log_dir(root), identity, &mut store, true).expect("repair --gap"),
        Err(failure) => panic!("repair: {failure:?}"),
    };
    drop(store);
    let batch = 10..1010;
    for (_, offsets) in report.named.iter().chain(&report.gaps) {
        assert!(
            offsets.start >= batch.start && offsets.end <= batch.end,
            "repair named {offsets:?}, beyond the damaged batch {batch:?}: {report:?}"
        );
    }
    assert_eq!(unreadable(root, identity, 0..10, 1), Vec::<u64>::new(), "the records before the batch are kept");
    assert_eq!(unreadable(root, identity, 1010..1020, 3), Vec::<u64>::new(), "the records after the batch are kept");
}
