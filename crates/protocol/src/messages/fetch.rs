//! Fetch (key 1), v4 to v18: topics are named up to v12 and identified by
//! topic id from v13 (KIP-516). From v16 a partition refused because this
//! broker does not lead it names the leader it knows, and the response
//! lists those leaders' endpoints (KIP-951), so that a client can go there
//! before its next metadata refresh; Produce v10+ carries the same.
//!
//! The response is declared twice: `FetchResponse` for reading (records as
//! `Bytes`), and `FetchResponseOut` for the broker to send, whose records
//! may be file ranges sent with sendfile (see `crate::records`). Both
//! encode to the same bytes; a unit test keeps them in step.
use bytes::Bytes;

use crate::codec::Uuid;
use crate::message;
use crate::records::Records;

message! {
    pub struct FetchPartition {
        partition: i32 => [0, 99],
        current_leader_epoch: i32 = -1 => [9, 99],
        fetch_offset: i64 => [0, 99],
        last_fetched_epoch: i32 = -1 => [12, 99],
        log_start_offset: i64 = -1 => [5, 99],
        partition_max_bytes: i32 => [0, 99],
    }
    tagged {
        // A KRaft voter's directory (KIP-853) and the high watermark a
        // replica knows (KIP-1166, -1 when it knows none): both for
        // fetches between replicas.
        0 => replica_directory_id: Uuid => [17, 99],
        1 => high_watermark: i64 = i64::MAX => [18, 99],
    }
}

message! {
    pub struct FetchTopic {
        topic: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<FetchPartition> => [0, 99],
    }
}

