//! openraft's type configuration for the metadata log. Private: nothing
//! here appears in the crate's public API.
//!
//! The runtime is tokio with openraft's `DeterministicRng`, so the election
//! timeouts are drawn from a seed (see `Quorum::start`): with tokio's paused
//! clock a simulation replays from its seed.

use bytes::Bytes;
use openraft_rt::deterministic_rng::DeterministicRng;
use openraft_rt_tokio::TokioRuntime;

/// One entry's opaque bytes (openraft wants its data `Display`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Data(pub Bytes);

impl std::fmt::Display for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

openraft::declare_raft_types!(
    /// Entries are opaque bytes; applying one answers nothing.
    pub TypeConfig:
        D = Data,
        R = (),
        NodeId = u64,
        Node = openraft::impls::BasicNode,
        AsyncRuntime = DeterministicRng<TokioRuntime>,
);

pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Bytes>;
