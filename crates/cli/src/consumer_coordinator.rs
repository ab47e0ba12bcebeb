//! The member's side of Kafka's classic consumer-group protocol, as
//! `consume --group` runs it: Kafka's `ConsumerCoordinator` cut down to one
//! blocking member with eager assignors. It finds the coordinator, joins
//! (again with the member id the broker hands out with
//! MEMBER_ID_REQUIRED), computes the assignment when elected leader,
//! syncs, heartbeats every `heartbeat.interval.ms`, reads the group's
//! committed offsets for the partitions it gets, commits the consumer's
//! positions every `auto.commit.interval.ms`, before giving its partitions
//! up in a rebalance and when closing, and leaves the group when closing.
//!
//! The consumer loop drives it: [`ConsumerCoordinator::poll`] does what is
//! due and returns the new assignment after a rebalance, and
//! [`ConsumerCoordinator::time_to_next_duty`] bounds each fetch's long
//! poll so that fetching never starves heartbeats. Error codes are handled
//! as Kafka's AbstractCoordinator handles them ([`reaction`]):
//! REBALANCE_IN_PROGRESS rejoins with the same member id and generation,
//! ILLEGAL_GENERATION rejoins with the same member id, UNKNOWN_MEMBER_ID
//! rejoins as a new member, NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE
//! find the coordinator again; FENCED_INSTANCE_ID and any unexpected code
//! end the command, naming it. A commit the group refuses because the
//! member lost its partitions is a warning on stderr, as in Kafka: the
//! records after the last commit will be delivered again to their new
//! owner (at least once). Losing the connection to the coordinator ends
//! the command, as a lost connection to a leader does.

use std::collections::{BTreeMap, BTreeSet};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;

use tarn_protocol::consumer_protocol::{self, Assignment, Subscription, TopicPartitions};
use tarn_protocol::error;
use tarn_protocol::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use tarn_protocol::messages::join_group::{
    JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse,
};
use tarn_protocol::messages::leave_group::{LeaveGroupRequest, LeaveGroupResponse, MemberIdentity};
use tarn_protocol::messages::sync_group::{
    SyncGroupRequest, SyncGroupRequestAssignment, SyncGroupResponse,
};

use tarn_cli::client::Client;

use crate::assignor::{Assignor, MemberSubscription};
use crate::cluster::{metadata, TopicPartition};
use crate::coordinator::{
    commit_offsets, committed_offsets, error_text, find_coordinator, Committer, CoordinatorError,
};
use crate::interrupt;

/// How many JoinGroup/SyncGroup rounds one rebalance may take before the
/// command gives up (each failed round waits [`RETRY_BACKOFF`]).
const JOIN_ROUNDS_MAX: u32 = 600;
/// How many times a retriable coordinator error (loading, moved, busy) is
/// retried for one OffsetFetch or closing OffsetCommit.
const COORDINATOR_RETRIES_MAX: u32 = 100;
/// Kafka's `retry.backoff.ms` default: the pause before a retry.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// Kafka's JOIN_GROUP_TIMEOUT_LAPSE: a JoinGroup answer may take the
/// rebalance timeout plus this.
const JOIN_GROUP_TIMEOUT_LAPSE: Duration = Duration::from_secs(5);
/// The shortest wait for any coordinator response.
const RESPONSE_WAIT_MIN: Duration = Duration::from_secs(60);
/// What a member sends as the LeaveGroup reason when it closes.
const LEAVE_REASON: &str = "the consumer is being closed";

/// The group settings of a consumer, by Kafka's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRebalanceConfig {
    /// `group.instance.id`: a static member when set.
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`, sent as the rebalance timeout.
    pub rebalance_timeout: Duration,
    /// `partition.assignment.strategy`, in order of preference.
    pub assignors: Vec<Assignor>,
    /// `enable.auto.commit`.
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`.
    pub auto_commit_interval: Duration,
}

impl Default for GroupRebalanceConfig {
    /// Kafka's consumer defaults, with both eager assignors offered as
    /// librdkafka offers them.
    fn default() -> Self {
        GroupRebalanceConfig {
            group_instance_id: None,
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(3_000),
            rebalance_timeout: Duration::from_millis(300_000),
            assignors: vec![Assignor::Range, Assignor::RoundRobin],
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_millis(5_000),
        }
    }
}

