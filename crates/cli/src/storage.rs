//! `tarn storage`, as Kafka's kafka-storage.sh: `random-uuid` prints a new
//! cluster id, `format` ties a data directory to a cluster and a node by
//! writing `meta.properties`, and `info` shows what a directory holds.
//!
//! `format` refuses a directory that is already formatted (unless
//! `--ignore-formatted`, which leaves it as it is) and always refuses one
//! formatted for another cluster or node. `tarn serve` on a directory with
//! no `meta.properties` still formats it itself with a new cluster id.
//!
//! A controller of a dynamic quorum (`controller.quorum.bootstrap.servers`
//! instead of `controller.quorum.voters`, KIP-853) is formatted as Kafka 4
//! formats one: `--standalone` (this node alone) or `--initial-controllers`
//! names the quorum's first voters, kept in
//! `__cluster_metadata-0/bootstrap-voters` for `tarn serve`; this node's
//! entry gives its directory id. `--no-initial-controllers` formats a
//! broker, or a controller that joins a running quorum once its leader
//! adds it (AddRaftVoter, `kafka-metadata-quorum.sh add-controller`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use tarn_config::cluster::{parse_initial_controllers, ClusterConfig, InitialController};
use tarn_config::meta_properties::{MetaProperties, META_PROPERTIES_FILE};
use tarn_protocol::Uuid;

use crate::serve::ConfigArgs;

#[derive(Subcommand)]
pub enum StorageCommand {
    /// Print a new random cluster id (a Kafka-style base64 UUID).
    RandomUuid,
    /// Write meta.properties into the data directory (log.dirs) of --config.
    Format(FormatArgs),
    /// Show the meta.properties of the data directory of --config.
    Info(InfoArgs),
}

#[derive(Args)]
pub struct FormatArgs {
    /// The cluster id, as `tarn storage random-uuid` prints it.
    #[arg(long, short = 't')]
    cluster_id: String,
    /// Leave an already formatted directory as it is instead of failing.
    #[arg(long, short = 'g')]
    ignore_formatted: bool,
    /// Start a dynamic quorum (controller.quorum.bootstrap.servers) with
    /// this controller as its one voter.
    #[arg(long, short = 's', conflicts_with_all = ["initial_controllers", "no_initial_controllers"])]
    standalone: bool,
    /// Start a dynamic quorum with these voters:
    /// ID@HOST:PORT:DIRECTORY_ID,... (this node among them).
    #[arg(
        long,
        short = 'I',
        value_name = "VOTERS",
        conflicts_with = "no_initial_controllers"
    )]
    initial_controllers: Option<String>,
    /// Format a node that does not start the dynamic quorum (a broker).
    #[arg(long, short = 'N')]
    no_initial_controllers: bool,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    config: ConfigArgs,
}

pub fn run(command: StorageCommand) -> Result<()> {
    match command {
        StorageCommand::RandomUuid => {
            println!("{}", tarn_metadata::random_uuid().to_base64());
            Ok(())
        }
        StorageCommand::Format(args) => format(args),
        StorageCommand::Info(args) => info(args),
    }
}

