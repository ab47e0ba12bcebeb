//! [`Quorum`]: one node's handle on the replicated metadata log.
//!
//! Bootstrap needs no format step. At start, a node whose log holds no
//! membership initializes the cluster with the static voter set of its
//! config. Every voter does this, in any order: openraft's
//! `Raft::initialize` writes the same membership entry at index 0 on every
//! empty node (identical initial configurations cannot diverge; Raft's
//! vote then elects one leader) and refuses with `NotAllowed` on a node
//! whose log is not empty, which is taken as "already initialized". So
//! the cluster forms whichever voters start first, and a later start never
//! re-initializes. The voter sets in the configs must be identical.
//!
//! A node always starts as a follower, even one that led when it stopped:
//! it asks for an election at once and leads again only in a new term,
//! whose first entry settles what the old term committed (see
//! `QuorumConfig::raft_config`).
//!
//! Brokers that are not voters do not join Raft at all: they follow the
//! committed log from a voter's state machine (`tarn_metadata::feed`), as
//! Kafka's brokers fetch the metadata log from the controllers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, InitializeError, LinearizableReadError, RaftError};
use openraft::{ChangeMembers, Precondition, Raft, ServerState};
use openraft_rt::deterministic_rng::DeterministicRng;
use tarn_storage::FileSystem;
use tokio::sync::watch;

use crate::config::QuorumConfig;
use crate::error::QuorumError;
use crate::log_store::LogStore;
use crate::machine::{committed, MachineStore, SnapshotStore, StateMachine};
use crate::network::{decode, encode, NetworkFactory, RpcKind, SnapshotRequest, Transport};
use crate::types::{Data, LogId, Member, Snapshot, TypeConfig};
use crate::NodeId;

/// Where a proposed entry landed in the log once committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Committed {
    pub index: u64,
    pub term: u64,
}

/// An entry handed to Raft by [`Quorum::submit`], not known to have
/// committed yet.
pub struct Proposal {
    outcome: openraft::alias::OneshotReceiverOf<
        TypeConfig,
        openraft::raft::ClientWriteResult<TypeConfig>,
    >,
}

impl Proposal {
    /// Returns once the entry is committed (and applied on this node), or
    /// why it will not be known to.
    pub async fn committed(self) -> Result<Committed, QuorumError> {
        match self.outcome.await {
            Ok(Ok(response)) => Ok(committed(&response.log_id)),
            Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(QuorumError::NotLeader {
                leader: f.leader_id,
            }),
            Ok(Err(ClientWriteError::LogEntryDiscarded(f))) => Err(QuorumError::Uncertain {
                leader: f.leader_id,
            }),
            Ok(Err(e)) => Err(QuorumError::Rpc(e.to_string())),
            // Raft dropped the responder: it stopped before answering.
            Err(e) => Err(stopped(e)),
        }
    }
}

/// What this node knows of the quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: NodeId,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub is_leader: bool,
    /// The highest index this node knows to be committed.
    pub committed_index: Option<u64>,
    /// The highest index applied to this node's state machine.
    pub applied_index: Option<u64>,
    pub voters: BTreeSet<NodeId>,
    /// The voters once a change under way (a joint configuration) is
    /// done: `voters` when none is.
    pub next_voters: Arc<BTreeSet<NodeId>>,
    /// False once the node stopped (shut down or failed).
    pub running: bool,
    /// On the leader: when a quorum last acknowledged it (a heartbeat or
    /// an append). A leader cut off from the quorum keeps believing it
    /// leads until it learns otherwise; this tells how stale that is.
    pub quorum_acked: Option<tokio::time::Instant>,
    /// The index of this node's last log entry.
    pub last_log_index: Option<u64>,
    /// On the leader: each voter's last index known to match the
    /// leader's log (none yet: unknown).
    pub matched: BTreeMap<NodeId, Option<u64>>,
    /// On the leader: when each voter last acknowledged a heartbeat or an
    /// append.
    pub acked: BTreeMap<NodeId, tokio::time::Instant>,
    /// The controller listener (host:port) of every member, voter or
    /// learner, as the membership in the log records it.
    pub addresses: Arc<BTreeMap<NodeId, String>>,
    /// The directory id of every member the membership records one for
    /// (a dynamic quorum's, KIP-853).
    pub directory_ids: Arc<BTreeMap<NodeId, String>>,
}

