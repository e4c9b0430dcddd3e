//! `consumer bench`: consumed records per second per strategy, batch size and journal mode.

use clap::Args;
use std::process::ExitCode;

#[derive(Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the benchmark is being written")
}
