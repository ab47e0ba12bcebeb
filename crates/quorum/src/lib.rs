//! The replicated metadata log: one node of a Raft quorum (openraft)
//! behind Tarn's own API, with its log, vote and snapshots on a
//! `tarn_storage::FileSystem`.
//!
//! Entries are opaque bytes; one [`Quorum::propose`] is one atomic entry.
//! Committed entries reach the caller's [`StateMachine`] in log order,
//! and a node restarts from its latest snapshot plus the log after it.
//! Peers talk through a [`Transport`]: [`sim::SimNetwork`] in process
//! (with loss, delay and partitions for tests) or [`tcp`] with Kafka-style
//! frames. No openraft type appears in this API.

mod config;
mod error;
mod frame;
mod log_store;
mod machine;
mod network;
mod quorum;
pub mod sim;
pub mod tcp;
mod types;

pub use config::{
    QuorumConfig, DEFAULT_ELECTION_TIMEOUT_MS, DEFAULT_FETCH_TIMEOUT_MS, DEFAULT_SNAPSHOT_EVERY,
};
pub use error::{ApplyError, QuorumError};
pub use machine::StateMachine;
pub use network::{
    is_quorum_api_key, RpcKind, Transport, TransportError, QUIET_OPENRAFT, QUORUM_API_KEY_BASE,
};
pub use quorum::{Committed, FollowersAwaited, Proposal, Quorum, QuorumStatus};

/// A controller's node id (Kafka's `node.id`, non-negative).
pub type NodeId = u64;
