//! Non-vacuity: a deliberately broken consumer (a test-only switch in the real code path) is
//! reported as divergent, at the step where the bug first shows. One table, `CASES`: each
//! mutation, what it removes, and the corpus traces that must catch it; for every fenced write
//! a zombie's trace and an earlier incarnation's. The sweep then replays every trace of every
//! row that performs a fenced write under that write's mutation: it diverges exactly at the
//! first step where a stale owner attempts that write (and conforms where none does), and each
//! such row is caught by a zombie and by an earlier incarnation.

#[path = "../../impl/tests/common/pg.rs"]
#[allow(dead_code)]
mod pg;

use conformance::driver::Mode;
use conformance::fences::{fenced_steps, stale_owners_of, writes_of, Stale};
use conformance::harness::Options;
use conformance::replay::{replay, ReplayFailure};
use consumer::owner::Mutation;
use consumer::strategy::FencedWrite;
use model::trace::Trace;
use model::{Action, Strategy};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Each test's cap. Measured in a debug build on a shared 2-core machine: the sweep (every
/// trace of the affected rows, in process, once per fence mutation) 2.1 s, the table 0.2 s in
/// process, 0.3 s as worker processes and 4.3 s on PostgreSQL (its server's start included).
/// Past the cap a test fails rather than letting CI run long.
const CAP: Duration = Duration::from_secs(60);

/// What a mutation removes from the real consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removes {
    /// The epoch check of one kind of fenced write.
    Fence(FencedWrite),
    /// atomic-cas's comparison with the stored next offset.
    Cas,
    /// email-idempotency-key's idempotency key.
    EmailKey,
}

/// A corpus trace that must catch a mutation: the stale owner whose step shows the bug, the
/// step (from 1), and what the failure shows there (a line of the real side of the full
/// states' diff, or the real system's error).
struct Catch {
    file: &'static str,
    stale: Stale,
    step: usize,
    shows: &'static str,
}

const fn catch(file: &'static str, stale: Stale, step: usize, shows: &'static str) -> Catch {
    Catch { file, stale, step, shows }
}

use Stale::{EarlierIncarnation, Zombie};

