//! Named crash points: the process ends with `exit(9)` before, inside or after a step, as a
//! real crash would (no destructor, no COMMIT, no flush of anything but stdout). The power-cut
//! runs (`crate::power`) crash in process instead: the point unwinds to their `catch_unwind`.

use crate::strategy::{printable, StepKind};
use std::fmt;
use std::io::Write;
use std::ops::Range;
use std::str::FromStr;

/// Where around a step the process dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Before,
    /// Inside the step's transaction: its statements ran, COMMIT did not.
    Inside,
    After,
}

impl When {
    /// Where around a step of `kind` a crash point can fall: a step that writes nothing has no
    /// inside.
    pub fn around(kind: StepKind) -> &'static [When] {
        match kind {
            StepKind::Fetch | StepKind::FailOutOfRange | StepKind::RefuseAhead => &[When::Before, When::After],
            StepKind::ApplyEffect
            | StepKind::InsertProcessed
            | StepKind::CommitOffset
            | StepKind::ApplyStamped
            | StepKind::ApplyDeduped
            | StepKind::ApplyAtomic
            | StepKind::DeadLetter
            | StepKind::ResetOffset
            | StepKind::ProduceOutput
            | StepKind::CommitTxn
            | StepKind::SendEmail
            | StepKind::WriteIndex => &[When::Before, When::Inside, When::After],
        }
    }
}

/// A crash point: `STEP:WHEN[@OFFSET]`, for example `apply-effect:after@49`,
/// `apply-atomic:inside`, `commit-offset:before@1`, `dead-letter:inside@1`. `@OFFSET` names a record the step concerns
/// (for `commit-offset`, the next offset it commits); without it the first such step crashes.
///
/// The transactional steps: `produce-output:inside` falls after the output records' durable
/// append, inside the output section's store transaction (its lock held, COMMIT not run);
/// `commit-txn:inside` falls after the store transaction committed (the commit point) and
/// before the commit marker is appended: a committed transaction without its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashPoint {
    pub kind: StepKind,
    pub when: When,
    pub offset: Option<u64>,
}

impl FromStr for CrashPoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let usage =
            || format!("crash point '{}' is not STEP:WHEN[@OFFSET] (WHEN is before, inside or after)", printable(text));
        let (point, offset) = match text.split_once('@') {
            Some((point, offset)) => (point, Some(offset.parse::<u64>().map_err(|_| usage())?)),
            None => (text, None),
        };
        let (kind, when) = point.split_once(':').ok_or_else(usage)?;
        let kind: StepKind = kind.parse()?;
        let when = match when {
            "before" => When::Before,
            "inside" => When::Inside,
            "after" => When::After,
            _ => return Err(usage()),
        };
        if matches!(kind, StepKind::Fetch | StepKind::RefuseAhead) && when == When::Inside {
            return Err(format!(
                "crash point '{}': {} writes nothing, so it has no inside",
                printable(text),
                kind.name()
            ));
        }
        Ok(CrashPoint { kind, when, offset })
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let when = match self.when {
            When::Before => "before",
            When::Inside => "inside",
            When::After => "after",
        };
        write!(f, "{}:{when}", self.kind.name())?;
        match self.offset {
            Some(offset) => write!(f, "@{offset}"),
            None => Ok(()),
        }
    }
}

/// The crash points armed in this process (none in normal operation).
#[derive(Clone, Debug, Default)]
pub struct CrashPlan {
    points: Vec<CrashPoint>,
    on_crash: OnCrash,
}

/// What a crash point does when it is hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnCrash {
    /// The process ends: `crash_now`.
    #[default]
    Exit,
    /// Unwinds, with a [`Crashed`] payload and no panic message, to the caller's
    /// `catch_unwind`, which then drops everything the "process" held: an SQLite transaction
    /// still open rolls back, as the next open would roll back a killed process's.
    Unwind,
}

/// The payload of an in-process crash ([`OnCrash::Unwind`]): the point that was hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crashed(pub CrashPoint);

/// The exit status of a deliberate crash.
pub const CRASH_EXIT_CODE: i32 = 9;

impl CrashPlan {
    pub fn none() -> CrashPlan {
        CrashPlan::default()
    }

    pub fn new(points: Vec<CrashPoint>) -> CrashPlan {
        CrashPlan { points, on_crash: OnCrash::Exit }
    }

    /// A plan whose points crash in process ([`OnCrash::Unwind`]).
    pub fn in_process(points: Vec<CrashPoint>) -> CrashPlan {
        CrashPlan { points, on_crash: OnCrash::Unwind }
    }

    pub fn arm(&mut self, point: CrashPoint) {
        self.points.push(point);
    }

    /// Crashes if a point names this step, phase and one of the offsets in `span`.
    pub fn at(&self, kind: StepKind, when: When, span: Range<u64>) {
        let hit = self.points.iter().find(|point| {
            point.kind == kind && point.when == when && point.offset.is_none_or(|offset| span.contains(&offset))
        });
        let Some(&point) = hit else { return };
        match self.on_crash {
            OnCrash::Exit => crash_now(),
            OnCrash::Unwind => std::panic::resume_unwind(Box::new(Crashed(point))),
        }
    }
}

/// Ends the process at once, as a crash: exit status 9, no unwinding, no destructors (so an
/// open SQLite transaction is left uncommitted in its journal, as after a kill).
pub fn crash_now() -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(CRASH_EXIT_CODE)
}
