//! The model's state: the durable log and store, each owner's volatile state, and ghost history.

use crate::collections::{SortedMap, SortedSet};
use crate::config::Config;
use crate::strategy::{Replication, Sequence};
use stateright::Representative;

/// An offset in one partition. Bounds keep it far below 256.
pub type Offset = u8;

/// `Clone` for a struct, field by field, with a `clone_from` that reuses every field's buffers
/// (the checker builds successors in a reused state, `step::next_state_into`). The
/// destructuring has no `..`, so a new field fails to compile here until it is listed.
macro_rules! clone_fields {
    ($type:ident { $($field:ident),* $(,)? }) => {
        impl Clone for $type {
            fn clone(&self) -> Self {
                let $type { $($field),* } = self;
                $type { $($field: $field.clone()),* }
            }
            fn clone_from(&mut self, source: &Self) {
                let $type { $($field),* } = self;
                $($field.clone_from(&source.$field);)*
            }
        }
    };
}

clone_fields!(State {
    log,
    sends,
    producer,
    ack_losses_used,
    log_start,
    retentions_used,
    groups,
    crashes_used,
    rebalances_used,
    pauses_used,
    log_losses_used,
    leader_failures_used,
    isr_shrinks_used,
    replicas,
    output,
    reader,
    damaged,
    witnessed,
});
clone_fields!(Replicas { logs, leader, hw, isr, alive, in_flight, acked });
clone_fields!(Group { store, inbox, index, owners, paused, forming, ghost });
clone_fields!(Store { total, partitions, processed, attempts, dead_letters, resets, value, facts, outbox });
clone_fields!(Owner { alive, leases, incarnation_of });
clone_fields!(Lease { epoch, position, checkpoint, records, done });
clone_fields!(Ghost {
    applied,
    high_water,
    stale_write_landed,
    foreign_write,
    failures,
    lost_sum,
    unjustified_refusal,
    read_truncated,
    read_aborted,
});

/// The whole system: survives-a-crash parts (`log`, each group's `store`) and the rest.
/// `{:#?}` (what stateright's explorer shows) is the compact form a person reads
/// (`view::compact`); `{:?}` and `{:#?}` of `State::full` are every field.
#[derive(PartialEq, Eq, Hash)]
pub struct State {
    /// Durable: per partition, the delta of each appended record, indexed by offset.
    pub log: Vec<Vec<i64>>,
    /// Ghost: per partition, the logical send (0, 1, ...) each record of the log carries.
    pub sends: Vec<Vec<u8>>,
    /// The producer's volatile state per partition.
    pub producer: Vec<ProducerState>,
    pub ack_losses_used: u8,
    /// Durable: per partition, the retained log start (records below it cannot be read).
    pub log_start: Vec<Offset>,
    pub retentions_used: u8,
    pub groups: Vec<Group>,
    /// Fault budget spent so far (bounded by `Config::crashes` and `Config::rebalances`).
    pub crashes_used: u8,
    pub rebalances_used: u8,
    pub pauses_used: u8,
    pub log_losses_used: u8,
    pub leader_failures_used: u8,
    pub isr_shrinks_used: u8,
    /// Replicated rows: per partition, its two replicas (spec.md §3.2); empty otherwise. The
    /// consumer-visible `log` is then the leader's log below the high watermark.
    pub replicas: Vec<Replicas>,
    /// Transactional rows: per partition, the output partition (spec.md §3.3); empty otherwise.
    pub output: Vec<Vec<OutEntry>>,
    /// Transactional rows: per output partition, the downstream reader's position.
    pub reader: Vec<Offset>,
    /// Durable: per partition, whether the log lost acknowledged records (a `lose-tail`). A
    /// log that knows its acknowledged end refuses appends from then on (`LogCheck`).
    pub damaged: Vec<bool>,
    /// Ghost: one bit per `Witness` the step into this state reached, for the `sometimes`
    /// properties. Only the last step's, not every step's so far: a situation is reached on a
    /// path exactly when some step of it shows it, so `sometimes` needs no history, and a
    /// history would tell apart states that differ only in how they were reached (at two
    /// groups with every budget lifted it tripled the states).
    pub witnessed: u32,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match f.alternate() {
            true => f.write_str(&crate::view::compact(self)),
            false => write!(f, "{:?}", self.full()),
        }
    }
}

