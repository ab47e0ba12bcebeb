//! ListConfigResources (key 74, KIP-1142; ListClientMetricsResources at
//! v0): the resources whose configs can be described, of the types asked
//! for (every type this version knows when none is named), as a Kafka
//! broker lists them: groups with dynamic configs, client metrics
//! subscriptions, each unfenced broker's loggers and configs (by node id),
//! then every topic. A type the version does not know is answered
//! UNSUPPORTED_VERSION with no resources. kafka-configs.sh and
//! kafka-client-metrics.sh list client metrics resources through it.
//!
//! Tarn has no group configs and no client metrics subscriptions (KIP-714
//! telemetry is not implemented), so those types list nothing.
use std::sync::Arc;

use tarn_metadata::dynamic_config::{RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC};
use tarn_metadata::MetadataImage;
use tarn_protocol::error;
use tarn_protocol::messages::list_config_resources::{
    ConfigResource, ListConfigResourcesRequest, ListConfigResourcesResponse,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 74;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListConfigResources",
    min_version: 0,
    max_version: 1,
    flexible_min: 0,
};

/// Kafka's ConfigResource.Type of a client metrics subscription.
const RESOURCE_CLIENT_METRICS: i8 = 16;
/// Kafka's ConfigResource.Type of a group.
const RESOURCE_GROUP: i8 = 32;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    list(&broker.metadata.image(), ctx.version.version, &request)
}

fn list(
    image: &MetadataImage,
    version: i16,
    request: &ListConfigResourcesRequest,
) -> ListConfigResourcesResponse {
    let supported: &[i8] = if version == 0 {
        &[RESOURCE_CLIENT_METRICS]
    } else {
        &[
            RESOURCE_TOPIC,
            RESOURCE_BROKER,
            RESOURCE_BROKER_LOGGER,
            RESOURCE_CLIENT_METRICS,
            RESOURCE_GROUP,
        ]
    };
    let wanted: &[i8] = if request.resource_types.is_empty() {
        supported
    } else {
        &request.resource_types
    };
    let mut response = ListConfigResourcesResponse::default();
    if wanted.iter().any(|t| !supported.contains(t)) {
        response.error_code = error::UNSUPPORTED_VERSION;
        return response;
    }
    let resource = |resource_name: String, resource_type: i8| ConfigResource {
        resource_name,
        resource_type,
    };
    let unfenced = || image.brokers.values().filter(|b| !b.fenced);
    for resource_type in [RESOURCE_BROKER_LOGGER, RESOURCE_BROKER] {
        if wanted.contains(&resource_type) {
            response
                .config_resources
                .extend(unfenced().map(|b| resource(b.broker_id.to_string(), resource_type)));
        }
    }
    if wanted.contains(&RESOURCE_TOPIC) {
        response.config_resources.extend(
            image
                .topics()
                .map(|topic| resource(topic.name.clone(), RESOURCE_TOPIC)),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use tarn_metadata::{BrokerInfo, MetadataRecord};

    use super::*;

    fn listed(image: &MetadataImage, version: i16, types: &[i8]) -> (i16, Vec<(String, i8)>) {
        let request = ListConfigResourcesRequest {
            resource_types: types.to_vec(),
        };
        let response = list(image, version, &request);
        let resources = response
            .config_resources
            .into_iter()
            .map(|r| (r.resource_name, r.resource_type))
            .collect();
        (response.error_code, resources)
    }

    #[test]
    fn lists_brokers_then_topics_of_the_types_asked_for() {
        let mut image = MetadataImage::default();
        for (name, id) in [("orders", 1), ("audit", 2)] {
            image.apply(&MetadataRecord::Topic {
                name: name.into(),
                topic_id: [id; 16],
            });
        }
        for (broker_id, fenced) in [(1, false), (2, true)] {
            let info = BrokerInfo {
                broker_id,
                host: "127.0.0.1".into(),
                port: 9092 + broker_id,
                rack: None,
                incarnation_id: [0; 16],
                broker_epoch: 1,
                listeners: Vec::new(),
                fenced,
            };
            image.brokers.insert(broker_id, info);
        }
        let named = |pairs: &[(&str, i8)]| -> Vec<(String, i8)> {
            pairs.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect()
        };
        assert_eq!(
            listed(&image, 1, &[]),
            (
                error::NONE,
                named(&[("1", 8), ("1", 4), ("audit", 2), ("orders", 2)])
            )
        );
        assert_eq!(
            listed(&image, 1, &[RESOURCE_TOPIC]),
            (error::NONE, named(&[("audit", 2), ("orders", 2)]))
        );
        // v0 knows client metrics only, of which Tarn has none.
        assert_eq!(listed(&image, 0, &[]), (error::NONE, vec![]));
        assert_eq!(
            listed(&image, 1, &[RESOURCE_GROUP, RESOURCE_CLIENT_METRICS]),
            (error::NONE, vec![])
        );
        assert_eq!(
            listed(&image, 1, &[RESOURCE_TOPIC, 1]),
            (error::UNSUPPORTED_VERSION, vec![])
        );
    }
}
