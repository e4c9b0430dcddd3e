//! A stateright model of log consumers: which delivery guarantees each consumer strategy keeps.
//!
//! The model does no I/O. `ConsumerModel` enumerates every interleaving of appends, owner
//! steps, crashes, restarts and rebalances within the bounds of a `Config`; `check` runs the
//! checker and turns its discoveries into verdicts with short counterexamples; `trace` is the
//! versioned file format those counterexamples are saved in, `itf` the same runs with their
//! states in the Informal Trace Format; `expected` reads spec.md's table.

pub mod abstraction;
pub mod action;
pub mod check;
pub mod cli;
pub mod collections;
pub mod config;
pub mod expected;
pub mod itf;
pub mod pack;
pub mod properties;
pub mod replication;
pub mod search;
pub mod state;
pub mod step;
pub mod strategy;
pub mod svg;
pub mod trace;
pub mod txn;
pub mod view;

/// The tool and its version, as JSON output and trace files record it.
pub const TOOL: &str = concat!("onceproof-model ", env!("CARGO_PKG_VERSION"));

pub use action::Action;
pub use config::{Config, Strategy};
pub use state::State;

use action::{Actor, OwnerWrite};
use state::Witness;
use stateright::{Model, Property};
use strategy::{Coordinator, EffectKind, Write};

/// The model of one configuration: the bounds and the strategy every owner runs.
#[derive(Clone, Debug)]
pub struct ConsumerModel {
    pub config: Config,
    /// Witness bits some `sometimes` property reads; the others are never set, so that ghost
    /// history nobody checks does not multiply states.
    witness_mask: u32,
}

impl ConsumerModel {
    /// `Model::next_state` into a reused state (`step::next_state_into`): the checker's hot
    /// path, allocation-free once `next`'s buffers have grown.
    pub fn next_state_into(&self, state: &State, action: Action, next: &mut State) {
        step::next_state_into(&self.config, state, action, next);
        next.witnessed &= self.witness_mask;
    }

    /// `Model::next_state` applied to `next`, which must equal `state` on entry
    /// (`step::apply`); the checker restores `next` after each successor.
    pub fn next_state_over(&self, state: &State, action: Action, next: &mut State) {
        debug_assert!(next == state, "next_state_over needs a copy of the state");
        step::apply(&self.config, state, action, next);
        next.witnessed &= self.witness_mask;
    }

    pub fn new(config: Config) -> ConsumerModel {
        let properties = properties::properties_for(&config);
        let witness_mask = (Witness::ALL.iter())
            .filter(|witness| properties.iter().any(|p| p.name == witness.name()))
            .fold(0u32, |mask, &witness| mask | 1 << witness as u32);
        ConsumerModel { config, witness_mask }
    }

    /// The witness bits some `sometimes` property of this configuration reads; the others
    /// are never set in its states.
    pub fn witness_mask(&self) -> u32 {
        self.witness_mask
    }

