//! RemoveRaftVoter (KIP-853): removes a controller from the metadata
//! quorum's voters, as `kafka-metadata-quorum.sh remove-controller` asks;
//! answered once the new voter set is committed. A broker forwards the
//! request to the active controller. Asked to remove itself, the active
//! controller first hands its leadership to the most caught-up other
//! voter and forwards the request there (openraft's leader mishandles a
//! later change while its own removal is pending), so the client sees one
//! answer, as from Kafka. Refused, as by Kafka, on a quorum whose voters
//! are fixed by `controller.quorum.voters`. A voter is its id and
//! directory id: a directory id other than the one recorded for the voter
//! is VOTER_NOT_FOUND. A removed controller that is also a live broker
//! stays a learner of the quorum, so its broker keeps following the
//! metadata log (Kafka's removed controllers go on as observers); one
//! that is not (silent for a fetch timeout, or only a controller) leaves
//! the membership.
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::raft_voters::{RemoveRaftVoterRequest, RemoveRaftVoterResponse};
use tarn_quorum::QuorumError;

use super::raft_voters::{forward, refusal, voter_change_error};
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
    ctx: &RequestContext,
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
    let directory_id = super::raft_voters::directory_id(&request.voter_directory_id);
    // A live broker on the node goes on following the metadata log, as a
    // learner of the quorum (Kafka's removed controller is an observer):
    // one that answered the leader within the fetch timeout and is an
    // unfenced broker. A dead one (a broker stays unfenced for a session
    // timeout after it dies) leaves the membership.
    let fetch_timeout = u64::try_from(broker.config.get_i64("controller.quorum.fetch.timeout.ms"))
        .map_or(Duration::ZERO, Duration::from_millis);
    let answered = quorum
        .status()
        .borrow()
        .answered_within(voter_id, fetch_timeout);
    let live_broker = answered
        && broker
            .metadata
            .image()
            .brokers
            .get(&request.voter_id)
            .is_some_and(|b| !b.fenced);
    let removed = quorum.remove_voter(voter_id, directory_id.as_deref(), live_broker);
    match removed.await {
        Ok(()) => answer((error::NONE, None)),
        // Handed over (or lost the lead meanwhile): the new leader does it.
        Err(e @ QuorumError::NotLeader { .. }) => {
            match forward(broker, ctx, &request, None).await {
                Some(Ok(response)) => response,
                Some(Err(why)) => answer((error::NOT_LEADER_OR_FOLLOWER, Some(why))),
                None => answer(voter_change_error(&e)),
            }
        }
        Err(e) => {
            tracing::warn!(voter_id, error = %e, "RemoveRaftVoter refused");
            answer(voter_change_error(&e))
        }
    }
}
