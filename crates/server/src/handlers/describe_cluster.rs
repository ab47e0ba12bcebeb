//! DescribeCluster: the brokers of the cluster and its controller. Fenced
//! brokers are left out unless v2's `include_fenced_brokers` asks for
//! them (`kafka-cluster list-endpoints --include-fenced-brokers`).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_cluster::{
    DescribeClusterBroker, DescribeClusterRequest, DescribeClusterResponse,
};

use super::{authorized_operations, ApiSpec, RequestContext, CLUSTER_AUTHORIZED_OPERATIONS};
use crate::broker::Broker;

pub const KEY: i16 = 60;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeCluster",
    min_version: 0,
    max_version: 2,
    flexible_min: 0,
};

/// Kafka's EndpointType: 1 = brokers, 2 = controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let image = broker.metadata.image();
    let mut response = DescribeClusterResponse {
        cluster_id: broker.cluster_id(),
        controller_id: broker.active_controller_id(),
        endpoint_type: request.endpoint_type,
        cluster_authorized_operations: authorized_operations(
            request.include_cluster_authorized_operations,
            CLUSTER_AUTHORIZED_OPERATIONS,
        ),
        ..Default::default()
    };
    if request.endpoint_type != ENDPOINT_BROKERS {
        response.error_code = error::UNSUPPORTED_VERSION;
        response.error_message = Some(format!(
            "endpoint type {} is not supported",
            request.endpoint_type
        ));
        return response;
    }
    response.brokers = image
        .brokers
        .values()
        .filter(|b| request.include_fenced_brokers || !b.fenced)
        .map(|b| DescribeClusterBroker {
            broker_id: b.broker_id,
            host: b.host.clone(),
            port: b.port,
            rack: b.rack.clone(),
            is_fenced: b.fenced,
        })
        .collect();
    response
}
