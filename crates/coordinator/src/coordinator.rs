//! The GroupCoordinator: Kafka's classic group protocol as a state
//! machine over `Group`s, with no socket code. Each API call locks one
//! group, applies Kafka's rules (GroupCoordinator.scala), persists what
//! must survive a restart through the `GroupStore`, and answers either at
//! once or later: JoinGroup and SyncGroup return a oneshot receiver that
//! the state machine completes when the rebalance gets there.
//!
//! Time comes from a `Clock`. Every timeout — session expiry, the
//! initial rebalance delay, the rebalance (join) timeout, the pending-sync
//! timeout, KIP-394 pending member expiry — is a deadline stored in the
//! group; `poll_due(now)` fires those that are due, and a background task
//! calls it when the earliest deadline comes. Tests call it with a manual
//! clock and never sleep.
//!
//! Writes are applied in memory at once; the answers that acknowledge them
//! wait first for [`GroupCoordinator::durability_barrier`] (the handlers
//! do), so nothing is acknowledged before it is as durable as configured.
//!
//! Lock order: a group's mutex, then the timer queue or the group map.
//! Nothing holds the group map while taking a group's mutex.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use rand::RngCore;
use tokio::sync::{oneshot, Notify};

use tarn_protocol::error::{self, ErrorCode};

use tarn_config::BrokerConfig;
use tarn_replication::durability::AppendCompletion;
use tarn_replication::replica_manager::TopicPartition;

use super::clock::Clock;
use super::metadata::{respond, Group, GroupState, JoinResult, JoinTimer, Member, SyncResult};
use super::records::{CoordinatorRecord, OffsetAndMetadata};
use super::store::{partition_for, GroupStore};

/// How long a new member may wait in JoinGroup before it is dropped
/// (Kafka's `NewMemberJoinTimeoutMs`).
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 5 * 60 * 1000;
/// At most this many KIP-394 member ids may wait for their second
/// JoinGroup in one group; more are refused with GROUP_MAX_SIZE_REACHED.
pub const PENDING_MEMBERS_MAX: usize = 10_000;
/// A bound on timer rounds in one poll; each round consumes a deadline.
const POLL_ROUNDS_MAX: usize = 1_000;

/// The coordinator's settings, from Kafka's broker keys.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    pub max_size: usize,
    pub initial_rebalance_delay_ms: i64,
    pub offset_metadata_max_bytes: usize,
    pub offsets_retention_ms: i64,
    pub offsets_retention_check_interval_ms: i64,
}

impl GroupConfig {
    pub fn from_broker(config: &BrokerConfig) -> Self {
        let int = |key: &str| i32::try_from(config.get_i64(key)).unwrap_or(i32::MAX);
        GroupConfig {
            min_session_timeout_ms: int("group.min.session.timeout.ms"),
            max_session_timeout_ms: int("group.max.session.timeout.ms"),
            max_size: usize::try_from(config.get_i64("group.max.size")).unwrap_or(usize::MAX),
            initial_rebalance_delay_ms: config.get_i64("group.initial.rebalance.delay.ms"),
            offset_metadata_max_bytes: usize::try_from(config.get_i64("offset.metadata.max.bytes"))
                .unwrap_or(usize::MAX),
            offsets_retention_ms: config
                .get_i64("offsets.retention.minutes")
                .saturating_mul(60_000),
            offsets_retention_check_interval_ms: config
                .get_i64("offsets.retention.check.interval.ms"),
        }
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig::from_broker(&BrokerConfig::default())
    }
}

