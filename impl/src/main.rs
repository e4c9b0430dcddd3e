//! The `consumer` command line: init, append, append-poison, consume, status, claim, retain,
//! dead-letters, redrive, resets, repair, read-output, emails, index, relay, worker, bench,
//! load, power-cuts, and the replication steps replicate, shrink-isr, fail-leader
//! (`replicas.rs`).

#[macro_use]
mod out;

mod bench;
mod bench_log;
mod load;
mod replicas;

use anyhow::{bail, Context};
use clap::{Args, CommandFactory, Parser, Subcommand};
use consumer::crash::CrashPlan;
use consumer::external::{ExternalDir, Relay};
use consumer::log::{
    create_dir_durably, encode_delta, Acks, Log, LogError, ReplicatedLog, ReplicationError, Storage, TailRepair,
    WriterMode, REPLICAS_MAX,
};
use consumer::owner::{check_log, OnFenced, Outcome, Owner, OwnerError, Settings, FIRST_OWNER};
use consumer::store::{check_name, Journal, Location, Store, StoreError, StoreOptions, PARTITIONS_MAX};
use consumer::strategy::{printable, Isolation, LogCheck, OutOfRange, StartPolicy, Strategy};
use consumer::txn::{Caught, OutputLog, OutputReader, TxnEnd, TxnError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "consumer",
    version,
    about = "A real log consumer: a checksummed retained log and an SQLite or PostgreSQL effect/progress store.",
    after_help = "Example:\n  consumer init --dir /tmp/demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a data directory: the log's partitions and the store.
    #[command(after_help = "Example:\n  consumer init --dir /tmp/demo")]
    Init(InitArgs),
    /// Append records (durable before the command returns).
    #[command(after_help = "Example:\n  consumer append --dir /tmp/demo --delta 5")]
    Append(AppendArgs),
    /// Run one owner of a group with a strategy until it has consumed the log.
    #[command(after_help = "Example:\n  consumer consume --dir /tmp/demo --group g --strategy atomic-fenced")]
    Consume(ConsumeArgs),
    /// Print log start/end per partition and, per group, total, checkpoints, epochs, owners.
    #[command(after_help = "Example:\n  consumer status --dir /tmp/demo")]
    Status(StatusArgs),
    /// Assign a partition to an owner and bump its epoch (a rebalance).
    #[command(after_help = "Example:\n  consumer claim --dir /tmp/demo --group g --partition 0 --owner o1")]
    Claim(ClaimArgs),
    /// Advance a partition's log start (retention); records below it can no longer be read.
    #[command(after_help = "Example:\n  consumer retain --dir /tmp/demo --before 1")]
    Retain(RetainArgs),
    /// Append one poison record (its payload is not an 8-byte delta: its effect always fails).
    #[command(after_help = "Example:\n  consumer append-poison --dir /tmp/demo")]
    AppendPoison(AppendPoisonArgs),
    /// List the dead-letter table: group, partition, offset, attempts, error.
    #[command(after_help = "Example:\n  consumer dead-letters --dir /tmp/demo")]
    DeadLetters(DeadLettersArgs),
    /// Apply a dead-lettered record with an operator-corrected delta, exactly once.
    #[command(
        after_help = "Example:\n  consumer redrive --dir /tmp/demo --group h --partition 0 --offset 1 --delta 5"
    )]
    Redrive(RedriveArgs),
    /// List the recorded resets past retained records: group, partition, from, to.
    #[command(after_help = "Example:\n  consumer resets --dir /tmp/demo")]
    Resets(ResetsArgs),
    /// Make a log that lost acknowledged records consistent again, saying what is lost, and
    /// move every group past its end back to it (recorded in the resets).
    #[command(after_help = "Example:\n  consumer repair --dir /tmp/demo")]
    Repair(RepairArgs),
    /// Read an output partition of the transactional strategies as a downstream reader does:
    /// every record it delivers (input offset and delta), and where it stops (the LSO).
    #[command(after_help = "Example:\n  consumer read-output --dir /tmp/demo --partition 0")]
    ReadOutput(ReadOutputArgs),
    /// List the requests the stand-in email provider (`external.db`) received, in order: the
    /// record, the idempotency key, delivered or dropped as a repeat of its key.
    #[command(after_help = "Example:\n  consumer emails --dir /tmp/demo")]
    Emails(EmailsArgs),
    /// List the facts of the index (`index.db`), the dual-write rows' second store, beside the
    /// store's own facts and outbox.
    #[command(after_help = "Example:\n  consumer index --dir /tmp/demo")]
    Index(IndexArgs),
    /// The outbox's relay: copy a group's first outbox row to the index (idempotently), then
    /// delete it; until the outbox is empty, one row (--once), or for ever (--follow).
    #[command(after_help = "Example:\n  consumer relay --dir /tmp/demo")]
    Relay(RelayArgs),
    /// Serve one owner over stdin/stdout, one step per command (see `consumer::worker`).
    #[command(after_help = "Example:\n  consumer worker --dir /tmp/demo --group g --strategy atomic-fenced")]
    Worker(WorkerArgs),
    /// Serve the open owner protocol (PROTOCOL.md) on stdin/stdout: newline-delimited JSON,
    /// one owner or the store per process, for `conformance replay --worker`.
    #[command(after_help = "Example:\n  consumer serve < requests.ndjson")]
    Serve,
    /// Measure consumed records per second per strategy, batch and journal mode.
    #[command(after_help = "Example:\n  consumer bench --strategy atomic-fenced --journal wal --repeat 1")]
    Bench(bench::BenchArgs),
    /// A bounded load test: owner processes under rebalances and SIGKILLs; checks exact sums.
    #[command(after_help = "Example:\n  consumer load --dir /tmp/load --strategy atomic-fenced --records 1000")]
    Load(load::LoadArgs),
    /// Power cuts on a simulated disk at every crash point of every strategy; checks that no
    /// acknowledged record is lost and that everything reopens, restarts and finishes.
    #[command(after_help = "Example:\n  consumer power-cuts --seed 1 --runs 1 --strategy atomic-fenced")]
    PowerCuts(PowerCutsArgs),
    /// A follower fetch on a replicated log: copy the leader's next batch(es) to the follower,
    /// durably; the high watermark follows; a caught-up follower rejoins the ISR.
    #[command(after_help = "Example:\n  consumer replicate --dir /tmp/lab")]
    Replicate(replicas::ReplicateArgs),
    /// The lagging follower of a replicated partition leaves the ISR.
    #[command(after_help = "Example:\n  consumer shrink-isr --dir /tmp/lab --partition 0")]
    ShrinkIsr(replicas::ShrinkIsrArgs),
    /// The leader of a replicated partition fails: a clean election promotes an in-sync
    /// follower truncated to the high watermark; else `--unclean` promotes the out-of-sync one,
    /// or the partition has no leader.
    #[command(after_help = "Example:\n  consumer fail-leader --dir /tmp/lab --partition 0")]
    FailLeader(replicas::FailLeaderArgs),
    /// Print the shell completion script of `consumer` (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  consumer completions bash > ~/.local/share/bash-completion/completions/consumer"
    )]
    Completions(clidocs::CompletionsArgs),
    /// Write the man pages of `consumer` and of each of its commands into a directory.
    #[command(after_help = "Example:\n  consumer man ~/.local/share/man/man1")]
    Man(clidocs::ManArgs),
}

#[derive(Args, Clone)]
struct DirArgs {
    /// The data directory (holds `log/` and `store.db`): not an existing file, nor `/` or a
    /// system directory (`/proc`, `/sys`, `/dev` but `/dev/shm`, and what is under them).
    #[arg(long, default_value = "onceproof-data", value_parser = DataDir)]
    dir: PathBuf,
    /// Seconds a write waits for another process's transaction, or for the log's writer lock,
    /// before failing (0 <= SECONDS <= 3600; PostgreSQL: see spec.md §10).
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true, value_parser = parse_busy_timeout,
          default_value_t = StoreOptions::default().busy_timeout.as_secs_f64())]
    busy_timeout: f64,
    /// The store: a PostgreSQL URL (postgres://...) or an SQLite file; default `store.db` in
    /// --dir. The log lives in --dir/log either way.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
}