    /// Describes what `action` does in `state`, with the values it reads and writes.
    pub fn describe_step(&self, state: &State, action: &Action) -> String {
        let next = step::next_state(&self.config, state, *action);
        let row = |s: &State, g: u8, p: u8| s.groups[usize::from(g)].store.partitions[usize::from(p)].clone();
        let who = self.who(state, action);
        match *action {
            Action::Append { partition, delta } if !state.replicas.is_empty() => {
                let p = usize::from(partition);
                let refused = next.producer[p].sent == state.producer[p].sent;
                let what = if refused { "is refused (NotEnoughReplicas)" } else { "goes to the leader" };
                format!(
                    "producer's append (+{delta}) to p{partition} {what}: {}",
                    self.describe_replicas(&next, partition)
                )
            }
            Action::Append { partition, delta } => {
                let offset = state.log[usize::from(partition)].len();
                format!("producer appends offset {offset} (+{delta}) to p{partition}")
            }
            Action::AppendAckLost { partition, delta } => {
                let p = usize::from(partition);
                let (offset, send) = (state.log[p].len(), next.sends[p].last().copied().unwrap_or(0));
                format!("producer appends send {send} at offset {offset} (+{delta}) to p{partition}; the ack is lost")
            }
            Action::RetryAppend { partition, delta } => self.describe_retry(state, &next, partition, delta),
            Action::Retain { partition, before } => {
                format!(
                    "retention moves the start of p{partition} from {} to {before}",
                    state.log_start[usize::from(partition)]
                )
            }
            Action::FailOutOfRange { group, owner, partition } => format!(
                "{who} stops on p{partition}: offset {} is below the log start {} (--on-out-of-range fail)",
                state.lease(group, owner, partition).map_or(0, |l| l.position),
                state.log_start[usize::from(partition)]
            ),
            Action::ResetOffset { group, partition, .. } => {
                let (before, after) =
                    (row(state, group, partition).next_offset, row(&next, group, partition).next_offset);
                format!(
                    "{who} records a reset of p{partition} from {before} to {after} and resumes there{}",
                    self.epoch_note(state, action)
                )
            }
            Action::Crash { .. } => format!("{who} crashes"),
            Action::Restart { group, owner } => {
                format!("{who} restarts{}", self.describe_start(state, &next, group, owner))
            }
            Action::Pause { group, owner } => format!(
                "{who} is started again while its current incarnation runs on as {}{}",
                self.who(&next, &Action::Crash { group, owner: self.paused_slot(state, &next, group) }),
                self.describe_start(state, &next, group, owner)
            ),
            Action::LoseTail { partition, keep } => {
                let end = state.log[usize::from(partition)].len();
                format!("the log of p{partition} loses offsets {keep}..{end} (acknowledged): it now ends at {keep}")
            }
            Action::RefuseAhead { group, owner, partition } => {
                let end = state.log[usize::from(partition)].len();
                let stored = row(state, group, partition).next_offset;
                let position = state.lease(group, owner, partition).map_or(0, |l| l.position);
                if usize::from(stored.max(position)) > end {
                    format!("{who} refuses p{partition}: next offset {stored} (position {position}) is past the log end {end}")
                } else {
                    format!("{who} refuses p{partition}: the log lost records, though next offset {stored} is within it (end {end})")
                }
            }
            Action::Rebalance { group, partition, to_owner } => {
                let (before, after) = (row(state, group, partition), row(&next, group, partition));
                match self.config.strategy.rules().coordinator {
                    Coordinator::Atomic => format!(
                        "rebalance: g{group} p{partition} moves from o{} to o{to_owner}, epoch {} -> {}",
                        before.owner, before.epoch, after.epoch
                    ),
                    Coordinator::Forming => format!(
                        "rebalance begins: g{group} forms to move p{partition} from o{} to o{to_owner}; epoch {} \
                         stays current until the sync",
                        before.owner, before.epoch
                    ),
                }
            }
            Action::Sync { group, partition } => {
                let (before, after) = (row(state, group, partition), row(&next, group, partition));
                format!(
                    "g{group} formed: p{partition} moves from o{} to o{}, epoch {} -> {}, at next offset {}",
                    before.owner, after.owner, before.epoch, after.epoch, after.next_offset
                )
            }
            Action::Fetch { partition, offset, .. } => {
                let delta = self.config.delta;
                format!("{who} fetches p{partition} offset {offset} (+{delta})")
            }
            Action::CommitOffset { group, partition, next_offset, .. } => {
                let before = row(state, group, partition).next_offset;
                format!(
                    "{who} commits p{partition}: next offset {before} -> {next_offset}{}",
                    self.epoch_note(state, action)
                )
            }
            Action::Replicate { partition } | Action::ShrinkIsr { partition } | Action::FailLeader { partition } => {
                format!("{action}: {}", self.describe_replicas(&next, partition))
            }
            Action::Acknowledge { partition } => {
                let acked = next.replicas[usize::from(partition)].acked != state.replicas[usize::from(partition)].acked;
                let answer = if acked { "acknowledged" } else { "NotEnoughReplicasAfterAppend (to be retried)" };
                format!("{action}: {answer}; {}", self.describe_replicas(&next, partition))
            }
            Action::Relay { group } => {
                let row = state.groups[usize::from(group)].store.outbox.first().copied().unwrap_or_default();
                format!(
                    "the relay of g{group} copies the fact of p{} offset {} from the outbox to the index",
                    row.0, row.1
                )
            }
            Action::ReadOutput { partition } => {
                let p = usize::from(partition);
                let entry = state.output[p][usize::from(state.reader[p])];
                format!("the downstream reader takes {entry:?} of output p{partition}")
            }
            Action::ApplyEffect { .. }
            | Action::InsertProcessed { .. }
            | Action::ApplyStamped { .. }
            | Action::ApplyDeduped { .. }
            | Action::ApplyAtomic { .. }
            | Action::DeadLetter { .. }
            | Action::ProduceOutput { .. }
            | Action::CommitTxn { .. }
            | Action::SendEmail { .. }
            | Action::WriteIndex { .. } => {
                let write = action.owner_write().expect("an owner write");
                self.describe_record_write(state, &next, write, action)
            }
        }
    }

