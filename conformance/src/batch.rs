//! Replays a batch of generated model paths (every path to a depth, or seeded random walks)
//! against fresh real systems; every divergence is saved as a trace file and printed with the
//! commands that reproduce it. Used by `conformance test` and by the walks of `cargo test`.

use crate::corpus::{reproduce_command, run_flags};
use crate::error::Error;
use crate::generate;
use crate::harness::Options;
use crate::replay::{replay_shared, CopyCache, Inside};
use model::trace::Trace;
use model::{Action, Config, ConsumerModel};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Generated model paths and how they are made. Each is generated, replayed and dropped in
/// turn, so no count allocates more than one path.
#[derive(Clone, Copy, Debug)]
pub enum Generated {
    /// Every path of `depth` steps (and the shorter ones that end), at most `paths_max` of them.
    Paths { depth: usize, paths_max: usize },
    /// `count` random walks of at most `steps_max` steps; walk `i` from seed `seed + i`
    /// (`generate::walk`).
    Walks { count: usize, seed: u64, steps_max: usize },
}

impl Generated {
    fn what(&self) -> String {
        match *self {
            Generated::Paths { depth, paths_max } => format!("every path to depth {depth} (at most {paths_max})"),
            Generated::Walks { count, seed, steps_max } => {
                format!("{count} random walks from seed {seed} (at most {steps_max} steps each)")
            }
        }
    }
}

/// What a batch established.
#[derive(Clone, Debug)]
pub struct Summary {
    pub traces: usize,
    pub divergences: usize,
    pub steps: usize,
    pub seconds: f64,
    /// `Some(paths_max)` when the paths to a depth were cut there: not every one was replayed.
    pub cut: Option<usize>,
    /// The kill points inside steps of the conforming replays.
    pub inside: Inside,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.seconds.max(1e-9);
        write!(
            f,
            "{} passed, {} failed ({} steps in {:.2} s: {:.1} traces/s, {:.0} steps/s)",
            self.traces - self.divergences,
            self.divergences,
            self.steps,
            self.seconds,
            self.traces as f64 / seconds,
            self.steps as f64 / seconds
        )?;
        if let Some(paths_max) = self.cut {
            write!(f, "; stopped at --paths-max {paths_max}: not every path was replayed")?;
        }
        Ok(())
    }
}

/// `DIR/STEM.json`, or, when an earlier run left a file there, the first of `STEM-2.json`,
/// `STEM-3.json`, ... that is free: a divergence never replaces an earlier run's.
fn unused_path(dir: &Path, stem: &str) -> PathBuf {
    let first = dir.join(format!("{stem}.json"));
    if std::fs::symlink_metadata(&first).is_err() {
        return first;
    }
    (2u64..)
        .map(|n| dir.join(format!("{stem}-{n}.json")))
        .find(|path| std::fs::symlink_metadata(path).is_err())
        .expect("some numbered name is free")
}

/// How one generated path replayed (`replay_generated_each` hands each to its caller).
#[derive(Clone, Debug)]
pub struct PathOutcome {
    /// The path's place in the batch, from 0.
    pub index: usize,
    /// The walk's own seed (`seed + index`); `None` for a path to a depth.
    pub seed: Option<u64>,
    /// The steps the real system ran: a divergence at step 6 of 9 ran 6.
    pub steps: usize,
    pub verdict: PathVerdict,
}

/// Whether a generated path conformed, and what a divergence left behind.
#[derive(Clone, Debug)]
pub enum PathVerdict {
    /// The safety properties the model and the real system both violate on it.
    Conforms {
        violated_in_both: Vec<String>,
    },
    Diverges(Box<Divergence>),
}

/// A divergent generated path: where it diverged, the failure as printed, the file it was
/// saved to and the commands that bring it back.
#[derive(Clone, Debug)]
pub struct Divergence {
    /// `step N`, `the initial state` or `the verdict of P` (`ReplayFailure::place`).
    pub at: String,
    pub detail: String,
    pub saved: PathBuf,
    /// The command that replays the saved trace.
    pub reproduce: String,
    /// The `test` command that generates this walk alone; `None` for a path to a depth.
    pub regenerate: Option<String>,
}

/// Replays every generated path of `config`; a divergent one is saved in `out` and reported
/// through `report` with its reproduce commands. `Err` only when a file cannot be written.
pub fn replay_generated(
    config: &Config,
    generated: Generated,
    options: &Options,
    out: &Path,
    report: &mut dyn FnMut(&str),
) -> Result<Summary, Error> {
    replay_generated_each(config, generated, options, out, report, &mut |_| {})
}

