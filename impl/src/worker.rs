//! The worker mode: a parent drives one owner step by step over stdin/stdout, and may kill it
//! at any moment. Conformance replays model traces through it.
//!
//! Protocol, one line each way per command (the reply is flushed before the next read):
//!
//! - `STEP PARTITION OFFSET` (e.g. `apply-atomic 0 2`, `commit-offset 0 3`, `dead-letter 0 1`,
//!   `reset-offset 0 3`, `fail-out-of-range 0 0`) performs that step and replies `ok OUTCOME`
//!   or `err MESSAGE`, where OUTCOME is one of:
//!   - `fetched N` (N records fetched);
//!   - `applied N skipped M` (the effect write applied N records and recognised M as done);
//!   - `recorded` (`insert-processed`) or `committed` (`commit-offset`);
//!   - `fenced HELD CURRENT` (the owner's epoch HELD is not the stored CURRENT: nothing
//!     written, the partition dropped);
//!   - `failed ATTEMPTS`, `exhausted` or `dead-lettered ATTEMPTS` (a poison record, below);
//!   - `reset FROM TO` or `out-of-range POSITION START` (retention passed the position, below);
//!   - `refused STORED POSITION END` (the log lost records, below);
//!   - `produced FIRST END` (`produce-output`: the batch's output records are at output
//!     offsets FIRST..END, in the open transaction; below);
//!   - `emailed N` (`send-email`: the provider recorded the batch's requests and has now
//!     delivered the record's email N times; a keyed repeat is dropped, so N stays 1);
//!   - `indexed N` (`write-index`: N of the batch's facts were new in the index).
//!
//!   The outbox's relay is no owner step: a parent runs `consumer relay --once --group G`
//!   (or `consumer::external::Relay::relay_one`) for the model's `relay {group}`.
//! - `assign PARTITION` (after a rebalance named this owner) replies `ok assigned EPOCH` or
//!   `ok not-assigned`.
//! - `arm POINT` (a crash point, e.g. `apply-atomic:inside`) replies `ok armed`; the point
//!   fires on a later step.
//! - `state` replies `state JSON` (the owner's leases).
//! - `quit` replies `ok bye`, then the worker exits 0.
//!
//! A poison record's failed `apply-atomic` replies `failed ATTEMPTS` (the durable count after
//! the step under atomic-dlq, 0 under skip-poison and retry-forever); atomic-dlq replies
//! `exhausted` when `--max-attempts` were already counted (nothing attempted or written), and
//! `dead-letter` replies `dead-lettered ATTEMPTS`.
//!
//! When retention passed a lease's position and nothing is in flight, the only step enabled
//! for that partition is the `--on-out-of-range` policy's: `reset-offset PARTITION START`
//! (earliest; its OFFSET is the log start) replies `reset FROM TO` (the stored next offset it
//! moved from and the log start), or `fenced HELD CURRENT` for a zombie;
//! `fail-out-of-range PARTITION POSITION` (fail; its OFFSET is the lease position) writes
//! nothing, drops the partition and replies `out-of-range POSITION START`.
//!
//! When the log lost records the group consumed (the group's stored next offset STORED or the
//! lease position is past the log end END) and nothing is in flight, the only step enabled
//! for that partition is `refuse-ahead PARTITION POSITION` (its OFFSET is the lease position):
//! it writes nothing, drops the partition and replies `refused STORED POSITION END`. The
//! hidden `--log-check` flag changes when: `unchecked` never refuses (the trap: records
//! appended again below the checkpoint are skipped), `refuse-all` refuses whenever the
//! partition is damaged, even with the group behind the loss. Unlike `consume`, the worker
//! does not refuse at start when its group is ahead of the log: it starts, and the parent
//! drives the refusal as the model's `refuse-ahead` step. Another log, or a missing log file,
//! is refused at start (exit 4).
//!
//! The transactional strategies (txn-fenced, txn-unfenced) take `produce-output PARTITION
//! OFFSET`, which replies `produced FIRST END` (or, txn-fenced, `fenced HELD CURRENT` with
//! nothing appended), then `commit-txn PARTITION OFFSET`, which replies `applied N skipped 0`
//! (the transaction committed: N records' effect and the next offset, then the commit marker)
//! or `fenced HELD CURRENT`. Every take of a partition (the start, `assign`) first initialises
//! its transactional id: under txn-fenced the open transactions of earlier epochs are aborted
//! (abort markers) and a committed one whose marker a crash lost gets it; `assign` replies
//! `ok not-assigned` when a newer epoch was claimed before that take could run.
//!
//! On start the worker prints `ready JSON` with its state. A step that is not enabled is an
//! `err` and changes nothing; a storage error is an `err` too, and the worker keeps serving.

use crate::crash::CrashPoint;
use crate::owner::{Owner, OwnerError};
use crate::strategy::{printable, Step};
use std::io::{BufRead, Write};

/// One command line of the protocol, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Quit,
    State,
    Assign { partition: u32 },
    Arm(CrashPoint),
    Step(Step),
}

/// Parses one command line (surrounding white space ignored). The error is one line whatever
/// the input (its control characters escaped), and the worker replies it as `err MESSAGE`.
pub fn parse_command(line: &str) -> Result<Command, String> {
    let line = line.trim();
    match line {
        "quit" => return Ok(Command::Quit),
        "state" => return Ok(Command::State),
        _ => {}
    }
    if let Some(partition) = line.strip_prefix("assign ") {
        let partition = partition.trim();
        return match partition.parse::<u32>() {
            Ok(partition) => Ok(Command::Assign { partition }),
            Err(_) => Err(format!("partition '{}' is not a number", printable(partition))),
        };
    }
    if let Some(point) = line.strip_prefix("arm ") {
        return point.parse::<CrashPoint>().map(Command::Arm);
    }
    line.parse::<Step>().map(Command::Step)
}

/// Serves the protocol on `input`/`output` until `quit` or end of input.
pub fn serve(owner: &mut Owner, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
    writeln!(output, "ready {}", state_json(owner))?;
    output.flush()?;
    for line in input.lines() {
        let line = line?;
        let reply = match parse_command(&line) {
            Ok(Command::Quit) => {
                writeln!(output, "ok bye")?;
                output.flush()?;
                return Ok(());
            }
            Ok(Command::State) => format!("state {}", state_json(owner)),
            Ok(Command::Assign { partition }) => assign_reply(owner, partition),
            Ok(Command::Arm(point)) => {
                owner.arm(point);
                "ok armed".to_string()
            }
            Ok(Command::Step(step)) => step_reply(owner, step),
            Err(error) => format!("err {error}"),
        };
        writeln!(output, "{reply}")?;
        output.flush()?;
    }
    Ok(())
}

fn step_reply(owner: &mut Owner, step: Step) -> String {
    match owner.perform(step) {
        Ok(outcome) => format!("ok {outcome}"),
        Err(error @ OwnerError::NotEnabled { .. }) => format!("err {error}"),
        Err(error) => format!("err {}", error.to_string().replace('\n', " ")),
    }
}

fn assign_reply(owner: &mut Owner, partition: u32) -> String {
    match owner.assign(partition) {
        Ok(Some(epoch)) => format!("ok assigned {epoch}"),
        Ok(None) => "ok not-assigned".to_string(),
        Err(error) => format!("err {error}"),
    }
}

fn state_json(owner: &Owner) -> String {
    serde_json::to_string(&owner.state()).expect("owner state always serialises")
}