impl QuorumStatus {
    /// Whether this node leads and a quorum acknowledged it within
    /// `lease`: an isolated leader stops counting as one once its lease
    /// lapses, although Raft has not deposed it yet. The sole voter is a
    /// quorum by itself and cannot be cut off from it: nobody else
    /// acknowledges it (openraft then records no acknowledgement after
    /// its election), and its lease never lapses.
    pub fn leads_within(&self, lease: std::time::Duration) -> bool {
        let sole_voter = self.voters.iter().all(|id| *id == self.node_id);
        self.is_leader
            && (sole_voter
                || self
                    .quorum_acked
                    .is_some_and(|acked| acked.elapsed() < lease))
    }

    /// On the leader: whether node `id` acknowledged it within `within`
    /// (the leader itself always has). A voter that has not, for a fetch
    /// timeout, counts as gone, as Kafka's leader counts a voter that has
    /// not fetched.
    pub fn answered_within(&self, id: NodeId, within: std::time::Duration) -> bool {
        id == self.node_id || self.acked.get(&id).is_some_and(|at| at.elapsed() < within)
    }
}

type QuorumRaft = Raft<TypeConfig, MachineStore>;

/// The least time an added voter's promotion is given once it caught up.
const PROMOTION_MIN: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a leader that is asked to remove itself waits for another to
/// take over.
const HAND_OVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// See [`Quorum::followers_awaited`].
#[must_use = "followers hear of commits at once only while the guard lives"]
pub struct FollowersAwaited(Arc<watch::Sender<usize>>);

impl Drop for FollowersAwaited {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// A running quorum member. Cheap to clone; all clones share the node.
#[derive(Clone)]
pub struct Quorum {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: NodeId,
    /// This node's data directory id, when it has one (KIP-853).
    directory_id: Option<String>,
    raft: QuorumRaft,
    status: watch::Receiver<QuorumStatus>,
    /// `controller.quorum.fetch.timeout.ms`: a voter that has not answered
    /// the leader for this long counts as gone.
    fetch_timeout: std::time::Duration,
    /// How many [`FollowersAwaited`] guards live.
    awaited: Arc<watch::Sender<usize>>,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum")
            .field("node_id", &self.inner.node_id)
            .finish()
    }
}

fn seed_from_clock(node_id: NodeId) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ node_id.rotate_left(32)
}

/// A membership change's failure in Tarn's terms.
fn membership_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> QuorumError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => QuorumError::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => QuorumError::Uncertain {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            QuorumError::VoterChangeRefused(e.to_string())
        }
        RaftError::APIError(e) => QuorumError::Rpc(e.to_string()),
        RaftError::Fatal(e) => stopped(e),
    }
}

fn stopped(e: impl std::fmt::Display) -> QuorumError {
    QuorumError::Shutdown(e.to_string())
}

impl Quorum {
    /// Recovers the node's log and latest snapshot from `config.dir` on
    /// `fs`, installs the snapshot into `machine` (which must be empty),
    /// starts Raft and, on an empty log, bootstraps (see the module docs).
    /// Committed entries are then applied to `machine` in order.
    pub async fn start(
        config: QuorumConfig,
        fs: Arc<dyn FileSystem>,
        transport: Arc<dyn Transport>,
        machine: Box<dyn StateMachine>,
    ) -> Result<Quorum, QuorumError> {
        let raft_config = Arc::new(config.raft_config()?);
        let node_id = config.node_id;
        let log = LogStore::open(fs.clone(), &config.dir, node_id).map_err(|e| {
            QuorumError::io(format!("open metadata log {}", config.dir.display()), e)
        })?;
        let led_before = log
            .vote()
            .map_err(|e| QuorumError::io("read the vote", e))?
            .is_some_and(|v| v.committed && v.leader_id.node_id == node_id);
        let machine =
            MachineStore::open(machine, SnapshotStore::new(fs, &config.dir)).map_err(|e| {
                QuorumError::io(format!("load snapshot from {}", config.dir.display()), e)
            })?;
        let awaited = Arc::new(watch::channel(0).0);
        let network = NetworkFactory {
            node_id,
            transport,
            unanswered: Arc::default(),
            awaited: awaited.clone(),
        };
        let seed = config.rng_seed.unwrap_or_else(|| seed_from_clock(node_id));
        // openraft draws its election timeouts from the task-local seed of
        // `DeterministicRng`; every task it spawns inherits one from here.
        let raft = DeterministicRng::<openraft_rt_tokio::TokioRuntime>::scope(
            seed,
            Raft::new(node_id, raft_config, network, log, machine),
        )
        .await
        .map_err(stopped)?;
        if led_before {
            // It starts as a follower (see `QuorumConfig::raft_config`):
            // ask for an election now rather than after a timeout. With a
            // pre-vote first, so that a leader elected meanwhile keeps its
            // place.
            raft.trigger().elect(true).await.map_err(stopped)?;
        }
        let status = spawn_status(node_id, &raft);
        let quorum = Quorum {
            inner: Arc::new(Inner {
                node_id,
                directory_id: config.directory_id.clone(),
                raft,
                status,
                fetch_timeout: std::time::Duration::from_millis(config.fetch_timeout_ms),
                awaited,
            }),
        };
        spawn_joint_finisher(quorum.clone());
        quorum.bootstrap(&config).await?;
        Ok(quorum)
    }