impl GroupRebalanceConfig {
    /// Kafka's own checks of these settings.
    pub fn validate(&self) -> Result<()> {
        if self.heartbeat_interval >= self.session_timeout {
            bail!("Heartbeat must be set lower than the session timeout");
        }
        if self.assignors.is_empty() {
            bail!("partition.assignment.strategy names no assignor");
        }
        if self.group_instance_id.as_deref() == Some("") {
            bail!("group.instance.id may not be empty");
        }
        Ok(())
    }
}

/// What a member must do after the coordinator answered `code`, as Kafka's
/// AbstractCoordinator decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reaction {
    /// The group is rebalancing: rejoin, keeping member id and generation.
    Rejoin,
    /// This generation is over for the member: rejoin with the member id.
    ResetGeneration,
    /// The coordinator does not know the member: rejoin as a new member.
    ResetMember,
    /// Ask which broker coordinates the group, then retry.
    FindCoordinator,
    /// A passing condition: retry after a backoff.
    Retry,
    /// Nothing to do but report it.
    Fatal,
}

fn reaction(code: i16) -> Reaction {
    match code {
        error::REBALANCE_IN_PROGRESS => Reaction::Rejoin,
        error::ILLEGAL_GENERATION => Reaction::ResetGeneration,
        error::UNKNOWN_MEMBER_ID => Reaction::ResetMember,
        error::COORDINATOR_NOT_AVAILABLE | error::NOT_COORDINATOR => Reaction::FindCoordinator,
        error::COORDINATOR_LOAD_IN_PROGRESS | error::REQUEST_TIMED_OUT => Reaction::Retry,
        _ => Reaction::Fatal,
    }
}

/// The partitions a (re)join gave the member, with the group's committed
/// offset for those that have one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assigned {
    pub partitions: Vec<TopicPartition>,
    pub committed: BTreeMap<TopicPartition, i64>,
}

/// Kafka's `Generation`: the member id survives a lost generation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Generation {
    generation_id: i32,
    member_id: String,
    protocol_name: Option<String>,
}

impl Generation {
    const NO_GENERATION_ID: i32 = -1;

    fn none() -> Generation {
        Generation {
            generation_id: Self::NO_GENERATION_ID,
            member_id: String::new(),
            protocol_name: None,
        }
    }
}

/// The result of one JoinGroup + SyncGroup round.
enum Round {
    Done(Vec<TopicPartition>),
    /// Try again at once (a member id was handed out).
    Again,
    /// Try again after [`RETRY_BACKOFF`].
    Backoff,
}

pub struct ConsumerCoordinator {
    bootstrap: String,
    client_id: String,
    group_id: String,
    config: GroupRebalanceConfig,
    /// The subscribed topics.
    topics: Vec<String>,
    connection: Option<Client>,
    generation: Generation,
    /// Joined and synced: the partitions in `assigned` are this member's in
    /// `generation`, and its commits count.
    stable: bool,
    /// Why the member must rejoin, when it must.
    rejoin_reason: Option<String>,
    assigned: Vec<TopicPartition>,
    /// The group's offset for each assigned partition, as last read or
    /// committed: a commit sends only positions that differ.
    committed: BTreeMap<TopicPartition, i64>,
    next_heartbeat: Instant,
    next_auto_commit: Instant,
}

impl ConsumerCoordinator {
    /// A member of `group_id` subscribed to `topics`; nothing is sent
    /// until the first [`poll`](Self::poll).
    pub fn new(
        bootstrap: &str,
        client_id: &str,
        group_id: &str,
        config: GroupRebalanceConfig,
        topics: Vec<String>,
    ) -> ConsumerCoordinator {
        let now = Instant::now();
        ConsumerCoordinator {
            bootstrap: bootstrap.to_owned(),
            client_id: client_id.to_owned(),
            group_id: group_id.to_owned(),
            config,
            topics,
            connection: None,
            generation: Generation::none(),
            stable: false,
            rejoin_reason: Some("the consumer subscribed".into()),
            assigned: Vec::new(),
            committed: BTreeMap::new(),
            next_heartbeat: now,
            next_auto_commit: now,
        }
    }