    /// Describes a write that concerns one record: what it did to the total and checkpoint.
    fn describe_record_write(&self, state: &State, next: &State, write: OwnerWrite, action: &Action) -> String {
        let ((group, owner, partition), offset) = (write.lease, write.value);
        let g = usize::from(group);
        let (before, after) = (state.groups[g].store.total, next.groups[g].store.total);
        let fenced = next.lease(group, owner, partition).is_none() && state.lease(group, owner, partition).is_some();
        let poison = self.config.poison == Some(offset);
        let what = match write.write {
            Write::InsertProcessed => format!("records p{partition} offset {offset} as processed"),
            Write::ApplyEffect
            | Write::ApplyStamped
            | Write::ApplyDeduped
            | Write::ApplyAtomic
            | Write::DeadLetter
            | Write::CommitOffset
            | Write::ResetOffset
            | Write::ProduceOutput
            | Write::CommitTxn
            | Write::SendEmail
            | Write::WriteIndex
                if fenced =>
            {
                format!("is fenced writing p{partition} offset {offset}: its epoch is stale, the transaction aborts")
            }
            Write::DeadLetter => {
                let attempts = next.groups[g].store.attempts.get(&(partition, offset)).copied().unwrap_or(0);
                format!("dead-letters p{partition} offset {offset} after {attempts} failed attempts")
            }
            Write::ApplyAtomic if poison => {
                let failures = next.groups[g].ghost.failures[usize::from(partition)];
                format!("fails on poison p{partition} offset {offset} (failure {failures})")
            }
            Write::ApplyEffect | Write::ApplyStamped | Write::ApplyDeduped | Write::ApplyAtomic
                if self.config.strategy.rules().effect == EffectKind::Set =>
            {
                // The value tells what a set did, the total (unused by the set rows) does not. A
                // blind write sets `v(o) = o + 1` even over an equal or newer value; a stamped or
                // deduplicated one that left the value as it was skipped the record (a newer
                // stamp's value differs from every older record's).
                let (was, now) = (state.groups[g].store.value, next.groups[g].store.value);
                let shown = |value: Option<u8>| value.map_or_else(|| "none".to_string(), |value| value.to_string());
                let blind = matches!(write.write, Write::ApplyEffect | Write::ApplyAtomic);
                if blind || was != now {
                    format!("sets p{partition} offset {offset}: value {} -> {}", shown(was), shown(now))
                } else {
                    format!("skips p{partition} offset {offset}: the newer value {} stays", shown(now))
                }
            }
            Write::ApplyEffect | Write::ApplyStamped | Write::ApplyDeduped | Write::ApplyAtomic => {
                let delta = self.config.delta;
                if before == after {
                    format!("skips p{partition} offset {offset} (+{delta}): already applied")
                } else {
                    format!("applies p{partition} offset {offset} (+{delta}): total {before} -> {after}")
                }
            }
            Write::SendEmail => {
                let received = next.groups[g].inbox.get(&(partition, offset)).copied().unwrap_or(0);
                format!(
                    "sends the email of p{partition} offset {offset}: the provider has received it {received} time(s)"
                )
            }
            Write::WriteIndex => format!("writes the fact of p{partition} offset {offset} to the index"),
            Write::ProduceOutput => {
                let epoch = state.lease(group, owner, partition).map_or(0, |l| l.epoch);
                format!("produces the output of p{partition} offset {offset} in its transaction (epoch {epoch})")
            }
            Write::CommitTxn => {
                let epoch = state.lease(group, owner, partition).map_or(0, |l| l.epoch);
                format!(
                    "commits its transaction (epoch {epoch}) with p{partition} offset {offset}: total {before} -> {after}"
                )
            }
            // Not a record's write (`describe_step` describes these itself): their `value` is no
            // offset of the log, and the checkpoint they move is described below.
            Write::CommitOffset | Write::ResetOffset => format!("moves the checkpoint of p{partition}"),
        };
        let (stored_before, stored_after) = (
            state.groups[g].store.partitions[usize::from(partition)].next_offset,
            next.groups[g].store.partitions[usize::from(partition)].next_offset,
        );
        let checkpoint = if stored_before != stored_after {
            format!(", next offset {stored_before} -> {stored_after}")
        } else {
            String::new()
        };
        format!("{} {what}{checkpoint}{}", self.who(state, action), self.epoch_note(state, action))
    }