/// Every mutation, once, in `Mutation::ALL`'s order: what it removes, and the traces that catch it.
const CASES: [(Mutation, Removes, &[Catch]); 9] = [
    (
        Mutation::NoFence(FencedWrite::ApplyAtomic),
        Removes::Fence(FencedWrite::ApplyAtomic),
        &[
            // The zombie's transaction lands instead of aborting: the total doubles.
            catch("scenario--zombie-atomic-fenced.json", Zombie, 6, "+                 total: 10,"),
            catch("atomic-fenced--paused-fenced.json", EarlierIncarnation, 4, "+                 total: 5,"),
        ],
    ),
    (
        Mutation::NoFence(FencedWrite::Attempts),
        Removes::Fence(FencedWrite::Attempts),
        &[
            // The stale attempt is counted: the durable count goes up under the new owner.
            catch("atomic-dlq--zombie-fenced--attempts.json", Zombie, 7, "+                 attempts: {"),
            catch("atomic-dlq--paused-fenced--attempts.json", EarlierIncarnation, 7, "+                 attempts: {"),
            // skip-poison's attempt writes nothing, but the owner, not told, gives the record up.
            catch(
                "skip-poison--zombie-fenced--attempts.json",
                Zombie,
                7,
                "+                                     1: Exhausted,",
            ),
        ],
    ),
    (
        Mutation::NoFence(FencedWrite::DeadLetter),
        Removes::Fence(FencedWrite::DeadLetter),
        &[
            // The exhausted record is dead-lettered and committed past by the stale owner.
            catch("atomic-dlq--zombie-fenced--dead-letter.json", Zombie, 9, "+                 dead_letters: {"),
            catch(
                "atomic-dlq--paused-fenced--dead-letter.json",
                EarlierIncarnation,
                9,
                "+                 dead_letters: {",
            ),
        ],
    ),
    (
        Mutation::NoFence(FencedWrite::ResetOffset),
        Removes::Fence(FencedWrite::ResetOffset),
        &[
            // The stale owner records a reset and moves the stored offset to the log start.
            catch("reset-earliest--zombie-fenced--reset-offset.json", Zombie, 4, "+                 resets: {"),
            catch(
                "reset-earliest--paused-fenced--reset-offset.json",
                EarlierIncarnation,
                4,
                "+                 resets: {",
            ),
        ],
    ),
    (
        Mutation::NoFence(FencedWrite::ProduceOutput),
        Removes::Fence(FencedWrite::ProduceOutput),
        &[
            // The output section appends: the zombie's batch is produced, not dropped.
            catch("txn-fenced--zombie-fenced--produce-output.json", Zombie, 4, "+             Data {"),
            catch("txn-fenced--paused-fenced.json", EarlierIncarnation, 4, "+             Data {"),
        ],
    ),
    (
        Mutation::NoFence(FencedWrite::CommitTxn),
        Removes::Fence(FencedWrite::CommitTxn),
        &[
            // The newer take recorded the stale transaction aborted: committing it too breaks
            // the `txns` table's key (on either backend), so the unfenced commit fails instead
            // of landing.
            catch("txn-fenced--zombie-fenced--commit-txn.json", Zombie, 5, "(in: INSERT INTO txns"),
            catch("scenario--zombie-transaction-fenced.json", EarlierIncarnation, 8, "(in: INSERT INTO txns"),
        ],
    ),
    (
        Mutation::NoFence(FencedWrite::CommitOffset),
        Removes::Fence(FencedWrite::CommitOffset),
        &[
            // The broker rows' stale commit lands instead of being refused: the stored next
            // offset moves (and the stale owner keeps its lease).
            catch("broker-effect-first--zombie-fenced.json", Zombie, 5, "+                         next_offset: 1,"),
            catch(
                "broker-effect-first--paused-fenced--commit-offset.json",
                EarlierIncarnation,
                5,
                "+                         next_offset: 1,",
            ),
        ],
    ),
    (
        Mutation::NoCas,
        Removes::Cas,
        // The zombie's record below the stored offset is applied instead of skipped.
        &[catch("scenario--zombie-atomic-cas.json", Zombie, 6, "+                 total: 10,")],
    ),
    (
        Mutation::NoEmailKey,
        Removes::EmailKey,
        // The second incarnation's email of record 0 carries no key: delivered twice, not
        // dropped (the diff shows the inbox's count of record (0, 0): `): 2`, the model's 1).
        &[catch("scenario--email-key-drops-the-repeat.json", EarlierIncarnation, 6, "+                 ): 2,")],
    ),
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces")
}

fn corpus(name: &str) -> Trace {
    conformance::corpus::load(&corpus_dir().join(name)).expect("corpus file")
}

fn options(mode: Mode, mutation: Option<Mutation>) -> Options {
    let worker = Some(PathBuf::from(env!("CARGO_BIN_EXE_conformance")));
    Options { mutation, worker_exe: worker, ..Options::new(mode) }
}

/// The step at which a replay failed and the action there, for a failure of the real system
/// against the model (a state that differs, or a step the real system failed).
fn failed_at(failure: &ReplayFailure) -> Option<(usize, Option<Action>)> {
    match failure {
        ReplayFailure::Divergence { step, action, .. } | ReplayFailure::RealFailed { step, action, .. } => {
            Some((*step, *action))
        }
        ReplayFailure::ModelUnreachable { .. }
        | ReplayFailure::VerdictMismatch { .. }
        | ReplayFailure::NotReached { .. }
        | ReplayFailure::NotAtomic { .. }
        | ReplayFailure::PowerCutLoses { .. }
        | ReplayFailure::RaceDiverges { .. }
        | ReplayFailure::RestartDiverges { .. }
        | ReplayFailure::OutsideStore { .. }
        | ReplayFailure::MappedStore { .. }
        | ReplayFailure::Misreported { .. } => None,
    }
}

/// Replays `trace` with `options` (a mutation among them) and checks it fails at `step`, the
/// trace's own action there; returns the failure's text.
fn diverges_at(name: &str, trace: &Trace, options: &Options, step: usize) -> String {
    let (mutation, mode) = (options.mutation.map_or("no mutation", Mutation::name), options.mode);
    let failure = match replay(trace, options) {
        Ok(_) => panic!("{name} with {mutation} in {mode:?}: conforms, expected a divergence at step {step}"),
        Err(failure) => failure,
    };
    let text = failure.to_string();
    let at = failed_at(&failure);
    let expected = (step, Some(trace.actions[step - 1]));
    assert_eq!(at, Some(expected), "{name} with {mutation} in {mode:?}: failed elsewhere:\n{text}");
    text
}

