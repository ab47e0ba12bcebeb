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

/// For versions newer than the oracle knows: our encoding must be the bytes
/// Kafka 4.4.0's generated message classes write for the same values
/// (recorded once with kafka-clients 4.4.0), and must decode back to them.
fn snapshot<Ours>(msg: &Ours, version: i16, flexible_min: i16, kafka_hex: &str)
where
    Ours: Encode + Decode + PartialEq + std::fmt::Debug,
{
    let v = Version::new(version, flexible_min);
    let kafka: Vec<u8> = (0..kafka_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&kafka_hex[i..i + 2], 16).expect("hex"))
        .collect();
    let mut ours = Vec::new();
    msg.encode(&mut ours, v);
    assert_eq!(
        hex(&ours),
        kafka_hex,
        "{} v{version}: bytes differ from Kafka's",
        std::any::type_name::<Ours>()
    );
    let back =
        Ours::decode(&mut Reader::new(Bytes::from(kafka)), v).expect("we decode Kafka's bytes");
    assert_eq!(&back, msg, "{} v{version}", std::any::type_name::<Ours>());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The topic id the snapshots use: bytes 1 to 16.
const TOPIC_ID: Uuid = Uuid([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);

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
    check::<_, k::MetadataRequest>(&request, 1..=13, 9);
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
        error_code: 0,
    };
    check::<_, k::MetadataResponse>(&response, 0..=12, 9);
    let response = MetadataResponse {
        error_code: 129,
        ..response
    };
    check::<_, k::MetadataResponse>(&response, 13..=13, 9);
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
            topic_id: Uuid::ZERO,
            partition_data: vec![PartitionProduceData {
                index: 3,
                records: records(),
            }],
        }],
    };
    check::<_, k::ProduceRequest>(&request, 3..=12, 9);
    // From v13 a topic is named by its id alone.
    let by_id = ProduceRequest {
        topic_data: vec![TopicProduceData {
            name: String::new(),
            topic_id: Uuid([9; 16]),
            ..request.topic_data[0].clone()
        }],
        ..request.clone()
    };
    check::<_, k::ProduceRequest>(&by_id, 13..=13, 9);
    let response = ProduceResponse {
        responses: vec![TopicProduceResponse {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partition_responses: vec![PartitionProduceResponse {
                index: 3,
                error_code: 0,
                base_offset: 77,
                log_append_time_ms: -1,
                log_start_offset: 0,
                record_errors: vec![],
                error_message: None,
                current_leader: LeaderIdAndEpoch::default(),
            }],
        }],
        throttle_time_ms: 0,
        node_endpoints: vec![],
    };
    check::<_, k::ProduceResponse>(&response, 3..=12, 9);
    // A partition this broker does not lead, with the leader it knows and
    // that leader's endpoint (v10+, KIP-951).
    let redirected = ProduceResponse {
        responses: vec![TopicProduceResponse {
            partition_responses: vec![PartitionProduceResponse {
                error_code: 6,
                base_offset: -1,
                log_start_offset: -1,
                current_leader: LeaderIdAndEpoch {
                    leader_id: 2,
                    leader_epoch: 5,
                },
                ..response.responses[0].partition_responses[0].clone()
            }],
            ..response.responses[0].clone()
        }],
        node_endpoints: vec![NodeEndpoint {
            node_id: 2,
            host: "127.0.0.1".into(),
            port: 29092,
            rack: Some("r2".into()),
        }],
        ..response.clone()
    };
    check::<_, k::ProduceResponse>(&redirected, 10..=12, 9);
    let redirected_by_id = ProduceResponse {
        responses: vec![TopicProduceResponse {
            name: String::new(),
            topic_id: Uuid([9; 16]),
            ..redirected.responses[0].clone()
        }],
        ..redirected.clone()
    };
    check::<_, k::ProduceResponse>(&redirected_by_id, 13..=13, 9);
    // A refusal naming records (Produce v8+'s record_errors).
    let refused = ProduceResponse {
        responses: vec![TopicProduceResponse {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partition_responses: vec![PartitionProduceResponse {
                index: 3,
                error_code: 87,
                base_offset: -1,
                log_append_time_ms: -1,
                log_start_offset: -1,
                record_errors: vec![
                    BatchIndexAndErrorMessage {
                        batch_index: 3,
                        batch_index_error_message: Some("no key".into()),
                    },
                    BatchIndexAndErrorMessage {
                        batch_index: 13,
                        batch_index_error_message: None,
                    },
                ],
                error_message: Some("2 records are invalid".into()),
                current_leader: LeaderIdAndEpoch::default(),
            }],
        }],
        throttle_time_ms: 0,
        node_endpoints: vec![],
    };
    check::<_, k::ProduceResponse>(&refused, 3..=12, 9);
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
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    check::<_, k::FetchRequest>(&request, 4..=12, 12);
    // From v13 topics are named by id, in requests and forgotten topics.
    let by_id = FetchRequest {
        session_id: 7,
        session_epoch: 3,
        topics: vec![FetchTopic {
            topic: String::new(),
            topic_id: Uuid([4; 16]),
            ..request.topics[0].clone()
        }],
        forgotten_topics_data: vec![ForgottenTopic {
            topic: String::new(),
            topic_id: Uuid([6; 16]),
            partitions: vec![1, 2],
        }],
        ..request.clone()
    };
    check::<_, k::FetchRequest>(&by_id, 13..=18, 12);
    // A replica's fetch: its directory (v17+) and high watermark (v18+).
    let from_replica = FetchRequest {
        topics: vec![FetchTopic {
            partitions: vec![FetchPartition {
                replica_directory_id: Uuid([8; 16]),
                high_watermark: 9,
                ..by_id.topics[0].partitions[0].clone()
            }],
            ..by_id.topics[0].clone()
        }],
        ..by_id.clone()
    };
    check::<_, k::FetchRequest>(&from_replica, 18..=18, 12);
    let response = FetchResponse {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        node_endpoints: Vec::new(),
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
    let by_id = FetchResponse {
        session_id: 7,
        responses: vec![FetchableTopicResponse {
            topic: String::new(),
            topic_id: Uuid([4; 16]),
            ..response.responses[0].clone()
        }],
        ..response.clone()
    };
    check::<_, k::FetchResponse>(&by_id, 13..=18, 12);
    // A partition this broker does not lead, with the leader it knows and
    // that leader's endpoint (v16+, KIP-951).
    let redirected = FetchResponse {
        responses: vec![FetchableTopicResponse {
            partitions: vec![PartitionData {
                error_code: 6,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                current_leader: LeaderIdAndEpoch {
                    leader_id: 3,
                    leader_epoch: 8,
                },
                ..by_id.responses[0].partitions[0].clone()
            }],
            ..by_id.responses[0].clone()
        }],
        node_endpoints: vec![NodeEndpoint {
            node_id: 3,
            host: "localhost".into(),
            port: 39092,
            rack: None,
        }],
        ..by_id.clone()
    };
    check::<_, k::FetchResponse>(&redirected, 16..=18, 12);
    // The broker's send-side form, with in-memory records, must be the
    // same message on the wire.
    let out = FetchResponseOut {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        node_endpoints: Vec::new(),
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
    check::<_, k::ListOffsetsRequest>(&request, 1..=9, 6);
    let request = ListOffsetsRequest {
        timeout_ms: 500,
        ..request
    };
    check::<_, k::ListOffsetsRequest>(&request, 10..=10, 6);
    // v11 only allows timestamp -6; the oracle stops at v10.
    let request = ListOffsetsRequest {
        isolation_level: 1,
        topics: vec![ListOffsetsTopic {
            name: "t".into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 1,
                current_leader_epoch: 0,
                timestamp: EARLIEST_PENDING_UPLOAD_TIMESTAMP,
                max_num_offsets: 1,
            }],
        }],
        ..request
    };
    snapshot(
        &request,
        11,
        6,
        "ffffffff01020274020000000100000000fffffffffffffffa0000000001f400",
    );
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
    check::<_, k::ListOffsetsResponse>(&response, 1..=10, 6);
    let response = ListOffsetsResponse {
        topics: vec![ListOffsetsTopicResponse {
            name: "t".into(),
            partitions: vec![ListOffsetsPartitionResponse {
                partition_index: 1,
                ..Default::default()
            }],
        }],
        ..response
    };
    snapshot(
        &response,
        11,
        6,
        "0000000002027402000000010000ffffffffffffffffffffffffffffffffffffffff000000",
    );
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
        ..Default::default()
    };
    check::<_, k::ApiVersionsResponse>(&response, 0..=4, 3);
    let response = ApiVersionsResponse {
        api_keys: vec![ApiVersion {
            max_version: 13,
            ..response.api_keys[0].clone()
        }],
        ..response
    };
    // The oracle stops at v4; v5 only changes the request.
    snapshot(&response, 5, 3, "00000200030000000d000000000000");
    let with_features = ApiVersionsResponse {
        supported_features: vec![SupportedFeatureKey {
            name: "metadata.version".into(),
            min_version: 7,
            max_version: 7,
        }],
        finalized_features_epoch: 12,
        finalized_features: vec![FinalizedFeatureKey {
            name: "metadata.version".into(),
            max_version_level: 7,
            min_version_level: 7,
        }],
        ..response
    };
    check::<_, k::ApiVersionsResponse>(&with_features, 0..=4, 3);
    let request = ApiVersionsRequest {
        client_software_name: "x".into(),
        client_software_version: "1".into(),
        cluster_id: None,
        node_id: -1,
    };
    check::<_, k::ApiVersionsRequest>(&request, 0..=4, 3);
    let request = ApiVersionsRequest {
        cluster_id: Some("c".into()),
        node_id: 1,
        ..request
    };
    snapshot(&request, 5, 3, "0278023102630000000100");
    check::<_, k::InitProducerIdRequest>(&InitProducerIdRequest::default(), 0..=5, 2);
    let response = InitProducerIdResponse {
        throttle_time_ms: 0,
        error_code: 0,
        producer_id: 1000,
        producer_epoch: 0,
    };
    check::<_, k::InitProducerIdResponse>(&response, 0..=5, 2);
    check::<_, k::DescribeClusterRequest>(&DescribeClusterRequest::default(), 0..=2, 0);
    let request = DescribeClusterRequest {
        include_fenced_brokers: true,
        ..Default::default()
    };
    check::<_, k::DescribeClusterRequest>(&request, 2..=2, 0);
    let response = DescribeClusterResponse {
        cluster_id: "c".into(),
        controller_id: 1,
        brokers: vec![DescribeClusterBroker {
            broker_id: 1,
            host: "h".into(),
            port: 1,
            rack: None,
            is_fenced: false,
        }],
        ..Default::default()
    };
    check::<_, k::DescribeClusterResponse>(&response, 0..=2, 0);
    let response = DescribeClusterResponse {
        brokers: vec![DescribeClusterBroker {
            is_fenced: true,
            ..response.brokers[0].clone()
        }],
        ..response
    };
    check::<_, k::DescribeClusterResponse>(&response, 2..=2, 0);
}

