//! `QuorumConfig`: what a node needs to join the quorum, with Kafka's
//! `controller.quorum.*` timeouts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::QuorumError;
use crate::NodeId;

/// Default of `controller.quorum.election.timeout.ms`.
pub const DEFAULT_ELECTION_TIMEOUT_MS: u64 = 1000;
/// Default of `controller.quorum.fetch.timeout.ms`.
pub const DEFAULT_FETCH_TIMEOUT_MS: u64 = 2000;
/// Default number of entries between snapshots.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 1000;

/// One node's quorum settings.
///
/// Timeouts map onto openraft as follows: a follower that hears nothing
/// from a leader for a random time in `[election_timeout_ms, max)` starts
/// an election, where `max` is a quarter of the way to `fetch_timeout_ms`
/// (at least `election_timeout_ms + 1`); the leader sends heartbeats every
/// `election_timeout_ms / 4`. openraft's followers also refuse votes for
/// `max` after the last heartbeat (the leader's lease) and only then start
/// their election timeout, so a dead leader is replaced about `max` plus
/// an election timeout after it stopped: with Kafka's defaults (1000,
/// 2000), 2.25 to 2.5 s. Kafka itself waits for the whole fetch timeout;
/// a quarter of it keeps a failover under 3 s.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub node_id: NodeId,
    /// The initial voter set (`controller.quorum.voters`, or the voters a
    /// dynamic quorum was formatted with): id -> host:port of each
    /// controller listener. Empty on a node that joins a running quorum
    /// (formatted with `--no-initial-controllers`): it waits, as a learner,
    /// until the leader adds it ([`crate::Quorum::add_voter`]).
    pub voters: BTreeMap<NodeId, String>,
    /// The initial voters' directory ids, in a dynamic quorum formatted
    /// with them (KIP-853); none in a static one.
    pub voter_directory_ids: BTreeMap<NodeId, String>,
    /// This node's directory id (`meta.properties`' `directory.id`): RPCs
    /// meant for the same node id with another directory id (a voter whose
    /// directory this one replaced) are refused.
    pub directory_id: Option<String>,
    /// `controller.quorum.election.timeout.ms`.
    pub election_timeout_ms: u64,
    /// `controller.quorum.fetch.timeout.ms`.
    pub fetch_timeout_ms: u64,
    /// A snapshot is taken every this many entries, and the log behind it
    /// purged, so start-up replays at most about this many entries.
    pub snapshot_every: u64,
    /// The directory of the log, vote and snapshot,
    /// e.g. `<metadata.log.dir>/__cluster_metadata-0`.
    pub dir: PathBuf,
    /// Seed of the election-timeout jitter; `None` draws one from the
    /// clock. Simulations set it so a run replays.
    pub rng_seed: Option<u64>,
}

impl QuorumConfig {
    /// A config with Kafka's default timeouts.
    pub fn new(node_id: NodeId, voters: BTreeMap<NodeId, String>, dir: PathBuf) -> QuorumConfig {
        QuorumConfig {
            node_id,
            voters,
            voter_directory_ids: BTreeMap::new(),
            directory_id: None,
            election_timeout_ms: DEFAULT_ELECTION_TIMEOUT_MS,
            fetch_timeout_ms: DEFAULT_FETCH_TIMEOUT_MS,
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            dir,
            rng_seed: None,
        }
    }

    pub(crate) fn heartbeat_interval_ms(&self) -> u64 {
        (self.election_timeout_ms / 4).max(1)
    }

    pub(crate) fn raft_config(&self) -> Result<openraft::Config, QuorumError> {
        if !self.voters.is_empty() && !self.voters.contains_key(&self.node_id) {
            return Err(QuorumError::Config(format!(
                "node {} is not in the voter set {:?}",
                self.node_id,
                self.voters.keys().collect::<Vec<_>>()
            )));
        }
        if self.snapshot_every == 0 {
            return Err(QuorumError::Config("snapshot_every must be > 0".into()));
        }
        let config = openraft::Config {
            cluster_name: "__cluster_metadata".to_string(),
            election_timeout_min: self.election_timeout_ms,
            election_timeout_max: (self.election_timeout_ms
                + self
                    .fetch_timeout_ms
                    .saturating_sub(self.election_timeout_ms)
                    / 4)
            .max(self.election_timeout_ms + 1),
            heartbeat_interval: self.heartbeat_interval_ms(),
            install_snapshot_timeout: self.fetch_timeout_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            // Purge everything the snapshot covers: start-up then reads the
            // snapshot plus at most `snapshot_every` entries, and a follower
            // that fell behind the snapshot is sent the snapshot.
            max_in_snapshot_log_to_keep: 0,
            // A voter whose disk was lost or replaced comes back with a
            // shorter log than the leader last saw; without this openraft's
            // leader panics on it. The leader replicates to it afresh (the
            // node itself then stops if it belongs to another cluster).
            allow_log_reversion: Some(true),
            // A node that led before it stopped comes back a follower and
            // is elected again (Kafka's resigned leader does the same). Its
            // log holds entries of its own term that may have committed
            // while it was down without its knowing (the commit index is
            // not saved); resuming as leader, openraft would serve read
            // barriers below them, and a controller would plan on an image
            // without changes the cluster had acknowledged.
            enable_leader_restore: Some(false),
            ..openraft::Config::default()
        };
        config
            .validate()
            .map_err(|e| QuorumError::Config(e.to_string()))
    }
}
