//! Metadata: brokers, topics, partitions and their leaders; creates
//! unknown topics when both the client and `auto.create.topics.enable`
//! allow it.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::metadata::{
    MetadataRequest, MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
    MetadataResponseTopic,
};
use tarn_protocol::Uuid;

use tarn_metadata::topics::validate_topic_name;
use tarn_metadata::{MetadataImage, TopicInfo};

use super::{
    authorized_operations, ApiSpec, RequestContext, CLUSTER_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
};
use crate::broker::Broker;
use crate::controller::{ControllerRefusal, ControllerReply, ControllerRequest};

pub const KEY: i16 = 3;

pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "Metadata",
    min_version: 0,
    // v13 adds a top-level error code for REBOOTSTRAP_REQUIRED (KIP-1102),
    // which one node never needs to send: it stays NONE.
    max_version: 13,
    flexible_min: 9,
};

fn topic_response(image: &MetadataImage, topic: &TopicInfo) -> MetadataResponseTopic {
    MetadataResponseTopic {
        name: Some(topic.name.clone()),
        topic_id: topic.topic_id,
        is_internal: topic.is_internal(),
        partitions: topic
            .partitions
            .iter()
            .map(|p| MetadataResponsePartition {
                error_code: partition_error(p),
                partition_index: p.partition_id,
                leader_id: p.leader,
                leader_epoch: p.leader_epoch,
                replica_nodes: p.replicas.clone(),
                isr_nodes: p.isr.clone(),
                offline_replicas: image.offline_replicas(&p.replicas),
            })
            .collect(),
        ..Default::default()
    }
}

fn topic_error(name: Option<String>, topic_id: Uuid, code: i16) -> MetadataResponseTopic {
    MetadataResponseTopic {
        error_code: code,
        name,
        topic_id,
        ..Default::default()
    }
}

/// Creates `name` with the controller's defaults, tolerating a concurrent
/// creation of the same topic.
async fn auto_create(broker: &Arc<Broker>, name: &str) -> Result<(), ControllerRefusal> {
    let request = ControllerRequest::EnsureTopic {
        name: name.to_owned(),
        num_partitions: -1,
        replication_factor: -1,
        configs: vec![],
    };
    if broker.submit_to_controller(request).await?
        == (ControllerReply::TopicEnsured { created: true })
    {
        tracing::info!(topic = name, "auto-created topic");
    }
    Ok(())
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: MetadataRequest,
) -> MetadataResponse {
    let version = ctx.version.version;
    // v0 asks for all topics with an empty list; later versions with null.
    let wanted = match request.topics {
        Some(topics) if !(version == 0 && topics.is_empty()) => Some(topics),
        _ => None,
    };
    let may_create = broker.config.get_bool("auto.create.topics.enable")
        && (version < 4 || request.allow_auto_topic_creation);

    let include_operations = request.include_topic_authorized_operations;
    let mut topics = Vec::new();
    match wanted {
        None => {
            let image = broker.metadata.image();
            topics.extend(image.topics().map(|t| topic_response(&image, t)))
        }
        Some(wanted) => {
            // Kafka reads the topics asked for as a set: one named twice
            // is answered once.
            let mut seen = std::collections::BTreeSet::new();
            for requested in wanted {
                if !seen.insert((requested.name.clone(), requested.topic_id)) {
                    continue;
                }
                topics.push(lookup(broker, requested.name, requested.topic_id, may_create).await);
            }
        }
    }
    // Kafka names them for every topic answered, those it refuses too.
    for topic in &mut topics {
        topic.topic_authorized_operations =
            authorized_operations(include_operations, TOPIC_AUTHORIZED_OPERATIONS);
    }
    let image = broker.metadata.image();
    MetadataResponse {
        brokers: image
            .unfenced_brokers()
            .map(|b| MetadataResponseBroker {
                node_id: b.broker_id,
                host: b.host.clone(),
                port: b.port,
                rack: b.rack.clone(),
            })
            .collect(),
        cluster_id: Some(broker.cluster_id()),
        controller_id: broker.active_controller_id(),
        topics,
        cluster_authorized_operations: authorized_operations(
            request.include_cluster_authorized_operations,
            CLUSTER_AUTHORIZED_OPERATIONS,
        ),
        ..Default::default()
    }
}

async fn lookup(
    broker: &Arc<Broker>,
    name: Option<String>,
    topic_id: Uuid,
    may_create: bool,
) -> MetadataResponseTopic {
    // A topic id wins over the name: the Java admin client asks by id with
    // the name left empty, not null.
    let name = match name {
        Some(name) if topic_id == Uuid::ZERO => name,
        _ => {
            let image = broker.metadata.image();
            return match image.topic_by_id(&topic_id) {
                Some(topic) => topic_response(&image, topic),
                None => topic_error(None, topic_id, error::UNKNOWN_TOPIC_ID),
            };
        }
    };
    let image = broker.metadata.image();
    if let Some(topic) = image.topic(&name) {
        return topic_response(&image, topic);
    }
    drop(image);
    if let Err(e) = validate_topic_name(&name) {
        return topic_error(Some(name), Uuid::ZERO, e.code);
    }
    if !may_create {
        return topic_error(Some(name), Uuid::ZERO, error::UNKNOWN_TOPIC_OR_PARTITION);
    }
    if let Err(e) = auto_create(broker, &name).await {
        tracing::error!(topic = %name, error = %e, "auto-create topic");
        return topic_error(Some(name), Uuid::ZERO, error::LEADER_NOT_AVAILABLE);
    }
    let image = broker.metadata.image();
    match image.topic(&name) {
        Some(topic) => topic_response(&image, topic),
        None => topic_error(Some(name), Uuid::ZERO, error::LEADER_NOT_AVAILABLE),
    }
}

/// A partition without a leader is answered LEADER_NOT_AVAILABLE (leader
/// -1), as Kafka answers an offline partition, so clients wait and retry.
fn partition_error(p: &tarn_metadata::PartitionInfo) -> i16 {
    if p.has_leader() {
        error::NONE
    } else {
        error::LEADER_NOT_AVAILABLE
    }
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::metadata::MetadataRequestTopic;

    use super::*;

    #[tokio::test]
    async fn a_topic_id_is_looked_up_by_id_whatever_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "by-id", 2);
        let id = broker.metadata.image().topic("by-id").unwrap().topic_id;
        let ctx = crate::testing::request_context(&SPEC, 12);
        let ask = |name: Option<&str>, topic_id: Uuid| MetadataRequestTopic {
            topic_id,
            name: name.map(str::to_owned),
        };
        let request = MetadataRequest {
            topics: Some(vec![
                ask(Some(""), id),
                ask(None, id),
                ask(Some(""), Uuid([7; 16])),
            ]),
            allow_auto_topic_creation: false,
            ..Default::default()
        };
        let response = handle(&broker, &ctx, request).await;
        let seen: Vec<_> = response
            .topics
            .iter()
            .map(|t| (t.error_code, t.name.clone(), t.topic_id, t.partitions.len()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (error::NONE, Some("by-id".to_owned()), id, 2),
                (error::NONE, Some("by-id".to_owned()), id, 2),
                (error::UNKNOWN_TOPIC_ID, None, Uuid([7; 16]), 0),
            ]
        );
        broker.shutdown().unwrap();
    }
}