#[test]
fn configs() {
    use alter_configs::*;
    use describe_configs::*;
    use incremental_alter_configs::*;
    use kafka_protocol::messages as k;
    let request = DescribeConfigsRequest {
        resources: vec![
            DescribeConfigsResource {
                resource_type: 2,
                resource_name: "t".into(),
                configuration_keys: None,
            },
            DescribeConfigsResource {
                resource_type: 4,
                resource_name: "1".into(),
                configuration_keys: Some(vec!["log.retention.ms".into()]),
            },
        ],
        include_synonyms: true,
        include_documentation: true,
    };
    check::<_, k::DescribeConfigsRequest>(&request, 1..=4, 4);
    let response = DescribeConfigsResponse {
        throttle_time_ms: 0,
        results: vec![DescribeConfigsResult {
            error_code: 0,
            error_message: None,
            resource_type: 2,
            resource_name: "t".into(),
            configs: vec![DescribeConfigsResourceResult {
                name: "retention.ms".into(),
                value: Some("1000".into()),
                read_only: false,
                is_default: false,
                config_source: 1,
                is_sensitive: false,
                synonyms: vec![
                    DescribeConfigsSynonym {
                        name: "retention.ms".into(),
                        value: Some("1000".into()),
                        source: 1,
                    },
                    DescribeConfigsSynonym {
                        name: "log.retention.ms".into(),
                        value: None,
                        source: 5,
                    },
                ],
                config_type: 5,
                documentation: Some("How long".into()),
            }],
        }],
    };
    check::<_, k::DescribeConfigsResponse>(&response, 1..=4, 4);
    let request = AlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: 4,
            resource_name: String::new(),
            configs: vec![AlterableConfig {
                name: "log.retention.ms".into(),
                value: Some("5".into()),
            }],
        }],
        validate_only: true,
    };
    check::<_, k::AlterConfigsRequest>(&request, 0..=2, 2);
    let response = AlterConfigsResponse {
        throttle_time_ms: 0,
        responses: vec![AlterConfigsResourceResponse {
            error_code: 40,
            error_message: Some("Unknown topic config name: x".into()),
            resource_type: 2,
            resource_name: "t".into(),
        }],
    };
    check::<_, k::AlterConfigsResponse>(&response, 0..=2, 2);
    check::<_, k::IncrementalAlterConfigsResponse>(&response, 0..=1, 1);
    let request = IncrementalAlterConfigsRequest {
        resources: vec![IncrementalAlterConfigsResource {
            resource_type: 2,
            resource_name: "t".into(),
            configs: vec![
                IncrementalAlterableConfig {
                    name: "cleanup.policy".into(),
                    config_operation: OP_APPEND,
                    value: Some("compact".into()),
                },
                IncrementalAlterableConfig {
                    name: "retention.ms".into(),
                    config_operation: OP_DELETE,
                    value: None,
                },
            ],
        }],
        validate_only: false,
    };
    check::<_, k::IncrementalAlterConfigsRequest>(&request, 0..=1, 1);
}

