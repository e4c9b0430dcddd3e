//! The regression corpus: reading trace files, regenerating them, and checking one file.

use crate::driver::Mode;
use crate::error::{Error, ScenarioError};
use crate::harness::Options;
use crate::replay::{replay, ReplayReport};
use model::check::{run, CheckOptions};
use model::trace::Trace;
use model::{Config, ConsumerModel, Strategy};
use std::path::{Path, PathBuf};

/// Reads and parses a trace file, and checks that the model accepts its actions; the error
/// names the file. A trace that is not a run of the model is bad input, refused before any
/// real system is made for it (a rebalance to the current owner, a fetch past the log end).
pub fn load(path: &Path) -> Result<Trace, Error> {
    let bytes = std::fs::read(path).map_err(Error::io(path, "read"))?;
    let trace = Trace::from_slice(&bytes).map_err(|source| Error::Trace { path: path.to_path_buf(), source })?;
    model::check::replay(&ConsumerModel::new(trace.config.clone()), &trace.actions)
        .map_err(|source| Error::NotInModel { path: path.to_path_buf(), source })?;
    Ok(trace)
}

/// The trace files named by `paths`: files as given, directories as their `*.json` files in
/// name order.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(Error::io(path, "list"))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| model::trace::is_trace_file(p))
                .collect();
            found.sort();
            files.extend(found);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(Error::NoSuchPath { path: path.clone() });
        }
    }
    Ok(files)
}

/// How a printed command starts: the way this binary was run. Under cargo (`cargo run`,
/// `cargo test`, which set `CARGO_PKG_NAME` for what they run) `cargo run -p conformance --`;
/// otherwise the program as it was invoked (`conformance` from the PATH, or its path), so that
/// a line printed by an installed binary runs that binary.
pub fn invocation() -> String {
    if std::env::var_os("CARGO_PKG_NAME").is_some() {
        return "cargo run -p conformance --".to_string();
    }
    let program = std::env::args_os().next().map(|arg| arg.to_string_lossy().into_owned());
    crate::protocol::shell_quote(program.as_deref().unwrap_or("conformance"))
}

/// The subdirectory of a corpus directory with the traces its users keep (`keep`): replayed
/// with the corpus (`expand_with_kept`), never touched by `regenerate`.
pub const KEPT: &str = "kept";

/// `expand`, and for each directory given the trace files of its `kept/` subdirectory too.
pub fn expand_with_kept(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut with = Vec::with_capacity(paths.len());
    for path in paths {
        with.push(path.clone());
        let kept = path.join(KEPT);
        if path.is_dir() && kept.is_dir() {
            with.push(kept);
        }
    }
    expand(&with)
}

/// How `keep` ended for one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Copied to this path.
    Copied(PathBuf),
    /// A kept trace of that name has the same contents already.
    Already(PathBuf),
}