message! {
    pub struct ForgottenTopic {
        topic: String => [7, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<i32> => [7, 99],
    }
}

message! {
    pub struct FetchRequest {
        replica_id: i32 = -1 => [0, 14],
        max_wait_ms: i32 => [0, 99],
        min_bytes: i32 => [0, 99],
        max_bytes: i32 = i32::MAX => [3, 99],
        isolation_level: i8 => [4, 99],
        session_id: i32 => [7, 99],
        session_epoch: i32 = -1 => [7, 99],
        topics: Vec<FetchTopic> => [0, 99],
        forgotten_topics_data: Vec<ForgottenTopic> => [7, 99],
        rack_id: String => [11, 99],
    }
    tagged {
        0 => cluster_id: Option<String> => [12, 99],
        1 => replica_state: ReplicaState => [15, 99],
    }
}

message! {
    /// Who sends a fetch from v15 on: a follower names itself and its
    /// broker epoch here (before v15, in `replica_id`); -1 is a consumer.
    pub struct ReplicaState {
        replica_id: i32 = -1 => [15, 99],
        replica_epoch: i64 = -1 => [15, 99],
    }
}

message! {
    pub struct AbortedTransaction {
        producer_id: i64 => [4, 99],
        first_offset: i64 => [4, 99],
    }
}

message! {
    pub struct EpochEndOffset {
        epoch: i32 = -1 => [12, 99],
        end_offset: i64 = -1 => [12, 99],
    }
}

message! {
    /// A partition's leader as the answering broker knows it (-1 when it
    /// knows none). Only ever sent inside a tagged field whose versions
    /// gate it, so its own fields exist in every version.
    pub struct LeaderIdAndEpoch {
        leader_id: i32 = -1 => [0, 99],
        leader_epoch: i32 = -1 => [0, 99],
    }
}

message! {
    /// A broker a [`LeaderIdAndEpoch`] names, with its address on the
    /// listener the request came in on (KIP-951). Like it, gated by the
    /// tagged field that carries it.
    pub struct NodeEndpoint {
        node_id: i32 => [0, 99],
        host: String => [0, 99],
        port: i32 => [0, 99],
        rack: Option<String> => [0, 99],
    }
}

message! {
    pub struct PartitionData {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        high_watermark: i64 => [0, 99],
        last_stable_offset: i64 = -1 => [4, 99],
        log_start_offset: i64 = -1 => [5, 99],
        aborted_transactions: Option<Vec<AbortedTransaction>> => [4, 99],
        preferred_read_replica: i32 = -1 => [11, 99],
        records: Option<Bytes> => [0, 99],
    }
    tagged {
        0 => diverging_epoch: EpochEndOffset => [12, 99],
        1 => current_leader: LeaderIdAndEpoch => [12, 99],
    }
}

message! {
    pub struct FetchableTopicResponse {
        topic: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<PartitionData> => [0, 99],
    }
}

message! {
    pub struct FetchResponse {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [7, 99],
        session_id: i32 => [7, 99],
        responses: Vec<FetchableTopicResponse> => [0, 99],
    }    tagged {
        0 => node_endpoints: Vec<NodeEndpoint> => [16, 99],
    }
}

message! {
    /// [`PartitionData`] as the broker sends it.
    pub struct PartitionDataOut {
        partition_index: i32 => [0, 99],
        error_code: i16 => [0, 99],
        high_watermark: i64 => [0, 99],
        last_stable_offset: i64 = -1 => [4, 99],
        log_start_offset: i64 = -1 => [5, 99],
        aborted_transactions: Option<Vec<AbortedTransaction>> => [4, 99],
        preferred_read_replica: i32 = -1 => [11, 99],
        records: Option<Records> => [0, 99],
    }
    tagged {
        0 => diverging_epoch: EpochEndOffset => [12, 99],
        1 => current_leader: LeaderIdAndEpoch => [12, 99],
    }
}

message! {
    /// [`FetchableTopicResponse`] as the broker sends it.
    pub struct FetchableTopicResponseOut {
        topic: String => [0, 12],
        topic_id: Uuid => [13, 99],
        partitions: Vec<PartitionDataOut> => [0, 99],
    }
}

message! {
    /// [`FetchResponse`] as the broker sends it.
    pub struct FetchResponseOut {
        throttle_time_ms: i32 => [1, 99],
        error_code: i16 => [7, 99],
        session_id: i32 => [7, 99],
        responses: Vec<FetchableTopicResponseOut> => [0, 99],
    }    tagged {
        0 => node_endpoints: Vec<NodeEndpoint> => [16, 99],
    }
}

impl FetchResponseOut {
    /// Every partition's records, in encoding order.
    pub fn records(&self) -> impl Iterator<Item = &Records> {
        self.responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.records.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Encode, Version};

    #[test]
    fn out_and_in_responses_encode_alike() {
        let records = Bytes::from_static(b"batches");
        let endpoints = vec![NodeEndpoint {
            node_id: 1,
            host: "localhost".into(),
            port: 9092,
            rack: None,
        }];
        let inbound = FetchResponse {
            throttle_time_ms: 1,
            error_code: 0,
            session_id: 0,
            node_endpoints: endpoints.clone(),
            responses: vec![FetchableTopicResponse {
                topic: "t".into(),
                topic_id: Uuid::ZERO,
                partitions: vec![PartitionData {
                    partition_index: 2,
                    high_watermark: 10,
                    last_stable_offset: 10,
                    log_start_offset: 0,
                    aborted_transactions: Some(vec![AbortedTransaction {
                        producer_id: 5,
                        first_offset: 3,
                    }]),
                    records: Some(records.clone()),
                    current_leader: LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 4,
                    },
                    ..Default::default()
                }],
            }],
        };
        let p = &inbound.responses[0].partitions[0];
        let outbound = FetchResponseOut {
            throttle_time_ms: 1,
            error_code: 0,
            session_id: 0,
            node_endpoints: endpoints,
            responses: vec![FetchableTopicResponseOut {
                topic: "t".into(),
                topic_id: Uuid::ZERO,
                partitions: vec![PartitionDataOut {
                    partition_index: p.partition_index,
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    aborted_transactions: p.aborted_transactions.clone(),
                    preferred_read_replica: p.preferred_read_replica,
                    records: Some(Records::Bytes(records)),
                    diverging_epoch: p.diverging_epoch.clone(),
                    current_leader: p.current_leader.clone(),
                }],
            }],
        };
        for version in 4..=17 {
            let v = Version::new(version, 12);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            inbound.encode(&mut a, v);
            outbound.encode(&mut b, v);
            assert_eq!(a, b, "v{version}");
        }
    }
}
