//! One classic group's state: its members, the protocol they agreed on,
//! the generation, the leader, the committed offsets, and the deadlines
//! that drive it (session expiry, join and sync timeouts). Mirrors Kafka's
//! `GroupMetadata` and `MemberMetadata`; the transitions that use these
//! pieces live in `coordinator`.
//!
//! Invariants: a member is in `members` under its current id; a static
//! member's instance id maps to that id in `static_members`; the leader,
//! when set, is a member; a pending (KIP-394) member id is not a member;
//! only a Dead group has no valid transitions.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use tokio::sync::oneshot;

use tarn_protocol::consumer_protocol::{self, Subscription};
use tarn_protocol::error::{self, ErrorCode};

use tarn_replication::replica_manager::TopicPartition;

use super::records::{GroupMetadataValue, MemberMetadataValue, OffsetAndMetadata};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub const ALL: [GroupState; 5] = [
        GroupState::Empty,
        GroupState::PreparingRebalance,
        GroupState::CompletingRebalance,
        GroupState::Stable,
        GroupState::Dead,
    ];

    /// The name Kafka's tools print and ListGroups filters on.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }

    /// Kafka's `validPreviousStates`.
    fn may_follow(self, previous: GroupState) -> bool {
        use GroupState::*;
        match self {
            PreparingRebalance => matches!(previous, Stable | CompletingRebalance | Empty),
            CompletingRebalance => previous == PreparingRebalance,
            Stable => previous == CompletingRebalance,
            Dead => true,
            Empty => previous == PreparingRebalance,
        }
    }
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// The answer to one JoinGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: ErrorCode,
    pub member_id: String,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: String,
    pub skip_assignment: bool,
    pub members: Vec<JoinMember>,
}

impl JoinResult {
    pub fn error(member_id: impl Into<String>, error: ErrorCode) -> Self {
        JoinResult {
            error,
            member_id: member_id.into(),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader_id: String::new(),
            skip_assignment: false,
            members: Vec::new(),
        }
    }
}

/// The answer to one SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: ErrorCode,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(error: ErrorCode) -> Self {
        SyncResult {
            error,
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

pub type JoinResponder = oneshot::Sender<JoinResult>;
pub type SyncResponder = oneshot::Sender<SyncResult>;

/// Sends a result to a waiting request; the request may have given up
/// (its connection closed), which is not an error of ours.
pub fn respond<T>(responder: oneshot::Sender<T>, result: T) {
    if responder.send(result).is_err() {
        tracing::debug!("group request was no longer waiting for its response");
    }
}

#[derive(Debug)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    /// (protocol name, metadata) in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: Option<JoinResponder>,
    pub awaiting_sync: Option<SyncResponder>,
    /// A member that has not yet received its first JoinGroup response.
    pub is_new: bool,
    /// When the member is considered dead unless it shows signs of life.
    pub session_deadline_ms: Option<i64>,
}

impl Member {
    pub fn is_static(&self) -> bool {
        self.group_instance_id.is_some()
    }

    pub fn metadata(&self, protocol: &str) -> Option<&Bytes> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m)
    }

    /// Same protocols, same order, same metadata.
    pub fn matches(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }

    /// The member's first protocol among `candidates`.
    fn vote<'a>(&'a self, candidates: &BTreeSet<&str>) -> Option<&'a str> {
        self.protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| candidates.contains(name))
    }
}

/// The join phase's timer: Kafka's InitialDelayedJoin (for a group that
/// was empty: wait `group.initial.rebalance.delay.ms`, again while new
/// members keep arriving, up to the rebalance timeout) or DelayedJoin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinTimer {
    Initial {
        deadline_ms: i64,
        configured_delay_ms: i64,
        delay_ms: i64,
        remaining_ms: i64,
    },
    Regular {
        deadline_ms: i64,
    },
}

impl JoinTimer {
    pub fn deadline_ms(&self) -> i64 {
        match *self {
            JoinTimer::Initial { deadline_ms, .. } | JoinTimer::Regular { deadline_ms } => {
                deadline_ms
            }
        }
    }
}

