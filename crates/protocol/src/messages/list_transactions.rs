//! ListTransactions (key 66, KIP-664): the transactions a broker's
//! transaction coordinator holds, filtered by state, producer id, (v1)
//! duration and (v2, KIP-1152) a regular expression over transactional
//! ids. Flexible from version 0.
use crate::message;

message! {
    pub struct ListTransactionsRequest {
        state_filters: Vec<String> => [0, 99],
        producer_id_filters: Vec<i64> => [0, 99],
        duration_filter: i64 = -1 => [1, 99],
        transactional_id_pattern: Option<String> => [2, 99],
    }
}

message! {
    pub struct ListedTransaction {
        transactional_id: String => [0, 99],
        producer_id: i64 => [0, 99],
        transaction_state: String => [0, 99],
    }
}

message! {
    pub struct ListTransactionsResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        unknown_state_filters: Vec<String> => [0, 99],
        transaction_states: Vec<ListedTransaction> => [0, 99],
    }
}
