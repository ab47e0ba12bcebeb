//! DeleteGroups: removes empty groups and their committed offsets
//! (tombstones in `__consumer_offsets`). A group with members gets
//! NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
use std::sync::Arc;

use tarn_protocol::messages::delete_groups::{
    DeletableGroupResult, DeleteGroupsRequest, DeleteGroupsResponse,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;

pub const KEY: i16 = 42;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DeleteGroups",
    min_version: 0,
    // v3 adds an error message per group; Kafka 4.4 sets only the code
    // (the message stays null), and so does Tarn.
    max_version: 3,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = match group::ensure_offsets_topic(broker).await {
        Ok(()) => broker.groups.delete_groups(request.groups_names),
        Err(code) => request
            .groups_names
            .into_iter()
            .map(|id| (id, code))
            .collect(),
    };
    for (group_id, code) in &mut results {
        if *code == tarn_protocol::error::NONE {
            if let Err(e) = group::await_durability(broker, group_id).await {
                *code = e;
            }
        }
    }
    DeleteGroupsResponse {
        throttle_time_ms: 0,
        results: results
            .into_iter()
            .map(|(group_id, error_code)| DeletableGroupResult {
                group_id,
                error_code,
                error_message: None,
            })
            .collect(),
    }
}
