//! DeleteRecords (key 21).
use crate::message;

message! {
    pub struct DeleteRecordsPartition {
        partition_index: i32 => [0, 99],
        // -1 means the high watermark.
        offset: i64 => [0, 99],
    }
}

message! {
    pub struct DeleteRecordsTopic {
        name: String => [0, 99],
        partitions: Vec<DeleteRecordsPartition> => [0, 99],
    }
}

message! {
    pub struct DeleteRecordsRequest {
        topics: Vec<DeleteRecordsTopic> => [0, 99],
        timeout_ms: i32 => [0, 99],
    }
}

message! {
    pub struct DeleteRecordsPartitionResult {
        partition_index: i32 => [0, 99],
        low_watermark: i64 => [0, 99],
        error_code: i16 => [0, 99],
    }
}

message! {
    pub struct DeleteRecordsTopicResult {
        name: String => [0, 99],
        partitions: Vec<DeleteRecordsPartitionResult> => [0, 99],
    }
}

message! {
    pub struct DeleteRecordsResponse {
        throttle_time_ms: i32 => [0, 99],
        topics: Vec<DeleteRecordsTopicResult> => [0, 99],
    }
}
