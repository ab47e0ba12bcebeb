//! The records of `__consumer_offsets`, in Kafka's own key and value
//! schemas so that Kafka's tools read Tarn's offsets topic and back:
//! an offset commit is keyed by `OffsetCommitKey` (key version 0-1:
//! group, topic, partition) with an `OffsetCommitValue`, and a group's
//! membership by `GroupMetadataKey` (key version 2: group) with a
//! `GroupMetadataValue`. Every key and value starts with its 2-byte schema
//! version. A null value is a tombstone: the offset or group is gone.
//!
//! Tarn writes OffsetCommitValue v3 (v1 when the commit carried an expire
//! timestamp) and GroupMetadataValue v3, as Kafka 3.x does, and reads
//! every version Kafka has defined. Anything else read from disk is an
//! error for the loader to report, never a panic.

use bytes::{BufMut, Bytes};

use tarn_protocol::codec::{Decode, DecodeError, Encode, Reader, Version};
use tarn_protocol::message;

/// Key versions 0 and 1 are offset commits; 2 is group metadata.
const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
/// The value versions Kafka 3.x writes.
const OFFSET_VALUE_VERSION: i16 = 3;
const OFFSET_VALUE_VERSION_WITH_EXPIRY: i16 = 1;
const GROUP_VALUE_VERSION: i16 = 3;
/// The newest value versions defined; version 4 of both is flexible.
const VALUE_VERSION_MAX: i16 = 4;
const VALUE_FLEXIBLE_MIN: i16 = 4;

message! {
    pub struct OffsetCommitKey {
        group: String => [0, 1],
        topic: String => [0, 1],
        partition: i32 => [0, 1],
    }
}

message! {
    pub struct OffsetCommitValue {
        offset: i64 => [0, 99],
        leader_epoch: i32 = -1 => [3, 99],
        metadata: String => [0, 99],
        commit_timestamp: i64 => [0, 99],
        expire_timestamp: i64 = -1 => [1, 1],
    }
}

message! {
    pub struct GroupMetadataKey {
        group: String => [2, 2],
    }
}

message! {
    pub struct MemberMetadataValue {
        member_id: String => [0, 99],
        group_instance_id: Option<String> => [3, 99],
        client_id: String => [0, 99],
        client_host: String => [0, 99],
        rebalance_timeout: i32 = -1 => [1, 99],
        session_timeout: i32 => [0, 99],
        subscription: Bytes => [0, 99],
        assignment: Bytes => [0, 99],
    }
}

message! {
    pub struct GroupMetadataValue {
        protocol_type: String => [0, 99],
        generation: i32 => [0, 99],
        protocol: Option<String> => [0, 99],
        leader: Option<String> => [0, 99],
        current_state_timestamp: i64 = -1 => [2, 99],
        members: Vec<MemberMetadataValue> => [0, 99],
    }
}

/// A committed offset as the coordinator keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    pub offset: i64,
    /// -1 when the client did not say.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only from OffsetCommit v2-4 with an explicit retention time.
    pub expire_timestamp_ms: Option<i64>,
}

/// One record of the offsets topic, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum CoordinatorRecord {
    Offset {
        group: String,
        topic: String,
        partition: i32,
        /// None: tombstone.
        value: Option<OffsetAndMetadata>,
    },
    Group {
        group: String,
        /// None: tombstone.
        value: Option<GroupMetadataValue>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record has no key")]
    MissingKey,
    #[error("unknown key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unknown value version {0}")]
    UnknownValueVersion(i16),
    #[error("malformed key or value: {0}")]
    Decode(#[from] DecodeError),
}

fn classic(version: i16) -> Version {
    Version {
        version,
        flexible: false,
    }
}

fn prefixed<T: Encode>(version: i16, value: &T, v: Version) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.put_i16(version);
    value.encode(&mut out, v);
    out
}

fn read_version(r: &mut Reader) -> Result<i16, RecordError> {
    Ok(r.i16()?)
}

impl CoordinatorRecord {
    pub fn group_id(&self) -> &str {
        match self {
            CoordinatorRecord::Offset { group, .. } | CoordinatorRecord::Group { group, .. } => {
                group
            }
        }
    }

    /// The record's key and value bytes (None for a tombstone).
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        match self {
            CoordinatorRecord::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                let key = OffsetCommitKey {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                };
                let key = prefixed(OFFSET_KEY_VERSION, &key, classic(OFFSET_KEY_VERSION));
                let value = value.as_ref().map(|o| {
                    let version = if o.expire_timestamp_ms.is_some() {
                        OFFSET_VALUE_VERSION_WITH_EXPIRY
                    } else {
                        OFFSET_VALUE_VERSION
                    };
                    let v = OffsetCommitValue {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                        metadata: o.metadata.clone(),
                        commit_timestamp: o.commit_timestamp_ms,
                        expire_timestamp: o.expire_timestamp_ms.unwrap_or(-1),
                    };
                    prefixed(version, &v, classic(version))
                });
                (key, value)
            }
            CoordinatorRecord::Group { group, value } => {
                let key = GroupMetadataKey {
                    group: group.clone(),
                };
                let key = prefixed(GROUP_KEY_VERSION, &key, classic(GROUP_KEY_VERSION));
                let value = value
                    .as_ref()
                    .map(|v| prefixed(GROUP_VALUE_VERSION, v, classic(GROUP_VALUE_VERSION)));
                (key, value)
            }
        }
    }

    /// Decodes one record's key and value as read from the log.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Self, RecordError> {
        let key = key.ok_or(RecordError::MissingKey)?;
        let mut r = Reader::new(Bytes::copy_from_slice(key));
        let key_version = read_version(&mut r)?;
        match key_version {
            0..=1 => {
                let k = OffsetCommitKey::decode(&mut r, classic(key_version))?;
                let value = value.map(decode_offset_value).transpose()?;
                Ok(CoordinatorRecord::Offset {
                    group: k.group,
                    topic: k.topic,
                    partition: k.partition,
                    value,
                })
            }
            2 => {
                let k = GroupMetadataKey::decode(&mut r, classic(key_version))?;
                let value = value.map(decode_group_value).transpose()?;
                Ok(CoordinatorRecord::Group {
                    group: k.group,
                    value,
                })
            }
            other => Err(RecordError::UnknownKeyVersion(other)),
        }
    }
}

