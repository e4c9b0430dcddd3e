//! The verdict on an application's run, from its database at the end and what the run did:
//! pure, so that a table of runs can test it.

use super::schedule::Record;
use crate::killpoints::Strike;
use kafka_lane::proxy::ProtocolFault;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One kill that struck, and what the store and the group showed right after it.
#[derive(Clone, Debug)]
pub struct Kill {
    pub instance: String,
    pub incarnation: u32,
    pub strike: Strike,
    /// Rows of the `applied` query (or, without it, nothing) in a copy of the database made
    /// right after the kill; `None` when the copy could not be read (another instance was
    /// mid-write).
    pub applied_rows: Option<usize>,
    /// The distinct ids among those rows (fewer than the rows once a record was applied twice).
    pub applied_ids: Option<usize>,
    /// The group's committed next offset per partition right after the kill.
    pub committed: Vec<Option<u64>>,
}

/// A protocol fault that struck (the proxy's, at an OffsetCommit).
#[derive(Clone, Debug)]
pub struct ProtocolStrike {
    pub fault: ProtocolFault,
    /// The instance's label, `NAME (incarnation N)`.
    pub instance: String,
    /// Milliseconds since the proxy started (the protocol history's clock).
    pub at_ms: u64,
    /// The group's committed next offset per partition right after it.
    pub committed: Vec<Option<u64>>,
}

/// A zombie: an instance frozen right after a store call, held until its partitions moved to
/// another member (or the wait ended), then resumed. Times are the protocol history's (ms).
#[derive(Clone, Debug)]
pub struct Zombie {
    pub instance: String,
    pub strike: Strike,
    pub frozen_ms: u64,
    /// The partitions its last sync gave it before the freeze (topic, partition).
    pub holding: Vec<(String, i32)>,
    /// Who got one of them, when, in which generation; `None` when the wait ended first.
    pub reassigned: Option<(String, u64, i32)>,
    pub resumed_ms: u64,
    /// Its writes under the store after it resumed and before it synced again (or the watch
    /// ended), and when the first of them came.
    pub writes_after: u64,
    pub first_write_ms: Option<u64>,
    pub rejoined_ms: Option<u64>,
}

impl Zombie {
    /// Whether its window was struck: resumed after its partitions moved, and it wrote.
    pub fn wrote_as_zombie(&self) -> bool {
        self.reassigned.is_some() && self.writes_after > 0
    }

    pub fn line(&self, index: usize) -> String {
        let holding: Vec<String> = self.holding.iter().map(|(topic, p)| format!("{topic}:{p}")).collect();
        let holding = if holding.is_empty() { "nothing".to_string() } else { holding.join(" ") };
        format!(
            "zombie {}: {} frozen {} (held as it next began a transaction, its work in hand; in a store it never locks, at its next call outside it) at {} ms, holding {holding}; {}",
            index + 1,
            self.instance,
            self.strike,
            self.frozen_ms,
            self.outcome()
        )
    }

    /// What became of it: its partitions moved or not, its resumption, its writes.
    pub fn outcome(&self) -> String {
        let moved = match &self.reassigned {
            Some((to, at_ms, generation)) => format!("reassigned to {to} at {at_ms} ms (generation {generation})"),
            None => "never reassigned in the wait".to_string(),
        };
        let wrote = match (self.writes_after, self.first_write_ms) {
            (0, _) => "no write under the store before it synced again".to_string(),
            (n, Some(first)) if self.reassigned.is_some() => {
                let writes = if n == 1 { "write" } else { "writes" };
                format!(
                    "ZOMBIE WRITES: {n} {writes} under the store, the first at {first} ms, after its partitions moved"
                )
            }
            (1, _) => "1 write under the store".to_string(),
            (n, _) => format!("{n} writes under the store"),
        };
        let rejoined = (self.rejoined_ms)
            .map_or_else(|| "not seen to sync again".to_string(), |ms| format!("synced again at {ms} ms"));
        format!("{moved}; resumed at {} ms; {wrote}; {rejoined}", self.resumed_ms)
    }
}