/// Keeps the trace `file` in `dir` (made if missing) as `name` (`NAME.json`; the file's own
/// name when none): it must load and be a run of the model, as every replayed trace must. A
/// kept trace of that name with other contents is never replaced.
pub fn keep(file: &Path, dir: &Path, name: Option<&str>) -> Result<Kept, Error> {
    load(file)?;
    let name = match name {
        Some(name) if name.ends_with(".json") => name.to_string(),
        Some(name) => format!("{name}.json"),
        None => file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.starts_with('.') || !name.chars().all(plain) {
        let why = "a kept trace's name has letters, digits, '-', '_' and '.' only, and no leading '.'";
        return Err(Error::KeepName { name, why });
    }
    if name.ends_with(".itf.json") {
        return Err(Error::KeepName { name, why: "an ITF trace's name (.itf.json); keep the onceproof trace" });
    }
    let bytes = std::fs::read(file).map_err(Error::io(file, "read"))?;
    let path = dir.join(&name);
    match std::fs::read(&path) {
        Ok(existing) if existing == bytes => return Ok(Kept::Already(path)),
        Ok(_) => return Err(Error::KeptDiffers { path }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(Error::Io { path, doing: "read", source: error }),
    }
    let given = format!("keep --dir {}", dir.display());
    std::fs::create_dir_all(dir).map_err(Error::io(dir, "create"))?;
    let text = String::from_utf8(bytes).map_err(|_| Error::KeepName { name: name.clone(), why: "not UTF-8" })?;
    crate::output::write_file(&given, &path, &text)?;
    Ok(Kept::Copied(path))
}

/// The command that reproduces a replay of `path` with `options`.
pub fn reproduce_command(path: &Path, options: &Options) -> String {
    let (mode, rest) = run_flag_parts(options);
    // The row, which `--worker` requires (the trace's own; a file that does not load has none).
    let row = match (&options.command, load(path)) {
        (Some(_), Ok(trace)) => format!(" --strategy {}", trace.config.strategy),
        (Some(_) | None, _) => String::new(),
    };
    format!("{} replay {mode}{row}{rest} {}", invocation(), path.display())
}

/// The flags that start the real system as `options` do (mode or worker, the store it uses,
/// the reply wait, kill points inside steps, a mutation), for a command that reproduces a
/// failure.
pub fn run_flags(options: &Options) -> String {
    let (mode, rest) = run_flag_parts(options);
    format!("{mode}{rest}")
}

/// `run_flags` in two: the mode (or worker) first, the others after the row in a replay's line.
fn run_flag_parts(options: &Options) -> (String, String) {
    let mutation =
        options.mutation.map_or(String::new(), |m| format!(" --mutation {}", crate::driver::mutation_name(m)));
    let mode = match &options.command {
        Some(command) => format!("--worker {}", crate::protocol::shell_quote(command)),
        None => format!("--mode {}", options.mode.name()),
    };
    // A wait other than the default is part of what failed (a slow consumer's timeout).
    let ms = options.reply_timeout_ms;
    let wait = if matches!(options.mode, Mode::Protocol) && ms != crate::protocol::REPLY_TIMEOUT_MS_DEFAULT {
        format!(" --reply-timeout-ms {ms}")
    } else {
        String::new()
    };
    // The command line's default: kill points inside steps on in protocol mode, off otherwise.
    let inside = match (options.mode, options.inside_step) {
        (Mode::Protocol, false) => " --inside-step off",
        (Mode::Process, true) => " --inside-step on",
        (Mode::Protocol, true) | (Mode::Process, false) | (Mode::InProcess, _) => "",
    };
    let observe = options.observe.as_ref().map_or(String::new(), |spec| {
        format!(" --observe {}", crate::protocol::shell_quote(&spec.path.to_string_lossy()))
    });
    // The store is part of what failed: a replay without `--postgres` runs on SQLite.
    let store = options
        .postgres
        .as_ref()
        .map_or(String::new(), |url| format!(" --postgres {}", crate::protocol::shell_quote(url)));
    (mode, format!("{store}{wait}{inside}{observe}{mutation}"))
}

/// Replays one corpus file in every mode (in process, as worker processes, and as processes of
/// this consumer speaking the open protocol); a failure carries the reproduce command.
pub fn check_file(path: &Path, worker_exe: Option<PathBuf>) -> Result<Vec<ReplayReport>, Error> {
    let trace = load(path)?;
    let mut reports = Vec::new();
    for mode in [Mode::InProcess, Mode::Process, Mode::Protocol] {
        let options = Options { worker_exe: worker_exe.clone(), ..Options::new(mode) };
        let report = replay(&trace, &options).map_err(|failure| Error::Replay {
            path: path.to_path_buf(),
            reproduce: reproduce_command(path, &options),
            failure: Box::new(failure),
        })?;
        reports.push(report);
    }
    Ok(reports)
}

/// Rewrites `dir`: every counterexample and every example (the witness of each reached
/// `sometimes` property) of the default `model check`, every scenario of `scenarios::all`,
/// and a fence witness (`fences::witnesses`) for each stale owner's fenced write no other
/// trace of its row shows. Old `*.json` files are removed first so none is left stale.
pub fn regenerate(dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<usize, Error> {
    let given = format!("regenerate {}", dir.display());
    crate::output::prepare_dir(&given, dir)?;
    for old in expand(&[dir.to_path_buf()])? {
        std::fs::remove_file(&old).map_err(Error::io(&old, "remove"))?;
    }
    let mut traces: Vec<(String, Trace)> = Vec::new();
    for strategy in Strategy::ALL {
        progress(&format!("checking {strategy}"));
        let report = run(&ConsumerModel::new(Config::new(strategy)), &CheckOptions::default(), &mut |_| {});
        traces.extend(Trace::counterexamples(&report).into_iter().map(|t| (t.file_name(), t)));
        traces.extend(Trace::examples(&report).into_iter().map(|t| (t.file_name(), t)));
    }
    for (name, trace) in crate::scenarios::all() {
        check_in_model(&trace).map_err(|source| Error::Scenario { name: name.clone(), source })?;
        traces.push((format!("{name}.json"), trace));
    }
    progress("searching the fence witnesses");
    let others: Vec<Trace> = traces.iter().map(|(_, trace)| trace.clone()).collect();
    let fences = crate::fences::witnesses(&others)
        .map_err(|(target, source)| Error::Scenario { name: target.file_name(), source })?;
    for (name, trace) in fences {
        check_in_model(&trace).map_err(|source| Error::Scenario { name: name.clone(), source })?;
        traces.push((name, trace));
    }
    for (name, trace) in &traces {
        let path = dir.join(name);
        crate::output::write_file(&given, &path, &trace.to_json())?;
    }
    Ok(traces.len())
}

/// A scenario or a fence witness must replay in the model and end with the verdict it
/// records: a safety property violated or held, a `sometimes` property reached.
pub fn check_in_model(trace: &Trace) -> Result<(), ScenarioError> {
    trace.config.validate_for_replay().map_err(ScenarioError::Config)?;
    let model = ConsumerModel::new(trace.config.clone());
    let states = model::check::replay(&model, &trace.actions).map_err(ScenarioError::Unreachable)?;
    let (Some(name), Some(verdict)) = (&trace.property, &trace.verdict) else { return Ok(()) };
    let property = model::check::property_named(&model, name).ok_or_else(|| ScenarioError::NoProperty(name.clone()))?;
    let discovered = states.iter().any(|state| model::check::is_discovery(&model, &property, state));
    let recorded = matches!(verdict, model::check::Verdict::Violated | model::check::Verdict::Reached);
    if discovered != recorded {
        return Err(ScenarioError::Verdict { property: name.clone(), discovered, recorded: verdict.clone() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduce_command_names_the_postgres_store() {
        let url = "postgres:///postgres?host=/run/postgresql";
        let options = Options { postgres: Some(url.to_string()), ..Options::new(Mode::Process) };
        let line = reproduce_command(Path::new("tests/traces/none.json"), &options);
        let quoted = crate::protocol::shell_quote(url);
        assert!(line.contains(&format!(" --postgres {quoted}")), "{line}");
        assert!(run_flags(&options).contains(&format!("--postgres {quoted}")), "{}", run_flags(&options));
    }

    #[test]
    fn reproduce_command_of_sqlite_has_no_store_flag() {
        let line = reproduce_command(Path::new("tests/traces/none.json"), &Options::new(Mode::Process));
        assert!(!line.contains("--postgres"), "{line}");
    }
}
