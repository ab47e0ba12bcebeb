//! ListPartitionReassignments (KIP-455): the reassignments in progress,
//! with each partition's replicas and the ones being added and removed.
//! Answered by the active controller (a broker forwards it there, as
//! Kafka's do), so a reassignment just started is listed at once. A null
//! topic list means every partition; partitions named that do not exist
//! or are not being reassigned are left out, as Kafka leaves them.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::reassignments::{
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment, OngoingTopicReassignment,
};

use tarn_metadata::reassignments;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 46;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListPartitionReassignments",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let named: Option<Vec<(String, i32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.clone(), *p)))
            .collect()
    });
    let image = broker.metadata.image();
    let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
    for ongoing in reassignments::ongoing(&image, named.as_deref()) {
        let partition = OngoingPartitionReassignment {
            partition_index: ongoing.partition_id,
            replicas: ongoing.replicas,
            adding_replicas: ongoing.adding_replicas,
            removing_replicas: ongoing.removing_replicas,
        };
        match topics.iter_mut().find(|t| t.name == ongoing.topic) {
            Some(topic) => topic.partitions.push(partition),
            None => topics.push(OngoingTopicReassignment {
                name: ongoing.topic,
                partitions: vec![partition],
            }),
        }
    }
    ListPartitionReassignmentsResponse {
        throttle_time_ms: 0,
        error_code: error::NONE,
        error_message: None,
        topics,
    }
}
