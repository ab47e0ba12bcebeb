//! The state machine side: the user's [`StateMachine`] behind openraft's
//! `RaftStateMachine`, and durable snapshots.
//!
//! The user's state is in memory. At start the latest snapshot is
//! installed into it, then openraft replays the committed log after it.
//! A snapshot file `<20-digit index>-<10-digit term>.checkpoint` holds two
//! frames (metadata as JSON, then the user's image bytes); it is written
//! to a temp file, fsynced, renamed into place and the directory fsynced
//! before openraft hears of it, and only then are older ones removed.
//! Snapshot bytes and the log id they cover are taken under one lock, so
//! they always match.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use tarn_storage::FileSystem;

use crate::error::ApplyError;
use crate::frame;
use crate::types::{LogId, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};
use crate::Committed;

const SNAPSHOT_SUFFIX: &str = ".checkpoint";

/// What the user of the quorum implements: the state that committed
/// entries build. Calls come in log order, from one task at a time.
pub trait StateMachine: Send + 'static {
    /// Applies one committed entry. Indexes increase but are not
    /// consecutive: the log also holds entries of Raft's own (a new
    /// leader's blank entry, membership) that are not passed here. An
    /// error stops this node.
    fn apply(&mut self, committed: Committed, entry: &Bytes) -> Result<(), ApplyError>;
    /// An image of the whole state, covering every entry applied so far.
    fn snapshot(&self) -> Bytes;
    /// Replaces the whole state with `image`, which covers the log up to
    /// and including `last`.
    fn install_snapshot(&mut self, last: Committed, image: &Bytes) -> Result<(), ApplyError>;
}

pub(crate) fn committed(log_id: &LogId) -> Committed {
    Committed {
        index: log_id.index,
        term: log_id.leader_id.term,
    }
}

/// The durable snapshots of one quorum directory.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotStore {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
}

fn snapshot_name(log_id: &LogId) -> String {
    format!(
        "{:020}-{:010}{SNAPSHOT_SUFFIX}",
        log_id.index, log_id.leader_id.term
    )
}

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl SnapshotStore {
    pub(crate) fn new(fs: Arc<dyn FileSystem>, dir: &Path) -> SnapshotStore {
        SnapshotStore {
            fs,
            dir: dir.to_path_buf(),
        }
    }

    fn names(&self) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .fs
            .list(&self.dir)?
            .into_iter()
            .filter(|n| n.ends_with(SNAPSHOT_SUFFIX))
            .collect();
        // Zero-padded index first: the name order is the log order.
        names.sort();
        Ok(names)
    }

    /// Makes `meta` + `image` the latest snapshot, durably.
    pub(crate) fn save(&self, meta: &SnapshotMeta, image: &Bytes) -> io::Result<()> {
        let Some(last) = meta.last_log_id else {
            return Err(io::Error::other("a snapshot must cover at least one entry"));
        };
        let name = snapshot_name(&last);
        let meta_json = serde_json::to_vec(meta).map_err(io::Error::other)?;
        let mut buf = Vec::with_capacity(meta_json.len() + image.len() + 16);
        frame::encode(&meta_json, &mut buf);
        frame::encode(image, &mut buf);
        frame::replace_file(&self.fs, &self.dir, &name, &buf)
            .map_err(|e| io::Error::new(e.kind(), format!("write snapshot {name}: {e}")))?;
        for old in self.names()? {
            if old < name {
                self.fs
                    .remove_file(&self.dir.join(&old))
                    .map_err(|e| io::Error::new(e.kind(), format!("remove {old}: {e}")))?;
            }
        }
        Ok(())
    }

    /// The latest snapshot, if any.
    pub(crate) fn load(&self) -> io::Result<Option<Snapshot>> {
        let Some(name) = self.names()?.pop() else {
            return Ok(None);
        };
        let path = self.dir.join(&name);
        let buf = frame::read_file(self.fs.as_ref(), &path)?
            .ok_or_else(|| corrupt(format!("{name} vanished")))?;
        // Renamed into place only after an fsync: damage is corruption.
        let decoded = frame::decode(&buf).map_err(|e| corrupt(format!("{name}: {e}")))?;
        let [(_, meta), (_, image)] = decoded.frames.as_slice() else {
            return Err(corrupt(format!("{name} does not hold two intact frames")));
        };
        if decoded.valid_len != buf.len() as u64 {
            return Err(corrupt(format!("{name} has bytes after its frames")));
        }
        let meta: SnapshotMeta = serde_json::from_slice(meta)
            .map_err(|e| corrupt(format!("decode metadata of {name}: {e}")))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Bytes::copy_from_slice(image),
        }))
    }
}

struct Applied {
    machine: Box<dyn StateMachine>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

/// openraft's state machine: the user's, plus what Raft needs to know.
#[derive(Clone)]
pub(crate) struct MachineStore {
    applied: Arc<Mutex<Applied>>,
    snapshots: SnapshotStore,
}

fn lock(applied: &Mutex<Applied>) -> io::Result<MutexGuard<'_, Applied>> {
    applied
        .lock()
        .map_err(|_| io::Error::other("state machine lock poisoned"))
}

fn apply_error(e: ApplyError) -> io::Error {
    io::Error::other(format!("state machine: {e}"))
}

impl MachineStore {
    /// Installs the latest durable snapshot, if any, into `machine`.
    pub(crate) fn open(
        mut machine: Box<dyn StateMachine>,
        snapshots: SnapshotStore,
    ) -> io::Result<MachineStore> {
        let mut last_applied = None;
        let mut membership = StoredMembership::default();
        if let Some(snapshot) = snapshots.load()? {
            if let Some(last) = &snapshot.meta.last_log_id {
                machine
                    .install_snapshot(committed(last), &snapshot.snapshot)
                    .map_err(apply_error)?;
            }
            last_applied = snapshot.meta.last_log_id;
            membership = snapshot.meta.last_membership;
        }
        Ok(MachineStore {
            applied: Arc::new(Mutex::new(Applied {
                machine,
                last_applied,
                membership,
            })),
            snapshots,
        })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MachineStore {
    type SnapshotData = Bytes;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let (meta, image) = {
            let applied = lock(&self.applied)?;
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.membership.clone(),
            };
            (meta, applied.machine.snapshot())
        };
        self.snapshots.save(&meta, &image)?;
        Ok(Snapshot {
            meta,
            snapshot: image,
        })
    }
}

impl RaftStateMachine<TypeConfig> for MachineStore {
    type SnapshotData = Bytes;
    type SnapshotBuilder = MachineStore;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let applied = lock(&self.applied)?;
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            {
                let mut applied = lock(&self.applied)?;
                match &entry.payload {
                    EntryPayload::Normal(data) => applied
                        .machine
                        .apply(committed(&entry.log_id), &data.0)
                        .map_err(apply_error)?,
                    EntryPayload::Membership(m) => {
                        applied.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    }
                    EntryPayload::Blank => {}
                }
                applied.last_applied = Some(entry.log_id);
            }
            if let Some(responder) = responder {
                responder.send(());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Bytes) -> io::Result<()> {
        self.snapshots.save(meta, &snapshot)?;
        let mut applied = lock(&self.applied)?;
        if let Some(last) = &meta.last_log_id {
            applied
                .machine
                .install_snapshot(committed(last), &snapshot)
                .map_err(apply_error)?;
        }
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        self.snapshots.load()
    }
}
