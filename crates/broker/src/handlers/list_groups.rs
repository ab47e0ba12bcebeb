//! ListGroups: every group this broker coordinates, optionally only
//! those in some states (v4) or of some types (v5), both case-insensitive.
//! Every group here is a classic group (no KIP-848 `consumer` groups), so
//! v5 reports each as "classic" and a types filter without "classic"
//! matches none, as Kafka's filter does for types it has no groups of.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::list_groups::{ListGroupsRequest, ListGroupsResponse, ListedGroup};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 16;
/// Kafka's name for the type of a classic (JoinGroup/SyncGroup) group.
pub const CLASSIC_GROUP_TYPE: &str = "classic";
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ListGroups",
    min_version: 0,
    max_version: 5,
    flexible_min: 3,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: ListGroupsRequest,
) -> ListGroupsResponse {
    match broker.groups.list(&request.states_filter) {
        Ok(_) if !matches_classic(&request.types_filter) => ListGroupsResponse {
            throttle_time_ms: 0,
            error_code: error::NONE,
            groups: Vec::new(),
        },
        Ok(groups) => ListGroupsResponse {
            throttle_time_ms: 0,
            error_code: error::NONE,
            groups: groups
                .into_iter()
                .map(|g| ListedGroup {
                    group_id: g.group_id,
                    protocol_type: g.protocol_type,
                    group_state: g.state.name().to_owned(),
                    group_type: CLASSIC_GROUP_TYPE.to_owned(),
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

/// Whether a v5 types filter admits classic groups: an empty filter
/// admits every type.
fn matches_classic(types_filter: &[String]) -> bool {
    types_filter.is_empty()
        || types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case(CLASSIC_GROUP_TYPE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_types_filter_admits_classic_groups_case_insensitively() {
        let filter =
            |types: &[&str]| -> Vec<String> { types.iter().map(|t| t.to_string()).collect() };
        assert!(matches_classic(&filter(&[])));
        assert!(matches_classic(&filter(&["Classic"])));
        assert!(matches_classic(&filter(&["consumer", "classic"])));
        assert!(!matches_classic(&filter(&["consumer"])));
        assert!(!matches_classic(&filter(&["share", "streams"])));
    }
}
