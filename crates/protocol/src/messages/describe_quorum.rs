//! DescribeQuorum (key 55, KIP-595): the metadata quorum's leader, epoch
//! and high watermark, and how far each voter and observer has fetched,
//! as `kafka-metadata-quorum.sh describe` shows them. Flexible from
//! version 0; v1 adds the fetch times (KIP-836), v2 directory ids, error
//! messages and the voters' listeners (KIP-853).
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct DescribeQuorumRequestPartition {
        partition_index: i32 => [0, 99],
    }
}

message! {
    pub struct DescribeQuorumRequestTopic {
        topic_name: String => [0, 99],
        partitions: Vec<DescribeQuorumRequestPartition> => [0, 99],
    }
}

message! {
    pub struct DescribeQuorumRequest {
        topics: Vec<DescribeQuorumRequestTopic> => [0, 99],
    }
}

message! {
    pub struct ReplicaState {
        replica_id: i32 => [0, 99],
        replica_directory_id: Uuid => [2, 99],
        log_end_offset: i64 = -1 => [0, 99],
        last_fetch_timestamp: i64 = -1 => [1, 99],
        last_caught_up_timestamp: i64 = -1 => [1, 99],
    }
}

message! {
    pub struct DescribeQuorumPartition {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [2, 99],
        leader_id: i32 = -1 => [0, 99],
        leader_epoch: i32 => [0, 99],
        high_watermark: i64 => [0, 99],
        current_voters: Vec<ReplicaState> => [0, 99],
        observers: Vec<ReplicaState> => [0, 99],
    }
}

message! {
    pub struct DescribeQuorumTopic {
        topic_name: String => [0, 99],
        partitions: Vec<DescribeQuorumPartition> => [0, 99],
    }
}

message! {
    pub struct DescribeQuorumListener {
        name: String => [2, 99],
        host: String => [2, 99],
        port: u16 => [2, 99],
    }
}

message! {
    pub struct DescribeQuorumNode {
        node_id: i32 => [2, 99],
        listeners: Vec<DescribeQuorumListener> => [2, 99],
    }
}

message! {
    pub struct DescribeQuorumResponse {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [2, 99],
        topics: Vec<DescribeQuorumTopic> => [0, 99],
        nodes: Vec<DescribeQuorumNode> => [2, 99],
    }
}
