//! ApiVersions: the versions of every API in `APIS`, and (v3+) the
//! features (KIP-584) this broker supports and runs at, which the admin
//! client's describeFeatures and kafka-features.sh show.
//!
//! Two features: `metadata.version`, fixed at 3.3-IV3 (level 7), the
//! oldest level Kafka 4 runs at, and `kraft.version` (KIP-853), 1 in a
//! dynamic quorum (`controller.quorum.bootstrap.servers`) and 0 in one
//! whose voters are fixed (or on a single node). As in Kafka 4.4, a
//! feature supported from level 0 (`kraft.version`) is listed from v4
//! only (older clients took a minimum of 0 for a broken range), and a
//! feature finalized at level 0 is not listed as finalized. Tarn
//! implements no client-facing feature gated behind a later level
//! (KIP-848 groups, KIP-890 transactions), so it reports none of
//! `group.version` or `transaction.version`, and no record ever changes a
//! level (`update_features`), so the finalized epoch is 0. Eligible
//! leader replicas (KIP-966) are always on in a cluster's controller, as
//! in new Kafka 4 clusters, but `eligible.leader.replicas.version` is not
//! reported: Kafka's level 1 requires metadata.version 4.0-IV1, and no
//! client acts on it (DescribeTopicPartitions carries the ELR either way).
//!
//! From v5 a client may name the cluster and node it believes it reached;
//! as in Kafka, naming only one of them is INVALID_REQUEST, and naming
//! another cluster or node is REBOOTSTRAP_REQUIRED (its bootstrap address
//! now leads somewhere else). Both errors come with an empty API list.
//!
//! On a CONTROLLER listener the list holds only the APIs served there
//! (`CONTROLLER_APIS`), as a Kafka controller's does.
use std::sync::Arc;

use bytes::Bytes;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::header::{begin_response, finish_frame};
use tarn_protocol::messages::api_versions::{
    ApiVersion, ApiVersionsRequest, ApiVersionsResponse, FinalizedFeatureKey, SupportedFeatureKey,
};
use tarn_protocol::{Encode, Version};

use super::{ApiSpec, Endpoint, RequestContext, APIS, CONTROLLER_APIS};
use crate::broker::Broker;

pub const KEY: i16 = 18;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ApiVersions",
    min_version: 0,
    max_version: 5,
    flexible_min: 3,
};

pub const METADATA_VERSION_FEATURE: &str = "metadata.version";
/// Kafka's 3.3-IV3.
pub const METADATA_VERSION_LEVEL: i16 = 7;
pub const KRAFT_VERSION_FEATURE: &str = "kraft.version";
/// The first version that lists features supported from level 0.
const LEVEL_ZERO_FEATURES_VERSION: i16 = 4;

/// The `kraft.version` this node's quorum runs at: 1 when its voters can
/// change (bootstrap servers, no fixed voters), else 0.
pub fn kraft_version(config: &tarn_config::BrokerConfig) -> i16 {
    let dynamic = config.get("controller.quorum.voters").is_empty()
        && !config.get("controller.quorum.bootstrap.servers").is_empty();
    i16::from(dynamic)
}

/// The supported features, and the finalized ones, that ApiVersions at
/// `version` lists for a node at `kraft_version`.
fn features(
    version: i16,
    kraft_version: i16,
) -> (Vec<SupportedFeatureKey>, Vec<FinalizedFeatureKey>) {
    let mut supported = vec![SupportedFeatureKey {
        name: METADATA_VERSION_FEATURE.into(),
        min_version: METADATA_VERSION_LEVEL,
        max_version: METADATA_VERSION_LEVEL,
    }];
    if version >= LEVEL_ZERO_FEATURES_VERSION {
        supported.insert(
            0,
            SupportedFeatureKey {
                name: KRAFT_VERSION_FEATURE.into(),
                min_version: 0,
                max_version: 1,
            },
        );
    }
    let mut finalized = vec![FinalizedFeatureKey {
        name: METADATA_VERSION_FEATURE.into(),
        max_version_level: METADATA_VERSION_LEVEL,
        min_version_level: METADATA_VERSION_LEVEL,
    }];
    if kraft_version > 0 {
        finalized.insert(
            0,
            FinalizedFeatureKey {
                name: KRAFT_VERSION_FEATURE.into(),
                max_version_level: kraft_version,
                min_version_level: kraft_version,
            },
        );
    }
    (supported, finalized)
}

fn api_keys(endpoint: Endpoint) -> Vec<ApiVersion> {
    APIS.iter()
        .filter(|s| endpoint == Endpoint::Broker || CONTROLLER_APIS.contains(&s.key))
        .map(|s| ApiVersion {
            api_key: s.key,
            min_version: s.min_version,
            max_version: s.max_version,
        })
        .collect()
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: ApiVersionsRequest,
) -> ApiVersionsResponse {
    if ctx.version.version >= TARGET_VERSION {
        if let Err(code) = check_target(&request, &broker.cluster_id(), broker.node_id) {
            return ApiVersionsResponse {
                error_code: code,
                api_keys: Vec::new(),
                throttle_time_ms: 0,
                ..Default::default()
            };
        }
    }
    let (supported_features, finalized_features) =
        features(ctx.version.version, kraft_version(&broker.config));
    ApiVersionsResponse {
        error_code: error::NONE,
        api_keys: api_keys(ctx.endpoint),
        throttle_time_ms: 0,
        supported_features,
        finalized_features_epoch: 0,
        finalized_features,
        zk_migration_ready: false,
    }
}

