//! JoinGroup: a member joins (or rejoins) a group and waits until the
//! rebalance completes; the leader gets every member's metadata to run
//! the client-side assignor. From v4 a member without an id is first sent
//! one with MEMBER_ID_REQUIRED (KIP-394); v5 adds static members
//! (KIP-345); v9 lets a rejoining static leader skip the assignment.
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupResponse, JoinGroupResponseMember,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group::coordinator::{JoinRequest, NEW_MEMBER_JOIN_TIMEOUT_MS};
use crate::group::metadata::JoinResult;
use crate::group::{self, await_response, client_host};

pub const KEY: i16 = 11;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "JoinGroup",
    min_version: 0,
    max_version: 9,
    flexible_min: 6,
};
/// Extra time the handler allows beyond the group's own deadlines.
const WAIT_SLACK_MS: i64 = 10_000;

fn response(version: i16, result: JoinResult) -> JoinGroupResponse {
    JoinGroupResponse {
        throttle_time_ms: 0,
        error_code: result.error,
        generation_id: result.generation_id,
        protocol_type: result.protocol_type,
        // Nullable only from v7; older versions carry "" for "none".
        protocol_name: match result.protocol_name {
            Some(name) => Some(name),
            None if version < 7 => Some(String::new()),
            None => None,
        },
        leader: result.leader_id,
        skip_assignment: result.skip_assignment,
        member_id: result.member_id,
        members: result
            .members
            .into_iter()
            .map(|m| JoinGroupResponseMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                metadata: m.metadata,
            })
            .collect(),
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: JoinGroupRequest,
) -> JoinGroupResponse {
    let version = ctx.version.version;
    if let Err(code) = group::ensure_offsets_topic(broker).await {
        return response(version, JoinResult::error(request.member_id, code));
    }
    // v0 has no rebalance timeout: the session timeout serves as both.
    let rebalance_timeout_ms = if version == 0 {
        request.session_timeout_ms
    } else {
        request.rebalance_timeout_ms
    };
    let member_id = request.member_id.clone();
    let group_id = request.group_id.clone();
    let join = JoinRequest {
        group_id: request.group_id,
        member_id: request.member_id,
        group_instance_id: request.group_instance_id,
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
        client_id: ctx.client_id().to_owned(),
        client_host: client_host(&ctx.peer),
        rebalance_timeout_ms,
        session_timeout_ms: request.session_timeout_ms,
        protocol_type: request.protocol_type,
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name, p.metadata))
            .collect(),
        reason: request.reason,
    };
    let limit_ms = i64::from(rebalance_timeout_ms.max(request.session_timeout_ms))
        .max(NEW_MEMBER_JOIN_TIMEOUT_MS)
        + broker.groups.config().initial_rebalance_delay_ms
        + WAIT_SLACK_MS;
    let rx = broker.groups.join(join);
    let mut result = await_response(
        rx,
        Duration::from_millis(u64::try_from(limit_ms).unwrap_or(u64::MAX)),
        || JoinResult::error(member_id.clone(), error::REBALANCE_IN_PROGRESS),
        || JoinResult::error(member_id.clone(), error::COORDINATOR_NOT_AVAILABLE),
    )
    .await;
    if let Err(code) = group::await_durability(broker, &group_id).await {
        result = JoinResult::error(result.member_id.clone(), code);
    }
    response(version, result)
}