/// Every field of a state, as `#[derive(Debug)]` would print them (`State::full`).
pub struct Full<'a>(&'a State);

impl State {
    /// The full form of the state (`{:#?}` of it pretty-prints every field).
    pub fn full(&self) -> Full<'_> {
        Full(self)
    }
}

impl std::fmt::Debug for Full<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No `..`: a new field fails to compile here until it is printed.
        let State {
            log,
            sends,
            producer,
            ack_losses_used,
            log_start,
            retentions_used,
            groups,
            crashes_used,
            rebalances_used,
            pauses_used,
            log_losses_used,
            leader_failures_used,
            isr_shrinks_used,
            replicas,
            output,
            reader,
            damaged,
            witnessed,
        } = self.0;
        f.debug_struct("State")
            .field("log", log)
            .field("sends", sends)
            .field("producer", producer)
            .field("ack_losses_used", ack_losses_used)
            .field("log_start", log_start)
            .field("retentions_used", retentions_used)
            .field("groups", groups)
            .field("crashes_used", crashes_used)
            .field("rebalances_used", rebalances_used)
            .field("pauses_used", pauses_used)
            .field("log_losses_used", log_losses_used)
            .field("leader_failures_used", leader_failures_used)
            .field("isr_shrinks_used", isr_shrinks_used)
            .field("replicas", replicas)
            .field("output", output)
            .field("reader", reader)
            .field("damaged", damaged)
            .field("witnessed", witnessed)
            .finish()
    }
}

/// A replicated partition: two brokers' logs (of logical sends), the leader, the high
/// watermark (records below it are on every ISR member), the ISR and which brokers are alive.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Replicas {
    pub logs: [Vec<u8>; 2],
    /// `None`: no leader could be elected; the partition is unavailable.
    pub leader: Option<u8>,
    pub hw: Offset,
    pub isr: [bool; 2],
    pub alive: [bool; 2],
    /// `acks=all`: the send appended to the leader and waiting for its acknowledgement.
    pub in_flight: Option<u8>,
    /// Ghost: one bit per acknowledged send.
    pub acked: u16,
}

/// One entry of a transactional output partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutEntry {
    /// The output record of input `input`, in the transaction of producer epoch `epoch`.
    Data { input: Offset, epoch: u8 },
    /// The end of the transaction of input `input` and producer epoch `epoch`: committed or
    /// aborted.
    Marker { input: Offset, epoch: u8, commit: bool },
}

/// The producer of one partition: how many logical sends it started, and the one whose
/// acknowledgement was lost (it retries that before sending anything else).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProducerState {
    pub sent: u8,
    pub unacked: Option<u8>,
}

#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Group {
    pub store: Store,
    /// Durable, outside the store: the email provider's count of requests per record (capped
    /// at 2: "more than once" is all a property needs).
    pub inbox: SortedMap<(u8, Offset), u8>,
    /// Durable, outside the store: the index (a second store) of the dual-write rows' facts.
    pub index: SortedSet<(u8, Offset)>,
    /// The owner slots: `owners[o]` is the current incarnation of owner `o`.
    pub owners: Vec<Owner>,
    /// One slot per `--pauses`: an earlier incarnation still running after its owner was
    /// started again (`incarnation_of` names the owner), or free. Owner steps address slot `i`
    /// as owner `owners.len() + i`.
    pub paused: Vec<Owner>,
    /// The coordinator's, per partition: the owner a rebalance is moving it to while the group
    /// forms (`Coordinator::Forming`; always `None` under an atomic coordinator).
    pub forming: Vec<Option<u8>>,
    pub ghost: Ghost,
}

impl Group {
    /// Makes this group equal to `source` by copying only the fields (and owner slots) that
    /// differ: a step changes one owner, the store or the ghost, and the checker restores the
    /// parent's group after every successor (`search::expand_chunk`). The destructuring has no
    /// `..`: a new field fails to compile here until it is restored.
    pub fn restore_from(&mut self, source: &Group) {
        let Group { store, inbox, index, owners, paused, forming, ghost } = self;
        if *store != source.store {
            store.clone_from(&source.store);
        }
        if *inbox != source.inbox {
            inbox.clone_from(&source.inbox);
        }
        if *index != source.index {
            index.clone_from(&source.index);
        }
        for (slots, source_slots) in [(owners, &source.owners), (paused, &source.paused)] {
            if slots.len() != source_slots.len() {
                slots.clone_from(source_slots);
                continue;
            }
            for (slot, source_slot) in slots.iter_mut().zip(source_slots) {
                if slot != source_slot {
                    slot.clone_from(source_slot);
                }
            }
        }
        if *forming != source.forming {
            forming.clone_from(&source.forming);
        }
        if *ghost != source.ghost {
            ghost.clone_from(&source.ghost);
        }
    }

