//! An SVG timeline for the explorer: one lane per owner, one row per step, durable writes filled.

use crate::action::{Action, Actor};
use crate::state::State;
use crate::view;
use crate::ConsumerModel;
use std::fmt::Write;

const LANE_WIDTH: usize = 84;
const LINE_HEIGHT: usize = 15;
/// Characters per line of the right column (monospace 11 px: about 6.6 px each).
const LABEL_CHARS: usize = 64;
const LABEL_WIDTH: usize = LABEL_CHARS * 7 + 8;

/// Colours on the timeline's own dark background, each at contrast 4.5:1 or more against it
/// (WCAG; the browser test measures the text): the explorer's panel is dark, and text without
/// a fill was black on it.
const BACKGROUND: &str = "#0f1720";
const TEXT: &str = "#e7ecef";
const MUTED: &str = "#aab4be";
const WRITE: &str = "#7cb7ff";
const ZOMBIE: &str = "#ffb454";
const FAIL: &str = "#ff6b6b";
const REACHED: &str = "#5fd3a5";

/// Draws `path` (states with the action taken from each) as lanes: the producer and the
/// coordinator first, then every group's owners. A filled dot is a durable write that landed, a
/// hollow one a step without a durable effect (fetch, or a write that was skipped or fenced),
/// a cross a crash; zombie writes are orange. The right column says what happened, and every
/// property is judged along the path (`view::judge_path`): at the step where one first fails,
/// a red ring and the reason in words; at the top, each property's verdict on this path.
pub fn timeline(model: &ConsumerModel, path: &[(State, Option<Action>)]) -> String {
    let config = &model.config;
    // Each group's lanes: its current owners, then its paused slots (earlier incarnations).
    let owners = usize::from(config.owners) + usize::from(config.pauses);
    let lanes = 2 + usize::from(config.groups) * owners;
    let steps: Vec<(&State, Action)> = path.iter().filter_map(|(s, a)| a.map(|a| (s, a))).collect();
    let verdicts = view::judge_path(model, path);
    let width = lanes * LANE_WIDTH + LABEL_WIDTH;
    let mut body = String::new();
    let mut y = 8;
    let title = format!("{} — {} step(s); properties on this path:", config.strategy, steps.len());
    y = text_lines(&mut body, 8, y, &[title], TEXT, "bold", "title");
    for verdict in &verdicts {
        let (mark, colour, words) = verdict_words(verdict);
        let line = format!("{mark} {}: {words}", verdict.name);
        y = text_lines(&mut body, 16, y, &wrap(&line, (width - 24) / 7), colour, "normal", "verdict");
    }
    y += 6;
    let lane_x = |lane: usize| lane * LANE_WIDTH + LANE_WIDTH / 2;
    let mut headers = vec!["producer".to_string(), "coordinator".to_string()];
    headers.extend((0..config.groups).flat_map(|g| {
        let current = (0..config.owners).map(move |o| format!("g{g}/o{o}"));
        current.chain((0..config.pauses).map(move |i| format!("g{g}/paused {i}")))
    }));
    let lanes_top = y;
    for (lane, header) in headers.iter().enumerate() {
        let _ = write!(
            body,
            "<text x='{}' y='{}' text-anchor='middle' font-weight='bold' fill='{TEXT}'>{header}</text>",
            lane_x(lane),
            y + 11
        );
    }
    y += LINE_HEIGHT + 4;
    let mut rows = String::new();
    for (row, (state, action)) in steps.iter().enumerate() {
        let lane = match action.actor() {
            Actor::Producer => 0,
            Actor::Coordinator => 1,
            Actor::Owner { group, owner } => 2 + usize::from(group) * owners + usize::from(owner),
        };
        let description = model.describe_step(state, action);
        let zombie = description.contains("[zombie");
        let mut lines = wrap(&format!("{}. {description}", row + 1), LABEL_CHARS);
        let failing: Vec<&view::PathVerdict> = (verdicts.iter())
            .filter(|v| matches!(v.outcome, view::PathOutcome::Violated { step, .. } if step == row + 1))
            .collect();
        let dot_y = y + 7;
        let label_x = lanes * LANE_WIDTH + 4;
        let first = lines.remove(0);
        let next_y = text_lines(&mut rows, label_x, y, &[first], TEXT, "normal", "step");
        let mut next_y = text_lines(&mut rows, label_x + 16, next_y, &lines, TEXT, "normal", "step");
        for verdict in &failing {
            let view::PathOutcome::Violated { reason, .. } = &verdict.outcome else { continue };
            let _ = write!(
                rows,
                "<g class='violation' data-property='{}' data-step='{}'>\
                 <circle cx='{}' cy='{dot_y}' r='10' fill='none' stroke='{FAIL}' stroke-width='3'/>",
                verdict.name,
                row + 1,
                lane_x(lane)
            );
            let reason = wrap(&format!("✗ {} violated: {reason}", verdict.name), LABEL_CHARS);
            next_y = text_lines(&mut rows, label_x, next_y, &reason, FAIL, "bold", "reason");
            rows.push_str("</g>");
        }
        let x = lane_x(lane);
        let next = crate::step::next_state(config, state, *action);
        let durable = state.groups.iter().zip(&next.groups).any(|(a, b)| a.store != b.store) || state.log != next.log;
        let colour = if zombie { ZOMBIE } else { WRITE };
        match action {
            Action::Crash { .. } => {
                let _ = write!(
                    rows,
                    "<text x='{x}' y='{}' text-anchor='middle' fill='{FAIL}' font-size='16'>✕</text>",
                    dot_y + 5
                );
            }
            Action::Append { .. }
            | Action::AppendAckLost { .. }
            | Action::RetryAppend { .. }
            | Action::Retain { .. }
            | Action::Rebalance { .. }
            | Action::Sync { .. }
            | Action::Restart { .. }
            | Action::Fetch { .. }
            | Action::FailOutOfRange { .. }
            | Action::ApplyEffect { .. }
            | Action::InsertProcessed { .. }
            | Action::CommitOffset { .. }
            | Action::ApplyStamped { .. }
            | Action::ApplyDeduped { .. }
            | Action::ApplyAtomic { .. }
            | Action::DeadLetter { .. }
            | Action::ResetOffset { .. }
            | Action::Pause { .. }
            | Action::LoseTail { .. }
            | Action::RefuseAhead { .. }
            | Action::Replicate { .. }
            | Action::Acknowledge { .. }
            | Action::ShrinkIsr { .. }
            | Action::FailLeader { .. }
            | Action::ProduceOutput { .. }
            | Action::CommitTxn { .. }
            | Action::ReadOutput { .. }
            | Action::SendEmail { .. }
            | Action::WriteIndex { .. }
            | Action::Relay { .. } => {
                let fill = if durable { colour } else { BACKGROUND };
                let _ = write!(
                    rows,
                    "<circle cx='{x}' cy='{dot_y}' r='5' fill='{fill}' stroke='{colour}' stroke-width='2'/>"
                );
            }
        }
        y = next_y + 3;
    }
    let height = y + 8;
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' class='onceproof-timeline' data-strategy='{}' \
         viewBox='0 0 {width} {height}' width='100%' style='max-width:{width}px' \
         font-family='monospace' font-size='11'>\
         <rect width='{width}' height='{height}' fill='{BACKGROUND}'/>",
        config.strategy
    );
    for lane in 0..lanes {
        let x = lane_x(lane);
        let _ = write!(svg, "<line x1='{x}' y1='{}' x2='{x}' y2='{height}' stroke='{MUTED}'/>", lanes_top + 16);
    }
    svg.push_str(&body);
    svg.push_str(&rows);
    svg.push_str("</svg>");
    svg
}

