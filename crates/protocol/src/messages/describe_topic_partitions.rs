//! DescribeTopicPartitions (key 75, KIP-966): topics and their partitions,
//! paged by a cursor so a topic with very many partitions is described
//! across several responses. Used by the Java admin client's describeTopics
//! (3.7+) and kafka-topics.sh --describe. Every version is flexible.
use crate::codec::{Decode, Encode, Reader, Result, Uuid, Version};
use crate::message;

message! {
    pub struct TopicRequest {
        name: String => [0, 99],
    }
}

message! {
    /// Where a page starts (request) or the next page would start (response).
    pub struct Cursor {
        topic_name: String => [0, 99],
        partition_index: i32 => [0, 99],
    }
}

/// A nullable struct: an int8 marker, -1 for null and 1 before the
/// struct's fields, as Kafka encodes nullable struct fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NullableCursor(pub Option<Cursor>);

impl Decode for NullableCursor {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        if i8::decode(r, v)? < 0 {
            Ok(NullableCursor(None))
        } else {
            Ok(NullableCursor(Some(Cursor::decode(r, v)?)))
        }
    }
}

impl Encode for NullableCursor {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        match &self.0 {
            None => (-1i8).encode(out, v),
            Some(cursor) => {
                1i8.encode(out, v);
                cursor.encode(out, v);
            }
        }
    }
}

message! {
    pub struct DescribeTopicPartitionsRequest {
        topics: Vec<TopicRequest> => [0, 99],
        response_partition_limit: i32 = 2000 => [0, 99],
        cursor: NullableCursor => [0, 99],
    }
}

message! {
    pub struct DescribeTopicPartitionsResponsePartition {
        error_code: i16 => [0, 99],
        partition_index: i32 => [0, 99],
        leader_id: i32 => [0, 99],
        leader_epoch: i32 = -1 => [0, 99],
        replica_nodes: Vec<i32> => [0, 99],
        isr_nodes: Vec<i32> => [0, 99],
        eligible_leader_replicas: Option<Vec<i32>> => [0, 99],
        last_known_elr: Option<Vec<i32>> => [0, 99],
        offline_replicas: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct DescribeTopicPartitionsResponseTopic {
        error_code: i16 => [0, 99],
        name: Option<String> => [0, 99],
        topic_id: Uuid => [0, 99],
        is_internal: bool => [0, 99],
        partitions: Vec<DescribeTopicPartitionsResponsePartition> => [0, 99],
        topic_authorized_operations: i32 = i32::MIN => [0, 99],
    }
}

message! {
    pub struct DescribeTopicPartitionsResponse {
        throttle_time_ms: i32 => [0, 99],
        topics: Vec<DescribeTopicPartitionsResponseTopic> => [0, 99],
        next_cursor: NullableCursor => [0, 99],
    }
}