impl DirArgs {
    fn location(&self) -> Location {
        match &self.store {
            Some(text) => Location::parse(text),
            None => Location::Sqlite(self.dir.join("store.db")),
        }
    }

    fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    fn options(&self, journal: Journal) -> anyhow::Result<StoreOptions> {
        // `parse_busy_timeout` let only such values through, and `from_secs_f64` panics on others.
        assert!((0.0..=BUSY_TIMEOUT_SECONDS_MAX).contains(&self.busy_timeout), "--busy-timeout was range-checked");
        let busy_timeout = Duration::from_secs_f64(self.busy_timeout);
        Ok(StoreOptions { journal, busy_timeout, ..StoreOptions::default() })
    }

    fn open_store(&self) -> anyhow::Result<Store> {
        Ok(Store::open_at(&self.location(), self.options(Journal::Delete)?)?)
    }

    /// A reader of the store's log: another log, a missing file or another partition count is
    /// refused (exit 4).
    fn open_log_reader(&self, store: &Store) -> anyhow::Result<Log> {
        Ok(Log::open_reader(&self.log_dir(), store.log_identity())?)
    }

    /// The store's log as its writer, reporting every unacknowledged tail it cut. Another
    /// writer's lock is waited for up to --busy-timeout, as the store's lock is.
    fn open_log_writer(&self, store: &Store) -> anyhow::Result<Log> {
        let wait = self.options(Journal::Delete)?.busy_timeout;
        let (log, repairs) = match Log::open_writer_within(&self.log_dir(), store.log_identity(), wait) {
            Ok(opened) => opened,
            Err(locked @ LogError::Locked { .. }) => bail!("{locked} (waited {:.1} s)", wait.as_secs_f64()),
            Err(error) => return Err(error.into()),
        };
        report_repairs(&repairs)?;
        Ok(log)
    }
}

#[derive(Args)]
struct InitArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Partitions of the log (1..=64).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = count_in::<u32>(1, u64::from(PARTITIONS_MAX)))]
    partitions: u32,
    /// SQLite journal mode, kept for the store's lifetime: delete or wal.
    #[arg(long, default_value = "delete")]
    journal: Journal,
    /// Replicas of every partition: 1, the plain log; 2, a leader and a follower, each a
    /// complete log (`log/replica-0`, `log/replica-1`), broker 0 leading at first.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = count_in::<u32>(1, u64::from(REPLICAS_MAX)))]
    replicas: u32,
}

#[derive(Args)]
struct AppendArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The partition (0 up to the log's partitions - 1).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    partition: u32,
    /// The value each record adds to a group's total.
    #[arg(long, allow_hyphen_values = true)]
    delta: i64,
    /// How many records to append (1..=1000000; one batch, built in memory, one fsync for all).
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = count_in::<u64>(1, APPEND_COUNT_MAX))]
    count: u64,
    /// Append idempotently as this producer (at least 1); needs --producer-epoch and --sequence.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u64>(1, u64::MAX))]
    producer_id: Option<u64>,
    /// The producer's epoch: a higher one fences the producer's older instances.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    producer_epoch: Option<u32>,
    /// The batch's base sequence (the first record's); a retry repeats it.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    sequence: Option<u32>,
    /// Test only: crash (exit 9) after the durable append, before the acknowledgement.
    #[arg(long, hide = true)]
    crash_after_append: bool,
    /// A replicated log's acknowledgement: 1 (the leader's durable append) or all (the high
    /// watermark covers the batch, the ISR has --min-insync-replicas members; waits up to
    /// --busy-timeout).
    #[arg(long, default_value_t = Acks::default(), value_name = "1|all")]
    acks: Acks,
    /// With --acks all: the fewest in-sync replicas an append is accepted and acknowledged with.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    min_insync_replicas: u32,
}

#[derive(Args, Clone)]
struct OwnerArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The consumer group (a name: 1 to 64 bytes, no control character or white space).
    #[arg(long, value_parser = parse_name)]
    group: String,
    /// The owner's name; `o0` owns every partition of a new group at epoch 1.
    #[arg(long, default_value = FIRST_OWNER, value_parser = parse_name)]
    owner: String,
    /// The consumer strategy (spec.md §5).
    #[arg(long)]
    strategy: Strategy,
    /// Checkpoint interval of periodic-commit and offset-stamp, in records (1..=1000000).
    #[arg(long, allow_hyphen_values = true, default_value_t = Settings::COMMIT_EVERY_DEFAULT, value_parser = count_in::<u64>(1, COMMIT_EVERY_MAX))]
    commit_every: u64,
    /// Records one owner may hold at once (parallel strategies; 1..=10000).
    #[arg(long, allow_hyphen_values = true, default_value_t = Settings::INFLIGHT_DEFAULT, value_parser = count_in::<usize>(1, INFLIGHT_MAX))]
    inflight: usize,
    /// Records fetched and written together by the serial strategies (1..=10000).
    #[arg(long, allow_hyphen_values = true, default_value_t = Settings::BATCH_DEFAULT, value_parser = count_in::<usize>(1, BATCH_MAX))]
    batch: usize,
    /// Failed attempts after which atomic-dlq dead-letters a poison record (1..=1000000).
    #[arg(long, allow_hyphen_values = true, default_value_t = Settings::MAX_ATTEMPTS_DEFAULT, value_parser = count_in::<u64>(1, MAX_ATTEMPTS_MAX))]
    max_attempts: u64,
    /// When retention removed the next record: fail (stop with an error, skip nothing) or
    /// earliest (skip to the log start, recording the reset).
    #[arg(long, default_value_t = OutOfRange::default(), value_name = "fail|earliest")]
    on_out_of_range: OutOfRange,
    /// Crash points, STEP:WHEN[@OFFSET] (e.g. apply-effect:after@49); the process exits with 9.
    #[arg(long = "crash-at")]
    crash_at: Vec<consumer::crash::CrashPoint>,
    /// Test only: run a deliberately broken variant (no-fence:WRITE for one kind of fenced
    /// write, no-cas, no-email-key; `owner::Mutation`).
    #[arg(long, hide = true)]
    mutation: Option<consumer::owner::Mutation>,
    /// Test only: the epoch a started owner takes its partitions at: claim (a new one, the
    /// default) or stored (the trap: an earlier incarnation still running is never fenced).
    #[arg(long, hide = true, default_value_t = StartPolicy::default(), value_name = "claim|stored")]
    start_epoch: StartPolicy,
    /// Test only: what to do when the log lost records the group consumed (refuse-ahead, the
    /// default; the traps unchecked and refuse-all).
    #[arg(long, hide = true, default_value_t = LogCheck::default())]
    log_check: LogCheck,
}

impl OwnerArgs {
    fn start(&self) -> anyhow::Result<Owner> {
        let (store, log) = self.open()?;
        self.start_with(store, log)
    }

    /// The store and its log, opened (another log or a missing file is refused).
    fn open(&self) -> anyhow::Result<(Store, Log)> {
        let store = self.dir.open_store()?;
        let log = self.dir.open_log_reader(&store)?;
        Ok((store, log))
    }

    fn start_with(&self, store: Store, log: Log) -> anyhow::Result<Owner> {
        let settings = Settings {
            strategy: self.strategy,
            commit_every: self.commit_every,
            inflight: self.inflight,
            batch: self.batch,
            max_attempts: self.max_attempts,
            on_out_of_range: self.on_out_of_range,
            start: self.start_epoch,
            log_check: self.log_check,
            mutation: self.mutation,
        };
        Ok(Owner::start(store, log, &self.group, &self.owner, settings, CrashPlan::new(self.crash_at.clone()))?)
    }
}

#[derive(Args)]
struct ConsumeArgs {
    #[command(flatten)]
    owner: OwnerArgs,
    /// Stay a member of the group: take partitions the coordinator assigns (after rebalances
    /// too) and stop only when the whole group is committed to the log end.
    #[arg(long)]
    follow: bool,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ClaimArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The consumer group.
    #[arg(long, value_parser = parse_name)]
    group: String,
    /// The partition (0 up to the log's partitions - 1).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    partition: u32,
    /// The owner's name (`o0`, `o1`, ...).
    #[arg(long, value_parser = parse_name)]
    owner: String,
}

#[derive(Args)]
struct RetainArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The partition (0 up to the log's partitions - 1).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    partition: u32,
    /// The new log start: offsets below it are no longer readable.
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u64>(0, u64::MAX))]
    before: u64,
}

