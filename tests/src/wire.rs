//! Hand-built protocol requests through Tarn's own codec, for checks that
//! client libraries hide (exact error codes, offsets of each append).

use bytes::Bytes;
use tarn_cli::client::Client;
use tarn_protocol::messages::produce::{
    PartitionProduceData, PartitionProduceResponse, ProduceRequest, ProduceResponse,
    TopicProduceData,
};
use tarn_protocol::record_batch::RecordBatchBuilder;

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