/// DescribeConfigs v0 (which the oracle no longer knows): `is_default`
/// follows `is_sensitive`'s neighbour, no source, synonyms or type.
#[test]
fn describe_configs_v0_layout() {
    use describe_configs::*;
    let result = DescribeConfigsResourceResult {
        name: "a".into(),
        value: None,
        read_only: true,
        is_default: true,
        config_source: 5,
        is_sensitive: false,
        synonyms: vec![DescribeConfigsSynonym::default()],
        config_type: 1,
        documentation: Some("ignored".into()),
    };
    let mut out = Vec::new();
    result.encode(&mut out, Version::new(0, 4));
    assert_eq!(out, [0, 1, b'a', 0xff, 0xff, 1, 1, 0]);
    let back = DescribeConfigsResourceResult::decode(
        &mut Reader::new(Bytes::from(out)),
        Version::new(0, 4),
    )
    .unwrap();
    assert!(back.is_default && back.read_only && back.value.is_none());
}

#[test]
fn partitions_and_records() {
    use create_partitions::*;
    use delete_records::*;
    use kafka_protocol::messages as k;
    let request = CreatePartitionsRequest {
        topics: vec![
            CreatePartitionsTopic {
                name: "t".into(),
                count: 4,
                assignments: None,
            },
            CreatePartitionsTopic {
                name: "u".into(),
                count: 2,
                assignments: Some(vec![CreatePartitionsAssignment {
                    broker_ids: vec![1],
                }]),
            },
        ],
        timeout_ms: 100,
        validate_only: true,
    };
    check::<_, k::CreatePartitionsRequest>(&request, 0..=3, 2);
    let response = CreatePartitionsResponse {
        throttle_time_ms: 0,
        results: vec![CreatePartitionsTopicResult {
            name: "t".into(),
            error_code: 37,
            error_message: Some("Topic already has 4 partitions.".into()),
        }],
    };
    check::<_, k::CreatePartitionsResponse>(&response, 0..=3, 2);
    let request = DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: "t".into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: 1,
                offset: -1,
            }],
        }],
        timeout_ms: 100,
    };
    check::<_, k::DeleteRecordsRequest>(&request, 0..=2, 2);
    let response = DeleteRecordsResponse {
        throttle_time_ms: 0,
        topics: vec![DeleteRecordsTopicResult {
            name: "t".into(),
            partitions: vec![DeleteRecordsPartitionResult {
                partition_index: 1,
                low_watermark: 42,
                error_code: 0,
            }],
        }],
    };
    check::<_, k::DeleteRecordsResponse>(&response, 0..=2, 2);
}

#[test]
fn find_coordinator() {
    use find_coordinator::*;
    use kafka_protocol::messages as k;
    let request = FindCoordinatorRequest {
        key: "g".into(),
        key_type: 0,
        coordinator_keys: vec![],
    };
    check::<_, k::FindCoordinatorRequest>(&request, 0..=3, 3);
    let request = FindCoordinatorRequest {
        key: String::new(),
        key_type: 0,
        coordinator_keys: vec!["a".into(), "b".into()],
    };
    check::<_, k::FindCoordinatorRequest>(&request, 4..=6, 3);
    let request = FindCoordinatorRequest {
        key_type: KEY_TYPE_SHARE,
        ..request
    };
    check::<_, k::FindCoordinatorRequest>(&request, 6..=6, 3);
    let response = FindCoordinatorResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        node_id: 1,
        host: "localhost".into(),
        port: 9092,
        coordinators: vec![],
    };
    check::<_, k::FindCoordinatorResponse>(&response, 0..=3, 3);
    let response = FindCoordinatorResponse {
        coordinators: vec![Coordinator {
            key: "a".into(),
            node_id: 1,
            host: "h".into(),
            port: 1,
            error_code: 15,
            error_message: Some("x".into()),
        }],
        ..Default::default()
    };
    check::<_, k::FindCoordinatorResponse>(&response, 4..=6, 3);
}

#[test]
fn join_and_sync_group() {
    use join_group::*;
    use kafka_protocol::messages as k;
    use sync_group::*;
    let request = JoinGroupRequest {
        group_id: "g".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        member_id: "m".into(),
        group_instance_id: Some("i".into()),
        protocol_type: "consumer".into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: Bytes::from_static(b"\0\x01meta"),
        }],
        reason: Some("why".into()),
    };
    check::<_, k::JoinGroupRequest>(&request, 5..=9, 6);
    let request = JoinGroupRequest {
        group_instance_id: None,
        reason: None,
        ..request
    };
    check::<_, k::JoinGroupRequest>(&request, 1..=9, 6);
    let request = JoinGroupRequest {
        rebalance_timeout_ms: -1,
        ..request
    };
    check::<_, k::JoinGroupRequest>(&request, 0..=0, 6);
    let response = JoinGroupResponse {
        throttle_time_ms: 0,
        error_code: 0,
        generation_id: 3,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        leader: "m".into(),
        skip_assignment: true,
        member_id: "m".into(),
        members: vec![JoinGroupResponseMember {
            member_id: "m".into(),
            group_instance_id: Some("i".into()),
            metadata: Bytes::from_static(b"meta"),
        }],
    };
    check::<_, k::JoinGroupResponse>(&response, 9..=9, 6);
    let response = JoinGroupResponse {
        skip_assignment: false,
        ..response
    };
    check::<_, k::JoinGroupResponse>(&response, 7..=8, 6);
    let response = JoinGroupResponse {
        protocol_type: None,
        members: vec![JoinGroupResponseMember {
            member_id: "m".into(),
            group_instance_id: None,
            metadata: Bytes::from_static(b"meta"),
        }],
        ..response
    };
    check::<_, k::JoinGroupResponse>(&response, 0..=6, 6);
    let request = SyncGroupRequest {
        group_id: "g".into(),
        generation_id: 3,
        member_id: "m".into(),
        group_instance_id: Some("i".into()),
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: vec![SyncGroupRequestAssignment {
            member_id: "m".into(),
            assignment: Bytes::from_static(b"assign"),
        }],
    };
    check::<_, k::SyncGroupRequest>(&request, 5..=5, 4);
    let request = SyncGroupRequest {
        protocol_type: None,
        protocol_name: None,
        ..request
    };
    check::<_, k::SyncGroupRequest>(&request, 3..=5, 4);
    let request = SyncGroupRequest {
        group_instance_id: None,
        ..request
    };
    check::<_, k::SyncGroupRequest>(&request, 0..=5, 4);
    let response = SyncGroupResponse {
        throttle_time_ms: 0,
        error_code: 0,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignment: Bytes::from_static(b"assign"),
    };
    check::<_, k::SyncGroupResponse>(&response, 5..=5, 4);
    let response = SyncGroupResponse {
        protocol_type: None,
        protocol_name: None,
        ..response
    };
    check::<_, k::SyncGroupResponse>(&response, 0..=5, 4);
}

