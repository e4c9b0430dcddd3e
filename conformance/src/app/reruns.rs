//! A schedule's runs beyond the first: on an anomaly, the shrink's smaller schedules
//! (`run_and_shrink`, the search itself in `shrink`), and `--schedule`'s runs of a saved one
//! (`run_again`), which count how often the anomaly comes back. Each such run is a whole run
//! in a directory of its own, its progress and report in its `report.txt`.

use super::judge::Verdict;
use super::schedule::{Fault, Schedule};
use super::{prepare, run_in, shrink, AppArgs, AppError, AppReport};
use crate::observe::ObserveSpec;
use std::path::Path;
use std::time::Instant;

/// One run of `schedule` in `dir` (made, empty), its schedule written there first.
fn run_one(
    args: &AppArgs,
    schedule: &Schedule,
    dir: &Path,
    say: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<AppReport, AppError> {
    let path = dir.join("schedule.toml");
    std::fs::write(&path, schedule.to_text())
        .map_err(|error| AppError::Io { what: format!("cannot write {}", path.display()), error })?;
    let spec = ObserveSpec::load(&args.observe)?;
    let mut args = args.clone();
    (args.seed, args.records, args.partitions, args.instances) =
        (schedule.seed, schedule.records, schedule.partitions, schedule.instances);
    run_in(&args, spec, dir, schedule.plan(), say)
}

/// `run_one` in a new `dir` with its progress and its report in `dir/report.txt` instead of
/// on the output (a shrink's candidates, a schedule's runs).
fn run_quietly(args: &AppArgs, schedule: &Schedule, dir: &Path) -> Result<AppReport, AppError> {
    prepare(dir)?;
    let path = dir.join("report.txt");
    let io = |error| AppError::Io { what: format!("cannot write {}", path.display()), error };
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    let mut say = |line: &str| std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes());
    let outcome = run_one(args, schedule, dir, &mut say);
    let lines = match &outcome {
        Ok(report) => report.lines(),
        Err(error) => vec![format!("error: {error}")],
    };
    for line in lines {
        std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).map_err(io)?;
    }
    std::io::Write::flush(&mut file).map_err(io)?;
    outcome
}

/// "1 fault", "2 faults".
fn counted(count: usize, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}

/// The command that runs `schedule_path` again, as a user would type it.
fn rerun_command(args: &AppArgs, schedule_path: &Path) -> String {
    let quote = |word: &str| match word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@".contains(&b)) {
        true => word.to_string(),
        false => format!("'{}'", word.replace('\'', "'\\''")),
    };
    let command: Vec<String> = args.command.iter().map(|word| quote(word)).collect();
    let postgres = args.postgres.as_deref().map_or_else(String::new, |url| format!(" --postgres {}", quote(url)));
    format!(
        "conformance kafka app --schedule {} --observe {}{postgres} --session-timeout-ms {} -- {}",
        quote(&schedule_path.display().to_string()),
        quote(&args.observe.display().to_string()),
        args.session_timeout_ms,
        command.join(" ")
    )
}