    fn describe_retry(&self, state: &State, next: &State, partition: u8, delta: i64) -> String {
        let p = usize::from(partition);
        let (before, after) = (state.log[p].len(), next.log[p].len());
        if after == before {
            return format!(
                "producer retries its unacknowledged send on p{partition}: the log recognises the sequence, \
                 nothing appended"
            );
        }
        let send = next.sends[p].last().copied().unwrap_or(0);
        format!(
            "producer retries send {send} on p{partition} with a new sequence: appended again at offset {before} \
             (+{delta})"
        )
    }

    /// Marks a write by an owner whose epoch is stale: the zombie case.
    fn epoch_note(&self, state: &State, action: &Action) -> String {
        let Some((group, owner, partition)) = action.lease_step() else { return String::new() };
        let stored = state.groups[usize::from(group)].store.partitions[usize::from(partition)].epoch;
        match state.lease(group, owner, partition) {
            Some(lease) if lease.epoch != stored => format!(" [zombie: epoch {} < {stored}]", lease.epoch),
            _ => String::new(),
        }
    }

    /// A replicated partition after a step: each broker's log end, the leader, the high
    /// watermark and the ISR.
    fn describe_replicas(&self, state: &State, partition: u8) -> String {
        let replicas = &state.replicas[usize::from(partition)];
        let leader = replicas.leader.map_or("none (unavailable)".to_string(), |l| format!("b{l}"));
        let isr: Vec<String> = (0..2).filter(|&b| replicas.isr[b]).map(|b| format!("b{b}")).collect();
        format!(
            "log ends b0 {} b1 {}, leader {leader}, HW {}, ISR {{{}}}",
            replicas.logs[0].len(),
            replicas.logs[1].len(),
            replicas.hw,
            isr.join(", ")
        )
    }

    /// Who takes an owner step: `gG/oO`, or `gG/oO'` for the earlier incarnation of owner O
    /// still running in a paused slot; the producer and coordinator otherwise.
    pub fn who(&self, state: &State, action: &Action) -> String {
        match action.actor() {
            Actor::Producer => "producer".to_string(),
            Actor::Coordinator => "coordinator".to_string(),
            Actor::Owner { group, owner } => view::owner_name(state, group, owner),
        }
    }

    /// The paused slot a pause fills: the one free before it and in use after it.
    fn paused_slot(&self, state: &State, next: &State, group: u8) -> u8 {
        let (before, after) = (&state.groups[usize::from(group)], &next.groups[usize::from(group)]);
        let filled = before.paused.iter().zip(&after.paused).position(|(b, a)| b != a).unwrap_or(0);
        (before.owners.len() + filled) as u8
    }

    /// What a start loaded: each partition's offset and epoch (a claim shows the epoch moving).
    fn describe_start(&self, state: &State, next: &State, group: u8, owner: u8) -> String {
        let g = usize::from(group);
        let resumed: Vec<String> = next.groups[g].owners[usize::from(owner)]
            .leases
            .iter()
            .enumerate()
            .filter_map(|(p, lease)| {
                let before = state.groups[g].store.partitions[p].epoch;
                lease.as_ref().map(|l| match l.epoch == before {
                    true => format!("p{p} from offset {} (epoch {})", l.position, l.epoch),
                    false => format!("p{p} from offset {} (claims epoch {before} -> {})", l.position, l.epoch),
                })
            })
            .collect();
        if resumed.is_empty() {
            " and owns nothing".to_string()
        } else {
            format!(" and resumes {}", resumed.join(", "))
        }
    }
}

impl Model for ConsumerModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::initial(&self.config)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        step::enabled_actions(&self.config, state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = step::next_state(&self.config, state, action);
        next.witnessed &= self.witness_mask;
        Some(next)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn format_step(&self, state: &State, action: Action) -> Option<String> {
        Some(self.describe_step(state, &action))
    }

    fn as_svg(&self, path: stateright::Path<State, Action>) -> Option<String> {
        Some(svg::timeline(self, &path.into_vec()))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::properties_for(&self.config)
    }
}