    /// How long the consumer may wait (in a fetch) before the next
    /// [`poll`](Self::poll) has something to do.
    pub fn time_to_next_duty(&self) -> Duration {
        if !self.stable || self.rejoin_reason.is_some() {
            return Duration::ZERO;
        }
        let mut next = self.next_heartbeat;
        if self.config.enable_auto_commit {
            next = next.min(self.next_auto_commit);
        }
        next.saturating_duration_since(Instant::now())
    }

    /// Heartbeats and auto-commits `positions` when due, and rejoins when
    /// the group asks for it. Returns the member's new partitions after a
    /// rebalance; they are empty when Ctrl-C interrupted the rejoin.
    pub fn poll(&mut self, positions: &BTreeMap<TopicPartition, i64>) -> Result<Option<Assigned>> {
        let now = Instant::now();
        if self.stable && self.rejoin_reason.is_none() && now >= self.next_heartbeat {
            self.heartbeat()?;
        }
        // Kafka's onJoinPrepare commits too: what was consumed, while the
        // partitions are still ours, before giving them up.
        let rejoin = self.rejoin_reason.is_some();
        if self.stable && self.config.enable_auto_commit && (rejoin || now >= self.next_auto_commit)
        {
            self.next_auto_commit = now + self.config.auto_commit_interval;
            self.commit(positions, false)?;
        }
        if self.stable && self.rejoin_reason.is_none() {
            return Ok(None);
        }
        self.stable = false;
        self.assigned.clear();
        self.committed.clear();
        let Some(partitions) = self.join_group()? else {
            return Ok(Some(Assigned::default()));
        };
        let committed = self.fetch_committed(&partitions)?;
        self.assigned.clone_from(&partitions);
        self.committed.clone_from(&committed);
        let now = Instant::now();
        self.next_heartbeat = now + self.config.heartbeat_interval;
        self.next_auto_commit = now + self.config.auto_commit_interval;
        Ok(Some(Assigned {
            partitions,
            committed,
        }))
    }

    /// Kafka's `close()`: commits `positions` (unless none are given or
    /// auto commit is off) and leaves the group, unless the member is
    /// static, which keeps its partitions until its session times out.
    pub fn close(&mut self, positions: Option<&BTreeMap<TopicPartition, i64>>) -> Result<()> {
        let committed = match positions {
            Some(positions) if self.stable && self.config.enable_auto_commit => {
                self.commit(positions, true)
            }
            _ => Ok(()),
        };
        let left =
            if self.config.group_instance_id.is_none() && !self.generation.member_id.is_empty() {
                self.leave_group()
            } else {
                Ok(())
            };
        self.stable = false;
        committed.and(left)
    }

    /// The connection to the coordinator, found when there is none.
    /// `Ok(None)` when the coordinator is not available yet.
    fn coordinator(&mut self) -> Result<Option<&mut Client>> {
        if self.connection.is_none() {
            match find_coordinator(&self.bootstrap, &self.group_id, &self.client_id) {
                Ok(mut client) => {
                    let wait = (self.config.rebalance_timeout + JOIN_GROUP_TIMEOUT_LAPSE)
                        .max(RESPONSE_WAIT_MIN);
                    client.set_read_timeout(wait)?;
                    self.connection = Some(client);
                }
                Err(e) => match CoordinatorError::code_of(&e).map(reaction) {
                    Some(Reaction::FindCoordinator | Reaction::Retry) => return Ok(None),
                    _ => return Err(e),
                },
            }
        }
        Ok(self.connection.as_mut())
    }

    fn fail(&self, action: &str, code: i16) -> anyhow::Error {
        CoordinatorError {
            action: action.to_owned(),
            group: self.group_id.clone(),
            code,
        }
        .into()
    }

    /// Applies what `code` (answered to `action`) asks of the member;
    /// an error for the codes that end the command.
    fn react(&mut self, action: &str, code: i16) -> Result<Reaction> {
        let reaction = reaction(code);
        let reason = || format!("{} from {action}", error_text(code));
        match reaction {
            Reaction::Rejoin => {
                self.rejoin_reason.get_or_insert_with(reason);
            }
            Reaction::ResetGeneration | Reaction::ResetMember => {
                self.generation.generation_id = Generation::NO_GENERATION_ID;
                self.generation.protocol_name = None;
                if reaction == Reaction::ResetMember {
                    self.generation.member_id.clear();
                }
                self.stable = false;
                self.rejoin_reason = Some(reason());
            }
            Reaction::FindCoordinator => self.connection = None,
            Reaction::Retry => {}
            Reaction::Fatal => return Err(self.fail(action, code)),
        }
        Ok(reaction)
    }

