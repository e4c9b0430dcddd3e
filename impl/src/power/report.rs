//! The power-cut runs' tallies: per strategy and point kind, per log point, and the violations.

use super::damage::{DamageCase, DamageClass};
use super::run::{Case, Outcome};
use super::{is_exact, LogPoint, Point, PointKind};
use crate::strategy::Strategy;
use std::collections::BTreeMap;

/// Violations kept word for word; the rest are only counted.
const VIOLATIONS_KEPT: usize = 20;
/// Distinct refusal messages kept per damage class.
const REFUSALS_KEPT: usize = 4;

/// Counts over a set of runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub points: u64,
    pub runs: u64,
    /// Runs whose reopen refused (a damaged partition, a group ahead of its log).
    pub refusals: u64,
    /// Records of interrupted appends (never acknowledged) the reopened log lacks.
    pub lost_unacked: u64,
    /// Acknowledged records the reopened log lacks or holds other bytes of; must be 0.
    pub acked_lost: u64,
    /// Runs of a strategy that is not exact whose total is not the records' sum (or, the
    /// transactional sequence, whose read_committed output is not every record's once).
    pub inexact: u64,
    /// Pending disk operations the cuts kept (of which garbled or torn writes) and dropped.
    pub kept: u64,
    pub garbled: u64,
    pub torn: u64,
    pub dropped: u64,
}

impl Tally {
    fn add(&mut self, outcome: &Outcome) {
        self.runs += 1;
        self.refusals += u64::from(outcome.refused);
        self.lost_unacked += outcome.lost_unacked;
        self.acked_lost += outcome.acked_lost;
        self.inexact += u64::from(outcome.inexact);
        self.kept += outcome.cut.kept;
        self.garbled += outcome.cut.garbled;
        self.torn += outcome.cut.torn;
        self.dropped += outcome.cut.dropped;
    }

    fn merge(&mut self, other: &Tally) {
        self.points += other.points;
        self.runs += other.runs;
        self.refusals += other.refusals;
        self.lost_unacked += other.lost_unacked;
        self.acked_lost += other.acked_lost;
        self.inexact += other.inexact;
        self.kept += other.kept;
        self.garbled += other.garbled;
        self.torn += other.torn;
        self.dropped += other.dropped;
    }
}

/// Counts over the runs of one damage class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DamageTally {
    pub runs: u64,
    /// Runs whose reopen refused (the log's open, or the group's check).
    pub refused: u64,
    /// Acknowledged records the reopened log lacks or changed, with no refusal of the log's
    /// open naming the partition; must be 0.
    pub silently_lost: u64,
    /// Acknowledged records the reopened log holds byte for byte.
    pub acked_kept: u64,
    /// Records of the torn append (never acknowledged) the reopened log lacks.
    pub lost_unacked: u64,
    /// Retries of batches the reopened log held, answered as duplicates.
    pub deduplicated: u64,
}

/// Everything the runs found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: BTreeMap<(Strategy, PointKind), Tally>,
    /// The damage classes, over `damage_strategies`.
    pub damage: BTreeMap<DamageClass, DamageTally>,
    pub damage_strategies: Vec<Strategy>,
    /// Per damage class, its distinct refusals' messages (the first few) and their counts.
    pub damage_refusals: BTreeMap<DamageClass, BTreeMap<String, u64>>,
    /// The log's own points, over every strategy.
    pub log_points: BTreeMap<LogPoint, Tally>,
    /// The first violations, each naming its run.
    pub violations: Vec<String>,
    pub violation_count: u64,
}

impl Report {
    pub(super) fn add_point(&mut self, strategy: Strategy, kind: PointKind) {
        self.rows.entry((strategy, kind)).or_default().points += 1;
    }

    pub(super) fn add_run(&mut self, case: &Case, outcome: Outcome) {
        self.rows.entry((case.strategy, case.point.kind())).or_default().add(&outcome);
        if let Point::Log(point) = case.point {
            self.log_points.entry(point).or_default().add(&outcome);
        }
        for violation in &outcome.violations {
            self.violation_count += 1;
            if self.violations.len() < VIOLATIONS_KEPT {
                let (strategy, point, seed) = (case.strategy, case.point, case.seed);
                self.violations.push(format!("{strategy} at {point} (run seed {seed:#018x}): {violation}"));
            }
        }
    }

