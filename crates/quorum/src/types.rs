//! openraft's type configuration for the metadata log. Private: nothing
//! here appears in the crate's public API.
//!
//! The runtime is tokio with openraft's `DeterministicRng`, so the election
//! timeouts are drawn from a seed (see `Quorum::start`): with tokio's paused
//! clock a simulation replays from its seed.

use bytes::Bytes;
use openraft_rt::deterministic_rng::DeterministicRng;
use openraft_rt_tokio::TokioRuntime;

/// One entry's opaque bytes (openraft wants its data `Display`). Encoded
/// with [`text_or_bytes`]: in the log store and in AppendEntries alike.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Data(#[serde(serialize_with = "text_or_bytes")] pub Bytes);

/// Serializes bytes that are UTF-8 text (the metadata's entries and
/// images are JSON) as a string, and any others as serde's bytes. In JSON
/// serde's bytes are an array of numbers, about 3.6 characters a byte; a
/// string of JSON text is about 1.1 (its quotes escaped). `Bytes`'
/// deserializer takes either form (serde_json hands it a string's
/// unescaped bytes), so builds that wrote arrays read the strings and this
/// one reads their arrays: no version bump, and a mixed quorum during a
/// rolling upgrade understands itself both ways.
pub(crate) fn text_or_bytes<S: serde::Serializer>(
    bytes: &Bytes,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serializer.serialize_str(text),
        Err(_) => serializer.serialize_bytes(bytes),
    }
}

impl std::fmt::Display for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.0.len())
    }
}

/// A member of the quorum as the membership in the log records it: its
/// controller listener (host:port) and, in a dynamic quorum (KIP-853), the
/// directory id it was formatted or added with. A voter is that pair: a
/// node whose data directory was wiped and formatted again has a new
/// directory id, and is refused the old one's RPCs (see [`crate::tcp`]).
/// Reads the `{"addr": ...}` of openraft's `BasicNode`, which earlier
/// builds wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub addr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory_id: Option<String>,
}

openraft::declare_raft_types!(
    /// Entries are opaque bytes; applying one answers nothing.
    pub TypeConfig:
        D = Data,
        R = (),
        NodeId = u64,
        Node = Member,
        AsyncRuntime = DeterministicRng<TokioRuntime>,
);

pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, Bytes>;

#[cfg(test)]
mod tests {
    use super::*;

    /// What builds before `text_or_bytes` derived: serde's own `Bytes`.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Before(Bytes);

    #[test]
    fn text_is_a_string_and_both_encodings_read_both() {
        let text = Bytes::from_static(br#"{"version":1,"records":[{"name":"a\"b\n"}]}"#);
        let binary = Bytes::from_static(&[0, 159, 146, 150, 255, b'"']);
        for bytes in [text.clone(), binary.clone(), Bytes::new()] {
            let now = serde_json::to_vec(&Data(bytes.clone())).unwrap();
            let before = serde_json::to_vec(&Before(bytes.clone())).unwrap();
            // Each reads what the other wrote, byte for byte.
            assert_eq!(
                serde_json::from_slice::<Data>(&before).unwrap(),
                Data(bytes.clone())
            );
            assert_eq!(
                serde_json::from_slice::<Before>(&now).unwrap(),
                Before(bytes.clone())
            );
            assert_eq!(serde_json::from_slice::<Data>(&now).unwrap(), Data(bytes));
        }
        let encoded = serde_json::to_string(&Data(text.clone())).unwrap();
        assert!(encoded.starts_with('"'), "{encoded}");
        let before = serde_json::to_string(&Before(text)).unwrap();
        assert!(
            encoded.len() * 2 < before.len(),
            "{encoded} against {before}"
        );
        let encoded = serde_json::to_string(&Data(binary)).unwrap();
        assert!(encoded.starts_with('['), "{encoded}");
    }

    #[test]
    fn members_read_what_basic_nodes_wrote() {
        let before = serde_json::to_vec(&openraft::impls::BasicNode::new("h:1")).unwrap();
        let member: Member = serde_json::from_slice(&before).unwrap();
        assert_eq!(
            member,
            Member {
                addr: "h:1".into(),
                directory_id: None
            }
        );
        // Without a directory id, a member is written as BasicNode was.
        assert_eq!(serde_json::to_vec(&member).unwrap(), before);
        let with = Member {
            addr: "h:1".into(),
            directory_id: Some("d".into()),
        };
        let json = serde_json::to_vec(&with).unwrap();
        assert_eq!(serde_json::from_slice::<Member>(&json).unwrap(), with);
    }
}
