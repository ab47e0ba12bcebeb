//! Hand-built protocol requests through Tarn's own codec, for checks that
//! client libraries hide (exact error codes, offsets of each append).

use bytes::Bytes;
use tarn_cli::client::Client;
use tarn_protocol::messages::describe_configs::{
    DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResponse,
};
use tarn_protocol::messages::fetch::{
    FetchPartition, FetchRequest, FetchResponse, FetchTopic, PartitionData,
};
use tarn_protocol::messages::join_group::{JoinGroupRequest, JoinGroupRequestProtocol};
use tarn_protocol::messages::produce::{
    PartitionProduceData, PartitionProduceResponse, ProduceRequest, ProduceResponse,
    TopicProduceData,
};
use tarn_protocol::record_batch::RecordBatchBuilder;
use tarn_protocol::Uuid;

/// An uncompressed batch of `records` keyed records with timestamps from
/// `timestamp` on and `value` as every value.
pub fn batch(records: usize, timestamp: i64, value: &[u8]) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new();
    for i in 0..records {
        builder = builder.record(
            timestamp + i as i64,
            Some(format!("k{i}").as_bytes()),
            Some(value),
        );
    }
    builder.build()
}

/// One Produce request for one partition at `version` with `acks`; the
/// partition's answer.
pub fn produce_version(
    client: &mut Client,
    version: i16,
    acks: i16,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
) -> PartitionProduceResponse {
    let request = ProduceRequest {
        transactional_id: None,
        acks,
        timeout_ms: 1000,
        topic_data: vec![TopicProduceData {
            name: topic.into(),
            topic_id: Default::default(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(Bytes::from(records)),
            }],
        }],
    };
    let response: ProduceResponse = client.call(0, version, 9, &request).expect("produce");
    response.responses[0].partition_responses[0].clone()
}

/// Produce v9 with acks=all.
pub fn produce(
    client: &mut Client,
    topic: &str,
    partition: i32,
    records: Vec<u8>,
) -> PartitionProduceResponse {
    produce_version(client, 9, -1, topic, partition, records)
}

/// Fetch v12 of partition 0 from `offset`, up to 1 MiB, with the client's
/// idea of the leader `epoch` (-1: none) and a long-poll of `max_wait_ms`.
pub fn fetch(
    client: &mut Client,
    topic: &str,
    offset: i64,
    epoch: i32,
    max_wait_ms: i32,
) -> PartitionData {
    fetch_in_rack(client, topic, offset, epoch, max_wait_ms, "")
}

/// Like [`fetch`], from a consumer whose `client.rack` is `rack` (KIP-392).
pub fn fetch_in_rack(
    client: &mut Client,
    topic: &str,
    offset: i64,
    epoch: i32,
    max_wait_ms: i32,
    rack: &str,
) -> PartitionData {
    let request = FetchRequest {
        rack_id: rack.into(),
        max_wait_ms,
        min_bytes: 1,
        max_bytes: 1 << 20,
        topics: vec![FetchTopic {
            topic: topic.into(),
            topic_id: Uuid::ZERO,
            partitions: vec![FetchPartition {
                partition: 0,
                current_leader_epoch: epoch,
                fetch_offset: offset,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    let response: FetchResponse = client.call(1, 12, 12, &request).expect("fetch");
    response.responses[0].partitions[0].clone()
}

/// A JoinGroup of the consumer protocol `protocol_type` to `group` with
/// one protocol, "range", and a 10 s session and rebalance timeout.
pub fn join_request(group: &str, member_id: &str, protocol_type: &str) -> JoinGroupRequest {
    JoinGroupRequest {
        group_id: group.into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: member_id.into(),
        group_instance_id: None,
        protocol_type: protocol_type.into(),
        protocols: vec![JoinGroupRequestProtocol {
            name: "range".into(),
            metadata: Bytes::from_static(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0]),
        }],
        reason: None,
    }
}

/// The loggers broker `node_id` at `bootstrap` describes (DescribeConfigs
/// of its BROKER_LOGGER resource), with their levels; each must come from
/// DYNAMIC_BROKER_LOGGER_CONFIG.
pub fn broker_loggers(bootstrap: &str, node_id: i32) -> std::collections::HashMap<String, String> {
    let request = DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: 8,
            resource_name: node_id.to_string(),
            configuration_keys: None,
        }],
        include_synonyms: false,
        include_documentation: false,
    };
    let mut client = Client::connect(bootstrap).expect("connect");
    let response: DescribeConfigsResponse =
        client.call(32, 4, 4, &request).expect("DescribeConfigs");
    let result = response.results.into_iter().next().expect("one result");
    assert_eq!(result.error_code, 0, "{result:?}");
    result
        .configs
        .into_iter()
        .map(|c| {
            assert_eq!(c.config_source, 6, "DYNAMIC_BROKER_LOGGER_CONFIG: {c:?}");
            (c.name, c.value.expect("a level"))
        })
        .collect()
}