/// What the run did, counted for the report's last lines.
#[derive(Clone, Debug, Default)]
pub struct Tried {
    pub instances_first: u32,
    pub instances_started: u32,
    pub kills: Vec<Kill>,
    /// Kills armed that did not strike: the instance made fewer store calls in the wait.
    pub kills_missed: u32,
    /// Protocol faults that struck, and those armed that met no OffsetCommit in the wait.
    pub protocol: Vec<ProtocolStrike>,
    pub protocol_missed: u32,
    /// Zombies made, and those armed that met no store call in the wait.
    pub zombies: Vec<Zombie>,
    pub zombies_missed: u32,
    /// Kills and zombies not tried: the store is a database server's (`--postgres`).
    pub not_traced: u32,
    pub restarts: u32,
    pub added: u32,
    /// Instances removed by churn (SIGKILLed, not started again).
    pub removed: u32,
    pub records: usize,
    pub partitions: u32,
}

/// The judgement of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every record applied once (by id where the spec reads ids, else by total).
    NoAnomaly,
    /// Records skipped or applied twice, or a total that disagrees: each named.
    Anomaly(Vec<String>),
    /// The run cannot judge: no kill struck, or the drain did not finish.
    NotEstablished(String),
}

/// What an anomaly is, for the model's row that has it as a counterexample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Anomaly {
    Duplicate,
    Skip,
    /// An accepted commit of the group's newest generation moved a committed offset back.
    Backwards,
    /// Records applied twice in a run where a zombie wrote after its partitions moved.
    ZombieWrite,
}

impl Anomaly {
    /// Its name in a report.
    pub fn name(self) -> &'static str {
        match self {
            Anomaly::Duplicate => "duplicate",
            Anomaly::Skip => "skip",
            Anomaly::Backwards => "committed offset moved back",
            Anomaly::ZombieWrite => "zombie write",
        }
    }

    /// The model's row whose counterexample is this anomaly, and why.
    pub fn row(self) -> (&'static str, &'static str) {
        match self {
            Anomaly::Duplicate => {
                ("effect-first", "effect, then the offset commit: a crash between them applies the record again")
            }
            Anomaly::Skip => {
                ("commit-first", "the offset commit, then the effect: a crash between them skips the record")
            }
            Anomaly::ZombieWrite => (
                "atomic",
                "effect and offset in one transaction, the offset written blindly: a zombie's write lands after its partition moved, with nothing to fence it",
            ),
            Anomaly::Backwards => {
                ("effect-first", "a commit lands after a newer one: the checkpoint moves back (monotonic-checkpoint)")
            }
        }
    }
}

/// The judgement and the lines that say it.
pub struct Judgement {
    pub verdict: Verdict,
    pub kinds: Vec<Anomaly>,
}

/// Judges the end state: `applied` the ids in the order applied (where the spec reads them),
/// `total` the group's total, `records` what was produced, `kills` what struck.
pub fn judge(records: &[Record], total: i64, applied: Option<&[i64]>, kills: &[Kill]) -> Judgement {
    let mut lines = Vec::new();
    let mut kinds = Vec::new();
    match applied {
        Some(applied) => by_id(records, total, applied, kills, &mut lines, &mut kinds),
        None => by_total(records, total, &mut lines, &mut kinds),
    }
    kinds.sort();
    kinds.dedup();
    let verdict = if lines.is_empty() { Verdict::NoAnomaly } else { Verdict::Anomaly(lines) };
    Judgement { verdict, kinds }
}

/// The most ids named one by one per kind; the rest are counted.
const NAMED_MAX: usize = 10;

