//! OffsetCommit: stores consumer positions as records in
//! `__consumer_offsets`. Members commit with their generation and member
//! id; a commit with generation -1 and no member id is accepted for a
//! group with no active members (standalone consumers, admin tools).
//! Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION.
//!
//! v9 differs from v8 only for consumer-protocol groups (KIP-848), which
//! Tarn does not have: a classic group validates both alike, as in Kafka.
//! v10 names topics by id; an id no topic has gets UNKNOWN_TOPIC_ID. v0-1
//! (ZooKeeper-era offsets) were removed in Kafka 4.0 (KIP-896), and are
//! refused here likewise.
use std::collections::HashMap;
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
};

use tarn_metadata::MetadataImage;
use tarn_replication::replica_manager::TopicPartition;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;
use crate::group::records::OffsetAndMetadata;

pub const KEY: i16 = 8;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "OffsetCommit",
    min_version: 2,
    max_version: 10,
    flexible_min: 8,
};
/// The first version that names topics by id.
const TOPIC_ID_VERSION: i16 = 10;

pub fn partition_exists(image: &MetadataImage, topic: &str, partition: i32) -> bool {
    image
        .topic(topic)
        .is_some_and(|t| t.partitions.iter().any(|p| p.partition_id == partition))
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let now = broker.groups.now_ms();
    let image = broker.metadata.image();
    let by_id = ctx.version.version >= TOPIC_ID_VERSION;
    if by_id {
        // An unknown id leaves the name empty, which no topic has.
        for topic in &mut request.topics {
            topic.name = image
                .topic_by_id(&topic.topic_id)
                .map(|t| t.name.clone())
                .unwrap_or_default();
        }
    }
    let ready = group::ensure_offsets_topic(broker).await;
    let expire_timestamp_ms =
        (request.retention_time_ms != -1).then(|| now.saturating_add(request.retention_time_ms));
    let mut codes: HashMap<TopicPartition, ErrorCode> = HashMap::new();
    let mut offsets = Vec::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let tp = (topic.name.clone(), p.partition_index);
            if by_id && topic.name.is_empty() {
                codes.insert(tp, error::UNKNOWN_TOPIC_ID);
            } else if let Err(code) = ready {
                codes.insert(tp, code);
            } else if !partition_exists(&image, &topic.name, p.partition_index) {
                codes.insert(tp, error::UNKNOWN_TOPIC_OR_PARTITION);
            } else {
                offsets.push((
                    tp,
                    OffsetAndMetadata {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.committed_metadata.clone().unwrap_or_default(),
                        commit_timestamp_ms: now,
                        expire_timestamp_ms,
                    },
                ));
            }
        }
    }
    if !offsets.is_empty() {
        let committed = broker.groups.commit_offsets(
            &request.group_id,
            &request.member_id,
            request.group_instance_id.as_deref(),
            request.generation_id_or_member_epoch,
            offsets,
        );
        // Acknowledged only once the commit is as durable as configured.
        let durable = group::await_durability(broker, &request.group_id).await;
        codes.extend(committed.into_iter().map(|(tp, code)| match durable {
            Err(e) if code == error::NONE => (tp, e),
            _ => (tp, code),
        }));
    }
    // Answer in the request's order.
    let mut topics: Vec<OffsetCommitResponseTopic> = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let code = codes
                    .get(&(topic.name.clone(), p.partition_index))
                    .copied()
                    .unwrap_or(error::UNKNOWN_SERVER_ERROR);
                OffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: code,
                }
            })
            .collect();
        topics.push(OffsetCommitResponseTopic {
            name: topic.name,
            topic_id: topic.topic_id,
            partitions,
        });
    }
    OffsetCommitResponse {
        throttle_time_ms: 0,
        topics,
    }
}
