//! `consumer bench --log-appends`: what the acknowledgement record costs the log's appends.
//! Appends of one record and batches of 10 and 100, each with the record (`WriterMode::Checked`:
//! data fsync, then the record's slot and its fdatasync) and without it
//! (`WriterMode::WithoutAckRecord`: the data fsync only, as before the record existed), against
//! the disk's raw fsync rates measured in the same run.

use crate::bench::{append_fsync_rate, fsync_samples, median, Scratch, FSYNC_SAMPLE};
use consumer::log::{encode_delta, Log, WriterMode};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Records per append compared.
const BATCHES: [usize; 3] = [1, 10, 100];
/// The two ways of appending compared, without the record first.
const MODES: [WriterMode; 2] = [WriterMode::WithoutAckRecord, WriterMode::Checked];

/// One measured configuration and its seconds per repeat.
struct Measured {
    batch: usize,
    mode: WriterMode,
    seconds: Vec<f64>,
}

pub fn run(dir: &Path, appends: u64, repeat: usize) -> anyhow::Result<ExitCode> {
    let mut fsync_rates = fsync_samples(dir, repeat)?;
    let mut append_rates = (0..repeat).map(|_| append_fsync_rate(dir, FSYNC_SAMPLE)).collect::<Result<Vec<_>, _>>()?;
    let mut measured: Vec<Measured> = BATCHES
        .iter()
        .flat_map(|&batch| MODES.iter().map(move |&mode| Measured { batch, mode, seconds: Vec::new() }))
        .collect();
    // Round by round, so that slow phases of a shared machine fall on every case alike.
    for round in 1..=repeat {
        err!("round {round}/{repeat} ... ")?;
        let started = Instant::now();
        for entry in &mut measured {
            entry.seconds.push(measure(dir, entry.mode, entry.batch, appends)?);
        }
        errln!("{:.1} s", started.elapsed().as_secs_f64())?;
    }
    fsync_rates.extend(fsync_samples(dir, repeat)?);
    for _ in 0..repeat {
        append_rates.push(append_fsync_rate(dir, FSYNC_SAMPLE)?);
    }
    let (fsync_rate, append_rate) = (median(&fsync_rates), median(&append_rates));
    print_table(&measured, appends, fsync_rate, append_rate)?;
    Ok(ExitCode::SUCCESS)
}

/// Seconds for `appends` appends of `batch` records each to a fresh log, in `mode`.
fn measure(dir: &Path, mode: WriterMode, batch: usize, appends: u64) -> anyhow::Result<f64> {
    let scratch = Scratch::new(dir)?;
    let log_dir = scratch.path.join("log");
    let identity = Log::init(&log_dir, 1)?;
    let (mut log, _) = Log::open_writer_with(&log_dir, identity, mode)?;
    let payloads = vec![encode_delta(1); batch];
    let started = Instant::now();
    for _ in 0..appends {
        log.append_batch(0, &payloads)?;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn mode_name(mode: WriterMode) -> &'static str {
    match mode {
        WriterMode::WithoutAckRecord => "without",
        WriterMode::Checked => "with",
        WriterMode::Unchecked => "unchecked",
        WriterMode::AckBeforeDataSync => "ack-before-data-sync",
    }
}

fn print_table(
    measured: &[Measured],
    appends: u64,
    fsync_rate: f64,
    append_rate: f64,
) -> Result<(), crate::out::OutputError> {
    outln!(
        "{:>5}  {:<10}  {:>7}  {:>9}  {:>10}  {:>10}  {:>8}  {:>10}",
        "batch",
        "ack record",
        "appends",
        "median s",
        "appends/s",
        "records/s",
        "x fsync",
        "x app+sync"
    )?;
    let rate = |entry: &Measured| appends as f64 / median(&entry.seconds);
    for entry in measured {
        let appends_per_second = rate(entry);
        outln!(
            "{:>5}  {:<10}  {:>7}  {:>9.3}  {:>10.0}  {:>10.0}  {:>8.3}  {:>10.3}",
            entry.batch,
            mode_name(entry.mode),
            appends,
            median(&entry.seconds),
            appends_per_second,
            appends_per_second * entry.batch as f64,
            appends_per_second / fsync_rate,
            appends_per_second / append_rate
        )?;
    }
    outln!(
        "raw rates: {fsync_rate:.0} fsyncs/s (4 KiB rewrite + sync_data), {append_rate:.0} appends/s \
         (4 KiB append + sync_data); medians of samples before and after"
    )?;
    for &batch in &BATCHES {
        let find = |mode| measured.iter().find(|m| m.batch == batch && m.mode == mode).map(rate);
        if let (Some(without), Some(with)) = (find(WriterMode::WithoutAckRecord), find(WriterMode::Checked)) {
            outln!("batch {batch:>3}: with / without the acknowledgement record = {:.2}", with / without)?;
        }
    }
    Ok(())
}
