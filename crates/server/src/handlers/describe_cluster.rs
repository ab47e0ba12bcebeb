//! DescribeCluster: the brokers of the cluster and its controller. Fenced
//! brokers are left out unless v2's `include_fenced_brokers` asks for
//! them (`kafka-cluster list-endpoints --include-fenced-brokers`).
//!
//! On a CONTROLLER listener it describes the controllers instead (KIP-919:
//! the admin client with `bootstrap.controllers` finds the quorum this
//! way): the voters with their CONTROLLER listeners, and the active one.
//! The endpoint type asked for (v1) must match the listener's, as in
//! Kafka: MISMATCHED_ENDPOINT_TYPE when it does not, UNSUPPORTED_ENDPOINT_TYPE
//! for a type that does not exist, INVALID_REQUEST for either at v0.
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::describe_cluster::{
    DescribeClusterBroker, DescribeClusterRequest, DescribeClusterResponse,
};

use super::CLUSTER_AUTHORIZED_OPERATIONS;
use super::{authorized_operations, ApiSpec, Endpoint, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 60;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeCluster",
    min_version: 0,
    max_version: 2,
    flexible_min: 0,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeClusterRequest,
) -> DescribeClusterResponse {
    if let Err((code, message)) = check_endpoint(ctx, request.endpoint_type) {
        return DescribeClusterResponse {
            error_code: code,
            error_message: Some(message),
            ..Default::default()
        };
    }
    let (brokers, controller_id) = match ctx.endpoint {
        Endpoint::Broker => (
            brokers(broker, request.include_fenced_brokers),
            broker.active_controller_id(),
        ),
        Endpoint::Controller => {
            let controllers = controllers(broker);
            let active = broker.active_controller();
            // As Kafka: no id the list does not name.
            let active = match controllers.iter().any(|c| c.broker_id == active) {
                true => active,
                false => -1,
            };
            (controllers, active)
        }
    };
    DescribeClusterResponse {
        cluster_id: broker.cluster_id(),
        controller_id,
        endpoint_type: ctx.endpoint.code(),
        cluster_authorized_operations: authorized_operations(
            request.include_cluster_authorized_operations,
            CLUSTER_AUTHORIZED_OPERATIONS,
        ),
        brokers,
        ..Default::default()
    }
}

/// Kafka's check of the endpoint type asked for against the listener's.
fn check_endpoint(ctx: &RequestContext, asked: i8) -> Result<(), (ErrorCode, String)> {
    let code = |v1: ErrorCode| match ctx.version.version {
        0 => error::INVALID_REQUEST,
        _ => v1,
    };
    let asked_for = match asked {
        1 => Endpoint::Broker,
        2 => Endpoint::Controller,
        other => {
            return Err((
                code(error::UNSUPPORTED_ENDPOINT_TYPE),
                format!("Unsupported endpoint type {other}"),
            ))
        }
    };
    if asked_for != ctx.endpoint {
        return Err((
            code(error::MISMATCHED_ENDPOINT_TYPE),
            format!(
                "The request was sent to an endpoint of type {:?}, but we wanted an endpoint of \
                 type {asked_for:?}",
                ctx.endpoint
            ),
        ));
    }
    Ok(())
}

fn brokers(broker: &Broker, include_fenced: bool) -> Vec<DescribeClusterBroker> {
    broker
        .metadata
        .image()
        .brokers
        .values()
        .filter(|b| include_fenced || !b.fenced)
        .map(|b| DescribeClusterBroker {
            broker_id: b.broker_id,
            host: b.host.clone(),
            port: b.port,
            rack: b.rack.clone(),
            is_fenced: b.fenced,
        })
        .collect()
}

/// The voters and their CONTROLLER listeners; none is fenced.
fn controllers(broker: &Broker) -> Vec<DescribeClusterBroker> {
    broker
        .controller_topology
        .controllers()
        .into_iter()
        .filter_map(|(id, address)| {
            let (host, port) = super::raft_voters::host_and_port(&address)?;
            Some(DescribeClusterBroker {
                broker_id: id,
                host,
                port: i32::from(port),
                rack: None,
                is_fenced: false,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::request_context;

    fn asking(endpoint: Endpoint, version: i16, asked: i8) -> Option<ErrorCode> {
        let mut ctx = request_context(&SPEC, version);
        ctx.endpoint = endpoint;
        check_endpoint(&ctx, asked).err().map(|(code, _)| code)
    }

    #[test]
    fn the_endpoint_type_asked_for_must_be_the_listeners() {
        assert_eq!(asking(Endpoint::Broker, 1, 1), None);
        assert_eq!(asking(Endpoint::Controller, 1, 2), None);
        assert_eq!(
            asking(Endpoint::Broker, 1, 2),
            Some(error::MISMATCHED_ENDPOINT_TYPE)
        );
        assert_eq!(
            asking(Endpoint::Controller, 2, 1),
            Some(error::MISMATCHED_ENDPOINT_TYPE)
        );
        assert_eq!(
            asking(Endpoint::Broker, 1, 3),
            Some(error::UNSUPPORTED_ENDPOINT_TYPE)
        );
        // v0 has no endpoint type: a controller asked at v0 is asked for
        // brokers, and v0 knows neither code.
        assert_eq!(
            asking(Endpoint::Controller, 0, 1),
            Some(error::INVALID_REQUEST)
        );
        assert_eq!(asking(Endpoint::Broker, 0, 1), None);
    }
}
