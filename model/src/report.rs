//! Renders check reports (table, counterexamples, JSON), writes trace files and decides the exit code.

use crate::TraceFormat;
use anyhow::Context;
use model::check::{CheckReport, Verdict};
use model::config::Budget;
use model::expected::ExpectedTable;
use model::properties::{Role, SAFETY};
use model::trace::Trace;
use model::ConsumerModel;
use std::fmt::Write;
use std::path::Path;

/// The judgement of a whole `check` run.
pub struct Outcome {
    pub exit_code: u8,
    /// One line per problem: a verdict that differs from spec.md, or a vacuous check.
    pub problems: Vec<String>,
    /// What the verdicts were compared with.
    pub compared_with: String,
    /// Rows the run left out, each with why (`--unbounded`: a row the abstraction does not
    /// cover, or with no budget to lift).
    pub skipped: Vec<(model::Strategy, String)>,
}

/// spec.md's two tables: the default bounds', and `--unbounded`'s (§9.1).
pub struct Expected {
    pub bounded: ExpectedTable,
    pub unbounded: ExpectedTable,
}

/// Exit 0 when everything agrees, 1 on a mismatch, violation or unreached fault witness, and 3
/// when a single-strategy search was incomplete and found nothing (nothing proven either way).
pub fn judge(reports: &[CheckReport], expected: Option<&Expected>, skipped: Vec<(model::Strategy, String)>) -> Outcome {
    let mut problems = Vec::new();
    for report in reports {
        for name in report.unreached() {
            problems.push(format!(
                "{}: fault witness '{name}' was never reached (the fault never struck where it matters), \
                 so the check is vacuous",
                report.config.strategy
            ));
        }
    }
    let bounded = reports.iter().all(|r| r.config.has_default_bounds());
    let unbounded = reports.iter().all(|r| r.config == model::Config::new(r.config.strategy).unbounded());
    let comparable = expected.and_then(|tables| match (bounded, unbounded) {
        (true, _) => Some(&tables.bounded),
        (false, true) => Some(&tables.unbounded),
        (false, false) => None,
    });
    let compared_with = match (expected, comparable, bounded) {
        (Some(_), Some(_), true) => "spec.md's expected verdict table".to_string(),
        (Some(_), Some(_), false) => "spec.md's unbounded verdict table".to_string(),
        (Some(_), None, _) => {
            "nothing: spec.md's tables are for the default bounds and for --unbounded only".to_string()
        }
        (None, _, _) => "nothing (single strategy: exit 1 when a safety property is violated)".to_string(),
    };
    if let (Some(table), false) = (comparable, bounded) {
        // The unbounded table lists exactly the rows `--unbounded` checks.
        let checked: Vec<model::Strategy> = reports.iter().map(|r| r.config.strategy).collect();
        let listed: std::collections::BTreeSet<String> = table.keys().map(|(s, _)| s.to_string()).collect();
        for strategy in listed.iter().filter(|s| !checked.iter().any(|c| c.name() == s.as_str())) {
            problems.push(format!("{strategy}: spec.md's unbounded table has a row, but --unbounded did not check it"));
        }
    }
    if let Some(table) = comparable {
        for report in reports {
            let strategy = report.config.strategy;
            if !table.contains_key(&(strategy, SAFETY[0])) {
                problems.push(format!("{strategy}: checked, but spec.md's table has no row for it"));
                continue;
            }
            for name in SAFETY {
                let expected = table[&(strategy, name)];
                let verdict = report.outcome(name).map(|o| o.verdict.clone());
                let agrees = matches!(
                    (&verdict, expected),
                    (Some(Verdict::Holds), Some(true)) | (Some(Verdict::Violated), Some(false)) | (None, None)
                );
                if !agrees {
                    let want = expected.map_or("n/a", |holds| if holds { "holds" } else { "violated" });
                    let found = verdict.as_ref().map_or("n/a (not checked)", Verdict::word);
                    problems.push(format!("{strategy} / {name}: spec.md expects {want}, the checker found {found}"));
                }
            }
        }
    }
    // Compared with the table, an unfinished search already shows up as `unknown` mismatches.
    // Otherwise a violation fails a single-strategy check, and an unfinished search that found
    // nothing proves nothing either way.
    let incomplete = reports.iter().any(|r| !r.complete);
    let single_violated = expected.is_none() && reports.iter().any(CheckReport::any_violated);
    let exit_code = if !problems.is_empty() || single_violated {
        1
    } else if incomplete {
        3
    } else {
        0
    };
    Outcome { exit_code, problems, compared_with, skipped }
}

