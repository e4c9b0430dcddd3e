//! `kafka-lane`: the Kafka-protocol lane's processes. `owner` is one owner (started by the
//! lane's driver), `broker` serves an in-process broker until killed, `load` runs the load test.

use clap::{Parser, Subcommand};
use kafka_lane::broker::Broker;
use kafka_lane::error::LaneError;
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "kafka-lane", about = "onceproof's owners on a Kafka-compatible broker through a real Kafka client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One owner process, driven one JSON request per line on standard input (the lane's
    /// driver starts it; see kafka/src/owner.rs).
    Owner(kafka_lane::owner::OwnerCli),
    /// Serves a broker (storage in memory) until killed, printing its address first.
    Broker {
        /// Where to listen (port 0: a free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Create the lane's topic (one partition) with this name once listening.
        #[arg(long)]
        create_topic: Option<String>,
    },
    /// The load test: owner processes of one group on the broker, killed, joining and leaving
    /// at random while records are produced; totals compared with the exact sum at the end.
    Load(kafka_lane::load::LoadArgs),
    /// Does the broker's relaxed commit fence show through the client? A frozen member commits
    /// with its old generation while a new member's join rebalances the group.
    ProbeRelaxed,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Owner(cli) => kafka_lane::owner::main(cli).map_err(anyhow::Error::from),
        Command::Broker { listen, create_topic } => serve_broker(listen, create_topic),
        Command::Load(args) => kafka_lane::load::run(&args).map_err(anyhow::Error::from),
        Command::ProbeRelaxed => probe_relaxed(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kafka-lane: {error:#}");
            // Bad input and an unreachable or refusing broker are the user's to fix: exit 2.
            let user = error.downcast_ref::<LaneError>().is_some_and(LaneError::is_bad_input);
            ExitCode::from(if user { 2 } else { 1 })
        }
    }
}

fn serve_broker(listen: SocketAddr, create_topic: Option<String>) -> anyhow::Result<()> {
    let broker = Broker::start(listen)?;
    if let Some(topic) = create_topic {
        let clients = kafka_lane::client::Clients::connect(&broker.bootstrap())?;
        clients.create_topic(&topic, 1)?;
        clients.leak();
    }
    println!("listening on {}", broker.bootstrap());
    loop {
        std::thread::park();
    }
}

fn probe_relaxed() -> anyhow::Result<()> {
    let program = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("onceproof-kafka-probe-{}", std::process::id()));
    let report = kafka_lane::probe::relaxed(&program, &[], &dir)?;
    let _ = std::fs::remove_dir_all(&dir);
    for line in &report.timeline {
        println!("{line}");
    }
    let verdict = if report.stale_commit_accepted { "accepted" } else { "refused" };
    println!("the frozen member's commit with its old generation, in state {}: {verdict}", report.state_at_commit);
    Ok(())
}
