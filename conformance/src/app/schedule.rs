//! The run's seeded plan: the records (ids, deltas, partitions) and the faults, drawn from one
//! seed with SplitMix64, so that a seed names the same plan on every machine. What the real
//! processes do with it is not deterministic (their timing is theirs); the plan is.

use crate::generate::SplitMix64;
use kafka_lane::proxy::ProtocolFault;
use serde::Deserialize;
use std::path::Path;

/// The largest `k` drawn for a kill counting every call: it strikes after the instance's k-th
/// state-changing call under the store from its arming. A SQLite commit makes a few (WAL
/// frames, a sync), so such kills mostly fall inside transactions.
pub const KILL_AFTER_CALLS_MAX: u64 = 12;

/// The largest `k` drawn for a kill counting syncs only: it strikes right after a commit
/// reached the disk, before whatever the application does next (its offset commit, say).
pub const KILL_AFTER_SYNCS_MAX: u64 = 3;

/// The longest drawn delay before a killed instance is started again.
pub const RESTART_DELAY_MS_MAX: u64 = 800;

/// The longest drawn pause after a rebalance (an instance added or removed).
pub const CHURN_GAP_MS_MAX: u64 = 800;

/// The most transactions a zombie's freeze lets begin before it lands (`Traced::arm_freeze`): 0
/// freezes before the next transaction, 1 or 2 can freeze between two transactions of one record.
pub const TRANSACTIONS_PASSED_MAX: u64 = 2;

/// The largest `pick` drawn for a removal: it is taken modulo the instances running (and a
/// schedule file's integers are TOML's, at most 2^63 - 1).
pub const PICK_MAX: u64 = 1 << 20;

/// The largest delta drawn (each record's delta is in 1..=DELTA_MAX).
pub const DELTA_MAX: i64 = 9;

/// One produced record. Its key is `id` in decimal; its value `{"id":ID,"delta":DELTA}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub id: i64,
    pub delta: i64,
    pub partition: u32,
}

impl Record {
    /// The record's value, the documented language-neutral form.
    pub fn value(&self) -> String {
        format!("{{\"id\":{},\"delta\":{}}}", self.id, self.delta)
    }
}

/// One fault of the schedule. In a schedule file, a table with its `kind` and its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fault {
    /// SIGKILL the first instance to make `after_calls` state-changing calls under the store
    /// (with `syncs_only`, syncs) from the kill's arming, right after the last of them; start it
    /// again after `restart_ms`.
    Kill { after_calls: u64, syncs_only: bool, restart_ms: u64 },
    /// A rebalance: start a new instance, or remove (SIGKILL, no restart) the `pick`-th
    /// running one, then wait `gap_ms`.
    Churn { add: bool, pick: u64, gap_ms: u64 },
    /// A protocol fault at the next OffsetCommit of any instance (the proxy's); a killed
    /// instance is started again after `restart_ms`.
    Protocol { fault: ProtocolFault, restart_ms: u64 },
    /// A zombie: the first instance to make `after_calls` calls under the store (with
    /// `syncs_only`, syncs) is frozen after the last of them as it begins a transaction, once it has begun
    /// `transactions_passed`, every thread held until the protocol history shows its partitions
    /// assigned to another member, then resumed.
    Zombie { after_calls: u64, syncs_only: bool, transactions_passed: u64 },
}

/// The records, cut into chunks: chunk 0 before the instances start, chunk i+1 with fault i,
/// so that every fault meets records to work on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub records: Vec<Record>,
    pub chunks: Vec<std::ops::Range<usize>>,
    pub faults: Vec<Fault>,
}

/// `generate`'s SplitMix64, with a number in a closed range.
struct Random(SplitMix64);

impl Random {
    fn draw(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `low..=high`.
    fn within(&mut self, low: u64, high: u64) -> u64 {
        assert!(low <= high);
        low + self.draw() % (high - low + 1)
    }
}

/// The faults asked for, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub kills: u32,
    pub churn: u32,
    pub protocol: u32,
    pub zombies: u32,
}

