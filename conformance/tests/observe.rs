//! Observing a consumer's store by its own SQL (`--observe FILE`, PROTOCOL.md "Observing the
//! store"): a store role that reports the model's state instead of its store's is certified
//! while it is trusted and caught once its database is read; the examples and this consumer
//! conform with their stores read by their SQL (every query kind, on this consumer's store);
//! and a spec that cannot be used is refused before the run, in one line naming the query and
//! the column.
//!
//! Needs `python3`, and `perl` with DBD::SQLite, on PATH (`bash scripts/setup.sh` installs
//! them): without one, the examples that need it print `skipped: python3 not installed (bash
//! scripts/setup.sh installs it)` (or Perl's DBD::SQLite's) and are left out, unless `CI` is
//! set: then the test fails.

#[path = "../../tests/support/tools.rs"]
mod tools;

use conformance::driver::Mode;
use conformance::harness::Options;
use conformance::observe::ObserveSpec;
use conformance::protocol::shell_quote;
use conformance::replay::{replay_counted, Inside, ReplayFailure};
use model::Strategy;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The family's cap (each test on its own): past it a test fails rather than letting CI run
/// long. The slowest, the lying consumer's traces twice, takes about 25 s here.
const FAMILY_CAP: Duration = Duration::from_secs(180);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An example consumer's command, through the interpreter's real path (as in protocol.rs: a
/// version manager's `python3` shim would cost every kill point's reader a dozen processes);
/// `None` when Python 3 is missing (skipped, saying so).
fn python(script: &str) -> Option<String> {
    Some(example(&tools::python3()?, "examples/python", script))
}

/// The Perl example, through Perl's real path; `None` when Perl or its DBD::SQLite is missing
/// (skipped, saying so).
fn perl(script: &str) -> Option<String> {
    Some(example(&tools::perl()?, "examples/perl", script))
}

fn example(interpreter: &str, dir: &str, script: &str) -> String {
    let path = root().join(dir).join(script);
    format!("{} {}", shell_quote(interpreter), shell_quote(&path.to_string_lossy()))
}

fn spec(path: &Path) -> Arc<ObserveSpec> {
    Arc::new(ObserveSpec::load(path).unwrap_or_else(|error| panic!("{error}")))
}

fn python_spec() -> Arc<ObserveSpec> {
    spec(&root().join("examples/python/store.observe.toml"))
}

/// A corpus trace's file name and how its replay ended.
type Outcome = (String, Result<(), ReplayFailure>);

/// Replays every corpus trace of `row` (every trace when `None`) with `options`: each trace's
/// file name and outcome, and the kill points tried.
fn replay_row(options: &Options, row: Option<Strategy>) -> (Vec<Outcome>, Inside) {
    let files = conformance::corpus::expand(&[root().join("tests/traces")]).expect("tests/traces is readable");
    let (started, mut inside, mut outcomes) = (Instant::now(), Inside::default(), Vec::new());
    for path in files {
        assert!(started.elapsed() < FAMILY_CAP, "passed the cap of {FAMILY_CAP:?} at {}", path.display());
        let trace = conformance::corpus::load(&path).expect("a corpus trace loads");
        if row.is_some_and(|row| trace.config.strategy != row) {
            continue;
        }
        let name = path.file_name().expect("a file").to_string_lossy().into_owned();
        outcomes.push((name, replay_counted(&trace, options, &mut inside).map(|_| ())));
    }
    assert!(!outcomes.is_empty(), "the corpus has no trace of {row:?}");
    (outcomes, inside)
}

fn reproduce(options: &Options, name: &str) -> String {
    conformance::corpus::reproduce_command(&root().join("tests/traces").join(name), options)
}

#[test]
fn a_lying_store_role_is_certified_while_trusted_and_caught_once_its_database_is_read() {
    let Some(command) = python("lying_store.py") else { return };
    let trusted = Options { command: Some(command), inside_step: true, ..Options::new(Mode::Protocol) };
    let (outcomes, inside) = replay_row(&trusted, Some(Strategy::AtomicFenced));
    for (name, outcome) in &outcomes {
        assert!(outcome.is_ok(), "{name} must conform while the store role is trusted: {outcome:?}");
    }
    assert!(inside.judged > 0, "kill points inside steps struck: {inside:?}");

    let observed = Options { observe: Some(python_spec()), ..trusted };
    let (outcomes, _) = replay_row(&observed, Some(Strategy::AtomicFenced));
    let mut misreported = Vec::new();
    for (name, outcome) in &outcomes {
        let again = reproduce(&observed, name);
        match outcome {
            // A stale owner's unfenced effect: the role reports the model's total, the
            // database holds the doubled one.
            Err(ReplayFailure::Misreported { error, .. }) => {
                let text = error.to_string();
                assert!(text.starts_with("the store role reports g0 total "), "{name}: {text}\nreproduce: {again}");
                assert!(text.contains("; the database holds total "), "{name}: {text}\nreproduce: {again}");
                misreported.push(name.as_str());
            }
            // A kill between the two transactions: the effect without its offset.
            Err(ReplayFailure::NotAtomic { shows, .. }) => {
                assert!(shows.contains("next offset 0"), "{name}: {shows}\nreproduce: {again}");
            }
            Ok(()) => {}
            Err(other) => panic!("{name}: an unexpected failure: {other}\nreproduce: {again}"),
        }
    }
    // The traces where a stale owner applies a record (a zombie's and an earlier
    // incarnation's), caught at that step, by the database alone.
    for name in ["atomic-fenced--zombie-fenced.json", "atomic-fenced--paused-fenced.json"] {
        assert!(misreported.contains(&name), "{name} must be caught by the database: {misreported:?}");
    }
    let failed = outcomes.iter().filter(|(_, outcome)| outcome.is_err()).count();
    assert!(failed >= 6, "most atomic-fenced traces apply a record and must fail: {failed} of {}", outcomes.len());
}

/// (the consumer's command, `None` when its interpreter is missing; the row it claims, its
/// observation spec, kill points inside steps)
type Conforming = (fn() -> Option<String>, Option<Strategy>, &'static str, bool);

const CONFORMING: [Conforming; 4] = [
    (|| python("atomic_fenced.py"), Some(Strategy::AtomicFenced), "examples/python/store.observe.toml", true),
    (|| python("effect_first.py"), Some(Strategy::EffectFirst), "examples/python/store.observe.toml", true),
    (|| perl("dedup_atomic.pl"), Some(Strategy::DedupAtomic), "examples/perl/store.observe.toml", true),
    // This consumer's `serve` on every row: every query kind (processed ids, attempts, dead
    // letters, resets, stamps, values, facts, outbox) read from a real store, and its store
    // role's observe compared with it at every step.
    (
        || Some(format!("{} serve", shell_quote(env!("CARGO_BIN_EXE_conformance")))),
        None,
        "conformance/tests/observe/onceproof.observe.toml",
        false,
    ),
];

#[test]
fn consumers_conform_with_their_stores_read_by_their_sql() {
    for (command, row, file, inside_step) in CONFORMING {
        // A missing interpreter leaves its example out (skipped, saying so); the rest still run.
        let Some(command) = command() else { continue };
        let options = Options {
            command: Some(command.clone()),
            inside_step,
            observe: Some(spec(&root().join(file))),
            ..Options::new(Mode::Protocol)
        };
        let (outcomes, inside) = replay_row(&options, row);
        for (name, outcome) in &outcomes {
            if let Err(failure) = outcome {
                panic!("{command}: {name} diverges with {file}:\n{failure}\nreproduce: {}", reproduce(&options, name));
            }
        }
        assert_eq!(inside.judged > 0, inside_step, "{command}: kill points judged: {inside:?}");
    }
}

/// (what the spec says, or `None` for no file at all; the flags besides it; what the one line
/// must say)
fn refused() -> Vec<(Option<String>, &'static str, &'static str)> {
    let text = |text: &str| Some(text.to_string());
    vec![
        (None, "", "observation spec /nonexistent/spec.toml: cannot read"),
        (text("version = 1\n[queries\n"), "", "TOML parse error"),
        (text("version = 2\ndatabase = \"store.db\"\n[queries]\n"), "", "version 2 (this build reads version 1)"),
        (text("version = 1\ndatabase = \"../store.db\"\n[queries]\n"), "", "must be a path inside the store directory"),
        (
            text("version = 1\ndatabase = \"/tmp/store.db\"\n[queries]\n"),
            "",
            "must be a path inside the store directory",
        ),
        (text("version = 1\ndatabase = \"store.db\"\ncolour = 1\n[queries]\n"), "", "unknown field `colour`"),
        (
            text("version = 1\ndatabase = \"store.db\"\n[queries]\ntotals = \"SELECT 1\"\n"),
            "",
            "unknown query 'totals' (the queries are total, partitions,",
        ),
        (Some(spec_with("", "")), "", "no query 'total', which row atomic-fenced uses"),
        (
            Some(spec_with(TOTAL, PARTITIONS)),
            "--strategy dedup-atomic",
            "no query 'processed', which row dedup-atomic uses",
        ),
        (
            Some(spec_with(TOTAL, PARTITIONS)),
            "--strategy offset-stamp",
            "query 'partitions', column 'stamp': not returned",
        ),
        (Some(spec_with("SELECT total FROM effects WHERE grp = :group", PARTITIONS)), "", "no such table: effects"),
        (
            Some(spec_with("SELECT total AS sum FROM effect WHERE grp = :group", PARTITIONS)),
            "",
            "returns a column 'sum'",
        ),
        (
            Some(spec_with(TOTAL, "SELECT part AS partition, next_offset, owner FROM progress WHERE grp = :group")),
            "",
            "query 'partitions', column 'epoch': not returned (the query returns partition, next_offset, owner)",
        ),
        (Some(spec_with("SELECT total FROM effect", PARTITIONS)), "", "must take exactly one parameter, :group"),
        (
            Some(spec_with("SELECT total FROM effect WHERE grp = :group AND :owner", PARTITIONS)),
            "",
            "must take exactly one parameter, :group",
        ),
        (
            Some(spec_with("SELECT owner AS total FROM progress WHERE grp = :group", PARTITIONS)),
            "",
            "query 'total', column 'total': text for g0, where an integer is expected",
        ),
        (
            Some(spec_with(
                TOTAL,
                "SELECT part AS partition, next_offset, epoch, owner FROM progress WHERE 0 = :group",
            )),
            "",
            "query 'partitions': 0 rows for g0, where 1 are expected",
        ),
        (Some(spec_with(TOTAL, PARTITIONS)), "--mode process", "--observe applies to protocol mode only"),
    ]
}

const TOTAL: &str = "SELECT total FROM effect WHERE grp = :group";
const PARTITIONS: &str = "SELECT part AS partition, next_offset, epoch, owner FROM progress WHERE grp = :group";

fn spec_with(total: &str, partitions: &str) -> String {
    let mut text = "version = 1\ndatabase = \"store.db\"\n[queries]\n".to_string();
    for (name, sql) in [("total", total), ("partitions", partitions)] {
        if !sql.is_empty() {
            text.push_str(&format!("{name} = \"{sql}\"\n"));
        }
    }
    text
}

#[test]
fn an_observation_spec_that_cannot_be_used_is_refused_before_the_run_in_one_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (index, (text, flags, says)) in refused().into_iter().enumerate() {
        let path = match text {
            Some(text) => {
                let path = dir.path().join(format!("spec-{index}.toml"));
                std::fs::write(&path, text).expect("the spec is written");
                path
            }
            None => PathBuf::from("/nonexistent/spec.toml"),
        };
        let mut args = vec!["replay".to_string(), "--observe".to_string(), path.display().to_string()];
        let flags: Vec<&str> = flags.split_whitespace().collect();
        if !flags.contains(&"--mode") {
            args.extend(["--mode".into(), "protocol".into(), "--inside-step".into(), "off".into()]);
        }
        if !flags.contains(&"--strategy") {
            args.extend(["--strategy".into(), "atomic-fenced".into()]);
        }
        args.extend(flags.iter().map(|flag| flag.to_string()));
        args.push(root().join("tests/traces").display().to_string());
        let output = Command::new(env!("CARGO_BIN_EXE_conformance")).args(&args).output().expect("conformance runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let again = format!("cargo run -p conformance -- {}", args.join(" "));
        assert_eq!(output.status.code(), Some(2), "{again}\nstdout: {stdout}\nstderr: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {again}\n{stderr}");
        assert!(stderr.contains(says), "{again}\nmust say '{says}', says: {stderr}");
        assert!(!stdout.contains("conforms"), "refused before any trace: {again}\n{stdout}");
    }
}