    async fn bootstrap(&self, config: &QuorumConfig) -> Result<(), QuorumError> {
        let voters = &config.voters;
        let raft = &self.inner.raft;
        if raft.is_initialized().await.map_err(stopped)? {
            return Ok(());
        }
        if voters.is_empty() {
            tracing::info!(
                node_id = self.inner.node_id,
                "no initial voters: waiting for the quorum's leader to add this node \
                 (AddRaftVoter, `kafka-metadata-quorum.sh add-controller`)"
            );
            return Ok(());
        }
        let members: BTreeMap<NodeId, Member> = voters
            .iter()
            .map(|(id, addr)| {
                let member = Member {
                    addr: addr.clone(),
                    directory_id: config.voter_directory_ids.get(id).cloned(),
                };
                (*id, member)
            })
            .collect();
        match raft.initialize(members).await {
            Ok(()) => {
                tracing::info!(node_id = self.inner.node_id, voters = ?voters.keys(), "initialized the metadata quorum");
                Ok(())
            }
            // Another voter's membership reached us first: already formed.
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(RaftError::APIError(e @ InitializeError::NotInMembers(_))) => {
                Err(QuorumError::Config(e.to_string()))
            }
            Err(RaftError::Fatal(e)) => Err(stopped(e)),
        }
    }

    pub fn node_id(&self) -> NodeId {
        self.inner.node_id
    }

    /// This node's data directory id, when it has one (KIP-853).
    pub fn directory_id(&self) -> Option<&str> {
        self.inner.directory_id.as_deref()
    }

    /// While the returned guard lives, and for the commit notices that
    /// follow its drop until the next request to each follower, followers
    /// hear of every commit at once. A leader otherwise holds a commit
    /// notice for a moment so that the next entry carries it; a caller on
    /// whose behalf another node waits to see a change applied (a
    /// forwarded request) takes a guard before it proposes.
    pub fn followers_awaited(&self) -> FollowersAwaited {
        self.inner.awaited.send_modify(|n| *n += 1);
        FollowersAwaited(self.inner.awaited.clone())
    }

    /// Appends `entry` to the log as one atomic entry and returns once it
    /// is committed (and applied on this node).
    pub async fn propose(&self, entry: Bytes) -> Result<Committed, QuorumError> {
        self.submit(entry).await?.committed().await
    }

    /// Hands `entry` to Raft and returns without waiting for it to
    /// commit: entries submitted one after another (each `submit` returned
    /// before the next began) take their places in the log in that order,
    /// so a leader can have several in flight. The returned proposal
    /// tells when this one commits.
    pub async fn submit(&self, entry: Bytes) -> Result<Proposal, QuorumError> {
        let (responder, outcome) = openraft::impls::ProgressResponder::complete_only();
        self.inner
            .raft
            .client_write_ff(Data(entry), Some(responder))
            .await
            .map_err(stopped)?;
        Ok(Proposal { outcome })
    }

