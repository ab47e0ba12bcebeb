//! The `tarn` binary: `serve` runs the broker; `topics` manages topics
//! over the Kafka protocol like kafka-topics.sh; `groups` manages consumer
//! groups like kafka-consumer-groups.sh.

mod groups;
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
    /// List, describe and delete consumer groups; reset their offsets.
    Groups(groups::GroupsArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Topics { command } => topics::run(command),
        Command::Groups(args) => groups::run(args),
    }
}
