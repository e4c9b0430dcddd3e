//! The versioned trace file: a configuration and a list of action values, replayable anywhere.

use crate::action::Action;
use crate::check::Verdict;
use crate::config::Config;
use crate::properties::Role;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Written in every trace file so that a reader can refuse files it does not understand.
pub const TRACE_FORMAT: &str = "onceproof-trace";
pub const TRACE_VERSION: u32 = 1;

/// A replayable run: the bounds and strategy, the actions by value, and what it demonstrates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    pub format: String,
    pub version: u32,
    pub config: Config,
    /// The property this trace demonstrates (a counterexample or an example), if any.
    pub property: Option<String>,
    /// The verdict the property gets at the end of the trace: `violated` or `reached`.
    pub verdict: Option<Verdict>,
    /// One line for readers: what the trace shows.
    pub description: String,
    pub actions: Vec<Action>,
}

/// Why a trace file could not be read. Each is rendered as one line.
#[derive(Debug)]
pub enum TraceError {
    Json(serde_json::Error),
    WrongFormat(String),
    MissingVersion,
    WrongVersion(String),
    BadConfig(String),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Json(error) => write!(f, "not a valid trace: {error}"),
            TraceError::WrongFormat(found) => write!(f, "format is '{found}', expected '{TRACE_FORMAT}'"),
            TraceError::MissingVersion => write!(f, "the trace has no format version"),
            TraceError::WrongVersion(found) => {
                write!(f, "trace format version {found} is not supported (this build reads version {TRACE_VERSION})")
            }
            TraceError::BadConfig(why) => write!(f, "the trace's config is invalid: {why}"),
        }
    }
}

impl std::error::Error for TraceError {}

impl Trace {
    pub fn new(
        config: Config,
        property: Option<&str>,
        verdict: Option<Verdict>,
        description: String,
        actions: Vec<Action>,
    ) -> Trace {
        Trace {
            format: TRACE_FORMAT.to_string(),
            version: TRACE_VERSION,
            config,
            property: property.map(str::to_string),
            verdict,
            description,
            actions,
        }
    }

    /// Pretty JSON with one action per line, so that a trace reads (and diffs) step by step.
    pub fn to_json(&self) -> String {
        let actions: Vec<String> = self.actions.iter().map(|a| format!("    {}", compact(a))).collect();
        format!(
            "{{\n  \"format\": {},\n  \"version\": {},\n  \"config\": {},\n  \"property\": {},\n  \
             \"verdict\": {},\n  \"description\": {},\n  \"actions\": [\n{}\n  ]\n}}\n",
            compact(&self.format),
            self.version,
            compact(&self.config),
            compact(&self.property),
            compact(&self.verdict),
            compact(&self.description),
            actions.join(",\n")
        )
    }

    /// Parses a trace, checking the format name and version before anything else.
    pub fn from_json(text: &str) -> Result<Trace, TraceError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(TraceError::Json)?;
        let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("<missing>");
        if format != TRACE_FORMAT {
            return Err(TraceError::WrongFormat(format.to_string()));
        }
        let version = value.get("version").ok_or(TraceError::MissingVersion)?;
        if version.as_u64() != Some(u64::from(TRACE_VERSION)) {
            return Err(TraceError::WrongVersion(version.to_string()));
        }
        let trace: Trace = serde_json::from_value(value).map_err(TraceError::Json)?;
        trace.config.validate_for_replay().map_err(TraceError::BadConfig)?;
        Ok(trace)
    }

    /// One trace per violated safety property of a check report, minimised counterexamples.
    pub fn counterexamples(report: &crate::check::CheckReport) -> Vec<Trace> {
        report
            .properties
            .iter()
            .filter(|p| p.verdict == Verdict::Violated)
            .map(|property| {
                let description = format!(
                    "{} violates {} in {} steps (found by model check, shortest)",
                    report.config.strategy,
                    property.name,
                    property.actions.len()
                );
                Trace::new(
                    report.config.clone(),
                    Some(&property.name),
                    Some(Verdict::Violated),
                    description,
                    property.actions.clone(),
                )
            })
            .collect()
    }

    /// One trace per reached `sometimes` property of a check report: the shortest example of
    /// each fault witness (the fault struck where it matters) and each observation (a defence
    /// at work: a zombie fenced, a duplicate skipped, a record dead-lettered, ...). Replayed
    /// against the real consumer, they witness the `holds` cells.
    pub fn examples(report: &crate::check::CheckReport) -> Vec<Trace> {
        report
            .properties
            .iter()
            .filter(|p| p.verdict == Verdict::Reached)
            .filter_map(|property| {
                let kind = match property.role {
                    Role::FaultWitness => "fault witness",
                    Role::Observation => "observation",
                    // Only a `sometimes` property is reached; a safety one holds or is violated.
                    Role::Safety => return None,
                };
                let description = format!(
                    "{} reaches {} ({kind}) in {} steps (found by model check, shortest)",
                    report.config.strategy,
                    property.name,
                    property.actions.len()
                );
                let actions = property.actions.clone();
                Some(Trace::new(
                    report.config.clone(),
                    Some(&property.name),
                    Some(Verdict::Reached),
                    description,
                    actions,
                ))
            })
            .collect()
    }

    /// The file name a trace is saved under: `STRATEGY--PROPERTY.json`.
    pub fn file_name(&self) -> String {
        format!("{}--{}.json", self.config.strategy, self.property.as_deref().unwrap_or("run"))
    }
}

/// One-line JSON of a trace part.
fn compact<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("trace parts always serialise")
}
