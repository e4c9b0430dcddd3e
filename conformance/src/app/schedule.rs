//! The run's seeded plan: the records (ids, deltas, partitions) and the faults, drawn from one
//! seed with SplitMix64, so that a seed names the same plan on every machine. What the real
//! processes do with it is not deterministic (their timing is theirs); the plan is.

use crate::generate::SplitMix64;
use kafka_lane::proxy::ProtocolFault;

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

/// One fault of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// `syncs_only`, syncs) is frozen right after the last of them, every thread held until
    /// the protocol history shows its partitions assigned to another member, then resumed.
    Zombie { after_calls: u64, syncs_only: bool },
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
    assert!(records >= 1 && partitions >= 1);
    let mut random = Random(SplitMix64::new(seed));
    let records: Vec<Record> = (1..=i64::from(records))
        .map(|id| {
            let delta = i64::try_from(random.within(1, DELTA_MAX as u64)).expect("a small delta");
            let partition = u32::try_from((id - 1) % i64::from(partitions)).expect("a partition");
            Record { id, delta, partition }
        })
        .collect();
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
            pick: random.draw(),
            gap_ms: random.within(0, CHURN_GAP_MS_MAX),
        });
    }
    for _ in 0..zombies {
        let syncs_only = random.draw().is_multiple_of(2);
        let after_calls = random.within(1, if syncs_only { KILL_AFTER_SYNCS_MAX } else { KILL_AFTER_CALLS_MAX });
        faults.push(Fault::Zombie { after_calls, syncs_only });
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

/// `count` ranges covering `0..length` in order, as even as they can be.
fn chunks(length: usize, count: usize) -> Vec<std::ops::Range<usize>> {
    (0..count).map(|index| (length * index / count)..(length * (index + 1) / count)).collect()
}

#[cfg(test)]
mod tests {
    use super::{plan, Counts, Fault};

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

    #[test]
    fn a_record_value_is_the_documented_json() {
        let record = super::Record { id: 17, delta: 5, partition: 0 };
        assert_eq!(record.value(), r#"{"id":17,"delta":5}"#);
    }
}
