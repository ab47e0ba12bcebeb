//! Heartbeat: keeps a member's session alive and tells it when a
//! rebalance is under way (REBALANCE_IN_PROGRESS).
use std::sync::Arc;

use tarn_protocol::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;

pub const KEY: i16 = 12;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "Heartbeat",
    min_version: 0,
    max_version: 4,
    flexible_min: 4,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: HeartbeatRequest,
) -> HeartbeatResponse {
    let error_code = match group::ensure_offsets_topic(broker).await {
        Err(code) => code,
        Ok(()) => broker.groups.heartbeat(
            &request.group_id,
            &request.member_id,
            request.group_instance_id.as_deref(),
            request.generation_id,
        ),
    };
    HeartbeatResponse {
        throttle_time_ms: 0,
        error_code,
    }
}