/// The plan of `records` records on `partitions` partitions with `counts` faults shuffled
/// together (the protocol faults cycle through their kinds, so each kind comes before any
/// comes twice). Record `id` goes to partition `(id - 1) % partitions`.
pub fn plan(seed: u64, records: u32, partitions: u32, counts: Counts) -> Plan {
    let Counts { kills, churn, protocol, zombies } = counts;
    let mut random = Random(SplitMix64::new(seed));
    let records = draw_records(&mut random, records, partitions);
    let mut faults = Vec::new();
    for _ in 0..kills {
        let syncs_only = random.draw().is_multiple_of(2);
        let after_calls = random.within(1, if syncs_only { KILL_AFTER_SYNCS_MAX } else { KILL_AFTER_CALLS_MAX });
        let restart_ms = random.within(0, RESTART_DELAY_MS_MAX);
        faults.push(Fault::Kill { after_calls, syncs_only, restart_ms });
    }
    // Rebalances alternate: an instance added, then one removed, so the group's size stays
    // near what was asked.
    for index in 0..churn {
        faults.push(Fault::Churn {
            add: index % 2 == 0,
            pick: random.within(0, PICK_MAX),
            gap_ms: random.within(0, CHURN_GAP_MS_MAX),
        });
    }
    for _ in 0..zombies {
        let syncs_only = random.draw().is_multiple_of(2);
        let after_calls = random.within(1, if syncs_only { KILL_AFTER_SYNCS_MAX } else { KILL_AFTER_CALLS_MAX });
        let transactions_passed = random.within(0, TRANSACTIONS_PASSED_MAX);
        faults.push(Fault::Zombie { after_calls, syncs_only, transactions_passed });
    }
    for index in 0..protocol {
        let fault = ProtocolFault::ALL[index as usize % ProtocolFault::ALL.len()];
        faults.push(Fault::Protocol { fault, restart_ms: random.within(0, RESTART_DELAY_MS_MAX) });
    }
    // Fisher-Yates, keeping the churn's own order (an add before its stop).
    let churn_order: Vec<Fault> = faults.iter().copied().filter(|f| matches!(f, Fault::Churn { .. })).collect();
    for index in (1..faults.len()).rev() {
        let other = usize::try_from(random.within(0, index as u64)).expect("an index");
        faults.swap(index, other);
    }
    let mut churned = churn_order.into_iter();
    for fault in &mut faults {
        if matches!(fault, Fault::Churn { .. }) {
            *fault = churned.next().expect("as many churn faults");
        }
    }
    let chunks = chunks(records.len(), faults.len() + 1);
    Plan { records, chunks, faults }
}

/// The records of `seed`'s plan (the first draws of its stream, as `plan` makes them).
fn draw_records(random: &mut Random, records: u32, partitions: u32) -> Vec<Record> {
    assert!(records >= 1 && partitions >= 1);
    (1..=i64::from(records))
        .map(|id| {
            let delta = i64::try_from(random.within(1, DELTA_MAX as u64)).expect("a small delta");
            let partition = u32::try_from((id - 1) % i64::from(partitions)).expect("a partition");
            Record { id, delta, partition }
        })
        .collect()
}

/// The version of the schedule file's format this build reads and writes.
pub const SCHEDULE_VERSION: u64 = 1;

/// The largest schedule file read.
const SCHEDULE_BYTES_MAX: u64 = 1024 * 1024;

/// The bounds of a fault's numbers in a schedule file (a drawn one is well inside them).
const AFTER_CALLS_MAX: u64 = 1_000;
const DELAY_MS_MAX: u64 = 60_000;

/// A run's schedule as a file: what names its records (seed, count, partitions), the
/// instances at the start, and the faults in order. Written beside every run
/// (`DIR/schedule.toml`) and after a shrink; `--schedule FILE` runs one again.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub version: u64,
    pub seed: u64,
    pub records: u32,
    pub partitions: u32,
    pub instances: u32,
    pub faults: Vec<Fault>,
}

impl Schedule {
    /// The plan: the seed's records, cut into one chunk more than there are faults.
    pub fn plan(&self) -> Plan {
        let mut random = Random(SplitMix64::new(self.seed));
        let records = draw_records(&mut random, self.records, self.partitions);
        let chunks = chunks(records.len(), self.faults.len() + 1);
        Plan { records, chunks, faults: self.faults.clone() }
    }

    /// The same schedule with other faults.
    pub fn with_faults(&self, faults: Vec<Fault>) -> Schedule {
        Schedule { faults, ..self.clone() }
    }