/// How `text` lays a report out.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// The widest line, in characters: the terminal's, or `WIDTH_DEFAULT` off a terminal.
    /// Only `--wide`'s matrix is wider.
    pub width_chars: usize,
    /// `--wide`: the verdict matrix, a column per safety property, instead of a line per row.
    pub wide: bool,
    /// `--quiet`: the summary only, no counterexample and no hint.
    pub quiet: bool,
}

/// The width off a terminal, and on one whose `COLUMNS` is unset or not a number: stable
/// output for files, pipes and the doc tests.
pub const WIDTH_DEFAULT_CHARS: usize = 120;
/// The narrowest layout: below it a property name and its count no longer fit beside the
/// indentation.
pub const WIDTH_MIN_CHARS: usize = 40;

/// The column where a row's verdicts start: the longest strategy name among the rows (the
/// header's "strategy" at least) and two spaces.
fn name_column_chars(reports: &[CheckReport]) -> usize {
    reports.iter().map(|r| r.config.strategy.name().len()).chain(["strategy".len()]).max().unwrap_or(0) + 2
}

/// The bounds, a summary line per row (or `--wide`'s matrix), each counterexample as numbered
/// steps and the reason it fails, then the judgement, its last line OK, FAILED or INCONCLUSIVE.
pub fn text(reports: &[CheckReport], outcome: &Outcome, layout: Layout) -> String {
    let width = layout.width_chars.max(WIDTH_MIN_CHARS);
    let mut out = String::new();
    match layout.wide {
        true => {
            out.push_str(&matrix_bounds(reports));
            out.push_str(&table(reports));
        }
        false => {
            out.push_str(&summary_bounds(reports, width));
            out.push_str(&summary(reports, width));
        }
    }
    if !layout.quiet {
        out.push_str(&counterexamples(reports, width));
    }
    for report in reports.iter().filter(|r| r.complete && !r.not_observed().is_empty()) {
        let line = format!(
            "{}: not observed: {} (an observation is reported, never a failure)",
            report.config.strategy,
            report.not_observed().join(", ")
        );
        out.push('\n');
        out.push_str(&wrap(&line, 4, width));
    }
    if !outcome.skipped.is_empty() {
        out.push('\n');
    }
    for (strategy, why) in &outcome.skipped {
        out.push_str(&wrap(&format!("{strategy}: not checked: {why}"), 4, width));
    }
    if !layout.quiet {
        out.push('\n');
        out.push_str(&wrap(HINT, 4, width));
    }
    out.push('\n');
    out.push_str(&wrap(&format!("compared with {}", outcome.compared_with), 4, width));
    for problem in &outcome.problems {
        out.push_str(&wrap(&format!("MISMATCH {problem}"), 4, width));
    }
    // The last line, whole whatever the width: scripts look for it.
    let summary = match outcome.exit_code {
        0 => "OK: every verdict as expected, every fault witness reached",
        1 if outcome.problems.is_empty() => "FAILED: a safety property is violated",
        1 => "FAILED",
        _ => "INCONCLUSIVE: the search did not finish and found no violation",
    };
    let _ = writeln!(out, "{summary}");
    out
}

/// Where the rest of a check is: said once, before the judgement, so that the judgement's two
/// lines stay the last two.
const HINT: &str = "every counterexample as a replayable trace: --traces DIR; as a page with timelines: \
                    --html FILE; the full matrix: --wide";

/// `--wide`'s bounds: the first row's, then every row whose bounds differ with its own.
fn matrix_bounds(reports: &[CheckReport]) -> String {
    let mut out = String::new();
    if let Some(first) = reports.first() {
        let _ = writeln!(out, "bounds: {}", shared_bounds(&first.config));
        // Rows whose shared bounds differ (fewer groups where a second adds nothing, say).
        for report in reports.iter().filter(|r| shared_bounds(&r.config) != shared_bounds(&first.config)) {
            let _ = writeln!(out, "  {}: {}", report.config.strategy, shared_bounds(&report.config));
        }
        out.push_str(&search_line(first));
    }
    out
}