    /// The owner slot an owner step addresses: a current incarnation, or a paused one.
    pub fn slot(&self, owner: u8) -> &Owner {
        let o = usize::from(owner);
        self.owners.get(o).unwrap_or_else(|| &self.paused[o - self.owners.len()])
    }

    pub fn slot_mut(&mut self, owner: u8) -> &mut Owner {
        let (o, current) = (usize::from(owner), self.owners.len());
        if o < current {
            &mut self.owners[o]
        } else {
            &mut self.paused[o - current]
        }
    }

    /// Every slot, current incarnations first, with the owner index its steps use.
    pub fn slots(&self) -> impl Iterator<Item = (u8, &Owner)> {
        self.owners.iter().chain(&self.paused).enumerate().map(|(o, owner)| (o as u8, owner))
    }

    /// The owner whose identity (store `owner` column, process name) a slot runs as.
    pub fn identity(&self, owner: u8) -> u8 {
        self.slot(owner).incarnation_of.unwrap_or(owner)
    }
}

/// Durable per group: what the database holds. Never touched by a crash.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Store {
    /// The effect: the sum of the deltas the group applied.
    pub total: i64,
    pub partitions: Vec<PartitionRow>,
    /// Processed-id table of the dedup strategies: (partition, offset).
    pub processed: SortedSet<(u8, Offset)>,
    /// atomic-dlq: failed attempts per (partition, offset), counted durably.
    pub attempts: SortedMap<(u8, Offset), u8>,
    /// The dead-letter table: (partition, offset, attempts); the real one also keeps the error.
    pub dead_letters: SortedSet<(u8, Offset, u8)>,
    /// Recorded resets after retention passed the checkpoint: (partition, from, to).
    pub resets: SortedSet<(u8, Offset, Offset)>,
    /// The set rows: the stored value (`v(o) = o + 1` of the record that set it).
    pub value: Option<u8>,
    /// The dual-write and outbox rows: one fact per applied record, written by `apply-atomic`.
    pub facts: SortedSet<(u8, Offset)>,
    /// The outbox row: facts still to relay to the index (same transaction as the fact).
    pub outbox: SortedSet<(u8, Offset)>,
}

impl Store {
    pub fn is_dead_lettered(&self, partition: u8, offset: Offset) -> bool {
        self.dead_letters.iter().any(|&(p, o, _)| p == partition && o == offset)
    }

    pub fn is_reset_over(&self, partition: u8, offset: Offset) -> bool {
        self.resets.iter().any(|&(p, from, to)| p == partition && from <= offset && offset < to)
    }
}

/// Durable per (group, partition): progress, ownership and the offset stamp.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionRow {
    /// The committed checkpoint: the next offset to process.
    pub next_offset: Offset,
    /// The current owner epoch (fencing token); bumped by every rebalance.
    pub epoch: u8,
    /// The owner the coordinator assigned the partition to.
    pub owner: u8,
    /// `offset-stamp`: the highest offset whose effect was applied.
    pub stamp: Option<Offset>,
}

/// Volatile per owner process: lost by a crash.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    pub alive: bool,
    /// Per partition, what the owner believes it owns (`None`: not its partition as far as it knows).
    pub leases: Vec<Option<Lease>>,
    /// A paused slot in use: the owner this earlier incarnation runs as. `None` in current
    /// slots and in free paused slots.
    pub incarnation_of: Option<u8>,
}

/// An owner's in-memory view of one partition it believes it owns.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    /// The epoch the owner was given; stale once a rebalance bumps the stored one.
    pub epoch: u8,
    /// The next offset to fetch.
    pub position: Offset,
    /// The next offset this owner last committed or loaded.
    pub checkpoint: Offset,
    /// Fetched but unfinished records and where each is inside its strategy.
    pub records: SortedMap<Offset, Stage>,
    /// Parallel strategies: offsets completed at or above `checkpoint`.
    pub done: SortedSet<Offset>,
}

