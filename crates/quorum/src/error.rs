//! The errors of the quorum API.

use std::io;

use crate::NodeId;

/// An error a caller may see from [`crate::Quorum`].
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// This node is not the leader; `leader` is the one it knows of.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    /// The entry was appended by a leader that lost its leadership before
    /// the entry was known to commit: it may or may not commit later.
    #[error("leadership changed; commit status unknown (leader: {leader:?})")]
    Uncertain { leader: Option<NodeId> },
    /// The quorum stopped: shut down, or a fatal storage error.
    #[error("quorum stopped: {0}")]
    Shutdown(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A configuration this crate cannot run with.
    #[error("invalid quorum config: {0}")]
    Config(String),
    /// A peer's RPC could not be decoded or answered.
    #[error("rpc: {0}")]
    Rpc(String),
    /// An RPC meant for another node (a voter address that names the
    /// wrong node, or a node of another cluster on a reused port); Kafka
    /// answers such requests with INVALID_VOTER_KEY.
    #[error(
        "this RPC is for node {to} but reached node {this}: \
         check controller.quorum.voters (or the bootstrap servers) on the sender"
    )]
    Misdirected { to: NodeId, this: NodeId },
    /// An RPC meant for this node id with another data directory: a
    /// voter whose directory was wiped or replaced (and formatted again)
    /// is not that voter, whose log and votes it lost (KIP-853; Kafka's
    /// INVALID_VOTER_KEY). It takes part again once removed and re-added.
    #[error(
        "this RPC is for node {to} with directory {theirs}, but this node's directory is {ours}: \
         a node formatted again is not the voter it replaced; remove that voter \
         (`kafka-metadata-quorum.sh remove-controller`) and add this one (`add-controller`)"
    )]
    OtherDirectory {
        to: NodeId,
        theirs: String,
        ours: String,
    },
    /// An RPC from a node of another cluster (Kafka's
    /// INCONSISTENT_CLUSTER_ID).
    #[error(
        "INCONSISTENT_CLUSTER_ID: this RPC is for cluster {theirs}, \
         this node belongs to cluster {ours}"
    )]
    InconsistentClusterId { theirs: String, ours: String },
    /// The node to add is a voter already (Kafka's DUPLICATE_VOTER).
    #[error("node {0} is a voter already")]
    DuplicateVoter(NodeId),
    /// The node to remove is not a voter (Kafka's VOTER_NOT_FOUND).
    #[error("node {0} is not a voter")]
    VoterNotFound(NodeId),
    /// A voter change that cannot be made now (another is under way).
    #[error("{0}")]
    VoterChangeRefused(String),
    /// The node to remove is the only voter: no quorum would be left.
    #[error("node {0} is the only voter: removing it would leave no quorum")]
    LastVoter(NodeId),
    /// The node to add did not catch up with the leader's log in time (it
    /// is not running, or cannot be reached at the address given).
    #[error(
        "node {id} did not catch up with the metadata log within {waited:?}; it was not added"
    )]
    NotCaughtUp {
        id: NodeId,
        waited: std::time::Duration,
    },
}

impl QuorumError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> QuorumError {
        QuorumError::Io {
            context: context.into(),
            source,
        }
    }
}

/// What a [`crate::StateMachine`] returns when it cannot apply an entry;
/// the node then stops, as on a storage error.
pub type ApplyError = Box<dyn std::error::Error + Send + Sync>;
