//! InitProducerId (key 22). v5 (KIP-890) only tells the broker the client
//! understands TRANSACTION_ABORTABLE.
use crate::message;

message! {
    pub struct InitProducerIdRequest {
        transactional_id: Option<String> => [0, 99],
        transaction_timeout_ms: i32 => [0, 99],
        producer_id: i64 = -1 => [3, 99],
        producer_epoch: i16 = -1 => [3, 99],
    }
}

message! {
    pub struct InitProducerIdResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        producer_id: i64 = -1 => [0, 99],
        producer_epoch: i16 => [0, 99],
    }
}