    /// The file's text: TOML, one fault per line, in order.
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "# A schedule of `conformance kafka app`: the records (named by the seed), the instances at\n\
             # the start and the faults in order. Run it again with --schedule FILE.\n\
             version = {SCHEDULE_VERSION}\nseed = {}\nrecords = {}\npartitions = {}\ninstances = {}\nfaults = [\n",
            self.seed, self.records, self.partitions, self.instances
        );
        for fault in &self.faults {
            let fields = match fault {
                Fault::Kill { after_calls, syncs_only, restart_ms } => format!(
                    "kind = \"kill\", after_calls = {after_calls}, syncs_only = {syncs_only}, restart_ms = {restart_ms}"
                ),
                Fault::Churn { add, pick, gap_ms } => {
                    format!("kind = \"churn\", add = {add}, pick = {pick}, gap_ms = {gap_ms}")
                }
                Fault::Protocol { fault, restart_ms } => {
                    format!("kind = \"protocol\", fault = \"{}\", restart_ms = {restart_ms}", fault.name())
                }
                Fault::Zombie { after_calls, syncs_only, transactions_passed } => format!(
                    "kind = \"zombie\", after_calls = {after_calls}, syncs_only = {syncs_only}, transactions_passed = {transactions_passed}"
                ),
            };
            text.push_str(&format!("    {{ {fields} }},\n"));
        }
        text.push_str("]\n");
        text
    }

    /// Reads a schedule file, refusing what this build would not have written: another
    /// version, unknown keys, numbers out of their bounds.
    pub fn load(path: &Path) -> Result<Schedule, String> {
        let fail = |problem: String| format!("--schedule {}: {problem}", path.display());
        let length = std::fs::metadata(path).map_err(|error| fail(format!("cannot read: {error}")))?.len();
        if length > SCHEDULE_BYTES_MAX {
            return Err(fail(format!("{length} bytes, more than the {SCHEDULE_BYTES_MAX} a schedule may have")));
        }
        let text = std::fs::read_to_string(path).map_err(|error| fail(format!("cannot read: {error}")))?;
        Schedule::parse(&text).map_err(fail)
    }

    /// `load`'s checks on a text.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let one_line =
            |text: String| text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
        let schedule: Schedule = toml::from_str(text).map_err(|error| one_line(error.to_string()))?;
        if schedule.version != SCHEDULE_VERSION {
            return Err(format!("version {} (this build reads version {SCHEDULE_VERSION})", schedule.version));
        }
        let within = |name: &str, value: u64, low: u64, high: u64| match (low..=high).contains(&value) {
            true => Ok(()),
            false => Err(format!("{name} {value} is not in {low}..={high}")),
        };
        within("records", u64::from(schedule.records), 1, u64::from(super::RECORDS_MAX))?;
        within("partitions", u64::from(schedule.partitions), 1, 64)?;
        within("instances", u64::from(schedule.instances), 1, u64::from(super::INSTANCES_MAX))?;
        within("the number of faults", schedule.faults.len() as u64, 0, 4 * u64::from(super::FAULTS_MAX))?;
        for (index, fault) in schedule.faults.iter().enumerate() {
            let name = |field: &str| format!("faults[{index}].{field}");
            match *fault {
                Fault::Kill { after_calls, syncs_only: _, restart_ms } => {
                    within(&name("after_calls"), after_calls, 1, AFTER_CALLS_MAX)?;
                    within(&name("restart_ms"), restart_ms, 0, DELAY_MS_MAX)?;
                }
                Fault::Churn { add: _, pick: _, gap_ms } => within(&name("gap_ms"), gap_ms, 0, DELAY_MS_MAX)?,
                Fault::Protocol { fault: _, restart_ms } => within(&name("restart_ms"), restart_ms, 0, DELAY_MS_MAX)?,
                Fault::Zombie { after_calls, syncs_only: _, transactions_passed } => {
                    within(&name("after_calls"), after_calls, 1, AFTER_CALLS_MAX)?;
                    within(&name("transactions_passed"), transactions_passed, 0, TRANSACTIONS_PASSED_MAX)?;
                }
            }
        }
        Ok(schedule)
    }
}

/// `count` ranges covering `0..length` in order, as even as they can be.
fn chunks(length: usize, count: usize) -> Vec<std::ops::Range<usize>> {
    (0..count).map(|index| (length * index / count)..(length * (index + 1) / count)).collect()
}

#[cfg(test)]
mod tests {
    use super::{plan, Counts, Fault, Schedule, SCHEDULE_VERSION};