#[test]
fn heartbeat_and_leave_group() {
    use heartbeat::*;
    use kafka_protocol::messages as k;
    use leave_group::*;
    let request = HeartbeatRequest {
        group_id: "g".into(),
        generation_id: 2,
        member_id: "m".into(),
        group_instance_id: Some("i".into()),
    };
    check::<_, k::HeartbeatRequest>(&request, 3..=4, 4);
    let request = HeartbeatRequest {
        group_instance_id: None,
        ..request
    };
    check::<_, k::HeartbeatRequest>(&request, 0..=4, 4);
    let response = HeartbeatResponse {
        throttle_time_ms: 0,
        error_code: 27,
    };
    check::<_, k::HeartbeatResponse>(&response, 0..=4, 4);
    let request = LeaveGroupRequest {
        group_id: "g".into(),
        member_id: "m".into(),
        members: vec![],
    };
    check::<_, k::LeaveGroupRequest>(&request, 0..=2, 4);
    let request = LeaveGroupRequest {
        group_id: "g".into(),
        member_id: String::new(),
        members: vec![
            MemberIdentity {
                member_id: "m".into(),
                group_instance_id: None,
                reason: Some("bye".into()),
            },
            MemberIdentity {
                member_id: String::new(),
                group_instance_id: Some("i".into()),
                reason: None,
            },
        ],
    };
    check::<_, k::LeaveGroupRequest>(&request, 5..=5, 4);
    let request = LeaveGroupRequest {
        members: request
            .members
            .into_iter()
            .map(|m| MemberIdentity { reason: None, ..m })
            .collect(),
        ..request
    };
    check::<_, k::LeaveGroupRequest>(&request, 3..=5, 4);
    let response = LeaveGroupResponse {
        throttle_time_ms: 0,
        error_code: 0,
        members: vec![MemberResponse {
            member_id: "m".into(),
            group_instance_id: None,
            error_code: 25,
        }],
    };
    check::<_, k::LeaveGroupResponse>(&response, 3..=5, 4);
    let response = LeaveGroupResponse {
        error_code: 25,
        members: vec![],
        ..response
    };
    check::<_, k::LeaveGroupResponse>(&response, 0..=5, 4);
}

#[test]
fn offset_commit_and_fetch() {
    use kafka_protocol::messages as k;
    use offset_commit::*;
    use offset_fetch::*;
    let partition = OffsetCommitRequestPartition {
        partition_index: 1,
        committed_offset: 42,
        committed_leader_epoch: -1,
        commit_timestamp: -1,
        committed_metadata: Some("meta".into()),
    };
    let request = OffsetCommitRequest {
        group_id: "g".into(),
        generation_id_or_member_epoch: 3,
        member_id: "m".into(),
        group_instance_id: None,
        retention_time_ms: -1,
        topics: vec![OffsetCommitRequestTopic {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: vec![partition.clone()],
        }],
    };
    // The oracle starts at v2 (Kafka 4 removed v0-1).
    check::<_, k::OffsetCommitRequest>(&request, 2..=9, 8);
    let request = OffsetCommitRequest {
        group_instance_id: Some("i".into()),
        topics: vec![OffsetCommitRequestTopic {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: vec![OffsetCommitRequestPartition {
                committed_leader_epoch: 5,
                committed_metadata: None,
                ..partition.clone()
            }],
        }],
        ..request
    };
    check::<_, k::OffsetCommitRequest>(&request, 7..=9, 8);
    // v10 names the topic by id; the oracle stops at v9.
    let request = OffsetCommitRequest {
        topics: vec![OffsetCommitRequestTopic {
            name: String::new(),
            topic_id: TOPIC_ID,
            partitions: vec![OffsetCommitRequestPartition {
                committed_leader_epoch: 5,
                ..partition
            }],
        }],
        ..request
    };
    snapshot(
        &request,
        10,
        8,
        "026700000003026d0269020102030405060708090a0b0c0d0e0f100200000001000000000000002a00000005056d657461000000",
    );
    let response = OffsetCommitResponse {
        throttle_time_ms: 0,
        topics: vec![OffsetCommitResponseTopic {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: vec![OffsetCommitResponsePartition {
                partition_index: 1,
                error_code: 22,
            }],
        }],
    };
    check::<_, k::OffsetCommitResponse>(&response, 2..=9, 8);
    let response = OffsetCommitResponse {
        throttle_time_ms: 0,
        topics: vec![OffsetCommitResponseTopic {
            name: String::new(),
            topic_id: TOPIC_ID,
            partitions: vec![OffsetCommitResponsePartition {
                partition_index: 1,
                error_code: 100,
            }],
        }],
    };
    snapshot(
        &response,
        10,
        8,
        "00000000020102030405060708090a0b0c0d0e0f1002000000010064000000",
    );

    let topics = vec![OffsetFetchRequestTopic {
        name: "t".into(),
        topic_id: Uuid::ZERO,
        partition_indexes: vec![0, 1],
    }];
    let request = OffsetFetchRequest {
        group_id: "g".into(),
        topics: Some(topics.clone()),
        groups: vec![],
        require_stable: false,
    };
    check::<_, k::OffsetFetchRequest>(&request, 1..=7, 6);
    let request = OffsetFetchRequest {
        topics: None,
        require_stable: true,
        ..request
    };
    check::<_, k::OffsetFetchRequest>(&request, 7..=7, 6);
    let request = OffsetFetchRequest {
        group_id: String::new(),
        topics: Some(vec![]),
        groups: vec![
            OffsetFetchRequestGroup {
                group_id: "a".into(),
                member_id: None,
                member_epoch: -1,
                topics: None,
            },
            OffsetFetchRequestGroup {
                group_id: "b".into(),
                member_id: None,
                member_epoch: -1,
                topics: Some(topics),
            },
        ],
        require_stable: false,
    };
    check::<_, k::OffsetFetchRequest>(&request, 8..=9, 6);
    let mut request = OffsetFetchRequest {
        require_stable: true,
        ..request
    };
    request.groups[1].member_id = Some("m".into());
    request.groups[1].member_epoch = 7;
    check::<_, k::OffsetFetchRequest>(&request, 9..=9, 6);
    // v10 names topics by id; the oracle stops at v9.
    request.groups[1].topics = Some(vec![OffsetFetchRequestTopic {
        name: String::new(),
        topic_id: TOPIC_ID,
        partition_indexes: vec![0, 1],
    }]);
    snapshot(
        &request,
        10,
        6,
        "03026100ffffffff00000262026d00000007020102030405060708090a0b0c0d0e0f1003000000000000000100000100",
    );
    let partitions = vec![
        OffsetFetchResponsePartition {
            partition_index: 0,
            committed_offset: 42,
            committed_leader_epoch: 3,
            metadata: Some("m".into()),
            error_code: 0,
        },
        OffsetFetchResponsePartition {
            partition_index: 1,
            committed_offset: -1,
            committed_leader_epoch: -1,
            metadata: None,
            error_code: 0,
        },
    ];
    let response = OffsetFetchResponse {
        throttle_time_ms: 0,
        topics: vec![OffsetFetchResponseTopic {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: partitions.clone(),
        }],
        error_code: 0,
        groups: vec![],
    };
    check::<_, k::OffsetFetchResponse>(&response, 5..=7, 6);
    let response = OffsetFetchResponse {
        topics: vec![OffsetFetchResponseTopic {
            name: "t".into(),
            topic_id: Uuid::ZERO,
            partitions: partitions
                .iter()
                .map(|p| OffsetFetchResponsePartition {
                    committed_leader_epoch: -1,
                    ..p.clone()
                })
                .collect(),
        }],
        ..response
    };
    check::<_, k::OffsetFetchResponse>(&response, 1..=7, 6);
    let response = OffsetFetchResponse {
        throttle_time_ms: 0,
        topics: vec![],
        error_code: 0,
        groups: vec![OffsetFetchResponseGroup {
            group_id: "g".into(),
            topics: vec![OffsetFetchResponseTopic {
                name: "t".into(),
                topic_id: Uuid::ZERO,
                partitions: partitions.clone(),
            }],
            error_code: 16,
        }],
    };
    check::<_, k::OffsetFetchResponse>(&response, 8..=9, 6);
    let mut partitions = partitions;
    partitions[1].error_code = 100;
    let response = OffsetFetchResponse {
        groups: vec![OffsetFetchResponseGroup {
            group_id: "g".into(),
            topics: vec![OffsetFetchResponseTopic {
                name: String::new(),
                topic_id: TOPIC_ID,
                partitions,
            }],
            error_code: 0,
        }],
        ..response
    };
    snapshot(
        &response,
        10,
        6,
        "00000000020267020102030405060708090a0b0c0d0e0f100300000000000000000000002a00000003026d00000000000001ffffffffffffffffffffffff000064000000000000",
    );
}