fn by_id(
    records: &[Record],
    total: i64,
    applied: &[i64],
    kills: &[Kill],
    lines: &mut Vec<String>,
    kinds: &mut Vec<Anomaly>,
) {
    let produced: BTreeMap<i64, (usize, &Record)> =
        records.iter().enumerate().map(|(index, record)| (record.id, (index, record))).collect();
    let mut positions: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (position, &id) in applied.iter().enumerate() {
        positions.entry(id).or_default().push(position);
    }
    let unknown: Vec<i64> = positions.keys().copied().filter(|id| !produced.contains_key(id)).collect();
    if !unknown.is_empty() {
        lines.push(format!("{} ids applied that were never produced: {}", unknown.len(), list(&unknown)));
    }
    let twice: Vec<(i64, &Vec<usize>)> = positions
        .iter()
        .filter(|(id, at)| at.len() > 1 && produced.contains_key(id))
        .map(|(&id, at)| (id, at))
        .collect();
    if !twice.is_empty() {
        kinds.push(Anomaly::Duplicate);
        lines.push(format!("{} of {} records applied more than once", twice.len(), records.len()));
        for (id, at) in twice.iter().take(NAMED_MAX) {
            let record = produced[id].1;
            let before = kill_between(kills, at[0], at[1]);
            lines.push(format!(
                "  id {id} (partition {}) applied {} times, at rows {}; {}",
                record.partition,
                at.len(),
                at.iter().map(|row| (row + 1).to_string()).collect::<Vec<_>>().join(", "),
                before
            ));
        }
        if twice.len() > NAMED_MAX {
            lines.push(format!("  and {} more", twice.len() - NAMED_MAX));
        }
    }
    let skipped: Vec<&Record> = records.iter().filter(|record| !positions.contains_key(&record.id)).collect();
    if !skipped.is_empty() {
        kinds.push(Anomaly::Skip);
        lines.push(format!("{} of {} records never applied (skipped)", skipped.len(), records.len()));
        let mut offsets = BTreeMap::new();
        for record in skipped.iter().take(NAMED_MAX) {
            let offset = offset_of(records, record);
            offsets.insert(record.id, offset);
            lines.push(format!(
                "  id {} (partition {}, offset {offset}) never applied; {}",
                record.id,
                record.partition,
                kill_committing_past(kills, record.partition, offset)
            ));
        }
        if skipped.len() > NAMED_MAX {
            lines.push(format!("  and {} more", skipped.len() - NAMED_MAX));
        }
    }
    let sum: i64 = applied.iter().filter_map(|id| produced.get(id).map(|(_, record)| record.delta)).sum();
    if sum != total {
        lines.push(format!("the total {total} disagrees with the ids applied, whose deltas add up to {sum}"));
    }
}

fn by_total(records: &[Record], total: i64, lines: &mut Vec<String>, kinds: &mut Vec<Anomaly>) {
    let expected: i64 = records.iter().map(|record| record.delta).sum();
    let difference = total - expected;
    if difference == 0 {
        return;
    }
    let most = super::schedule::DELTA_MAX;
    // Each record's delta is in 1..=DELTA_MAX: a difference d is at least ceil(|d| / max)
    // records and at most |d| records.
    let (least, greatest) = ((difference.abs() + most - 1) / most, difference.abs());
    let (kind, what) = if difference > 0 {
        (Anomaly::Duplicate, "more: records applied more than once")
    } else {
        (Anomaly::Skip, "less: records never applied")
    };
    kinds.push(kind);
    lines.push(format!(
        "the total is {total} where every record applied once makes {expected}: {} {what}, between {least} and {greatest} of them (the spec reads no ids to name them)",
        difference.abs()
    ));
}

/// A record's offset in its partition: records go to partitions in id order.
fn offset_of(records: &[Record], record: &Record) -> u64 {
    records.iter().take_while(|other| other.id != record.id).filter(|other| other.partition == record.partition).count()
        as u64
}

