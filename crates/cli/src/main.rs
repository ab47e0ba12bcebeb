//! The `tarn` binary: `serve` runs the broker; `topics` manages topics
//! over the Kafka protocol like kafka-topics.sh; `perf` measures a broker
//! like kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh.

mod perf;
mod serve;
mod topics;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tarn",
    version,
    about = "A Kafka-compatible event-streaming broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(serve::ServeArgs),
    /// Create, list, describe and delete topics.
    Topics {
        #[command(subcommand)]
        command: topics::TopicsCommand,
    },
    /// Measure produce and consume throughput and latency.
    Perf {
        #[command(subcommand)]
        command: perf::PerfCommand,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Topics { command } => topics::run(command),
        Command::Perf { command } => perf::run(command),
    }
}
