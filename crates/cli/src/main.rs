//! The `tarn` binary: `serve` runs the broker; `storage` formats its data
//! directory like kafka-storage.sh; `topics` manages topics
//! over the Kafka protocol like kafka-topics.sh; `configs` describes and
//! alters topic and broker configs like kafka-configs.sh; `groups` manages
//! consumer groups like kafka-consumer-groups.sh; `dump-log` inspects
//! segment and index files like kafka-dump-log.sh; `perf` measures a broker
//! like kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh;
//! `produce` and `consume` are kafka-console-producer.sh and
//! kafka-console-consumer.sh; `leader-election` is
//! kafka-leader-election.sh.

mod assignor;
mod cluster;
mod configs;
mod consume;
mod consumer_coordinator;
mod coordinator;
mod dump_log;
mod groups;
mod interrupt;
mod leader_election;
mod log_dirs;
mod perf;
mod produce;
mod props;
mod quotas;
mod reassign;
mod records;
mod serve;
mod storage;
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
    /// Format data directories and make cluster ids (like kafka-storage.sh).
    Storage {
        #[command(subcommand)]
        command: storage::StorageCommand,
    },
    /// Print the batches and records of segment files, or check their indexes.
    DumpLog(dump_log::DumpLogArgs),
    /// Create, list, describe and delete topics.
    Topics {
        #[command(subcommand)]
        command: topics::TopicsCommand,
    },
    /// Describe and alter topic and broker configs (like kafka-configs.sh).
    Configs(configs::ConfigsArgs),
    /// List, describe and delete consumer groups; reset their offsets.
    Groups(groups::GroupsArgs),
    /// Describe the broker's log directories and partition sizes (like kafka-log-dirs.sh).
    LogDirs(log_dirs::LogDirsArgs),
    /// Elect preferred or unclean partition leaders (like kafka-leader-election.sh).
    LeaderElection(leader_election::LeaderElectionArgs),
    /// Move partitions' replicas between brokers (like kafka-reassign-partitions.sh).
    ReassignPartitions(reassign::ReassignArgs),
    /// Send lines of standard input as records (like kafka-console-producer.sh).
    Produce(produce::ProduceArgs),
    /// Print a topic's records (like kafka-console-consumer.sh).
    Consume(consume::ConsumeArgs),
    /// Measure produce and consume throughput and latency.
    Perf {
        #[command(subcommand)]
        command: perf::PerfCommand,
    },
}

/// Lets a command whose standard output is closed early (`tarn topics
/// describe | head`) end quietly, as Unix tools do, instead of panicking in
/// `println!`: Rust ignores SIGPIPE, so a write to a closed pipe would be
/// an error every print turns into a panic. Sockets are unaffected (their
/// writes never raise SIGPIPE). Not for `tarn serve`, which only logs.
fn default_sigpipe() {
    // SAFETY: restores the default disposition of one signal at start-up,
    // before any thread is spawned.
    let previous = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    assert_ne!(previous, libc::SIG_ERR, "reset SIGPIPE");
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        default_sigpipe();
    }
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Storage { command } => storage::run(command),
        Command::Topics { command } => topics::run(command),
        Command::Configs(args) => configs::run(args),
        Command::DumpLog(args) => dump_log::run(args),
        Command::Groups(args) => groups::run(args),
        Command::LogDirs(args) => log_dirs::run(args),
        Command::LeaderElection(args) => leader_election::run(args),
        Command::ReassignPartitions(args) => reassign::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Perf { command } => perf::run(command),
    }
}