/// The summary's bounds: the first row's, all of them, then the rows that differ, grouped by
/// what differs (29 of the default table's 38 rows differ in a budget or two).
fn summary_bounds(reports: &[CheckReport], width: usize) -> String {
    let mut out = String::new();
    let Some(first) = reports.first() else { return out };
    let base = bounds(&first.config);
    out.push_str(&flow("bounds: ", &base, 8, width));
    let mut groups: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for report in reports {
        let differs: Vec<String> = bounds(&report.config)
            .into_iter()
            .zip(&base)
            .filter(|(own, base)| own != *base)
            .map(|(own, _)| own)
            .collect();
        if differs.is_empty() {
            continue;
        }
        let strategy = report.config.strategy.to_string();
        match groups.iter_mut().find(|(bounds, _)| *bounds == differs) {
            Some((_, rows)) => rows.push(strategy),
            None => groups.push((differs, vec![strategy])),
        }
    }
    for (differs, rows) in groups {
        let mut tokens = differs;
        if let Some(last) = tokens.last_mut() {
            last.push(':');
        }
        tokens.extend(with_commas(rows));
        out.push_str(&flow("  with ", &tokens, 6, width));
    }
    out.push_str(&search_line(first));
    out
}

fn search_line(first: &CheckReport) -> String {
    format!(
        "search: {:?}, {} thread(s){}\n\n",
        first.search,
        first.threads,
        if first.symmetry { ", symmetry" } else { "" }
    )
}

/// One line per row (wrapped onto indented lines): the safety properties that fail, each with
/// its shortest counterexample's steps, those that hold, and the witnesses and observations
/// reached. Only the properties checked for the row are named.
fn summary(reports: &[CheckReport], width: usize) -> String {
    let column = name_column_chars(reports);
    let header = "safety properties (n: steps of the shortest counterexample) | witnesses, observations reached";
    let words: Vec<String> = header.split(' ').map(String::from).collect();
    let mut out = flow(&format!("{:<column$}", "strategy"), &words, column + 2, width);
    for report in reports {
        let mut tokens: Vec<String> = Vec::new();
        for verdict in [Verdict::Violated, Verdict::Unknown, Verdict::Holds, Verdict::Reached, Verdict::Unreached] {
            let names: Vec<String> = SAFETY
                .iter()
                .filter_map(|&name| report.outcome(name).filter(|o| o.verdict == verdict))
                .map(|o| match o.verdict {
                    Verdict::Violated => format!("{} ({})", o.name, o.actions.len()),
                    Verdict::Holds | Verdict::Reached | Verdict::Unreached | Verdict::Unknown => o.name.clone(),
                })
                .collect();
            if names.is_empty() {
                continue;
            }
            if let Some(last) = tokens.last_mut() {
                last.push_str(" |");
            }
            tokens.push(format!("{}:", verdict_heading(&verdict)));
            tokens.extend(with_commas(names));
        }
        if let Some(last) = tokens.last_mut() {
            last.push_str(" |");
        }
        for (role, label) in [(Role::FaultWitness, "witnesses"), (Role::Observation, "observed")] {
            let of_role: Vec<_> = report.properties.iter().filter(|p| p.role == role).collect();
            let reached = of_role.iter().filter(|p| p.verdict == Verdict::Reached).count();
            tokens.push(format!("{label} {reached}/{}", of_role.len()));
        }
        let count = tokens.len();
        tokens[count - 2].push(',');
        let name = format!("{:<column$}", report.config.strategy.to_string());
        out.push_str(&flow(&name, &tokens, column + 2, width));
    }
    out
}

/// How the summary names the safety properties of one verdict.
fn verdict_heading(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Violated => "VIOLATED",
        Verdict::Holds => "holds",
        Verdict::Unknown => "unknown (search unfinished)",
        Verdict::Reached => "reached",
        Verdict::Unreached => "unreached",
    }
}

