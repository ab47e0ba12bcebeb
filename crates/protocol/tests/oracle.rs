//! Checks our wire layout against an independent implementation: every
//! message we encode must decode with the `kafka-protocol` crate and
//! re-encode to the very same bytes, at every version we declare.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};
use tarn_protocol::codec::{Decode, Encode, Reader, Uuid, Version};
use tarn_protocol::messages::*;

fn check<Ours, Theirs>(msg: &Ours, versions: std::ops::RangeInclusive<i16>, flexible_min: i16)
where
    Ours: Encode + Decode + PartialEq + std::fmt::Debug,
    Theirs: Encodable + Decodable,
{
    for version in versions {
        let v = Version::new(version, flexible_min);
        let mut ours = Vec::new();
        msg.encode(&mut ours, v);
        let mut buf = Bytes::from(ours.clone());
        let theirs = Theirs::decode(&mut buf, version).unwrap_or_else(|e| {
            panic!(
                "{} v{version}: oracle cannot decode: {e}",
                std::any::type_name::<Ours>()
            )
        });
        assert!(
            buf.is_empty(),
            "{} v{version}: oracle left {} bytes",
            std::any::type_name::<Ours>(),
            buf.len()
        );
        let mut again = BytesMut::new();
        theirs.encode(&mut again, version).expect("oracle encodes");
        assert_eq!(
            &again[..],
            &ours[..],
            "{} v{version}: bytes differ",
            std::any::type_name::<Ours>()
        );
        let back =
            Ours::decode(&mut Reader::new(Bytes::from(ours)), v).expect("we decode our own bytes");
        let mut twice = Vec::new();
        back.encode(&mut twice, v);
        assert_eq!(&twice[..], &again[..]);
    }
}

fn records() -> Option<Bytes> {
    Some(Bytes::from_static(b"not-really-a-batch"))
}

#[test]
fn metadata() {
    use kafka_protocol::messages as k;
    use metadata::*;
    let request = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            topic_id: Uuid::ZERO,
            name: Some("orders".into()),
        }]),
        allow_auto_topic_creation: false,
        include_cluster_authorized_operations: false,
        include_topic_authorized_operations: true,
    };
    check::<_, k::MetadataRequest>(&request, 1..=12, 9);
    let response = MetadataResponse {
        throttle_time_ms: 5,
        brokers: vec![MetadataResponseBroker {
            node_id: 1,
            host: "localhost".into(),
            port: 9092,
            rack: None,
        }],
        cluster_id: Some("c".into()),
        controller_id: 1,
        topics: vec![MetadataResponseTopic {
            error_code: 0,
            name: Some("orders".into()),
            topic_id: Uuid([3; 16]),
            is_internal: false,
            partitions: vec![MetadataResponsePartition {
                error_code: 0,
                partition_index: 2,
                leader_id: 1,
                leader_epoch: 4,
                replica_nodes: vec![1],
                isr_nodes: vec![1],
                offline_replicas: vec![],
            }],
            topic_authorized_operations: i32::MIN,
        }],
        cluster_authorized_operations: i32::MIN,
    };
    check::<_, k::MetadataResponse>(&response, 0..=12, 9);
}

#[test]
fn produce() {
    use kafka_protocol::messages as k;
    use produce::*;
    let request = ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: "t".into(),
            partition_data: vec![PartitionProduceData {
                index: 3,
                records: records(),
            }],
        }],
    };
    check::<_, k::ProduceRequest>(&request, 3..=9, 9);
    let response = ProduceResponse {
        responses: vec![TopicProduceResponse {
            name: "t".into(),
            partition_responses: vec![PartitionProduceResponse {
                index: 3,
                error_code: 0,
                base_offset: 77,
                log_append_time_ms: -1,
                log_start_offset: 0,
                record_errors: vec![],
                error_message: None,
            }],
        }],
        throttle_time_ms: 0,
    };
    check::<_, k::ProduceResponse>(&response, 3..=9, 9);
}

#[test]
fn fetch() {
    use fetch::*;
    use kafka_protocol::messages as k;
    let request = FetchRequest {
        max_wait_ms: 500,
        min_bytes: 1,
        topics: vec![FetchTopic {
            topic: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: vec![FetchPartition {
                partition: 0,
                current_leader_epoch: 2,
                fetch_offset: 10,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: 1 << 20,
            }],
        }],
        ..Default::default()
    };
    check::<_, k::FetchRequest>(&request, 4..=12, 12);
    let response = FetchResponse {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        responses: vec![FetchableTopicResponse {
            topic: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: vec![PartitionData {
                partition_index: 0,
                high_watermark: 12,
                last_stable_offset: 12,
                log_start_offset: 0,
                records: records(),
                ..Default::default()
            }],
        }],
    };
    check::<_, k::FetchResponse>(&response, 4..=12, 12);
    // The broker's send-side form, with in-memory records, must be the
    // same message on the wire.
    let out = FetchResponseOut {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        responses: vec![FetchableTopicResponseOut {
            topic: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: vec![PartitionDataOut {
                partition_index: 0,
                high_watermark: 12,
                last_stable_offset: 12,
                log_start_offset: 0,
                records: records().map(tarn_protocol::records::Records::Bytes),
                ..Default::default()
            }],
        }],
    };
    check::<_, k::FetchResponse>(&out, 4..=12, 12);
}

