//! SyncGroup: after a JoinGroup, the leader sends the assignment and
//! every member receives its own part. Followers that arrive first wait
//! for the leader; the group's pending-sync deadline bounds the wait. v5
//! checks the protocol type and name against the group's.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::sync_group::{SyncGroupRequest, SyncGroupResponse};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group::coordinator::SyncRequest;
use crate::group::metadata::SyncResult;
use crate::group::{self, await_response, RESPONSE_WAIT_MAX};

pub const KEY: i16 = 14;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "SyncGroup",
    min_version: 0,
    max_version: 5,
    flexible_min: 4,
};

fn response(result: SyncResult) -> SyncGroupResponse {
    SyncGroupResponse {
        throttle_time_ms: 0,
        error_code: result.error,
        protocol_type: result.protocol_type,
        protocol_name: result.protocol_name,
        assignment: result.assignment,
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: SyncGroupRequest,
) -> SyncGroupResponse {
    if let Err(code) = group::ensure_offsets_topic(broker).await {
        return response(SyncResult::error(code));
    }
    let group_id = request.group_id.clone();
    let sync = SyncRequest {
        group_id: request.group_id,
        generation_id: request.generation_id,
        member_id: request.member_id,
        group_instance_id: request.group_instance_id,
        protocol_type: request.protocol_type,
        protocol_name: request.protocol_name,
        assignments: request
            .assignments
            .into_iter()
            .map(|a| (a.member_id, a.assignment))
            .collect(),
    };
    let rx = broker.groups.sync(sync);
    let mut result = await_response(
        rx,
        RESPONSE_WAIT_MAX,
        || SyncResult::error(error::REBALANCE_IN_PROGRESS),
        || SyncResult::error(error::COORDINATOR_NOT_AVAILABLE),
    )
    .await;
    if let Err(code) = group::await_durability(broker, &group_id).await {
        result = SyncResult::error(code);
    }
    response(result)
}
