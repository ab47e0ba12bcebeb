//! DescribeQuorum (KIP-595): the metadata quorum as its leader sees it,
//! for `kafka-metadata-quorum.sh describe --status` and `--replication`.
//! A broker forwards it to the active controller, as Kafka's do; there
//! the quorum's leader, its epoch (the Raft term), the high watermark
//! (the offset after the last committed entry), each voter's progress and
//! the observers (brokers that follow the log without voting) are read
//! from the quorum. A single node is a quorum of one that it leads.
//!
//! A voter's last fetch time is when it last acknowledged the leader (a
//! heartbeat or an append); it counts as caught up then if it had every
//! committed entry. A voter's directory id is the one the membership
//! records (a dynamic quorum's, KIP-853); elsewhere, and for observers,
//! the zero uuid, Kafka's "unknown".
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_quorum::{
    DescribeQuorumListener, DescribeQuorumNode, DescribeQuorumPartition, DescribeQuorumRequest,
    DescribeQuorumResponse, DescribeQuorumTopic, ReplicaState,
};
use tarn_protocol::Uuid;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::controller::{wall_clock_ms, QuorumDescription, ReplicaProgress};

pub const KEY: i16 = 55;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeQuorum",
    min_version: 0,
    max_version: 2,
    flexible_min: 0,
};

/// The metadata log's name, as Kafka's quorum names it.
const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeQuorumRequest,
) -> DescribeQuorumResponse {
    let names_the_log = matches!(
        request.topics.as_slice(),
        [topic] if topic.topic_name == METADATA_TOPIC
            && matches!(topic.partitions.as_slice(), [p] if p.partition_index == 0)
    );
    if !names_the_log {
        return partition_errors(&request, error::UNKNOWN_TOPIC_OR_PARTITION);
    }
    let description = broker
        .controller_topology
        .describe_quorum()
        .or_else(|| broker.is_active_controller().then(|| single_node(broker)));
    let Some(quorum) = description else {
        let mut response = partition_errors(&request, error::NOT_LEADER_OR_FOLLOWER);
        for partition in response
            .topics
            .iter_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            partition.leader_id = broker.active_controller();
        }
        return response;
    };
    // The voters' listener in the quorum's own name for it.
    let listener_name = super::raft_voters::controller_listener_name(broker);
    let replicas = |progress: &[ReplicaProgress]| -> Vec<ReplicaState> {
        progress
            .iter()
            .map(|p| ReplicaState {
                replica_id: p.id,
                replica_directory_id: quorum
                    .directory_ids
                    .get(&p.id)
                    .and_then(|d| Uuid::from_base64(d))
                    .unwrap_or_default(),
                log_end_offset: p.log_end_offset,
                last_fetch_timestamp: p.last_fetch_ms,
                last_caught_up_timestamp: p.last_caught_up_ms,
            })
            .collect()
    };
    DescribeQuorumResponse {
        error_code: error::NONE,
        error_message: None,
        topics: vec![DescribeQuorumTopic {
            topic_name: METADATA_TOPIC.to_owned(),
            partitions: vec![DescribeQuorumPartition {
                partition_index: 0,
                error_code: error::NONE,
                error_message: None,
                leader_id: quorum.leader,
                leader_epoch: quorum.epoch,
                high_watermark: quorum.high_watermark,
                current_voters: replicas(&quorum.voters),
                observers: replicas(&quorum.observers),
            }],
        }],
        nodes: quorum
            .listeners
            .iter()
            .filter_map(|(id, address)| {
                let (host, port) = super::raft_voters::host_and_port(address)?;
                Some(DescribeQuorumNode {
                    node_id: *id,
                    listeners: vec![DescribeQuorumListener {
                        name: listener_name.clone(),
                        host,
                        port,
                    }],
                })
            })
            .collect(),
    }
}

/// A single node leads its quorum of one, whose log is its own.
fn single_node(broker: &Broker) -> QuorumDescription {
    let now = wall_clock_ms(std::time::Instant::now());
    let end = broker.metadata.publisher().published_offset() as i64;
    QuorumDescription {
        leader: broker.node_id,
        epoch: 0,
        high_watermark: end,
        voters: vec![ReplicaProgress {
            id: broker.node_id,
            log_end_offset: end,
            last_fetch_ms: now,
            last_caught_up_ms: now,
        }],
        observers: Vec::new(),
        listeners: Default::default(),
        directory_ids: Default::default(),
    }
}

/// Every partition asked for, refused with `code`.
fn partition_errors(request: &DescribeQuorumRequest, code: i16) -> DescribeQuorumResponse {
    DescribeQuorumResponse {
        error_code: error::NONE,
        error_message: None,
        topics: request
            .topics
            .iter()
            .map(|t| DescribeQuorumTopic {
                topic_name: t.topic_name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| DescribeQuorumPartition {
                        partition_index: p.partition_index,
                        error_code: code,
                        error_message: Some(error_message(code)),
                        ..Default::default()
                    })
                    .collect(),
            })
            .collect(),
        nodes: Vec::new(),
    }
}

fn error_message(code: i16) -> String {
    match code {
        error::UNKNOWN_TOPIC_OR_PARTITION => {
            format!("DescribeQuorum describes {METADATA_TOPIC}-0 only")
        }
        _ => "this node does not lead the metadata quorum".to_owned(),
    }
}
