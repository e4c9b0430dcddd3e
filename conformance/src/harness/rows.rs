//! The real system of each model row: `real_row`, one arm per model strategy.

use consumer::log::{Acks, WriterMode};
use consumer::strategy::{Isolation, LogCheck, OutOfRange, StartPolicy, Strategy as RealStrategy};
use model::Strategy;

/// How the harness, as the producer, retries an append whose acknowledgement was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerRetry {
    /// The retry repeats the lost send's sequence number: the log recognises it, appends nothing.
    SameSequence,
    /// The retry takes a fresh sequence number: the log appends the record again.
    NewSequence,
}

/// The replicated log of an acks row (spec.md §3.2, §10 "Replication"): two replicas, and the
/// producer's acknowledgement mode and broker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaSettings {
    pub acks: Acks,
    /// `min.insync.replicas`: the ISR size below which an `acks=all` append is refused.
    pub min_insync: u32,
    /// Whether `fail-leader` may promote an out-of-sync follower (`--unclean`).
    pub unclean: bool,
}

/// The real system's configuration for one model row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealRow {
    /// The consumer strategy every owner runs.
    pub strategy: RealStrategy,
    /// What an owner does when retention removed the next record it would fetch.
    pub on_out_of_range: OutOfRange,
    /// How the harness, as the producer, retries a send whose acknowledgement was lost.
    pub producer_retry: ProducerRetry,
    /// The epoch an owner takes when it (re)starts.
    pub start: StartPolicy,
    /// When an owner refuses a log that lost records.
    pub log_check: LogCheck,
    /// How the harness's log writer treats a lost tail: refuse appends (it knows its
    /// acknowledged end), or grow again at the new end (the trap).
    pub writer: WriterMode,
    /// The acks rows: a replicated data directory (`None`: one plain log).
    pub replication: Option<ReplicaSettings>,
    /// The harness's downstream reader of the output log (the txn rows; read committed, and
    /// unused, elsewhere).
    pub isolation: Isolation,
}

/// The real system for each model row, one arm per model strategy and no catch-all: a new
/// model strategy does not compile until it is mapped here. The crates spell the strategies
/// independently; the producer, retention and acks rows run atomic-fenced consumers and differ
/// in the producer, the out-of-range policy or the log; txn-read-uncommitted is txn-fenced
/// read by a read_uncommitted reader; the rows of external effects, sets and dedup scope
/// (spec.md §3.4) run their own consumer
/// strategies, whose external systems every harness creates (`external.db`, `index.db`).
/// (Only the producer rows lose acks by default; every other row's producer is idempotent, as
/// the model's rules say.)
pub fn real_row(strategy: Strategy) -> RealRow {
    use OutOfRange::{Earliest, EarliestSilent, Fail};
    use ProducerRetry::{NewSequence, SameSequence};
    use RealStrategy as Real;
    use Strategy as Model;
    let row = |strategy, on_out_of_range, producer_retry| RealRow {
        strategy,
        on_out_of_range,
        producer_retry,
        start: StartPolicy::ClaimEpoch,
        log_check: LogCheck::RefuseAhead,
        writer: WriterMode::Checked,
        replication: None,
        isolation: Isolation::ReadCommitted,
    };
    let fenced = row(Real::AtomicFenced, Fail, SameSequence);
    let replicated = |acks, min_insync, unclean| RealRow {
        replication: Some(ReplicaSettings { acks, min_insync, unclean }),
        ..fenced
    };
    match strategy {
        Model::CommitFirst => row(Real::CommitFirst, Fail, SameSequence),
        Model::EffectFirst => row(Real::EffectFirst, Fail, SameSequence),
        Model::PeriodicCommit => row(Real::PeriodicCommit, Fail, SameSequence),
        Model::OffsetStamp => row(Real::OffsetStamp, Fail, SameSequence),
        Model::DedupSeparate => row(Real::DedupSeparate, Fail, SameSequence),
        Model::DedupAtomic => row(Real::DedupAtomic, Fail, SameSequence),
        Model::Atomic => row(Real::Atomic, Fail, SameSequence),
        Model::AtomicFenced => fenced,
        Model::AtomicCas => row(Real::AtomicCas, Fail, SameSequence),
        Model::ParallelMax => row(Real::ParallelMax, Fail, SameSequence),
        Model::ParallelWatermark => row(Real::ParallelWatermark, Fail, SameSequence),
        Model::AtomicDlq => row(Real::AtomicDlq, Fail, SameSequence),
        Model::SkipPoison => row(Real::SkipPoison, Fail, SameSequence),
        Model::RetryForever => row(Real::RetryForever, Fail, SameSequence),
        Model::ProducerIdempotent => fenced,
        Model::ProducerNewSequence => row(Real::AtomicFenced, Fail, NewSequence),
        Model::ResetEarliest => row(Real::AtomicFenced, Earliest, SameSequence),
        Model::ResetSilent => row(Real::AtomicFenced, EarliestSilent, SameSequence),
        Model::ResetFail => fenced,
        Model::FencedStoredEpoch => RealRow { start: StartPolicy::StoredEpoch, ..fenced },
        Model::LogLossRefuse => fenced,
        Model::LogLossUnchecked => RealRow { log_check: LogCheck::Unchecked, writer: WriterMode::Unchecked, ..fenced },
        Model::LogLossRefuseAll => RealRow { log_check: LogCheck::RefuseAll, ..fenced },
        Model::AcksLeader => replicated(Acks::Leader, 1, false),
        Model::AcksAll => replicated(Acks::All, 2, false),
        Model::AcksAllMinIsr1 => replicated(Acks::All, 1, true),
        Model::AcksAllMinIsr1Clean => replicated(Acks::All, 1, false),
        Model::TxnFenced => row(Real::TxnFenced, Fail, SameSequence),
        Model::TxnUnfenced => row(Real::TxnUnfenced, Fail, SameSequence),
        Model::TxnReadUncommitted => {
            RealRow { isolation: Isolation::ReadUncommitted, ..row(Real::TxnFenced, Fail, SameSequence) }
        }
        Model::AtomicPlusEmail => row(Real::AtomicPlusEmail, Fail, SameSequence),
        Model::EmailIdempotencyKey => row(Real::EmailIdempotencyKey, Fail, SameSequence),
        Model::EmailNoKey => row(Real::EmailNoKey, Fail, SameSequence),
        Model::BlindSet => row(Real::BlindSet, Fail, SameSequence),
        Model::SetIfNewer => row(Real::SetIfNewer, Fail, SameSequence),
        Model::DedupOffsetOnly => row(Real::DedupOffsetOnly, Fail, SameSequence),
        Model::DualWrite => row(Real::DualWrite, Fail, SameSequence),
        Model::Outbox => row(Real::Outbox, Fail, SameSequence),
        Model::BrokerEffectFirst => row(Real::BrokerEffectFirst, Fail, SameSequence),
        Model::BrokerCommitFirst => row(Real::BrokerCommitFirst, Fail, SameSequence),
        // The relaxed rule is the coordinator's, which the harness is: the consumer is
        // broker-effect-first's.
        Model::BrokerRelaxed => row(Real::BrokerEffectFirst, Fail, SameSequence),
    }
}