/// The first kill whose copy of the store held more than `first` rows and at most `second`:
/// the first to strike after the first apply and before the second (how many more did is
/// counted).
fn kill_between(kills: &[Kill], first: usize, second: usize) -> String {
    let mut between = kills
        .iter()
        .enumerate()
        .filter(|(_, kill)| kill.applied_rows.is_some_and(|rows| rows > first && rows <= second));
    match between.next() {
        None => "no kill between its applies (a rebalance, or a kill whose copy of the store could not be read)".into(),
        Some((index, kill)) => {
            let more = between.count();
            let others = if more == 0 { String::new() } else { format!(" ({more} more before the second)") };
            format!("the first kill after its first apply: {}{others}", describe(index, kill))
        }
    }
}

/// The first kill after which the group's committed offset on `partition` was past `offset`.
fn kill_committing_past(kills: &[Kill], partition: u32, offset: u64) -> String {
    let found = kills
        .iter()
        .enumerate()
        .find(|(_, kill)| kill.committed.get(partition as usize).copied().flatten().is_some_and(|next| next > offset));
    match found {
        Some((index, kill)) => format!("the group had committed past it by {}", describe(index, kill)),
        None => "no kill saw its offset committed".to_string(),
    }
}

fn describe(index: usize, kill: &Kill) -> String {
    format!("kill {} ({} incarnation {}, {})", index + 1, kill.instance, kill.incarnation, kill.strike)
}

fn list(ids: &[i64]) -> String {
    let mut text = ids.iter().take(NAMED_MAX).map(i64::to_string).collect::<Vec<_>>().join(", ");
    if ids.len() > NAMED_MAX {
        let _ = write!(text, " and {} more", ids.len() - NAMED_MAX);
    }
    text
}

/// The report's last lines: what was tried, and the records in flight at each kill.
pub fn tried_lines(tried: &Tried) -> Vec<String> {
    let mut by_call: BTreeMap<&str, u32> = BTreeMap::new();
    for kill in &tried.kills {
        *by_call.entry(kill.strike.syscall).or_default() += 1;
    }
    let calls = by_call.iter().map(|(call, count)| format!("{call} {count}")).collect::<Vec<_>>().join(", ");
    let mut lines = vec![format!(
        "tried: {} records on {} partitions; {} instances at first, {} started in all; {} kills struck ({}), {} armed that did not strike; {} restarts; {} rebalances by churn ({} added, {} removed)",
        tried.records,
        tried.partitions,
        tried.instances_first,
        tried.instances_started,
        tried.kills.len(),
        if calls.is_empty() { "none".to_string() } else { format!("after {calls}") },
        tried.kills_missed,
        tried.restarts,
        tried.added + tried.removed,
        tried.added,
        tried.removed
    )];
    for (index, kill) in tried.kills.iter().enumerate() {
        lines.push(format!("  {}: {}", describe(index, kill), in_flight(kill)));
    }
    let mut by_kind: BTreeMap<ProtocolFault, u32> = BTreeMap::new();
    for strike in &tried.protocol {
        *by_kind.entry(strike.fault).or_default() += 1;
    }
    let kinds: Vec<String> = ProtocolFault::ALL
        .iter()
        .map(|fault| format!("{} {}", fault_name(*fault), by_kind.get(fault).copied().unwrap_or(0)))
        .collect();
    lines.push(format!(
        "tried at OffsetCommits (the proxy's): {} protocol faults struck ({}), {} armed that met no commit",
        tried.protocol.len(),
        kinds.join(", "),
        tried.protocol_missed
    ));
    for (index, strike) in tried.protocol.iter().enumerate() {
        let committed: Vec<String> = (strike.committed.iter().enumerate())
            .map(|(partition, next)| format!("{partition}:{}", next.map_or("-".to_string(), |n| n.to_string())))
            .collect();
        lines.push(format!(
            "  protocol fault {}: {} {} at {} ms; group committed {}",
            index + 1,
            strike.instance,
            strike.fault.describe(),
            strike.at_ms,
            committed.join(" ")
        ));
    }
    lines.push(format!(
        "tried as zombies: {} frozen ({} resumed after their partitions moved and wrote), {} armed that did not strike",
        tried.zombies.len(),
        tried.zombies.iter().filter(|zombie| zombie.wrote_as_zombie()).count(),
        tried.zombies_missed
    ));
    for (index, zombie) in tried.zombies.iter().enumerate() {
        lines.push(format!("  {}", zombie.line(index)));
    }
    if tried.not_traced > 0 {
        lines.push(format!(
            "not tried: {} kills at the store's writes and zombies, since a PostgreSQL store's writes go to its server, not to files the tracer sees (the proxy's faults and churn were tried)",
            tried.not_traced
        ));
    }
    lines
}