/// The run; on an anomaly, its schedule shrunk (`shrink`) and the smallest saved in
/// `dir/shrunk.toml`.
pub(super) fn run_and_shrink(
    args: &AppArgs,
    schedule: &Schedule,
    dir: &Path,
    say: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<AppReport, AppError> {
    let mut report = run_one(args, schedule, dir, say)?;
    if !matches!(report.verdict, Verdict::Anomaly(_)) {
        return Ok(report);
    }
    let saved = dir.join("schedule.toml");
    if args.shrink_candidates == 0 || schedule.faults.is_empty() {
        report.afterword.push(format!(
            "not shrunk; this run's schedule is {}: {}",
            saved.display(),
            rerun_command(args, &saved)
        ));
        return Ok(report);
    }
    let target = report.kinds.clone();
    let speak = |say: &mut dyn FnMut(&str) -> std::io::Result<()>, line: String| {
        say(&line).map_err(|error| AppError::Io { what: "cannot write to standard output".into(), error })
    };
    speak(
        say,
        format!(
        "shrinking its {} faults: at most {} smaller schedules, each run up to {} times (in {}/shrink/CANDIDATE.TRY)",
        schedule.faults.len(), args.shrink_candidates, args.shrink_tries, dir.display()
    ),
    )?;
    let started = Instant::now();
    let (mut candidate, mut runs) = (0u32, 0u32);
    let mut reproduces = |faults: &[Fault]| -> Result<bool, AppError> {
        candidate += 1;
        let smaller = schedule.with_faults(faults.to_vec());
        for attempt in 1..=args.shrink_tries {
            runs += 1;
            let where_ = dir.join("shrink").join(format!("{candidate}.{attempt}"));
            let heading = format!("shrink: candidate {candidate} ({}), try {attempt}", counted(faults.len(), "fault"));
            match run_quietly(args, &smaller, &where_) {
                Ok(found) => {
                    let back: Vec<&str> =
                        found.kinds.iter().filter(|kind| target.contains(kind)).map(|kind| kind.name()).collect();
                    if matches!(found.verdict, Verdict::Anomaly(_)) && !back.is_empty() {
                        speak(say, format!("{heading}: the anomaly came back ({})", back.join(", ")))?;
                        return Ok(true);
                    }
                    let word = match found.verdict {
                        Verdict::NoAnomaly => "no anomaly",
                        Verdict::Anomaly(_) => "an anomaly of another kind only",
                        Verdict::NotEstablished(_) => "not established",
                    };
                    speak(say, format!("{heading}: {word}"))?;
                }
                Err(AppError::Interrupted(signal)) => return Err(AppError::Interrupted(signal)),
                Err(error) => speak(say, format!("{heading}: the run failed ({error}); counted as not coming back"))?,
            }
        }
        Ok(false)
    };
    let shrunk = shrink::shrink(&schedule.faults, args.shrink_candidates, &mut reproduces)?;
    let path = dir.join("shrunk.toml");
    std::fs::write(&path, schedule.with_faults(shrunk.faults.clone()).to_text())
        .map_err(|error| AppError::Io { what: format!("cannot write {}", path.display()), error })?;
    let bound = match shrunk.bounded {
        true => format!(" (stopped at --shrink-candidates {}: a smaller one may exist)", args.shrink_candidates),
        false => " (no single fault of it can go)".to_string(),
    };
    report.afterword.push(format!(
        "shrunk: {} faults to {} in {} smaller schedules, {runs} runs, {:.0} s{bound}; saved in {}",
        schedule.faults.len(),
        shrunk.faults.len(),
        shrunk.candidates,
        started.elapsed().as_secs_f64(),
        path.display()
    ));
    report.afterword.push(format!("to see how often it comes back: {}", rerun_command(args, &path)));
    Ok(report)
}

/// `--schedule`: the schedule run `--runs` times, each in `dir/runs/N`; the report is the
/// first run's with an anomaly (else the last's), and says in how many the anomaly came back.
pub(super) fn run_again(
    args: &AppArgs,
    schedule: &Schedule,
    dir: &Path,
    say: &mut dyn FnMut(&str) -> std::io::Result<()>,
) -> Result<AppReport, AppError> {
    let speak = |say: &mut dyn FnMut(&str) -> std::io::Result<()>, line: String| {
        say(&line).map_err(|error| AppError::Io { what: "cannot write to standard output".into(), error })
    };
    let path = args.schedule.as_deref().expect("run_again runs a schedule file");
    speak(say, format!(
        "running the schedule {} ({} records, {} at the start, {}) {} times, each in {}/runs/N (its report in report.txt)",
        path.display(), schedule.records, counted(schedule.instances as usize, "instance"), counted(schedule.faults.len(), "fault"), args.runs, dir.display()
    ))?;
    let mut chosen: Option<AppReport> = None;
    let mut last_error = None;
    let (mut came_back, mut judged) = (0u32, 0u32);
    let mut kinds: std::collections::BTreeMap<&'static str, u32> = std::collections::BTreeMap::new();
    for run in 1..=args.runs {
        match run_quietly(args, schedule, &dir.join("runs").join(run.to_string())) {
            Ok(report) => {
                judged += 1;
                speak(
                    say,
                    format!("run {run} of {}: {}", args.runs, report.lines().last().cloned().unwrap_or_default()),
                )?;
                let anomaly = matches!(report.verdict, Verdict::Anomaly(_));
                if anomaly {
                    came_back += 1;
                    for kind in &report.kinds {
                        *kinds.entry(kind.name()).or_default() += 1;
                    }
                }
                if chosen.as_ref().is_none_or(|held| !matches!(held.verdict, Verdict::Anomaly(_))) {
                    chosen = Some(report);
                }
            }
            Err(AppError::Interrupted(signal)) => return Err(AppError::Interrupted(signal)),
            Err(error) => {
                speak(say, format!("run {run} of {}: the run failed: {error}", args.runs))?;
                last_error = Some(error);
            }
        }
    }
    let Some(mut report) = chosen else { return Err(last_error.expect("every run failed")) };
    let kinds: Vec<String> = kinds.iter().map(|(kind, count)| format!("{kind} in {count}")).collect();
    let kinds = if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) };
    report.afterword.push(format!(
        "the anomaly came back in {came_back} of {} runs{kinds}{}; real processes are not deterministic: the schedule fixes the records and the faults, their kinds and order, not where in the application's own timing each lands",
        args.runs,
        if judged < args.runs { format!(", {} of them failed before a verdict", args.runs - judged) } else { String::new() },
    ));
    Ok(report)
}