/// The first version in which the client names the cluster and node.
const TARGET_VERSION: i16 = 5;

/// Checks the v5 cluster id and node id against this broker's.
fn check_target(
    request: &ApiVersionsRequest,
    cluster_id: &str,
    node_id: i32,
) -> Result<(), ErrorCode> {
    match (&request.cluster_id, request.node_id) {
        (None, -1) => Ok(()),
        (None, _) | (Some(_), -1) => Err(error::INVALID_REQUEST),
        (Some(cluster), node) if cluster == cluster_id && node == node_id => Ok(()),
        (Some(_), _) => Err(error::REBOOTSTRAP_REQUIRED),
    }
}

/// The reply to an ApiVersions request of a version we do not know:
/// UNSUPPORTED_VERSION, encoded at v0 so any client reads it, listing only
/// ApiVersions' own range so the client retries at a version we serve
/// (KIP-511), as Kafka does.
pub fn unsupported_version_reply(correlation_id: i32) -> Bytes {
    let mut out = begin_response(correlation_id, KEY, false);
    ApiVersionsResponse {
        error_code: error::UNSUPPORTED_VERSION,
        api_keys: vec![ApiVersion {
            api_key: KEY,
            min_version: SPEC.min_version,
            max_version: SPEC.max_version,
        }],
        throttle_time_ms: 0,
        ..Default::default()
    }
    .encode(&mut out, Version::new(0, SPEC.flexible_min));
    finish_frame(out)
}

#[cfg(test)]
mod tests {
    use tarn_protocol::{Decode, Reader};

    use super::*;

    fn naming(cluster_id: Option<&str>, node_id: i32) -> ApiVersionsRequest {
        ApiVersionsRequest {
            cluster_id: cluster_id.map(str::to_owned),
            node_id,
            ..Default::default()
        }
    }

    #[test]
    fn v5_target_must_be_this_node_of_this_cluster() {
        let check = |r: &ApiVersionsRequest| check_target(r, "tarn-cluster", 1);
        assert_eq!(check(&naming(None, -1)), Ok(()));
        assert_eq!(check(&naming(Some("tarn-cluster"), 1)), Ok(()));
        assert_eq!(
            check(&naming(Some("tarn-cluster"), -1)),
            Err(error::INVALID_REQUEST)
        );
        assert_eq!(check(&naming(None, 1)), Err(error::INVALID_REQUEST));
        assert_eq!(
            check(&naming(Some("other-cluster"), 1)),
            Err(error::REBOOTSTRAP_REQUIRED)
        );
        assert_eq!(
            check(&naming(Some("tarn-cluster"), 2)),
            Err(error::REBOOTSTRAP_REQUIRED)
        );
    }

    #[tokio::test]
    async fn features_are_sent_from_v3_only() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 1);
        for version in [2, 3] {
            let ctx = crate::testing::request_context(&SPEC, version);
            let response = handle(&broker, &ctx, ApiVersionsRequest::default()).await;
            let mut bytes = Vec::new();
            response.encode(&mut bytes, ctx.version);
            let back =
                ApiVersionsResponse::decode(&mut Reader::new(Bytes::from(bytes)), ctx.version)
                    .unwrap();
            let finalized: Vec<_> = back
                .finalized_features
                .iter()
                .map(|f| (f.name.as_str(), f.min_version_level, f.max_version_level))
                .collect();
            if version < 3 {
                assert!(finalized.is_empty() && back.supported_features.is_empty());
                assert_eq!(back.finalized_features_epoch, -1);
            } else {
                assert_eq!(finalized, vec![("metadata.version", 7, 7)]);
                assert_eq!(back.supported_features.len(), 1);
                assert_eq!(back.finalized_features_epoch, 0);
            }
            assert!(back.api_keys.iter().any(|k| k.api_key == 75));
        }
        broker.shutdown().unwrap();
    }

    #[test]
    fn kraft_version_is_listed_as_kafka_lists_it() {
        let names = |version, kraft| {
            let (supported, finalized) = features(version, kraft);
            let supported: Vec<_> = supported
                .into_iter()
                .map(|f| (f.name, f.min_version, f.max_version))
                .collect();
            let finalized: Vec<_> = finalized
                .into_iter()
                .map(|f| (f.name, f.min_version_level, f.max_version_level))
                .collect();
            (supported, finalized)
        };
        let metadata = ("metadata.version".to_owned(), 7, 7);
        let kraft_range = ("kraft.version".to_owned(), 0, 1);
        // Supported from level 0: listed from v4 on.
        assert_eq!(names(3, 0).0, vec![metadata.clone()]);
        assert_eq!(names(4, 0).0, vec![kraft_range.clone(), metadata.clone()]);
        assert_eq!(names(5, 1).0, vec![kraft_range, metadata.clone()]);
        // Finalized at 0: not listed; at 1 (a dynamic quorum): listed.
        assert_eq!(names(4, 0).1, vec![metadata.clone()]);
        assert_eq!(
            names(3, 1).1,
            vec![("kraft.version".to_owned(), 1, 1), metadata]
        );
    }
}