/// A protocol fault's short name, as the report counts them.
pub fn fault_name(fault: ProtocolFault) -> &'static str {
    match fault {
        ProtocolFault::KillAtCommit => "kill at commit",
        ProtocolFault::KillAfterCommitAnswer => "kill after commit answer",
        ProtocolFault::CloseAfterCommitSent => "close after commit sent",
    }
}

/// What the store and the group showed right after a kill: the records in flight.
fn in_flight(kill: &Kill) -> String {
    let committed: Vec<String> = kill
        .committed
        .iter()
        .enumerate()
        .map(|(partition, next)| match next {
            Some(next) => format!("{partition}:{next}"),
            None => format!("{partition}:-"),
        })
        .collect();
    let sum: Option<u64> = kill.committed.iter().copied().sum();
    let committed_sum = kill.committed.iter().flatten().sum::<u64>();
    let store = match (kill.applied_rows, kill.applied_ids) {
        (Some(rows), Some(ids)) if rows != ids => format!("store {ids} applied ({rows} rows)"),
        (Some(rows), _) => format!("store {rows} applied"),
        (None, _) => "store unread".to_string(),
    };
    let flight = match (kill.applied_ids, sum) {
        (Some(ids), Some(_)) => {
            let difference = ids as i64 - committed_sum as i64;
            match difference.cmp(&0) {
                std::cmp::Ordering::Greater => format!(": {difference} applied past the commit"),
                std::cmp::Ordering::Less => format!(": {} committed ahead of the store", -difference),
                std::cmp::Ordering::Equal => ": none in flight".to_string(),
            }
        }
        _ => String::new(),
    };
    format!("{store}, group committed {}{flight}", committed.join(" "))
}

#[cfg(test)]
mod tests {
    use super::{judge, Anomaly, Kill, Verdict};
    use crate::app::schedule::Record;
    use crate::killpoints::Strike;
    use kafka_lane::proxy::ProtocolFault;

    fn records(deltas: &[i64]) -> Vec<Record> {
        deltas
            .iter()
            .enumerate()
            .map(|(index, &delta)| Record { id: index as i64 + 1, delta, partition: (index % 2) as u32 })
            .collect()
    }

    fn kill(applied_rows: usize, committed: [u64; 2]) -> Kill {
        Kill {
            instance: "app-1".into(),
            incarnation: 1,
            strike: Strike { syscall: "fdatasync", file: "app.db-wal".into(), after_calls: 3, syncs_only: true },
            applied_rows: Some(applied_rows),
            applied_ids: Some(applied_rows),
            committed: committed.iter().map(|&next| Some(next)).collect(),
        }
    }