#[test]
fn list_offsets_and_leader_epochs() {
    use kafka_protocol::messages as k;
    use list_offsets::*;
    use offset_for_leader_epoch::*;
    let request = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: vec![ListOffsetsTopic {
            name: "t".into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 1,
                current_leader_epoch: 0,
                timestamp: -2,
                max_num_offsets: 1,
            }],
        }],
        timeout_ms: 0,
    };
    check::<_, k::ListOffsetsRequest>(&request, 1..=7, 6);
    let response = ListOffsetsResponse {
        throttle_time_ms: 0,
        topics: vec![ListOffsetsTopicResponse {
            name: "t".into(),
            partitions: vec![ListOffsetsPartitionResponse {
                partition_index: 1,
                offset: 5,
                timestamp: 99,
                leader_epoch: 0,
                ..Default::default()
            }],
        }],
    };
    check::<_, k::ListOffsetsResponse>(&response, 1..=7, 6);
    let request = OffsetForLeaderEpochRequest {
        replica_id: -1,
        topics: vec![OffsetForLeaderTopic {
            topic: "t".into(),
            partitions: vec![OffsetForLeaderPartition {
                partition: 0,
                current_leader_epoch: 1,
                leader_epoch: 1,
            }],
        }],
    };
    check::<_, k::OffsetForLeaderEpochRequest>(&request, 2..=4, 4);
    let response = OffsetForLeaderEpochResponse {
        throttle_time_ms: 0,
        topics: vec![OffsetForLeaderTopicResult {
            topic: "t".into(),
            partitions: vec![EpochEndOffset {
                error_code: 0,
                partition: 0,
                leader_epoch: 1,
                end_offset: 50,
            }],
        }],
    };
    check::<_, k::OffsetForLeaderEpochResponse>(&response, 2..=4, 4);
}

#[test]
fn topic_admin() {
    use create_topics::*;
    use delete_topics::*;
    use kafka_protocol::messages as k;
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: "t".into(),
            num_partitions: 3,
            replication_factor: 1,
            assignments: vec![],
            configs: vec![CreatableTopicConfig {
                name: "retention.ms".into(),
                value: Some("1".into()),
            }],
        }],
        timeout_ms: 100,
        validate_only: true,
    };
    check::<_, k::CreateTopicsRequest>(&request, 2..=7, 5);
    let response = CreateTopicsResponse {
        throttle_time_ms: 0,
        topics: vec![CreatableTopicResult {
            name: "t".into(),
            topic_id: Uuid([9; 16]),
            error_code: 36,
            error_message: Some("exists".into()),
            num_partitions: 3,
            replication_factor: 1,
            configs: Some(vec![CreatableTopicConfigs {
                name: "retention.ms".into(),
                value: Some("1".into()),
                read_only: false,
                config_source: 1,
                is_sensitive: false,
            }]),
            topic_config_error_code: 0,
        }],
    };
    check::<_, k::CreateTopicsResponse>(&response, 2..=7, 5);
    let request = DeleteTopicsRequest {
        topics: vec![DeleteTopicState {
            name: Some("t".into()),
            topic_id: Uuid::ZERO,
        }],
        topic_names: vec![],
        timeout_ms: 100,
    };
    check::<_, k::DeleteTopicsRequest>(&request, 6..=6, 4);
    let request = DeleteTopicsRequest {
        topics: vec![],
        topic_names: vec!["t".into()],
        timeout_ms: 100,
    };
    check::<_, k::DeleteTopicsRequest>(&request, 1..=5, 4);
    let response = DeleteTopicsResponse {
        throttle_time_ms: 0,
        responses: vec![DeletableTopicResult {
            name: Some("t".into()),
            topic_id: Uuid::ZERO,
            error_code: 0,
            error_message: None,
        }],
    };
    check::<_, k::DeleteTopicsResponse>(&response, 1..=6, 4);
}

#[test]
fn small_apis() {
    use api_versions::*;
    use describe_cluster::*;
    use init_producer_id::*;
    use kafka_protocol::messages as k;
    let response = ApiVersionsResponse {
        error_code: 0,
        api_keys: vec![ApiVersion {
            api_key: 3,
            min_version: 0,
            max_version: 12,
        }],
        throttle_time_ms: 0,
    };
    check::<_, k::ApiVersionsResponse>(&response, 0..=4, 3);
    let request = ApiVersionsRequest {
        client_software_name: "x".into(),
        client_software_version: "1".into(),
    };
    check::<_, k::ApiVersionsRequest>(&request, 0..=4, 3);
    check::<_, k::InitProducerIdRequest>(&InitProducerIdRequest::default(), 0..=4, 2);
    let response = InitProducerIdResponse {
        throttle_time_ms: 0,
        error_code: 0,
        producer_id: 1000,
        producer_epoch: 0,
    };
    check::<_, k::InitProducerIdResponse>(&response, 0..=4, 2);
    check::<_, k::DescribeClusterRequest>(&DescribeClusterRequest::default(), 0..=1, 0);
    let response = DescribeClusterResponse {
        cluster_id: "c".into(),
        controller_id: 1,
        brokers: vec![DescribeClusterBroker {
            broker_id: 1,
            host: "h".into(),
            port: 1,
            rack: None,
        }],
        ..Default::default()
    };
    check::<_, k::DescribeClusterResponse>(&response, 0..=1, 0);
}