#[cfg(test)]
mod tests {
    use super::{real_row, ProducerRetry, ReplicaSettings};
    use consumer::log::{Acks, WriterMode};
    use consumer::strategy::{Isolation, LogCheck, OutOfRange, StartPolicy};
    use model::strategy::{Replication, Rules};
    use model::Strategy;

    /// The consumer rules a row's owners follow: what a real consumer strategy must match.
    fn consumer_rules(rules: &Rules) -> impl PartialEq + std::fmt::Debug {
        (rules.sequence, rules.guard, rules.commit_fence, rules.checkpoint, rules.poison, rules.effect, rules.dedup_key)
    }

    /// Every model row's real system follows the model's own rules for that row (the crates
    /// spell them independently): the out-of-range policy, the producer's retry mode, the start
    /// policy, the log check, the replication settings and the reader's isolation; and a
    /// consumer strategy of the row's own name or, for the rows that only add a producer, a
    /// retention policy, a replicated log or a reader to one, a consumer of another row whose
    /// consumer rules are the same.
    #[test]
    fn every_model_row_runs_the_real_system_its_rules_describe() {
        use model::strategy::{OutOfRangePolicy, ProducerRetry as ModelRetry};
        for strategy in Strategy::ALL {
            let (row, rules) = (real_row(strategy), strategy.rules());
            let policy = match rules.out_of_range {
                OutOfRangePolicy::Fail => OutOfRange::Fail,
                OutOfRangePolicy::Earliest => OutOfRange::Earliest,
                OutOfRangePolicy::Silent => OutOfRange::EarliestSilent,
            };
            let retry = match rules.producer {
                ModelRetry::SameSequence => ProducerRetry::SameSequence,
                ModelRetry::NewSequence => ProducerRetry::NewSequence,
            };
            assert_eq!((row.on_out_of_range, row.producer_retry), (policy, retry), "{strategy}");
            let start = match rules.start {
                model::strategy::StartPolicy::ClaimEpoch => StartPolicy::ClaimEpoch,
                model::strategy::StartPolicy::StoredEpoch => StartPolicy::StoredEpoch,
            };
            assert_eq!(row.start, start, "{strategy}");
            let (check, writer) = match rules.log_check {
                model::strategy::LogCheck::RefuseAhead => (LogCheck::RefuseAhead, WriterMode::Checked),
                model::strategy::LogCheck::Unchecked => (LogCheck::Unchecked, WriterMode::Unchecked),
                model::strategy::LogCheck::RefuseAll => (LogCheck::RefuseAll, WriterMode::Checked),
            };
            assert_eq!((row.log_check, row.writer), (check, writer), "{strategy}");
            let replication = match rules.replication {
                Replication::Single => None,
                Replication::Replicated(replica) => Some(ReplicaSettings {
                    acks: match replica.acks {
                        model::strategy::Acks::Leader => Acks::Leader,
                        model::strategy::Acks::All => Acks::All,
                    },
                    min_insync: u32::from(replica.min_insync),
                    unclean: replica.unclean,
                }),
            };
            assert_eq!(row.replication, replication, "{strategy}");
            let isolation = match rules.isolation {
                model::strategy::Isolation::ReadCommitted => Isolation::ReadCommitted,
                model::strategy::Isolation::ReadUncommitted => Isolation::ReadUncommitted,
            };
            assert_eq!(row.isolation, isolation, "{strategy}");
            let consumer = row.strategy.name().parse::<Strategy>().expect("every consumer strategy is a model row");
            if strategy.name().parse::<consumer::strategy::Strategy>().is_ok() {
                assert_eq!(consumer, strategy, "the consumer of {strategy} is the consumer strategy of its name");
            }
            assert_eq!(
                consumer_rules(&consumer.rules()),
                consumer_rules(&rules),
                "{strategy} runs {consumer} consumers, so its consumer rules are {consumer}'s"
            );
        }
    }