/// Every counterexample: its heading, its numbered steps, and where and why it fails.
fn counterexamples(reports: &[CheckReport], width: usize) -> String {
    let mut out = String::new();
    for report in reports {
        for property in report.properties.iter().filter(|p| p.verdict == Verdict::Violated) {
            // With a lifted budget, the path is shown in the configuration it replays in.
            let model = ConsumerModel::new(property.path_config(&report.config).clone());
            let heading = format!(
                "{} violates {} in {} steps{}:",
                report.config.strategy,
                property.name,
                property.actions.len(),
                if property.shortest { String::new() } else { not_shortest() }
            );
            out.push('\n');
            out.push_str(&wrap(&heading, 4, width));
            out.push_str(&numbered_steps(&model, &property.actions, width));
            out.push_str(&wrap(&violation_line(&model, &property.name, &property.actions), 4, width));
        }
    }
    out
}

/// "violated at step N: REASON", the explanation the HTML report's timelines and the explorer
/// give (`view::first_violation`).
fn violation_line(model: &ConsumerModel, name: &str, actions: &[model::Action]) -> String {
    let path = path_of(model, actions);
    match model::view::first_violation(model, &path, name) {
        Some((step, reason)) => format!("  violated at step {step}: {reason}"),
        // A counterexample always fails its property; should the judgement and the checker
        // ever disagree, say so rather than print nothing.
        None => format!("  {name}: the path does not fail it when judged step by step"),
    }
}

/// The states a counterexample passes through, each with the action taken from it (the last
/// with none), as `view` and `svg` take a path.
fn path_of(model: &ConsumerModel, actions: &[model::Action]) -> Vec<(model::State, Option<model::Action>)> {
    let states = model::check::replay(model, actions).expect("a minimised counterexample replays");
    let mut path: Vec<(model::State, Option<model::Action>)> =
        states.iter().cloned().zip(actions.iter().map(|&a| Some(a))).collect();
    path.push((states.last().expect("replay returns the initial state").clone(), None));
    path
}

/// `items` with a comma after each but the last.
fn with_commas(items: Vec<String>) -> Vec<String> {
    let count = items.len();
    items.into_iter().enumerate().map(|(i, item)| if i + 1 < count { item + "," } else { item }).collect()
}

/// `text` split at spaces and flowed by `flow`, continuation lines indented by `indent`.
fn wrap(text: &str, indent: usize, width: usize) -> String {
    let words: Vec<String> = text.split(' ').map(String::from).collect();
    // A leading indentation is kept: its empty words would otherwise collapse.
    let lead = words.iter().take_while(|w| w.is_empty()).count();
    flow(&" ".repeat(lead), &words[lead..], indent, width)
}

