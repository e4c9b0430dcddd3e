//! An SVG timeline for the explorer: one lane per owner, one row per step, durable writes filled.

use crate::action::{Action, Actor};
use crate::state::State;
use crate::ConsumerModel;
use std::fmt::Write;

const LANE_WIDTH: usize = 150;
const ROW_HEIGHT: usize = 22;
const LABEL_WIDTH: usize = 330;

/// Draws `path` (states with the action taken from each) as lanes: the producer and the
/// coordinator first, then every group's owners. A filled dot is a durable write that landed, a
/// hollow one a step without a durable effect (fetch, or a write that was skipped or fenced),
/// a red cross a crash. Zombie writes are drawn in orange. The right column says what happened.
pub fn timeline(model: &ConsumerModel, path: &[(State, Option<Action>)]) -> String {
    let config = &model.config;
    // Each group's lanes: its current owners, then its paused slots (earlier incarnations).
    let owners = usize::from(config.owners) + usize::from(config.pauses);
    let lanes = 2 + usize::from(config.groups) * owners;
    let steps: Vec<(&State, Action)> = path.iter().filter_map(|(s, a)| a.map(|a| (s, a))).collect();
    let width = lanes * LANE_WIDTH + LABEL_WIDTH;
    let height = (steps.len() + 2) * ROW_HEIGHT;
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' \
         font-family='monospace' font-size='11'>"
    );
    let lane_x = |lane: usize| lane * LANE_WIDTH + LANE_WIDTH / 2;
    let mut headers = vec!["producer".to_string(), "coordinator".to_string()];
    headers.extend((0..config.groups).flat_map(|g| {
        let current = (0..config.owners).map(move |o| format!("g{g}/o{o}"));
        current.chain((0..config.pauses).map(move |i| format!("g{g}/paused {i}")))
    }));
    for (lane, header) in headers.iter().enumerate() {
        let x = lane_x(lane);
        let _ = write!(svg, "<text x='{x}' y='14' text-anchor='middle' font-weight='bold'>{header}</text>");
        let _ = write!(svg, "<line x1='{x}' y1='20' x2='{x}' y2='{height}' stroke='#ccc'/>");
    }
    for (row, (state, action)) in steps.iter().enumerate() {
        let y = (row + 1) * ROW_HEIGHT + 12;
        let lane = match action.actor() {
            Actor::Producer => 0,
            Actor::Coordinator => 1,
            Actor::Owner { group, owner } => 2 + usize::from(group) * owners + usize::from(owner),
        };
        let x = lane_x(lane);
        let next = crate::step::next_state(config, state, *action);
        let durable = state.groups.iter().zip(&next.groups).any(|(a, b)| a.store != b.store) || state.log != next.log;
        let description = model.describe_step(state, action);
        let zombie = description.contains("[zombie");
        let colour = if zombie { "#e67e00" } else { "#1f4e9c" };
        match action {
            Action::Crash { .. } => {
                let _ = write!(
                    svg,
                    "<text x='{x}' y='{}' text-anchor='middle' fill='#c00' \
                     font-size='16'>✕</text>",
                    y + 5
                );
            }
            Action::Append { .. }
            | Action::AppendAckLost { .. }
            | Action::RetryAppend { .. }
            | Action::Retain { .. }
            | Action::Rebalance { .. }
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
                let fill = if durable { colour } else { "white" };
                let _ =
                    write!(svg, "<circle cx='{x}' cy='{y}' r='5' fill='{fill}' stroke='{colour}' stroke-width='2'/>");
            }
        }
        let label = escape(&format!("{}. {description}", row + 1));
        let _ = write!(svg, "<text x='{}' y='{}'>{label}</text>", lanes * LANE_WIDTH + 4, y + 4);
    }
    svg.push_str("</svg>");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
