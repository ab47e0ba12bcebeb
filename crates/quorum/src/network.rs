//! The transport the quorum sends its RPCs over, and openraft's network
//! on top of it.
//!
//! A [`Transport`] carries opaque request bodies to a peer and brings back
//! the reply; the peer hands the body to [`crate::Quorum::handle_rpc`].
//! Bodies are JSON of openraft's messages, which stay private to this
//! crate. Every call is bounded by openraft's per-RPC deadline, so a
//! message the transport loses costs one timeout, as on a real network.
//!
//! A peer that stops answering is logged once, and once again when it
//! answers: openraft retries a dead peer several times a second and would
//! log every failure (those warnings of its own are filtered out at
//! start-up, see [`QUIET_OPENRAFT`]).

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use openraft::base::BoxStream;
use openraft::errors::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{stream_append_sequential, RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult, VoteRequest,
    VoteResponse,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::sync::watch;

use crate::types::{Snapshot, SnapshotMeta, TypeConfig, Vote};
use crate::NodeId;

/// The RPCs of the quorum, each with a private Kafka api key, so a
/// CONTROLLER listener can route quorum frames apart from Kafka requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpcKind {
    AppendEntries,
    Vote,
    PreVote,
    InstallSnapshot,
    /// A leader handing its leadership to this node (openraft's
    /// TransferLeader, as Kafka's EndQuorumEpoch names a successor).
    TransferLeader,
}

/// The first api key of the quorum's private range.
pub const QUORUM_API_KEY_BASE: i16 = 10000;

impl RpcKind {
    pub const ALL: [RpcKind; 5] = [
        RpcKind::AppendEntries,
        RpcKind::Vote,
        RpcKind::PreVote,
        RpcKind::InstallSnapshot,
        RpcKind::TransferLeader,
    ];

    pub fn api_key(self) -> i16 {
        QUORUM_API_KEY_BASE
            + match self {
                RpcKind::AppendEntries => 0,
                RpcKind::Vote => 1,
                RpcKind::PreVote => 2,
                RpcKind::InstallSnapshot => 3,
                RpcKind::TransferLeader => 4,
            }
    }

    pub fn from_api_key(api_key: i16) -> Option<RpcKind> {
        RpcKind::ALL.into_iter().find(|k| k.api_key() == api_key)
    }
}

/// Whether a request with this api key is the quorum's (to be handed to
/// [`crate::Quorum::handle_rpc`]) rather than a Kafka request.
pub fn is_quorum_api_key(api_key: i16) -> bool {
    RpcKind::from_api_key(api_key).is_some()
}

/// Why a call to a peer brought back no reply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The peer could not be reached (no route, refused, connection lost).
    #[error("peer {0} unreachable: {1}")]
    Unreachable(NodeId, String),
    /// The peer answered with an error (e.g. it is shutting down).
    #[error("peer {0} failed the request: {1}")]
    Remote(NodeId, String),
}

/// Sends one request to a peer and waits for its reply. Implementations
/// need not time out: the caller bounds every call.
pub trait Transport: Send + Sync + 'static {
    fn call(
        &self,
        target: NodeId,
        kind: RpcKind,
        body: Bytes,
    ) -> BoxFuture<'static, Result<Bytes, TransportError>>;

    /// Where `target` listens, and its directory id when it has one, as
    /// the membership in the log records them: told before the first call
    /// to a member (a voter added to a running quorum is in no node's
    /// configuration). A transport that routes by node id alone ignores
    /// it.
    fn learn(&self, _target: NodeId, _address: &str, _directory_id: Option<&str>) {}
}

/// The body of an InstallSnapshot request.
#[derive(Serialize, Deserialize)]
pub(crate) struct SnapshotRequest {
    pub vote: Vote,
    pub meta: SnapshotMeta,
    #[serde(serialize_with = "crate::types::text_or_bytes")]
    pub image: Bytes,
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Bytes {
    // Serializing openraft's plain data types to JSON cannot fail.
    Bytes::from(serde_json::to_vec(value).expect("RPC messages serialize"))
}

pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("undecodable RPC body: {e}"))
}