/// Where a fetched record is inside its strategy's sequence of durable writes. (`Default`
/// only fills the unused inline slots of a lease's `records`, `collections::Items`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Stage {
    /// Read from the log; no durable write yet.
    #[default]
    Fetched,
    /// `commit-first`: the next offset is committed, the effect is not applied yet.
    Committed,
    /// The effect (or dedup transaction) landed; the next write is pending.
    EffectApplied,
    /// `dedup-separate`: the processed id is recorded; the commit is pending.
    Recorded,
    /// A poison record the owner gave up on: it is dead-lettered (atomic-dlq) or skipped next.
    Exhausted,
    /// Read-process-write: the output record is in the open transaction; the commit is next.
    Produced,
    /// The effect and next offset are committed; a write outside the store (an email, an
    /// index) is next.
    Stored,
    /// The email was sent (before the store's transaction); `apply-atomic` is next.
    Emailed,
}

/// Ghost history per group, used only by properties; the real system has no such data.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ghost {
    /// Per partition and offset: how many times the record's effect was applied.
    pub applied: Vec<Vec<u8>>,
    /// Per partition: the highest checkpoint ever stored.
    pub high_water: Vec<Offset>,
    /// A durable write by an owner with a stale epoch landed.
    pub stale_write_landed: bool,
    /// A step of another group changed this group's store.
    pub foreign_write: bool,
    /// Per partition: failed effect attempts on the poison record (capped at max_attempts + 1).
    pub failures: Vec<u8>,
    /// The deltas applied of records a log lost and then reused the offset of (their `applied`
    /// counts are reset so that the new records count afresh): `group-isolation` adds them.
    pub lost_sum: i64,
    /// An owner refused to go on while its group was not ahead of the log.
    pub unjustified_refusal: bool,
    /// A record the group applied left the leader's log (an unclean election truncated it).
    pub read_truncated: bool,
    /// The downstream reader read a record of a transaction that was (or got) aborted.
    pub read_aborted: bool,
}

/// Situations the `sometimes` properties must see reached, one bit each in `State::witnessed`
/// (set by the step that reaches them, cleared by the next: `step::apply_concrete`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Witness {
    /// An owner crashed between two durable writes of one record (or with applied, uncommitted records).
    CrashMidRecord = 0,
    /// An owner crashed on a partition with durable progress (a committed checkpoint above 0).
    CrashAfterWrite = 1,
    /// An owner with a stale epoch attempted a durable write.
    ZombieWrite = 2,
    /// An owner fetched a record its group had already applied (a redelivery).
    Replay = 3,
    /// The store recognised a redelivered record and skipped its effect.
    DuplicateSkipped = 4,
    /// A fenced write was rejected because the owner's epoch was stale.
    ZombieFenced = 5,
    /// A record completed while a lower fetched record was still pending.
    OutOfOrder = 6,
    /// A poison record's effect failed.
    PoisonFailed = 7,
    /// A poison record was moved to the dead-letter table.
    DeadLettered = 8,
    /// The producer retried an append whose acknowledgement was lost.
    AppendRetried = 9,
    /// An owner found its position below the log start.
    OutOfRange = 10,
    /// A reset past retained records was recorded.
    ResetRecorded = 11,
    /// An earlier incarnation attempted a durable write after its owner was started again.
    PausedWrite = 12,
    /// A group's stored checkpoint was above the end of the log (the log lost records).
    StoreAhead = 13,
    /// An owner refused to go on because its group was ahead of the log.
    Refused = 14,
    /// An earlier incarnation's fenced write aborted: its successor's claimed epoch fenced it.
    PausedFenced = 15,
    /// A replicated partition's leader failed.
    LeaderFailed = 16,
    /// A lagging follower left the ISR.
    IsrShrunk = 17,
    /// An `acks=all` append was refused (`NotEnoughReplicas`) or not acknowledged
    /// (`NotEnoughReplicasAfterAppend`) for want of in-sync replicas.
    NotEnoughReplicas = 18,
    /// Taking a partition aborted the open transaction of an earlier producer epoch.
    TxnAborted = 19,
    /// The owner a forming rebalance moves a partition from committed while the group formed,
    /// and the commit landed (the broker's coordinator keeps its generation current till then).
    CommitWhileForming = 21,
    /// A leader failed holding records above the high watermark, and the election kept none
    /// of them (a clean one truncates to the high watermark; or no leader): records no
    /// consumer could read (they read below it) left the partition unread.
    UnreadTruncated = 20,
}

