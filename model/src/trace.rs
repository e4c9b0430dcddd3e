//! The versioned trace file: a configuration and a list of action values, replayable anywhere.

use crate::action::{Action, Actor};
use crate::check::Verdict;
use crate::config::Config;
use crate::properties::{is_safety, properties_for, Role};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Written in every trace file so that a reader can refuse files it does not understand.
pub const TRACE_FORMAT: &str = "onceproof-trace";
/// The format's version: bumped only by an incompatible change. An optional field that older
/// files lack and readers default (such as `tool`) is compatible.
pub const TRACE_VERSION: u32 = 1;

/// A replayable run: the bounds and strategy, the actions by value, and what it demonstrates.
/// Read only through `Trace::from_json` / `from_slice`, which validate what serde cannot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trace {
    pub format: String,
    pub version: u32,
    /// The tool that produced the actions (`onceproof-model 0.1.0`: the model library, whoever
    /// writes the file). Informational: a trace of the same format version is read whatever
    /// tool version wrote it; traces written before the field existed have none.
    pub tool: Option<String>,
    pub config: Config,
    /// The property this trace demonstrates (a counterexample or an example), if any.
    pub property: Option<String>,
    /// The verdict the property gets at the end of the trace: `violated`, `holds` (a safety
    /// property) or `reached` (a `sometimes` property).
    pub verdict: Option<Verdict>,
    /// One line for readers: what the trace shows.
    pub description: String,
    pub actions: Vec<Action>,
}

/// A trace file as JSON knows it: the nested parts are parsed on their own afterwards, so that
/// an error names the part (serde's errors from a JSON value carry no position).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrace {
    format: String,
    version: u32,
    #[serde(default)]
    tool: Option<String>,
    config: Value,
    property: Option<String>,
    verdict: Option<Verdict>,
    description: String,
    actions: Vec<Value>,
}

/// Why a trace file could not be read. Each is rendered as one line.
#[derive(Debug)]
pub enum TraceError {
    Json(serde_json::Error),
    /// A nested part (`config`, or `step N` of the actions) is not valid.
    Part {
        part: String,
        source: serde_json::Error,
    },
    WrongFormat(String),
    /// An ITF trace (`--format itf`), written for other tools beside the onceproof trace it was
    /// made from: `source` is that trace's file name, as its `#meta` says.
    Itf {
        source: Option<String>,
    },
    MissingVersion,
    /// Another format version; `tool` is the tool the file says wrote it.
    WrongVersion {
        found: String,
        tool: Option<String>,
    },
    BadConfig(String),
    /// The property is not one the model checks for the trace's configuration.
    UnknownProperty {
        name: String,
        known: Vec<&'static str>,
    },
    /// The verdict does not fit the property (or there is no property to give it to).
    BadVerdict(String),
    /// An action names a group, owner or partition the configuration does not have.
    BadAction {
        step: usize,
        action: Action,
        why: String,
    },
}

