//! Incarnations of one owner: every start of an owner claims a new epoch for the
//! partitions the store assigns to it, so an earlier incarnation still running is a zombie
//! whose next fenced write is `Fenced`; `--start-epoch stored` keeps the trap (the model's
//! fenced-stored-epoch row), where two live incarnations share an epoch and both apply.
//! Each scenario runs on SQLite and on PostgreSQL (a private cluster; skipped, printing why,
//! only when no server binary exists and `CI` is not set).

mod common;

use common::{describe, pg, stderr, DataDir, FENCED};
use consumer::crash::CrashPlan;
use consumer::log::{encode_delta, Log};
use consumer::owner::{OnFenced, Outcome, Owner, Settings, FIRST_OWNER};
use consumer::store::{Location, Store, StoreOptions};
use consumer::strategy::{StartPolicy, Step, StepKind, Strategy};
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

/// The store backends every scenario runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

/// An initialised single-partition data directory holding `count` records of `delta`; `None`
/// when the backend cannot run here (PostgreSQL without a server binary, `CI` unset).
fn data_dir(backend: Backend, case: &str, delta: i64, count: u64) -> Option<DataDir> {
    let dir = match backend {
        Backend::Sqlite => DataDir::new(case, 1),
        Backend::Postgres => DataDir::postgres(case, 1, &pg::database()?),
    };
    dir.append(case, 0, delta, count);
    Some(dir)
}

/// The records every copy of the simultaneous-start scenario consumes, and its batch: 150
/// transactions per copy that runs to the end, so that each case takes about a second even
/// where every SQLite commit waits for an fsync.
const RECORDS: u64 = 3_000;
const BATCH: &str = "20";

/// What `consume` prints on stderr, as its only line, when a fenced write stopped it.
fn fenced_line(current: i64, held: i64) -> String {
    format!(
        "fenced: group g partition 0 is at epoch {current}, this owner holds epoch {held} \
         (another owner, or a newer incarnation of this one, took it)\n"
    )
}

/// Checks one copy's ending: exit 0 with nothing on stderr, or exit 4 (a loser) with exactly
/// one line saying it was fenced, at an epoch some start claimed (2 ..= 1 + copies) below the
/// stored one. Returns whether it lost.
fn check_copy(case: &str, copies: i64, output: &Output) -> bool {
    let error = stderr(output);
    match output.status.code() {
        Some(0) => {
            assert_eq!(error, "", "case '{case}': a copy that ran to the end reports nothing\n{}", describe(output));
            false
        }
        Some(FENCED) => {
            let fenced = (2..=1 + copies).any(|held| (held + 1..=1 + copies).any(|c| error == fenced_line(c, held)));
            assert!(fenced, "case '{case}': a loser prints exactly one `fenced:` line\n{}", describe(output));
            true
        }
        _ => panic!("case '{case}': every copy ends with 0 or 4 (fenced)\n{}", describe(output)),
    }
}

