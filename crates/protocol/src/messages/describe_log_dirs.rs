//! DescribeLogDirs (key 35): the log directories of a broker and the size
//! of each partition in them (kafka-log-dirs.sh, AdminClient
//! describeLogDirs).
use crate::message;

message! {
    pub struct DescribableLogDirTopic {
        topic: String => [0, 99],
        partitions: Vec<i32> => [0, 99],
    }
}

message! {
    pub struct DescribeLogDirsRequest {
        // None: every topic.
        topics: Option<Vec<DescribableLogDirTopic>> => [0, 99],
    }
}

message! {
    pub struct DescribeLogDirsPartition {
        partition_index: i32 => [0, 99],
        partition_size: i64 => [0, 99],
        offset_lag: i64 => [0, 99],
        is_future_key: bool => [0, 99],
    }
}

message! {
    pub struct DescribeLogDirsTopic {
        name: String => [0, 99],
        partitions: Vec<DescribeLogDirsPartition> => [0, 99],
    }
}

message! {
    pub struct DescribeLogDirsResult {
        error_code: i16 => [0, 99],
        log_dir: String => [0, 99],
        topics: Vec<DescribeLogDirsTopic> => [0, 99],
        total_bytes: i64 = -1 => [4, 99],
        usable_bytes: i64 = -1 => [4, 99],
        is_cordoned: bool => [5, 99],
    }
}

message! {
    pub struct DescribeLogDirsResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [3, 99],
        results: Vec<DescribeLogDirsResult> => [0, 99],
    }
}
