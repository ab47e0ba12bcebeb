//! DescribeTopicPartitions (key 75, KIP-966): the topics asked for (all of
//! them when the list is empty), in name order, with their partitions, at
//! most `response_partition_limit` partitions per response (and never more
//! than Kafka's `max.request.partition.size.limit` default, 2000). When the
//! limit cuts the listing short, `next_cursor` names the topic and partition
//! the next request should start from, as Kafka's KRaft metadata cache
//! does: mid-topic, the next partition; between topics, partition 0 of the
//! next topic, whether or not that topic exists.
use std::collections::BTreeSet;
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_topic_partitions::{
    Cursor, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic, NullableCursor,
};
use tarn_protocol::Uuid;

use tarn_metadata::topics::validate_topic_name;
use tarn_metadata::{MetadataImage, TopicInfo};

use super::{ApiSpec, RequestContext, TOPIC_AUTHORIZED_OPERATIONS};
use crate::broker::Broker;

pub const KEY: i16 = 75;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeTopicPartitions",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

/// Kafka's `max.request.partition.size.limit` default: the most partitions
/// one response may carry, whatever the request asks.
pub const PARTITIONS_PER_RESPONSE_MAX: i32 = 2000;

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let image = broker.metadata.image();
    let describe_all = request.topics.is_empty();
    let cursor = request.cursor.0.clone();
    let names: BTreeSet<String> = if describe_all {
        image.topics().map(|t| t.name.clone()).collect()
    } else {
        request.topics.iter().map(|t| t.name.clone()).collect()
    };
    if let Some(cursor) = &cursor {
        if !describe_all && !names.contains(&cursor.topic_name) {
            return refuse_all(&request, error::INVALID_REQUEST);
        }
    }
    let mut remaining = request
        .response_partition_limit
        .clamp(1, PARTITIONS_PER_RESPONSE_MAX) as usize;
    let mut response = DescribeTopicPartitionsResponse::default();
    let start_name = cursor.as_ref().map_or("", |c| c.topic_name.as_str());
    for name in names.iter().filter(|n| n.as_str() >= start_name) {
        if remaining == 0 {
            response.next_cursor = NullableCursor(Some(Cursor {
                topic_name: name.clone(),
                partition_index: 0,
            }));
            break;
        }
        let Some(topic) = image.topic(name) else {
            if !describe_all {
                response.topics.push(unknown_topic(name));
            }
            continue;
        };
        let first = match &cursor {
            Some(c) if c.topic_name == *name => c.partition_index.max(0) as usize,
            _ => 0,
        };
        let (described, next) = describe(&image, topic, first, remaining);
        remaining -= described.partitions.len();
        response.topics.push(described);
        if let Some(next) = next {
            response.next_cursor = NullableCursor(Some(Cursor {
                topic_name: name.clone(),
                partition_index: next,
            }));
            break;
        }
    }
    response
}

/// Up to `limit` partitions of `topic` from index `first`, and the index
/// the next page starts at when some are left.
fn describe(
    image: &MetadataImage,
    topic: &TopicInfo,
    first: usize,
    limit: usize,
) -> (DescribeTopicPartitionsResponseTopic, Option<i32>) {
    let end = topic.partitions.len().min(first.saturating_add(limit));
    let partitions = topic
        .partitions
        .get(first..end)
        .unwrap_or_default()
        .iter()
        .map(|p| DescribeTopicPartitionsResponsePartition {
            // Kafka 4 sets no partition error here: a partition without a
            // leader says so by leader -1 and its offline replicas (and,
            // with eligible leader replicas, by who may lead it next).
            error_code: error::NONE,
            partition_index: p.partition_id,
            leader_id: p.leader,
            leader_epoch: p.leader_epoch,
            replica_nodes: p.replicas.clone(),
            isr_nodes: p.isr.clone(),
            eligible_leader_replicas: Some(p.elr.clone()),
            last_known_elr: Some(p.last_known_elr.clone()),
            offline_replicas: image.offline_replicas(&p.replicas),
        })
        .collect();
    let next = (end < topic.partitions.len()).then_some(end as i32);
    let described = DescribeTopicPartitionsResponseTopic {
        error_code: error::NONE,
        name: Some(topic.name.clone()),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal(),
        partitions,
        topic_authorized_operations: TOPIC_AUTHORIZED_OPERATIONS,
    };
    (described, next)
}