    /// JoinGroup and SyncGroup rounds until the member has a generation
    /// and its partitions; `None` when Ctrl-C interrupted.
    fn join_group(&mut self) -> Result<Option<Vec<TopicPartition>>> {
        for _ in 0..JOIN_ROUNDS_MAX {
            if interrupt::received().is_some() {
                return Ok(None);
            }
            match self.join_round()? {
                Round::Done(partitions) => {
                    self.stable = true;
                    self.rejoin_reason = None;
                    return Ok(Some(partitions));
                }
                Round::Again => {}
                Round::Backoff => thread::sleep(RETRY_BACKOFF),
            }
        }
        bail!(
            "could not join group '{}' in {JOIN_ROUNDS_MAX} attempts",
            self.group_id
        )
    }

    fn subscription(&self) -> Bytes {
        Subscription {
            topics: self.topics.clone(),
            user_data: None,
            // Eager assignors give everything up before rejoining.
            owned_partitions: Vec::new(),
            generation_id: self.generation.generation_id,
            rack_id: None,
        }
        .encode_prefixed(consumer_protocol::HIGHEST_VERSION)
    }

    fn join_round(&mut self) -> Result<Round> {
        let metadata = self.subscription();
        let request = JoinGroupRequest {
            group_id: self.group_id.clone(),
            session_timeout_ms: millis(self.config.session_timeout),
            rebalance_timeout_ms: millis(self.config.rebalance_timeout),
            member_id: self.generation.member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
            protocol_type: consumer_protocol::PROTOCOL_TYPE.into(),
            protocols: self
                .config
                .assignors
                .iter()
                .map(|a| JoinGroupRequestProtocol {
                    name: a.name().into(),
                    metadata: metadata.clone(),
                })
                .collect(),
            reason: self.rejoin_reason.clone(),
        };
        let Some(client) = self.coordinator()? else {
            return Ok(Round::Backoff);
        };
        let response: JoinGroupResponse = client
            .call(11, 9, 6, &request)
            .with_context(|| format!("join group '{}'", self.group_id))?;
        match response.error_code {
            error::NONE => {}
            error::MEMBER_ID_REQUIRED => {
                self.generation.member_id = response.member_id;
                return Ok(Round::Again);
            }
            code => {
                self.react("join", code)?;
                return Ok(Round::Backoff);
            }
        }
        if response
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != consumer_protocol::PROTOCOL_TYPE)
        {
            return Err(self.fail("join", error::INCONSISTENT_GROUP_PROTOCOL));
        }
        self.generation = Generation {
            generation_id: response.generation_id,
            member_id: response.member_id.clone(),
            protocol_name: response.protocol_name.clone(),
        };
        // A static leader rejoining unchanged is told to skip the
        // assignment (KIP-814): the group keeps the last one.
        let assignments = if response.leader == response.member_id && !response.skip_assignment {
            self.assign(&response)?
        } else {
            Vec::new()
        };
        self.sync_group(assignments)
    }

    /// The leader's part: every member's assignment, computed with the
    /// protocol the group chose.
    fn assign(&self, response: &JoinGroupResponse) -> Result<Vec<SyncGroupRequestAssignment>> {
        let protocol = response.protocol_name.as_deref().unwrap_or_default();
        let Some(assignor) = Assignor::by_name(protocol) else {
            bail!(
                "group '{}' chose the assignor '{protocol}', which tarn consume does not have",
                self.group_id
            );
        };
        let mut members = Vec::with_capacity(response.members.len());
        for member in &response.members {
            let subscription = Subscription::decode_prefixed(&member.metadata)
                .with_context(|| format!("read the subscription of member {}", member.member_id))?;
            members.push(MemberSubscription {
                member_id: member.member_id.clone(),
                group_instance_id: member.group_instance_id.clone(),
                topics: subscription.topics.into_iter().collect(),
            });
        }
        let topics: BTreeSet<String> = members.iter().flat_map(|m| m.topics.clone()).collect();
        let partition_counts = self.partition_counts(topics)?;
        let assignment = assignor.assign(&members, &partition_counts);
        Ok(assignment
            .into_iter()
            .map(|(member_id, topics)| SyncGroupRequestAssignment {
                member_id,
                assignment: Assignment {
                    assigned_partitions: topics
                        .into_iter()
                        .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                        .collect(),
                    user_data: None,
                }
                .encode_prefixed(consumer_protocol::HIGHEST_VERSION),
            })
            .collect())
    }

    /// The partition count of each of `topics` the cluster has; a topic it
    /// does not have is left out, and gets assigned to nobody.
    fn partition_counts(&self, topics: BTreeSet<String>) -> Result<BTreeMap<String, i32>> {
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        let response = metadata(&self.bootstrap, Some(topics.into_iter().collect()), false)?;
        Ok(response
            .topics
            .into_iter()
            .filter(|t| t.error_code == error::NONE)
            .filter_map(|t| Some((t.name?, t.partitions.len() as i32)))
            .collect())
    }

    fn sync_group(&mut self, assignments: Vec<SyncGroupRequestAssignment>) -> Result<Round> {
        let request = SyncGroupRequest {
            group_id: self.group_id.clone(),
            generation_id: self.generation.generation_id,
            member_id: self.generation.member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
            protocol_type: Some(consumer_protocol::PROTOCOL_TYPE.into()),
            protocol_name: self.generation.protocol_name.clone(),
            assignments,
        };
        let Some(client) = self.coordinator()? else {
            return Ok(Round::Backoff);
        };
        let response: SyncGroupResponse = client
            .call(14, 5, 4, &request)
            .with_context(|| format!("sync group '{}'", self.group_id))?;
        if response.error_code != error::NONE {
            self.react("sync", response.error_code)?;
            return Ok(Round::Backoff);
        }
        let consistent = response
            .protocol_type
            .as_deref()
            .is_none_or(|t| t == consumer_protocol::PROTOCOL_TYPE)
            && (response.protocol_name.is_none()
                || response.protocol_name == self.generation.protocol_name);
        if !consistent {
            return Err(self.fail("sync", error::INCONSISTENT_GROUP_PROTOCOL));
        }
        let assignment = if response.assignment.is_empty() {
            Assignment::default()
        } else {
            Assignment::decode_prefixed(&response.assignment)
                .context("read the assignment from SyncGroup")?
        };
        let mut partitions: Vec<TopicPartition> = assignment
            .assigned_partitions
            .into_iter()
            .filter(|tps| self.topics.contains(&tps.topic))
            .flat_map(|tps| {
                tps.partitions
                    .into_iter()
                    .map(move |p| (tps.topic.clone(), p))
            })
            .collect();
        partitions.sort();
        partitions.dedup();
        Ok(Round::Done(partitions))
    }

    /// The group's committed offsets for `partitions`.
    fn fetch_committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let group = self.group_id.clone();
        for _ in 0..COORDINATOR_RETRIES_MAX {
            if let Some(client) = self.coordinator()? {
                match committed_offsets(client, &group, Some(partitions)) {
                    Ok(offsets) => return Ok(offsets),
                    Err(e) => match CoordinatorError::code_of(&e).map(reaction) {
                        Some(Reaction::FindCoordinator) => self.connection = None,
                        Some(Reaction::Retry) => {}
                        _ => return Err(e),
                    },
                }
            }
            thread::sleep(RETRY_BACKOFF);
        }
        bail!("the coordinator of group '{group}' did not answer OffsetFetch in time")
    }

    fn heartbeat(&mut self) -> Result<()> {
        self.next_heartbeat = Instant::now() + self.config.heartbeat_interval;
        let request = HeartbeatRequest {
            group_id: self.group_id.clone(),
            generation_id: self.generation.generation_id,
            member_id: self.generation.member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
        };
        let Some(client) = self.coordinator()? else {
            self.next_heartbeat = Instant::now() + RETRY_BACKOFF;
            return Ok(());
        };
        let response: HeartbeatResponse = client
            .call(12, 4, 4, &request)
            .with_context(|| format!("heartbeat to group '{}'", self.group_id))?;
        if response.error_code != error::NONE
            && self.react("heartbeat", response.error_code)? != Reaction::Rejoin
        {
            self.next_heartbeat = Instant::now() + RETRY_BACKOFF;
        }
        Ok(())
    }

    /// Commits the positions of assigned partitions that moved since the
    /// last commit (a negative position is not known yet). A refusal
    /// because the member lost its partitions is a warning; retriable
    /// errors are retried now when `closing`, else at the next auto commit.
    fn commit(&mut self, positions: &BTreeMap<TopicPartition, i64>, closing: bool) -> Result<()> {
        let offsets: BTreeMap<TopicPartition, i64> = positions
            .iter()
            .filter(|(tp, offset)| {
                **offset >= 0
                    && self.assigned.contains(tp)
                    && self.committed.get(*tp) != Some(*offset)
            })
            .map(|(tp, offset)| (tp.clone(), *offset))
            .collect();
        if offsets.is_empty() {
            return Ok(());
        }
        let attempts = if closing { COORDINATOR_RETRIES_MAX } else { 1 };
        for attempt in 0..attempts {
            if attempt > 0 {
                thread::sleep(RETRY_BACKOFF);
            }
            if !self.stable {
                break;
            }
            let (generation, instance) = (
                self.generation.clone(),
                self.config.group_instance_id.clone(),
            );
            let committer = Committer {
                generation_id: generation.generation_id,
                member_id: &generation.member_id,
                group_instance_id: instance.as_deref(),
            };
            let group = self.group_id.clone();
            let Some(client) = self.coordinator()? else {
                continue;
            };
            let refused = commit_offsets(client, &group, committer, &offsets)?;
            for (tp, offset) in &offsets {
                if !refused.contains_key(tp) {
                    self.committed.insert(tp.clone(), *offset);
                }
            }
            // One code speaks for the request: they all share the cause.
            let Some(&code) = refused.values().next() else {
                return Ok(());
            };
            match self.react("commit offsets", code)? {
                Reaction::FindCoordinator | Reaction::Retry => continue,
                Reaction::Rejoin | Reaction::ResetGeneration | Reaction::ResetMember => {
                    eprintln!(
                        "WARN: offset commit of group '{}' failed: {}; the partitions are \
                         being reassigned, and records after the last commit may be \
                         delivered again",
                        self.group_id,
                        error_text(code)
                    );
                    return Ok(());
                }
                Reaction::Fatal => unreachable!("react returns an error for fatal codes"),
            }
        }
        if closing && self.stable {
            bail!(
                "could not commit the offsets of group '{}': the coordinator was not available",
                self.group_id
            );
        }
        Ok(())
    }

    fn leave_group(&mut self) -> Result<()> {
        let member_id = std::mem::take(&mut self.generation.member_id);
        self.generation = Generation::none();
        let request = LeaveGroupRequest {
            group_id: self.group_id.clone(),
            member_id: String::new(),
            members: vec![MemberIdentity {
                member_id: member_id.clone(),
                group_instance_id: None,
                reason: Some(LEAVE_REASON.into()),
            }],
        };
        let Some(client) = self.coordinator()? else {
            // Without a coordinator the member leaves by its session
            // timing out, as in Kafka.
            return Ok(());
        };
        let response: LeaveGroupResponse = client
            .call(13, 5, 4, &request)
            .with_context(|| format!("leave group '{}'", self.group_id))?;
        let code = match response.error_code {
            error::NONE => response
                .members
                .iter()
                .map(|m| m.error_code)
                .find(|c| *c != error::NONE)
                .unwrap_or(error::NONE),
            code => code,
        };
        match code {
            error::NONE => Ok(()),
            // Already out of the group (its session expired): nothing to leave.
            error::UNKNOWN_MEMBER_ID => {
                eprintln!(
                    "WARN: member {member_id} had already left group '{}'",
                    self.group_id
                );
                Ok(())
            }
            code => Err(self.fail("leave", code)),
        }
    }
}