    /// A seed names one plan: the same records and faults twice, another seed another plan;
    /// every record in exactly one chunk, ids 1..=N on partitions by id, deltas in bounds,
    /// each churn's add before its stop.
    #[test]
    fn a_seed_names_one_plan_whose_chunks_cover_every_record_once() {
        let table =
            [(1, 300, 2, 6, 2, 3, 2), (7, 1, 1, 0, 0, 0, 0), (3, 10, 3, 20, 5, 4, 1), (9, 1000, 4, 20, 4, 40, 3)];
        for (seed, records, partitions, kills, churn, protocol, zombies) in table {
            let counts = Counts { kills, churn, protocol, zombies };
            let first = plan(seed, records, partitions, counts);
            assert_eq!(first, plan(seed, records, partitions, counts));
            if records >= 10 {
                assert_ne!(first, plan(seed + 1, records, partitions, counts));
            }
            assert_eq!(first.faults.len(), (kills + churn + protocol + zombies) as usize);
            let zombie_faults = first.faults.iter().filter(|f| matches!(f, Fault::Zombie { .. })).count();
            assert_eq!(zombie_faults, zombies as usize);
            let protocol_faults = first.faults.iter().filter(|f| matches!(f, Fault::Protocol { .. })).count();
            assert_eq!(protocol_faults, protocol as usize);
            assert_eq!(first.chunks.len(), first.faults.len() + 1);
            let covered: Vec<usize> = first.chunks.iter().flat_map(|chunk| chunk.clone()).collect();
            assert_eq!(covered, (0..records as usize).collect::<Vec<_>>());
            for (index, record) in first.records.iter().enumerate() {
                assert_eq!(record.id, index as i64 + 1);
                assert_eq!(record.partition, (index as u32) % partitions);
                assert!((1..=super::DELTA_MAX).contains(&record.delta));
            }
            let adds: Vec<bool> = first
                .faults
                .iter()
                .filter_map(|fault| match fault {
                    Fault::Churn { add, .. } => Some(*add),
                    Fault::Kill { .. } | Fault::Protocol { .. } | Fault::Zombie { .. } => None,
                })
                .collect();
            let expected: Vec<bool> = (0..churn).map(|index| index % 2 == 0).collect();
            assert_eq!(adds, expected);
        }
    }

    /// A drawn plan written as a schedule file reads back as the same schedule, and names the
    /// same plan.
    #[test]
    fn a_schedule_file_reads_back_as_the_plan_it_was_written_from() {
        for (seed, counts) in [
            (1, Counts { kills: 16, churn: 2, protocol: 3, zombies: 4 }),
            (5, Counts { kills: 0, churn: 0, protocol: 0, zombies: 0 }),
        ] {
            let drawn = plan(seed, 200, 3, counts);
            let schedule = Schedule {
                version: SCHEDULE_VERSION,
                seed,
                records: 200,
                partitions: 3,
                instances: 2,
                faults: drawn.faults.clone(),
            };
            let text = schedule.to_text();
            assert_eq!(Schedule::parse(&text), Ok(schedule.clone()), "{text}");
            assert_eq!(schedule.plan(), drawn);
        }
    }

    /// A schedule this build would not have written is refused, naming what is wrong.
    #[test]
    fn a_schedule_file_out_of_bounds_or_misspelt_is_refused_naming_the_problem() {
        let head = "version = 1\nseed = 1\nrecords = 10\npartitions = 2\ninstances = 2\n";
        let table = [
            (
                "version = 2\nseed = 1\nrecords = 10\npartitions = 2\ninstances = 2\nfaults = []\n",
                "version 2 (this build reads version 1)",
            ),
            (&format!("{head}faults = []\nextra = 1\n"), "unknown field `extra`"),
            (&format!("{head}faults = [{{ kind = \"crash\" }}]\n"), "unknown variant `crash`"),
            (
                &format!("{head}faults = [{{ kind = \"protocol\", fault = \"drop\", restart_ms = 0 }}]\n"),
                "unknown variant `drop`",
            ),
            (
                &format!(
                    "{head}faults = [{{ kind = \"zombie\", after_calls = 1, syncs_only = true, transactions_passed = 3 }}]\n"
                ),
                "faults[0].transactions_passed 3 is not in 0..=2",
            ),
            (
                &format!(
                    "{head}faults = [{{ kind = \"kill\", after_calls = 0, syncs_only = true, restart_ms = 0 }}]\n"
                ),
                "faults[0].after_calls 0 is not in 1..=1000",
            ),
            (
                &format!("{head}faults = [{{ kind = \"kill\", after_calls = 1, syncs_only = true }}]\n"),
                "missing field `restart_ms`",
            ),
            (
                "version = 1\nseed = 1\nrecords = 0\npartitions = 2\ninstances = 2\nfaults = []\n",
                "records 0 is not in 1..=100000",
            ),
        ];
        for (text, expected) in table {
            let error = Schedule::parse(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }

    #[test]
    fn a_record_value_is_the_documented_json() {
        let record = super::Record { id: 17, delta: 5, partition: 0 };
        assert_eq!(record.value(), r#"{"id":17,"delta":5}"#);
    }
}