#[derive(Debug)]
pub struct Group {
    pub group_id: String,
    state: GroupState,
    pub state_timestamp_ms: Option<i64>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub generation_id: i32,
    pub leader_id: Option<String>,
    pub members: BTreeMap<String, Member>,
    static_members: HashMap<String, String>,
    /// KIP-394 member ids handed out but not yet used, with their expiry.
    pub pending_members: BTreeMap<String, i64>,
    /// Members of this generation that have not sent SyncGroup yet.
    pub pending_sync: BTreeSet<String>,
    /// (deadline, generation) of the pending-sync check.
    pub sync_deadline: Option<(i64, i32)>,
    pub join_timer: Option<JoinTimer>,
    /// A member joined during the initial delay, so it is extended.
    pub new_member_added: bool,
    pub offsets: BTreeMap<TopicPartition, OffsetAndMetadata>,
    /// For "consumer" groups: the union of the members' subscriptions.
    pub subscribed_topics: Option<BTreeSet<String>>,
}

impl Group {
    pub fn new(group_id: &str, now_ms: i64) -> Self {
        Group {
            group_id: group_id.to_owned(),
            state: GroupState::Empty,
            state_timestamp_ms: Some(now_ms),
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: BTreeMap::new(),
            pending_sync: BTreeSet::new(),
            sync_deadline: None,
            join_timer: None,
            new_member_added: false,
            offsets: BTreeMap::new(),
            subscribed_topics: None,
        }
    }

