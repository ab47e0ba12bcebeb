//! UnregisterBroker (key 64, KIP-631): removes a broker's registration
//! from the cluster, as `kafka-cluster.sh unregister` asks once a broker
//! is gone for good. Flexible from version 0.
use crate::message;

message! {
    pub struct UnregisterBrokerRequest {
        broker_id: i32 => [0, 99],
    }
}

message! {
    pub struct UnregisterBrokerResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}
