//! The embedded "consumer" protocol: the subscription a consumer puts in
//! its JoinGroup metadata and the assignment its group leader hands out
//! through SyncGroup. Both are classic (non-flexible) structures behind a
//! 2-byte version; every version extends the one before it, so a reader
//! that knows version N can read the prefix of any later version, which
//! is what Kafka's coordinator does to learn the subscribed topics.
use bytes::{BufMut, Bytes};

use crate::codec::{Decode, DecodeError, Encode, Reader, Version};
use crate::message;

/// The `protocol_type` consumers join with.
pub const PROTOCOL_TYPE: &str = "consumer";
/// The newest structure version this module writes.
pub const HIGHEST_VERSION: i16 = 3;

message! {
    pub struct TopicPartitions {
        topic: String => [0, 99],
        partitions: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct Subscription {
        topics: Vec<String> => [0, 99],
        user_data: Option<Bytes> => [0, 99],
        owned_partitions: Vec<TopicPartitions> => [1, 99],
        generation_id: i32 = -1 => [2, 99],
        rack_id: Option<String> => [3, 99],
    }
}

message! {
    pub struct Assignment {
        assigned_partitions: Vec<TopicPartitions> => [0, 99],
        user_data: Option<Bytes> => [0, 99],
    }
}

fn classic(version: i16) -> Version {
    Version {
        version,
        flexible: false,
    }
}

/// Reads a version-prefixed structure, reading a version newer than
/// `HIGHEST_VERSION` as its known prefix. Trailing bytes are allowed for
/// that reason.
fn decode_prefixed<T: Decode>(bytes: &Bytes) -> Result<(i16, T), DecodeError> {
    let mut r = Reader::new(bytes.clone());
    let version = r.i16()?;
    if version < 0 {
        return Err(DecodeError::InvalidLength(i64::from(version)));
    }
    let value = T::decode(&mut r, classic(version.min(HIGHEST_VERSION)))?;
    Ok((version, value))
}

fn encode_prefixed<T: Encode>(value: &T, version: i16) -> Bytes {
    let mut out = Vec::new();
    out.put_i16(version);
    value.encode(&mut out, classic(version));
    Bytes::from(out)
}

impl Subscription {
    pub fn decode_prefixed(bytes: &Bytes) -> Result<Subscription, DecodeError> {
        decode_prefixed(bytes).map(|(_, s)| s)
    }

    pub fn encode_prefixed(&self, version: i16) -> Bytes {
        encode_prefixed(self, version)
    }

    /// The subscribed topics, read from the version 0 prefix whatever
    /// version the bytes say, as Kafka's group coordinator reads them: a
    /// subscription whose later fields are cut short or malformed still
    /// names its topics.
    pub fn decode_topics(bytes: &Bytes) -> Result<Vec<String>, DecodeError> {
        let mut r = Reader::new(bytes.clone());
        let version = r.i16()?;
        if version < 0 {
            return Err(DecodeError::InvalidLength(i64::from(version)));
        }
        Ok(Subscription::decode(&mut r, classic(0))?.topics)
    }
}

impl Assignment {
    pub fn decode_prefixed(bytes: &Bytes) -> Result<Assignment, DecodeError> {
        decode_prefixed(bytes).map(|(_, a)| a)
    }

    pub fn encode_prefixed(&self, version: i16) -> Bytes {
        encode_prefixed(self, version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_read_from_the_version_0_prefix() {
        // Version 1 without its owned partitions: no whole v1 structure,
        // but its topics (none here, then "a") are there.
        let cut = Bytes::from_static(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(Subscription::decode_prefixed(&cut).is_err());
        assert_eq!(
            Subscription::decode_topics(&cut).unwrap(),
            Vec::<String>::new()
        );
        let sub = Subscription {
            topics: vec!["a".into()],
            ..Default::default()
        };
        let mut cut = sub.encode_prefixed(3).to_vec();
        cut.truncate(cut.len() - 3);
        assert_eq!(
            Subscription::decode_topics(&Bytes::from(cut)).unwrap(),
            vec!["a".to_owned()]
        );
        assert!(Subscription::decode_topics(&Bytes::from_static(&[0, 0, 0, 0, 0, 1])).is_err());
    }

    #[test]
    fn subscription_round_trips_and_newer_versions_read_as_prefix() {
        let sub = Subscription {
            topics: vec!["a".into(), "b".into()],
            user_data: None,
            owned_partitions: vec![TopicPartitions {
                topic: "a".into(),
                partitions: vec![0, 2],
            }],
            generation_id: 4,
            rack_id: Some("r1".into()),
        };
        let bytes = sub.encode_prefixed(3);
        assert_eq!(Subscription::decode_prefixed(&bytes).unwrap(), sub);
        // A future version 9 with extra trailing fields still yields topics.
        let mut future = bytes.to_vec();
        future[..2].copy_from_slice(&9i16.to_be_bytes());
        future.extend_from_slice(&[1, 2, 3]);
        let read = Subscription::decode_prefixed(&Bytes::from(future)).unwrap();
        assert_eq!(read.topics, sub.topics);
        // Version 0 has only topics and user data.
        let v0 = sub.encode_prefixed(0);
        assert_eq!(v0.len(), 2 + 4 + 3 + 3 + 4);
    }

    #[test]
    fn assignment_round_trips_and_garbage_is_an_error() {
        let a = Assignment {
            assigned_partitions: vec![TopicPartitions {
                topic: "t".into(),
                partitions: vec![1],
            }],
            user_data: Some(Bytes::from_static(b"x")),
        };
        assert_eq!(
            Assignment::decode_prefixed(&a.encode_prefixed(0)).unwrap(),
            a
        );
        assert!(Assignment::decode_prefixed(&Bytes::from_static(&[0, 0, 0, 0, 0, 9])).is_err());
        assert!(Assignment::decode_prefixed(&Bytes::from_static(&[0xff, 0xff])).is_err());
    }
}
