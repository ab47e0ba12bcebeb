//! OffsetForLeaderEpoch: the end offset of a leader epoch, which clients
//! use to validate their position after a leader change.
use std::sync::Arc;

use tarn_protocol::messages::offset_for_leader_epoch::{
    EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 23;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "OffsetForLeaderEpoch",
    min_version: 2,
    max_version: 4,
    flexible_min: 4,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| OffsetForLeaderTopicResult {
            partitions: topic
                .partitions
                .iter()
                .map(|p| {
                    let mut out = EpochEndOffset {
                        partition: p.partition,
                        ..Default::default()
                    };
                    let partition = match broker.leader_partition(&topic.topic, p.partition) {
                        Ok(partition) => partition,
                        Err(e) => {
                            out.error_code = e.code;
                            return out;
                        }
                    };
                    if let Err(e) = partition.check_epoch(p.current_leader_epoch) {
                        out.error_code = e.code;
                        return out;
                    }
                    let current = partition.leader_epoch();
                    match partition.with_log_ref(|log| {
                        log.end_offset_for_epoch_as_leader(p.leader_epoch, current)
                    }) {
                        Ok((epoch, end_offset)) => {
                            out.leader_epoch = epoch;
                            out.end_offset = end_offset;
                        }
                        Err(e) => out.error_code = e.code,
                    }
                    out
                })
                .collect(),
            topic: topic.topic,
        })
        .collect();
    OffsetForLeaderEpochResponse {
        throttle_time_ms: 0,
        topics,
    }
}
