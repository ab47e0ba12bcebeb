//! AddRaftVoter (KIP-853): adds a controller to a running metadata quorum,
//! as `kafka-metadata-quorum.sh add-controller` asks. The new controller
//! was formatted with `--no-initial-controllers` and is running; the
//! quorum's leader replicates the log to it, and once it has caught up
//! (within the request's timeout) commits the new voter set. A broker, or
//! a controller that is not the active one, forwards the request to the
//! active controller, as Kafka's do, and waits for its answer as long as
//! the request's timeout allows, plus a margin.
//!
//! Only a dynamic quorum (`controller.quorum.bootstrap.servers`) changes
//! its voters; one fixed by `controller.quorum.voters` refuses, as Kafka
//! does (its `kraft.version` is 0 there). The voter is reached on the
//! listener named like the leader's own CONTROLLER listener. The voter is
//! recorded with its directory id (the zero uuid: none), which the quorum's
//! RPCs to it then name, so a node formatted again in its place is not
//! taken for it.
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::raft_voters::{AddRaftVoterRequest, AddRaftVoterResponse};

use super::raft_voters::{controller_listener_name, forward, refusal, voter_change_error};
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 80;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "AddRaftVoter",
    min_version: 0,
    max_version: 1,
    flexible_min: 0,
};

/// The catch-up wait when the request names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How much longer than the request's timeout a forwarding node waits for
/// the active controller's answer (the change itself is bounded by it).
const FORWARD_MARGIN: Duration = Duration::from_secs(5);

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: AddRaftVoterRequest,
) -> AddRaftVoterResponse {
    let answer = |(error_code, error_message): (i16, Option<String>)| AddRaftVoterResponse {
        throttle_time_ms: 0,
        error_code,
        error_message,
    };
    let timeout = match u64::try_from(request.timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => DEFAULT_TIMEOUT,
    };
    if !broker.is_active_controller() {
        let forwarded = forward(broker, ctx, &request, Some(timeout + FORWARD_MARGIN)).await;
        match forwarded {
            Some(Ok(response)) => return response,
            Some(Err(why)) => return answer((error::NOT_LEADER_OR_FOLLOWER, Some(why))),
            // This node became the active controller meanwhile.
            None => {}
        }
    }
    let quorum = match refusal(broker, request.cluster_id.as_deref(), request.voter_id) {
        Ok(quorum) => quorum,
        Err(refused) => return answer(refused),
    };
    let name = controller_listener_name(broker);
    let Some(listener) = request
        .listeners
        .iter()
        .find(|l| l.name.eq_ignore_ascii_case(&name))
    else {
        return answer((
            error::INVALID_REQUEST,
            Some(format!(
                "the new voter names no {name} listener (the quorum's), only {:?}",
                request
                    .listeners
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
            )),
        ));
    };
    let address = match listener.host.contains(':') {
        true => format!("[{}]:{}", listener.host, listener.port),
        false => format!("{}:{}", listener.host, listener.port),
    };
    let voter_id = request.voter_id as u64;
    let directory_id = super::raft_voters::directory_id(&request.voter_directory_id);
    match quorum
        .add_voter(voter_id, &address, directory_id.as_deref(), timeout)
        .await
    {
        Ok(()) => answer((error::NONE, None)),
        Err(e) => {
            tracing::warn!(voter_id, %address, error = %e, "AddRaftVoter refused");
            answer(voter_change_error(&e))
        }
    }
}
