//! OffsetFetch: committed offsets of a group, for the asked partitions or
//! (from v2, with a null topic list) every partition with an offset. A
//! partition without one answers offset -1. v8 asks for several groups at
//! once. v0-1 have no top-level error, so a group error is reported on
//! every partition.
use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::offset_fetch::{
    OffsetFetchRequest, OffsetFetchRequestTopic, OffsetFetchResponse, OffsetFetchResponseGroup,
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use tarn_protocol::Uuid;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;
use crate::group::records::OffsetAndMetadata;
use crate::replica_manager::TopicPartition;

pub const KEY: i16 = 9;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "OffsetFetch",
    min_version: 0,
    max_version: 8,
    flexible_min: 6,
};
/// The first version with several groups per request.
const GROUPS_VERSION: i16 = 8;
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

/// One group's offsets, or the group-level error with the asked
/// partitions (for versions that report it per partition).
fn fetch(
    broker: &Broker,
    group_id: &str,
    partitions: Option<Vec<TopicPartition>>,
) -> (
    ErrorCode,
    Vec<(TopicPartition, Option<OffsetAndMetadata>, ErrorCode)>,
) {
    let result = group::ensure_offsets_topic(broker)
        .and_then(|()| broker.groups.fetch_offsets(group_id, partitions.clone()));
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
    if version >= GROUPS_VERSION {
        let groups = request
            .groups
            .into_iter()
            .map(|g| {
                let (code, entries) = fetch(broker, &g.group_id, wanted(g.topics));
                OffsetFetchResponseGroup {
                    group_id: g.group_id,
                    topics: if code == error::NONE {
                        by_topic(entries)
                    } else {
                        Vec::new()
                    },
                    error_code: code,
                }
            })
            .collect();
        return OffsetFetchResponse {
            groups,
            ..Default::default()
        };
    }
    let (code, entries) = fetch(broker, &request.group_id, wanted(request.topics));
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