    /// Returns once this node has confirmed with a quorum that it is
    /// still the leader; the index returned is then committed, and a read
    /// of the state machine after it has been applied is linearizable.
    pub async fn read_barrier(&self) -> Result<u64, QuorumError> {
        let raft = &self.inner.raft;
        match raft
            .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
            .await
        {
            Ok(read) => Ok(read.log_id().index),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                Err(QuorumError::NotLeader {
                    leader: f.leader_id,
                })
            }
            Err(RaftError::APIError(e)) => Err(QuorumError::Rpc(e.to_string())),
            Err(RaftError::Fatal(e)) => Err(stopped(e)),
        }
    }

    /// Adds node `id`, whose controller listener is `address` and whose
    /// data directory is `directory_id` (when known), to the voters
    /// (KIP-853's AddRaftVoter): the leader first replicates its log
    /// to the node as a learner and, once the node has caught up (within
    /// `catch_up`), commits the new voter set (openraft's joint consensus:
    /// two entries). Returns once the new set is committed, within about
    /// `catch_up` in all ([`PROMOTION_MIN`] at least for that). A node that
    /// does not catch up in time is taken out again and not added. A node
    /// that a change under way removes is refused until that change is
    /// committed. Only the leader can do this.
    pub async fn add_voter(
        &self,
        id: NodeId,
        address: &str,
        directory_id: Option<&str>,
        catch_up: std::time::Duration,
    ) -> Result<(), QuorumError> {
        self.check_leader()?;
        let member = Member {
            addr: address.to_owned(),
            directory_id: directory_id.map(str::to_owned),
        };
        let recorded = {
            let status = self.inner.status.borrow();
            if status.voters.contains(&id) && !status.next_voters.contains(&id) {
                // A removal under way (or left half done, which the
                // leader finishes within an election timeout).
                return Err(leaving(id, "it is"));
            }
            if status.voters.contains(&id) {
                return Err(QuorumError::DuplicateVoter(id));
            }
            status.addresses.get(&id).map(|addr| Member {
                addr: addr.clone(),
                directory_id: status.directory_ids.get(&id).cloned(),
            })
        };
        let raft = &self.inner.raft;
        let deadline = tokio::time::Instant::now() + catch_up;
        if recorded.is_some_and(|recorded| recorded != member) {
            // A learner already (a removed controller kept for its broker),
            // now at another address or with another directory (formatted
            // again): `add_learner` keeps a member's record, and replication
            // to it keeps the peer it started with, so the learner is taken
            // out first and added afresh.
            let remove = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
            match tokio::time::timeout_at(deadline, raft.change_membership(remove, false)).await {
                Ok(result) => {
                    result.map_err(membership_error)?;
                }
                Err(_) => {
                    return Err(QuorumError::NotCaughtUp {
                        id,
                        waited: catch_up,
                    })
                }
            }
        }
        // openraft's blocking `add_learner` returns once its own wait ends,
        // caught up or not: the catch-up is checked here, as a voter that
        // cannot be reached would otherwise stall every commit of the
        // joint configuration.
        let added = tokio::time::timeout_at(deadline, raft.add_learner(id, member, false)).await;
        let caught_up = match added {
            Ok(result) => {
                let added = result.map_err(membership_error)?;
                let mut status = self.status();
                let target = added.log_id.index;
                let wait = status.wait_for(|s| {
                    !s.running || s.matched.get(&id).copied().flatten() >= Some(target)
                });
                let seen = tokio::time::timeout_at(deadline, wait).await;
                let caught_up = matches!(seen, Ok(Ok(s)) if s.running);
                caught_up
            }
            Err(_) => false,
        };
        if !caught_up {
            // Take the learner out again, so the leader stops replicating
            // to a node that was not added.
            let remove = ChangeMembers::RemoveNodes(BTreeSet::from([id]));
            if let Err(e) = raft.change_membership(remove, false).await {
                tracing::warn!(node = id, error = %e, "could not remove a learner that did not catch up");
            }
            return Err(QuorumError::NotCaughtUp {
                id,
                waited: catch_up,
            });
        }
        // Both entries of the joint change need the new voter too: one
        // that stops now holds them up, and the caller hears so in time,
        // within what is left of `catch_up` (a caught-up voter's promotion
        // commits in a few round trips; a moment more is granted when the
        // catch-up took nearly all of it).
        let promote =
            raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false);
        let promote_within = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(PROMOTION_MIN);
        match tokio::time::timeout(promote_within, promote).await {
            Ok(result) => {
                result.map_err(membership_error)?;
            }
            Err(_) => {
                return Err(QuorumError::VoterChangeRefused(format!(
                    "node {id} caught up, but its promotion to voter was not committed within \
                     {promote_within:?}; it may still complete"
                )))
            }
        }
        tracing::info!(
            node_id = self.inner.node_id,
            added = id,
            address,
            directory_id,
            "added a voter to the metadata quorum"
        );
        Ok(())
    }

    /// Removes voter `id` from the quorum, and from its membership
    /// altogether (KIP-853's RemoveRaftVoter). Returns once the new voter
    /// set is committed. Asked to remove itself, the leader hands over to
    /// another voter instead and answers [`QuorumError::NotLeader`] naming
    /// it, for the caller to ask there. Only the leader can do this. A
    /// `directory_id` must be the voter's, when the membership records one
    /// (a voter is its id and directory, as in Kafka). With
    /// `keep_as_learner` the node stays a member that is not a voter: the
    /// log is still replicated to it (a node that is also a broker goes on
    /// following the metadata, as Kafka's removed controllers go on as
    /// observers).
    pub async fn remove_voter(
        &self,
        id: NodeId,
        directory_id: Option<&str>,
        keep_as_learner: bool,
    ) -> Result<(), QuorumError> {
        self.check_leader()?;
        let (voters, recorded) = {
            let status = self.inner.status.borrow();
            (
                status.voters.clone(),
                status.directory_ids.get(&id).cloned(),
            )
        };
        let other_directory = matches!(
            (directory_id, recorded.as_deref()),
            (Some(asked), Some(recorded)) if asked != recorded
        );
        if !voters.contains(&id) || other_directory {
            return Err(QuorumError::VoterNotFound(id));
        }
        if voters.len() == 1 {
            return Err(QuorumError::LastVoter(id));
        }
        if id == self.inner.node_id {
            return Err(self.hand_over(&voters).await);
        }
        self.inner
            .raft
            .change_membership(
                ChangeMembers::RemoveVoters(BTreeSet::from([id])),
                keep_as_learner,
            )
            .await
            .map_err(membership_error)?;
        tracing::info!(
            node_id = self.inner.node_id,
            removed = id,
            keep_as_learner,
            "removed a voter from the metadata quorum"
        );
        Ok(())
    }

    /// Takes node `id` out of the membership when it is a member that is
    /// not a voter (a removed controller kept as a learner, whose broker
    /// was unregistered): the log is no longer replicated to it. Whether it
    /// was one. Only the leader can do this.
    pub async fn remove_learner(&self, id: NodeId) -> Result<bool, QuorumError> {
        self.check_leader()?;
        let learner = {
            let status = self.inner.status.borrow();
            status.addresses.contains_key(&id) && !status.next_voters.contains(&id)
        };
        if !learner {
            return Ok(false);
        }
        self.inner
            .raft
            .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
            .await
            .map_err(membership_error)?;
        tracing::info!(
            node_id = self.inner.node_id,
            removed = id,
            "removed a learner from the metadata quorum"
        );
        Ok(true)
    }

    /// Moves the leadership to the voter that has the most of the log, and
    /// waits (up to a few election timeouts) until someone else leads; the
    /// error tells the caller to ask the new leader. A leader does not
    /// remove itself: openraft's leader that is not a voter of its own
    /// latest membership (until that commits) mishandles a later change.
    async fn hand_over(&self, voters: &BTreeSet<NodeId>) -> QuorumError {
        self.hand_over_within(voters, HAND_OVER_TIMEOUT).await
    }

    /// Before this node stops: when it leads and another voter exists,
    /// hands the leadership to the voter with the most of the log and
    /// waits, up to an election timeout, for someone else to lead (Kafka's
    /// controller resigns on shutdown the same way, with EndQuorumEpoch).
    /// The quorum then need not wait out an election timeout to miss it;
    /// a node that restarts does not resume leading either (see
    /// `QuorumConfig::raft_config`). Gives up quietly when no one takes
    /// over in time: the quorum elects as after a crash.
    pub async fn resign(&self) {
        let voters = {
            let status = self.inner.status.borrow();
            if !status.is_leader {
                return;
            }
            status.voters.clone()
        };
        let within =
            std::time::Duration::from_millis(self.inner.raft.config().election_timeout_max);
        match self.hand_over_within(&voters, within).await {
            QuorumError::NotLeader {
                leader: Some(leader),
            } if leader != self.inner.node_id => tracing::info!(
                node_id = self.inner.node_id,
                leader,
                "handed the metadata quorum's leadership over before stopping"
            ),
            QuorumError::LastVoter(_) => {}
            e => tracing::warn!(
                node_id = self.inner.node_id,
                error = %e,
                "no other voter took the metadata quorum's leadership before this node stops"
            ),
        }
    }

    async fn hand_over_within(
        &self,
        voters: &BTreeSet<NodeId>,
        within: std::time::Duration,
    ) -> QuorumError {
        let me = self.inner.node_id;
        let to = {
            let status = self.inner.status.borrow();
            voters
                .iter()
                .filter(|id| **id != me)
                .max_by_key(|id| status.matched.get(*id).copied().flatten())
                .copied()
        };
        let Some(to) = to else {
            return QuorumError::LastVoter(me);
        };
        if let Err(e) = self.inner.raft.trigger().transfer_leader(to).await {
            return stopped(e);
        }
        let mut status = self.status();
        let moved = status.wait_for(|s| !s.running || s.leader.is_some_and(|l| l != me));
        let leader = match tokio::time::timeout(within, moved).await {
            Ok(Ok(s)) => s.leader,
            _ => None,
        };
        QuorumError::NotLeader { leader }
    }

    /// Whether this node may change the voters: it leads, and stays a voter
    /// once the change under way, if any, is done. A leader that a pending
    /// change removes still leads until that change commits, but may not
    /// start another (openraft's leader then is no voter of its own latest
    /// membership, and asserts against it in debug builds).
    fn check_leader(&self) -> Result<(), QuorumError> {
        let status = self.inner.status.borrow();
        if !status.is_leader {
            return Err(QuorumError::NotLeader {
                leader: status.leader,
            });
        }
        // Not "a voter leaving": a leader a half-done removal left a
        // learner is no voter at all, and may not change the voters either.
        if !status.next_voters.contains(&self.inner.node_id) {
            return Err(leaving(self.inner.node_id, "another leads"));
        }
        Ok(())
    }

    /// This node's view of the quorum, updated as it changes.
    pub fn status(&self) -> watch::Receiver<QuorumStatus> {
        self.inner.status.clone()
    }

    /// Handles an RPC a peer sent through its [`Transport`]; the reply
    /// goes back to that peer.
    pub async fn handle_rpc(&self, kind: RpcKind, body: &[u8]) -> Result<Bytes, QuorumError> {
        let raft = &self.inner.raft;
        let reply = match kind {
            RpcKind::AppendEntries => {
                let request = decode(body).map_err(QuorumError::Rpc)?;
                encode(&raft.append_entries(request).await.map_err(stopped)?)
            }
            RpcKind::Vote => {
                let request = decode(body).map_err(QuorumError::Rpc)?;
                encode(&raft.vote(request).await.map_err(stopped)?)
            }
            RpcKind::PreVote => {
                let request = decode(body).map_err(QuorumError::Rpc)?;
                encode(&raft.pre_vote(request).await.map_err(stopped)?)
            }
            RpcKind::TransferLeader => {
                let request = decode(body).map_err(QuorumError::Rpc)?;
                encode(
                    &raft
                        .handle_transfer_leader(request)
                        .await
                        .map_err(stopped)?,
                )
            }
            RpcKind::InstallSnapshot => {
                let request: SnapshotRequest = decode(body).map_err(QuorumError::Rpc)?;
                let snapshot = Snapshot {
                    meta: request.meta,
                    snapshot: request.image,
                };
                encode(
                    &raft
                        .install_full_snapshot(request.vote, snapshot)
                        .await
                        .map_err(stopped)?,
                )
            }
        };
        Ok(reply)
    }

    /// Stops the node; its durable state stays for the next start.
    pub async fn shutdown(&self) -> Result<(), QuorumError> {
        self.inner.raft.shutdown().await.map_err(stopped)
    }
}