/// `State::witnessed` holds one bit per `Witness`: the last variant must fit. (With a `u16`
/// the bits of the replication and transaction witnesses, 16 and up, overflowed: a panic in a
/// debug build, and in a release build a shift that wraps onto the crash and replay bits.)
const _: () = assert!((Witness::CommitWhileForming as u32) < u32::BITS);

impl Witness {
    /// Every witness, in bit order.
    pub const ALL: [Witness; 22] = [
        Witness::CrashMidRecord,
        Witness::CrashAfterWrite,
        Witness::ZombieWrite,
        Witness::Replay,
        Witness::DuplicateSkipped,
        Witness::ZombieFenced,
        Witness::OutOfOrder,
        Witness::PoisonFailed,
        Witness::DeadLettered,
        Witness::AppendRetried,
        Witness::OutOfRange,
        Witness::ResetRecorded,
        Witness::PausedWrite,
        Witness::StoreAhead,
        Witness::Refused,
        Witness::PausedFenced,
        Witness::LeaderFailed,
        Witness::IsrShrunk,
        Witness::NotEnoughReplicas,
        Witness::TxnAborted,
        Witness::UnreadTruncated,
        Witness::CommitWhileForming,
    ];

    /// The name of the `sometimes` property that reads this witness.
    pub fn name(self) -> &'static str {
        match self {
            Witness::CrashMidRecord => "crash-mid-record",
            Witness::CrashAfterWrite => "crash-after-write",
            Witness::ZombieWrite => "zombie-write",
            Witness::Replay => "replay",
            Witness::DuplicateSkipped => "duplicate-skipped",
            Witness::ZombieFenced => "zombie-fenced",
            Witness::OutOfOrder => "out-of-order",
            Witness::PoisonFailed => "poison-failed",
            Witness::DeadLettered => "dead-lettered",
            Witness::AppendRetried => "append-retried",
            Witness::OutOfRange => "out-of-range",
            Witness::ResetRecorded => "reset-recorded",
            Witness::PausedWrite => "paused-write",
            Witness::StoreAhead => "store-ahead",
            Witness::Refused => "refused",
            Witness::PausedFenced => "paused-fenced",
            Witness::LeaderFailed => "leader-failed",
            Witness::IsrShrunk => "isr-shrunk",
            Witness::NotEnoughReplicas => "not-enough-replicas",
            Witness::TxnAborted => "txn-aborted",
            Witness::UnreadTruncated => "unread-truncated",
            Witness::CommitWhileForming => "commit-while-forming",
        }
    }
}

/// `Witness::ALL` lists every variant, in bit order (a new one must be added there).
const _: () = assert!(Witness::ALL.len() == Witness::CommitWhileForming as usize + 1);

impl Stage {
    /// Whether the record's effect is still to be applied by the owner holding it.
    pub fn is_before_effect(self) -> bool {
        matches!(self, Stage::Fetched | Stage::Committed | Stage::Emailed)
    }
}

impl State {
    pub fn initial(config: &Config) -> State {
        let partitions = usize::from(config.partitions);
        // A producer that retries with a new sequence appends a record once more per lost ack.
        let records = usize::from(config.records) + usize::from(config.ack_losses);
        let group = Group {
            store: Store {
                total: 0,
                partitions: vec![PartitionRow { next_offset: 0, epoch: 1, owner: 0, stamp: None }; partitions],
                processed: SortedSet::new(),
                attempts: SortedMap::new(),
                dead_letters: SortedSet::new(),
                resets: SortedSet::new(),
                value: None,
                facts: SortedSet::new(),
                outbox: SortedSet::new(),
            },
            inbox: SortedMap::new(),
            index: SortedSet::new(),
            // Owner 0 starts with every partition; the others stand by until a rebalance.
            owners: (0..config.owners)
                .map(|owner| Owner {
                    alive: true,
                    leases: vec![if owner == 0 { Some(Lease::fresh(1, 0)) } else { None }; partitions],
                    incarnation_of: None,
                })
                .collect(),
            paused: vec![Owner::free_slot(partitions); usize::from(config.pauses)],
            forming: vec![None; partitions],
            ghost: Ghost {
                applied: vec![vec![0; records]; partitions],
                high_water: vec![0; partitions],
                stale_write_landed: false,
                foreign_write: false,
                failures: vec![0; partitions],
                lost_sum: 0,
                unjustified_refusal: false,
                read_truncated: false,
                read_aborted: false,
            },
        };
        State {
            log: vec![Vec::new(); partitions],
            sends: vec![Vec::new(); partitions],
            producer: vec![ProducerState { sent: 0, unacked: None }; partitions],
            ack_losses_used: 0,
            log_start: vec![0; partitions],
            retentions_used: 0,
            groups: vec![group; usize::from(config.groups)],
            crashes_used: 0,
            rebalances_used: 0,
            pauses_used: 0,
            log_losses_used: 0,
            leader_failures_used: 0,
            isr_shrinks_used: 0,
            replicas: match config.strategy.rules().replication {
                Replication::Single => Vec::new(),
                Replication::Replicated(_) => vec![Replicas::fresh(); partitions],
            },
            output: if config.strategy.rules().sequence == Sequence::Transactional {
                vec![Vec::new(); partitions]
            } else {
                Vec::new()
            },
            reader: if config.strategy.rules().sequence == Sequence::Transactional {
                vec![0; partitions]
            } else {
                Vec::new()
            },
            damaged: vec![false; partitions],
            witnessed: 0,
        }
    }