#[derive(Args)]
struct AppendPoisonArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The partition (0 up to the log's partitions - 1).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    partition: u32,
}

#[derive(Args)]
struct DeadLettersArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Only this group's dead letters.
    #[arg(long, value_parser = parse_name)]
    group: Option<String>,
    /// Print one JSON document: `{"tool": ..., "dead_letters": [...]}`.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RedriveArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The consumer group.
    #[arg(long, value_parser = parse_name)]
    group: String,
    /// The partition (0 up to the log's partitions - 1).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    partition: u32,
    /// The dead-lettered record's offset (a store keeps offsets as signed 64-bit integers).
    #[arg(long, allow_hyphen_values = true, value_parser = count_in::<u64>(0, i64::MAX as u64))]
    offset: u64,
    /// The operator-corrected value the record adds to the group's total.
    #[arg(long, allow_hyphen_values = true)]
    delta: i64,
}

#[derive(Args)]
struct ResetsArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Only this group's resets.
    #[arg(long, value_parser = parse_name)]
    group: Option<String>,
    /// Print one JSON document: `{"tool": ..., "resets": [...]}`.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RepairArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Record a damaged batch that has intact records after it as a gap (its offsets given up,
    /// a row in every group's resets) and keep the records after it; without it such a log
    /// is refused, since nothing intact is deleted unasked.
    #[arg(long, conflicts_with = "upgrade")]
    gap: bool,
    /// Convert a log of format version 2 (the log, its replicas, the output log) to version 3,
    /// crash-safely, or finish such a conversion a crash interrupted; nothing else is repaired.
    #[arg(long)]
    upgrade: bool,
}

#[derive(Args)]
struct PowerCutsArgs {
    /// The seed every run's seed is mixed from: the same seed, the same runs and table.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1, value_parser = count_in::<u64>(0, u64::MAX))]
    seed: u64,
    /// Runs per crash point, each with its own seed (1..=1000).
    #[arg(long, allow_hyphen_values = true, default_value_t = 3, value_parser = count_in::<u64>(1, consumer::power::RUNS_MAX))]
    runs: u64,
    /// A strategy to run; repeat the flag for several. Default: every strategy.
    #[arg(long = "strategy")]
    strategies: Vec<Strategy>,
    /// Where the runs' SQLite stores are made (and removed). Default: /dev/shm when it exists
    /// (the store's fsyncs cost nothing there, and its durability is not what the runs
    /// test), else the system's temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Args)]
struct ReadOutputArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The partition (0 up to the log's partitions - 1).
    #[arg(long, allow_hyphen_values = true, default_value_t = 0, value_parser = count_in::<u32>(0, u64::from(u32::MAX)))]
    partition: u32,
    /// read-committed (up to the last stable offset, aborted records skipped) or
    /// read-uncommitted (every data record).
    #[arg(long, default_value_t = Isolation::default(), value_name = "read-committed|read-uncommitted")]
    isolation: Isolation,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct EmailsArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Only the emails of this group's records.
    #[arg(long, value_parser = parse_name)]
    group: Option<String>,
    /// Print one JSON document (`emails`: the requests in order).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct IndexArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Only this group's facts.
    #[arg(long, value_parser = parse_name)]
    group: Option<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RelayArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// Only this group's outbox (default: every group's, in order).
    #[arg(long, value_parser = parse_name)]
    group: Option<String>,
    /// One relay step per group: its first outbox row.
    #[arg(long, conflicts_with = "follow")]
    once: bool,
    /// Keep relaying as owners add outbox rows, until the process is killed.
    #[arg(long)]
    follow: bool,
    /// Test only: crash (exit 9) after the first row's copy to the index, before its delete.
    #[arg(long, hide = true)]
    crash_after_copy: bool,
}

#[derive(Args)]
struct WorkerArgs {
    #[command(flatten)]
    owner: OwnerArgs,
}

/// The tool and its version, as JSON output and reports name them (`onceproof-consumer 0.1.0`).
pub(crate) const TOOL: &str = concat!("onceproof-consumer ", env!("CARGO_PKG_VERSION"));

/// The payload `append-poison` writes: not an 8-byte delta, so its effect always fails.
const POISON_PAYLOAD: &[u8] = b"poison";

/// Exit status of `consume` when a fenced write told the owner it is a zombie: a refusal to
/// protect data (spec.md §10).
const FENCED_EXIT_CODE: u8 = 4;
/// Exit status of a refusal to protect data: the log lost acknowledged records (or a file, or
/// is another log), or the store is ahead of it.
const REFUSED_EXIT_CODE: u8 = 4;
/// Exit status of every other failure: bad input, one line.
const FAILED_EXIT_CODE: u8 = 2;
/// Exit status of `power-cuts` when a run broke a guarantee.
const VIOLATION_EXIT_CODE: u8 = 1;
// Exit status 5, the output could not be written, is `out::OUTPUT_EXIT_CODE`.

/// The longest `--busy-timeout`: an hour. (`Duration::from_secs_f64` panics on what does not
/// fit, and no command should wait longer for a lock.)
const BUSY_TIMEOUT_SECONDS_MAX: f64 = 3600.0;
/// The most records one `append` writes: its batch is built in memory (payloads and frames,
/// about 100 bytes a record) and is one frame batch, so `--count` cannot ask for gigabytes.
const APPEND_COUNT_MAX: u64 = 1_000_000;
/// The most records of one batch (`--batch`) and in flight (`--inflight`): each is held in
/// memory and written in one transaction.
pub(crate) const BATCH_MAX: u64 = 10_000;
const INFLIGHT_MAX: u64 = 10_000;
const COMMIT_EVERY_MAX: u64 = 1_000_000;
const MAX_ATTEMPTS_MAX: u64 = 1_000_000;

/// A clap value parser for a count in `low..=high`; clap's error names the flag and the range.
/// The flag takes hyphen values (`allow_hyphen_values`), so that a negative number reaches this
/// parser and gets one line naming the flag, not clap's "unexpected argument".
pub(crate) fn count_in<T>(low: u64, high: u64) -> NonNegative<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString,
{
    NonNegative(clap::builder::RangedU64ValueParser::new().range(low..=high))
}

/// `count_in`'s parser: a negative integer is "--FLAG must be a non-negative integer, got -1";
/// everything else is the range parser's.
#[derive(Clone)]
pub(crate) struct NonNegative<T>(clap::builder::RangedU64ValueParser<T>)
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString;

impl<T> clap::builder::TypedValueParser for NonNegative<T>
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
    <T as TryFrom<u64>>::Error: Send + Sync + 'static + std::error::Error + ToString,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let text = value.to_str().unwrap_or_default();
        let negative = text
            .strip_prefix('-')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
        if negative {
            let flag =
                arg.and_then(clap::Arg::get_long).map_or_else(|| "the value".to_string(), |long| format!("--{long}"));
            let message = format!("{flag} must be a non-negative integer, got {text}\n");
            return Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, message));
        }
        self.0.parse_ref(cmd, arg, value)
    }
}

/// `--dir`'s parser: a path that exists but is not a directory is "--dir F is not a directory",
/// and `/` or a system directory is refused for every subcommand (`init` would write its log and
/// store there, the others would only say it is not initialised), one line each.
#[derive(Clone)]
struct DataDir;

impl clap::builder::TypedValueParser for DataDir {
    type Value = PathBuf;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<PathBuf, clap::Error> {
        let path = PathBuf::from(value);
        let refuse = |message: String| Err(clap::Error::raw(clap::error::ErrorKind::ValueValidation, message + "\n"));
        let shown = printable(&path.display().to_string());
        if path.exists() && !path.is_dir() {
            return refuse(format!("--dir {shown} is not a directory"));
        }
        match system_dir(&path) {
            Some("/") => refuse(format!("--dir {shown} is the root directory, not a data directory")),
            Some(root) => refuse(format!("--dir {shown} is under {root}, a system directory, not a data directory")),
            None => Ok(path),
        }
    }
}