/// A leader that finds a joint configuration committed, and left so for
/// an election timeout, finishes it: it commits the joint's new voter
/// set. openraft proposes that second entry only from the call that
/// proposed the first, so a change whose leader was replaced in between
/// (or whose caller stopped waiting) would leave the quorum joint for
/// good: every commit then needs majorities of both voter sets, and a
/// leader that the change removes refuses further changes (see
/// `Quorum::check_leader`) without ever stepping down. A removed voter
/// that still answers the leader stays a learner (it may be a broker
/// that goes on following the log until it unregisters); one silent for
/// a fetch timeout leaves the membership: what `RemoveRaftVoter` asks for
/// a live and for a dead broker. A leader so removed hands over, as
/// openraft's own step-down of a removed leader passes over one that
/// stays a learner.
fn spawn_joint_finisher(quorum: Quorum) {
    let raft = quorum.inner.raft.clone();
    let node_id = quorum.inner.node_id;
    let grace = std::time::Duration::from_millis(raft.config().election_timeout_min);
    // These change with the server state and the membership only, not
    // with every commit.
    let mut metrics = raft.server_metrics();
    tokio::spawn(async move {
        // The joint entry's log id, and since when this leader has seen
        // it committed and not followed by another membership.
        let mut waiting: Option<(LogId, tokio::time::Instant)> = None;
        loop {
            let stuck = {
                let m = metrics.borrow_watched();
                let joint = m.membership_config.membership().get_joint_config().len() > 1;
                let at = *m.membership_config.log_id();
                let committed = at == *m.committed_membership_config.log_id();
                at.filter(|_| m.state == ServerState::Leader && joint && committed)
            };
            waiting = match (stuck, waiting) {
                (None, _) => None,
                (Some(at), Some((seen, since))) if seen == at => Some((seen, since)),
                (Some(at), _) => Some((at, tokio::time::Instant::now())),
            };
            let changed = match waiting {
                None => metrics.changed().await,
                Some((at, since)) if since.elapsed() >= grace => {
                    waiting = None;
                    match finish_joint(&quorum, at, grace).await {
                        Err(QuorumError::Shutdown(_)) => break,
                        Err(e) => tracing::debug!(
                            node_id,
                            error = %e,
                            "a half-done voter change was not finished here"
                        ),
                        Ok(()) => {}
                    }
                    Ok(())
                }
                Some((_, since)) => {
                    match tokio::time::timeout_at(since + grace, metrics.changed()).await {
                        Ok(changed) => changed,
                        Err(_) => Ok(()),
                    }
                }
            };
            if changed.is_err() {
                break;
            }
        }
    });
}