/// `copies` processes of `consume --strategy atomic-fenced` for owner o0, started together,
/// over 3,000 records of +1.
fn run_simultaneous_copies(backend: Backend, copies: usize) -> Option<()> {
    let case = format!("{copies} simultaneous copies of o0 on {backend:?}");
    let case = case.as_str();
    let dir = data_dir(backend, case, 1, RECORDS)?;
    let args = ["--group", "g", "--strategy", "atomic-fenced", "--batch", BATCH];
    let children: Vec<_> = (0..copies)
        .map(|_| dir.command("consume", &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn())
        .collect::<Result<_, _>>()
        .expect("the consumer binary starts");
    let outputs: Vec<Output> = children.into_iter().map(|c| c.wait_with_output().expect("reap a copy")).collect();
    let losers = outputs.iter().filter(|output| check_copy(case, copies as i64, output)).count();
    // The copy whose start claimed last is never fenced: at least one runs to the end.
    assert!(losers < copies, "case '{case}': {losers} of {copies} copies lost; the last to start must win");
    assert_eq!(dir.state(case, "g"), (RECORDS as i64, RECORDS), "case '{case}': every record exactly once");
    // Every start claimed exactly one epoch, whoever won.
    let row = dir.progress(case, "g");
    assert_eq!(
        (row["epoch"].as_i64(), row["owner"].as_str()),
        (Some(1 + copies as i64), Some(FIRST_OWNER)),
        "case '{case}': each of the {copies} starts claimed one epoch: {row}"
    );
    Some(())
}

/// The run, for 1 to 4 copies: the total is exactly 3,000 at next offset 3,000, every
/// loser exits 4 with one `fenced:` line, and the stored epoch counts the starts.
#[test]
fn simultaneous_copies_of_one_owner_count_every_record_once() {
    for backend in BACKENDS {
        for copies in 1..=4 {
            if run_simultaneous_copies(backend, copies).is_none() {
                break;
            }
        }
    }
}

/// One deterministic two-incarnation scenario on three records of +5: the earlier incarnation
/// of o0 (a worker) fetches record 0; a newer one (`consume`) starts and consumes the log; then
/// the earlier one applies its record.
struct TwoIncarnations {
    start: StartPolicy,
    /// The earlier incarnation's reply to `apply-atomic 0 0`.
    reply: &'static str,
    /// (total, next_offset) after it.
    after: (i64, u64),
    /// The stored epoch at the end.
    epoch: i64,
}

fn run_two_incarnations(backend: Backend, case: &TwoIncarnations) -> Option<()> {
    let name = format!("an earlier incarnation applies after a newer one, start {}, {backend:?}", case.start);
    let name = name.as_str();
    let dir = data_dir(backend, name, 5, 3)?;
    let start = ["--start-epoch", case.start.name()];
    let mut earlier = dir.worker_with(name, "g", "o0", "atomic-fenced", &start);
    earlier.expect("fetch 0 0", "ok fetched 1");
    let args = ["--group", "g", "--strategy", "atomic-fenced", "--start-epoch", case.start.name()];
    dir.consume(name, &args, 0);
    assert_eq!(dir.state(name, "g"), (15, 3), "case '{name}': the newer incarnation consumed the log");
    earlier.expect("apply-atomic 0 0", case.reply);
    let fenced = case.reply.starts_with("ok fenced");
    let holds = earlier.state()["leases"].get("0").is_some();
    assert_eq!(holds, !fenced, "case '{name}': a fenced incarnation drops the partition, another keeps it");
    earlier.quit();
    assert_eq!(dir.state(name, "g"), case.after, "case '{name}': (total, next_offset) at the end");
    assert_eq!(dir.progress(name, "g")["epoch"], case.epoch, "case '{name}': the stored epoch");
    Some(())
}

/// With claims the earlier incarnation holds epoch 2, the newer one 3, and the stale write is
/// fenced; at the stored epoch (the trap) both hold epoch 1 and record 0 counts twice while
/// the checkpoint moves back to 1.
#[test]
fn an_earlier_incarnation_is_fenced_unless_it_shares_the_stored_epoch() {
    let cases = [
        TwoIncarnations { start: StartPolicy::ClaimEpoch, reply: "ok fenced 2 3", after: (15, 3), epoch: 3 },
        TwoIncarnations { start: StartPolicy::StoredEpoch, reply: "ok applied 1 skipped 0", after: (20, 1), epoch: 1 },
    ];
    for backend in BACKENDS {
        for case in &cases {
            if run_two_incarnations(backend, case).is_none() {
                return;
            }
        }
    }
}

/// A store and a log for in-process owners: `records` records of +1 in each partition.
struct InProcess {
    _temp: tempfile::TempDir,
    log_dir: PathBuf,
    location: Location,
}

impl InProcess {
    fn new(backend: Backend, partitions: u32, records: u64) -> Option<InProcess> {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let location = match backend {
            Backend::Sqlite => Location::Sqlite(temp.path().join("store.db")),
            Backend::Postgres => Location::Postgres(pg::database()?),
        };
        let log_dir = temp.path().join("log");
        let identity = Log::init(&log_dir, partitions).expect("create the log");
        Store::create_at(&location, identity, StoreOptions::default()).expect("create the store");
        let (mut log, _) = Log::open_writer(&log_dir, identity).expect("open the log");
        for partition in 0..partitions {
            log.append_batch(partition, &vec![encode_delta(1); records as usize]).expect("append");
        }
        Some(InProcess { _temp: temp, log_dir, location })
    }

    fn store(&self) -> Store {
        Store::open_at(&self.location, StoreOptions::default()).expect("open the store")
    }

    /// Starts an atomic-fenced owner (claiming its epochs, or at the stored ones).
    fn owner(&self, name: &str, start: StartPolicy) -> Owner {
        let store = self.store();
        let log = Log::open_reader(&self.log_dir, store.log_identity()).expect("open the log");
        let settings = Settings { start, ..Settings::new(Strategy::AtomicFenced) };
        Owner::start(store, log, "g", name, settings, CrashPlan::none()).expect("start the owner")
    }

    /// (total, next offset per partition).
    fn state(&self) -> (i64, Vec<u64>) {
        let store = self.store();
        let next = (0..store.partitions()).map(|p| store.progress("g", p).expect("progress").next_offset);
        (store.total("g").expect("total"), next.collect())
    }
}

/// `consume`'s stop: o0 holds partitions 0 and 1 (three records each) when partition 0 moves to
/// o1. Under `OnFenced::Stop` the run ends at the fenced write and partition 1 is not touched;
/// under `DropPartition` (follow mode) it goes on with partition 1.
#[test]
fn a_fenced_run_stops_at_once_or_drops_only_that_partition() {
    let cases = [(OnFenced::Stop, 2, (0, vec![0, 0])), (OnFenced::DropPartition, 2 + 6, (3, vec![0, 3]))];
    for backend in BACKENDS {
        for (on_fenced, steps, after) in cases.clone() {
            let case = format!("{on_fenced:?} on {backend:?}");
            let Some(system) = InProcess::new(backend, 2, 3) else { return };
            let mut owner = system.owner("o0", StartPolicy::ClaimEpoch);
            assert_eq!(system.store().claim("g", 0, "o1").expect("claim"), 3, "case '{case}': the rebalance");
            let taken = owner.run_to_end(on_fenced).expect("run");
            let fenced = Step { kind: StepKind::ApplyAtomic, partition: 0, offset: 0 };
            assert_eq!(taken[1], (fenced, Outcome::Fenced { held: 2, current: 3 }), "case '{case}': {taken:?}");
            assert_eq!(taken.len(), steps, "case '{case}': the steps taken: {taken:?}");
            assert_eq!(system.state(), after, "case '{case}': (total, next offsets)");
            assert!(owner.leases().get(&0).is_none(), "case '{case}': the fenced partition is dropped");
        }
    }
}

/// Follow mode's adoption claims: the earlier incarnation A1 of o0 (epoch 2) is fenced by a
/// newer one A2 (epoch 3) that holds record 0 in flight; A1, following the group, adopts the
/// row naming o0 and consumes the log. Its adoption claims epoch 4, so A2's stale record is
/// fenced; had it adopted at the stored epoch 3, A2 would apply record 0 a second time. At the
/// stored epoch (the trap) both hold epoch 1 from the start and record 0 counts twice.
#[test]
fn follow_mode_adopts_a_partition_at_a_new_epoch() {
    // (start policy, the newer one's stale apply, (total, next offset), the stored epoch).
    let cases = [
        (StartPolicy::ClaimEpoch, Outcome::Fenced { held: 3, current: 4 }, (3, vec![3]), 4),
        (StartPolicy::StoredEpoch, Outcome::Applied { applied: 1, skipped: 0 }, (4, vec![1]), 1),
    ];
    for backend in BACKENDS {
        for (start, outcome, after, epoch) in cases.clone() {
            let case = format!("follow mode, start {start}, {backend:?}");
            let Some(system) = InProcess::new(backend, 1, 3) else { return };
            let mut earlier = system.owner("o0", start);
            let mut newer = system.owner("o0", start);
            let fetch = Step { kind: StepKind::Fetch, partition: 0, offset: 0 };
            assert_eq!(newer.perform(fetch).expect("fetch"), Outcome::Fetched { count: 1 }, "case '{case}'");
            earlier.run_following(Duration::from_millis(1)).expect("follow to the end");
            let apply = Step { kind: StepKind::ApplyAtomic, ..fetch };
            assert_eq!(newer.perform(apply).expect("apply"), outcome, "case '{case}': the newer one's stale record");
            assert_eq!(system.state(), after, "case '{case}': (total, next offset)");
            let row = system.store().progress("g", 0).expect("progress");
            assert_eq!(row.epoch, epoch, "case '{case}': the stored epoch");
        }
    }
}
