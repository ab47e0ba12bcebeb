//! `tarn storage`, as Kafka's kafka-storage.sh: `random-uuid` prints a new
//! cluster id, `format` ties a data directory to a cluster and a node by
//! writing `meta.properties`, and `info` shows what a directory holds.
//!
//! `format` refuses a directory that is already formatted (unless
//! `--ignore-formatted`, which leaves it as it is) and always refuses one
//! formatted for another cluster or node. `tarn serve` on a directory with
//! no `meta.properties` still formats it itself with a new cluster id.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

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

fn read_meta(dir: &Path) -> Result<Option<MetaProperties>> {
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
    let meta = MetaProperties {
        cluster_id: cluster_id.to_owned(),
        node_id: cluster.node_id,
        directory_id: Some(tarn_metadata::random_uuid().to_base64()),
    };
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
