//! LeaveGroup: members leave so the group rebalances at once instead of
//! after their session timeout. Up to v2 one member by id, whose error is
//! the response's; from v3 a batch, each by member id or group instance
//! id (an administrator removing a static member).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::leave_group::{LeaveGroupRequest, LeaveGroupResponse, MemberResponse};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;
use crate::group::coordinator::LeavingMember;

pub const KEY: i16 = 13;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "LeaveGroup",
    min_version: 0,
    max_version: 5,
    flexible_min: 4,
};
/// The first version that carries a batch of members.
const BATCHED_VERSION: i16 = 3;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: LeaveGroupRequest,
) -> LeaveGroupResponse {
    let batched = ctx.version.version >= BATCHED_VERSION;
    let leaving: Vec<LeavingMember> = if batched {
        request
            .members
            .into_iter()
            .map(|m| LeavingMember {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                reason: m.reason,
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: request.member_id,
            group_instance_id: None,
            reason: None,
        }]
    };
    let mut result = match group::ensure_offsets_topic(broker).await {
        Err(code) => group::coordinator::LeaveResult {
            error: code,
            members: Vec::new(),
        },
        Ok(()) => broker.groups.leave(&request.group_id, leaving),
    };
    if let Err(code) = group::await_durability(broker, &request.group_id).await {
        result = group::coordinator::LeaveResult {
            error: code,
            members: Vec::new(),
        };
    }
    if !batched {
        let member_error = result.members.first().map_or(error::NONE, |m| m.2);
        return LeaveGroupResponse {
            throttle_time_ms: 0,
            error_code: if result.error != error::NONE {
                result.error
            } else {
                member_error
            },
            members: Vec::new(),
        };
    }
    LeaveGroupResponse {
        throttle_time_ms: 0,
        error_code: result.error,
        members: result
            .members
            .into_iter()
            .map(
                |(member_id, group_instance_id, error_code)| MemberResponse {
                    member_id,
                    group_instance_id,
                    error_code,
                },
            )
            .collect(),
    }
}