/// The system directories no data directory may be or be under: `/` itself, and `/proc`, `/sys`
/// and `/dev` with everything under them but `/dev/shm` (a tmpfs for files, where tests and
/// `power-cuts` make their directories). The path is resolved (symbolic links, `..`) as far as
/// it exists, and made absolute from the current directory.
fn system_dir(path: &std::path::Path) -> Option<&'static str> {
    let absolute = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    // The longest existing ancestor, resolved, and the rest appended as it is.
    let mut resolved = PathBuf::new();
    let mut rest = Vec::new();
    let mut cursor = absolute.as_path();
    loop {
        if let Ok(real) = cursor.canonicalize() {
            resolved = real;
            break;
        }
        match (cursor.file_name(), cursor.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                cursor = parent;
            }
            _ => break,
        }
    }
    let mut full = resolved;
    for name in rest.iter().rev() {
        match name.to_str() {
            Some("..") => {
                full.pop();
            }
            Some(".") => {}
            _ => full.push(name),
        }
    }
    let full = if full.as_os_str().is_empty() { absolute } else { full };
    if full == std::path::Path::new("/") {
        return Some("/");
    }
    if full.starts_with("/dev/shm") {
        return None;
    }
    ["/proc", "/sys", "/dev"].into_iter().find(|root| full.starts_with(root))
}

/// `--busy-timeout`: a finite number of seconds in `0 <= SECONDS <= BUSY_TIMEOUT_SECONDS_MAX`.
fn parse_busy_timeout(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.parse().map_err(|_| format!("'{}' is not a number of seconds", printable(text)))?;
    // NaN fails both comparisons, and so does infinity the second.
    if !(0.0..=BUSY_TIMEOUT_SECONDS_MAX).contains(&seconds) {
        return Err(format!("{text} is out of range: accepted values are 0 <= SECONDS <= {BUSY_TIMEOUT_SECONDS_MAX}"));
    }
    Ok(seconds)
}

/// A group or owner name (`consumer::store::check_name`).
fn parse_name(text: &str) -> Result<String, String> {
    check_name(text).map(|()| text.to_string())
}

/// Parses the command line; a usage error is one line on stderr and exit 2 (help and version
/// print as usual).
fn parse_cli() -> Cli {
    Cli::try_parse().unwrap_or_else(|error| {
        if !error.use_stderr() {
            error.exit();
        }
        let _ = errln!("{}", one_line(&printable_input(&error)));
        std::process::exit(2)
    })
}

/// Clap's message with the value or argument it quotes shown with its control characters
/// escaped: a newline in a group name would otherwise split the one line.
fn printable_input(error: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let mut text = error.to_string();
    for kind in [ContextKind::InvalidValue, ContextKind::InvalidArg] {
        if let Some(ContextValue::String(input)) = error.get(kind) {
            if input.chars().any(char::is_control) {
                text = text.replace(input.as_str(), &printable(input));
            }
        }
    }
    text
}

/// A clap error as one line. Clap's message is its first line, except when that line ends
/// with a colon: then what it introduces (the missing arguments, one per indented line)
/// follows, and is joined onto it. The usage and the hint after the blank line are dropped.
/// (The model's and the conformance binary's `parse_cli` have the same function.)
fn one_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("error: invalid arguments").trim_end();
    if !first.ends_with(':') {
        return first.to_string();
    }
    let listed: Vec<&str> = lines.map(str::trim).take_while(|line| !line.is_empty()).collect();
    format!("{first} {}", listed.join(", "))
}

fn main() -> ExitCode {
    let result = match parse_cli().command {
        Command::Init(args) => init(args),
        Command::Append(args) => append(args),
        Command::Consume(args) => consume(args),
        Command::Status(args) => status(args),
        Command::Claim(args) => claim(args),
        Command::Retain(args) => retain(args),
        Command::AppendPoison(args) => append_poison(args),
        Command::DeadLetters(args) => dead_letters(args),
        Command::Redrive(args) => redrive(args),
        Command::Resets(args) => resets(args),
        Command::Repair(args) => repair(args),
        Command::ReadOutput(args) => read_output(args),
        Command::Emails(args) => emails(args),
        Command::Index(args) => index(args),
        Command::Relay(args) => relay(args),
        Command::Worker(args) => worker(args),
        Command::Serve => serve(),
        Command::Bench(args) => bench::run(args),
        Command::Load(args) => load::run(args),
        Command::PowerCuts(args) => power_cuts(args),
        Command::Replicate(args) => replicas::replicate(args),
        Command::ShrinkIsr(args) => replicas::shrink_isr(args),
        Command::FailLeader(args) => replicas::fail_leader(args),
        Command::Completions(args) => run_completions(args),
        Command::Man(args) => run_man(args),
    };
    // Whatever is still buffered is written before the exit status is chosen.
    match result.and_then(|code| Ok(out::flush().map(|()| code)?)) {
        Ok(code) => code,
        Err(error) => match out::find(&error) {
            Some(output) => ExitCode::from(out::report(output)),
            None => {
                let _ = errln!("error: {}", causes_on_one_line(&error));
                ExitCode::from(exit_code(&error))
            }
        },
    }
}

/// The error and its causes on one line, joined by ": " as anyhow's `{:#}` joins them, minus
/// every cause whose text the line already holds: the library's errors include their cause's
/// message and also return it from `source()` (so that `exit_code` finds a refusal anywhere in
/// the chain), which `{:#}` would print twice.
fn causes_on_one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// 4 for a refusal to protect data (wherever in the chain of causes), else 2.
fn exit_code(error: &anyhow::Error) -> u8 {
    let refusal = error.chain().any(|cause| {
        cause.downcast_ref::<LogError>().is_some_and(LogError::is_refusal)
            || cause.downcast_ref::<OwnerError>().is_some_and(OwnerError::is_refusal)
            || cause.downcast_ref::<ReplicationError>().is_some_and(ReplicationError::is_refusal)
            || cause.downcast_ref::<TxnError>().is_some_and(TxnError::is_refusal)
            || cause.downcast_ref::<StoreError>().is_some_and(StoreError::is_refusal)
    });
    if refusal {
        REFUSED_EXIT_CODE
    } else {
        FAILED_EXIT_CODE
    }
}

/// `consumer completions SHELL`: the script on stdout; `consumer man DIR`: a page per command.
fn run_completions(args: clidocs::CompletionsArgs) -> anyhow::Result<ExitCode> {
    let script = clidocs::completions(Cli::command(), "consumer", args.shell);
    out!("{script}")?;
    Ok(ExitCode::SUCCESS)
}

fn run_man(args: clidocs::ManArgs) -> anyhow::Result<ExitCode> {
    outln!("{}", clidocs::man(Cli::command(), &args.dir)?)?;
    Ok(ExitCode::SUCCESS)
}

fn init(args: InitArgs) -> anyhow::Result<ExitCode> {
    let options = args.dir.options(args.journal)?;
    let (log_dir, location) = (args.dir.log_dir(), args.dir.location());
    create_dir_durably(&args.dir.dir)?;
    // One `init` of a data directory at a time: a second one waits, then finds the first one's
    // store and is refused in one line, instead of racing it file by file.
    let _lock = lock_data_dir(&args.dir.dir, options.busy_timeout)?;
    // Read-only first: a log of another partition or replica count (a refusal naming both
    // counts), or a store there already, is refused before anything is created.
    let identity = Log::identity_for_init(&log_dir, args.partitions)?;
    ReplicatedLog::check_init(&log_dir, args.replicas)?;
    Store::check_absent(&location, options)?;
    // The logs first, the store last, in one transaction: a kill before its COMMIT leaves no
    // store (`status`: not initialised) and logs that the next `init` keeps (their identity
    // file is written last) or makes again, so rerunning `init` finishes the directory.
    if args.replicas == 1 {
        Log::create(&log_dir, identity)?;
    } else {
        ReplicatedLog::create(&log_dir, identity, args.replicas)?;
    }
    // The transactional strategies' output log, beside the input log (spec.md §10).
    OutputLog::at(&Storage::Real, &log_dir, identity).create()?;
    // The email provider and the index of spec.md §3.4's rows.
    ExternalDir::new(&args.dir.dir).create()?;
    Store::create_at(&location, identity, options)?;
    // The store file's entry in the data directory (SQLite syncs the file, not its directory).
    std::fs::File::open(&args.dir.dir)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("cannot sync {}", args.dir.dir.display()))?;
    outln!(
        "initialised {} with {} partition(s), {} replica(s), journal {:?}",
        args.dir.dir.display(),
        args.partitions,
        args.replicas,
        args.journal
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Locks the data directory itself (`flock` on the directory: no lock file to leave behind),
/// waiting up to `wait` for another holder; the lock ends with the returned handle, or with
/// the process, however it ends.
fn lock_data_dir(dir: &std::path::Path, wait: Duration) -> anyhow::Result<std::fs::File> {
    let handle = std::fs::File::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
    let started = std::time::Instant::now();
    loop {
        match handle.try_lock() {
            Ok(()) => return Ok(handle),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                bail!("another `consumer init` of {} still runs (waited {:.1} s)", dir.display(), wait.as_secs_f64())
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(error).with_context(|| format!("cannot lock {}", dir.display()))
            }
        }
    }
}