/// Commits the new voter set of the joint configuration at `joint`, if
/// it is still the latest (another change, or another leader, may have
/// come first); see [`spawn_joint_finisher`].
async fn finish_joint(
    quorum: &Quorum,
    joint: LogId,
    hand_over_within: std::time::Duration,
) -> Result<(), QuorumError> {
    let raft = &quorum.inner.raft;
    let me = quorum.inner.node_id;
    let unchanged = Precondition::LastMembershipLogId {
        last_membership_log_id: Some(joint),
    };
    // Each change adds or removes one voter, so that one decides.
    let keep_as_learners = {
        let status = quorum.inner.status.borrow();
        status
            .voters
            .difference(&status.next_voters)
            .all(|id| status.answered_within(*id, quorum.inner.fetch_timeout))
    };
    let flatten = ChangeMembers::AddVoterIds(BTreeSet::new());
    let finished = raft.change_membership_if(flatten, keep_as_learners, [unchanged]);
    let response = match finished.await {
        Ok(response) => response,
        Err(RaftError::Fatal(e)) => return Err(stopped(e)),
        Err(RaftError::APIError(e)) => return Err(QuorumError::Rpc(e.to_string())),
    };
    let voters: BTreeSet<NodeId> = response
        .membership
        .as_ref()
        .map(|m| m.voter_ids().collect())
        .unwrap_or_default();
    tracing::info!(
        node_id = me,
        joint = %joint,
        voters = ?voters,
        keep_as_learners,
        "finished a voter change that was left half done"
    );
    if !voters.contains(&me) {
        let handed = quorum.hand_over_within(&voters, hand_over_within).await;
        tracing::info!(node_id = me, outcome = %handed, "no longer a voter: handing the leadership over");
        // Should no one have taken over, this node stops leading all the
        // same (it is a learner now); the voters elect after a timeout.
        raft.trigger()
            .refresh_server_state(None, Some(response.log_id))
            .await
            .map_err(stopped)?;
    }
    Ok(())
}