/// The first step at which a stale owner of `trace` attempts `write` and is fenced, and who.
fn first_fenced(trace: &Trace, write: FencedWrite) -> Option<(usize, Stale)> {
    let steps = fenced_steps(&trace.config, &trace.actions).expect("a corpus trace replays in the model");
    steps.into_iter().find(|step| step.write == write).map(|step| (step.step, step.stale))
}

#[test]
fn the_table_names_every_mutation_once_with_what_it_removes() {
    let mutations: Vec<Mutation> = CASES.iter().map(|(mutation, _, _)| *mutation).collect();
    assert_eq!(mutations, Mutation::ALL, "one row per mutation, in Mutation::ALL's order");
    for (mutation, removes, catches) in CASES {
        let expected = match mutation {
            Mutation::NoFence(write) => Removes::Fence(write),
            Mutation::NoCas => Removes::Cas,
            Mutation::NoEmailKey => Removes::EmailKey,
        };
        assert_eq!(removes, expected, "{mutation}");
        assert_eq!(mutation.name().parse::<Mutation>(), Ok(mutation), "{mutation}'s name parses back");
        // Every fence is shown to stop both kinds of stale owner.
        if let Removes::Fence(_) = removes {
            for stale in Stale::ALL {
                assert!(catches.iter().any(|c| c.stale == stale), "{mutation}: no {stale} trace catches it");
            }
        }
    }
    assert_eq!("no-fence".parse::<Mutation>(), Ok(Mutation::NoFence(FencedWrite::ApplyAtomic)), "the old name");
    let refused = "no-fence:apply-effect".parse::<Mutation>().expect_err("apply-effect is never fenced");
    for mutation in Mutation::ALL {
        assert!(refused.contains(mutation.name()), "the error lists {mutation}: {refused}");
    }
}

/// Replays every catch of `CASES` in `mode` (on PostgreSQL when `postgres` is a server's URL):
/// under its mutation it fails at its step, showing what the table says; without, it conforms.
fn check_catches(mode: Mode, postgres: Option<&str>) {
    let on = |mutation| Options { postgres: postgres.map(str::to_string), ..options(mode, mutation) };
    for (mutation, removes, catches) in CASES {
        for catch in catches {
            let trace = corpus(catch.file);
            // The table's step is where the model puts the stale owner's fenced write.
            if let Removes::Fence(write) = removes {
                let found = first_fenced(&trace, write);
                assert_eq!(found, Some((catch.step, catch.stale)), "{}: the model's first fenced {write}", catch.file);
            }
            let text = diverges_at(catch.file, &trace, &on(Some(mutation)), catch.step);
            assert!(
                text.contains(catch.shows),
                "{} with {mutation}: should show '{}':\n{text}",
                catch.file,
                catch.shows
            );
            // The same trace conforms without the mutation, so the divergence is the bug's.
            let clean = replay(&trace, &on(None));
            assert!(clean.is_ok(), "{} must conform without {mutation} in {mode:?}: {clean:?}", catch.file);
        }
    }
}

#[test]
fn broken_consumers_diverge_at_the_step_that_shows_the_bug() {
    let started = Instant::now();
    check_catches(Mode::InProcess, None);
    assert!(started.elapsed() < CAP, "the table took {:?}, past the cap of {CAP:?}", started.elapsed());
}

/// The first catch of every mutation as worker processes: the real binary's hidden flag, the
/// mutation's name on its command line.
#[test]
fn broken_worker_processes_diverge_at_the_same_step() {
    let started = Instant::now();
    for (mutation, _, catches) in CASES {
        let catch = &catches[0];
        let trace = corpus(catch.file);
        let text = diverges_at(catch.file, &trace, &options(Mode::Process, Some(mutation)), catch.step);
        assert!(text.contains(catch.shows), "{} with {mutation}: should show '{}':\n{text}", catch.file, catch.shows);
        let clean = replay(&trace, &options(Mode::Process, None));
        assert!(clean.is_ok(), "{} must conform without {mutation} as worker processes: {clean:?}", catch.file);
    }
    assert!(started.elapsed() < CAP, "the worker processes took {:?}, past the cap of {CAP:?}", started.elapsed());
}

