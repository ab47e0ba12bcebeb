//! DescribeAcls: Tarn has no authorizer yet (ACLs come with TLS and SASL),
//! so it answers as Kafka does when `authorizer.class.name` is empty:
//! SECURITY_DISABLED, "No Authorizer is configured on the broker". Tools
//! (kafka-acls.sh, Kafka UIs) then say ACLs are off instead of failing
//! on an unknown API.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::acls::{DescribeAclsRequest, DescribeAclsResponse};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 29;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeAcls",
    min_version: 0,
    max_version: 3,
    flexible_min: 2,
};

/// Kafka's message for every ACL request without an authorizer.
pub const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    _request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    DescribeAclsResponse {
        throttle_time_ms: 0,
        error_code: error::SECURITY_DISABLED,
        error_message: Some(NO_AUTHORIZER.into()),
        resources: vec![],
    }
}