impl fmt::Display for TraceError {
    /// One line, whatever the file holds: serde's messages and this one quote parts of the
    /// input (a field name, a format name), so control characters (a newline in an unknown
    /// field's name) are written escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = self.message();
        if !message.contains(char::is_control) {
            return f.write_str(&message);
        }
        for c in message.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl TraceError {
    fn message(&self) -> String {
        match self {
            TraceError::Json(error) => format!("not a valid trace: {error}"),
            TraceError::Part { part, source } => format!("not a valid trace: {part}: {source}"),
            TraceError::WrongFormat(found) => format!("format is '{found}', expected '{TRACE_FORMAT}'"),
            TraceError::Itf { source } => {
                let beside = source.as_ref().map_or("the .json trace of the same name".to_string(), |s| s.clone());
                format!(
                    "an ITF trace (the Informal Trace Format, written for Apalache and Quint), not a {TRACE_FORMAT}: \
                     replay the trace written beside it, {beside}"
                )
            }
            TraceError::MissingVersion => "the trace has no format version".to_string(),
            TraceError::WrongVersion { found, tool } => {
                let written_by = tool.as_ref().map_or(String::new(), |tool| format!(" (written by {tool})"));
                format!(
                    "trace format version {found}{written_by} is not supported: {} reads version {TRACE_VERSION}",
                    crate::TOOL
                )
            }
            TraceError::BadConfig(why) => format!("the trace's config is invalid: {why}"),
            TraceError::UnknownProperty { name, known } => {
                format!("property '{name}' is not checked for this config (its properties: {})", known.join(", "))
            }
            TraceError::BadVerdict(why) => why.clone(),
            TraceError::BadAction { step, action, why } => format!("step {step} ({action}): {why}"),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Json(source) | TraceError::Part { source, .. } => Some(source),
            TraceError::WrongFormat(_)
            | TraceError::Itf { .. }
            | TraceError::MissingVersion
            | TraceError::WrongVersion { .. }
            | TraceError::BadConfig(_)
            | TraceError::UnknownProperty { .. }
            | TraceError::BadVerdict(_)
            | TraceError::BadAction { .. } => None,
        }
    }
}

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
            tool: Some(crate::TOOL.to_string()),
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
        let tool = self.tool.as_ref().map_or(String::new(), |tool| format!("  \"tool\": {},\n", compact(tool)));
        format!(
            "{{\n  \"format\": {},\n  \"version\": {},\n{tool}  \"config\": {},\n  \"property\": {},\n  \
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

    /// Parses a trace: see `from_slice`.
    pub fn from_json(text: &str) -> Result<Trace, TraceError> {
        Trace::from_slice(text.as_bytes())
    }

    /// Parses a trace file's bytes, checking the format name and version before anything else,
    /// then every field (unknown ones are errors at every level), the configuration against
    /// the replay limits, the property and verdict against the configuration, and that every
    /// action names a group, owner and partition of the configuration. Whether the actions
    /// form a run of the model is `check::replay`'s question.
    pub fn from_slice(bytes: &[u8]) -> Result<Trace, TraceError> {
        let value: Value = serde_json::from_slice(bytes).map_err(TraceError::Json)?;
        let meta = value.get("#meta");
        if meta.and_then(|m| m.get("format")).and_then(Value::as_str) == Some("ITF") {
            let source = meta.and_then(|m| m.get("source")).and_then(Value::as_str).map(str::to_string);
            return Err(TraceError::Itf { source });
        }
        let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("<missing>");
        if format != TRACE_FORMAT {
            return Err(TraceError::WrongFormat(format.to_string()));
        }
        let version = value.get("version").ok_or(TraceError::MissingVersion)?;
        if version.as_u64() != Some(u64::from(TRACE_VERSION)) {
            let tool = value.get("tool").and_then(Value::as_str).map(str::to_string);
            return Err(TraceError::WrongVersion { found: version.to_string(), tool });
        }
        let raw: RawTrace = serde_json::from_value(value).map_err(TraceError::Json)?;
        let part = |part: String| move |source| TraceError::Part { part, source };
        let config: Config = serde_json::from_value(raw.config).map_err(part("config".to_string()))?;
        config.validate_for_replay().map_err(TraceError::BadConfig)?;
        check_property(&config, raw.property.as_deref(), raw.verdict.as_ref())?;
        let mut actions = Vec::with_capacity(raw.actions.len());
        for (index, action) in raw.actions.into_iter().enumerate() {
            let step = index + 1;
            let action: Action = serde_json::from_value(action).map_err(part(format!("step {step}")))?;
            check_action(&config, &action).map_err(|why| TraceError::BadAction { step, action, why })?;
            actions.push(action);
        }
        // A path of the abstraction (`any`, spec.md §7.1) is replayed in the ordinary
        // configuration of the faults it uses: concrete epochs, counts and totals.
        let config = if config.lifted.any() { config.concretised(&actions) } else { config };
        config.validate_for_replay().map_err(TraceError::BadConfig)?;
        Ok(Trace {
            format: raw.format,
            version: raw.version,
            tool: raw.tool,
            config,
            property: raw.property,
            verdict: raw.verdict,
            description: raw.description,
            actions,
        })
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
                    property.path_config(&report.config).clone(),
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
                    property.path_config(&report.config).clone(),
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

/// Whether a directory entry is a trace file: `*.json`, but not the `*.itf.json` that
/// `--format itf` writes beside each one (the same run in another format).
pub fn is_trace_file(path: &std::path::Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    name.ends_with(".json") && !name.ends_with(".itf.json")
}

/// The property must be one the model checks for `config`, and the verdict one it can have: a
/// safety property is `violated` or `holds`, a `sometimes` property `reached`.
fn check_property(config: &Config, property: Option<&str>, verdict: Option<&Verdict>) -> Result<(), TraceError> {
    let properties = properties_for(config);
    let Some(name) = property else {
        return match verdict {
            None => Ok(()),
            Some(verdict) => Err(TraceError::BadVerdict(format!("the verdict {} names no property", verdict.word()))),
        };
    };
    let Some(checked) = properties.iter().find(|p| p.name == name) else {
        let known = properties.iter().map(|p| p.name).collect();
        return Err(TraceError::UnknownProperty { name: name.to_string(), known });
    };
    let safety = is_safety(checked);
    let fits = match verdict {
        None => true,
        Some(Verdict::Violated | Verdict::Holds) => safety,
        Some(Verdict::Reached) => !safety,
        Some(Verdict::Unreached | Verdict::Unknown) => false,
    };
    if fits {
        return Ok(());
    }
    let accepted = if safety { "violated or holds" } else { "reached" };
    let word = verdict.map_or("none", Verdict::word);
    Err(TraceError::BadVerdict(format!("the verdict of '{name}' is {word}; a trace records it {accepted}")))
}

/// Every group, owner (a current one or a paused slot, `owners + i`) and partition an action
/// names must exist in `config` (which `validate_for_replay` accepted: none of them is 0).
fn check_action(config: &Config, action: &Action) -> Result<(), String> {
    let out_of = |what: &str, value: u8, count: u8| {
        format!("{what} {value} is out of range: the config has {what}s 0..={}", count - 1)
    };
    if let Some(group) = action.group().filter(|&g| g >= config.groups) {
        return Err(out_of("group", group, config.groups));
    }
    if let Actor::Owner { owner, .. } = action.actor() {
        let slots = config.owners + config.pauses;
        if owner >= slots {
            let paused = match config.pauses {
                0 => "no paused slots".to_string(),
                pauses => format!("paused slots {}..={}", config.owners, config.owners + pauses - 1),
            };
            return Err(format!("{} and {paused}", out_of("owner", owner, config.owners)));
        }
    }
    if let Some(partition) = action.partition().filter(|&p| p >= config.partitions) {
        return Err(out_of("partition", partition, config.partitions));
    }
    if let Action::Rebalance { to_owner, .. } = *action {
        if to_owner >= config.owners {
            return Err(format!("a rebalance to {}", out_of("owner", to_owner, config.owners)));
        }
    }
    Ok(())
}

/// One-line JSON of a trace part.
fn compact<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("trace parts always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_files_are_json_but_not_their_itf_siblings() {
        let cases = [("a--b.json", true), ("a--b.itf.json", false), ("a--b.jsonl", false), ("README.md", false)];
        for (name, expected) in cases {
            assert_eq!(is_trace_file(std::path::Path::new("dir").join(name).as_path()), expected, "{name}");
        }
    }
}
