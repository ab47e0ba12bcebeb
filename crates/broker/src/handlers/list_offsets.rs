//! ListOffsets: earliest, latest, max timestamp, or the first offset at
//! or after a timestamp.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::replica_manager::{Partition, PartitionError};

pub const KEY: i16 = 2;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListOffsets",
    min_version: 1,
    max_version: 7,
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
                // The epoch that wrote the log start offset, as Kafka
                // answers; an empty log's is the current leader epoch (Kafka
                // records it when the partition gets its leader).
                let start = log.log_start_offset();
                Ok((-1, start, log.epoch_for_offset(start).unwrap_or(epoch)))
            }
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
