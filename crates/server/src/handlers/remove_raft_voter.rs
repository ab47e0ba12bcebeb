//! RemoveRaftVoter (KIP-853): removes a controller from the metadata
//! quorum's voters, as `kafka-metadata-quorum.sh remove-controller` asks;
//! answered once the new voter set is committed. A leader that removes
//! itself steps down after that. A broker forwards the request to the
//! active controller. Refused, as by Kafka, on a quorum whose voters are
//! fixed by `controller.quorum.voters`.
use std::sync::Arc;

use tarn_protocol::messages::raft_voters::{RemoveRaftVoterRequest, RemoveRaftVoterResponse};

use super::raft_voters::{refusal, voter_change_error};
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 81;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "RemoveRaftVoter",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: RemoveRaftVoterRequest,
) -> RemoveRaftVoterResponse {
    let answer = |(error_code, error_message): (i16, Option<String>)| RemoveRaftVoterResponse {
        throttle_time_ms: 0,
        error_code,
        error_message,
    };
    let quorum = match refusal(broker, request.cluster_id.as_deref(), request.voter_id) {
        Ok(quorum) => quorum,
        Err(refused) => return answer(refused),
    };
    let voter_id = request.voter_id as u64;
    match quorum.remove_voter(voter_id).await {
        Ok(()) => answer((tarn_protocol::error::NONE, None)),
        Err(e) => {
            tracing::warn!(voter_id, error = %e, "RemoveRaftVoter refused");
            answer(voter_change_error(&e))
        }
    }
}