/// `duration` in whole milliseconds, as a protocol i32.
fn millis(duration: Duration) -> i32 {
    i32::try_from(duration.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_get_kafkas_reactions() {
        assert_eq!(reaction(error::REBALANCE_IN_PROGRESS), Reaction::Rejoin);
        assert_eq!(
            reaction(error::ILLEGAL_GENERATION),
            Reaction::ResetGeneration
        );
        assert_eq!(reaction(error::UNKNOWN_MEMBER_ID), Reaction::ResetMember);
        assert_eq!(reaction(error::NOT_COORDINATOR), Reaction::FindCoordinator);
        assert_eq!(
            reaction(error::COORDINATOR_NOT_AVAILABLE),
            Reaction::FindCoordinator
        );
        assert_eq!(
            reaction(error::COORDINATOR_LOAD_IN_PROGRESS),
            Reaction::Retry
        );
        for fatal in [
            error::FENCED_INSTANCE_ID,
            error::INCONSISTENT_GROUP_PROTOCOL,
            error::INVALID_SESSION_TIMEOUT,
            error::GROUP_MAX_SIZE_REACHED,
            error::INVALID_GROUP_ID,
        ] {
            assert_eq!(reaction(fatal), Reaction::Fatal, "{fatal}");
        }
    }

    fn member() -> ConsumerCoordinator {
        let mut m = ConsumerCoordinator::new(
            "127.0.0.1:1",
            "c",
            "g",
            GroupRebalanceConfig::default(),
            vec!["t".into()],
        );
        m.generation = Generation {
            generation_id: 4,
            member_id: "m-1".into(),
            protocol_name: Some("range".into()),
        };
        m.stable = true;
        m.rejoin_reason = None;
        m
    }

    #[test]
    fn a_lost_generation_keeps_the_member_id_and_an_unknown_member_drops_it() {
        let mut m = member();
        assert_eq!(
            m.react("heartbeat", error::REBALANCE_IN_PROGRESS).unwrap(),
            Reaction::Rejoin
        );
        // Still a member of generation 4: it may commit before rejoining.
        assert!(m.stable && m.generation.generation_id == 4);
        assert!(m
            .rejoin_reason
            .as_deref()
            .unwrap()
            .contains("REBALANCE_IN_PROGRESS"));
        assert_eq!(m.time_to_next_duty(), Duration::ZERO);

        let mut m = member();
        m.react("heartbeat", error::ILLEGAL_GENERATION).unwrap();
        assert!(!m.stable);
        assert_eq!(m.generation.generation_id, -1);
        assert_eq!(m.generation.member_id, "m-1");

        let mut m = member();
        m.react("commit offsets", error::UNKNOWN_MEMBER_ID).unwrap();
        assert!(!m.stable && m.generation.member_id.is_empty());

        let mut m = member();
        let e = m.react("heartbeat", error::FENCED_INSTANCE_ID).unwrap_err();
        assert!(e.to_string().contains("FENCED_INSTANCE_ID (82)"), "{e}");
        assert_eq!(
            CoordinatorError::code_of(&e),
            Some(error::FENCED_INSTANCE_ID)
        );
    }

    #[test]
    fn duties_bound_the_fetch_wait() {
        let mut m = member();
        let now = Instant::now();
        m.next_heartbeat = now + Duration::from_secs(3);
        m.next_auto_commit = now + Duration::from_secs(1);
        assert!(m.time_to_next_duty() <= Duration::from_secs(1));
        m.config.enable_auto_commit = false;
        let wait = m.time_to_next_duty();
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(3));
        m.stable = false;
        assert_eq!(m.time_to_next_duty(), Duration::ZERO);
    }

    #[test]
    fn settings_are_checked_as_kafka_checks_them() {
        assert!(GroupRebalanceConfig::default().validate().is_ok());
        let config = GroupRebalanceConfig {
            heartbeat_interval: Duration::from_secs(45),
            ..Default::default()
        };
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "Heartbeat must be set lower than the session timeout"
        );
        let config = GroupRebalanceConfig {
            group_instance_id: Some(String::new()),
            ..Default::default()
        };
        assert!(config.validate().is_err());
    }

    #[test]
    fn the_subscription_names_the_topics() {
        let m = member();
        let read = Subscription::decode_prefixed(&m.subscription()).unwrap();
        assert_eq!(read.topics, ["t"]);
        assert_eq!(read.generation_id, 4);
        assert!(read.owned_partitions.is_empty());
    }
}
