//! DescribeCluster (key 60). v2 (KIP-1073) can include fenced brokers and
//! says which are.
use crate::message;

message! {
    pub struct DescribeClusterRequest {
        include_cluster_authorized_operations: bool => [0, 99],
        endpoint_type: i8 = 1 => [1, 99],
        include_fenced_brokers: bool => [2, 99],
    }
}

message! {
    pub struct DescribeClusterBroker {
        broker_id: i32 => [0, 99],
        host: String => [0, 99],
        port: i32 => [0, 99],
        rack: Option<String> => [0, 99],
        is_fenced: bool => [2, 99],
    }
}

message! {
    pub struct DescribeClusterResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        endpoint_type: i8 = 1 => [1, 99],
        cluster_id: String => [0, 99],
        controller_id: i32 = -1 => [0, 99],
        brokers: Vec<DescribeClusterBroker> => [0, 99],
        cluster_authorized_operations: i32 = i32::MIN => [0, 99],
    }
}