/// How long a leader holds a commit notice (an AppendEntries with no
/// entries, sent only to move a follower's commit index) for the next
/// entries to carry it instead. One change at a time, the next entry comes
/// within a client's round trip, and the notice would have cost every
/// follower a round trip of its own per commit; when the log goes idle,
/// followers hear of the last commit this much later.
const NOTICE_HOLD: Duration = Duration::from_millis(2);

/// `tracing` directives that silence openraft's warning on every failed
/// heartbeat and replication request to a peer (several a second while one
/// is down): the network logs a peer's going and coming back instead.
pub const QUIET_OPENRAFT: &str = "openraft::core::heartbeat=error,openraft::replication=error,\
openraft::engine::handler::replication_handler=error";

/// The peers whose last call went unanswered (timed out or could not
/// reach them), shared by every connection to them.
#[derive(Default)]
pub(crate) struct Unanswered(Mutex<BTreeSet<NodeId>>);

impl Unanswered {
    /// Records how a call to `target` ended, logging a change.
    fn note(&self, target: NodeId, failure: Option<&CallError>) {
        let Ok(mut unanswered) = self.0.lock() else {
            return;
        };
        match failure {
            Some(error) if unanswered.insert(target) => {
                tracing::warn!(node = target, error = %error, "quorum peer does not answer; retrying");
            }
            None if unanswered.remove(&target) => {
                tracing::info!(node = target, "quorum peer answers again");
            }
            _ => {}
        }
    }
}

/// openraft's network factory over a [`Transport`].
pub(crate) struct NetworkFactory {
    pub node_id: NodeId,
    pub transport: Arc<dyn Transport>,
    pub unanswered: Arc<Unanswered>,
    /// How many callers wait for followers to hear of commits (see
    /// [`crate::Quorum::followers_awaited`]); no notice is held while any do.
    pub awaited: Arc<watch::Sender<usize>>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &crate::types::Member) -> Peer {
        self.transport
            .learn(target, &node.addr, node.directory_id.as_deref());
        Peer {
            from: self.node_id,
            target,
            transport: self.transport.clone(),
            unanswered: self.unanswered.clone(),
            awaited: self.awaited.subscribe(),
        }
    }
}

pub(crate) struct Peer {
    from: NodeId,
    target: NodeId,
    transport: Arc<dyn Transport>,
    unanswered: Arc<Unanswered>,
    awaited: watch::Receiver<usize>,
}

type Request = AppendEntriesRequest<TypeConfig>;

/// A replication stream's requests with commit notices held back (see
/// [`NOTICE_HOLD`]): a notice followed within the hold by a request from
/// the same leader that starts where it does is dropped, as that request
/// carries the same or a later commit index. openraft matches answers to
/// what it sent by log id, so the answer to the request that went
/// acknowledges the dropped notice too; the notice's sending time, which
/// openraft's leader lease counts from, is earlier than the answer's.
struct HeldNotices<S> {
    input: S,
    awaited: watch::Receiver<usize>,
    /// A request read while holding a notice it could not replace.
    next: Option<Request>,
    ended: bool,
}

enum Held {
    Next(Option<Request>),
    Elapsed,
    Awaited,
}

impl<S: Stream<Item = Request> + Unpin> HeldNotices<S> {
    async fn next_request(mut self) -> Option<(Request, Self)> {
        let mut request = match self.next.take() {
            Some(request) => request,
            None if self.ended => return None,
            None => self.input.next().await?,
        };
        let deadline = tokio::time::Instant::now() + NOTICE_HOLD;
        while request.entries.is_empty() && self.may_hold() {
            // Biased: an unbiased select draws from tokio's unseeded
            // generator, which would break the replay of a simulation.
            let held = tokio::select! {
                biased;
                // A caller started waiting (or one stopped, which costs
                // this notice its hold and nothing else).
                _ = self.awaited.changed() => Held::Awaited,
                next = self.input.next() => Held::Next(next),
                () = tokio::time::sleep_until(deadline) => Held::Elapsed,
            };
            match held {
                Held::Next(Some(next))
                    if next.vote == request.vote && next.prev_log_id == request.prev_log_id =>
                {
                    request = next;
                }
                Held::Next(Some(next)) => {
                    self.next = Some(next);
                    break;
                }
                Held::Next(None) => {
                    self.ended = true;
                    break;
                }
                Held::Elapsed | Held::Awaited => break,
            }
        }
        self.awaited.borrow_and_update();
        Some((request, self))
    }

