//! ListOffsets: earliest, latest, max timestamp, or the first offset at
//! or after a timestamp; from v8 the earliest local offset and from v9 the
//! latest tiered one. Tarn has no tiered storage, so, as Kafka without
//! remote storage answers, the earliest local offset is the log start
//! offset and the latest tiered offset is -1. `timeout_ms` (v10) bounds a
//! wait for followers, and there are none.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse, EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::replica_manager::{Partition, PartitionError};

pub const KEY: i16 = 2;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListOffsets",
    min_version: 1,
    max_version: 10,
    flexible_min: 6,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| ListOffsetsTopicResponse {
            partitions: topic
                .partitions
                .iter()
                .map(|p| {
                    let result = broker
                        .replicas
                        .get(&topic.name, p.partition_index)
                        .ok_or_else(|| {
                            PartitionError::new(
                                error::UNKNOWN_TOPIC_OR_PARTITION,
                                "unknown partition",
                            )
                        })
                        .and_then(|partition| lookup(&partition, p, ctx.version.version));
                    result.unwrap_or_else(|e| ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        ..Default::default()
                    })
                })
                .collect(),
            name: topic.name,
        })
        .collect();
    ListOffsetsResponse {
        throttle_time_ms: 0,
        topics,
    }
}

fn lookup(
    partition: &Partition,
    request: &ListOffsetsPartition,
    version: i16,
) -> Result<ListOffsetsPartitionResponse, PartitionError> {
    partition.check_epoch(request.current_leader_epoch)?;
    let epoch = partition.leader_epoch();
    let (timestamp, offset, leader_epoch) =
        partition.with_log_ref(|log| match request.timestamp {
            EARLIEST_TIMESTAMP => {
                // The epoch that wrote the first offset is not tracked per
                // offset yet; -1 tells the client to skip validation.
                Ok((-1, log.log_start_offset(), -1))
            }
            // With no tiered storage every offset is local.
            EARLIEST_LOCAL_TIMESTAMP if version >= 8 => Ok((-1, log.log_start_offset(), -1)),
            LATEST_TIERED_TIMESTAMP if version >= 9 => Ok((-1, -1, -1)),
            LATEST_TIMESTAMP => Ok((-1, log.log_end_offset(), epoch)),
            MAX_TIMESTAMP if version >= 7 => {
                let (ts, offset, batch_epoch) = log.max_timestamp()?;
                Ok((ts, if ts < 0 { -1 } else { offset }, batch_epoch))
            }
            ts if ts < 0 => Err(PartitionError::new(
                error::UNSUPPORTED_VERSION,
                format!("timestamp {ts} is not supported at v{version}"),
            )),
            ts => match log.offset_for_timestamp(ts) {
                Ok(Some((offset, found_ts, batch_epoch))) => Ok((found_ts, offset, batch_epoch)),
                Ok(None) => Ok((-1, -1, -1)),
                Err(e) => Err(PartitionError::from(e)),
            },
        })??;
    Ok(ListOffsetsPartitionResponse {
        partition_index: request.partition_index,
        error_code: error::NONE,
        old_style_offsets: vec![],
        timestamp,
        offset,
        leader_epoch,
    })
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::list_offsets::ListOffsetsTopic;
    use tarn_protocol::record_batch::RecordBatchBuilder;

    use super::*;

    async fn ask(broker: &Arc<Broker>, version: i16, timestamp: i64) -> (i16, i64, i64) {
        let ctx = crate::testing::request_context(&SPEC, version);
        let request = ListOffsetsRequest {
            replica_id: -1,
            topics: vec![ListOffsetsTopic {
                name: "t".into(),
                partitions: vec![ListOffsetsPartition {
                    partition_index: 0,
                    timestamp,
                    ..Default::default()
                }],
            }],
            timeout_ms: 30_000,
            ..Default::default()
        };
        let response = handle(broker, &ctx, request).await;
        let p = &response.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    }

    #[tokio::test]
    async fn earliest_local_and_latest_tiered_without_tiered_storage() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        let partition = broker.replicas.get("t", 0).unwrap();
        let batch = RecordBatchBuilder::new()
            .record(1_000, None, Some(b"a"))
            .record(1_001, None, Some(b"b"))
            .build();
        partition.append(&batch).unwrap();
        assert_eq!(ask(&broker, 10, EARLIEST_LOCAL_TIMESTAMP).await, (0, 0, -1));
        assert_eq!(ask(&broker, 8, EARLIEST_LOCAL_TIMESTAMP).await, (0, 0, -1));
        assert_eq!(ask(&broker, 10, LATEST_TIERED_TIMESTAMP).await, (0, -1, -1));
        assert_eq!(ask(&broker, 10, LATEST_TIMESTAMP).await, (0, 2, -1));
        // Asked below the version that defines them, they are refused.
        assert_eq!(
            ask(&broker, 7, EARLIEST_LOCAL_TIMESTAMP).await.0,
            error::UNSUPPORTED_VERSION
        );
        assert_eq!(
            ask(&broker, 8, LATEST_TIERED_TIMESTAMP).await.0,
            error::UNSUPPORTED_VERSION
        );
        broker.shutdown().unwrap();
    }
}
