//! ElectLeaders (key 43): preferred or unclean leader elections, as
//! kafka-leader-election.sh asks for them. A null partition list means
//! every partition.
use crate::message;

message! {
    pub struct ElectLeadersTopicPartitions {
        topic: String => [0, 99],
        partitions: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct ElectLeadersRequest {
        // 0 preferred, 1 unclean; version 0 elects preferred leaders only.
        election_type: i8 => [1, 99],
        topic_partitions: Option<Vec<ElectLeadersTopicPartitions>> => [0, 99],
        timeout_ms: i32 = 60_000 => [0, 99],
    }
}

message! {
    pub struct ElectLeadersPartitionResult {
        partition_id: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct ReplicaElectionResult {
        topic: String => [0, 99],
        partition_result: Vec<ElectLeadersPartitionResult> => [0, 99],
    }
}

message! {
    pub struct ElectLeadersResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [1, 99],
        replica_election_results: Vec<ReplicaElectionResult> => [0, 99],
    }
}
