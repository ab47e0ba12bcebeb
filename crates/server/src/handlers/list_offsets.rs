//! ListOffsets: earliest, latest, max timestamp, or the first offset at
//! or after a timestamp. Tarn has no tiered storage, so the tiered-storage
//! timestamps answer as Kafka does for a topic without it: earliest-local
//! (v8) is the earliest offset, latest-tiered (v9) and earliest-pending-
//! upload (v11) are "no offset" (-1 with epoch -1). v10's timeout only
//! bounds reads from remote storage, so it has nothing to bound here.
use std::collections::BTreeSet;
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
    ListOffsetsTopicResponse, EARLIEST_LOCAL_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
};

use tarn_replication::replica_manager::{Partition, PartitionError};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 2;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListOffsets",
    min_version: 1,
    max_version: 11,
    flexible_min: 6,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let from_replica = request.replica_id >= 0;
    // A partition asked for twice is answered once, INVALID_REQUEST, as
    // Kafka answers it.
    let mut seen = BTreeSet::new();
    let twice: BTreeSet<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.clone(), p.partition_index))
        })
        .filter(|key| !seen.insert(key.clone()))
        .collect();
    let mut refused = BTreeSet::new();
    let topics = request
        .topics
        .into_iter()
        .filter_map(|topic| {
            let asked = topic.partitions.len();
            let partitions: Vec<ListOffsetsPartitionResponse> = topic
                .partitions
                .iter()
                .filter_map(|p| {
                    let key = (topic.name.clone(), p.partition_index);
                    let result = if twice.contains(&key) {
                        if !refused.insert(key) {
                            return None;
                        }
                        Err(PartitionError::new(
                            error::INVALID_REQUEST,
                            "the partition is asked for more than once",
                        ))
                    } else {
                        broker
                            .leader_partition(&topic.name, p.partition_index)
                            .and_then(|partition| {
                                lookup(&partition, p, ctx.version.version, from_replica)
                            })
                    };
                    Some(result.unwrap_or_else(|e| ListOffsetsPartitionResponse {
                        partition_index: p.partition_index,
                        error_code: e.code,
                        ..Default::default()
                    }))
                })
                .collect();
            (asked == 0 || !partitions.is_empty()).then_some(ListOffsetsTopicResponse {
                partitions,
                name: topic.name,
            })
        })
        .collect();
    ListOffsetsResponse {
        throttle_time_ms: 0,
        topics,
    }
}

/// What Kafka answers for a tiered-storage timestamp on a topic that is
/// not tiered: no timestamp, no offset, no epoch.
const NOTHING_TIERED: (i64, i64, i32) = (-1, -1, -1);

/// The log start offset, as (timestamp, offset, leader epoch).
/// The log start offset and the epoch that wrote it, as Kafka answers; an
/// empty log's is the current leader epoch (Kafka records it when the
/// partition gets its leader).
fn earliest(log: &tarn_storage::Log, leader_epoch: i32) -> (i64, i64, i32) {
    let start = log.log_start_offset();
    (
        -1,
        start,
        log.epoch_for_offset(start).unwrap_or(leader_epoch),
    )
}

/// A follower (`from_replica`) is told the log end for LATEST, as Kafka
/// does; consumers the high watermark.
fn lookup(
    partition: &Partition,
    request: &ListOffsetsPartition,
    version: i16,
    from_replica: bool,
) -> Result<ListOffsetsPartitionResponse, PartitionError> {
    partition.check_epoch(request.current_leader_epoch)?;
    let epoch = partition.leader_epoch();
    let latest = if from_replica {
        partition.log_end_offset()
    } else {
        partition.high_watermark()
    };
    let (timestamp, offset, leader_epoch) =
        partition.with_log_ref(|log| match request.timestamp {
            EARLIEST_TIMESTAMP => Ok(earliest(log, epoch)),
            EARLIEST_LOCAL_TIMESTAMP if version >= 8 => Ok(earliest(log, epoch)),
            LATEST_TIERED_TIMESTAMP if version >= 9 => Ok(NOTHING_TIERED),
            EARLIEST_PENDING_UPLOAD_TIMESTAMP if version >= 11 => Ok(NOTHING_TIERED),
            LATEST_TIMESTAMP => Ok((-1, latest, epoch)),
            MAX_TIMESTAMP if version >= 7 => {
                let (ts, offset, batch_epoch) =
                    log.max_timestamp().map_err(|e| partition.read_failed(e))?;
                Ok((ts, if ts < 0 { -1 } else { offset }, batch_epoch))
            }
            ts if ts < 0 => Err(PartitionError::new(
                error::UNSUPPORTED_VERSION,
                format!("timestamp {ts} is not supported at v{version}"),
            )),
            ts => match log.offset_for_timestamp(ts) {
                Ok(Some((offset, found_ts, batch_epoch))) => Ok((found_ts, offset, batch_epoch)),
                Ok(None) => Ok((-1, -1, -1)),
                Err(e) => Err(partition.read_failed(e)),
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
