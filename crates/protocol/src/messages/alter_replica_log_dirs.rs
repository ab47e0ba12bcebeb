//! AlterReplicaLogDirs (key 34): moves replicas between a broker's log
//! directories, as kafka-reassign-partitions.sh asks when its JSON names
//! `log_dirs`. Version 0 went in Kafka 4.0 (KIP-896).
use crate::message;

message! {
    pub struct AlterReplicaLogDirTopic {
        name: String => [1, 99],
        partitions: Vec<i32> => [1, 99],
    }
}

message! {
    pub struct AlterReplicaLogDir {
        path: String => [1, 99],
        topics: Vec<AlterReplicaLogDirTopic> => [1, 99],
    }
}

message! {
    pub struct AlterReplicaLogDirsRequest {
        dirs: Vec<AlterReplicaLogDir> => [1, 99],
    }
}

message! {
    pub struct AlterReplicaLogDirPartitionResult {
        partition_index: i32 => [1, 99],
        error_code: i16 => [1, 99],
    }
}

message! {
    pub struct AlterReplicaLogDirTopicResult {
        topic_name: String => [1, 99],
        partitions: Vec<AlterReplicaLogDirPartitionResult> => [1, 99],
    }
}

message! {
    pub struct AlterReplicaLogDirsResponse {
        throttle_time_ms: i32 => [1, 99],
        results: Vec<AlterReplicaLogDirTopicResult> => [1, 99],
    }
}
