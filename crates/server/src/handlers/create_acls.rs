//! CreateAcls: every creation is refused with SECURITY_DISABLED, as Kafka
//! refuses it without an authorizer (see `describe_acls`).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::acls::{AclCreationResult, CreateAclsRequest, CreateAclsResponse};

use super::describe_acls::NO_AUTHORIZER;
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 30;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "CreateAcls",
    min_version: 0,
    max_version: 3,
    flexible_min: 2,
};

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    CreateAclsResponse {
        throttle_time_ms: 0,
        results: request
            .creations
            .iter()
            .map(|_| AclCreationResult {
                error_code: error::SECURITY_DISABLED,
                error_message: Some(NO_AUTHORIZER.into()),
            })
            .collect(),
    }
}
