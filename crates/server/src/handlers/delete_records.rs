//! DeleteRecords: moves a partition's log start offset up to the given
//! offset (-1: the high watermark), durably, so consumers starting from
//! the beginning start there. Refused with POLICY_VIOLATION when the
//! topic's `cleanup.policy` does not include `delete`, as in Kafka.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::delete_records::{
    DeleteRecordsPartition, DeleteRecordsPartitionResult, DeleteRecordsRequest,
    DeleteRecordsResponse, DeleteRecordsTopicResult,
};

use tarn_replication::replica_manager::PartitionError;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 21;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DeleteRecords",
    min_version: 0,
    max_version: 2,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let image = broker.metadata.image();
    let effective = broker.config_view(&image).effective();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let deletion_allowed = image.topic(&topic.name).map(|t| {
                effective
                    .topic_value(&t.configs, "cleanup.policy")
                    .split(',')
                    .any(|p| p == "delete")
            });
            // Kafka keys the partitions asked for: one given twice is
            // done once, to the offset given last.
            let mut last: Vec<&DeleteRecordsPartition> = Vec::new();
            for p in &topic.partitions {
                match last.iter_mut().find(|q| q.partition_index == p.partition_index) {
                    Some(q) => *q = p,
                    None => last.push(p),
                }
            }
            let partitions = last
                .into_iter()
                .map(|p| {
                    let outcome = match (
                        broker.leader_partition(&topic.name, p.partition_index),
                        deletion_allowed,
                    ) {
                        (Err(e), _) => Err(e),
                        (Ok(_), None) => Err(PartitionError::new(
                            error::UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition.",
                        )),
                        (Ok(_), Some(false)) => Err(PartitionError::new(
                            error::POLICY_VIOLATION,
                            format!(
                                "Records of partition {}-{} can not be deleted due to the configured policy",
                                topic.name, p.partition_index
                            ),
                        )),
                        (Ok(partition), Some(true)) => partition.delete_records(p.offset),
                    };
                    match outcome {
                        Ok(low_watermark) => {
                            tracing::info!(topic = %topic.name, partition = p.partition_index, low_watermark, "deleted records");
                            DeleteRecordsPartitionResult {
                                partition_index: p.partition_index,
                                low_watermark,
                                error_code: error::NONE,
                            }
                        }
                        Err(e) => {
                            tracing::info!(topic = %topic.name, partition = p.partition_index, error = %e.message, "delete records refused");
                            DeleteRecordsPartitionResult {
                                partition_index: p.partition_index,
                                low_watermark: -1,
                                error_code: e.code,
                            }
                        }
                    }
                })
                .collect();
            DeleteRecordsTopicResult {
                name: topic.name,
                partitions,
            }
        })
        .collect();
    DeleteRecordsResponse {
        throttle_time_ms: 0,
        topics,
    }
}