fn unknown_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let code = match validate_topic_name(name) {
        Ok(()) => error::UNKNOWN_TOPIC_OR_PARTITION,
        Err(e) => e.code,
    };
    DescribeTopicPartitionsResponseTopic {
        error_code: code,
        name: Some(name.to_owned()),
        topic_id: Uuid::ZERO,
        is_internal: name.starts_with("__"),
        partitions: Vec::new(),
        // Kafka names what the caller may do even with a topic it cannot
        // describe.
        topic_authorized_operations: TOPIC_AUTHORIZED_OPERATIONS,
    }
}

/// Kafka's error response: every requested topic with the error.
fn refuse_all(
    request: &DescribeTopicPartitionsRequest,
    code: i16,
) -> DescribeTopicPartitionsResponse {
    DescribeTopicPartitionsResponse {
        topics: request
            .topics
            .iter()
            .map(|t| DescribeTopicPartitionsResponseTopic {
                error_code: code,
                name: Some(t.name.clone()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::describe_topic_partitions::TopicRequest;

    use super::*;

    fn request(
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsRequest {
        DescribeTopicPartitionsRequest {
            topics: topics
                .iter()
                .map(|n| TopicRequest {
                    name: n.to_string(),
                })
                .collect(),
            response_partition_limit: limit,
            cursor: NullableCursor(cursor.map(|(t, p)| Cursor {
                topic_name: t.into(),
                partition_index: p,
            })),
        }
    }

    /// (topic, error, partition indexes) of each topic.
    type Seen = Vec<(String, i16, Vec<i32>)>;

    /// What each topic holds, and the next cursor.
    fn seen(response: &DescribeTopicPartitionsResponse) -> (Seen, Option<(String, i32)>) {
        let topics = response
            .topics
            .iter()
            .map(|t| {
                let parts = t.partitions.iter().map(|p| p.partition_index).collect();
                (t.name.clone().unwrap_or_default(), t.error_code, parts)
            })
            .collect();
        let cursor = response
            .next_cursor
            .0
            .as_ref()
            .map(|c| (c.topic_name.clone(), c.partition_index));
        (topics, cursor)
    }

    #[tokio::test]
    async fn pages_by_cursor_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "b", 3);
        crate::testing::create_topic(&broker, "a", 2);
        let ctx = crate::testing::request_context(&SPEC, 0);
        let ok = error::NONE;

        // Everything fits: name order, unknown topics with their error.
        let all = handle(
            &broker,
            &ctx,
            request(&["b", "zz", "a", "bad/name"], 2000, None),
        )
        .await;
        assert_eq!(
            seen(&all),
            (
                vec![
                    ("a".into(), ok, vec![0, 1]),
                    ("b".into(), ok, vec![0, 1, 2]),
                    ("bad/name".into(), error::INVALID_TOPIC_EXCEPTION, vec![]),
                    ("zz".into(), error::UNKNOWN_TOPIC_OR_PARTITION, vec![]),
                ],
                None
            )
        );
        let b = &all.topics[1];
        assert_eq!(
            b.topic_id,
            broker.metadata.image().topic("b").unwrap().topic_id
        );
        assert_eq!(b.partitions[0].replica_nodes, vec![1]);
        assert_eq!(b.partitions[0].leader_id, 1);

        // A limit that ends mid-topic points at the next partition ...
        let first = handle(&broker, &ctx, request(&["a", "b"], 3, None)).await;
        assert_eq!(
            seen(&first),
            (
                vec![("a".into(), ok, vec![0, 1]), ("b".into(), ok, vec![0])],
                Some(("b".into(), 1))
            )
        );
        let second = handle(&broker, &ctx, request(&["a", "b"], 3, Some(("b", 1)))).await;
        assert_eq!(seen(&second), (vec![("b".into(), ok, vec![1, 2])], None));
        // ... and one that ends with a topic at partition 0 of the next.
        let exact = handle(&broker, &ctx, request(&[], 2, None)).await;
        assert_eq!(
            seen(&exact),
            (vec![("a".into(), ok, vec![0, 1])], Some(("b".into(), 0)))
        );

        // A cursor on a topic the request does not name is refused.
        let bad = handle(&broker, &ctx, request(&["a"], 10, Some(("b", 0)))).await;
        assert_eq!(
            seen(&bad),
            (vec![("a".into(), error::INVALID_REQUEST, vec![])], None)
        );
        broker.shutdown().unwrap();
    }
}