/// `replay_generated`, handing each path's outcome to `each` as soon as it is known, so a
/// caller can write it out without holding every path (a batch may have millions).
pub fn replay_generated_each(
    config: &Config,
    generated: Generated,
    options: &Options,
    out: &Path,
    report: &mut dyn FnMut(&str),
    each: &mut dyn FnMut(&PathOutcome),
) -> Result<Summary, Error> {
    let what = generated.what();
    report(&format!("{}: {what}", config.strategy));
    let started = Instant::now();
    let mut summary =
        Summary { traces: 0, divergences: 0, steps: 0, seconds: 0.0, cut: None, inside: Inside::default() };
    let mut restarts = CopyCache::default();
    let mut replay_one = |actions: &[Action]| -> Result<(), Error> {
        let index = summary.traces;
        summary.traces += 1;
        let description = format!("generated path {index}: {what}");
        // A path generated with a lifted budget (`any`) is a path of the abstraction, whose
        // states rename epochs and drop counts: it replays in the ordinary configuration of the
        // faults it uses (spec.md §7.1), as `model check` writes its counterexamples.
        let path_config = if config.lifted.any() { config.concretised(actions) } else { config.clone() };
        let trace = Trace::new(path_config, None, None, description, actions.to_vec());
        let seed = match generated {
            Generated::Walks { seed, .. } => Some(seed.wrapping_add(index as u64)),
            Generated::Paths { .. } => None,
        };
        let (steps, verdict) = match replay_shared(&trace, options, &mut summary.inside, &mut restarts) {
            Ok(replayed) => {
                let violated_in_both = replayed.violated.into_iter().filter(|(_, v)| *v).map(|(n, _)| n).collect();
                (actions.len(), PathVerdict::Conforms { violated_in_both })
            }
            Err(failure) => {
                summary.divergences += 1;
                let divergence = save_divergence(config, generated, options, out, &trace, index, &failure)?;
                report(&format!(
                    "DIVERGES  path {index}, saved as {}\n{failure}\nreproduce: {}{}",
                    divergence.saved.display(),
                    divergence.reproduce,
                    divergence.regenerate.as_deref().map(|line| format!("\nregenerate: {line}")).unwrap_or_default()
                ));
                (failure.steps_run(actions.len()), PathVerdict::Diverges(Box::new(divergence)))
            }
        };
        summary.steps += steps;
        each(&PathOutcome { index, seed, steps, verdict });
        Ok(())
    };
    let model = ConsumerModel::new(config.clone());
    match generated {
        Generated::Walks { count, seed, steps_max } => {
            for index in 0..count {
                replay_one(&generate::walk(&model, seed.wrapping_add(index as u64), steps_max))?;
            }
        }
        Generated::Paths { depth, paths_max } => {
            let mut failed = None;
            let cut = generate::for_each_path(&model, depth, paths_max, &mut |actions| {
                failed = replay_one(actions).err();
                failed.is_none()
            });
            if let Some(error) = failed {
                return Err(error);
            }
            if cut {
                summary.cut = Some(paths_max);
            }
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// Saves the divergent path `index` under `out` (never over an earlier run's file) and names
/// the commands that bring it back.
fn save_divergence(
    config: &Config,
    generated: Generated,
    options: &Options,
    out: &Path,
    trace: &Trace,
    index: usize,
    failure: &crate::replay::ReplayFailure,
) -> Result<Divergence, Error> {
    let given = format!("--out {}", out.display());
    crate::output::prepare_dir(&given, out)?;
    let saved = unused_path(out, &format!("{}--path-{index}", config.strategy));
    crate::output::write_file(&given, &saved, &trace.to_json())?;
    let regenerate = match generated {
        Generated::Walks { seed, steps_max, .. } => Some(format!(
            "{} test {} {} --walks 1 --seed {} --steps-max {steps_max}",
            crate::corpus::invocation(),
            config.flags(),
            run_flags(options),
            seed.wrapping_add(index as u64)
        )),
        Generated::Paths { .. } => None,
    };
    Ok(Divergence {
        at: failure.place(),
        detail: failure.to_string(),
        reproduce: reproduce_command(&saved, options),
        saved,
        regenerate,
    })
}