#[test]
fn group_admin() {
    use delete_groups::*;
    use describe_groups::*;
    use kafka_protocol::messages as k;
    use list_groups::*;
    use offset_delete::*;
    let request = DescribeGroupsRequest {
        groups: vec!["a".into(), "b".into()],
        include_authorized_operations: true,
    };
    check::<_, k::DescribeGroupsRequest>(&request, 3..=6, 5);
    let member = DescribedGroupMember {
        member_id: "m".into(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        member_metadata: Bytes::from_static(b"md"),
        member_assignment: Bytes::from_static(b"as"),
    };
    let response = DescribeGroupsResponse {
        throttle_time_ms: 0,
        groups: vec![DescribedGroup {
            error_code: 0,
            error_message: None,
            group_id: "a".into(),
            group_state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol_data: "range".into(),
            members: vec![member.clone()],
            authorized_operations: i32::MIN,
        }],
    };
    check::<_, k::DescribeGroupsResponse>(&response, 0..=6, 5);
    let response = DescribeGroupsResponse {
        groups: vec![DescribedGroup {
            members: vec![DescribedGroupMember {
                group_instance_id: Some("i".into()),
                ..member
            }],
            authorized_operations: 328,
            ..response.groups[0].clone()
        }],
        ..response
    };
    check::<_, k::DescribeGroupsResponse>(&response, 4..=6, 5);
    let response = DescribeGroupsResponse {
        throttle_time_ms: 0,
        groups: vec![DescribedGroup {
            error_code: 69,
            error_message: Some("Group a not found.".into()),
            group_id: "a".into(),
            group_state: "Dead".into(),
            ..Default::default()
        }],
    };
    check::<_, k::DescribeGroupsResponse>(&response, 6..=6, 5);

    let request = ListGroupsRequest {
        states_filter: vec!["Stable".into()],
        types_filter: vec![],
    };
    check::<_, k::ListGroupsRequest>(&request, 4..=5, 3);
    check::<_, k::ListGroupsRequest>(&ListGroupsRequest::default(), 0..=5, 3);
    let request = ListGroupsRequest {
        types_filter: vec!["classic".into(), "consumer".into()],
        ..request
    };
    check::<_, k::ListGroupsRequest>(&request, 5..=5, 3);
    let response = ListGroupsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        groups: vec![ListedGroup {
            group_id: "a".into(),
            protocol_type: "consumer".into(),
            group_state: "Empty".into(),
            group_type: String::new(),
        }],
    };
    check::<_, k::ListGroupsResponse>(&response, 4..=4, 3);
    let typed = ListGroupsResponse {
        groups: vec![ListedGroup {
            group_type: "classic".into(),
            ..response.groups[0].clone()
        }],
        ..response.clone()
    };
    check::<_, k::ListGroupsResponse>(&typed, 5..=5, 3);
    let response = ListGroupsResponse {
        groups: vec![ListedGroup {
            group_state: String::new(),
            ..response.groups[0].clone()
        }],
        ..response
    };
    check::<_, k::ListGroupsResponse>(&response, 0..=4, 3);

    let request = DeleteGroupsRequest {
        groups_names: vec!["a".into()],
    };
    check::<_, k::DeleteGroupsRequest>(&request, 0..=2, 2);
    // v3 adds only a response field; the oracle stops at v2.
    snapshot(&request, 3, 2, "02026100");
    let response = DeleteGroupsResponse {
        throttle_time_ms: 0,
        results: vec![DeletableGroupResult {
            group_id: "a".into(),
            error_code: 68,
            error_message: None,
        }],
    };
    check::<_, k::DeleteGroupsResponse>(&response, 0..=2, 2);
    let response = DeleteGroupsResponse {
        throttle_time_ms: 0,
        results: vec![
            DeletableGroupResult {
                group_id: "a".into(),
                error_code: 69,
                error_message: Some("Group a not found.".into()),
            },
            DeletableGroupResult {
                group_id: "b".into(),
                error_code: 0,
                error_message: None,
            },
        ],
    };
    snapshot(
        &response,
        3,
        2,
        "0000000003026100451347726f75702061206e6f7420666f756e642e0002620000000000",
    );

    let request = OffsetDeleteRequest {
        group_id: "g".into(),
        topics: vec![OffsetDeleteRequestTopic {
            name: "t".into(),
            partitions: vec![OffsetDeleteRequestPartition { partition_index: 3 }],
        }],
    };
    check::<_, k::OffsetDeleteRequest>(&request, 0..=0, 99);
    let response = OffsetDeleteResponse {
        error_code: 0,
        throttle_time_ms: 0,
        topics: vec![OffsetDeleteResponseTopic {
            name: "t".into(),
            partitions: vec![OffsetDeleteResponsePartition {
                partition_index: 3,
                error_code: 86,
            }],
        }],
    };
    check::<_, k::OffsetDeleteResponse>(&response, 0..=0, 99);
}