pub(crate) fn read_meta(dir: &Path) -> Result<Option<MetaProperties>> {
    let path = dir.join(META_PROPERTIES_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            MetaProperties::parse(&text).with_context(|| format!("read {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

fn format(args: FormatArgs) -> Result<()> {
    let (_, cluster) = args.config.load()?;
    let cluster_id = args.cluster_id.trim();
    if Uuid::from_base64(cluster_id).is_none() {
        bail!(
            "cluster id {cluster_id} does not appear to be a valid UUID (use `tarn storage random-uuid`)"
        );
    }
    let dir = &cluster.log_dir;
    if let Some(meta) = read_meta(dir)? {
        if meta.cluster_id != cluster_id {
            bail!(
                "{} is formatted for cluster {}, not {cluster_id}",
                dir.display(),
                meta.cluster_id
            );
        }
        if meta.node_id != cluster.node_id {
            bail!(
                "{} is formatted for node.id {}, not {}",
                dir.display(),
                meta.node_id,
                cluster.node_id
            );
        }
        if !args.ignore_formatted {
            bail!(
                "log directory {} is already formatted; use --ignore-formatted to leave it as it is",
                dir.display()
            );
        }
        println!(
            "{} is already formatted for cluster {cluster_id}",
            dir.display()
        );
        return Ok(());
    }
    let voters = initial_voters(&args, &cluster)?;
    let own = voters
        .iter()
        .flatten()
        .find(|voter| voter.id == cluster.node_id);
    let meta = MetaProperties {
        cluster_id: cluster_id.to_owned(),
        node_id: cluster.node_id,
        directory_id: Some(own.map_or_else(
            || tarn_metadata::random_uuid().to_base64(),
            |voter| voter.directory_id.clone(),
        )),
    };
    // The voters first: a formatted controller always has them.
    if let Some(voters) = &voters {
        let rendered = render_voters(voters);
        let quorum_dir = dir.join(QUORUM_DIR);
        write_atomically(
            &quorum_dir,
            &quorum_dir.join(BOOTSTRAP_VOTERS_FILE),
            format!("{rendered}\n").as_bytes(),
        )?;
        println!("Initial voters of the metadata quorum: {rendered}");
    }
    write_atomically(
        dir,
        &dir.join(META_PROPERTIES_FILE),
        meta.render().as_bytes(),
    )?;
    println!(
        "Formatted {} for cluster {cluster_id} as node.id {}",
        dir.display(),
        cluster.node_id
    );
    Ok(())
}

/// The metadata quorum's directory in a data directory.
pub(crate) const QUORUM_DIR: &str = "__cluster_metadata-0";
/// Where `format` keeps a dynamic quorum's initial voters.
const BOOTSTRAP_VOTERS_FILE: &str = "bootstrap-voters";

/// The initial voters `args` ask for, checked against the node's
/// configuration as kafka-storage.sh checks them; `None` for a node that
/// does not start a dynamic quorum.
fn initial_voters(
    args: &FormatArgs,
    cluster: &ClusterConfig,
) -> Result<Option<Vec<InitialController>>> {
    let starts_quorum = args.standalone || args.initial_controllers.is_some();
    if starts_quorum && !cluster.is_controller() {
        bail!(
            "--standalone and --initial-controllers format a controller; node {} is not one (process.roles)",
            cluster.node_id
        );
    }
    if starts_quorum && !cluster.voters.is_empty() {
        bail!(
            "controller.quorum.voters is set, so the quorum is static: format without --standalone \
             or --initial-controllers, or list controller.quorum.bootstrap.servers instead of the \
             voters for a dynamic quorum"
        );
    }
    let dynamic_controller = cluster.is_controller()
        && cluster.voters.is_empty()
        && !cluster.bootstrap_servers.is_empty();
    if dynamic_controller && !starts_quorum && !args.no_initial_controllers {
        bail!(
            "controller.quorum.voters is not set on this controller: say how its dynamic quorum \
             starts with --standalone, --initial-controllers or --no-initial-controllers"
        );
    }
    let voters = if args.standalone {
        let listener = cluster
            .advertised_controller_listeners
            .first()
            .filter(|l| !l.host.is_empty() && l.port != 0)
            .with_context(|| {
                format!(
                    "--standalone: node {} needs a controller listener with a host and a port \
                     (advertised.listeners) for the other nodes to reach",
                    cluster.node_id
                )
            })?;
        vec![InitialController {
            id: cluster.node_id,
            host: listener.host.clone(),
            port: listener.port,
            directory_id: tarn_metadata::random_uuid().to_base64(),
        }]
    } else if let Some(value) = &args.initial_controllers {
        let voters = parse_initial_controllers(value)
            .map_err(|e| anyhow::anyhow!("--initial-controllers: {e}"))?;
        if let Some(bad) = voters
            .iter()
            .find(|v| Uuid::from_base64(&v.directory_id).is_none())
        {
            bail!(
                "--initial-controllers: {bad}: the directory id {} is not a UUID (use `tarn storage random-uuid`)",
                bad.directory_id
            );
        }
        if !voters.iter().any(|v| v.id == cluster.node_id) {
            bail!(
                "--initial-controllers does not name node {}: Tarn cannot add a controller to a \
                 running quorum yet (KIP-853 AddRaftVoter), so every controller must be an \
                 initial voter",
                cluster.node_id
            );
        }
        voters
    } else {
        return Ok(None);
    };
    Ok(Some(voters))
}

/// Voters as `--initial-controllers` takes them (and the file keeps them).
fn render_voters(voters: &[InitialController]) -> String {
    voters
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The initial voters `tarn storage format` gave the data directory
/// `log_dir`, if any.
pub fn bootstrap_voters(log_dir: &Path) -> Result<Option<Vec<InitialController>>> {
    let path = log_dir.join(QUORUM_DIR).join(BOOTSTRAP_VOTERS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_initial_controllers(text.trim())
            .map(Some)
            .map_err(|e| anyhow::anyhow!("read {}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Writes `path` through a temporary file, fsynced, renamed, and the
/// directory fsynced, so a crash leaves the old file or the new one.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    let mut file =
        std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("sync {}", dir.display()))?;
    Ok(())
}

fn info(args: InfoArgs) -> Result<()> {
    let (_, cluster) = args.config.load()?;
    let dir = &cluster.log_dir;
    println!("Found log directory:\n  {}\n", dir.display());
    match read_meta(dir)? {
        Some(meta) => {
            println!(
                "Found metadata: {{cluster.id={}, directory.id={}, node.id={}, version=1}}",
                meta.cluster_id,
                meta.directory_id.as_deref().unwrap_or("(none)"),
                meta.node_id
            );
            if let Some(voters) = bootstrap_voters(dir)? {
                println!(
                    "Initial voters of the metadata quorum: {}",
                    render_voters(&voters)
                );
            }
            if meta.node_id != cluster.node_id {
                bail!(
                    "{} belongs to node.id {}, but the configuration says node.id {}",
                    dir.display(),
                    meta.node_id,
                    cluster.node_id
                );
            }
            Ok(())
        }
        None => bail!(
            "{} is not formatted (no {META_PROPERTIES_FILE})",
            dir.display()
        ),
    }
}
