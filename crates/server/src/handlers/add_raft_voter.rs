//! AddRaftVoter (KIP-853): adds a controller to a running metadata quorum,
//! as `kafka-metadata-quorum.sh add-controller` asks. The new controller
//! was formatted with `--no-initial-controllers` and is running; the
//! quorum's leader replicates the log to it, and once it has caught up
//! (within the request's timeout) commits the new voter set. A broker
//! forwards the request to the active controller, as Kafka's do.
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

use super::raft_voters::{controller_listener_name, refusal, voter_change_error};
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

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: AddRaftVoterRequest,
) -> AddRaftVoterResponse {
    let answer = |(error_code, error_message): (i16, Option<String>)| AddRaftVoterResponse {
        throttle_time_ms: 0,
        error_code,
        error_message,
    };
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
    let timeout = match u64::try_from(request.timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => DEFAULT_TIMEOUT,
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