#[test]
fn describe_log_dirs() {
    use describe_log_dirs::*;
    use kafka_protocol::messages as k;
    for topics in [
        None,
        Some(vec![DescribableLogDirTopic {
            topic: "t".into(),
            partitions: vec![0, 3],
        }]),
    ] {
        // The oracle has no v0 (Kafka 4 dropped it); v0 is v1's layout.
        check::<_, k::DescribeLogDirsRequest>(&DescribeLogDirsRequest { topics }, 1..=4, 2);
    }
    // v5 only adds a response field; the oracle stops at v4.
    let request = DescribeLogDirsRequest {
        topics: Some(vec![DescribableLogDirTopic {
            topic: "t".into(),
            partitions: vec![0, 3],
        }]),
    };
    snapshot(&request, 5, 2, "0202740300000000000000030000");
    let response = DescribeLogDirsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        results: vec![DescribeLogDirsResult {
            error_code: 0,
            log_dir: "/var/lib/tarn".into(),
            topics: vec![DescribeLogDirsTopic {
                name: "t".into(),
                partitions: vec![DescribeLogDirsPartition {
                    partition_index: 3,
                    partition_size: 12_345,
                    offset_lag: 0,
                    is_future_key: false,
                }],
            }],
            total_bytes: 1 << 40,
            usable_bytes: 1 << 39,
            is_cordoned: false,
        }],
    };
    check::<_, k::DescribeLogDirsResponse>(&response, 4..=4, 2);
    let cordoned = DescribeLogDirsResponse {
        results: vec![DescribeLogDirsResult {
            is_cordoned: true,
            ..response.results[0].clone()
        }],
        ..response.clone()
    };
    snapshot(
        &cordoned,
        5,
        2,
        "0000000000000200000e2f7661722f6c69622f7461726e02027402000000030000000000003039000000000000000000000000000100000000000000008000000000010000",
    );
    let older = DescribeLogDirsResponse {
        results: vec![DescribeLogDirsResult {
            total_bytes: -1,
            usable_bytes: -1,
            ..response.results[0].clone()
        }],
        ..response.clone()
    };
    check::<_, k::DescribeLogDirsResponse>(&older, 1..=2, 2);
    check::<_, k::DescribeLogDirsResponse>(&older, 3..=3, 2);
}

#[test]
fn describe_producers() {
    use describe_producers::*;
    use kafka_protocol::messages as k;
    let request = DescribeProducersRequest {
        topics: vec![DescribeProducersTopicRequest {
            name: "t".into(),
            partition_indexes: vec![0, 2],
        }],
    };
    check::<_, k::DescribeProducersRequest>(&request, 0..=0, 0);
    let response = DescribeProducersResponse {
        throttle_time_ms: 0,
        topics: vec![DescribeProducersTopicResponse {
            name: "t".into(),
            partitions: vec![
                DescribeProducersPartitionResponse {
                    partition_index: 0,
                    error_code: 0,
                    error_message: None,
                    active_producers: vec![ProducerState {
                        producer_id: 7,
                        producer_epoch: 2,
                        last_sequence: 41,
                        last_timestamp: 1_700_000_000_000,
                        coordinator_epoch: -1,
                        current_txn_start_offset: -1,
                    }],
                },
                DescribeProducersPartitionResponse {
                    partition_index: 2,
                    error_code: 3,
                    error_message: Some("This server does not host this topic-partition.".into()),
                    active_producers: vec![],
                },
            ],
        }],
    };
    check::<_, k::DescribeProducersResponse>(&response, 0..=0, 0);
}

#[test]
fn describe_topic_partitions() {
    use describe_topic_partitions::*;
    use kafka_protocol::messages as k;
    for cursor in [
        None,
        Some(Cursor {
            topic_name: "orders".into(),
            partition_index: 7,
        }),
    ] {
        let request = DescribeTopicPartitionsRequest {
            topics: vec![
                TopicRequest {
                    name: "orders".into(),
                },
                TopicRequest { name: "b".into() },
            ],
            response_partition_limit: 2000,
            cursor: NullableCursor(cursor.clone()),
        };
        check::<_, k::DescribeTopicPartitionsRequest>(&request, 0..=0, 0);
        let response = DescribeTopicPartitionsResponse {
            throttle_time_ms: 0,
            topics: vec![
                DescribeTopicPartitionsResponseTopic {
                    error_code: 0,
                    name: Some("orders".into()),
                    topic_id: Uuid([9; 16]),
                    is_internal: false,
                    partitions: vec![DescribeTopicPartitionsResponsePartition {
                        error_code: 0,
                        partition_index: 7,
                        leader_id: 1,
                        leader_epoch: 0,
                        replica_nodes: vec![1],
                        isr_nodes: vec![1],
                        eligible_leader_replicas: None,
                        last_known_elr: Some(vec![]),
                        offline_replicas: vec![],
                    }],
                    topic_authorized_operations: i32::MIN,
                },
                DescribeTopicPartitionsResponseTopic {
                    error_code: 3,
                    name: Some("b".into()),
                    topic_id: Uuid::ZERO,
                    is_internal: false,
                    partitions: vec![],
                    topic_authorized_operations: 3576,
                },
            ],
            next_cursor: NullableCursor(cursor),
        };
        check::<_, k::DescribeTopicPartitionsResponse>(&response, 0..=0, 0);
    }
}

#[test]
fn client_quotas() {
    use client_quotas::*;
    use kafka_protocol::messages as k;
    let entity = vec![
        EntityData {
            entity_type: "user".into(),
            entity_name: Some("alice".into()),
        },
        EntityData {
            entity_type: "client-id".into(),
            entity_name: None,
        },
    ];
    let request = DescribeClientQuotasRequest {
        components: vec![
            ComponentData {
                entity_type: "user".into(),
                match_type: MATCH_TYPE_EXACT,
                r#match: Some("alice".into()),
            },
            ComponentData {
                entity_type: "client-id".into(),
                match_type: MATCH_TYPE_DEFAULT,
                r#match: None,
            },
        ],
        strict: true,
    };
    check::<_, k::DescribeClientQuotasRequest>(&request, 0..=1, 1);
    for entries in [
        None,
        Some(vec![DescribeEntryData {
            entity: entity.clone(),
            values: vec![
                ValueData {
                    key: "producer_byte_rate".into(),
                    value: Float64(1048576.0),
                },
                ValueData {
                    key: "request_percentage".into(),
                    value: Float64(12.5),
                },
            ],
        }]),
    ] {
        let response = DescribeClientQuotasResponse {
            throttle_time_ms: 0,
            error_code: if entries.is_none() { 42 } else { 0 },
            error_message: entries.is_none().then(|| "bad filter".into()),
            entries,
        };
        check::<_, k::DescribeClientQuotasResponse>(&response, 0..=1, 1);
    }
    let request = AlterClientQuotasRequest {
        entries: vec![AlterEntryData {
            entity: entity.clone(),
            ops: vec![
                OpData {
                    key: "consumer_byte_rate".into(),
                    value: Float64(2e6),
                    remove: false,
                },
                OpData {
                    key: "producer_byte_rate".into(),
                    value: Float64(0.0),
                    remove: true,
                },
            ],
        }],
        validate_only: true,
    };
    check::<_, k::AlterClientQuotasRequest>(&request, 0..=1, 1);
    let response = AlterClientQuotasResponse {
        throttle_time_ms: 0,
        entries: vec![AlterEntryResult {
            error_code: 42,
            error_message: Some("Invalid configuration key bogus".into()),
            entity,
        }],
    };
    check::<_, k::AlterClientQuotasResponse>(&response, 0..=1, 1);
}