/// A verdict on the path as a mark, a colour and words.
fn verdict_words(verdict: &view::PathVerdict) -> (&'static str, &'static str, String) {
    match &verdict.outcome {
        view::PathOutcome::HoldsSoFar => ("✓", MUTED, "holds on this path so far".to_string()),
        view::PathOutcome::Violated { step, reason } => ("✗", FAIL, format!("VIOLATED at step {step}: {reason}")),
        view::PathOutcome::Reached { step, reason } => ("◆", REACHED, format!("reached at step {step}: {reason}")),
        view::PathOutcome::NotReached => ("○", MUTED, "not reached on this path".to_string()),
    }
}

/// Writes `lines` from `y` down, one `text` each; returns the `y` below them.
fn text_lines(
    out: &mut String,
    x: usize,
    mut y: usize,
    lines: &[String],
    fill: &str,
    weight: &str,
    class: &str,
) -> usize {
    for line in lines {
        let _ = write!(
            out,
            "<text class='{class}' x='{x}' y='{}' fill='{fill}' font-weight='{weight}'>{}</text>",
            y + 11,
            escape(line)
        );
        y += LINE_HEIGHT;
    }
    y
}

/// Splits `text` at spaces into lines of at most `width` characters (a longer word stands alone).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let line = lines.last_mut().expect("lines starts with one");
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

/// Text for HTML or SVG: `&`, `<`, `>` and `'` escaped.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('\'', "&#39;")
}
