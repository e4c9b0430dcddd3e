//! Reads the expected verdict table out of spec.md, the single place where it is written.

use crate::config::Strategy;
use crate::properties::SAFETY;
use std::collections::BTreeMap;

/// spec.md, compiled in: the table `check` compares computed verdicts with.
pub const SPEC: &str = include_str!("../../spec.md");

const BEGIN: &str = "<!-- expected-verdicts:begin -->";
const END: &str = "<!-- expected-verdicts:end -->";
const UNBOUNDED_BEGIN: &str = "<!-- unbounded-verdicts:begin -->";
const UNBOUNDED_END: &str = "<!-- unbounded-verdicts:end -->";

/// The expected verdict of one safety property: `Some(true)` holds, `Some(false)` violated,
/// `None` (`n/a` in spec.md) not checked in that configuration.
pub type ExpectedTable = BTreeMap<(Strategy, &'static str), Option<bool>>;

/// Parses the table between the markers in `spec`: a header row naming the safety properties
/// in `SAFETY` order, then one row per strategy with `holds`, `violated` or `n/a` (not checked
/// in that configuration) in each cell. Every strategy must have exactly one row.
pub fn parse(spec: &str) -> Result<ExpectedTable, String> {
    let table = parse_between(spec, BEGIN, END)?;
    if let Some(missing) = Strategy::ALL.iter().find(|s| !table.contains_key(&(**s, SAFETY[0]))) {
        return Err(format!("the expected table has no row for {missing}"));
    }
    Ok(table)
}

/// Parses spec.md's unbounded table (§9.1), the verdicts of `check --unbounded`: the same
/// columns, one row per strategy the abstraction covers and `--unbounded` lifts a budget of
/// (the others are refused, and have none).
pub fn parse_unbounded(spec: &str) -> Result<ExpectedTable, String> {
    parse_between(spec, UNBOUNDED_BEGIN, UNBOUNDED_END)
}

fn parse_between(spec: &str, begin: &str, end: &str) -> Result<ExpectedTable, String> {
    let name = |marker: &str| marker.trim_start_matches("<!-- ").trim_end_matches(" -->").to_string();
    let start = spec.find(begin).ok_or_else(|| format!("spec.md has no {} marker", name(begin)))? + begin.len();
    let end = spec[start..].find(end).ok_or_else(|| format!("spec.md has no {} marker", name(end)))? + start;
    let mut rows = spec[start..end].lines().map(str::trim).filter(|line| line.starts_with('|'));
    let header = cells(rows.next().ok_or("the expected table has no header")?);
    if header.len() != SAFETY.len() + 1 || header[1..].iter().zip(SAFETY).any(|(cell, name)| cell != name) {
        return Err(format!("the expected table's header must be: strategy | {}", SAFETY.join(" | ")));
    }
    let mut table = ExpectedTable::new();
    for row in rows.filter(|row| !row.starts_with("|-") && !row.starts_with("| -")) {
        let cells = cells(row);
        let strategy: Strategy = cells[0].trim_matches('`').parse()?;
        if cells.len() != SAFETY.len() + 1 {
            return Err(format!(
                "the expected row of {strategy} has {} cells, expected {}",
                cells.len(),
                SAFETY.len() + 1
            ));
        }
        for (cell, name) in cells[1..].iter().zip(SAFETY) {
            let holds = match cell.as_str() {
                "holds" => Some(true),
                "violated" => Some(false),
                "n/a" => None,
                other => {
                    return Err(format!(
                        "expected cell '{other}' for {strategy} / {name} is not holds, violated or n/a"
                    ))
                }
            };
            if table.insert((strategy, name), holds).is_some() {
                return Err(format!("the expected table has two rows for {strategy}"));
            }
        }
    }
    Ok(table)
}

/// The table of the spec.md this binary was built with.
pub fn from_spec() -> Result<ExpectedTable, String> {
    parse(SPEC)
}

/// The unbounded table of the spec.md this binary was built with.
pub fn unbounded_from_spec() -> Result<ExpectedTable, String> {
    parse_unbounded(SPEC)
}

fn cells(row: &str) -> Vec<String> {
    row.trim_matches('|').split('|').map(|cell| cell.trim().to_string()).collect()
}
