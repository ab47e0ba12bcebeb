//! DeleteAcls: every filter is answered with SECURITY_DISABLED, as Kafka
//! answers it without an authorizer (see `describe_acls`).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::acls::{
    DeleteAclsFilterResult, DeleteAclsRequest, DeleteAclsResponse,
};

use super::describe_acls::NO_AUTHORIZER;
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 31;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DeleteAcls",
    min_version: 0,
    max_version: 3,
    flexible_min: 2,
};

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    DeleteAclsResponse {
        throttle_time_ms: 0,
        filter_results: request
            .filters
            .iter()
            .map(|_| DeleteAclsFilterResult {
                error_code: error::SECURITY_DISABLED,
                error_message: Some(NO_AUTHORIZER.into()),
                matching_acls: vec![],
            })
            .collect(),
    }
}