    /// A table of end states: the verdict's kinds and the words that name each record.
    #[test]
    fn each_end_state_is_judged_by_id_or_by_total() {
        let produced = records(&[5, 3, 2, 7]);
        let kills = [kill(2, [1, 1]), kill(3, [2, 2])];
        type Case<'a> = (&'a str, i64, Option<&'a [i64]>, &'a [Anomaly], &'a [&'a str]);
        let table: [Case; 7] = [
            ("once each", 17, Some(&[1, 2, 3, 4]), &[], &[]),
            ("once each, by total", 17, None, &[], &[]),
            (
                "a duplicate",
                20,
                Some(&[1, 2, 2, 3, 4]),
                &[Anomaly::Duplicate],
                &["id 2 (partition 1) applied 2 times, at rows 2, 3; the first kill after its first apply: kill 1 ("],
            ),
            (
                "a skip",
                15,
                Some(&[1, 3, 4]),
                &[Anomaly::Skip],
                &["id 2 (partition 1, offset 0) never applied; the group had committed past it by kill 1"],
            ),
            (
                "both",
                19,
                Some(&[1, 1, 3, 4]),
                &[Anomaly::Duplicate, Anomaly::Skip],
                &["applied more than once", "never applied"],
            ),
            (
                "a total that disagrees",
                18,
                Some(&[1, 2, 3, 4]),
                &[],
                &["the total 18 disagrees with the ids applied, whose deltas add up to 17"],
            ),
            (
                "too much, by total",
                24,
                None,
                &[Anomaly::Duplicate],
                &["7 more: records applied more than once, between 1 and 7 of them"],
            ),
        ];
        for (name, total, applied, kinds, words) in table {
            let judgement = judge(&produced, total, applied, &kills);
            assert_eq!(judgement.kinds, kinds, "{name}");
            match (&judgement.verdict, words.is_empty()) {
                (Verdict::NoAnomaly, true) => {}
                (Verdict::Anomaly(lines), false) => {
                    let text = lines.join("\n");
                    for word in words {
                        assert!(text.contains(word), "{name}: {word:?} not in\n{text}");
                    }
                }
                (other, _) => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_tried_lines_count_kills_by_call_and_say_what_was_in_flight() {
        let tried = super::Tried {
            instances_first: 2,
            instances_started: 5,
            kills: vec![kill(7, [3, 2]), kill(4, [3, 3]), Kill { applied_rows: Some(9), ..kill(8, [3, 3]) }],
            kills_missed: 1,
            protocol: vec![super::ProtocolStrike {
                fault: ProtocolFault::KillAtCommit,
                instance: "app-2 (incarnation 1)".into(),
                at_ms: 1234,
                committed: vec![Some(3), None],
            }],
            protocol_missed: 2,
            zombies: Vec::new(),
            zombies_missed: 0,
            not_traced: 3,
            restarts: 2,
            added: 1,
            removed: 0,
            records: 10,
            partitions: 2,
        };
        let lines = super::tried_lines(&tried);
        assert!(
            lines[0].contains("3 kills struck (after fdatasync 3), 1 armed that did not strike; 2 restarts"),
            "{lines:?}"
        );
        assert!(lines[1].ends_with("store 7 applied, group committed 0:3 1:2: 2 applied past the commit"), "{lines:?}");
        assert!(
            lines[2].ends_with("store 4 applied, group committed 0:3 1:3: 2 committed ahead of the store"),
            "{lines:?}"
        );
        // A record applied twice is one id: what is in flight counts ids, not rows.
        assert!(lines[3].ends_with("store 8 applied (9 rows), group committed 0:3 1:3: 2 applied past the commit"));
        assert_eq!(
            lines[4],
            "tried at OffsetCommits (the proxy's): 1 protocol faults struck (kill at commit 1, kill after commit answer 0, close after commit sent 0), 2 armed that met no commit"
        );
        assert_eq!(
            lines[5],
            "  protocol fault 1: app-2 (incarnation 1) killed when its OffsetCommit arrived, before the broker saw it at 1234 ms; group committed 0:3 1:-"
        );
        // A store on a database server: the kills at its writes and the zombies, not tried, said.
        assert!(
            lines[7].starts_with("not tried: 3 kills at the store's writes and zombies, since a PostgreSQL"),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 8, "{lines:?}");
    }
}