    pub fn has_witnessed(&self, witness: Witness) -> bool {
        self.witnessed & (1 << witness as u32) != 0
    }

    pub fn witness(&mut self, witness: Witness) {
        self.witnessed |= 1 << witness as u32;
    }

    pub fn lease(&self, group: u8, owner: u8, partition: u8) -> Option<&Lease> {
        self.groups[usize::from(group)].slot(owner).leases[usize::from(partition)].as_ref()
    }
}

impl Replicas {
    /// Broker 0 leads, both brokers in sync, nothing appended.
    pub fn fresh() -> Replicas {
        Replicas {
            logs: [Vec::new(), Vec::new()],
            leader: Some(0),
            hw: 0,
            isr: [true, true],
            alive: [true, true],
            in_flight: None,
            acked: 0,
        }
    }

    /// The members of the ISR.
    pub fn isr_size(&self) -> u8 {
        self.isr.iter().filter(|&&member| member).count() as u8
    }

    /// The follower: the broker that is not the leader, if it is alive.
    pub fn follower(&self) -> Option<u8> {
        let leader = self.leader?;
        let follower = 1 - leader;
        self.alive[usize::from(follower)].then_some(follower)
    }
}

impl Owner {
    /// A paused slot nobody uses.
    pub fn free_slot(partitions: usize) -> Owner {
        Owner { alive: false, leases: vec![None; partitions], incarnation_of: None }
    }

    /// Makes this slot what `free_slot` makes (down, no lease, nobody's incarnation), in place:
    /// the checker's successors keep their buffers.
    pub fn free(&mut self) {
        let Owner { alive, leases, incarnation_of } = self;
        *alive = false;
        leases.iter_mut().for_each(|lease| *lease = None);
        *incarnation_of = None;
    }
}

impl Lease {
    pub fn fresh(epoch: u8, next_offset: Offset) -> Lease {
        Lease {
            epoch,
            position: next_offset,
            checkpoint: next_offset,
            records: SortedMap::new(),
            done: SortedSet::new(),
        }
    }
}

/// Owners within a group are interchangeable, and so are the groups themselves (they start
/// alike and read the same log): sorting the owners of each group (renaming the stored owner of
/// each partition accordingly), then sorting the groups, yields one representative per
/// equivalence class. Every property quantifies over all groups and owners alike, so verdicts
/// are unchanged. Honoured by stateright's DFS and simulation only, not BFS.
impl Representative for State {
    fn representative(&self) -> Self {
        let mut state = self.clone();
        state.canonicalize();
        state
    }
}

