//! OffsetFetch: committed offsets of a group, for the asked partitions or
//! (from v2, with a null topic list) every partition with an offset. A
//! partition without one answers offset -1. v8 asks for several groups at
//! once. v1 has no top-level error, so a group error is reported on
//! every partition.
//!
//! v9's member id and epoch only matter to consumer-protocol groups
//! (KIP-848); Kafka does not check them for a classic group, the only kind
//! Tarn has. v10 names topics by id: an id no topic has answers its
//! partitions with UNKNOWN_TOPIC_ID, and when every offset is asked for, a
//! topic that no longer exists (so has no id) is left out. v0 (ZooKeeper-
//! era offsets) was removed in Kafka 4.0 (KIP-896), and is refused here
//! likewise.
use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchResponse,
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use tarn_protocol::Uuid;

use tarn_metadata::MetadataImage;
use tarn_replication::replica_manager::TopicPartition;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;
use crate::group::records::OffsetAndMetadata;

pub const KEY: i16 = 9;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "OffsetFetch",
    min_version: 1,
    max_version: 10,
    flexible_min: 6,
};
/// The first version with several groups per request.
const GROUPS_VERSION: i16 = 8;
/// The first version that names topics by id.
const TOPIC_ID_VERSION: i16 = 10;
/// The first version with a top-level error code.
const TOP_LEVEL_ERROR_VERSION: i16 = 2;

fn partition(
    index: i32,
    found: Option<OffsetAndMetadata>,
    code: ErrorCode,
) -> OffsetFetchResponsePartition {
    match found {
        Some(o) => OffsetFetchResponsePartition {
            partition_index: index,
            committed_offset: o.offset,
            committed_leader_epoch: o.leader_epoch,
            metadata: Some(o.metadata),
            error_code: code,
        },
        None => OffsetFetchResponsePartition {
            partition_index: index,
            committed_offset: -1,
            committed_leader_epoch: -1,
            metadata: Some(String::new()),
            error_code: code,
        },
    }
}

/// Groups partitions by topic, in topic order.
fn by_topic(
    entries: Vec<(TopicPartition, Option<OffsetAndMetadata>, ErrorCode)>,
) -> Vec<OffsetFetchResponseTopic> {
    let mut topics: BTreeMap<String, Vec<OffsetFetchResponsePartition>> = BTreeMap::new();
    for ((topic, index), found, code) in entries {
        topics
            .entry(topic)
            .or_default()
            .push(partition(index, found, code));
    }
    topics
        .into_iter()
        .map(|(name, partitions)| OffsetFetchResponseTopic {
            name,
            topic_id: Uuid::ZERO,
            partitions,
        })
        .collect()
}

fn wanted(topics: Option<Vec<OffsetFetchRequestTopic>>) -> Option<Vec<TopicPartition>> {
    topics.map(|topics| {
        topics
            .into_iter()
            .flat_map(|t| {
                let name = t.name;
                t.partition_indexes
                    .into_iter()
                    .map(move |p| (name.clone(), p))
            })
            .collect()
    })
}

/// Names the v10 request's topics from their ids; those whose id no
/// topic has come back separately.
fn resolve_ids(
    image: &MetadataImage,
    topics: Option<Vec<OffsetFetchRequestTopic>>,
) -> (
    Option<Vec<OffsetFetchRequestTopic>>,
    Vec<OffsetFetchRequestTopic>,
) {
    let Some(topics) = topics else {
        return (None, Vec::new());
    };
    let mut unknown = Vec::new();
    let mut known = Vec::with_capacity(topics.len());
    for mut topic in topics {
        match image.topic_by_id(&topic.topic_id) {
            Some(info) => {
                topic.name = info.name.clone();
                known.push(topic);
            }
            None => unknown.push(topic),
        }
    }
    (Some(known), unknown)
}

/// One v8+ group's answer. From v10 each topic carries its id, and the
/// partitions of unknown ids are answered UNKNOWN_TOPIC_ID after the rest.
fn fetch_group(
    broker: &Broker,
    ready: Result<(), ErrorCode>,
    image: &MetadataImage,
    version: i16,
    group: OffsetFetchRequestGroup,
) -> OffsetFetchResponseGroup {
    let by_id = version >= TOPIC_ID_VERSION;
    let (topics, unknown) = if by_id {
        resolve_ids(image, group.topics)
    } else {
        (group.topics, Vec::new())
    };
    let (code, entries) = fetch(broker, ready, &group.group_id, wanted(topics));
    let mut topics = if code == error::NONE {
        by_topic(entries)
    } else {
        Vec::new()
    };
    if by_id && code == error::NONE {
        topics.retain_mut(|t| match image.topic(&t.name) {
            Some(info) => {
                t.topic_id = info.topic_id;
                true
            }
            None => false,
        });
        topics.extend(unknown.into_iter().map(|t| {
            OffsetFetchResponseTopic {
                name: String::new(),
                topic_id: t.topic_id,
                partitions: t
                    .partition_indexes
                    .into_iter()
                    .map(|index| partition(index, None, error::UNKNOWN_TOPIC_ID))
                    .collect(),
            }
        }));
    }
    OffsetFetchResponseGroup {
        group_id: group.group_id,
        topics,
        error_code: code,
    }
}

/// One group's offsets, or the group-level error with the asked
/// partitions (for versions that report it per partition).
fn fetch(
    broker: &Broker,
    ready: Result<(), ErrorCode>,
    group_id: &str,
    partitions: Option<Vec<TopicPartition>>,
) -> (
    ErrorCode,
    Vec<(TopicPartition, Option<OffsetAndMetadata>, ErrorCode)>,
) {
    let result = ready.and_then(|()| broker.groups.fetch_offsets(group_id, partitions.clone()));
    match result {
        Ok(found) => (
            error::NONE,
            found
                .into_iter()
                .map(|(tp, o)| (tp, o, error::NONE))
                .collect(),
        ),
        Err(code) => (
            code,
            partitions
                .unwrap_or_default()
                .into_iter()
                .map(|tp| (tp, None, code))
                .collect(),
        ),
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: OffsetFetchRequest,
) -> OffsetFetchResponse {
    let version = ctx.version.version;
    let ready = group::ensure_offsets_topic(broker).await;
    if version >= GROUPS_VERSION {
        let image = broker.metadata.image();
        let groups = request
            .groups
            .into_iter()
            .map(|g| fetch_group(broker, ready, &image, version, g))
            .collect();
        return OffsetFetchResponse {
            groups,
            ..Default::default()
        };
    }
    let (code, entries) = fetch(broker, ready, &request.group_id, wanted(request.topics));
    if version >= TOP_LEVEL_ERROR_VERSION {
        OffsetFetchResponse {
            throttle_time_ms: 0,
            topics: if code == error::NONE {
                by_topic(entries)
            } else {
                Vec::new()
            },
            error_code: code,
            groups: Vec::new(),
        }
    } else {
        OffsetFetchResponse {
            topics: by_topic(entries),
            ..Default::default()
        }
    }
}