    /// The consumer strategy each row runs writes what the model's row writes, spelled by the
    /// consumer's own table (`consumer::strategy::Strategy::rules`): the same sequence of durable
    /// writes (the email before or after the store's commit, with or without a key; the index
    /// written apart or through the outbox), the same guard, the same effect (an add or a
    /// set), the same check of a separate commit and the same dedup scope. Each enum is
    /// matched whole, so a new sequence, guard, effect or scope on either side does not compile
    /// until it is mapped here.
    #[test]
    fn every_row_runs_a_consumer_with_the_models_writes_effect_and_dedup_scope() {
        use consumer::strategy as real;
        use model::strategy as spec;
        for strategy in Strategy::ALL {
            let (model_rules, real_rules) = (strategy.rules(), real_row(strategy).strategy.rules());
            let sequence = match model_rules.sequence {
                spec::Sequence::CommitThenEffect => real::Sequence::CommitThenEffect,
                spec::Sequence::EffectThenCommit => real::Sequence::EffectThenCommit,
                spec::Sequence::Effect => real::Sequence::EffectOnly,
                spec::Sequence::EffectRecordCommit => real::Sequence::EffectRecordCommit,
                spec::Sequence::Stamped => real::Sequence::Stamped,
                spec::Sequence::DedupedThenCommit => real::Sequence::DedupedThenCommit,
                spec::Sequence::Atomic => real::Sequence::Atomic,
                spec::Sequence::Transactional => real::Sequence::Transactional,
                spec::Sequence::AtomicThenEmail => real::Sequence::AtomicThenEmail,
                spec::Sequence::EmailThenAtomic { key } => real::Sequence::EmailThenAtomic { key },
                spec::Sequence::AtomicThenIndex => real::Sequence::AtomicThenIndex,
                spec::Sequence::AtomicWithOutbox => real::Sequence::AtomicWithOutbox,
            };
            let guard = match model_rules.guard {
                spec::Guard::Blind => real::GuardKind::Blind,
                spec::Guard::Fenced => real::GuardKind::Fenced,
                spec::Guard::Cas => real::GuardKind::Cas,
            };
            let commit_fence = match model_rules.commit_fence {
                spec::CommitFence::Blind => real::CommitFence::Blind,
                spec::CommitFence::Generation => real::CommitFence::Fenced,
            };
            let effect = match model_rules.effect {
                spec::EffectKind::Add => real::EffectKind::Add,
                spec::EffectKind::Set => real::EffectKind::Set,
            };
            let dedup_key = match model_rules.dedup_key {
                spec::DedupKey::PartitionOffset => real::DedupKey::PartitionOffset,
                spec::DedupKey::OffsetOnly => real::DedupKey::OffsetOnly,
            };
            assert_eq!(real_rules.sequence, sequence, "{strategy}");
            assert_eq!(real_rules.guard, guard, "{strategy}");
            assert_eq!(real_rules.commit_fence, commit_fence, "{strategy}");
            assert_eq!(real_rules.effect, effect, "{strategy}");
            assert_eq!(real_rules.dedup_key, dedup_key, "{strategy}");
        }
    }
}
