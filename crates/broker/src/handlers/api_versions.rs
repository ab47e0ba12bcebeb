//! ApiVersions: the versions of every API in `APIS`.
//!
//! From v5 a client may name the cluster and node it believes it reached;
//! as in Kafka, naming only one of them is INVALID_REQUEST, and naming
//! another cluster or node is REBOOTSTRAP_REQUIRED (its bootstrap address
//! now leads somewhere else). Both errors come with an empty API list.
//!
//! Kafka also sends its supported and finalized features (tagged fields
//! 0-2, e.g. `metadata.version`); Tarn has no feature levels to report, so
//! it leaves them out, which clients read as "none".
use std::sync::Arc;

use bytes::Bytes;
use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::header::{begin_response, finish_frame};
use tarn_protocol::messages::api_versions::{ApiVersion, ApiVersionsRequest, ApiVersionsResponse};
use tarn_protocol::{Encode, Version};

use super::{ApiSpec, RequestContext, APIS};
use crate::broker::Broker;

pub const KEY: i16 = 18;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ApiVersions",
    min_version: 0,
    max_version: 5,
    flexible_min: 3,
};

fn api_keys() -> Vec<ApiVersion> {
    APIS.iter()
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
        if let Err(code) = check_target(&request, &broker.cluster_id, broker.node_id) {
            return ApiVersionsResponse {
                error_code: code,
                api_keys: Vec::new(),
                throttle_time_ms: 0,
            };
        }
    }
    ApiVersionsResponse {
        error_code: error::NONE,
        api_keys: api_keys(),
        throttle_time_ms: 0,
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
    }
    .encode(&mut out, Version::new(0, SPEC.flexible_min));
    finish_frame(out)
}

#[cfg(test)]
mod tests {
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
}