/// The globals (every field but `groups`) in two lists: the fault counters and the witness
/// bits, which every action may change, and the shared parts (the log, the producers,
/// retention, replicas, the output partitions), which only some do
/// (`Action::may_change_shared`). Generates `counters_eq`, `shared_eq`, `copy_counters_from`
/// and `clone_shared_from`, each destructuring every field with no `..`: a new field fails to
/// compile until it is put in one of the lists.
macro_rules! split_globals {
    (counters: [$($counter:ident),* $(,)?], shared: [$($shared:ident),* $(,)?] $(,)?) => {
        impl State {
            /// Whether the fault counters and the witness bits are equal.
            pub fn counters_eq(&self, other: &State) -> bool {
                let State { groups: _, $($counter,)* $($shared: _,)* } = self;
                true $(&& *$counter == other.$counter)*
            }

            /// Whether the shared parts outside the groups are equal.
            pub fn shared_eq(&self, other: &State) -> bool {
                let State { groups: _, $($counter: _,)* $($shared,)* } = self;
                true $(&& *$shared == other.$shared)*
            }

            /// Copies the fault counters and the witness bits from `source` (the restore after
            /// an action that leaves the shared parts alone).
            pub fn copy_counters_from(&mut self, source: &State) {
                let State { groups: _, $($counter,)* $($shared: _,)* } = self;
                $(*$counter = source.$counter;)*
            }

            /// Copies the shared parts from `source`, reusing their buffers.
            fn clone_shared_from(&mut self, source: &State) {
                let State { groups: _, $($counter: _,)* $($shared,)* } = self;
                $($shared.clone_from(&source.$shared);)*
            }
        }
    };
}

// The witness bits first: of the counters they differ most often.
split_globals!(
    counters: [
        witnessed,
        crashes_used,
        rebalances_used,
        pauses_used,
        ack_losses_used,
        retentions_used,
        log_losses_used,
        leader_failures_used,
        isr_shrinks_used,
    ],
    shared: [log, sends, producer, log_start, replicas, output, reader, damaged],
);

impl State {
    /// Copies every field but the groups from `source`, reusing buffers (the checker's
    /// restore after a step that changed them).
    pub fn clone_globals_from(&mut self, source: &State) {
        self.copy_counters_from(source);
        self.clone_shared_from(source);
    }

    /// Replaces the state by its class's representative, in place and without allocating:
    /// within each group, epochs renamed densely per partition (`rename_epochs_densely`),
    /// owners sorted (with which partitions each is assigned) and renamed, paused slots renamed
    /// and sorted; then the groups sorted.
    pub fn canonicalize(&mut self) {
        self.canonicalize_changed(|_| true);
    }

    /// `canonicalize`, returning where each group came from: `origin[i]` is the position
    /// before of the group now at position `i` (the checker then knows which groups are its
    /// parent's without comparing them). Only the groups `changed` names have their epochs
    /// renamed and their owners sorted: for a successor of a canonical state, the others' are sorted already (the
    /// checker's hot path; debug builds compare it with the whole canonicalisation).
    pub fn canonicalize_changed(&mut self, changed: impl Fn(usize) -> bool) -> GroupOrder {
        // The transactional rows keep their epochs (`rename_epochs_densely`).
        let rename_epochs = self.output.is_empty();
        for (g, group) in self.groups.iter_mut().enumerate() {
            if changed(g) {
                if rename_epochs {
                    rename_epochs_densely(group);
                }
                canonicalize_owners(group);
            }
        }
        let groups = self.groups.len();
        assert!(groups <= GROUP_SLOTS_MAX, "invariant: at most {GROUP_SLOTS_MAX} groups");
        let mut origin = GroupOrder::identity();
        // A stable sort of positions, as `sort` of the groups was: the same arrangement.
        origin.0[..groups].sort_by(|&a, &b| self.groups[usize::from(a)].cmp(&self.groups[usize::from(b)]));
        permute(&mut self.groups, &origin.0[..groups]);
        origin
    }
}

/// Renames each partition's epochs in a group, the row's and every lease's (current and paused
/// slots), to 1, 2, ... in their order. Exact because outside the transactional rows an epoch
/// is only ever compared with the row's for equality (a write is stale when its lease's
/// differs) and a new one is the row's plus one, above every lease's: a lease gets its epoch
/// from the row, whose epoch only grows. So states differing only by how many takes led to
/// them are one state (fenced-3g's states fell from 2.12 M to 0.48 M). The caller
/// leaves the transactional rows alone: their output partitions keep producer epochs and
/// `txn::take_partition` orders them across takes.
fn rename_epochs_densely(group: &mut Group) {
    let Group { store, owners, paused, .. } = group;
    for (p, row) in store.partitions.iter_mut().enumerate() {
        assert!(
            row.epoch < 64,
            "invariant: an epoch fits the set below (check's bounds keep it at most 1 + crashes + rebalances + pauses)"
        );
        // The distinct epochs in use, as a bit set.
        let mut used: u64 = 1 << row.epoch;
        for slot in owners.iter().chain(paused.iter()) {
            if let Some(lease) = &slot.leases[p] {
                used |= 1 << lease.epoch.min(63);
            }
        }
        assert!(used >> row.epoch == 1, "invariant: no lease's epoch is above its row's");
        let rank = |epoch: u8| (used & ((1u64 << epoch) - 1)).count_ones() as u8 + 1;
        row.epoch = rank(row.epoch);
        for slot in owners.iter_mut().chain(paused.iter_mut()) {
            if let Some(lease) = &mut slot.leases[p] {
                lease.epoch = rank(lease.epoch);
            }
        }
    }
}

