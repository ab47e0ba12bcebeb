//! AddRaftVoter (key 80) and RemoveRaftVoter (key 81), KIP-853: a
//! controller joins or leaves a running metadata quorum, as
//! `kafka-metadata-quorum.sh add-controller` and `remove-controller` ask.
//! Flexible from version 0; AddRaftVoter v1 adds AckWhenCommitted.
use crate::codec::Uuid;
use crate::message;

message! {
    pub struct AddRaftVoterListener {
        name: String => [0, 99],
        host: String => [0, 99],
        port: u16 => [0, 99],
    }
}

message! {
    pub struct AddRaftVoterRequest {
        cluster_id: Option<String> => [0, 99],
        timeout_ms: i32 => [0, 99],
        voter_id: i32 => [0, 99],
        voter_directory_id: Uuid => [0, 99],
        listeners: Vec<AddRaftVoterListener> => [0, 99],
        ack_when_committed: bool = true => [1, 99],
    }
}

message! {
    pub struct AddRaftVoterResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct RemoveRaftVoterRequest {
        cluster_id: Option<String> => [0, 99],
        voter_id: i32 => [0, 99],
        voter_directory_id: Uuid => [0, 99],
    }
}

message! {
    pub struct RemoveRaftVoterResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}