/// The fence mutations act on the PostgreSQL store too (its fenced writes lock the progress
/// row and check the epoch; a mutation leaves that one write only the lock): the whole table,
/// in process, on a private server. Skips (printing why) only when no PostgreSQL server binary
/// exists; with `CI` set it fails instead.
#[test]
fn broken_consumers_diverge_on_postgres_too() {
    let Some(server) = pg::server() else { return };
    let started = Instant::now();
    check_catches(Mode::InProcess, Some(&server.url("postgres")));
    assert!(started.elapsed() < CAP, "the table on PostgreSQL took {:?}, past the cap of {CAP:?}", started.elapsed());
}

/// The acceptance case on its own: a consumer whose dead-letter write alone is unfenced (a
/// foreign atomic-dlq consumer, say) is caught by the corpus, by a zombie and by an earlier
/// incarnation; without the corpus's fence witnesses no trace of atomic-dlq reached the write.
#[test]
fn an_unfenced_dead_letter_is_caught_by_the_corpus() {
    let mutation: Mutation = "no-fence:dead-letter".parse().expect("a mutation");
    let mut caught = Vec::new();
    for path in conformance::corpus::expand(&[corpus_dir()]).expect("tests/traces is readable") {
        let trace = conformance::corpus::load(&path).expect("a corpus trace loads");
        if trace.config.strategy != Strategy::AtomicDlq {
            continue;
        }
        let name = path.file_name().expect("a file").to_string_lossy().into_owned();
        match first_fenced(&trace, FencedWrite::DeadLetter) {
            Some((step, stale)) => {
                diverges_at(&name, &trace, &options(Mode::InProcess, Some(mutation)), step);
                caught.push((name, stale));
            }
            None => assert!(replay(&trace, &options(Mode::InProcess, Some(mutation))).is_ok(), "{name} conforms"),
        }
    }
    let expected = [
        ("atomic-dlq--paused-fenced--dead-letter.json".to_string(), EarlierIncarnation),
        ("atomic-dlq--zombie-fenced--dead-letter.json".to_string(), Zombie),
    ];
    assert_eq!(caught, expected, "the atomic-dlq traces that catch an unfenced dead-letter");
}

/// Every fence mutation against every trace of every row that performs that fenced write:
/// a trace diverges exactly where a stale owner first attempts the write, and conforms when no
/// stale owner does (the mutation changes nothing else); and every such row is caught by a
/// zombie and, where every start claims an epoch, by an earlier incarnation.
#[test]
fn every_fenced_write_of_every_row_is_caught_by_both_stale_owners() {
    let started = Instant::now();
    let mut traces: Vec<(String, Trace)> = Vec::new();
    for path in conformance::corpus::expand(&[corpus_dir()]).expect("tests/traces is readable") {
        let name = path.file_name().expect("a file").to_string_lossy().into_owned();
        traces.push((name, conformance::corpus::load(&path).expect("a corpus trace loads")));
    }
    // Per (row, write): the stale owners whose traces caught the write's mutation.
    let mut caught: BTreeMap<(Strategy, FencedWrite), Vec<Stale>> = BTreeMap::new();
    for write in FencedWrite::ALL {
        let mutation = Mutation::NoFence(write);
        let rows: Vec<Strategy> = Strategy::ALL.into_iter().filter(|row| writes_of(*row).contains(&write)).collect();
        assert!(!rows.is_empty(), "no row performs {write}: its mutation is never witnessed");
        for (name, trace) in traces.iter().filter(|(_, trace)| rows.contains(&trace.config.strategy)) {
            let row = trace.config.strategy;
            match first_fenced(trace, write) {
                Some((step, stale)) => {
                    diverges_at(name, trace, &options(Mode::InProcess, Some(mutation)), step);
                    caught.entry((row, write)).or_default().push(stale);
                }
                None => {
                    let result = replay(trace, &options(Mode::InProcess, Some(mutation)));
                    assert!(result.is_ok(), "{name} with {mutation}: no stale {write}, yet {result:?}");
                }
            }
            assert!(started.elapsed() < CAP, "the sweep passed the cap of {CAP:?} at {name}");
        }
        for row in rows {
            for stale in stale_owners_of(row) {
                let by = caught.get(&(row, write)).is_some_and(|stales| stales.contains(&stale));
                assert!(by, "{row}: no {stale} trace catches {mutation}: regenerate the corpus");
            }
        }
    }
}