/// A JoinGroup as the coordinator needs it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// KIP-394 (JoinGroup v4+): a new member first gets an id to rejoin with.
    pub require_known_member_id: bool,
    /// JoinGroup v9+: a rejoining static leader may skip the assignment.
    pub supports_skip_assignment: bool,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone)]
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeaveResult {
    pub error: ErrorCode,
    /// (member id, group instance id, error) per leaving member.
    pub members: Vec<(String, Option<String>, ErrorCode)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MemberSummary {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberSummary>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GroupOverview {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
}

/// Deadlines by group, earliest first.
#[derive(Default)]
struct Timers {
    by_deadline: BTreeSet<(i64, String)>,
    by_group: HashMap<String, i64>,
}

pub struct GroupCoordinator<S> {
    config: GroupConfig,
    clock: Arc<dyn Clock>,
    store: S,
    groups: RwLock<HashMap<String, Arc<Mutex<Group>>>>,
    timers: Mutex<Timers>,
    /// Woken when a deadline earlier than the first one is added.
    timers_changed: Notify,
    active: AtomicBool,
}

/// Kafka's member ids: the client id (or the group instance id) and a
/// random UUID.
fn generate_member_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{prefix}-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl<S: GroupStore> GroupCoordinator<S> {
    pub fn new(config: GroupConfig, clock: Arc<dyn Clock>, store: S) -> Self {
        GroupCoordinator {
            config,
            clock,
            store,
            groups: RwLock::new(HashMap::new()),
            timers: Mutex::new(Timers::default()),
            timers_changed: Notify::new(),
            active: AtomicBool::new(true),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Stops answering group requests (COORDINATOR_NOT_AVAILABLE).
    pub fn shutdown(&self) {
        self.active.store(false, Ordering::SeqCst);
    }

    /// The offsets-topic partition of `group_id`, if the topic exists.
    pub fn partition_of(&self, group_id: &str) -> Option<i32> {
        self.store
            .partition_count()
            .map(|n| partition_for(group_id, n))
    }

    // ------------------------------------------------------------------
    // Loading

    /// Installs the state read from the offsets topic at start-up: the
    /// last metadata record of each group and its live offsets. Loaded
    /// members get a fresh session deadline, so those that do not come
    /// back are expired and the group rebalances.
    pub fn load(&self, records: impl IntoIterator<Item = CoordinatorRecord>) -> usize {
        let now = self.now_ms();
        let mut metadata: HashMap<String, Option<super::records::GroupMetadataValue>> =
            HashMap::new();
        let mut offsets: HashMap<String, BTreeMap<TopicPartition, OffsetAndMetadata>> =
            HashMap::new();
        for record in records {
            match record {
                CoordinatorRecord::Offset {
                    group,
                    topic,
                    partition,
                    value,
                } => {
                    let group_offsets = offsets.entry(group).or_default();
                    match value {
                        Some(v) => group_offsets.insert((topic, partition), v),
                        None => group_offsets.remove(&(topic, partition)),
                    };
                }
                CoordinatorRecord::Group { group, value } => {
                    metadata.insert(group, value);
                }
            }
        }
        let mut ids: BTreeSet<String> = metadata
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        ids.extend(
            offsets
                .iter()
                .filter(|(_, o)| !o.is_empty())
                .map(|(k, _)| k.clone()),
        );
        let mut groups = self.groups.write();
        for id in &ids {
            let mut group = match metadata.remove(id).flatten() {
                Some(value) => Group::from_record(id, value, now),
                None => Group::new(id, now),
            };
            group.offsets = offsets.remove(id).unwrap_or_default();
            for member in group.members.values_mut() {
                member.session_deadline_ms = Some(now + i64::from(member.session_timeout_ms));
            }
            if group.members.len() > self.config.max_size {
                tracing::info!(group = %id, members = group.members.len(), "loaded group is over group.max.size; rebalancing");
                self.prepare_rebalance(&mut group, now);
            }
            tracing::info!(group = %id, state = group.state().name(), generation = group.generation_id, members = group.members.len(), offsets = group.offsets.len(), "loaded group");
            self.schedule(id, group.next_deadline_ms());
            groups.insert(id.clone(), Arc::new(Mutex::new(group)));
        }
        ids.len()
    }

    /// Drops the groups that offsets partition `partition` holds, when
    /// this broker stops leading it: their requests are answered
    /// NOT_COORDINATOR from then on (the new leader loads them), and
    /// members waiting in a join or sync are let go. Returns how many.
    pub fn unload_partition(&self, partition: i32) -> usize {
        let Some(count) = self.store.partition_count() else {
            return 0;
        };
        let mut groups = self.groups.write();
        let ids: Vec<String> = groups
            .keys()
            .filter(|id| partition_for(id, count) == partition)
            .cloned()
            .collect();
        for id in &ids {
            groups.remove(id);
        }
        ids.len()
    }

    // ------------------------------------------------------------------
    // Group lookup and common checks

    /// Kafka's `validateGroupStatus`.
    fn validate_group(&self, group_id: &str, allow_empty_id: bool) -> Result<(), ErrorCode> {
        if group_id.is_empty() && !allow_empty_id {
            return Err(error::INVALID_GROUP_ID);
        }
        if !self.active.load(Ordering::SeqCst) {
            return Err(error::COORDINATOR_NOT_AVAILABLE);
        }
        let partition = self
            .partition_of(group_id)
            .ok_or(error::COORDINATOR_NOT_AVAILABLE)?;
        if !self.store.is_local(partition) {
            return Err(error::NOT_COORDINATOR);
        }
        Ok(())
    }

    fn get_group(&self, group_id: &str) -> Option<Arc<Mutex<Group>>> {
        self.groups.read().get(group_id).cloned()
    }

    fn get_or_create_group(&self, group_id: &str, now: i64) -> Arc<Mutex<Group>> {
        if let Some(group) = self.get_group(group_id) {
            return group;
        }
        self.groups
            .write()
            .entry(group_id.to_owned())
            .or_insert_with(|| Arc::new(Mutex::new(Group::new(group_id, now))))
            .clone()
    }

    /// After every change: fire whatever became due, re-arm the group's
    /// timer, and forget the group once it is dead.
    fn settle(&self, arc: &Arc<Mutex<Group>>, group: &mut Group, now: i64) {
        self.poll_group(group, now);
        self.schedule(&group.group_id, group.next_deadline_ms());
        if group.is(GroupState::Dead) {
            let mut groups = self.groups.write();
            if groups
                .get(&group.group_id)
                .is_some_and(|g| Arc::ptr_eq(g, arc))
            {
                groups.remove(&group.group_id);
            }
        }
    }

    fn persist(
        &self,
        group_id: &str,
        records: &[CoordinatorRecord],
        now: i64,
    ) -> Result<(), ErrorCode> {
        let partition = self
            .partition_of(group_id)
            .ok_or(error::COORDINATOR_NOT_AVAILABLE)?;
        // The answer to this write awaits the partition's barrier (see
        // `durability_barrier`), which covers it.
        self.store
            .append(partition, records, now)?
            .defer_to_barrier();
        Ok(())
    }

    /// Resolves once every write this coordinator made so far for
    /// `group_id` is as durable as its partition is configured to make
    /// it; every group API that may write awaits it before answering.
    pub fn durability_barrier(&self, group_id: &str) -> AppendCompletion {
        match self.partition_of(group_id) {
            Some(partition) => self.store.durability_barrier(partition),
            None => AppendCompletion::ready(),
        }
    }

    fn store_group(
        &self,
        group: &Group,
        assignment: &BTreeMap<String, Bytes>,
        now: i64,
    ) -> Result<(), ErrorCode> {
        let record = CoordinatorRecord::Group {
            group: group.group_id.clone(),
            value: Some(group.to_record(assignment)),
        };
        self.persist(&group.group_id, &[record], now)
    }

    fn current_assignment(group: &Group) -> BTreeMap<String, Bytes> {
        group
            .members
            .values()
            .map(|m| (m.member_id.clone(), m.assignment.clone()))
            .collect()
    }

    /// Kafka's `validateCurrentMember`.
    fn validate_current_member(
        group: &Group,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Option<ErrorCode> {
        if let Some(instance) = instance_id {
            return match group.static_member_id(instance) {
                Some(current) if current != member_id => {
                    tracing::info!(group = %group.group_id, member = member_id, instance, current, "static member fenced by a newer member id");
                    Some(error::FENCED_INSTANCE_ID)
                }
                Some(_) => None,
                None => Some(error::UNKNOWN_MEMBER_ID),
            };
        }
        (!group.has(member_id)).then_some(error::UNKNOWN_MEMBER_ID)
    }

    fn schedule_session(&self, group: &mut Group, member_id: &str, now: i64) {
        if let Some(member) = group.members.get_mut(member_id) {
            member.session_deadline_ms = Some(now + i64::from(member.session_timeout_ms));
        }
    }

    // ------------------------------------------------------------------
    // JoinGroup

    /// Handles a JoinGroup; the receiver yields the response when the
    /// rebalance allows (immediately for errors).
    pub fn join(&self, request: JoinRequest) -> oneshot::Receiver<JoinResult> {
        let (tx, rx) = oneshot::channel();
        let now = self.now_ms();
        if let Err(code) = self.validate_group(&request.group_id, false) {
            respond(tx, JoinResult::error(request.member_id, code));
            return rx;
        }
        if request.session_timeout_ms < self.config.min_session_timeout_ms
            || request.session_timeout_ms > self.config.max_session_timeout_ms
        {
            respond(
                tx,
                JoinResult::error(request.member_id, error::INVALID_SESSION_TIMEOUT),
            );
            return rx;
        }
        let unknown_member = request.member_id.is_empty();
        let arc = if unknown_member {
            self.get_or_create_group(&request.group_id, now)
        } else {
            match self.get_group(&request.group_id) {
                Some(group) => group,
                None => {
                    respond(
                        tx,
                        JoinResult::error(request.member_id, error::UNKNOWN_MEMBER_ID),
                    );
                    return rx;
                }
            }
        };
        let mut group = arc.lock();
        if !self.accept_joining_member(&group, &request.member_id) {
            tracing::info!(group = %request.group_id, member = %request.member_id, max = self.config.max_size, "group is full (group.max.size)");
            if let Some(member) = group.remove(&request.member_id) {
                if let Some(old) = member.awaiting_join {
                    respond(old, JoinResult::error("", error::GROUP_MAX_SIZE_REACHED));
                }
            }
            respond(tx, JoinResult::error("", error::GROUP_MAX_SIZE_REACHED));
        } else if unknown_member {
            self.join_new_member(&mut group, request, tx, now);
        } else {
            self.join_current_member(&mut group, request, tx, now);
        }
        if group.is(GroupState::PreparingRebalance) {
            self.maybe_complete_join(&mut group, now);
        }
        self.settle(&arc, &mut group, now);
        rx
    }

    /// Kafka's `acceptJoiningMember`: room for new members up to
    /// `group.max.size`, counted among those that have (re)joined while a
    /// rebalance is being prepared.
    fn accept_joining_member(&self, group: &Group, member_id: &str) -> bool {
        match group.state() {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                group
                    .members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || group.num_awaiting_join() < self.config.max_size
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                group.has(member_id) || group.members.len() < self.config.max_size
            }
        }
    }

    fn join_new_member(
        &self,
        group: &mut Group,
        request: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: i64,
    ) {
        if group.is(GroupState::Dead) {
            respond(tx, JoinResult::error("", error::COORDINATOR_NOT_AVAILABLE));
            return;
        }
        if !group.supports_protocols(&request.protocol_type, &request.protocols) {
            respond(
                tx,
                JoinResult::error("", error::INCONSISTENT_GROUP_PROTOCOL),
            );
            return;
        }
        let prefix = request
            .group_instance_id
            .as_deref()
            .unwrap_or(&request.client_id);
        let new_id = generate_member_id(prefix);
        if let Some(instance) = request.group_instance_id.clone() {
            match group.static_member_id(&instance).map(str::to_owned) {
                Some(old_id) => {
                    tracing::info!(group = %group.group_id, instance = %instance, old = %old_id, new = %new_id, state = group.state().name(), "static member rejoins with a new member id");
                    self.update_static_member(group, &instance, &old_id, &new_id, request, tx, now);
                }
                None => self.add_member_and_rebalance(group, new_id, request, tx, now),
            }
        } else if request.require_known_member_id {
            if group.pending_members.len() >= PENDING_MEMBERS_MAX {
                respond(tx, JoinResult::error("", error::GROUP_MAX_SIZE_REACHED));
                return;
            }
            tracing::debug!(group = %group.group_id, member = %new_id, "new member must rejoin with its member id (KIP-394)");
            group
                .pending_members
                .insert(new_id.clone(), now + i64::from(request.session_timeout_ms));
            respond(tx, JoinResult::error(new_id, error::MEMBER_ID_REQUIRED));
        } else {
            self.add_member_and_rebalance(group, new_id, request, tx, now);
        }
    }

    fn join_current_member(
        &self,
        group: &mut Group,
        request: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: i64,
    ) {
        let member_id = request.member_id.clone();
        if group.is(GroupState::Dead) {
            respond(
                tx,
                JoinResult::error(member_id, error::COORDINATOR_NOT_AVAILABLE),
            );
            return;
        }
        if !group.supports_protocols(&request.protocol_type, &request.protocols) {
            respond(
                tx,
                JoinResult::error(member_id, error::INCONSISTENT_GROUP_PROTOCOL),
            );
            return;
        }
        if group.is_pending(&member_id) {
            if request.group_instance_id.is_some() {
                // A KIP-394 id is only handed to dynamic members.
                respond(tx, JoinResult::error(member_id, error::UNKNOWN_MEMBER_ID));
                return;
            }
            self.add_member_and_rebalance(group, member_id, request, tx, now);
            return;
        }
        if let Some(code) =
            Self::validate_current_member(group, &member_id, request.group_instance_id.as_deref())
        {
            respond(tx, JoinResult::error(member_id, code));
            return;
        }
        let unchanged = group
            .members
            .get(&member_id)
            .is_some_and(|m| m.matches(&request.protocols));
        match group.state() {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(group, request, tx, now);
            }
            GroupState::CompletingRebalance if unchanged => {
                // The member lost the JoinGroup response: send it again.
                let result =
                    self.join_result(group, &member_id, group.is_leader(&member_id), false);
                respond(tx, result);
            }
            GroupState::Stable if unchanged && !group.is_leader(&member_id) => {
                let result = self.join_result(group, &member_id, false, false);
                respond(tx, result);
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                // A changed subscription, or the leader asking for a new
                // assignment (for example after topic metadata changed).
                self.update_member_and_rebalance(group, request, tx, now);
            }
            GroupState::Empty | GroupState::Dead => {
                respond(tx, JoinResult::error(member_id, error::UNKNOWN_MEMBER_ID));
            }
        }
    }

    /// The JoinGroup answer for `member_id` in the current generation.
    fn join_result(
        &self,
        group: &Group,
        member_id: &str,
        with_members: bool,
        skip: bool,
    ) -> JoinResult {
        JoinResult {
            error: error::NONE,
            member_id: member_id.to_owned(),
            generation_id: group.generation_id,
            protocol_type: group.protocol_type.clone(),
            protocol_name: group.protocol_name.clone(),
            leader_id: group.leader_id.clone().unwrap_or_default(),
            skip_assignment: skip,
            members: if with_members {
                group.current_member_metadata()
            } else {
                Vec::new()
            },
        }
    }

    fn add_member_and_rebalance(
        &self,
        group: &mut Group,
        member_id: String,
        request: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: i64,
    ) {
        if group.is(GroupState::PreparingRebalance) && group.generation_id == 0 {
            group.new_member_added = true;
        }
        tracing::info!(group = %group.group_id, member = %member_id, instance = ?request.group_instance_id, client_id = %request.client_id, reason = request.reason.as_deref().unwrap_or("not provided"), "adding new member");
        group.add(Member {
            member_id,
            group_instance_id: request.group_instance_id,
            client_id: request.client_id,
            client_host: request.client_host,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            session_timeout_ms: request.session_timeout_ms,
            protocol_type: request.protocol_type,
            protocols: request.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(tx),
            awaiting_sync: None,
            is_new: true,
            // A new member cannot heartbeat until it has an id; it is
            // dropped if it waits in JoinGroup longer than this.
            session_deadline_ms: Some(now + NEW_MEMBER_JOIN_TIMEOUT_MS),
        });
        self.maybe_prepare_rebalance(group, now);
    }

    fn update_member_and_rebalance(
        &self,
        group: &mut Group,
        request: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: i64,
    ) {
        if let Some(member) = group.members.get_mut(&request.member_id) {
            member.protocols = request.protocols;
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
            member.session_timeout_ms = request.session_timeout_ms;
            member.awaiting_join = Some(tx);
        }
        self.maybe_prepare_rebalance(group, now);
    }

    /// KIP-345: a known static member rejoins without its member id.
    #[allow(clippy::too_many_arguments)]
    fn update_static_member(
        &self,
        group: &mut Group,
        instance: &str,
        old_id: &str,
        new_id: &str,
        request: JoinRequest,
        tx: oneshot::Sender<JoinResult>,
        now: i64,
    ) {
        let previous_leader = group.leader_id.clone().unwrap_or_default();
        group.replace_static_member(instance, old_id, new_id);
        self.schedule_session(group, new_id, now);
        let Some(member) = group.members.get_mut(new_id) else {
            respond(tx, JoinResult::error("", error::UNKNOWN_MEMBER_ID));
            return;
        };
        let old_protocols = std::mem::replace(&mut member.protocols, request.protocols);
        let old_rebalance = std::mem::replace(
            &mut member.rebalance_timeout_ms,
            request.rebalance_timeout_ms,
        );
        let old_session =
            std::mem::replace(&mut member.session_timeout_ms, request.session_timeout_ms);
        member.awaiting_join = Some(tx);
        match group.state() {
            GroupState::Stable => {
                if group.select_protocol() != group.protocol_name {
                    tracing::info!(group = %group.group_id, instance, "static member changed the group's protocol; rebalancing");
                    self.maybe_prepare_rebalance(group, now);
                    return;
                }
                let stored = self.store_group(group, &Self::current_assignment(group), now);
                let Some(member) = group.members.get_mut(new_id) else {
                    return;
                };
                let tx = member.awaiting_join.take();
                if let Err(code) = stored {
                    tracing::warn!(group = %group.group_id, instance, code, "could not persist the replaced static member; reverting");
                    member.protocols = old_protocols;
                    member.rebalance_timeout_ms = old_rebalance;
                    member.session_timeout_ms = old_session;
                    group.replace_static_member(instance, new_id, old_id);
                    self.schedule_session(group, old_id, now);
                    if let Some(tx) = tx {
                        let mut result = self.join_result(group, "", false, false);
                        result.error = code;
                        result.leader_id = previous_leader;
                        respond(tx, result);
                    }
                    return;
                }
                tracing::info!(group = %group.group_id, instance, member = new_id, "static member rejoined a stable group without a rebalance");
                let result = if request.supports_skip_assignment {
                    // v9+: the leader learns it leads, but must not run
                    // the assignor while the group is stable.
                    let leads = group.is_leader(new_id);
                    self.join_result(group, new_id, leads, leads)
                } else {
                    // Older clients get the previous leader's id, so a
                    // rejoining leader does not think it must assign.
                    let mut result = self.join_result(group, new_id, false, false);
                    result.leader_id = previous_leader;
                    result
                };
                if let Some(tx) = tx {
                    respond(tx, result);
                }
            }
            GroupState::CompletingRebalance => {
                // The leader may already hold the old member id: start over.
                self.prepare_rebalance(group, now);
            }
            GroupState::PreparingRebalance => {}
            GroupState::Empty | GroupState::Dead => {
                if let Some(tx) = group
                    .members
                    .get_mut(new_id)
                    .and_then(|m| m.awaiting_join.take())
                {
                    respond(tx, JoinResult::error("", error::UNKNOWN_MEMBER_ID));
                }
            }
        }
    }

    fn maybe_prepare_rebalance(&self, group: &mut Group, now: i64) {
        if group.can_rebalance() {
            self.prepare_rebalance(group, now);
        }
    }

    /// Kafka's `prepareRebalance`: members waiting in SyncGroup are told to
    /// rejoin, and the join phase starts with its timer.
    fn prepare_rebalance(&self, group: &mut Group, now: i64) {
        if group.is(GroupState::CompletingRebalance) {
            self.reset_and_propagate_assignment_error(group, error::REBALANCE_IN_PROGRESS, now);
        }
        group.pending_sync.clear();
        group.sync_deadline = None;
        let rebalance_timeout = group.rebalance_timeout_ms();
        let initial = group.is(GroupState::Empty);
        group.join_timer = Some(if initial {
            let delay = self.config.initial_rebalance_delay_ms;
            JoinTimer::Initial {
                deadline_ms: now + delay,
                configured_delay_ms: delay,
                delay_ms: delay,
                remaining_ms: (rebalance_timeout - delay).max(0),
            }
        } else {
            JoinTimer::Regular {
                deadline_ms: now + rebalance_timeout,
            }
        });
        tracing::info!(group = %group.group_id, state = group.state().name(), generation = group.generation_id, "preparing to rebalance group");
        group.transition_to(GroupState::PreparingRebalance, now);
        if !initial {
            self.maybe_complete_join(group, now);
        }
    }

    /// Completes the join phase early once every member has rejoined
    /// (never during the initial delay, which always runs its course).
    fn maybe_complete_join(&self, group: &mut Group, now: i64) {
        if group.is(GroupState::PreparingRebalance)
            && matches!(group.join_timer, Some(JoinTimer::Regular { .. }))
            && group.has_all_members_joined()
        {
            self.complete_join(group, now);
        }
    }

    fn on_join_timer(&self, group: &mut Group, now: i64) {
        match group.join_timer {
            Some(JoinTimer::Initial {
                configured_delay_ms,
                delay_ms,
                remaining_ms,
                ..
            }) if group.new_member_added && remaining_ms != 0 => {
                // New members keep arriving: wait a little longer.
                group.new_member_added = false;
                let delay = configured_delay_ms.min(remaining_ms);
                group.join_timer = Some(JoinTimer::Initial {
                    deadline_ms: now + delay,
                    configured_delay_ms,
                    delay_ms: delay,
                    remaining_ms: (remaining_ms - delay_ms).max(0),
                });
            }
            _ => self.complete_join(group, now),
        }
    }

    /// Kafka's `onCompleteJoin`: drop dynamic members that did not rejoin,
    /// start the next generation and answer every waiting JoinGroup.
    fn complete_join(&self, group: &mut Group, now: i64) {
        group.join_timer = None;
        let not_rejoined: Vec<String> = group
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && !m.is_static())
            .map(|m| m.member_id.clone())
            .collect();
        if !not_rejoined.is_empty() {
            tracing::info!(group = %group.group_id, members = ?not_rejoined, "removing members that did not rejoin before the rebalance timeout");
        }
        for id in &not_rejoined {
            group.remove(id);
        }
        if group.is(GroupState::Dead) {
            return;
        }
        if !group.maybe_elect_new_joined_leader() && !group.members.is_empty() {
            tracing::warn!(group = %group.group_id, "could not complete the rebalance because no members rejoined");
            group.join_timer = Some(JoinTimer::Regular {
                deadline_ms: now + group.rebalance_timeout_ms(),
            });
            return;
        }
        group.init_next_generation(now);
        if group.is(GroupState::Empty) {
            tracing::info!(group = %group.group_id, generation = group.generation_id, "group is now empty");
            if let Err(code) = self.store_group(group, &BTreeMap::new(), now) {
                // The previous generation stays on disk; it has no live
                // members after a restart either, so this is only logged.
                tracing::warn!(group = %group.group_id, code, "failed to write the empty group's metadata");
            }
            return;
        }
        tracing::info!(group = %group.group_id, generation = group.generation_id, members = group.members.len(), protocol = ?group.protocol_name, "stabilized group");
        let ids: Vec<String> = group.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(group, &id, group.is_leader(&id), false);
            if let Some(member) = group.members.get_mut(&id) {
                if let Some(tx) = member.awaiting_join.take() {
                    respond(tx, result);
                }
                member.is_new = false;
                member.session_deadline_ms = Some(now + i64::from(member.session_timeout_ms));
            }
            group.pending_sync.insert(id);
        }
        group.sync_deadline = Some((now + group.rebalance_timeout_ms(), group.generation_id));
    }

    // ------------------------------------------------------------------
    // SyncGroup

    pub fn sync(&self, request: SyncRequest) -> oneshot::Receiver<SyncResult> {
        let (tx, rx) = oneshot::channel();
        let now = self.now_ms();
        if let Err(code) = self.validate_group(&request.group_id, false) {
            respond(tx, SyncResult::error(code));
            return rx;
        }
        let Some(arc) = self.get_group(&request.group_id) else {
            respond(tx, SyncResult::error(error::UNKNOWN_MEMBER_ID));
            return rx;
        };
        let mut group = arc.lock();
        self.sync_locked(&mut group, request, tx, now);
        self.settle(&arc, &mut group, now);
        rx
    }

    fn sync_locked(
        &self,
        group: &mut Group,
        request: SyncRequest,
        tx: oneshot::Sender<SyncResult>,
        now: i64,
    ) {
        if group.is(GroupState::Dead) {
            respond(tx, SyncResult::error(error::COORDINATOR_NOT_AVAILABLE));
            return;
        }
        let member_id = request.member_id.as_str();
        let invalid =
            Self::validate_current_member(group, member_id, request.group_instance_id.as_deref())
                .or_else(|| {
                    (request.generation_id != group.generation_id)
                        .then_some(error::ILLEGAL_GENERATION)
                })
                .or_else(|| {
                    let type_differs = request.protocol_type.is_some()
                        && request.protocol_type != group.protocol_type;
                    let name_differs = request.protocol_name.is_some()
                        && request.protocol_name != group.protocol_name;
                    (type_differs || name_differs).then_some(error::INCONSISTENT_GROUP_PROTOCOL)
                });
        if let Some(code) = invalid {
            respond(tx, SyncResult::error(code));
            return;
        }
        match group.state() {
            GroupState::Empty => respond(tx, SyncResult::error(error::UNKNOWN_MEMBER_ID)),
            GroupState::PreparingRebalance => {
                respond(tx, SyncResult::error(error::REBALANCE_IN_PROGRESS))
            }
            GroupState::CompletingRebalance => {
                if let Some(member) = group.members.get_mut(member_id) {
                    member.awaiting_sync = Some(tx);
                }
                self.remove_pending_sync_member(group, member_id);
                if group.is_leader(member_id) {
                    self.complete_sync(group, request.assignments, now);
                }
            }
            GroupState::Stable => {
                self.remove_pending_sync_member(group, member_id);
                let assignment = group
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                respond(
                    tx,
                    SyncResult {
                        error: error::NONE,
                        protocol_type: group.protocol_type.clone(),
                        protocol_name: group.protocol_name.clone(),
                        assignment,
                    },
                );
                self.schedule_session(group, member_id, now);
            }
            GroupState::Dead => respond(tx, SyncResult::error(error::COORDINATOR_NOT_AVAILABLE)),
        }
    }

    /// The leader's assignment arrived: persist the generation, then hand
    /// every member its part and become Stable.
    fn complete_sync(&self, group: &mut Group, assignments: Vec<(String, Bytes)>, now: i64) {
        let given: HashMap<String, Bytes> = assignments.into_iter().collect();
        let assignment: BTreeMap<String, Bytes> = group
            .members
            .keys()
            .map(|id| (id.clone(), given.get(id).cloned().unwrap_or_default()))
            .collect();
        let missing: Vec<&String> = group
            .members
            .keys()
            .filter(|id| !given.contains_key(*id))
            .collect();
        if !missing.is_empty() {
            tracing::warn!(group = %group.group_id, generation = group.generation_id, members = ?missing, "leader gave no assignment to some members; they get an empty one");
        }
        tracing::info!(group = %group.group_id, generation = group.generation_id, members = group.members.len(), "assignment received from the leader");
        match self.store_group(group, &assignment, now) {
            Ok(()) => {
                for (id, bytes) in assignment {
                    if let Some(member) = group.members.get_mut(&id) {
                        member.assignment = bytes;
                    }
                }
                self.propagate_assignment(group, error::NONE, now);
                group.transition_to(GroupState::Stable, now);
            }
            Err(code) => {
                tracing::warn!(group = %group.group_id, code, "failed to persist the group assignment; rebalancing");
                self.reset_and_propagate_assignment_error(group, code, now);
                self.maybe_prepare_rebalance(group, now);
            }
        }
    }

    fn reset_and_propagate_assignment_error(&self, group: &mut Group, code: ErrorCode, now: i64) {
        for member in group.members.values_mut() {
            member.assignment = Bytes::new();
        }
        self.propagate_assignment(group, code, now);
    }

    /// Answers every member waiting in SyncGroup and restarts its session.
    fn propagate_assignment(&self, group: &mut Group, code: ErrorCode, now: i64) {
        let (ptype, pname) = if code == error::NONE {
            (group.protocol_type.clone(), group.protocol_name.clone())
        } else {
            (None, None)
        };
        for member in group.members.values_mut() {
            if let Some(tx) = member.awaiting_sync.take() {
                respond(
                    tx,
                    SyncResult {
                        error: code,
                        protocol_type: ptype.clone(),
                        protocol_name: pname.clone(),
                        assignment: member.assignment.clone(),
                    },
                );
                member.session_deadline_ms = Some(now + i64::from(member.session_timeout_ms));
            }
        }
    }

    fn remove_pending_sync_member(&self, group: &mut Group, member_id: &str) {
        group.pending_sync.remove(member_id);
        if group.pending_sync.is_empty() {
            group.sync_deadline = None;
        }
    }

    fn expire_pending_sync(&self, group: &mut Group, generation: i32, now: i64) {
        if generation != group.generation_id
            || !matches!(
                group.state(),
                GroupState::CompletingRebalance | GroupState::Stable
            )
            || group.pending_sync.is_empty()
        {
            return;
        }
        let late: Vec<String> = group.pending_sync.iter().cloned().collect();
        tracing::info!(group = %group.group_id, members = ?late, "removing members that did not send SyncGroup in time");
        for id in &late {
            group.remove(id);
        }
        self.prepare_rebalance(group, now);
    }

    // ------------------------------------------------------------------
    // Heartbeat and LeaveGroup

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> ErrorCode {
        let now = self.now_ms();
        if let Err(code) = self.validate_group(group_id, false) {
            return code;
        }
        let Some(arc) = self.get_group(group_id) else {
            return error::UNKNOWN_MEMBER_ID;
        };
        let mut group = arc.lock();
        let code = if group.is(GroupState::Dead) {
            error::COORDINATOR_NOT_AVAILABLE
        } else if let Some(code) = Self::validate_current_member(&group, member_id, instance_id) {
            code
        } else if generation_id != group.generation_id {
            error::ILLEGAL_GENERATION
        } else {
            match group.state() {
                GroupState::Empty => error::UNKNOWN_MEMBER_ID,
                GroupState::CompletingRebalance | GroupState::Stable => {
                    self.schedule_session(&mut group, member_id, now);
                    error::NONE
                }
                GroupState::PreparingRebalance => {
                    self.schedule_session(&mut group, member_id, now);
                    error::REBALANCE_IN_PROGRESS
                }
                GroupState::Dead => error::COORDINATOR_NOT_AVAILABLE,
            }
        };
        self.settle(&arc, &mut group, now);
        code
    }

    pub fn leave(&self, group_id: &str, leaving: Vec<LeavingMember>) -> LeaveResult {
        let now = self.now_ms();
        if let Err(code) = self.validate_group(group_id, false) {
            return LeaveResult {
                error: code,
                members: Vec::new(),
            };
        }
        let Some(arc) = self.get_group(group_id) else {
            return LeaveResult {
                error: error::NONE,
                members: leaving
                    .into_iter()
                    .map(|m| (m.member_id, m.group_instance_id, error::UNKNOWN_MEMBER_ID))
                    .collect(),
            };
        };
        let mut group = arc.lock();
        if group.is(GroupState::Dead) {
            return LeaveResult {
                error: error::COORDINATOR_NOT_AVAILABLE,
                members: Vec::new(),
            };
        }
        let mut members = Vec::with_capacity(leaving.len());
        for m in leaving {
            let reason = m.reason.as_deref().unwrap_or("not provided");
            let code = if m.member_id.is_empty() {
                // Removal of a static member by its instance id (admin).
                match m
                    .group_instance_id
                    .as_deref()
                    .and_then(|i| group.static_member_id(i))
                    .map(str::to_owned)
                {
                    Some(current) => {
                        tracing::info!(group = %group_id, member = %current, reason, "static member removed through LeaveGroup");
                        self.remove_member_and_update_group(&mut group, &current, now);
                        error::NONE
                    }
                    None => error::UNKNOWN_MEMBER_ID,
                }
            } else if group.is_pending(&m.member_id) {
                self.remove_pending_member_and_update_group(&mut group, &m.member_id, now);
                error::NONE
            } else if let Some(code) =
                Self::validate_current_member(&group, &m.member_id, m.group_instance_id.as_deref())
            {
                code
            } else {
                tracing::info!(group = %group_id, member = %m.member_id, reason, "member left the group");
                self.remove_member_and_update_group(&mut group, &m.member_id, now);
                error::NONE
            };
            members.push((m.member_id, m.group_instance_id, code));
        }
        self.settle(&arc, &mut group, now);
        LeaveResult {
            error: error::NONE,
            members,
        }
    }

    /// Kafka's `removeMemberAndUpdateGroup`.
    fn remove_member_and_update_group(&self, group: &mut Group, member_id: &str, now: i64) {
        if let Some(tx) = group
            .members
            .get_mut(member_id)
            .and_then(|m| m.awaiting_join.take())
        {
            respond(tx, JoinResult::error("", error::UNKNOWN_MEMBER_ID));
        }
        if let Some(tx) = group
            .members
            .get_mut(member_id)
            .and_then(|m| m.awaiting_sync.take())
        {
            respond(tx, SyncResult::error(error::UNKNOWN_MEMBER_ID));
        }
        group.remove(member_id);
        match group.state() {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.maybe_prepare_rebalance(group, now)
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(group, now),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn remove_pending_member_and_update_group(&self, group: &mut Group, member_id: &str, now: i64) {
        group.remove(member_id);
        if group.is(GroupState::PreparingRebalance) {
            self.maybe_complete_join(group, now);
        }
    }

    /// A member's session deadline passed. Members waiting in JoinGroup or
    /// SyncGroup are alive by definition, unless they are new (a new member
    /// that waits too long is dropped).
    fn expire_session(&self, group: &mut Group, member_id: &str, now: i64) {
        let Some(member) = group.members.get_mut(member_id) else {
            return;
        };
        member.session_deadline_ms = None;
        let waiting = member.awaiting_join.is_some() || member.awaiting_sync.is_some();
        if member.is_new || !waiting {
            tracing::info!(group = %group.group_id, member = member_id, "member has failed (session timeout), removing it from the group");
            self.remove_member_and_update_group(group, member_id, now);
        }
    }

    // ------------------------------------------------------------------
    // Timers

    fn poll_group(&self, group: &mut Group, now: i64) {
        for _ in 0..POLL_ROUNDS_MAX {
            if group.is(GroupState::Dead) {
                return;
            }
            let mut fired = false;
            let pending: Vec<String> = group
                .pending_members
                .iter()
                .filter(|(_, d)| **d <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in pending {
                fired = true;
                tracing::info!(group = %group.group_id, member = %id, "pending member expired before rejoining");
                self.remove_pending_member_and_update_group(group, &id, now);
            }
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.session_deadline_ms.is_some_and(|d| d <= now))
                .map(|m| m.member_id.clone())
                .collect();
            for id in expired {
                fired = true;
                self.expire_session(group, &id, now);
            }
            match group.join_timer {
                Some(timer) if !group.is(GroupState::PreparingRebalance) => {
                    tracing::debug!(group = %group.group_id, ?timer, "dropping a stale join timer");
                    group.join_timer = None;
                }
                Some(timer) if timer.deadline_ms() <= now => {
                    fired = true;
                    self.on_join_timer(group, now);
                }
                _ => {}
            }
            if let Some((deadline, generation)) = group.sync_deadline {
                if deadline <= now {
                    fired = true;
                    group.sync_deadline = None;
                    self.expire_pending_sync(group, generation, now);
                }
            }
            if !fired {
                return;
            }
        }
        tracing::warn!(group = %group.group_id, "group timers did not settle in {POLL_ROUNDS_MAX} rounds");
    }

    fn schedule(&self, group_id: &str, deadline: Option<i64>) {
        let mut timers = self.timers.lock();
        if let Some(old) = timers.by_group.remove(group_id) {
            timers.by_deadline.remove(&(old, group_id.to_owned()));
        }
        let Some(deadline) = deadline else {
            return;
        };
        let earliest = timers.by_deadline.first().map(|(d, _)| *d);
        timers.by_deadline.insert((deadline, group_id.to_owned()));
        timers.by_group.insert(group_id.to_owned(), deadline);
        if earliest.is_none_or(|e| deadline < e) {
            self.timers_changed.notify_one();
        }
    }

    /// The earliest group deadline, if any.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.timers.lock().by_deadline.first().map(|(d, _)| *d)
    }

    /// Resolves when a deadline earlier than all others was added.
    pub async fn deadlines_changed(&self) {
        self.timers_changed.notified().await;
    }

    /// Fires every group timer due at `now`.
    pub fn poll_due(&self, now: i64) {
        let due: Vec<String> = {
            let mut timers = self.timers.lock();
            let mut due = Vec::new();
            while let Some((deadline, id)) = timers.by_deadline.first().cloned() {
                if deadline > now {
                    break;
                }
                timers.by_deadline.pop_first();
                timers.by_group.remove(&id);
                due.push(id);
            }
            due
        };
        for id in due {
            if let Some(arc) = self.get_group(&id) {
                let mut group = arc.lock();
                self.settle(&arc, &mut group, now);
            }
        }
    }

    // ------------------------------------------------------------------
    // Offsets

    /// OffsetCommit for partitions that exist; returns an error per
    /// partition. `generation_id` -1 with no member id commits for a group
    /// that does not use the coordinator for membership.
    pub fn commit_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        offsets: Vec<(TopicPartition, OffsetAndMetadata)>,
    ) -> Vec<(TopicPartition, ErrorCode)> {
        let now = self.now_ms();
        let all = |code: ErrorCode, offsets: Vec<(TopicPartition, OffsetAndMetadata)>| {
            offsets.into_iter().map(|(tp, _)| (tp, code)).collect()
        };
        if let Err(code) = self.validate_group(group_id, true) {
            return all(code, offsets);
        }
        let arc = match self.get_group(group_id) {
            Some(arc) => arc,
            None if generation_id < 0 => {
                tracing::info!(
                    group = group_id,
                    "creating a group for offset storage only (commit without membership)"
                );
                self.get_or_create_group(group_id, now)
            }
            None => return all(error::ILLEGAL_GENERATION, offsets),
        };
        let mut group = arc.lock();
        let result =
            match self.validate_offset_commit(&group, member_id, instance_id, generation_id) {
                Some(code) => all(code, offsets),
                None => match group.state() {
                    GroupState::Empty => self.store_offsets(&mut group, offsets, now),
                    GroupState::Stable | GroupState::PreparingRebalance => {
                        // A commit during a rebalance is allowed: the member
                        // learns of the rebalance from its next heartbeat.
                        self.schedule_session(&mut group, member_id, now);
                        self.store_offsets(&mut group, offsets, now)
                    }
                    GroupState::CompletingRebalance => all(error::REBALANCE_IN_PROGRESS, offsets),
                    GroupState::Dead => all(error::COORDINATOR_NOT_AVAILABLE, offsets),
                },
            };
        self.settle(&arc, &mut group, now);
        result
    }

    /// Kafka's `validateOffsetCommit` (non-transactional).
    fn validate_offset_commit(
        &self,
        group: &Group,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Option<ErrorCode> {
        if group.is(GroupState::Dead) {
            Some(error::COORDINATOR_NOT_AVAILABLE)
        } else if generation_id < 0 && group.is(GroupState::Empty) {
            None
        } else if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            Self::validate_current_member(group, member_id, instance_id).or_else(|| {
                (generation_id != group.generation_id).then_some(error::ILLEGAL_GENERATION)
            })
        } else if !group.is(GroupState::Empty) {
            Some(error::UNKNOWN_MEMBER_ID)
        } else {
            None
        }
    }

    fn store_offsets(
        &self,
        group: &mut Group,
        offsets: Vec<(TopicPartition, OffsetAndMetadata)>,
        now: i64,
    ) -> Vec<(TopicPartition, ErrorCode)> {
        let max = self.config.offset_metadata_max_bytes;
        let (valid, too_large): (Vec<_>, Vec<_>) = offsets
            .into_iter()
            .partition(|(_, o)| o.metadata.len() <= max);
        let mut result: Vec<(TopicPartition, ErrorCode)> = too_large
            .into_iter()
            .map(|(tp, _)| (tp, error::OFFSET_METADATA_TOO_LARGE))
            .collect();
        if valid.is_empty() {
            return result;
        }
        let records: Vec<CoordinatorRecord> = valid
            .iter()
            .map(|((topic, partition), o)| CoordinatorRecord::Offset {
                group: group.group_id.clone(),
                topic: topic.clone(),
                partition: *partition,
                value: Some(o.clone()),
            })
            .collect();
        match self.persist(&group.group_id, &records, now) {
            Ok(()) => {
                for (tp, o) in valid {
                    group.offsets.insert(tp.clone(), o);
                    result.push((tp, error::NONE));
                }
            }
            Err(code) => result.extend(valid.into_iter().map(|(tp, _)| (tp, code))),
        }
        result
    }

    /// OffsetFetch: the committed offset of each asked partition (None
    /// when there is none), or of every partition with one.
    #[allow(clippy::type_complexity)]
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<TopicPartition>>,
    ) -> Result<Vec<(TopicPartition, Option<OffsetAndMetadata>)>, ErrorCode> {
        self.validate_group(group_id, true)?;
        let group = self.get_group(group_id);
        let guard = group.as_ref().map(|g| g.lock());
        let offsets = guard
            .as_ref()
            .filter(|g| !g.is(GroupState::Dead))
            .map(|g| &g.offsets);
        Ok(match partitions {
            Some(partitions) => partitions
                .into_iter()
                .map(|tp| {
                    let found = offsets.and_then(|o| o.get(&tp)).cloned();
                    (tp, found)
                })
                .collect(),
            None => offsets
                .map(|o| {
                    o.iter()
                        .map(|(tp, v)| (tp.clone(), Some(v.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// OffsetDelete: removes offsets of topics the group does not consume.
    pub fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<TopicPartition>,
    ) -> (ErrorCode, Vec<(TopicPartition, ErrorCode)>) {
        let now = self.now_ms();
        if let Err(code) = self.validate_group(group_id, false) {
            return (code, Vec::new());
        }
        let Some(arc) = self.get_group(group_id) else {
            return (error::GROUP_ID_NOT_FOUND, Vec::new());
        };
        let mut group = arc.lock();
        let consumer =
            group.protocol_type.as_deref() == Some(tarn_protocol::consumer_protocol::PROTOCOL_TYPE);
        let (eligible, mut result): (Vec<TopicPartition>, Vec<(TopicPartition, ErrorCode)>) =
            match group.state() {
                GroupState::Dead => return (error::GROUP_ID_NOT_FOUND, Vec::new()),
                GroupState::Empty => (partitions, Vec::new()),
                _ if consumer => {
                    let (subscribed, free): (Vec<_>, Vec<_>) = partitions
                        .into_iter()
                        .partition(|(t, _)| group.is_subscribed_to(t));
                    (
                        free,
                        subscribed
                            .into_iter()
                            .map(|tp| (tp, error::GROUP_SUBSCRIBED_TO_TOPIC))
                            .collect(),
                    )
                }
                _ => return (error::NON_EMPTY_GROUP, Vec::new()),
            };
        if !eligible.is_empty() {
            let existing: Vec<TopicPartition> = eligible
                .iter()
                .filter(|tp| group.offsets.contains_key(*tp))
                .cloned()
                .collect();
            let code = match self.remove_offsets(&mut group, &existing, now) {
                Ok(()) => error::NONE,
                Err(code) => code,
            };
            if code == error::NONE && !existing.is_empty() {
                tracing::info!(
                    group = group_id,
                    offsets = existing.len(),
                    "deleted offsets"
                );
            }
            result.extend(eligible.into_iter().map(|tp| (tp, code)));
        }
        self.settle(&arc, &mut group, now);
        (error::NONE, result)
    }

    /// Writes tombstones for `partitions`, then forgets them.
    fn remove_offsets(
        &self,
        group: &mut Group,
        partitions: &[TopicPartition],
        now: i64,
    ) -> Result<(), ErrorCode> {
        if partitions.is_empty() {
            return Ok(());
        }
        let records: Vec<CoordinatorRecord> = partitions
            .iter()
            .map(|(topic, partition)| CoordinatorRecord::Offset {
                group: group.group_id.clone(),
                topic: topic.clone(),
                partition: *partition,
                value: None,
            })
            .collect();
        self.persist(&group.group_id, &records, now)?;
        for tp in partitions {
            group.offsets.remove(tp);
        }
        Ok(())
    }

    /// Deletes empty groups: tombstones for their offsets and metadata.
    pub fn delete_groups(&self, group_ids: Vec<String>) -> Vec<(String, ErrorCode)> {
        let now = self.now_ms();
        group_ids
            .into_iter()
            .map(|id| {
                let code = self.delete_group(&id, now);
                (id, code)
            })
            .collect()
    }

    fn delete_group(&self, group_id: &str, now: i64) -> ErrorCode {
        if let Err(code) = self.validate_group(group_id, true) {
            return code;
        }
        let Some(arc) = self.get_group(group_id) else {
            return error::GROUP_ID_NOT_FOUND;
        };
        let mut group = arc.lock();
        let code = match group.state() {
            GroupState::Dead => error::GROUP_ID_NOT_FOUND,
            GroupState::Empty => match self.write_group_tombstones(&group, now) {
                Ok(()) => {
                    let offsets = group.offsets.len();
                    group.offsets.clear();
                    group.transition_to(GroupState::Dead, now);
                    tracing::info!(group = group_id, offsets, "deleted group");
                    error::NONE
                }
                Err(code) => code,
            },
            _ => error::NON_EMPTY_GROUP,
        };
        self.settle(&arc, &mut group, now);
        code
    }

    fn write_group_tombstones(&self, group: &Group, now: i64) -> Result<(), ErrorCode> {
        let mut records: Vec<CoordinatorRecord> = group
            .offsets
            .keys()
            .map(|(topic, partition)| CoordinatorRecord::Offset {
                group: group.group_id.clone(),
                topic: topic.clone(),
                partition: *partition,
                value: None,
            })
            .collect();
        records.push(CoordinatorRecord::Group {
            group: group.group_id.clone(),
            value: None,
        });
        self.persist(&group.group_id, &records, now)
    }

    /// Kafka's periodic offset expiration (`offsets.retention.minutes`):
    /// removes expired offsets and then groups left empty with none.
    /// Returns how many offsets were removed.
    pub fn expire_offsets(&self, now: i64) -> usize {
        let groups: Vec<Arc<Mutex<Group>>> = self.groups.read().values().cloned().collect();
        let mut removed = 0;
        for arc in groups {
            let mut group = arc.lock();
            if group.is(GroupState::Dead) {
                continue;
            }
            let expired = group.expired_offsets(now, self.config.offsets_retention_ms);
            match self.remove_offsets(&mut group, &expired, now) {
                Ok(()) => removed += expired.len(),
                Err(code) => {
                    tracing::warn!(group = %group.group_id, code, "could not write tombstones for expired offsets; will retry");
                    continue;
                }
            }
            if !expired.is_empty() {
                tracing::info!(group = %group.group_id, offsets = expired.len(), "expired offsets");
            }
            if group.is(GroupState::Empty) && group.offsets.is_empty() {
                match self.write_group_tombstones(&group, now) {
                    Ok(()) => {
                        tracing::info!(group = %group.group_id, "removed empty group with no offsets left");
                        group.transition_to(GroupState::Dead, now);
                    }
                    Err(code) => {
                        tracing::warn!(group = %group.group_id, code, "could not remove the empty group; will retry")
                    }
                }
            }
            self.settle(&arc, &mut group, now);
        }
        removed
    }

    /// A topic was deleted: its committed offsets go too, in every group
    /// (so a topic re-created under the same name starts without them).
    /// Returns how many offsets were removed.
    pub fn on_topic_deleted(&self, topic: &str) -> usize {
        let now = self.now_ms();
        let groups: Vec<Arc<Mutex<Group>>> = self.groups.read().values().cloned().collect();
        let mut removed = 0;
        for arc in groups {
            let mut group = arc.lock();
            let gone: Vec<TopicPartition> = group
                .offsets
                .keys()
                .filter(|(t, _)| t == topic)
                .cloned()
                .collect();
            match self.remove_offsets(&mut group, &gone, now) {
                Ok(()) => removed += gone.len(),
                Err(code) => {
                    tracing::error!(group = %group.group_id, topic, code, "could not remove the offsets of a deleted topic")
                }
            }
        }
        if removed > 0 {
            tracing::info!(
                topic,
                removed,
                "removed committed offsets of a deleted topic"
            );
        }
        removed
    }

    // ------------------------------------------------------------------
    // Describe and list

    /// DescribeGroups for one group; an unknown group is described as Dead.
    pub fn describe(&self, group_id: &str) -> Result<GroupSummary, ErrorCode> {
        self.validate_group(group_id, true)?;
        let Some(arc) = self.get_group(group_id) else {
            return Ok(GroupSummary {
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            });
        };
        let group = arc.lock();
        let stable = group.is(GroupState::Stable);
        let protocol = if stable {
            group.protocol_name.clone().unwrap_or_default()
        } else {
            String::new()
        };
        Ok(GroupSummary {
            state: group.state(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.clone(),
            members: group
                .members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(&protocol).cloned().unwrap_or_default()
                    } else {
                        Bytes::new()
                    },
                    // In every state, as Kafka: the last one synced until
                    // a rebalance replaces it.
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// ListGroups, optionally only groups in `states` (case-insensitive).
    pub fn list(&self, states: &[String]) -> Result<Vec<GroupOverview>, ErrorCode> {
        if !self.active.load(Ordering::SeqCst) {
            return Err(error::COORDINATOR_NOT_AVAILABLE);
        }
        let wanted: BTreeSet<String> = states.iter().map(|s| s.to_lowercase()).collect();
        let groups: Vec<Arc<Mutex<Group>>> = self.groups.read().values().cloned().collect();
        let mut out: Vec<GroupOverview> = groups
            .iter()
            .filter_map(|arc| {
                let group = arc.lock();
                let state = group.state();
                (state != GroupState::Dead
                    && (wanted.is_empty() || wanted.contains(&state.name().to_lowercase())))
                .then(|| GroupOverview {
                    group_id: group.group_id.clone(),
                    protocol_type: group.protocol_type.clone().unwrap_or_default(),
                    state,
                })
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
