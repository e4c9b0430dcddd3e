//! Kill points inside steps on this consumer (process mode, `--inside-step on`): every corpus
//! trace conforms with a kill after every write of every step, each kill point agrees with the
//! named crash points around it (`conformance::crosscheck`), and a harness that may not trace
//! refuses a `--worker` in one line naming `--inside-step off`.

use conformance::crosscheck::cross_check;
use conformance::driver::Mode;
use conformance::harness::Options;
use conformance::replay::{replay_counted, Inside};
use model::trace::Trace;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The family's cap (kill points inside steps, each test on its own): the whole corpus takes
/// about 25 s here; past the cap a test fails rather than letting CI run long.
const FAMILY_CAP: Duration = Duration::from_secs(300);

fn corpus() -> Vec<(PathBuf, Trace)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces");
    let files = conformance::corpus::expand(&[dir]).expect("tests/traces is readable");
    files.into_iter().map(|path| (path.clone(), conformance::corpus::load(&path).expect("a trace loads"))).collect()
}

fn options() -> Options {
    Options {
        worker_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_conformance"))),
        inside_step: true,
        ..Options::new(Mode::Process)
    }
}

/// This consumer, as worker processes, conforms on every corpus trace killed at every kill
/// point inside every step: each copy of its store holds the model's store from before the step
/// or from after it, and so does a power cut at each of them (its store as the traced syncs
/// made it durable), and one after every step holds the step. The kills struck: every row's
/// traces have kill points, no owner step changed the model's store without a write to
/// `store.db` or its journal, and syncs were traced.
#[test]
fn every_corpus_trace_conforms_with_a_kill_after_every_write_of_every_step() {
    let started = Instant::now();
    let mut inside = Inside::default();
    let (mut rows, mut rows_with_points) = (BTreeSet::new(), BTreeSet::new());
    for (path, trace) in corpus() {
        assert!(started.elapsed() < FAMILY_CAP, "passed the cap of {FAMILY_CAP:?} at {}", path.display());
        let before = inside.found;
        if let Err(failure) = replay_counted(&trace, &options(), &mut inside) {
            panic!(
                "{}:\n{failure}\nreproduce: cargo run -p conformance -- replay --mode process --inside-step on {}",
                path.display(),
                path.display()
            );
        }
        rows.insert(trace.config.strategy);
        if inside.found > before {
            rows_with_points.insert(trace.config.strategy);
        }
    }
    assert_eq!(rows_with_points, rows, "rows whose traces showed no kill point");
    assert_eq!(inside.writes_unseen, 0, "{inside:?}");
    assert_eq!(inside.judged + inside.sampled_out, inside.found, "{inside:?}");
    // Power cuts at every kill point judged, and after every step, from syncs the tracer saw.
    assert!(inside.power_cuts > inside.judged && inside.syncs > 0, "{inside:?}");
}

/// The first corpus trace of every row (its file names sorted), cross-checked: every kill point
/// shows the store of a named crash point around it (`--crash-at STEP:before`, `inside`,
/// `after`, each armed on a fresh replay with the tracer on), and named points were reached on
/// every row whose trace has kill points. (`conformance cross-check tests/traces` runs the whole
/// corpus: a few minutes.)
#[test]
fn kill_points_agree_with_the_named_crash_points_around_them_on_every_row() {
    let started = Instant::now();
    let mut seen = BTreeSet::new();
    let (mut kill_points, mut named) = (0, 0);
    for (path, trace) in corpus() {
        if !seen.insert(trace.config.strategy) {
            continue;
        }
        assert!(started.elapsed() < FAMILY_CAP, "passed the cap of {FAMILY_CAP:?} at {}", path.display());
        let checked = cross_check(&trace, &options()).expect("the cross-check runs");
        assert!(
            checked.findings.is_empty(),
            "{}: {:#?}\nreproduce: cargo run -p conformance -- cross-check {}",
            path.display(),
            checked.findings,
            path.display()
        );
        assert_eq!(checked.kill_points > 0, checked.named > 0, "{}: {checked:?}", path.display());
        kill_points += checked.kill_points;
        named += checked.named;
    }
    assert!(seen.len() >= 38, "rows cross-checked: {}", seen.len());
    assert!(kill_points > 0 && named > 0, "{kill_points} kill points, {named} named points");
}

/// Run where ptrace is refused (a seccomp filter on the harness making every `ptrace` fail with
/// EPERM, as a container without the capability does), `--worker` is bad input: one line on
/// stderr naming `--inside-step off`, exit 2, no trace replayed; with `--inside-step off` the
/// same command conforms.
#[test]
fn a_harness_that_may_not_trace_refuses_a_worker_in_one_line_naming_inside_step_off() {
    use std::os::unix::process::CommandExt;
    let rules = std::collections::BTreeMap::from([(libc::SYS_ptrace, Vec::new())]);
    let arch = std::env::consts::ARCH.try_into().expect("a seccomp architecture");
    let errno = u32::try_from(libc::EPERM).expect("a small errno");
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(errno),
        arch,
    )
    .expect("a filter");
    let program: seccompiler::BpfProgram = filter.try_into().expect("a program");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/traces/scenario--zombie-atomic-fenced.json");
    let worker = format!("{} serve", env!("CARGO_BIN_EXE_conformance"));
    for (switch, code) in [("on", 2), ("off", 0)] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_conformance"));
        command.args(["replay", "--inside-step", switch, "--worker", &worker, "--strategy", "atomic-fenced"]);
        command.arg(&trace);
        let program = program.clone();
        // SAFETY: between fork and exec the closure only makes system calls (prctl, seccomp).
        unsafe {
            command.pre_exec(move || seccompiler::apply_filter(&program).map_err(|_| std::io::Error::last_os_error()));
        }
        let output = command.output().expect("conformance runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(code), "--inside-step {switch}: {stdout}{stderr}");
        if code == 2 {
            assert_eq!(stdout, "", "nothing replayed");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(stderr.starts_with("error: --worker: '"), "{stderr}");
            assert!(stderr.contains("cannot be traced (ptrace or seccomp refused"), "{stderr}");
            assert!(stderr.contains("rerun with --inside-step off"), "{stderr}");
        } else {
            assert!(stdout.contains("kill points inside steps: not tried (--inside-step off)"), "{stdout}");
        }
    }
}
