//! DescribeGroups: state, protocol and members of groups. An unknown
//! group is described as Dead with no error before v6 and, from v6
//! (KIP-1043), as Dead with GROUP_ID_NOT_FOUND and a message, as Kafka
//! does; members' metadata is only shown for a Stable group, their last
//! synced assignments in every state.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_groups::{
    DescribeGroupsRequest, DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};

use super::{authorized_operations, ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group::{self, GroupState};

pub const KEY: i16 = 15;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeGroups",
    min_version: 0,
    max_version: 6,
    flexible_min: 5,
};
/// With no authorizer every group operation is allowed: READ, DELETE and
/// DESCRIBE, as bits of Kafka's AclOperation codes.
pub const GROUP_AUTHORIZED_OPERATIONS: i32 = 1 << 3 | 1 << 6 | 1 << 8;
/// The first version that reports an unknown group as an error.
const NOT_FOUND_VERSION: i16 = 6;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let ready = group::ensure_offsets_topic(broker).await;
    let operations = authorized_operations(
        request.include_authorized_operations,
        GROUP_AUTHORIZED_OPERATIONS,
    );
    let groups = request
        .groups
        .into_iter()
        .map(
            |group_id| match ready.and_then(|()| broker.groups.describe(&group_id)) {
                Ok(summary)
                    if summary.state == GroupState::Dead
                        && ctx.version.version >= NOT_FOUND_VERSION =>
                {
                    DescribedGroup {
                        error_code: error::GROUP_ID_NOT_FOUND,
                        error_message: Some(format!("Group {group_id} not found.")),
                        group_id,
                        group_state: summary.state.name().to_owned(),
                        authorized_operations: operations,
                        ..Default::default()
                    }
                }
                Ok(summary) => DescribedGroup {
                    error_code: error::NONE,
                    error_message: None,
                    group_id,
                    group_state: summary.state.name().to_owned(),
                    protocol_type: summary.protocol_type,
                    protocol_data: summary.protocol,
                    members: summary
                        .members
                        .into_iter()
                        .map(|m| DescribedGroupMember {
                            member_id: m.member_id,
                            group_instance_id: m.group_instance_id,
                            client_id: m.client_id,
                            client_host: m.client_host,
                            member_metadata: m.metadata,
                            member_assignment: m.assignment,
                        })
                        .collect(),
                    authorized_operations: operations,
                },
                Err(code) => DescribedGroup {
                    error_code: code,
                    group_id,
                    authorized_operations: operations,
                    ..Default::default()
                },
            },
        )
        .collect();
    DescribeGroupsResponse {
        throttle_time_ms: 0,
        groups,
    }
}