fn report_repairs(repairs: &[TailRepair]) -> Result<(), crate::out::OutputError> {
    for repair in repairs {
        if !repair.adopted.is_empty() {
            errln!(
                "repaired: {} held whole batches past its acknowledged end (offsets {}..{}: an append whose \
                 acknowledgement a crash or a damaged acknowledgement slot lost): kept and acknowledged",
                repair.path.display(),
                repair.adopted.start,
                repair.adopted.end
            )?;
        }
        if repair.dropped_bytes > 0 {
            errln!(
                "repaired: {} had an unacknowledged tail (an append a crash interrupted); kept {} record(s), \
                 dropped {} byte(s)",
                repair.path.display(),
                repair.kept_records,
                repair.dropped_bytes
            )?;
        }
    }
    Ok(())
}

fn append(args: AppendArgs) -> anyhow::Result<ExitCode> {
    // `count_in` bounds it; a frame's batch length is a u32.
    assert!((1..=APPEND_COUNT_MAX).contains(&args.count) && u32::try_from(args.count).is_ok(), "--count is bounded");
    let producer = match (args.producer_id, args.producer_epoch, args.sequence) {
        (Some(id), Some(epoch), Some(sequence)) => Some((consumer::log::Producer { id, epoch }, sequence)),
        (None, None, None) => None,
        (id, epoch, sequence) => {
            let given = [
                ("--producer-id", id.is_some()),
                ("--producer-epoch", epoch.is_some()),
                ("--sequence", sequence.is_some()),
            ];
            let missing: Vec<&str> = given.iter().filter(|(_, given)| !given).map(|(name, _)| *name).collect();
            bail!(
                "--producer-id, --producer-epoch and --sequence go together: give all three or none (missing {})",
                missing.join(", ")
            );
        }
    };
    let store = args.dir.open_store()?;
    let payloads = vec![encode_delta(args.delta); args.count as usize];
    match ReplicatedLog::open(&args.dir.log_dir(), store.log_identity())? {
        Some(log) => {
            let request = replicas::AppendRequest {
                partition: args.partition,
                payloads: &payloads,
                producer,
                acks: args.acks,
                min_insync: args.min_insync_replicas,
                timeout: args.dir.options(Journal::Delete)?.busy_timeout,
                crash_after_append: args.crash_after_append,
            };
            return replicas::append(&log, request);
        }
        None if args.acks == Acks::All => {
            return Err(ReplicationError::NotReplicated { path: args.dir.log_dir() }.into())
        }
        None => {}
    }
    let mut log = args.dir.open_log_writer(&store)?;
    let appended = match producer {
        Some((producer, sequence)) => log.append_idempotent(args.partition, producer, sequence, &payloads)?,
        None => consumer::log::Appended { offsets: log.append_batch(args.partition, &payloads)?, duplicate: false },
    };
    if args.crash_after_append {
        // The lost acknowledgement: the append is durable, but its caller never hears of it.
        consumer::crash::crash_now();
    }
    let offsets = appended.offsets;
    if appended.duplicate {
        outln!("duplicate of offsets {}..{} (already durable; nothing appended)", offsets.start, offsets.end)?;
    } else {
        outln!("appended offsets {}..{} to partition {} (durable)", offsets.start, offsets.end, args.partition)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn consume(args: ConsumeArgs) -> anyhow::Result<ExitCode> {
    let (store, mut log) = args.owner.open()?;
    // Before the owner starts and anything is written: a group ahead of its log is refused
    // (exit 4).
    let damaged = check_log(&store, &mut log, &args.owner.group, args.owner.log_check)?;
    let gaps: Vec<(u32, std::ops::Range<u64>)> = (0..log.partitions())
        .map(|partition| Ok(log.view(partition)?.gaps.into_iter().map(move |gap| (partition, gap))))
        .collect::<Result<Vec<_>, LogError>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut owner = args.owner.start_with(store, log)?;
    if args.follow {
        let steps = owner.run_following(std::time::Duration::from_millis(5))?;
        let group = &args.owner.group;
        outln!("{steps} steps; group {group} total {}", owner.store().total(group)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if owner.leases().is_empty() {
        outln!("{} owns no partition of group {}; nothing to do", args.owner.owner, args.owner.group)?;
        return Ok(ExitCode::SUCCESS);
    }
    // A fenced owner stops at once: another owner, or a newer incarnation of this one, holds
    // the partition, and nothing more of this one's may land.
    let steps = owner.run_to_end(OnFenced::Stop)?;
    let fenced = steps
        .iter()
        .find_map(|(step, outcome)| outcome.fenced().map(|(held, current)| (step.partition, held, current)));
    let group = &args.owner.group;
    let total = owner.store().total(group)?;
    // The set rows' effect is the value, not the total (spec.md §3.4).
    let value = owner.store().value(group)?.map_or_else(String::new, |value| format!(", value {value}"));
    outln!("{} steps; group {group} total {total}{value}", steps.len())?;
    print_takes(&owner)?;
    for (step, outcome) in &steps {
        if let Outcome::DeadLettered { attempts } = outcome {
            outln!(
                "dead-lettered: partition {} offset {} after {attempts} failed attempt(s)",
                step.partition,
                step.offset
            )?;
        }
        if let Outcome::Reset { from, to } = outcome {
            if gaps.iter().any(|(partition, gap)| *partition == step.partition && gap.end == *to) {
                outln!(
                    "skipped: partition {} offsets {from}..{to}, a gap `consumer repair --gap` recorded (damaged \
                     records given up; the skip is in the group's resets)",
                    step.partition
                )?;
            } else {
                outln!(
                    "reset: partition {} from offset {from} to the log start {to} \
                     (retention removed the records in between)",
                    step.partition
                )?;
            }
        }
    }
    // The trap (`--log-check unchecked`) reads what it finds and says nothing, as its row does.
    if args.owner.log_check != LogCheck::Unchecked {
        if let Some(refusal) = stopped_at_damage(owner.store(), group, &damaged)? {
            errln!("refused: {refusal}")?;
            return Ok(ExitCode::from(REFUSED_EXIT_CODE));
        }
    }
    if let Some((partition, held, current)) = fenced {
        let error = StoreError::Fenced { group: group.clone(), partition, held, current };
        errln!("{error} (another owner, or a newer incarnation of this one, took it)")?;
        return Ok(ExitCode::from(FENCED_EXIT_CODE));
    }
    Ok(ExitCode::SUCCESS)
}

/// Why `consume` stopped short of the log's end, if it did: the group's next offset reached a
/// damaged partition's damage (exit 4, naming partition, offsets and the damage, and how many
/// intact records lie past it).
fn stopped_at_damage(
    store: &Store,
    group: &str,
    damaged: &[(u32, consumer::log::Damage)],
) -> anyhow::Result<Option<String>> {
    for (partition, damage) in damaged {
        let next = store.progress(group, *partition)?.next_offset;
        if next < damage.offset {
            errln!(
                "warning: partition {partition} of the log cannot be read from offset {} ({}); the group is at \
                 {next}, behind it",
                damage.offset,
                damage.reason
            )?;
            continue;
        }
        let what = if damage.intact_after > 0 {
            format!(
                "records {}..{} are damaged ({}) with {} intact record(s) after them; run `consumer repair --gap` \
                 to record them as a gap and go on",
                damage.offset, damage.end, damage.reason, damage.intact_after
            )
        } else {
            format!(
                "acknowledged records {}..{} are lost ({}); run `consumer repair`",
                damage.offset, damage.acked_end, damage.reason
            )
        };
        return Ok(Some(format!("group {group} partition {partition} stopped at offset {next}: {what}")));
    }
    Ok(None)
}

/// What the owner's takes of transactional ids ended, and the output log's cut tails.
fn print_takes(owner: &Owner) -> Result<(), crate::out::OutputError> {
    report_repairs(owner.output_repairs())?;
    for take in owner.takes() {
        for ended in &take.ended {
            let what = match ended.end {
                TxnEnd::Abort => "aborted the open transaction",
                TxnEnd::Commit => "wrote the missing commit marker of the committed transaction",
            };
            outln!(
                "txn: partition {} taken at epoch {}: {what} of epoch {} (output offsets from {}, input offsets {}..{})",
                take.partition, take.epoch, ended.txn.epoch, ended.txn.first_output, ended.input.start, ended.input.end
            )?;
        }
    }
    Ok(())
}

fn read_output(args: ReadOutputArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    let output = OutputLog::at(&Storage::Real, &args.dir.log_dir(), store.log_identity());
    let mut reader = OutputReader::open(&output, args.partition, args.isolation)?;
    let (records, Caught { position, lso, end }) = reader.read_all()?;
    if args.json {
        let rows: Vec<_> = records
            .iter()
            .map(|r| {
                let ended = r.ended.map(|end| if end == TxnEnd::Commit { "committed" } else { "aborted" });
                serde_json::json!({
                    "offset": r.offset, "group": r.txn.group, "epoch": r.txn.epoch, "input_offset": r.input_offset,
                    "delta": r.delta, "ended": ended
                })
            })
            .collect();
        let document = serde_json::json!({
            "tool": TOOL, "partition": args.partition, "isolation": args.isolation, "records": rows, "position": position,
            "lso": lso, "end": end
        });
        outln!("{document}")?;
        return Ok(ExitCode::SUCCESS);
    }
    for r in &records {
        let ended = match r.ended {
            Some(TxnEnd::Commit) => "committed",
            Some(TxnEnd::Abort) => "aborted",
            None => "open",
        };
        outln!(
            "output offset {}: group {} input offset {} delta {} (epoch {}, {ended})",
            r.offset,
            r.txn.group,
            r.input_offset,
            r.delta,
            r.txn.epoch
        )?;
    }
    outln!(
        "partition {} {}: {} record(s) read; stopped at {position}; LSO {lso}, end {end}",
        args.partition,
        args.isolation,
        records.len()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `relay` without `--follow` stops after this many steps (owners may add rows as it drains).
const RELAY_STEPS_MAX: u64 = 10_000_000;
/// `relay --follow` looks again after this long when every outbox was empty.
const RELAY_IDLE_MS: u64 = 5;

fn emails(args: EmailsArgs) -> anyhow::Result<ExitCode> {
    let provider = ExternalDir::new(&args.dir.dir).open_provider()?;
    let received = provider.received(args.group.as_deref())?;
    if args.json {
        outln!("{}", serde_json::json!({"tool": TOOL, "emails": received}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut deliveries: std::collections::BTreeMap<(&str, u32, u64), u64> = std::collections::BTreeMap::new();
    for request in &received {
        let key = request.key.as_deref().map_or_else(|| "no key".to_string(), |key| format!("key {key}"));
        let what = if request.delivered { "delivered" } else { "DROPPED: a repeat of its key" };
        outln!(
            "request {}: group {} partition {} offset {} ({key}): {what}",
            request.seq,
            request.group,
            request.partition,
            request.offset
        )?;
        *deliveries.entry((&request.group, request.partition, request.offset)).or_default() +=
            u64::from(request.delivered);
    }
    let delivered: u64 = deliveries.values().sum();
    outln!(
        "{} request(s), {delivered} delivered, {} dropped as repeats of their key",
        received.len(),
        received.len() as u64 - delivered
    )?;
    for ((group, partition, offset), count) in deliveries.iter().filter(|(_, &count)| count > 1) {
        outln!("record {group}/{partition}/{offset}: its email was delivered {count} times")?;
    }
    if let Some(group) = &args.group {
        print_never_emailed(&args.dir.open_store()?, group, &deliveries)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How many records below `group`'s committed next offsets have no email delivered (the first
/// few named): what a crash between the store's commit and the email lost.
fn print_never_emailed(
    store: &Store,
    group: &str,
    deliveries: &std::collections::BTreeMap<(&str, u32, u64), u64>,
) -> anyhow::Result<()> {
    const NAMED_MAX: usize = 10;
    for partition in 0..store.partitions() {
        let next_offset = store.progress(group, partition)?.next_offset;
        let delivered = (deliveries.range((group, partition, 0)..(group, partition, next_offset)))
            .filter(|(_, &count)| count > 0)
            .count() as u64;
        let missing = next_offset - delivered;
        if missing == 0 {
            continue;
        }
        let named: Vec<String> = (0..next_offset)
            .filter(|&offset| deliveries.get(&(group, partition, offset)).is_none_or(|&count| count == 0))
            .take(NAMED_MAX)
            .map(|offset| offset.to_string())
            .collect();
        outln!(
            "group {group} partition {partition}: {missing} record(s) below the committed next offset {next_offset} \
             were never emailed (offsets {}{})",
            named.join(", "),
            if missing > NAMED_MAX as u64 { ", ..." } else { "" }
        )?;
    }
    Ok(())
}

fn index(args: IndexArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    let index = ExternalDir::new(&args.dir.dir).open_index()?;
    let group = args.group.as_deref();
    let (indexed, facts, outbox) = (index.facts(group)?, store.facts(group)?, store.outbox(group)?);
    if args.json {
        outln!("{}", serde_json::json!({"tool": TOOL, "index": indexed, "store": facts, "outbox": outbox}))?;
        return Ok(ExitCode::SUCCESS);
    }
    for fact in &indexed {
        outln!("fact {}/{}/{}", fact.group, fact.partition, fact.offset)?;
    }
    outln!("index: {} fact(s); store: {} fact(s), {} outbox row(s)", indexed.len(), facts.len(), outbox.len())?;
    for fact in facts.iter().filter(|fact| !indexed.contains(fact)) {
        let why = if outbox.contains(fact) {
            "in the outbox: the relay copies it"
        } else {
            "in no outbox: nothing will ever copy it, the stores disagree for good"
        };
        outln!("the index lacks {}/{}/{} ({why})", fact.group, fact.partition, fact.offset)?;
    }
    for fact in indexed.iter().filter(|fact| !facts.contains(fact)) {
        outln!("the store lacks {}/{}/{}", fact.group, fact.partition, fact.offset)?;
    }
    if indexed == facts {
        outln!("the index holds exactly the store's facts")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn relay(args: RelayArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    let index = ExternalDir::new(&args.dir.dir).open_index()?;
    let mut relay = Relay::new(store, index);
    let mut relayed = 0;
    loop {
        let groups = match &args.group {
            Some(group) => vec![group.clone()],
            None => relay.store().groups()?,
        };
        for group in &groups {
            while relayed < RELAY_STEPS_MAX {
                let mut after_copy = || {
                    if args.crash_after_copy {
                        consumer::crash::crash_now();
                    }
                };
                let Some(fact) = relay.relay_one_with(group, &mut after_copy)? else { break };
                relayed += 1;
                outln!("relayed {}/{}/{} to the index", fact.group, fact.partition, fact.offset)?;
                if args.once {
                    break;
                }
            }
        }
        if !args.follow {
            break;
        }
        std::thread::sleep(Duration::from_millis(RELAY_IDLE_MS));
    }
    let left = relay.store().outbox(args.group.as_deref())?.len();
    outln!("{relayed} row(s) relayed; {left} outbox row(s) left")?;
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    let mut log = args.dir.open_log_reader(&store)?;
    let replicated = ReplicatedLog::open(&args.dir.log_dir(), store.log_identity())?;
    let state = replicated.as_ref().map(ReplicatedLog::state).transpose()?;
    let mut partitions = Vec::new();
    let mut ends = Vec::new();
    for partition in 0..store.partitions() {
        // A replicated log's reader sees the leader below the high watermark, or nothing.
        let mut entry = match log.view(partition) {
            Ok(view) => {
                ends.push(Some(view.end));
                let gaps: Vec<[u64; 2]> = view.gaps.iter().map(|gap| [gap.start, gap.end]).collect();
                let damaged = view.damage.as_ref().map(|damage| [damage.offset, damage.end]);
                let intact_after = view.damage.as_ref().map(|damage| damage.intact_after);
                serde_json::json!({
                    "partition": partition, "start": view.start, "end": view.end, "acked_end": view.acked_end,
                    "damage": view.damage.map(|damage| damage.reason), "damaged_offsets": damaged,
                    "intact_after": intact_after, "gaps": gaps, "unavailable": false
                })
            }
            Err(LogError::Unavailable { .. }) => {
                ends.push(None);
                serde_json::json!({"partition": partition, "unavailable": true})
            }
            Err(error) => return Err(error.into()),
        };
        if let (Some(replicated), Some(state)) = (&replicated, &state) {
            entry["replication"] = replicas::partition_status(replicated, state, partition)?;
        }
        partitions.push(entry);
    }
    let mut groups = Vec::new();
    for group in store.groups()? {
        let mut status = group_status(&store, &group, &ends)?;
        // The external systems of spec.md §3.4's rows: what their properties observe.
        let externals = consumer::external::summarize(&store, &ExternalDir::new(&args.dir.dir), &group)?;
        (status["emails"], status["index"]) = (serde_json::json!(externals.emails), serde_json::json!(externals.index));
        groups.push(status);
    }
    if args.json {
        outln!("{}", serde_json::json!({"tool": TOOL, "log": partitions, "groups": groups}))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("store {}", store.describe())?;
    outln!("log {} identity {}", args.dir.log_dir().display(), log.identity())?;
    for p in &partitions {
        print_partition(p)?;
    }
    for g in &groups {
        print_group_status(g)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_partition(p: &serde_json::Value) -> Result<(), crate::out::OutputError> {
    if p["unavailable"].as_bool() == Some(true) {
        outln!("log partition {}: UNAVAILABLE (no leader): reads and appends are refused", p["partition"])?;
    } else {
        let visible = if p["replication"].is_null() { "" } else { " (the leader's, below the high watermark)" };
        out!("log partition {}: start {} end {}{visible}", p["partition"], p["start"], p["end"])?;
        match (p["damage"].as_str(), p["intact_after"].as_u64()) {
            (Some(reason), Some(intact)) if intact > 0 => outln!(
                ": DAMAGED at offsets {}..{} ({reason}), {intact} intact record(s) after them unread; appends \
                 are refused; run `consumer repair --gap`",
                p["damaged_offsets"][0],
                p["damaged_offsets"][1]
            )?,
            (Some(reason), _) => outln!(
                " of {} acknowledged: DAMAGED ({reason}); appends are refused; run `consumer repair`",
                p["acked_end"]
            )?,
            (None, _) => outln!()?,
        }
        for gap in p["gaps"].as_array().into_iter().flatten() {
            outln!("  gap: offsets {}..{} (damaged records given up by `repair --gap`)", gap[0], gap[1])?;
        }
    }
    if !p["replication"].is_null() {
        replicas::print_partition_status(&p["replication"])?;
    }
    Ok(())
}

/// One group's object of `status --json`; `ahead` lists the partitions whose stored next offset
/// is past the log end (`ends`; `None`: unavailable), which `consume` refuses.
fn group_status(store: &Store, group: &str, ends: &[Option<u64>]) -> anyhow::Result<serde_json::Value> {
    let rows: Vec<_> = (0..store.partitions()).map(|p| store.progress(group, p)).collect::<Result<_, _>>()?;
    let ahead: Vec<usize> = rows
        .iter()
        .zip(ends)
        .enumerate()
        .filter(|(_, (row, end))| end.is_some_and(|end| row.next_offset > end))
        .map(|(p, _)| p)
        .collect();
    let processed = store.processed(group)?.len();
    let dead_letters = store.dead_letters(Some(group))?.len();
    let resets: Vec<_> = store
        .resets(Some(group))?
        .iter()
        .map(|reset| serde_json::json!({"partition": reset.partition, "from": reset.from, "to": reset.to}))
        .collect();
    Ok(serde_json::json!({
        "group": group, "total": store.total(group)?, "value": store.value(group)?, "progress": rows,
        "processed": processed, "dead_letters": dead_letters, "resets": resets, "ahead": ahead
    }))
}

fn print_group_status(g: &serde_json::Value) -> Result<(), crate::out::OutputError> {
    outln!(
        "group {}: total {}, processed ids {}, dead letters {}, resets {}",
        g["group"].as_str().unwrap_or(""),
        g["total"],
        g["processed"],
        g["dead_letters"],
        g["resets"].as_array().map_or(0, Vec::len)
    )?;
    print_edge_status(g)?;
    let ahead: Vec<u64> = g["ahead"].as_array().into_iter().flatten().filter_map(serde_json::Value::as_u64).collect();
    for (partition, row) in g["progress"].as_array().into_iter().flatten().enumerate() {
        let warning = if ahead.contains(&(partition as u64)) {
            ": AHEAD of the log end (the log lost records the group consumed); consume refuses; run `consumer repair`"
        } else {
            ""
        };
        outln!(
            "  partition {partition}: next offset {}, epoch {}, owner {}, stamp {}{warning}",
            row["next_offset"],
            row["epoch"],
            row["owner"].as_str().unwrap_or(""),
            row["stamp"]
        )?;
    }
    Ok(())
}

/// The lines of spec.md §3.4's rows, each only when the group has what it shows: the set
/// strategies' value, the emails the provider received, the facts of the store and the index.
fn print_edge_status(g: &serde_json::Value) -> Result<(), crate::out::OutputError> {
    if !g["value"].is_null() {
        outln!("  value {} (the set strategies' last set: v(o) = o + 1 of the record that set it)", g["value"])?;
    }
    let emails = &g["emails"];
    if !emails.is_null() {
        outln!(
            "  emails: {} request(s), {} delivered, {} dropped as repeats of their key; {} record(s) delivered more \
             than once, {} below the next offset never delivered",
            emails["requests"],
            emails["delivered"],
            emails["dropped"],
            emails["duplicated"],
            emails["never_delivered"]
        )?;
    }
    let index = &g["index"];
    if !index.is_null() {
        let verdict = if index["agree"] == true {
            "the stores agree".to_string()
        } else if index["lost"] != 0 {
            format!("the stores DISAGREE: {} fact(s) in no outbox will never reach the index", index["lost"])
        } else if index["outbox"] != 0 {
            "the index lacks facts the relay has yet to copy (`consumer relay`)".to_string()
        } else {
            "the stores DISAGREE: the index holds facts the store does not".to_string()
        };
        outln!("  facts: store {}, outbox {}, index {}: {verdict}", index["store"], index["outbox"], index["index"])?;
    }
    Ok(())
}

fn claim(args: ClaimArgs) -> anyhow::Result<ExitCode> {
    let mut store = args.dir.open_store()?;
    let epoch = store.claim(&args.group, args.partition, &args.owner)?;
    outln!("group {} partition {} now owned by {} at epoch {epoch}", args.group, args.partition, args.owner)?;
    Ok(ExitCode::SUCCESS)
}

fn retain(args: RetainArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    if ReplicatedLog::open(&args.dir.log_dir(), store.log_identity())?.is_some() {
        return Err(LogError::Replicated { path: args.dir.log_dir(), operation: "retention" }.into());
    }
    let mut log = args.dir.open_log_writer(&store)?;
    let start = log.retain_before(args.partition, args.before)?;
    outln!("partition {} now starts at offset {start}", args.partition)?;
    Ok(ExitCode::SUCCESS)
}

fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let mut owner = args.owner.start()?;
    let stdin = std::io::stdin();
    consumer::worker::serve(&mut owner, stdin.lock(), std::io::stdout().lock()).context("worker protocol I/O")?;
    Ok(ExitCode::SUCCESS)
}

/// Exit 0 after `quit` or at the end of input; 2 when `init` could not be served (its error
/// reply names why, and so does the one line on stderr).
fn serve() -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    match consumer::protocol::serve(stdin.lock(), std::io::stdout().lock()).context("protocol I/O")? {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(text) => anyhow::bail!("init: {text}"),
    }
}

fn append_poison(args: AppendPoisonArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    if let Some(log) = ReplicatedLog::open(&args.dir.log_dir(), store.log_identity())? {
        let payloads = [POISON_PAYLOAD.to_vec()];
        let batch = consumer::log::Batch { payloads: &payloads, producer: None };
        let append = log.append_leader(args.partition, batch)?;
        report_repairs(&append.repairs)?;
        let (offset, leader) = (append.appended.offsets.start, append.leader);
        outln!(
            "appended poison record at offset {offset} to partition {} on the leader, broker {leader} (acks=1)",
            args.partition
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut log = args.dir.open_log_writer(&store)?;
    let offset = log.append(args.partition, POISON_PAYLOAD)?;
    outln!("appended poison record at offset {offset} to partition {} (durable)", args.partition)?;
    Ok(ExitCode::SUCCESS)
}

fn dead_letters(args: DeadLettersArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    let letters = store.dead_letters(args.group.as_deref())?;
    if args.json {
        let rows: Vec<_> = letters
            .iter()
            .map(|letter| {
                serde_json::json!({
                    "group": letter.group, "partition": letter.partition, "offset": letter.offset,
                    "attempts": letter.attempts, "error": letter.error
                })
            })
            .collect();
        outln!("{}", serde_json::json!({"tool": TOOL, "dead_letters": rows}))?;
        return Ok(ExitCode::SUCCESS);
    }
    if letters.is_empty() {
        outln!("no dead letters")?;
    }
    for letter in &letters {
        outln!(
            "group {} partition {} offset {}: {} attempt(s), error: {}",
            letter.group,
            letter.partition,
            letter.offset,
            letter.attempts,
            letter.error
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn redrive(args: RedriveArgs) -> anyhow::Result<ExitCode> {
    let mut store = args.dir.open_store()?;
    let total = store.redrive(&args.group, args.partition, args.offset, args.delta)?;
    outln!(
        "redriven: group {} partition {} offset {} applied with delta {}; total {total}",
        args.group,
        args.partition,
        args.offset,
        args.delta
    )?;
    Ok(ExitCode::SUCCESS)
}

fn resets(args: ResetsArgs) -> anyhow::Result<ExitCode> {
    let store = args.dir.open_store()?;
    let resets = store.resets(args.group.as_deref())?;
    if args.json {
        outln!("{}", serde_json::json!({"tool": TOOL, "resets": resets}))?;
        return Ok(ExitCode::SUCCESS);
    }
    if resets.is_empty() {
        outln!("no resets")?;
    }
    for reset in &resets {
        outln!(
            "group {} partition {}: reset from offset {} to {}",
            reset.group,
            reset.partition,
            reset.from,
            reset.to
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn repair(args: RepairArgs) -> anyhow::Result<ExitCode> {
    if args.upgrade {
        return upgrade(&args.dir);
    }
    let mut store = args.dir.open_store()?;
    let log_dir = args.dir.log_dir();
    let options = consumer::log::RepairOptions { gap: args.gap };
    // The plan is shown before it is carried out; a failure to show it is returned once the
    // log is repaired (the repair goes on: it is recorded in `repairs.log` before it starts).
    let mut shown = Ok(());
    let repaired = Log::repair_with(&log_dir, store.log_identity(), options, |actions| {
        shown = actions.iter().try_for_each(|action| outln!("repair: {action}"));
    })?;
    shown?;
    // The log first: a crash before the groups move leaves a consistent log whose groups are
    // ahead of it, which `consume` refuses and a second `repair` finishes.
    let mut moved = 0;
    for group in store.groups()? {
        for (partition, &end) in (0..).zip(&repaired.ends) {
            let Some(rewind) = store.rewind_to_log_end(&group, partition, end)? else { continue };
            moved += 1;
            print_rewind(&rewind)?;
        }
        for (partition, gap) in &repaired.gaps {
            let Some(reset) = store.record_gap(&group, *partition, gap.clone())? else { continue };
            outln!(
                "repair: group {group} partition {partition}: the skip of offsets {}..{} recorded in the resets \
                 (the group will step over the gap there)",
                reset.from,
                reset.to
            )?;
        }
    }
    if repaired.actions.is_empty() && moved == 0 {
        outln!("log {} is healthy and no group is past its end: nothing to repair", log_dir.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `repair --upgrade`: the store's log, then the output log beside it if there is one, each
/// converted to format version 3 (or finished), one line per file and a summary.
fn upgrade(dir: &DirArgs) -> anyhow::Result<ExitCode> {
    let store = dir.open_store()?;
    let log_dir = dir.log_dir();
    let mut upgraded = Log::upgrade(&log_dir, store.log_identity())?;
    let output = OutputLog::at(&Storage::Real, &log_dir, store.log_identity());
    if output.dir().exists() {
        let more = Log::upgrade(output.dir(), output.identity())?;
        upgraded.actions.extend(more.actions);
        upgraded.upgraded.extend(more.upgraded);
        upgraded.current.extend(more.current);
    }
    for action in &upgraded.actions {
        outln!("upgrade: {action}")?;
    }
    if upgraded.upgraded.is_empty() {
        outln!("log {} is format version 3 already: nothing to upgrade", log_dir.display())?;
    } else {
        let (done, current) = (upgraded.upgraded.len(), upgraded.current.len());
        outln!("upgraded {done} log director(ies) to format version 3 ({current} were already)")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_rewind(rewind: &consumer::store::Rewind) -> Result<(), crate::out::OutputError> {
    let (group, partition) = (&rewind.group, rewind.partition);
    let mut parts = Vec::new();
    if rewind.to < rewind.from {
        parts.push(format!(
            "next offset moved back from {} to the log end {} (recorded in the resets)",
            rewind.from, rewind.to
        ));
    }
    if let Some(stamp) = rewind.stamp_from {
        parts.push(format!("offset stamp {stamp} moved below the log end"));
    }
    if rewind.processed_dropped > 0 {
        parts.push(format!("{} processed id(s) at or past the log end dropped", rewind.processed_dropped));
    }
    if rewind.attempts_dropped > 0 {
        parts.push(format!("{} counted attempt(s) at or past the log end dropped", rewind.attempts_dropped));
    }
    outln!(
        "repair: group {group} partition {partition}: {}; epoch now {}, so records appended there are applied, \
         not skipped",
        parts.join(", "),
        rewind.epoch
    )?;
    Ok(())
}

fn power_cuts(args: PowerCutsArgs) -> anyhow::Result<ExitCode> {
    let shm = PathBuf::from("/dev/shm");
    let parent = args.dir.unwrap_or_else(|| if shm.is_dir() { shm } else { std::env::temp_dir() });
    let work = parent.join(format!("onceproof-power-cuts-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let strategies = if args.strategies.is_empty() { Strategy::ALL.to_vec() } else { args.strategies };
    let config = consumer::power::Config {
        seed: args.seed,
        runs: args.runs,
        strategies,
        writer_mode: WriterMode::Checked,
        damage_classes: consumer::power::DamageClass::ALL.to_vec(),
    };
    outln!("{TOOL}")?;
    let started = std::time::Instant::now();
    let report = consumer::power::run(&config, &work);
    // The store's own commit, cut right after it returned (with its setting and the one before).
    let store_cuts = report.is_ok().then(|| consumer::power::store_cut::run(&work));
    std::fs::remove_dir_all(&work).with_context(|| format!("cannot remove {}", work.display()))?;
    let report = report?;
    let store_cuts = store_cuts.expect("run when the report is")?;
    out!("{}", report.table())?;
    // The replicated log's steps, on the simulated disk alone (no store).
    let replication = consumer::power::replication::run(args.seed, args.runs)?;
    outln!()?;
    out!("{}", replication.table())?;
    for violation in &replication.violations {
        outln!("violation: {violation}")?;
    }
    outln!()?;
    out!("{}", consumer::power::store_cut::table(&store_cuts))?;
    let store_violations = consumer::power::store_cut::violations(&store_cuts);
    for violation in &store_violations {
        outln!("violation: {violation}")?;
    }
    out::flush()?;
    let runs = report.total().runs + replication.total().runs;
    errln!("{runs} runs in {:.1} s", started.elapsed().as_secs_f64())?;
    if report.violation_count > 0 || !replication.violations.is_empty() || !store_violations.is_empty() {
        return Ok(ExitCode::from(VIOLATION_EXIT_CODE));
    }
    Ok(ExitCode::SUCCESS)
}