/// `first`, then `tokens` separated by spaces, in lines of at most `width` characters with a
/// newline each; a continuation line starts with `indent` spaces. A token that does not fit on
/// a line of its own stands alone on it.
fn flow(first: &str, tokens: &[String], indent: usize, width: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for token in tokens {
        let gap = usize::from(!empty);
        if !empty && line.chars().count() + gap + token.chars().count() > width {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(token);
        empty = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// How many of `bound_cells` every row has (groups to inflight): `--wide`'s bounds line; the
/// per-row fault budgets show in the properties checked.
const SHARED_BOUNDS_COUNT: usize = 9;

/// The bounds every row has, as `--wide` prints them.
fn shared_bounds(c: &model::Config) -> String {
    bounds(c)[..SHARED_BOUNDS_COUNT].join(" ")
}

/// Every bound of a row as (name, value), in the order of `Config::flags`: the summary's and
/// the HTML report's bounds.
fn bound_cells(c: &model::Config) -> Vec<(&'static str, String)> {
    // Destructured whole, so that a new bound cannot be left out of the reports.
    let model::Config {
        strategy: _,
        groups,
        owners,
        partitions,
        records,
        crashes: _,
        rebalances: _,
        commit_every,
        inflight,
        delta,
        poison,
        max_attempts,
        ack_losses,
        retentions,
        pauses,
        log_losses,
        leader_failures,
        isr_shrinks,
        lifted: _,
    } = c;
    // `--pauses any` still bounds the earlier incarnations alive at once: say how many.
    let pauses = match c.pauses_budget() {
        Budget::Any => format!("any ({pauses} alive at once)"),
        Budget::Count(count) => count.to_string(),
    };
    vec![
        ("groups", groups.to_string()),
        ("owners", owners.to_string()),
        ("partitions", partitions.to_string()),
        ("records", records.to_string()),
        ("crashes", c.crashes_budget().to_string()),
        ("rebalances", c.rebalances_budget().to_string()),
        ("pauses", pauses),
        ("commit-every", commit_every.to_string()),
        ("inflight", inflight.to_string()),
        ("delta", delta.to_string()),
        ("poison", poison.map_or("none".to_string(), |p| p.to_string())),
        ("max-attempts", max_attempts.to_string()),
        ("ack-losses", ack_losses.to_string()),
        ("retentions", retentions.to_string()),
        ("log-losses", log_losses.to_string()),
        ("leader-failures", leader_failures.to_string()),
        ("isr-shrinks", isr_shrinks.to_string()),
    ]
}

/// Every bound of a row as "name value" words.
fn bounds(c: &model::Config) -> Vec<String> {
    bound_cells(c).into_iter().map(|(name, value)| format!("{name} {value}")).collect()
}

fn table(reports: &[CheckReport]) -> String {
    let mut header = vec!["strategy".to_string()];
    header.extend(SAFETY.iter().map(|s| s.to_string()));
    header.extend(["witnesses", "observed", "states", "unique", "depth", "seconds"].map(String::from));
    // Seconds are shown as exploration + counterexample shortening.
    let mut rows = vec![header];
    for report in reports {
        let mut row = vec![report.config.strategy.to_string()];
        for name in SAFETY {
            row.push(match report.outcome(name) {
                Some(o) if o.verdict == Verdict::Violated => format!("VIOLATED ({})", o.actions.len()),
                Some(o) => o.verdict.word().to_string(),
                None => "-".to_string(),
            });
        }
        for role in [Role::FaultWitness, Role::Observation] {
            let of_role: Vec<_> = report.properties.iter().filter(|p| p.role == role).collect();
            let reached = of_role.iter().filter(|p| p.verdict == Verdict::Reached).count();
            row.push(format!("{reached}/{}", of_role.len()));
        }
        row.push(report.states.to_string());
        row.push(report.unique_states.to_string());
        row.push(report.max_depth.to_string());
        row.push(format!("{:.2}+{:.2}", report.seconds, report.counterexample_seconds));
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (index, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if index == 0 {
            let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        }
    }
    out
}

/// Said of a counterexample the search for shortest paths did not reach (`PropertyOutcome::shortest`).
fn not_shortest() -> String {
    format!(
        " (minimised, not proven shortest: the search for shortest paths stopped at its bound of {} states)",
        model::check::SHORTEST_STATES_MAX
    )
}

/// A counterexample as numbered, human-readable steps, a long step wrapped under its text.
pub fn numbered_steps(model: &ConsumerModel, actions: &[model::Action], width: usize) -> String {
    let states = model::check::replay(model, actions).expect("a minimised counterexample replays");
    let mut out = String::new();
    for (index, (state, action)) in states.iter().zip(actions).enumerate() {
        let words: Vec<String> = model.describe_step(state, action).split(' ').map(String::from).collect();
        out.push_str(&flow(&format!("  {:>2}. ", index + 1), &words, 6, width));
    }
    out
}

/// One self-contained HTML page (`check --html`): the verdict table, a colour per cell, and
/// for each violation its timeline with the failing step marked and the numbered steps. No
/// external assets: the style is inline and the timelines are inline SVG.
pub fn html(reports: &[CheckReport], outcome: &Outcome) -> String {
    let mut out = String::from(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>onceproof check</title><style>\
         body{font-family:sans-serif;background:#0f1720;color:#e7ecef;margin:1.5em auto;padding:0 16px;\
         max-width:1200px}.box{overflow-x:auto;max-width:100%}p.reason{color:#ff9a9a;font-weight:bold}\
         td.differs{background:#3a3357}\
         table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #3a4651;padding:3px 6px}\
         th{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left}\
         td.holds{background:#12452f}td.violated{background:#7a1f1f;font-weight:bold}\
         td.none{color:#aab4be}td.other{background:#5a4a12}ol{font-family:monospace;font-size:13px}\
         a{color:#9fd0ff}h2{font-size:16px;margin-top:2em}</style></head><body>",
    );
    let _ = write!(out, "<h1>onceproof check</h1><p>{}</p>", model::svg::escape(&outcome_summary(outcome)));
    if let Some(first) = reports.first() {
        let first_bounds = bounds(&first.config).join(" ");
        let _ = write!(out, "<p>bounds: {} (<a href='#bounds'>each row's</a>)</p>", model::svg::escape(&first_bounds));
    }
    // The matrix is wider than the page: it scrolls inside its own box, not the page.
    out.push_str("<div class='box' style='overflow-x:auto'><table><tr><th>strategy</th>");
    for name in SAFETY {
        let _ = write!(out, "<th>{name}</th>");
    }
    out.push_str("<th>witnesses</th><th>unique states</th></tr>");
    for report in reports {
        let _ = write!(out, "<tr><td>{}</td>", report.config.strategy);
        for name in SAFETY {
            let (class, text) = match report.outcome(name) {
                Some(o) if o.verdict == Verdict::Violated => {
                    let anchor =
                        format!("<a href='#{}--{name}'>VIOLATED ({})</a>", report.config.strategy, o.actions.len());
                    ("violated", anchor)
                }
                Some(o) if o.verdict == Verdict::Holds => ("holds", "holds".to_string()),
                Some(o) => ("other", o.verdict.word().to_string()),
                None => ("none", "-".to_string()),
            };
            let _ = write!(out, "<td class='{class}'>{text}</td>");
        }
        let witnesses: Vec<_> = report.properties.iter().filter(|p| p.role == Role::FaultWitness).collect();
        let reached = witnesses.iter().filter(|p| p.verdict == Verdict::Reached).count();
        let _ = write!(out, "<td>{reached}/{}</td><td>{}</td></tr>", witnesses.len(), report.unique_states);
    }
    out.push_str("</table></div>");
    out.push_str(&html_bounds(reports));
    for report in reports {
        for property in report.properties.iter().filter(|p| p.verdict == Verdict::Violated) {
            let model = ConsumerModel::new(property.path_config(&report.config).clone());
            out.push_str(&html_violation(&model, report, property));
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// Every row's own bounds, a column per bound; a value other than the first row's is marked,
/// since most rows of the table run at budgets of their own.
fn html_bounds(reports: &[CheckReport]) -> String {
    let Some(first) = reports.first() else { return String::new() };
    let base = bound_cells(&first.config);
    let mut out = String::from(
        "<h2 id='bounds'>bounds of each row</h2><p>a marked value differs from the first row's</p>\
         <div class='box' style='overflow-x:auto'><table class='bounds'><tr><th>strategy</th>",
    );
    for (name, _) in &base {
        let _ = write!(out, "<th>{name}</th>");
    }
    out.push_str("</tr>");
    for report in reports {
        let _ = write!(out, "<tr><td>{}</td>", report.config.strategy);
        for ((_, value), (_, first_value)) in bound_cells(&report.config).iter().zip(&base) {
            let class = if value == first_value { "same" } else { "differs" };
            let _ = write!(out, "<td class='{class}'>{}</td>", model::svg::escape(value));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table></div>");
    out
}

fn html_violation(model: &ConsumerModel, report: &CheckReport, property: &model::check::PropertyOutcome) -> String {
    let path = path_of(model, &property.actions);
    let strategy = report.config.strategy;
    let mut out = format!(
        "<h2 id='{strategy}--{}'>{strategy} violates {} in {} steps{}</h2>",
        property.name,
        property.name,
        property.actions.len(),
        if property.shortest { "" } else { " (not proven shortest)" }
    );
    // The timeline right under its heading (the browser test finds it there); it scales to
    // the page's width (`width='100%'`, at most its own).
    out.push_str(&model::svg::timeline(model, &path));
    out.push_str("<ol>");
    for (state, action) in path.iter().filter_map(|(state, action)| action.map(|a| (state, a))) {
        let _ = write!(out, "<li>{}</li>", model::svg::escape(&model.describe_step(state, &action)));
    }
    out.push_str("</ol>");
    // Where and why it fails, after the steps as on the command line.
    let reason = violation_line(model, &property.name, &property.actions);
    let _ = write!(out, "<p class='reason'>{}</p>", model::svg::escape(reason.trim_start()));
    out
}

fn outcome_summary(outcome: &Outcome) -> String {
    let mut summary = format!("compared with {}", outcome.compared_with);
    for problem in &outcome.problems {
        let _ = write!(summary, "; MISMATCH {problem}");
    }
    summary
}

/// Every file the `model` binary writes goes through here (the library does no I/O).
///
/// An output path that exists and is not a regular file (a device such as `/dev/full`, a
/// directory, a FIFO, a socket) is refused in one line naming the flag: writing there would
/// replace it (the rename below) or block. A symbolic link is judged by what it names.
pub fn refuse_non_regular(option: &str, argument: &Path, file: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(file) {
        Ok(metadata) if !metadata.file_type().is_file() => anyhow::bail!(
            "`{option} {}`: {} exists and is not a regular file; refused",
            argument.display(),
            file.display()
        ),
        _ => Ok(()),
    }
}

/// Refuses a report file (`option`'s value) before any work: its directory does not exist, or
/// it exists and is not a regular file.
pub fn check_writable_file(option: &str, file: &Path) -> anyhow::Result<()> {
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    anyhow::ensure!(parent.is_dir(), "cannot write {}: directory {} does not exist", file.display(), parent.display());
    refuse_non_regular(option, file, file)
}

/// Writes `contents` to a temporary file beside `file`, syncs it, then renames it over `file`:
/// a reader sees the old file or the whole new one, never half of it; a crash leaves at most a
/// `.NAME.PID.partial` file, never a truncated `file`. `file` (the value of `option` is
/// `argument`) is refused first if it exists and is not a regular file; through a symbolic link
/// the file it names is replaced, not the link.
pub fn write_atomically(option: &str, argument: &Path, file: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    refuse_non_regular(option, argument, file)?;
    let target = match std::fs::symlink_metadata(file) {
        Ok(metadata) if metadata.file_type().is_symlink() => {
            std::fs::canonicalize(file).with_context(|| format!("cannot write {}", file.display()))?
        }
        _ => file.to_path_buf(),
    };
    let name = target.file_name().with_context(|| format!("cannot write {}: no file name", file.display()))?;
    let temporary = target.with_file_name(format!(".{}.{}.partial", name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut out| {
            out.write_all(contents.as_bytes())?;
            out.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, &target));
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error).with_context(|| format!("cannot write {}", file.display()));
    }
    // The rename itself durable: sync the directory (best effort; not every file system can).
    let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Ok(directory) = std::fs::File::open(parent) {
        let _ = directory.sync_all();
    }
    Ok(())
}

pub fn json(reports: &[CheckReport], outcome: &Outcome) -> String {
    let document = serde_json::json!({
        "format": "onceproof-check",
        "version": 1,
        "tool": model::TOOL,
        "ok": outcome.exit_code == 0,
        "exit_code": outcome.exit_code,
        "compared_with": outcome.compared_with,
        "problems": outcome.problems,
        "skipped": outcome.skipped.iter().map(|(strategy, why)| serde_json::json!({"strategy": strategy, "why": why})).collect::<Vec<_>>(),
        "peak_rss_kib": peak_rss_kib(),
        "reports": reports,
    });
    serde_json::to_string_pretty(&document).expect("reports always serialise")
}

/// The process's peak resident set size (VmHWM), when the platform tells it.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Creates the traces directory and proves it writable before any checking starts.
/// An existing path that is not a directory is refused in one line.
pub fn prepare_traces_dir(dir: &Path) -> anyhow::Result<()> {
    if std::fs::metadata(dir).is_ok_and(|metadata| !metadata.is_dir()) {
        anyhow::bail!("`--traces {}`: {} exists and is not a directory; refused", dir.display(), dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create traces directory {}", dir.display()))?;
    let probe = dir.join(".onceproof-write-test");
    std::fs::write(&probe, b"").with_context(|| format!("traces directory {} is not writable", dir.display()))?;
    std::fs::remove_file(&probe).with_context(|| format!("cannot clean up {}", probe.display()))?;
    Ok(())
}

/// Writes one trace file per violated safety property of `report`, and with `--format itf`
/// its ITF beside it, each through [`write_atomically`]: a name already taken by anything but a
/// regular file (a directory, a FIFO) is refused, not written over.
pub fn write_traces(dir: &Path, report: &CheckReport, format: TraceFormat) -> anyhow::Result<()> {
    for trace in Trace::counterexamples(report) {
        let mut files = vec![(trace.file_name(), trace.to_json())];
        match format {
            TraceFormat::Json => {}
            TraceFormat::Itf => {
                // A counterexample is a run of the model: it always replays.
                let itf = model::itf::to_json(&trace)
                    .with_context(|| format!("cannot write the ITF of {}", trace.file_name()))?;
                files.push((model::itf::file_name(&trace), itf));
            }
        }
        for (name, text) in files {
            let path = dir.join(name);
            write_atomically("--traces", dir, &path, &text)?;
            errln!("  wrote {}", path.display())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::check::{PropertyOutcome, Search};
    use model::properties::Role;
    use model::{Config, Strategy};

    fn report_with(unreached: &str, role: Role) -> CheckReport {
        let outcome = |name: &str, role, verdict| PropertyOutcome {
            name: name.to_string(),
            role,
            expectation: "sometimes".to_string(),
            verdict,
            actions: Vec::new(),
            shortest: true,
            concrete: None,
        };
        CheckReport {
            config: Config { groups: 1, ..Config::new(Strategy::Atomic) },
            search: Search::Bfs,
            threads: 1,
            symmetry: false,
            complete: true,
            states: 1,
            unique_states: 1,
            max_depth: 0,
            seconds: 0.0,
            counterexample_seconds: 0.0,
            properties: vec![
                outcome("log-end", Role::FaultWitness, Verdict::Reached),
                outcome(unreached, role, Verdict::Unreached),
            ],
        }
    }

    /// The rule of spec.md §6.2: an unreached fault witness fails the check (nothing was
    /// proven under that fault), an unobserved outcome never does.
    #[test]
    fn only_an_unreached_fault_witness_fails_a_check() {
        let cases = [("crash-after-write", Role::FaultWitness, 1), ("replay", Role::Observation, 0)];
        for (name, role, exit_code) in cases {
            let outcome = judge(&[report_with(name, role)], None, Vec::new());
            assert_eq!(outcome.exit_code, exit_code, "{name}: {:?}", outcome.problems);
            assert_eq!(outcome.problems.iter().any(|p| p.contains(name)), exit_code == 1, "{:?}", outcome.problems);
        }
    }

    /// Text flows into lines of at most the width, continuations indented; a word longer than
    /// a line stands alone on its own line; a leading indentation is kept.
    #[test]
    fn wrapped_lines_fit_the_width() {
        let cases: [(&str, usize, usize, &str); 4] = [
            ("aa bb cc", 2, 5, "aa bb\n  cc\n"),
            ("aa bb cc", 2, 8, "aa bb cc\n"),
            ("aa bbbbbbbb cc", 4, 6, "aa\n    bbbbbbbb\n    cc\n"),
            ("  violated at step 2: x", 4, 12, "  violated\n    at step\n    2: x\n"),
        ];
        for (text, indent, width, wrapped) in cases {
            assert_eq!(wrap(text, indent, width), wrapped, "{text:?} at {width}");
        }
    }

    /// A counterexample the search for shortest paths gave up on says so in its heading; a
    /// shortest one does not.
    #[test]
    fn a_counterexample_not_proven_shortest_says_so() {
        let model = model::ConsumerModel::new(Config { groups: 1, ..Config::new(Strategy::EffectFirst) });
        let mut report = model::check::run(&model, &model::check::CheckOptions::default(), &mut |_| {});
        let violated =
            report.properties.iter().position(|p| p.verdict == Verdict::Violated).expect("effect-first violates");
        for shortest in [true, false] {
            report.properties[violated].shortest = shortest;
            let outcome = judge(std::slice::from_ref(&report), None, Vec::new());
            let layout = Layout { width_chars: WIDTH_DEFAULT_CHARS, wide: false, quiet: false };
            let text = text(std::slice::from_ref(&report), &outcome, layout);
            assert_eq!(text.contains("not proven shortest"), !shortest, "{text}");
        }
    }
}
