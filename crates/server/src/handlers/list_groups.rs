//! ListGroups: every group this broker coordinates, optionally only
//! those in some states (v4) or of some types (v5, KIP-848), both
//! case-insensitive as in Kafka. Tarn has only classic groups, so every
//! group's type is "classic" and a types filter without it matches none.
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
    max_version: 5,
    flexible_min: 3,
};

/// Kafka's name for the type of a group on the classic rebalance protocol.
pub const CLASSIC_GROUP_TYPE: &str = "classic";

/// Whether a v5 types filter lets classic groups through: an empty filter
/// means every type.
fn types_admit_classic(types_filter: &[String]) -> bool {
    types_filter.is_empty()
        || types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case(CLASSIC_GROUP_TYPE))
}

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: ListGroupsRequest,
) -> ListGroupsResponse {
    match broker.groups.list(&request.states_filter) {
        Ok(_) if !types_admit_classic(&request.types_filter) => ListGroupsResponse {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_filter_is_case_insensitive_and_empty_means_all() {
        assert!(types_admit_classic(&[]));
        assert!(types_admit_classic(&["Classic".to_owned()]));
        assert!(types_admit_classic(&[
            "consumer".to_owned(),
            "CLASSIC".to_owned()
        ]));
        assert!(!types_admit_classic(&["consumer".to_owned()]));
        assert!(!types_admit_classic(&[
            "share".to_owned(),
            "streams".to_owned()
        ]));
    }
}