/// The owners of a group sorted by (owner, assigned partitions), a stable sort as before, so
/// that ties keep their order; the store's rows and the paused slots renamed to match.
fn canonicalize_owners(group: &mut Group) {
    let owners = group.owners.len();
    assert!(owners <= OWNER_SLOTS_MAX, "invariant: at most {OWNER_SLOTS_MAX} owners per group");
    // The sort key includes which partitions the owner is assigned (partition 0 the most
    // significant, as the vector of flags it replaces compared), so that ties are identical
    // owners and the representative is canonical.
    let partitions = group.store.partitions.len();
    let assigned = |owner: usize| {
        let rows = group.store.partitions.iter().enumerate();
        rows.filter(|(_, row)| usize::from(row.owner) == owner)
            .fold(0u32, |mask, (p, _)| mask | 1 << (partitions - 1 - p))
    };
    let mut order = [0u8; OWNER_SLOTS_MAX];
    for (slot, index) in order.iter_mut().zip(0..) {
        *slot = index;
    }
    let order = &mut order[..owners];
    order.sort_by(|&a, &b| {
        let (a, b) = (usize::from(a), usize::from(b));
        group.owners[a].cmp(&group.owners[b]).then_with(|| assigned(a).cmp(&assigned(b)))
    });
    let renamed = permute(&mut group.owners, order);
    for row in &mut group.store.partitions {
        row.owner = renamed[usize::from(row.owner)];
    }
    for to_owner in group.forming.iter_mut().flatten() {
        *to_owner = renamed[usize::from(*to_owner)];
    }
    // Paused slots run as a current owner: rename them alike, then sort them among
    // themselves (they are interchangeable with each other, never with current slots).
    for slot in &mut group.paused {
        slot.incarnation_of = slot.incarnation_of.map(|of| renamed[usize::from(of)]);
    }
    group.paused.sort();
}

/// Puts at position `i` the item that was at `order[i]`, by swaps and without allocating;
/// returns the inverse, each old position's new one.
fn permute<T>(items: &mut [T], order: &[u8]) -> [u8; PERMUTED_MAX] {
    assert!(order.len() == items.len() && order.len() <= PERMUTED_MAX, "invariant: a permutation of the items");
    let mut renamed = [0u8; PERMUTED_MAX];
    for (new_index, &old_index) in order.iter().enumerate() {
        renamed[usize::from(old_index)] = new_index as u8;
    }
    // The item at position `i` moves to `renamed[i]`.
    let mut at = renamed;
    for i in 0..order.len() {
        while usize::from(at[i]) != i {
            let j = usize::from(at[i]);
            items.swap(i, j);
            at.swap(i, j);
        }
    }
    renamed
}

/// The most items `permute` moves: owner slots or groups.
const PERMUTED_MAX: usize = if OWNER_SLOTS_MAX > GROUP_SLOTS_MAX { OWNER_SLOTS_MAX } else { GROUP_SLOTS_MAX };

/// The most groups `canonicalize` sorts (`config::GROUPS_MAX`).
const GROUP_SLOTS_MAX: usize = crate::config::GROUPS_MAX as usize;

/// Where each group of a canonicalised state came from: entry `i` is the position before of
/// the group now at `i` (the identity without symmetry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupOrder(pub [u8; GROUP_SLOTS_MAX]);

impl GroupOrder {
    pub fn identity() -> GroupOrder {
        let mut order = [0u8; GROUP_SLOTS_MAX];
        for (slot, index) in order.iter_mut().zip(0..) {
            *slot = index;
        }
        GroupOrder(order)
    }
}

/// The most owner slots of a group `canonicalize` sorts (`config::OWNERS_MAX`).
const OWNER_SLOTS_MAX: usize = crate::config::OWNERS_MAX as usize;
