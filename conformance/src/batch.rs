//! Replays a batch of generated model paths (every path to a depth, or seeded random walks)
//! against fresh real systems; every divergence is saved as a trace file and printed with the
//! commands that reproduce it. Used by `conformance test` and by the walks of `cargo test`.

use crate::corpus::reproduce_command;
use crate::error::Error;
use crate::harness::Options;
use crate::replay::replay;
use model::trace::Trace;
use model::{Action, Config};
use std::fmt;
use std::path::Path;
use std::time::Instant;

/// Generated model paths and how they were made.
pub enum Generated {
    /// Every path to a depth (the text says which, and whether it was cut).
    Paths { paths: Vec<Vec<Action>>, what: String },
    /// Random walk `i` was generated from seed `seed + i` (`generate::walks`).
    Walks { walks: Vec<Vec<Action>>, seed: u64 },
}

impl Generated {
    fn paths(&self) -> &[Vec<Action>] {
        match self {
            Generated::Paths { paths, .. } => paths,
            Generated::Walks { walks, .. } => walks,
        }
    }

    fn what(&self) -> String {
        match self {
            Generated::Paths { what, .. } => what.clone(),
            Generated::Walks { walks, seed } => format!("{} random walks from seed {seed}", walks.len()),
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
        )
    }
}

/// Replays every generated path of `config`; a divergent one is saved in `out` and reported
/// through `report` with its reproduce commands. `Err` only when a file cannot be written.
pub fn replay_generated(
    config: &Config,
    generated: &Generated,
    options: &Options,
    out: &Path,
    steps_max: usize,
    report: &mut dyn FnMut(&str),
) -> Result<Summary, Error> {
    let what = generated.what();
    report(&format!("{}: {what}: {} traces", config.strategy, generated.paths().len()));
    let started = Instant::now();
    let mut summary = Summary { traces: generated.paths().len(), divergences: 0, steps: 0, seconds: 0.0 };
    for (index, actions) in generated.paths().iter().enumerate() {
        let trace = Trace::new(config.clone(), None, None, format!("generated path {index}: {what}"), actions.clone());
        summary.steps += actions.len();
        let Err(failure) = replay(&trace, options) else { continue };
        summary.divergences += 1;
        std::fs::create_dir_all(out).map_err(Error::io(out, "create"))?;
        let path = out.join(format!("{}--path-{index}.json", config.strategy));
        std::fs::write(&path, trace.to_json()).map_err(Error::io(&path, "write"))?;
        let regenerate = match generated {
            Generated::Walks { seed, .. } => format!(
                "\nregenerate: cargo run -p conformance -- test {} --walks 1 --seed {} --steps-max {steps_max}",
                config.flags(),
                seed.wrapping_add(index as u64)
            ),
            Generated::Paths { .. } => String::new(),
        };
        report(&format!(
            "DIVERGES  path {index}, saved as {}\n{failure}\nreproduce: {}{regenerate}",
            path.display(),
            reproduce_command(&path, options)
        ));
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}