#[test]
fn acls() {
    use acls::*;
    use kafka_protocol::messages as k;
    // The oracle has no v0 of these (Kafka 4 dropped it); v0 is v1 without
    // the pattern type, which Tarn serves for older clients.
    let describe = DescribeAclsRequest {
        resource_type_filter: 1,
        resource_name_filter: None,
        pattern_type_filter: 3,
        principal_filter: Some("User:alice".into()),
        host_filter: None,
        operation: 1,
        permission_type: 1,
    };
    check::<_, k::DescribeAclsRequest>(&describe, 1..=3, 2);
    let described = DescribeAclsResponse {
        throttle_time_ms: 0,
        error_code: 54,
        error_message: Some("No Authorizer is configured on the broker".into()),
        resources: vec![DescribeAclsResource {
            resource_type: 2,
            resource_name: "t".into(),
            pattern_type: 3,
            acls: vec![AclDescription {
                principal: "User:alice".into(),
                host: "*".into(),
                operation: 3,
                permission_type: 3,
            }],
        }],
    };
    check::<_, k::DescribeAclsResponse>(&described, 1..=3, 2);
    let create = CreateAclsRequest {
        creations: vec![AclCreation {
            resource_type: 2,
            resource_name: "t".into(),
            resource_pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        }],
    };
    check::<_, k::CreateAclsRequest>(&create, 1..=3, 2);
    let created = CreateAclsResponse {
        throttle_time_ms: 0,
        results: vec![AclCreationResult {
            error_code: 54,
            error_message: None,
        }],
    };
    check::<_, k::CreateAclsResponse>(&created, 1..=3, 2);
    let delete = DeleteAclsRequest {
        filters: vec![DeleteAclsFilter {
            resource_type_filter: 1,
            resource_name_filter: Some("t".into()),
            pattern_type_filter: 3,
            principal_filter: None,
            host_filter: None,
            operation: 1,
            permission_type: 1,
        }],
    };
    check::<_, k::DeleteAclsRequest>(&delete, 1..=3, 2);
    let deleted = DeleteAclsResponse {
        throttle_time_ms: 0,
        filter_results: vec![DeleteAclsFilterResult {
            error_code: 54,
            error_message: Some("No Authorizer is configured on the broker".into()),
            matching_acls: vec![DeleteAclsMatchingAcl {
                error_code: 0,
                error_message: None,
                resource_type: 2,
                resource_name: "t".into(),
                pattern_type: 3,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: 3,
                permission_type: 3,
            }],
        }],
    };
    check::<_, k::DeleteAclsResponse>(&deleted, 1..=3, 2);
}

#[test]
fn elect_leaders() {
    use elect_leaders::*;
    use kafka_protocol::messages as k;
    let request = ElectLeadersRequest {
        election_type: 0,
        topic_partitions: Some(vec![ElectLeadersTopicPartitions {
            topic: "t".into(),
            partitions: vec![0, 3],
        }]),
        timeout_ms: 30_000,
    };
    check::<_, k::ElectLeadersRequest>(&request, 0..=2, 2);
    let every = ElectLeadersRequest {
        election_type: 1,
        topic_partitions: None,
        timeout_ms: 30_000,
    };
    check::<_, k::ElectLeadersRequest>(&every, 1..=2, 2);
    let response = ElectLeadersResponse {
        throttle_time_ms: 0,
        error_code: 0,
        replica_election_results: vec![ReplicaElectionResult {
            topic: "t".into(),
            partition_result: vec![
                ElectLeadersPartitionResult {
                    partition_id: 0,
                    error_code: 0,
                    error_message: None,
                },
                ElectLeadersPartitionResult {
                    partition_id: 3,
                    error_code: 84,
                    error_message: Some("Leader election not needed for topic partition.".into()),
                },
            ],
        }],
    };
    check::<_, k::ElectLeadersResponse>(&response, 0..=2, 2);
}

#[test]
fn partition_reassignments() {
    use kafka_protocol::messages as k;
    use reassignments::*;
    for allow in [true, false] {
        let request = AlterPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            allow_replication_factor_change: allow,
            topics: vec![ReassignableTopic {
                name: "t".into(),
                partitions: vec![
                    ReassignablePartition {
                        partition_index: 0,
                        replicas: Some(vec![2, 3, 4]),
                    },
                    ReassignablePartition {
                        partition_index: 1,
                        replicas: None,
                    },
                ],
            }],
        };
        // Version 0 cannot say "false"; Kafka refuses to write it.
        let versions = if allow { 0..=1 } else { 1..=1 };
        check::<_, k::AlterPartitionReassignmentsRequest>(&request, versions.clone(), 0);
        let response = AlterPartitionReassignmentsResponse {
            throttle_time_ms: 0,
            allow_replication_factor_change: allow,
            error_code: 0,
            error_message: None,
            responses: vec![ReassignableTopicResponse {
                name: "t".into(),
                partitions: vec![ReassignablePartitionResponse {
                    partition_index: 1,
                    error_code: 85,
                    error_message: Some("no reassignment is in progress".into()),
                }],
            }],
        };
        check::<_, k::AlterPartitionReassignmentsResponse>(&response, versions, 0);
    }
    for topics in [
        None,
        Some(vec![ListPartitionReassignmentsTopics {
            name: "t".into(),
            partition_indexes: vec![0, 2],
        }]),
    ] {
        let request = ListPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            topics,
        };
        check::<_, k::ListPartitionReassignmentsRequest>(&request, 0..=0, 0);
    }
    let response = ListPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        topics: vec![OngoingTopicReassignment {
            name: "t".into(),
            partitions: vec![OngoingPartitionReassignment {
                partition_index: 0,
                replicas: vec![2, 3, 4, 1],
                adding_replicas: vec![4],
                removing_replicas: vec![1],
            }],
        }],
    };
    check::<_, k::ListPartitionReassignmentsResponse>(&response, 0..=0, 0);
}

#[test]
fn alter_replica_log_dirs() {
    use alter_replica_log_dirs::*;
    use kafka_protocol::messages as k;
    let request = AlterReplicaLogDirsRequest {
        dirs: vec![AlterReplicaLogDir {
            path: "/data".into(),
            topics: vec![AlterReplicaLogDirTopic {
                name: "t".into(),
                partitions: vec![0, 2],
            }],
        }],
    };
    check::<_, k::AlterReplicaLogDirsRequest>(&request, 1..=2, 2);
    let response = AlterReplicaLogDirsResponse {
        throttle_time_ms: 0,
        results: vec![AlterReplicaLogDirTopicResult {
            topic_name: "t".into(),
            partitions: vec![AlterReplicaLogDirPartitionResult {
                partition_index: 2,
                error_code: 9,
            }],
        }],
    };
    check::<_, k::AlterReplicaLogDirsResponse>(&response, 1..=2, 2);
}

#[test]
fn unregister_broker() {
    use kafka_protocol::messages as k;
    use unregister_broker::*;
    check::<_, k::UnregisterBrokerRequest>(&UnregisterBrokerRequest { broker_id: 3 }, 0..=0, 0);
    let response = UnregisterBrokerResponse {
        throttle_time_ms: 0,
        error_code: 102,
        error_message: Some("Broker ID 3 is not currently registered".into()),
    };
    check::<_, k::UnregisterBrokerResponse>(&response, 0..=0, 0);
}