    pub(super) fn add_damage_run(&mut self, damage: &DamageCase, outcome: Outcome) {
        let tally = self.damage.entry(damage.class).or_default();
        tally.runs += 1;
        tally.refused += u64::from(outcome.refused);
        tally.silently_lost += outcome.silently_lost();
        tally.acked_kept += outcome.acked_kept;
        tally.lost_unacked += outcome.lost_unacked;
        tally.deduplicated += outcome.deduplicated;
        if let Some(refusal) = &outcome.refusal {
            let kept = self.damage_refusals.entry(damage.class).or_default();
            if kept.contains_key(refusal) || kept.len() < REFUSALS_KEPT {
                *kept.entry(refusal.clone()).or_default() += 1;
            }
        }
        for violation in &outcome.violations {
            self.violation_count += 1;
            if self.violations.len() < VIOLATIONS_KEPT {
                let (class, strategy, seed) = (damage.class.name(), damage.case.strategy, damage.case.seed);
                self.violations.push(format!("{strategy}, damage {class} (run seed {seed:#018x}): {violation}"));
            }
        }
    }

    /// Every row together.
    pub fn total(&self) -> Tally {
        let mut total = Tally::default();
        self.rows.values().for_each(|tally| total.merge(tally));
        total
    }

    /// The tables `consumer power-cuts` prints: per strategy and point kind, per log point,
    /// then the cuts and the violations.
    pub fn table(&self) -> String {
        let mut out = String::new();
        self.strategy_rows(&mut out);
        self.log_point_rows(&mut out);
        self.damage_rows(&mut out);
        let total = self.total();
        let (kept, garbled, torn, dropped) = (total.kept, total.garbled, total.torn, total.dropped);
        out += &format!("\npending disk operations at the cuts: {kept} kept ({garbled} garbled, {torn} torn), ");
        out += &format!("{dropped} dropped\nviolations: {}\n", self.violation_count);
        self.violations.iter().for_each(|violation| out += &format!("  {violation}\n"));
        out
    }

    fn strategy_rows(&self, out: &mut String) {
        let [strategy, exact, kind] = ["strategy", "exact", "kind"];
        let counts_header = format!(
            "{:>6} {:>6} {:>8} {:>12} {:>10} {:>7}",
            "points", "runs", "refusals", "unacked lost", "acked lost", "inexact"
        );
        *out += &format!("{strategy:<19} {exact:>5} {kind:>9} {counts_header}\n");
        for (&(strategy, kind), tally) in &self.rows {
            let exact = if is_exact(strategy) { "yes" } else { "no" };
            *out += &format!("{:<19} {exact:>5} {:>9} {}\n", strategy.name(), kind_name(kind), counts(tally));
        }
        *out += &format!("{:<19} {:>5} {:>9} {}\n", "all", "", "", counts(&self.total()));
    }

    fn log_point_rows(&self, out: &mut String) {
        *out += &format!(
            "\n{:<25} {:>6} {:>8} {:>12} {:>10}\n",
            "log point", "runs", "refusals", "unacked lost", "acked lost"
        );
        for (point, tally) in &self.log_points {
            let (runs, refusals, lost, acked_lost) = (tally.runs, tally.refusals, tally.lost_unacked, tally.acked_lost);
            *out += &format!("{:<25} {runs:>6} {refusals:>8} {lost:>12} {acked_lost:>10}\n", point.name());
        }
    }
}

impl Report {
    fn damage_rows(&self, out: &mut String) {
        if self.damage.is_empty() {
            return;
        }
        let names: Vec<&str> = self.damage_strategies.iter().map(|strategy| strategy.name()).collect();
        *out += &format!(
            "\ndamage classes, for {} (the damage is to the log, whose recovery is one path for every \
             strategy;\n  these meet what it keeps as one atomic transaction, a transactional output log on \
             the same disk, a commit before the effect)\n",
            names.join(", ")
        );
        *out += &format!(
            "{:<22} {:>5} {:>7} {:>19} {:>10} {:>12} {:>11}\n",
            "class", "runs", "refused", "acked lost silently", "acked kept", "unacked lost", "dup retries"
        );
        for (class, tally) in &self.damage {
            *out += &format!(
                "{:<22} {:>5} {:>7} {:>19} {:>10} {:>12} {:>11}\n",
                class.name(),
                tally.runs,
                tally.refused,
                tally.silently_lost,
                tally.acked_kept,
                tally.lost_unacked,
                tally.deduplicated
            );
        }
        if !self.damage_refusals.is_empty() {
            *out += &format!("refusals, the first {REFUSALS_KEPT} distinct messages per class:\n");
        }
        for (class, refusals) in &self.damage_refusals {
            for (refusal, count) in refusals {
                *out += &format!("  {} refused ({count}x): {refusal}\n", class.name());
            }
        }
    }
}

fn kind_name(kind: PointKind) -> &'static str {
    match kind {
        PointKind::Owner => "owner",
        PointKind::Append => "append",
        PointKind::Retention => "retention",
    }
}

fn counts(tally: &Tally) -> String {
    format!(
        "{:>6} {:>6} {:>8} {:>12} {:>10} {:>7}",
        tally.points, tally.runs, tally.refusals, tally.lost_unacked, tally.acked_lost, tally.inexact
    )
}