    /// Whether a notice may wait: no caller awaits the followers now, and
    /// none started or stopped since the last request went. A caller that
    /// stopped may have been answered before this node's replication got
    /// round to the notice of the commit it awaited, which must not wait
    /// either.
    fn may_hold(&self) -> bool {
        !self.awaited.has_changed().unwrap_or(true) && *self.awaited.borrow() == 0
    }
}

/// Why a call failed, before it is cast into openraft's error types.
enum CallError {
    Timeout(Duration),
    Transport(TransportError),
    Decode(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Timeout(ttl) => write!(f, "no answer within {ttl:?}"),
            CallError::Transport(e) => write!(f, "{e}"),
            CallError::Decode(msg) => write!(f, "{msg}"),
        }
    }
}

impl Peer {
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        kind: RpcKind,
        request: &Req,
        ttl: Duration,
    ) -> Result<Resp, CallError> {
        let call = self.transport.call(self.target, kind, encode(request));
        let result = match tokio::time::timeout(ttl, call).await {
            Err(_) => Err(CallError::Timeout(ttl)),
            Ok(Err(e)) => Err(CallError::Transport(e)),
            Ok(Ok(body)) => decode(&body).map_err(CallError::Decode),
        };
        let unanswered = match &result {
            Err(
                e @ (CallError::Timeout(_) | CallError::Transport(TransportError::Unreachable(..))),
            ) => Some(e),
            _ => None,
        };
        self.unanswered.note(self.target, unanswered);
        result
    }

    fn rpc_error(&self, e: CallError, kind: RpcKind) -> RPCError<TypeConfig> {
        match e {
            CallError::Timeout(ttl) => RPCError::Timeout(self.timeout(ttl, kind)),
            CallError::Transport(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Decode(msg) => RPCError::Network(NetworkError::from_string(msg)),
        }
    }

    fn timeout(&self, ttl: Duration, kind: RpcKind) -> Timeout<TypeConfig> {
        let action = match kind {
            RpcKind::AppendEntries => openraft::network::RPCTypes::AppendEntries,
            RpcKind::Vote | RpcKind::PreVote => openraft::network::RPCTypes::Vote,
            RpcKind::InstallSnapshot => openraft::network::RPCTypes::InstallSnapshot,
            RpcKind::TransferLeader => openraft::network::RPCTypes::TransferLeader,
        };
        Timeout {
            action,
            id: self.from,
            target: self.target,
            timeout: ttl,
        }
    }
}

impl RaftNetworkV2<TypeConfig> for Peer {
    type SnapshotData = Bytes;

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> openraft::base::BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: Stream<Item = Request> + openraft::OptionalSend + Unpin + 'static,
    {
        let held = HeldNotices {
            input,
            awaited: self.awaited.clone(),
            next: None,
            ended: false,
        };
        let requests = Box::pin(futures_util::stream::unfold(
            held,
            HeldNotices::next_request,
        ));
        stream_append_sequential(self, requests, option)
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let kind = RpcKind::AppendEntries;
        self.call(kind, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e, kind))
    }

    async fn transfer_leader(
        &mut self,
        rpc: openraft::raft::TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<openraft::raft::TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let kind = RpcKind::TransferLeader;
        self.call(kind, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e, kind))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let kind = RpcKind::Vote;
        self.call(kind, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e, kind))
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let kind = RpcKind::PreVote;
        self.call(kind, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e, kind))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + openraft::OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let kind = RpcKind::InstallSnapshot;
        let request = SnapshotRequest {
            vote,
            meta: snapshot.meta,
            image: snapshot.snapshot,
        };
        // Biased: an unbiased select draws from tokio's unseeded generator,
        // which would break the replay of a simulation.
        tokio::select! {
            biased;
            closed = cancel => Err(StreamingError::Closed(closed)),
            result = self.call(kind, &request, option.hard_ttl()) => result.map_err(|e| match e {
                CallError::Timeout(ttl) => StreamingError::Timeout(self.timeout(ttl, kind)),
                CallError::Transport(e) => StreamingError::Unreachable(Unreachable::new(&e)),
                CallError::Decode(msg) => StreamingError::Network(NetworkError::from_string(msg)),
            }),
        }
    }
}
