//! DescribeProducers: the idempotent producers each partition remembers
//! (producer id, epoch, last sequence and the timestamp of its last
//! batch), as kafka-transactions.sh describe-producers shows them. With no
//! transactions yet, the coordinator epoch and the current transaction's
//! start offset are always -1. A follower answers with what its own
//! replica of the log remembers, as Kafka's does (the Admin client asks
//! the leader unless told a broker: `describe-producers --broker-id`).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_producers::{
    DescribeProducersPartitionResponse, DescribeProducersRequest, DescribeProducersResponse,
    DescribeProducersTopicResponse, ProducerState,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 61;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeProducers",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| describe(broker, &topic.name, index))
                .collect();
            DescribeProducersTopicResponse {
                name: topic.name,
                partitions,
            }
        })
        .collect();
    DescribeProducersResponse {
        throttle_time_ms: 0,
        topics,
    }
}

fn describe(broker: &Broker, topic: &str, index: i32) -> DescribeProducersPartitionResponse {
    let refused = |code, message: String| DescribeProducersPartitionResponse {
        partition_index: index,
        error_code: code,
        error_message: Some(message),
        active_producers: vec![],
    };
    let partition = match broker.hosted_partition(topic, index) {
        Ok(partition) => partition,
        Err(e) => return refused(e.code, e.message),
    };
    let producers = partition.with_log_ref(|log| {
        let mut producers: Vec<ProducerState> = log
            .producer_state()
            .producers()
            .map(|(producer_id, entry)| {
                let last = entry.batches.back();
                ProducerState {
                    producer_id,
                    producer_epoch: i32::from(entry.producer_epoch),
                    last_sequence: last.map_or(-1, |b| b.last_seq),
                    last_timestamp: last.map_or(-1, |b| b.timestamp),
                    coordinator_epoch: -1,
                    current_txn_start_offset: -1,
                }
            })
            .collect();
        producers.sort_by_key(|p| p.producer_id);
        producers
    });
    match producers {
        Ok(active_producers) => DescribeProducersPartitionResponse {
            partition_index: index,
            error_code: error::NONE,
            error_message: None,
            active_producers,
        },
        Err(e) => refused(e.code, e.message),
    }
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::describe_producers::DescribeProducersTopicRequest;
    use tarn_protocol::record_batch::RecordBatchBuilder;

    use super::*;

    #[tokio::test]
    async fn lists_each_partitions_producers() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "idem", 2);
        let partition = broker.replicas.get("idem", 1).unwrap();
        for (producer, epoch, first_seq, count) in [(7, 1, 0, 3), (7, 1, 3, 2), (3, 0, 0, 1)] {
            let mut batch = RecordBatchBuilder::new().producer(producer, epoch, first_seq);
            for i in 0..count {
                batch = batch.record(1_000 + i64::from(first_seq + i), None, Some(b"v"));
            }
            crate::testing::append_now(&partition, &batch.build());
        }
        let ctx = crate::testing::request_context(&SPEC, 0);
        let request = DescribeProducersRequest {
            topics: vec![DescribeProducersTopicRequest {
                name: "idem".into(),
                partition_indexes: vec![1, 0, 9],
            }],
        };
        let response = handle(&broker, &ctx, request).await;
        let partitions = &response.topics[0].partitions;
        let seen: Vec<(i64, i32, i32, i64)> = partitions[0]
            .active_producers
            .iter()
            .map(|p| {
                (
                    p.producer_id,
                    p.producer_epoch,
                    p.last_sequence,
                    p.last_timestamp,
                )
            })
            .collect();
        assert_eq!(seen, vec![(3, 0, 0, 1_000), (7, 1, 4, 1_004)]);
        assert!(partitions[1].active_producers.is_empty() && partitions[1].error_code == 0);
        assert_eq!(partitions[2].error_code, error::UNKNOWN_TOPIC_OR_PARTITION);
        broker.shutdown().unwrap();
    }
}