/// Mirrors openraft's metrics into a [`QuorumStatus`] watch.
fn spawn_status(node_id: NodeId, raft: &QuorumRaft) -> watch::Receiver<QuorumStatus> {
    let mut metrics = raft.metrics();
    // openraft's metrics change with every commit and acknowledgement;
    // the voter set only with a membership entry.
    type Members = (
        Option<LogId>,
        BTreeSet<NodeId>,
        Arc<BTreeMap<NodeId, String>>,
        Arc<BTreeSet<NodeId>>,
        Arc<BTreeMap<NodeId, String>>,
    );
    let mut voters: Option<Members> = None;
    let mut convert = move |running: bool, m: &openraft::RaftMetrics<TypeConfig>| QuorumStatus {
        node_id,
        term: m.current_term,
        leader: m.current_leader,
        is_leader: m.state == ServerState::Leader,
        committed_index: m.local_committed.map(|l| l.index),
        applied_index: m.last_applied.map(|l| l.index),
        voters: match &voters {
            Some((of, set, ..)) if of == m.membership_config.log_id() => set.clone(),
            _ => {
                let membership = m.membership_config.membership();
                let set: BTreeSet<NodeId> = membership.voter_ids().collect();
                let addresses = Arc::new(
                    membership
                        .nodes()
                        .map(|(id, node)| (*id, node.addr.clone()))
                        .collect(),
                );
                let next = Arc::new(
                    membership
                        .get_joint_config()
                        .last()
                        .cloned()
                        .unwrap_or_default(),
                );
                let directory_ids = Arc::new(
                    membership
                        .nodes()
                        .filter_map(|(id, node)| Some((*id, node.directory_id.clone()?)))
                        .collect(),
                );
                voters = Some((
                    *m.membership_config.log_id(),
                    set.clone(),
                    addresses,
                    next,
                    directory_ids,
                ));
                set
            }
        },
        addresses: voters
            .as_ref()
            .map(|(_, _, addresses, ..)| Arc::clone(addresses))
            .unwrap_or_default(),
        next_voters: voters
            .as_ref()
            .map(|(_, _, _, next, _)| Arc::clone(next))
            .unwrap_or_default(),
        directory_ids: voters
            .as_ref()
            .map(|(.., directory_ids)| Arc::clone(directory_ids))
            .unwrap_or_default(),
        running: running && m.running_state.is_ok(),
        quorum_acked: m
            .last_quorum_acked
            .as_deref()
            .map(|acked| tokio::time::Instant::now() - openraft::Instant::elapsed(acked)),
        last_log_index: m.last_log_index,
        matched: m
            .replication
            .iter()
            .flatten()
            .map(|(id, log_id)| (*id, log_id.as_ref().map(|l| l.index)))
            .collect(),
        acked: m
            .heartbeat
            .iter()
            .flatten()
            .filter_map(|(id, at)| {
                let at = at.as_deref()?;
                Some((
                    *id,
                    tokio::time::Instant::now() - openraft::Instant::elapsed(at),
                ))
            })
            .collect(),
    };
    let initial = convert(true, &metrics.borrow_watched());
    let (tx, rx) = watch::channel(initial);
    tokio::spawn(async move {
        loop {
            let changed = metrics.changed().await;
            let status = convert(changed.is_ok(), &metrics.borrow_watched());
            tx.send_replace(status);
            if changed.is_err() {
                break;
            }
        }
    });
    rx
}

