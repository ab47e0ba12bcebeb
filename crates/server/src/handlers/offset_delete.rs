//! OffsetDelete: removes a group's committed offsets for some partitions.
//! An empty group may drop any; an active consumer group only those of
//! topics it does not subscribe to (else GROUP_SUBSCRIBED_TO_TOPIC).
use std::collections::HashMap;
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::offset_delete::{
    OffsetDeleteRequest, OffsetDeleteResponse, OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
};

use tarn_replication::replica_manager::TopicPartition;

use super::offset_commit::partition_exists;
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;

pub const KEY: i16 = 47;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "OffsetDelete",
    min_version: 0,
    max_version: 0,
    flexible_min: i16::MAX,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let image = broker.metadata.image();
    let mut codes: HashMap<TopicPartition, ErrorCode> = HashMap::new();
    let mut known = Vec::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let tp = (topic.name.clone(), p.partition_index);
            if partition_exists(&image, &topic.name, p.partition_index) {
                known.push(tp);
            } else {
                codes.insert(tp, error::UNKNOWN_TOPIC_OR_PARTITION);
            }
        }
    }
    let (mut group_error, deleted) = match group::ensure_offsets_topic(broker).await {
        Ok(()) => broker.groups.delete_offsets(&request.group_id, known),
        Err(code) => (code, Vec::new()),
    };
    if group_error == error::NONE {
        if let Err(code) = group::await_durability(broker, &request.group_id).await {
            group_error = code;
        }
    }
    if group_error != error::NONE {
        return OffsetDeleteResponse {
            error_code: group_error,
            throttle_time_ms: 0,
            topics: Vec::new(),
        };
    }
    codes.extend(deleted);
    let topics = request
        .topics
        .into_iter()
        .map(|topic| OffsetDeleteResponseTopic {
            partitions: topic
                .partitions
                .iter()
                .map(|p| OffsetDeleteResponsePartition {
                    partition_index: p.partition_index,
                    error_code: codes
                        .get(&(topic.name.clone(), p.partition_index))
                        .copied()
                        .unwrap_or(error::UNKNOWN_SERVER_ERROR),
                })
                .collect(),
            name: topic.name,
        })
        .collect();
    OffsetDeleteResponse {
        error_code: error::NONE,
        throttle_time_ms: 0,
        topics,
    }
}