    /// Rebuilds a group from its last metadata record: Stable with the
    /// recorded members, or Empty without any.
    pub fn from_record(group_id: &str, value: GroupMetadataValue, now_ms: i64) -> Self {
        let mut group = Group::new(group_id, now_ms);
        let protocol_type = value.protocol_type;
        group.protocol_type = (!protocol_type.is_empty()).then(|| protocol_type.clone());
        group.generation_id = value.generation;
        group.protocol_name = value.protocol.clone();
        group.state_timestamp_ms =
            (value.current_state_timestamp != -1).then_some(value.current_state_timestamp);
        for m in value.members {
            let protocols = match &value.protocol {
                Some(name) => vec![(name.clone(), m.subscription)],
                None => Vec::new(),
            };
            if let Some(instance) = &m.group_instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            group.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    rebalance_timeout_ms: m.rebalance_timeout,
                    session_timeout_ms: m.session_timeout,
                    protocol_type: protocol_type.clone(),
                    protocols,
                    assignment: m.assignment,
                    awaiting_join: None,
                    awaiting_sync: None,
                    is_new: false,
                    session_deadline_ms: None,
                },
            );
        }
        group.leader_id = value
            .leader
            .filter(|leader| group.members.contains_key(leader))
            .or_else(|| group.members.keys().next().cloned());
        if !group.members.is_empty() {
            group.state = GroupState::Stable;
        }
        group.subscribed_topics = group.compute_subscribed_topics();
        group
    }

    /// The metadata record for the current generation with `assignment`
    /// (member id → bytes; members missing from it get none).
    pub fn to_record(&self, assignment: &BTreeMap<String, Bytes>) -> GroupMetadataValue {
        let protocol = self.protocol_name.clone();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: protocol.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp: self.state_timestamp_ms.unwrap_or(-1),
            members: self
                .members
                .values()
                .map(|m| MemberMetadataValue {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout: m.rebalance_timeout_ms,
                    session_timeout: m.session_timeout_ms,
                    subscription: protocol
                        .as_deref()
                        .and_then(|p| m.metadata(p))
                        .cloned()
                        .unwrap_or_default(),
                    assignment: assignment.get(&m.member_id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn transition_to(&mut self, state: GroupState, now_ms: i64) {
        assert!(
            state.may_follow(self.state),
            "group {}: invalid transition from {} to {}",
            self.group_id,
            self.state.name(),
            state.name()
        );
        tracing::debug!(group = %self.group_id, from = self.state.name(), to = state.name(), "group state change");
        self.state = state;
        self.state_timestamp_ms = Some(now_ms);
    }

    pub fn can_rebalance(&self) -> bool {
        GroupState::PreparingRebalance.may_follow(self.state)
    }

    pub fn has(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    pub fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    pub fn is_pending(&self, member_id: &str) -> bool {
        self.pending_members.contains_key(member_id)
    }

    pub fn static_member_id(&self, instance_id: &str) -> Option<&str> {
        self.static_members.get(instance_id).map(String::as_str)
    }

    pub fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    /// Kafka's `hasAllMembersJoined`.
    pub fn has_all_members_joined(&self) -> bool {
        self.members.len() == self.num_awaiting_join() && self.pending_members.is_empty()
    }

    /// The largest rebalance timeout of any member (0 without members).
    pub fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    /// How many members support each protocol.
    fn protocol_support(&self) -> HashMap<&str, usize> {
        let mut counts = HashMap::new();
        for member in self.members.values() {
            for (name, _) in &member.protocols {
                *counts.entry(name.as_str()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Kafka's `supportsProtocols`: could a member with these protocols
    /// join? An empty group takes any non-empty type and protocol list.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.is(GroupState::Empty) {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        let support = self.protocol_support();
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                support.get(name.as_str()).copied().unwrap_or(0) == self.members.len()
            })
    }

    /// Kafka's rule: among the protocols every member supports, each
    /// member votes for its most preferred one and the most votes win (ties
    /// go to the smallest name, so the choice is deterministic).
    pub fn select_protocol(&self) -> Option<String> {
        let support = self.protocol_support();
        let candidates: BTreeSet<&str> = support
            .iter()
            .filter(|(_, n)| **n == self.members.len())
            .map(|(name, _)| *name)
            .collect();
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some(choice) = member.vote(&candidates) {
                *votes.entry(choice).or_insert(0) += 1;
            }
        }
        let most = votes.values().copied().max()?;
        votes
            .into_iter()
            .find(|(_, n)| *n == most)
            .map(|(name, _)| name.to_owned())
    }

    /// Adds a member; the first member fixes the protocol type and the
    /// first member without a leader becomes leader.
    pub fn add(&mut self, member: Member) {
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        if self.members.is_empty() {
            self.protocol_type = Some(member.protocol_type.clone());
        }
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        self.pending_members.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member (or a pending member id), choosing another leader
    /// if it led. Any request it had waiting gets no answer from here.
    pub fn remove(&mut self, member_id: &str) -> Option<Member> {
        let removed = self.members.remove(member_id);
        if let Some(member) = &removed {
            if let Some(instance) = &member.group_instance_id {
                self.static_members.remove(instance);
            }
        }
        if self.is_leader(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        self.pending_members.remove(member_id);
        self.pending_sync.remove(member_id);
        removed
    }

    /// KIP-345: a static member rejoining with a new member id takes over
    /// the old one's place; requests still waiting under the old id are
    /// fenced.
    pub fn replace_static_member(&mut self, instance_id: &str, old_id: &str, new_id: &str) {
        let Some(mut member) = self.members.remove(old_id) else {
            return;
        };
        if let Some(tx) = member.awaiting_join.take() {
            respond(tx, JoinResult::error(old_id, error::FENCED_INSTANCE_ID));
        }
        if let Some(tx) = member.awaiting_sync.take() {
            respond(tx, SyncResult::error(error::FENCED_INSTANCE_ID));
        }
        member.member_id = new_id.to_owned();
        self.members.insert(new_id.to_owned(), member);
        if self.is_leader(old_id) {
            self.leader_id = Some(new_id.to_owned());
        }
        self.static_members
            .insert(instance_id.to_owned(), new_id.to_owned());
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.to_owned());
        }
    }

    /// If the leader has not rejoined, hands leadership to a member that
    /// has. False when no member has rejoined.
    pub fn maybe_elect_new_joined_leader(&mut self) -> bool {
        let Some(leader) = self.leader_id.clone() else {
            return false;
        };
        if self
            .members
            .get(&leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self
            .members
            .values()
            .find(|m| m.awaiting_join.is_some())
            .map(|m| m.member_id.clone())
        {
            Some(new_leader) => {
                tracing::info!(group = %self.group_id, old = %leader, new = %new_leader, "group leader failed to rejoin before the rebalance timeout; elected a new leader");
                self.leader_id = Some(new_leader);
                true
            }
            None => false,
        }
    }

    /// Starts the next generation: CompletingRebalance with a selected
    /// protocol, or Empty when nobody is left.
    pub fn init_next_generation(&mut self, now_ms: i64) {
        self.generation_id += 1;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition_to(GroupState::Empty, now_ms);
        } else {
            self.protocol_name = self.select_protocol();
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition_to(GroupState::CompletingRebalance, now_ms);
        }
        self.pending_sync.clear();
        self.sync_deadline = None;
    }

    /// Every member with its metadata for the selected protocol, for the
    /// leader's JoinGroup response.
    pub fn current_member_metadata(&self) -> Vec<JoinMember> {
        let protocol = self.protocol_name.as_deref().unwrap_or("");
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.member_id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata(protocol).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// The topics the members subscribe to, when this is a consumer group
    /// whose subscriptions can be read.
    pub fn compute_subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some(consumer_protocol::PROTOCOL_TYPE) {
            return None;
        }
        if self.members.is_empty() {
            return Some(BTreeSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = BTreeSet::new();
        for member in self.members.values() {
            let metadata = member.metadata(protocol)?;
            match Subscription::decode_topics(metadata) {
                Ok(subscribed) => topics.extend(subscribed),
                Err(e) => {
                    tracing::warn!(group = %self.group_id, member = %member.member_id, error = %e, "cannot read the consumer subscription; the coordinator does not know the subscribed topics");
                    return None;
                }
            }
        }
        Some(topics)
    }

    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        self.subscribed_topics
            .as_ref()
            .is_none_or(|topics| topics.contains(topic))
    }

    /// The earliest deadline of any timer this group has.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        if self.is(GroupState::Dead) {
            return None;
        }
        let members = self.members.values().filter_map(|m| m.session_deadline_ms);
        let pending = self.pending_members.values().copied();
        let join = self.join_timer.map(|t| t.deadline_ms());
        let sync = self.sync_deadline.map(|(d, _)| d);
        members.chain(pending).chain(join).chain(sync).min()
    }

    /// Offsets that retention has expired, following Kafka's rules: for an
    /// empty group, counted from when it became empty; for a stable
    /// consumer group, only topics nobody subscribes to, counted from the
    /// commit; for a group that only stores offsets, from the commit. An
    /// explicit expire timestamp (OffsetCommit v2-4) wins.
    pub fn expired_offsets(&self, now_ms: i64, retention_ms: i64) -> Vec<TopicPartition> {
        let expired = |base: &dyn Fn(&OffsetAndMetadata) -> i64, skip_topics: &BTreeSet<String>| {
            self.offsets
                .iter()
                .filter(|((topic, _), o)| {
                    !skip_topics.contains(topic)
                        && match o.expire_timestamp_ms {
                            Some(expire) => now_ms >= expire,
                            None => now_ms.saturating_sub(base(o)) >= retention_ms,
                        }
                })
                .map(|(tp, _)| tp.clone())
                .collect()
        };
        let none = BTreeSet::new();
        match (&self.protocol_type, self.state) {
            (Some(_), GroupState::Empty) => {
                let since = self.state_timestamp_ms;
                expired(&|o| since.unwrap_or(o.commit_timestamp_ms), &none)
            }
            (Some(ptype), GroupState::Stable)
                if ptype == consumer_protocol::PROTOCOL_TYPE
                    && self.subscribed_topics.is_some() =>
            {
                let subscribed = self.subscribed_topics.clone().unwrap_or_default();
                expired(&|o| o.commit_timestamp_ms, &subscribed)
            }
            (None, _) => expired(&|o| o.commit_timestamp_ms, &none),
            _ => Vec::new(),
        }
    }
}
