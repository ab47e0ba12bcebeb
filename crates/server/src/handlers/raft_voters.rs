//! What AddRaftVoter and RemoveRaftVoter share: the checks before a voter
//! change, and its errors in Kafka's codes.
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tarn_protocol::error;
use tarn_protocol::header::decode_response_header;
use tarn_protocol::{Decode, Encode, Reader, Version};
use tarn_quorum::{Quorum, QuorumError};

use super::RequestContext;
use crate::broker::Broker;

/// An error code with its message.
pub type Refusal = (i16, Option<String>);

/// This node's quorum, when a voter change for `voter_id` in
/// `cluster_id` can be asked of it; else Kafka's refusal.
pub fn refusal(
    broker: &Arc<Broker>,
    cluster_id: Option<&str>,
    voter_id: i32,
) -> Result<Quorum, Refusal> {
    let ours = broker.cluster_id();
    if let Some(theirs) = cluster_id.filter(|theirs| !ours.is_empty() && *theirs != ours) {
        return Err((
            error::INCONSISTENT_CLUSTER_ID,
            Some(format!(
                "the request is for cluster {theirs}, this is cluster {ours}"
            )),
        ));
    }
    if voter_id < 0 {
        return Err((
            error::INVALID_REQUEST,
            Some(format!("voter id {voter_id} is negative")),
        ));
    }
    let Some((quorum, dynamic)) = broker.controller_topology.quorum() else {
        return Err((
            error::UNSUPPORTED_VERSION,
            Some(
                "this node is not part of a metadata quorum whose voters can change: it runs \
                 as a single node"
                    .into(),
            ),
        ));
    };
    if !dynamic {
        return Err((
            error::UNSUPPORTED_VERSION,
            Some(
                "the voters are fixed by controller.quorum.voters (kraft.version 0); a dynamic \
                 quorum (controller.quorum.bootstrap.servers, formatted with --standalone or \
                 --initial-controllers) can change them"
                    .into(),
            ),
        ));
    }
    Ok(quorum)
}

/// The quorum's listener name: the first of `controller.listener.names`.
pub fn controller_listener_name(broker: &Broker) -> String {
    broker
        .config
        .get("controller.listener.names")
        .split(',')
        .map(str::trim)
        .find(|n| !n.is_empty())
        .unwrap_or("CONTROLLER")
        .to_owned()
}

/// A voter's CONTROLLER listener as the quorum records it (`host:port`,
/// an IPv6 host in brackets), split into the host and port a response
/// names; `None` when it is not one.
pub fn host_and_port(address: &str) -> Option<(String, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

/// A voter's directory id as the quorum records it: Kafka's base64, none
/// for the zero uuid (unknown).
pub fn directory_id(id: &tarn_protocol::Uuid) -> Option<String> {
    (!id.is_zero()).then(|| id.to_base64())
}

/// A failed voter change in Kafka's codes.
pub fn voter_change_error(e: &QuorumError) -> Refusal {
    let code = match e {
        QuorumError::DuplicateVoter(_) => error::DUPLICATE_VOTER,
        QuorumError::VoterNotFound(_) => error::VOTER_NOT_FOUND,
        QuorumError::LastVoter(_) => error::INVALID_REQUEST,
        QuorumError::NotLeader { .. } | QuorumError::Uncertain { .. } => {
            error::NOT_LEADER_OR_FOLLOWER
        }
        QuorumError::NotCaughtUp { .. } | QuorumError::VoterChangeRefused(_) => {
            error::REQUEST_TIMED_OUT
        }
        _ => error::UNKNOWN_SERVER_ERROR,
    };
    (code, Some(e.to_string()))
}

/// Sends `request` (the client's, re-encoded at its version) on to the
/// active controller, another node, and brings back its answer, awaited
/// up to `answer_within` (the usual bound when none); `None` while this
/// node is the active controller.
pub async fn forward<Req: Encode, Resp: Decode>(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: &Req,
    answer_within: Option<Duration>,
) -> Option<Result<Resp, String>> {
    let mut frame = Vec::new();
    ctx.header.encode(&mut frame, ctx.version.flexible);
    request.encode(&mut frame, ctx.version);
    let answer = match answer_within {
        Some(within) => crate::controller::forward_within(broker, &frame, within).await?,
        None => crate::controller::forward(broker, &frame).await?,
    };
    Some(match answer {
        Ok(response) => decode(response, ctx).map_err(|e| format!("undecodable answer: {e}")),
        Err(refusal) => Err(format!("the active controller refused: {refusal}")),
    })
}

/// A response frame (size, header, body) as the active controller wrote
/// it.
fn decode<Resp: Decode>(
    frame: Vec<u8>,
    ctx: &RequestContext,
) -> Result<Resp, tarn_protocol::DecodeError> {
    let mut r = Reader::new(Bytes::from(frame));
    i32::decode(&mut r, Version::new(0, 0))?;
    decode_response_header(&mut r, ctx.header.api_key, ctx.version.flexible)?;
    Resp::decode(&mut r, ctx.version)
}
