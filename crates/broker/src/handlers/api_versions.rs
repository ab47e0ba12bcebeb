//! ApiVersions: the versions of every API in `APIS`.
use std::sync::Arc;

use bytes::Bytes;
use tarn_protocol::error;
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
    max_version: 4,
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
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    _request: ApiVersionsRequest,
) -> ApiVersionsResponse {
    ApiVersionsResponse {
        error_code: error::NONE,
        api_keys: api_keys(),
        throttle_time_ms: 0,
    }
}

/// The reply to an ApiVersions request of a version we do not know:
/// UNSUPPORTED_VERSION with our list, encoded at v0 so any client reads it.
pub fn unsupported_version_reply(correlation_id: i32) -> Bytes {
    let mut out = begin_response(correlation_id, KEY, false);
    ApiVersionsResponse {
        error_code: error::UNSUPPORTED_VERSION,
        api_keys: api_keys(),
        throttle_time_ms: 0,
    }
    .encode(&mut out, Version::new(0, SPEC.flexible_min));
    finish_frame(out)
}