#[test]
fn update_features() {
    use kafka_protocol::messages as k;
    use update_features::*;
    // v0 has allow_downgrade and no upgrade type, v1 on the other way round.
    let request = |allow_downgrade, upgrade_type| UpdateFeaturesRequest {
        timeout_ms: 30_000,
        feature_updates: vec![FeatureUpdateKey {
            feature: "metadata.version".into(),
            max_version_level: 7,
            allow_downgrade,
            upgrade_type,
        }],
        validate_only: false,
    };
    check::<_, k::UpdateFeaturesRequest>(&request(true, 1), 0..=0, 0);
    let mut validate_only = request(false, 2);
    validate_only.validate_only = true;
    check::<_, k::UpdateFeaturesRequest>(&validate_only, 1..=2, 0);
    let response = UpdateFeaturesResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        results: vec![UpdatableFeatureResult {
            feature: "metadata.version".into(),
            error_code: 0,
            error_message: Some("NONE".into()),
        }],
    };
    check::<_, k::UpdateFeaturesResponse>(&response, 0..=1, 0);
    let refused = UpdateFeaturesResponse {
        throttle_time_ms: 0,
        error_code: 95,
        error_message: Some("Invalid update version 8".into()),
        results: Vec::new(),
    };
    check::<_, k::UpdateFeaturesResponse>(&refused, 0..=2, 0);
}

#[test]
fn list_transactions() {
    use kafka_protocol::messages as k;
    use list_transactions::*;
    let request = |version: i16| ListTransactionsRequest {
        state_filters: vec!["Ongoing".into(), "Bogus".into()],
        producer_id_filters: vec![7, 1 << 40],
        duration_filter: if version >= 1 { 60_000 } else { -1 },
        transactional_id_pattern: (version >= 2).then(|| "app-.*".into()),
    };
    for version in 0..=2 {
        check::<_, k::ListTransactionsRequest>(&request(version), version..=version, 0);
    }
    let response = ListTransactionsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        unknown_state_filters: vec!["Bogus".into()],
        transaction_states: vec![ListedTransaction {
            transactional_id: "app-1".into(),
            producer_id: 42,
            transaction_state: "Ongoing".into(),
        }],
    };
    check::<_, k::ListTransactionsResponse>(&response, 0..=2, 0);
}

#[test]
fn describe_quorum() {
    use describe_quorum::*;
    use kafka_protocol::messages as k;
    let request = DescribeQuorumRequest {
        topics: vec![DescribeQuorumRequestTopic {
            topic_name: "__cluster_metadata".into(),
            partitions: vec![DescribeQuorumRequestPartition { partition_index: 0 }],
        }],
    };
    check::<_, k::DescribeQuorumRequest>(&request, 0..=2, 0);
    let replica = |id, offset| ReplicaState {
        replica_id: id,
        replica_directory_id: Uuid([id as u8; 16]),
        log_end_offset: offset,
        last_fetch_timestamp: 1_700_000_000_000,
        last_caught_up_timestamp: 1_700_000_000_500,
    };
    let response = DescribeQuorumResponse {
        error_code: 0,
        error_message: None,
        topics: vec![DescribeQuorumTopic {
            topic_name: "__cluster_metadata".into(),
            partitions: vec![DescribeQuorumPartition {
                partition_index: 0,
                error_code: 0,
                error_message: None,
                leader_id: 2,
                leader_epoch: 7,
                high_watermark: 42,
                current_voters: vec![replica(1, 41), replica(2, 42), replica(3, -1)],
                observers: vec![replica(4, 40)],
            }],
        }],
        nodes: vec![DescribeQuorumNode {
            node_id: 2,
            listeners: vec![DescribeQuorumListener {
                name: "CONTROLLER".into(),
                host: "127.0.0.1".into(),
                port: 29093,
            }],
        }],
    };
    check::<_, k::DescribeQuorumResponse>(&response, 0..=2, 0);
}

#[test]
fn scram_credentials() {
    use kafka_protocol::messages as k;
    use scram_credentials::*;
    for users in [
        None,
        Some(vec![]),
        Some(vec![
            ScramUserName {
                name: "alice".into(),
            },
            ScramUserName { name: "bob".into() },
        ]),
    ] {
        let request = DescribeUserScramCredentialsRequest { users };
        check::<_, k::DescribeUserScramCredentialsRequest>(&request, 0..=0, 0);
    }
    let response = DescribeUserScramCredentialsResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        results: vec![
            DescribeUserScramCredentialsResult {
                user: "alice".into(),
                error_code: 0,
                error_message: None,
                credential_infos: vec![
                    CredentialInfo {
                        mechanism: SCRAM_SHA_256,
                        iterations: 8192,
                    },
                    CredentialInfo {
                        mechanism: SCRAM_SHA_512,
                        iterations: 4096,
                    },
                ],
            },
            DescribeUserScramCredentialsResult {
                user: "bob".into(),
                error_code: tarn_protocol::error::RESOURCE_NOT_FOUND,
                error_message: Some(
                    "Attempt to describe a user credential that does not exist: bob".into(),
                ),
                credential_infos: vec![],
            },
        ],
    };
    check::<_, k::DescribeUserScramCredentialsResponse>(&response, 0..=0, 0);
    let request = AlterUserScramCredentialsRequest {
        deletions: vec![ScramCredentialDeletion {
            name: "bob".into(),
            mechanism: SCRAM_SHA_512,
        }],
        upsertions: vec![ScramCredentialUpsertion {
            name: "alice".into(),
            mechanism: SCRAM_SHA_256,
            iterations: 8192,
            salt: Bytes::from_static(b"0123456789abcdef"),
            salted_password: Bytes::from_static(&[7; 32]),
        }],
    };
    check::<_, k::AlterUserScramCredentialsRequest>(&request, 0..=0, 0);
    let response = AlterUserScramCredentialsResponse {
        throttle_time_ms: 5,
        results: vec![AlterUserScramCredentialsResult {
            user: "alice".into(),
            error_code: tarn_protocol::error::UNSUPPORTED_VERSION,
            error_message: Some("The current metadata.version does not support SCRAM".into()),
        }],
    };
    check::<_, k::AlterUserScramCredentialsResponse>(&response, 0..=0, 0);
}

#[test]
fn list_config_resources() {
    use kafka_protocol::messages as k;
    use list_config_resources::*;
    let request = ListConfigResourcesRequest {
        resource_types: vec![2, 4, 16],
    };
    check::<_, k::ListConfigResourcesRequest>(&request, 0..=1, 0);
    let response = ListConfigResourcesResponse {
        throttle_time_ms: 0,
        error_code: 0,
        config_resources: vec![
            ConfigResource {
                resource_name: "1".into(),
                resource_type: 4,
            },
            ConfigResource {
                resource_name: "orders".into(),
                resource_type: 2,
            },
        ],
    };
    check::<_, k::ListConfigResourcesResponse>(&response, 1..=1, 0);
    let metrics = ListConfigResourcesResponse {
        throttle_time_ms: 3,
        error_code: 35,
        config_resources: vec![ConfigResource {
            resource_name: "subscription".into(),
            resource_type: 16,
        }],
    };
    check::<_, k::ListConfigResourcesResponse>(&metrics, 0..=1, 0);
}
