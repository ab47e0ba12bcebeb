//! ListGroups: every group this broker coordinates, optionally only
//! those in some states (v4, case-insensitive).
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::list_groups::{ListGroupsRequest, ListGroupsResponse, ListedGroup};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 16;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListGroups",
    min_version: 0,
    max_version: 4,
    flexible_min: 3,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: ListGroupsRequest,
) -> ListGroupsResponse {
    match broker.groups.list(&request.states_filter) {
        Ok(groups) => ListGroupsResponse {
            throttle_time_ms: 0,
            error_code: error::NONE,
            groups: groups
                .into_iter()
                .map(|g| ListedGroup {
                    group_id: g.group_id,
                    protocol_type: g.protocol_type,
                    group_state: g.state.name().to_owned(),
                    group_type: String::new(),
                })
                .collect(),
        },
        Err(code) => ListGroupsResponse {
            throttle_time_ms: 0,
            error_code: code,
            groups: Vec::new(),
        },
    }
}