fn value_version(r: &mut Reader) -> Result<Version, RecordError> {
    let version = read_version(r)?;
    if !(0..=VALUE_VERSION_MAX).contains(&version) {
        return Err(RecordError::UnknownValueVersion(version));
    }
    Ok(Version::new(version, VALUE_FLEXIBLE_MIN))
}

fn decode_offset_value(bytes: &[u8]) -> Result<OffsetAndMetadata, RecordError> {
    let mut r = Reader::new(Bytes::copy_from_slice(bytes));
    let v = value_version(&mut r)?;
    let value = OffsetCommitValue::decode(&mut r, v)?;
    Ok(OffsetAndMetadata {
        offset: value.offset,
        leader_epoch: value.leader_epoch,
        metadata: value.metadata,
        commit_timestamp_ms: value.commit_timestamp,
        expire_timestamp_ms: (value.expire_timestamp != -1).then_some(value.expire_timestamp),
    })
}

fn decode_group_value(bytes: &[u8]) -> Result<GroupMetadataValue, RecordError> {
    let mut r = Reader::new(Bytes::copy_from_slice(bytes));
    let v = value_version(&mut r)?;
    let mut value = GroupMetadataValue::decode(&mut r, v)?;
    if v.version == 0 {
        // Version 0 had no rebalance timeout: Kafka uses the session timeout.
        for member in &mut value.members {
            member.rebalance_timeout = member.session_timeout;
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(expire: Option<i64>) -> CoordinatorRecord {
        CoordinatorRecord::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 2,
            value: Some(OffsetAndMetadata {
                offset: 42,
                leader_epoch: 7,
                metadata: "m".into(),
                commit_timestamp_ms: 1000,
                expire_timestamp_ms: expire,
            }),
        }
    }

    #[test]
    fn offset_commit_bytes_are_kafkas() {
        let (key, value) = offset(None).encode();
        // version 1, "g", "t", partition 2
        assert_eq!(key, vec![0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 2]);
        let value = value.unwrap();
        let mut expected = vec![0, 3];
        expected.extend_from_slice(&42i64.to_be_bytes());
        expected.extend_from_slice(&7i32.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b'm']);
        expected.extend_from_slice(&1000i64.to_be_bytes());
        assert_eq!(value, expected);
        let back = CoordinatorRecord::decode(Some(&key), Some(&value)).unwrap();
        assert_eq!(back, offset(None));
    }

    #[test]
    fn expire_timestamp_uses_value_version_1() {
        let (key, value) = offset(Some(5000)).encode();
        let value = value.unwrap();
        assert_eq!(&value[..2], &[0, 1]);
        let back = CoordinatorRecord::decode(Some(&key), Some(&value)).unwrap();
        // v1 has no leader epoch: it reads back as -1.
        match back {
            CoordinatorRecord::Offset { value: Some(v), .. } => {
                assert_eq!(v.expire_timestamp_ms, Some(5000));
                assert_eq!(v.leader_epoch, -1);
                assert_eq!(v.offset, 42);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn group_metadata_round_trips_and_tombstones_decode() {
        let record = CoordinatorRecord::Group {
            group: "g".into(),
            value: Some(GroupMetadataValue {
                protocol_type: "consumer".into(),
                generation: 3,
                protocol: Some("range".into()),
                leader: Some("m1".into()),
                current_state_timestamp: 99,
                members: vec![MemberMetadataValue {
                    member_id: "m1".into(),
                    group_instance_id: Some("i1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout: 300000,
                    session_timeout: 45000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"asg"),
                }],
            }),
        };
        let (key, value) = record.encode();
        assert_eq!(key, vec![0, 2, 0, 1, b'g']);
        assert_eq!(&value.as_ref().unwrap()[..2], &[0, 3]);
        assert_eq!(
            CoordinatorRecord::decode(Some(&key), value.as_deref()).unwrap(),
            record
        );
        let tombstone = CoordinatorRecord::decode(Some(&key), None).unwrap();
        assert_eq!(
            tombstone,
            CoordinatorRecord::Group {
                group: "g".into(),
                value: None
            }
        );
    }

    #[test]
    fn bad_bytes_are_errors() {
        assert_eq!(
            CoordinatorRecord::decode(None, None),
            Err(RecordError::MissingKey)
        );
        assert_eq!(
            CoordinatorRecord::decode(Some(&[0, 9, 0]), None),
            Err(RecordError::UnknownKeyVersion(9))
        );
        let (key, _) = offset(None).encode();
        assert_eq!(
            CoordinatorRecord::decode(Some(&key), Some(&[0, 7])),
            Err(RecordError::UnknownValueVersion(7))
        );
        assert!(CoordinatorRecord::decode(Some(&key[..5]), None).is_err());
        assert!(CoordinatorRecord::decode(Some(&key), Some(&[0, 3, 1])).is_err());
    }
}