/// A voter change refused while one under way removes node `id`: asked
/// again `once` that is so, it may be taken.
fn leaving(id: NodeId, once: &str) -> QuorumError {
    QuorumError::VoterChangeRefused(format!(
        "node {id} is leaving the quorum (its removal is not committed yet): ask again once {once}"
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn leader_of(voters: &[NodeId], acked_ago: Option<Duration>) -> QuorumStatus {
        QuorumStatus {
            node_id: 1,
            term: 3,
            leader: Some(1),
            is_leader: true,
            committed_index: Some(10),
            applied_index: Some(10),
            voters: voters.iter().copied().collect(),
            next_voters: Arc::new(voters.iter().copied().collect()),
            running: true,
            quorum_acked: acked_ago.map(|ago| tokio::time::Instant::now() - ago),
            last_log_index: Some(10),
            matched: BTreeMap::new(),
            acked: BTreeMap::new(),
            addresses: Arc::default(),
            directory_ids: Arc::default(),
        }
    }

    #[test]
    fn a_leader_s_lease_lapses_without_acknowledgements_unless_it_is_the_sole_voter() {
        let lease = Duration::from_secs(1);
        assert!(leader_of(&[1, 2, 3], Some(Duration::from_millis(100))).leads_within(lease));
        assert!(!leader_of(&[1, 2, 3], Some(Duration::from_secs(5))).leads_within(lease));
        assert!(!leader_of(&[1, 2, 3], None).leads_within(lease));
        // Elected long ago and never acknowledged since: still the quorum.
        assert!(leader_of(&[1], Some(Duration::from_secs(5))).leads_within(lease));
        assert!(leader_of(&[1], None).leads_within(lease));
        let mut follower = leader_of(&[1], None);
        follower.is_leader = false;
        assert!(!follower.leads_within(lease));
    }

    #[test]
    fn a_voter_counts_as_gone_once_it_has_not_answered_for_a_fetch_timeout() {
        let fetch_timeout = Duration::from_secs(2);
        let mut status = leader_of(&[1, 2, 3, 4], None);
        let now = tokio::time::Instant::now();
        status.acked.insert(2, now - Duration::from_millis(300));
        status.acked.insert(3, now - Duration::from_secs(5));
        assert!(
            status.answered_within(1, fetch_timeout),
            "the leader itself"
        );
        assert!(status.answered_within(2, fetch_timeout));
        assert!(!status.answered_within(3, fetch_timeout));
        assert!(!status.answered_within(4, fetch_timeout), "never answered");
    }
}
