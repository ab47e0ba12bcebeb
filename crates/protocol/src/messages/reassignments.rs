//! AlterPartitionReassignments (key 45) and ListPartitionReassignments
//! (key 46), KIP-455: moving a partition's replicas to other brokers, as
//! kafka-reassign-partitions.sh asks for it. Version 1 of the alter
//! request (KIP-860) may forbid changing the replication factor.
use crate::message;

message! {
    pub struct ReassignablePartition {
        partition_index: i32 => [0, 99],
        // Null cancels the partition's reassignment in progress.
        replicas: Option<Vec<i32>> => [0, 99],
    }
}

message! {
    pub struct ReassignableTopic {
        name: String => [0, 99],
        partitions: Vec<ReassignablePartition> => [0, 99],
    }
}

message! {
    pub struct AlterPartitionReassignmentsRequest {
        timeout_ms: i32 = 60_000 => [0, 99],
        allow_replication_factor_change: bool = true => [1, 99],
        topics: Vec<ReassignableTopic> => [0, 99],
    }
}

message! {
    pub struct ReassignablePartitionResponse {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct ReassignableTopicResponse {
        name: String => [0, 99],
        partitions: Vec<ReassignablePartitionResponse> => [0, 99],
    }
}

message! {
    pub struct AlterPartitionReassignmentsResponse {
        throttle_time_ms: i32 => [0, 99],
        allow_replication_factor_change: bool = true => [1, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        responses: Vec<ReassignableTopicResponse> => [0, 99],
    }
}

message! {
    pub struct ListPartitionReassignmentsTopics {
        name: String => [0, 99],
        partition_indexes: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct ListPartitionReassignmentsRequest {
        timeout_ms: i32 = 60_000 => [0, 99],
        // Null lists every reassignment in progress.
        topics: Option<Vec<ListPartitionReassignmentsTopics>> => [0, 99],
    }
}

message! {
    pub struct OngoingPartitionReassignment {
        partition_index: i32 => [0, 99],
        replicas: Vec<i32> => [0, 99],
        adding_replicas: Vec<i32> => [0, 99],
        removing_replicas: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct OngoingTopicReassignment {
        name: String => [0, 99],
        partitions: Vec<OngoingPartitionReassignment> => [0, 99],
    }
}

message! {
    pub struct ListPartitionReassignmentsResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        topics: Vec<OngoingTopicReassignment> => [0, 99],
    }
}
