//! Partition leadership and ISR changes, as KRaft's replication control
//! plans them: pure functions from the image to the `PartitionChange`
//! records that carry a change out, committed by the active controller.
//!
//! The rules (Kafka's `ReplicationControlManager` and
//! `PartitionChangeBuilder` with eligible leader replicas, KIP-966, on as
//! in Kafka 4 clusters):
//!
//! - A leader is a replica that is in the ISR and on a registered,
//!   unfenced broker. An election keeps a current leader that still
//!   qualifies, else takes the first qualifying replica in replica order.
//! - A fenced broker leaves every ISR it is in and leads nothing; the ISR
//!   may become empty. While the ISR is below the topic's effective
//!   `min.insync.replicas` (at most its replication factor), the replicas
//!   that leave it are eligible leader replicas (ELR): the high watermark
//!   does not move below min ISR, so they hold every committed record. At
//!   or above min ISR the ELR is empty.
//! - With the ISR empty, an unfenced ELR member may lead, and the ISR
//!   becomes just it. An emptied ISR remembers the leader it had (the
//!   last known leader); with ISR and ELR both empty that broker may lead
//!   again, with an ISR of itself. When the topic allows unclean elections
//!   (`unclean.leader.election.enable`), any unfenced replica may lead
//!   instead, and the ISR becomes just that replica.
//! - A broker that registers after an unclean stop (its clean-shutdown
//!   marker does not name its registration) leaves every ISR and ELR: it
//!   may have lost records.
//! - An unfenced broker leads the leaderless partitions whose ISR, ELR or
//!   last known leader holds it (or, unclean elections allowed, of which
//!   it is any replica).
//! - A leader's AlterPartition may change its ISR only from the leader and
//!   partition epochs the controller has now; the leader stays in the ISR.
//! - A change of `min.insync.replicas` empties the ELR and last known
//!   leader of the partitions it applies to (Kafka's `ClearElrRecord`).
//! - A leader change bumps the leader epoch; any change bumps the
//!   partition epoch (`PartitionInfo::apply_change`). An ISR change alone
//!   keeps the leader epoch, as Kafka's metadata versions since 3.6 do.
//!
//! Invariants kept, for every partition of an image built from these
//! records: a leader other than -1 is in the ISR and is not fenced, an
//! empty ISR has no leader, the ELR shares no member with the ISR, and
//! neither epoch ever decreases.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use tarn_config::BrokerConfig;
use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::Uuid;

use crate::image::{partition_in, ChangeFields, NO_LEADER};
use crate::{MetadataImage, MetadataRecord, PartitionInfo, TopicInfo};

/// The topic config (and its broker default) that allows electing a
/// leader from outside the ISR.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// The most leader elections one ElectLeaders request may commit (Kafka's
/// `MAX_RECORDS_PER_USER_OP`): the entry stays small enough to replicate
/// promptly.
pub const ELECTIONS_PER_REQUEST_MAX: usize = 10_000;
/// The most preferred-leader elections one rebalance commit carries
/// (Kafka's `maxElectionsPerImbalance`); a rebalance with more commits
/// again.
pub const REBALANCE_ELECTIONS_MAX: usize = 1_000;

/// A refused change: Kafka's error code and a message for the requester.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectionError {
    pub code: ErrorCode,
    pub message: String,
}

fn refuse<T>(code: ErrorCode, message: impl Into<String>) -> Result<T, ElectionError> {
    Err(ElectionError {
        code,
        message: message.into(),
    })
}

/// Whether `topic` may elect a leader from outside its ISR: the topic's
/// own config, else `config`, the controller's effective broker config
/// (its dynamic configs over its static ones).
pub fn unclean_election_enabled(config: &BrokerConfig, topic: &TopicInfo) -> bool {
    config.topic_value(&topic.configs, UNCLEAN_LEADER_ELECTION_ENABLE) == "true"
}

/// Whether `broker_id` is registered and unfenced in `image`.
fn is_unfenced(image: &MetadataImage, broker_id: i32) -> bool {
    image.brokers.get(&broker_id).is_some_and(|b| !b.fenced)
}

/// How an election may pick a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Election {
    /// From the ISR only.
    Clean,
    /// From the ISR, else any unfenced replica (losing what the ISR had).
    Unclean,
}

/// The fields of a `PartitionChange`, `None` where unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) leader: Option<i32>,
    pub(crate) isr: Option<Vec<i32>>,
    pub(crate) replicas: Option<Vec<i32>>,
    pub(crate) adding_replicas: Option<Vec<i32>>,
    pub(crate) removing_replicas: Option<Vec<i32>>,
    pub(crate) elr: Option<Vec<i32>>,
    pub(crate) last_known_elr: Option<Vec<i32>>,
}

impl Change {
    fn is_empty(&self) -> bool {
        self.leader.is_none()
            && self.isr.is_none()
            && self.replicas.is_none()
            && self.adding_replicas.is_none()
            && self.removing_replicas.is_none()
            && self.elr.is_none()
            && self.last_known_elr.is_none()
    }

    pub(crate) fn fields(&self) -> ChangeFields<'_> {
        ChangeFields {
            leader: self.leader,
            isr: self.isr.as_deref(),
            replicas: self.replicas.as_deref(),
            adding_replicas: self.adding_replicas.as_deref(),
            removing_replicas: self.removing_replicas.as_deref(),
            elr: self.elr.as_deref(),
            last_known_elr: self.last_known_elr.as_deref(),
        }
    }

    pub(crate) fn record(self, topic_id: Uuid, partition_id: i32) -> MetadataRecord {
        MetadataRecord::PartitionChange {
            topic_id: topic_id.0,
            partition_id,
            leader: self.leader,
            isr: self.isr,
            replicas: self.replicas,
            adding_replicas: self.adding_replicas,
            removing_replicas: self.removing_replicas,
            elr: self.elr,
            last_known_elr: self.last_known_elr,
        }
    }
}

/// What a change knows of eligible leader replicas (KIP-966): the
/// topic's effective `min.insync.replicas`, and a broker whose previous
/// process stopped uncleanly, which leaves every ISR and ELR.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ElrRules {
    pub(crate) min_isr: usize,
    pub(crate) unclean_shutdown: Option<i32>,
}

impl ElrRules {
    pub(crate) fn of(config: &BrokerConfig, topic: &TopicInfo) -> ElrRules {
        ElrRules {
            min_isr: effective_min_isr(config, topic),
            unclean_shutdown: None,
        }
    }
}

/// Kafka's effective `min.insync.replicas` of a topic as its controller
/// counts it: the topic's value (else the broker default), at most the
/// replication factor of its first partition.
pub fn effective_min_isr(config: &BrokerConfig, topic: &TopicInfo) -> usize {
    // Checked to be a positive integer when set; Kafka's default, 1, for
    // a value that is not (none is).
    let configured = config
        .topic_value(&topic.configs, MIN_INSYNC_REPLICAS)
        .parse::<usize>()
        .unwrap_or(1);
    let replication = topic.partitions.first().map_or(1, |p| p.replicas.len());
    configured.min(replication)
}

/// The topic config (and broker default) eligible leader replicas count
/// the ISR against.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";

/// Kafka's `maybePopulateTargetElr`: while the ISR is below min ISR, the
/// replicas that leave it (with those already eligible) are eligible
/// leader replicas, but for one whose process stopped uncleanly, which
/// may have lost records; at or above min ISR there are none.
fn target_elr(p: &PartitionInfo, target_isr: &[i32], rules: ElrRules) -> Vec<i32> {
    if target_isr.len() >= rules.min_isr {
        return Vec::new();
    }
    let mut elr: Vec<i32> = Vec::new();
    for r in p.elr.iter().chain(p.isr.iter()).copied() {
        if !elr.contains(&r)
            && !target_isr.contains(&r)
            && rules.unclean_shutdown != Some(r)
            && p.replicas.contains(&r)
        {
            elr.push(r);
        }
    }
    // Kafka collects them in a hash set of broker ids, which lists small
    // ids in ascending order.
    elr.sort_unstable();
    elr
}

/// Kafka's `maybeUpdateRecordElr` and `maybeUpdateLastKnownLeader` (with
/// the last known leader kept, as Kafka 4's controller does): records
/// `elr` when it differs; an emptied ISR remembers the leader it had, and
/// a partition that gets or keeps a leader forgets it. An unclean
/// election (the change sets the ISR to its new leader alone) clears the
/// ELR.
fn finish_elr(p: &PartitionInfo, change: &mut Change, mut elr: Vec<i32>, unclean: bool) {
    if unclean {
        elr.clear();
    }
    if elr != p.elr {
        change.elr = Some(elr);
    }
    let emptied = change.isr.as_ref().is_some_and(|isr| isr.is_empty());
    if emptied {
        if p.last_known_elr != [p.leader] {
            change.last_known_elr = Some(vec![p.leader]);
        }
    } else {
        let has_leader = match change.leader {
            Some(leader) => leader >= 0,
            None => p.has_leader(),
        };
        if has_leader && !p.last_known_elr.is_empty() {
            change.last_known_elr = Some(Vec::new());
        }
    }
}

/// The change that gives `partition` the ISR `target_isr` and a leader
/// that qualifies under it, `None` when nothing changes (Kafka's
/// `PartitionChangeBuilder` with eligible leader replicas, KIP-966).
/// `eligible` says which brokers may lead (unfenced ones, as the change
/// will leave them).
///
/// A leader is kept while it is in the ISR and eligible, else the first
/// replica that is goes; with the ISR empty, the first eligible leader
/// replica, whose ISR is then itself. With neither, the leader the
/// partition had when its ISR emptied leads again once eligible (what
/// Kafka 4 calls electing the last known leader: it may have lost records
/// an unclean stop took from it); then, where the topic allows unclean
/// elections, any eligible replica, with an ISR of itself.
fn plan_change(
    partition: &PartitionInfo,
    target_isr: Vec<i32>,
    election: Election,
    eligible: impl Fn(i32) -> bool,
    rules: ElrRules,
) -> Option<Change> {
    let mut target_isr = target_isr;
    let mut elr = target_elr(partition, &target_isr, rules);
    let valid = |r: i32, isr: &[i32], elr: &[i32]| {
        (isr.contains(&r) || (isr.is_empty() && elr.contains(&r))) && eligible(r)
    };
    let last_known = match partition.last_known_elr.as_slice() {
        [leader] if target_isr.is_empty() && elr.is_empty() && eligible(*leader) => Some(*leader),
        _ => None,
    };
    let (leader, unclean) = if partition.has_leader() && valid(partition.leader, &target_isr, &elr)
    {
        (partition.leader, false)
    } else if let Some(r) = partition
        .replicas
        .iter()
        .copied()
        .find(|r| valid(*r, &target_isr, &elr))
    {
        (r, false)
    } else if let Some(r) = last_known {
        (r, true)
    } else if election == Election::Unclean {
        match partition.replicas.iter().copied().find(|r| eligible(*r)) {
            Some(r) => (r, true),
            None => (NO_LEADER, false),
        }
    } else {
        (NO_LEADER, false)
    };
    let mut change = Change::default();
    if leader != partition.leader {
        change.leader = Some(leader);
        if elr.contains(&leader) {
            target_isr = vec![leader];
            elr.retain(|r| *r != leader);
        } else if unclean {
            tracing::warn!(
                partition = partition.partition_id,
                leader,
                "unclean leader election: records only the ISR had may be lost"
            );
            change.isr = Some(vec![leader]);
        }
    }
    let unclean = change.isr.is_some();
    if change.isr.is_none() && target_isr != partition.isr {
        change.isr = Some(target_isr);
    }
    finish_elr(partition, &mut change, elr, unclean);
    let change = elr_within_replicas(partition, change);
    (!change.is_empty()).then_some(change)
}

/// Keeps a change's eligible leader replicas and last known leader (its
/// own, or the partition's) among the replicas the change leaves: a
/// replica a reassignment removes deletes its log, and one added back
/// later starts empty, so it must never be elected from a stale ELR.
pub(crate) fn elr_within_replicas(p: &PartitionInfo, mut change: Change) -> Change {
    let replicas = change
        .replicas
        .clone()
        .unwrap_or_else(|| p.replicas.clone());
    let keep = |members: &[i32]| -> Vec<i32> {
        members
            .iter()
            .copied()
            .filter(|r| replicas.contains(r))
            .collect()
    };
    let elr = keep(change.elr.as_deref().unwrap_or(&p.elr));
    if elr != change.elr.as_deref().unwrap_or(&p.elr) {
        change.elr = Some(elr);
    }
    let last_known = change
        .last_known_elr
        .as_deref()
        .unwrap_or(&p.last_known_elr);
    if keep(last_known) != last_known {
        change.last_known_elr = Some(keep(last_known));
    }
    change
}

/// Gives a change planned without regard to eligible leader replicas
/// (a preferred leader, a leader's new ISR, a reassignment's end) the
/// ELR fields its ISR implies.
pub(crate) fn with_elr(p: &PartitionInfo, mut change: Change, rules: ElrRules) -> Change {
    let isr = change.isr.clone().unwrap_or_else(|| p.isr.clone());
    let elr = target_elr(p, &isr, rules);
    finish_elr(p, &mut change, elr, false);
    elr_within_replicas(p, change)
}

fn election_for(config: &BrokerConfig, topic: &TopicInfo) -> Election {
    if unclean_election_enabled(config, topic) {
        Election::Unclean
    } else {
        Election::Clean
    }
}

/// The changes that give each partition `affected` picks the ISR
/// `target` makes of its own and a leader among the brokers `eligible`
/// allows, under its topic's election rules.
fn plan_each(
    image: &MetadataImage,
    config: &BrokerConfig,
    unclean_shutdown: Option<i32>,
    affected: impl Fn(&PartitionInfo) -> bool,
    target: impl Fn(&PartitionInfo) -> Vec<i32>,
    eligible: impl Fn(i32) -> bool + Copy,
) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics() {
        let election = election_for(config, topic);
        let rules = ElrRules {
            unclean_shutdown,
            ..ElrRules::of(config, topic)
        };
        for p in topic.partitions.iter().filter(|p| affected(p)) {
            if let Some(change) = plan_change(p, target(p), election, eligible, rules) {
                records.push(change.record(topic.topic_id, p.partition_id));
            }
        }
    }
    records
}

/// The ISR of `p` without `broker_id`.
fn isr_without(p: &PartitionInfo, broker_id: i32) -> Vec<i32> {
    p.isr.iter().copied().filter(|r| *r != broker_id).collect()
}

/// The partition changes that follow from `broker_id` being fenced in
/// `after` (the image with the broker already fenced): it leaves every
/// ISR it is in and leads nothing. Empty when it is in no ISR and leads
/// nothing.
pub fn changes_for_fenced_broker(
    after: &MetadataImage,
    config: &BrokerConfig,
    broker_id: i32,
) -> Vec<MetadataRecord> {
    plan_each(
        after,
        config,
        None,
        |p| p.leader == broker_id || p.isr.contains(&broker_id),
        |p| isr_without(p, broker_id),
        |r| r != broker_id && is_unfenced(after, r),
    )
}

/// The elections that follow from `broker_id` being unfenced in `after`
/// (the image with the broker already unfenced): the leaderless
/// partitions it is a replica of get a leader if one qualifies now.
pub fn changes_for_unfenced_broker(
    after: &MetadataImage,
    config: &BrokerConfig,
    broker_id: i32,
) -> Vec<MetadataRecord> {
    plan_each(
        after,
        config,
        None,
        |p| !p.has_leader() && p.replicas.contains(&broker_id),
        |p| p.isr.clone(),
        |r| is_unfenced(after, r),
    )
}

/// The partition changes that follow from `broker_id` registering after
/// its previous process stopped uncleanly (it left no clean-shutdown
/// marker naming its registration): it may have lost records it had
/// acknowledged, so it leaves every ISR and every ELR it is in (Kafka's
/// `handleBrokerUncleanShutdown`), and leads nothing it was elected to
/// from them. `image` holds its new (fenced) registration.
pub fn changes_for_unclean_shutdown(
    image: &MetadataImage,
    config: &BrokerConfig,
    broker_id: i32,
) -> Vec<MetadataRecord> {
    plan_each(
        image,
        config,
        Some(broker_id),
        |p| p.isr.contains(&broker_id) || p.elr.contains(&broker_id),
        |p| isr_without(p, broker_id),
        |r| r != broker_id && is_unfenced(image, r),
    )
}

/// The changes that empty the ELR and last known leader of every
/// partition of the topic `only` (every topic when `None`) that has
/// either: a change of `min.insync.replicas` invalidates them, as Kafka's
/// `ClearElrRecord` does.
pub fn clear_elr(image: &MetadataImage, only: Option<Uuid>) -> Vec<MetadataRecord> {
    image
        .topics()
        .filter(|t| only.is_none_or(|id| t.topic_id == id))
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| !p.elr.is_empty() || !p.last_known_elr.is_empty())
                .map(|p| {
                    Change {
                        elr: Some(Vec::new()),
                        last_known_elr: Some(Vec::new()),
                        ..Change::default()
                    }
                    .record(t.topic_id, p.partition_id)
                })
        })
        .collect()
}

/// The partitions `broker_id` leads in `image`.
pub fn led_by(image: &MetadataImage, broker_id: i32) -> usize {
    image
        .topics()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.leader == broker_id)
        .count()
}

/// A partition's state as AlterPartition answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

impl From<&PartitionInfo> for PartitionState {
    fn from(p: &PartitionInfo) -> Self {
        PartitionState {
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: p.isr.clone(),
        }
    }
}

/// A leader's request to change a partition's ISR (Kafka's AlterPartition,
/// one partition of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterPartition {
    pub broker_id: i32,
    pub broker_epoch: i64,
    pub topic_id: [u8; 16],
    pub partition_id: i32,
    /// The leader and partition epochs the leader holds.
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
    /// The broker epoch each member of `new_isr` last fetched with, as
    /// the leader saw it, in the same order; -1 (or no entry) where it
    /// saw none, which is not checked (KIP-903).
    #[serde(default)]
    pub new_isr_epochs: Vec<i64>,
}

/// Checks `request` as Kafka's `ReplicationControlManager.alterPartition`
/// does, in its order, and returns the record that makes the new ISR (none
/// when it is the current one) with the partition's state after it.
///
/// Refusals: STALE_BROKER_EPOCH for a registration that is not current;
/// UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION; NOT_CONTROLLER when the
/// request holds newer epochs than this image (this node must have lost
/// the lead); FENCED_LEADER_EPOCH for an older leader epoch;
/// INVALID_REQUEST when the requester does not lead the partition;
/// INVALID_UPDATE_VERSION for an older partition epoch; INVALID_REQUEST
/// for an ISR that is empty, repeats a broker, names a non-replica or
/// lacks the leader; INELIGIBLE_REPLICA when a member is not registered,
/// is fenced, or is registered with another broker epoch than the one
/// its fetches to the leader carried (KIP-903: a stale fetch of an
/// earlier incarnation must not bring a restarted broker, which may have
/// lost records, back into the ISR).
pub fn alter_partition(
    image: &MetadataImage,
    config: &BrokerConfig,
    request: &AlterPartition,
) -> Result<(Vec<MetadataRecord>, PartitionState), ElectionError> {
    let AlterPartition {
        broker_id,
        broker_epoch,
        partition_id,
        leader_epoch,
        partition_epoch,
        ..
    } = *request;
    crate::brokers::check_epoch(image, broker_id, broker_epoch).map_err(|e| ElectionError {
        code: e.code,
        message: e.message,
    })?;
    let topic_id = Uuid(request.topic_id);
    let Some(topic) = image.topic_by_id(&topic_id).filter(|_| !topic_id.is_zero()) else {
        return refuse(
            error::UNKNOWN_TOPIC_ID,
            format!("no topic has id {topic_id}"),
        );
    };
    let name = &topic.name;
    let Some(p) = partition_in(topic, partition_id) else {
        return refuse(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            format!("{name} has no partition {partition_id}"),
        );
    };
    if leader_epoch > p.leader_epoch || partition_epoch > p.partition_epoch {
        return refuse(
            error::NOT_CONTROLLER,
            format!(
                "{name}-{partition_id}: the request holds leader epoch {leader_epoch} and partition epoch {partition_epoch}, newer than this controller's {} and {}",
                p.leader_epoch, p.partition_epoch
            ),
        );
    }
    if leader_epoch < p.leader_epoch {
        return refuse(
            error::FENCED_LEADER_EPOCH,
            format!(
                "{name}-{partition_id}: leader epoch {leader_epoch} is older than the current {}",
                p.leader_epoch
            ),
        );
    }
    if broker_id != p.leader {
        return refuse(
            error::INVALID_REQUEST,
            format!(
                "{name}-{partition_id}: broker {broker_id} does not lead it; its leader is {}",
                p.leader
            ),
        );
    }
    if partition_epoch < p.partition_epoch {
        return refuse(
            error::INVALID_UPDATE_VERSION,
            format!(
                "{name}-{partition_id}: partition epoch {partition_epoch} is older than the current {}",
                p.partition_epoch
            ),
        );
    }
    check_new_isr(image, p, &request.new_isr, &request.new_isr_epochs).map_err(|(code, why)| {
        ElectionError {
            code,
            message: format!("{name}-{partition_id}: {why}"),
        }
    })?;
    if request.new_isr == p.isr {
        return Ok((Vec::new(), PartitionState::from(p)));
    }
    // The ISR that takes in a reassignment's last adding replica also
    // completes it, in the same change (as Kafka's controller does).
    let change = crate::reassignments::completion(image, p, &request.new_isr).unwrap_or(Change {
        isr: Some(request.new_isr.clone()),
        ..Change::default()
    });
    let change = with_elr(p, change, ElrRules::of(config, topic));
    let mut after = p.clone();
    after.apply_change(&change.fields());
    Ok((
        vec![change.record(topic_id, partition_id)],
        PartitionState::from(&after),
    ))
}

/// Kafka's checks of a new ISR: its members distinct replicas, the leader
/// among them, every member registered and unfenced, and registered with
/// the broker epoch the leader saw (`epochs`, where it gives one).
fn check_new_isr(
    image: &MetadataImage,
    p: &PartitionInfo,
    new_isr: &[i32],
    epochs: &[i64],
) -> Result<(), (ErrorCode, String)> {
    for (i, member) in new_isr.iter().enumerate() {
        if new_isr[..i].contains(member) {
            return Err((
                error::INVALID_REQUEST,
                format!("the new ISR {new_isr:?} names broker {member} twice"),
            ));
        }
        if !p.replicas.contains(member) {
            return Err((
                error::INVALID_REQUEST,
                format!(
                    "the new ISR {new_isr:?} names broker {member}, which is not a replica of {:?}",
                    p.replicas
                ),
            ));
        }
    }
    if !new_isr.contains(&p.leader) {
        return Err((
            error::INVALID_REQUEST,
            format!(
                "the new ISR {new_isr:?} does not include the leader {}",
                p.leader
            ),
        ));
    }
    for (i, member) in new_isr.iter().enumerate() {
        let seen = epochs.get(i).copied().unwrap_or(-1);
        if let Some(why) = isr_ineligibility(image, *member, seen) {
            return Err((
                error::INELIGIBLE_REPLICA,
                format!("the new ISR {new_isr:?} names broker {member}, which is {why}"),
            ));
        }
    }
    Ok(())
}

/// Why broker `member` may not be in an ISR, if it may not: it is not
/// registered, is fenced, or is registered with another broker epoch than
/// `seen_epoch`, the one its fetches carried to the leader (-1: unknown,
/// not checked; KIP-903). Leaders ask it before sending an ISR change.
pub fn isr_ineligibility(image: &MetadataImage, member: i32, seen_epoch: i64) -> Option<String> {
    match image.brokers.get(&member) {
        None => Some("not registered".to_owned()),
        Some(b) if b.fenced => Some("fenced".to_owned()),
        Some(b) if seen_epoch >= 0 && seen_epoch != b.broker_epoch => Some(format!(
            "registered with broker epoch {}, not the epoch {seen_epoch} its fetches carried",
            b.broker_epoch
        )),
        Some(_) => None,
    }
}

/// ElectLeaders' election types, by their wire ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// 0: the first replica leads, if it is in the ISR and unfenced.
    Preferred,
    /// 1: a leaderless partition gets an ISR member, else any unfenced
    /// replica.
    Unclean,
}

impl ElectionType {
    pub fn from_id(id: i8) -> Option<ElectionType> {
        match id {
            0 => Some(ElectionType::Preferred),
            1 => Some(ElectionType::Unclean),
            _ => None,
        }
    }

    pub fn id(self) -> i8 {
        match self {
            ElectionType::Preferred => 0,
            ElectionType::Unclean => 1,
        }
    }

    /// Kafka's name, as kafka-leader-election.sh prints it.
    pub fn name(self) -> &'static str {
        match self {
            ElectionType::Preferred => "PREFERRED",
            ElectionType::Unclean => "UNCLEAN",
        }
    }
}

/// One partition's answer to an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionElection {
    pub topic: String,
    pub partition_id: i32,
    pub code: ErrorCode,
    /// Kafka's message for the code; none on success.
    pub message: Option<String>,
}

/// What an ElectLeaders request does: the records to commit and one
/// answer per partition, in request order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ElectionOutcome {
    pub records: Vec<MetadataRecord>,
    pub results: Vec<PartitionElection>,
}

/// Runs `election` for `partitions` (topic, partition), or for every
/// partition when `None`: then, as in Kafka, partitions that need no
/// election are left out of the answer. A partition named twice is
/// elected once. More than [`ELECTIONS_PER_REQUEST_MAX`] elections refuse
/// the whole request.
pub fn elect_leaders(
    image: &MetadataImage,
    config: &BrokerConfig,
    election: ElectionType,
    partitions: Option<&[(String, i32)]>,
) -> Result<ElectionOutcome, ElectionError> {
    let all: Vec<(String, i32)>;
    let (named, skip_not_needed) = match partitions {
        Some(named) => (named, false),
        None => {
            all = image
                .topics()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| (t.name.clone(), p.partition_id))
                })
                .collect();
            (all.as_slice(), true)
        }
    };
    let outcome = match election {
        ElectionType::Preferred => elect_preferred(image, named),
        ElectionType::Unclean => elect_unclean(image, config, named),
    };
    if outcome.records.len() > ELECTIONS_PER_REQUEST_MAX {
        return refuse(
            error::INVALID_REQUEST,
            format!(
                "the request would elect {} leaders; at most {ELECTIONS_PER_REQUEST_MAX} may be elected at once",
                outcome.records.len()
            ),
        );
    }
    let mut outcome = outcome;
    if skip_not_needed {
        outcome
            .results
            .retain(|r| r.code != error::ELECTION_NOT_NEEDED);
    }
    Ok(outcome)
}

/// Preferred-leader elections (ElectLeaders type 0): the first replica
/// leads when it is in the ISR and unfenced; ELECTION_NOT_NEEDED when it
/// leads already, PREFERRED_LEADER_NOT_AVAILABLE otherwise.
pub fn elect_preferred(image: &MetadataImage, partitions: &[(String, i32)]) -> ElectionOutcome {
    elect_each(image, partitions, |image, _, p| {
        let preferred = p.preferred_leader().unwrap_or(NO_LEADER);
        if p.leader == preferred {
            return Err(error::ELECTION_NOT_NEEDED);
        }
        if p.isr.contains(&preferred) && is_unfenced(image, preferred) {
            Ok(Change {
                leader: Some(preferred),
                ..Change::default()
            })
        } else {
            Err(error::PREFERRED_LEADER_NOT_AVAILABLE)
        }
    })
}

/// Unclean elections (ElectLeaders type 1), for leaderless partitions
/// only: an unfenced ISR member leads, else any unfenced replica with an
/// ISR of itself; ELECTION_NOT_NEEDED when the partition has a leader,
/// ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is unfenced.
pub fn elect_unclean(
    image: &MetadataImage,
    config: &BrokerConfig,
    partitions: &[(String, i32)],
) -> ElectionOutcome {
    elect_each(image, partitions, |image, topic, p| {
        if p.has_leader() {
            return Err(error::ELECTION_NOT_NEEDED);
        }
        let rules = ElrRules::of(config, topic);
        plan_change(
            p,
            p.isr.clone(),
            Election::Unclean,
            |r| is_unfenced(image, r),
            rules,
        )
        .filter(|c| c.leader.is_some())
        .ok_or(error::ELIGIBLE_LEADERS_NOT_AVAILABLE)
    })
}

/// Kafka's default message for the codes elections answer with.
fn election_message(code: ErrorCode) -> Option<&'static str> {
    Some(match code {
        error::ELECTION_NOT_NEEDED => "Leader election not needed for topic partition.",
        error::PREFERRED_LEADER_NOT_AVAILABLE => "The preferred leader was not available.",
        error::ELIGIBLE_LEADERS_NOT_AVAILABLE => {
            "Eligible topic partition leaders are not available."
        }
        _ => return None,
    })
}

/// Plans `elect` for each named partition against an image that already
/// holds the earlier ones' changes, so a partition named twice is
/// elected once.
fn elect_each(
    image: &MetadataImage,
    partitions: &[(String, i32)],
    elect: impl Fn(&MetadataImage, &TopicInfo, &PartitionInfo) -> Result<Change, ErrorCode>,
) -> ElectionOutcome {
    let mut working = image.clone();
    let mut outcome = ElectionOutcome::default();
    for (topic, partition_id) in partitions {
        let answer = |code: ErrorCode, message: Option<String>| PartitionElection {
            topic: topic.clone(),
            partition_id: *partition_id,
            code,
            message,
        };
        let found = working
            .topic(topic)
            .map(|t| (t.clone(), partition_in(t, *partition_id).cloned()));
        let (info, p) = match found {
            Some((info, Some(p))) => (info, p),
            Some((_, None)) => {
                let message = format!("No such partition as {topic}-{partition_id}");
                outcome
                    .results
                    .push(answer(error::UNKNOWN_TOPIC_OR_PARTITION, Some(message)));
                continue;
            }
            None => {
                let message = format!("No such topic as {topic}");
                outcome
                    .results
                    .push(answer(error::UNKNOWN_TOPIC_OR_PARTITION, Some(message)));
                continue;
            }
        };
        // The topic is not borrowed here, so applying the change copies it
        // at most once per topic.
        match elect(&working, &info, &p) {
            Ok(change) => {
                let record = change.record(info.topic_id, *partition_id);
                working.apply(&record);
                outcome.records.push(record);
                outcome.results.push(answer(error::NONE, None));
            }
            Err(code) => {
                let message = election_message(code).map(str::to_owned);
                outcome.results.push(answer(code, message));
            }
        }
    }
    outcome
}

/// One broker's share of the partitions it is the preferred leader of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderImbalance {
    /// Partitions whose first replica is this broker.
    pub preferred: usize,
    /// Of those, the ones it does not lead (another broker or none does).
    pub not_led: Vec<(String, i32)>,
}

impl LeaderImbalance {
    /// The share not led, as a percentage.
    pub fn percentage(&self) -> f64 {
        if self.preferred == 0 {
            return 0.0;
        }
        self.not_led.len() as f64 * 100.0 / self.preferred as f64
    }
}

/// Every broker's leader imbalance, as Kafka's controller measures it
/// for auto leader rebalancing.
pub fn leader_imbalance(image: &MetadataImage) -> BTreeMap<i32, LeaderImbalance> {
    let mut by_broker: BTreeMap<i32, LeaderImbalance> = BTreeMap::new();
    for topic in image.topics() {
        for p in &topic.partitions {
            let Some(preferred) = p.preferred_leader() else {
                continue;
            };
            let entry = by_broker.entry(preferred).or_default();
            entry.preferred += 1;
            if p.leader != preferred {
                entry.not_led.push((topic.name.clone(), p.partition_id));
            }
        }
    }
    by_broker
}

/// The preferred-leader elections an auto rebalance commits: for every
/// broker whose imbalance is above `imbalance_percentage_max`
/// (`leader.imbalance.per.broker.percentage`), the partitions it prefers
/// and could lead now, at most [`REBALANCE_ELECTIONS_MAX`] of them.
pub fn rebalance_leaders(
    image: &MetadataImage,
    imbalance_percentage_max: i64,
) -> Vec<MetadataRecord> {
    let candidates: Vec<(String, i32)> = leader_imbalance(image)
        .into_values()
        .filter(|b| b.percentage() > imbalance_percentage_max as f64)
        .flat_map(|b| b.not_led)
        .collect();
    let mut outcome = elect_preferred(image, &candidates);
    outcome.records.truncate(REBALANCE_ELECTIONS_MAX);
    outcome.records
}

/// Unclean elections for the leaderless partitions of topics that allow
/// them: what Kafka's controller runs periodically, so a topic whose
/// config was changed to allow them gets its partitions back.
pub fn elect_unclean_where_enabled(
    image: &MetadataImage,
    config: &BrokerConfig,
) -> Vec<MetadataRecord> {
    let leaderless: Vec<(String, i32)> = image
        .topics()
        .filter(|t| unclean_election_enabled(config, t))
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| !p.has_leader())
                .map(|p| (t.name.clone(), p.partition_id))
        })
        .collect();
    let mut outcome = elect_unclean(image, config, &leaderless);
    outcome.records.truncate(ELECTIONS_PER_REQUEST_MAX);
    outcome.records
}

/// The partition changes that bring every fenced broker's partitions in
/// line: none once fencing has always come with its elections, but a log
/// written before it did can hold fenced leaders.
pub fn changes_for_fenced_brokers(
    image: &MetadataImage,
    config: &BrokerConfig,
) -> Vec<MetadataRecord> {
    let mut working = image.clone();
    let mut records = Vec::new();
    let fenced: Vec<i32> = image
        .brokers
        .values()
        .filter(|b| b.fenced)
        .map(|b| b.broker_id)
        .collect();
    for broker_id in fenced {
        for record in changes_for_fenced_broker(&working, config, broker_id) {
            working.apply(&record);
            records.push(record);
        }
    }
    records
}

/// What the active controller's periodic check commits, in one entry:
/// leadership moved off fenced brokers (`changes_for_fenced_brokers`),
/// unclean elections where topics allow them, then, with
/// `rebalance_percentage_max` given (`auto.leader.rebalance.enable`), at
/// most [`REBALANCE_ELECTIONS_MAX`] preferred-leader elections. Each step
/// plans against the image the earlier ones leave.
pub fn periodic_elections(
    image: &MetadataImage,
    config: &BrokerConfig,
    rebalance_percentage_max: Option<i64>,
) -> Vec<MetadataRecord> {
    let mut working = image.clone();
    let mut records = Vec::new();
    let mut take = |working: &mut MetadataImage, step: Vec<MetadataRecord>| {
        for record in step {
            working.apply(&record);
            records.push(record);
        }
    };
    let step = changes_for_fenced_brokers(&working, config);
    take(&mut working, step);
    let step = elect_unclean_where_enabled(&working, config);
    take(&mut working, step);
    if let Some(percentage) = rebalance_percentage_max {
        let step = rebalance_leaders(&working, percentage);
        take(&mut working, step);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: [u8; 16] = [1; 16];

    /// Brokers 1..=n, those in `fenced` fenced, all at epoch 5, and topic
    /// "t" with partitions given as (replicas, ISR, leader), every epoch 0.
    fn image(n: i32, fenced: &[i32], partitions: &[(&[i32], &[i32], i32)]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for broker_id in 1..=n {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id,
                host: "h".into(),
                port: 9092,
                rack: None,
                incarnation_id: [broker_id as u8; 16],
                broker_epoch: 5,
                listeners: vec![],
                fenced: fenced.contains(&broker_id),
            });
        }
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: T,
        });
        for (partition_id, (replicas, isr, leader)) in (0..).zip(partitions) {
            image.apply(&MetadataRecord::Partition {
                topic_id: T,
                partition_id,
                replicas: replicas.to_vec(),
                isr: isr.to_vec(),
                leader: *leader,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
                elr: Vec::new(),
                last_known_elr: Vec::new(),
            });
        }
        image
    }

    fn set_topic_config(image: &mut MetadataImage, key: &str, value: &str) {
        image.apply(&MetadataRecord::TopicConfig {
            topic_id: T,
            name: key.into(),
            value: Some(value.into()),
        });
    }

    fn applied(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut after = image.clone();
        for record in records {
            after.apply(record);
        }
        assert_invariants(&after);
        after
    }

    /// (leader, leader epoch, partition epoch, ISR) of t-`partition`.
    fn state(image: &MetadataImage, partition: i32) -> (i32, i32, i32, Vec<i32>) {
        let p = image.partition(&Uuid(T), partition).expect("a partition");
        (p.leader, p.leader_epoch, p.partition_epoch, p.isr.clone())
    }

    fn assert_invariants(image: &MetadataImage) {
        for t in image.topics() {
            for p in &t.partitions {
                assert!(
                    !p.isr.is_empty() || !p.has_leader(),
                    "{}-{}: led with an empty ISR",
                    t.name,
                    p.partition_id
                );
                assert!(
                    p.elr.iter().all(|r| !p.isr.contains(r)),
                    "{}-{}: ELR {:?} shares a member with ISR {:?}",
                    t.name,
                    p.partition_id,
                    p.elr,
                    p.isr
                );
                if p.has_leader() {
                    assert!(
                        p.isr.contains(&p.leader),
                        "{}-{}: leader {} outside ISR {:?}",
                        t.name,
                        p.partition_id,
                        p.leader,
                        p.isr
                    );
                    assert!(
                        is_unfenced(image, p.leader),
                        "{}-{}: led by fenced {}",
                        t.name,
                        p.partition_id,
                        p.leader
                    );
                }
            }
        }
    }

    fn defaults() -> BrokerConfig {
        BrokerConfig::default()
    }

    fn unclean_by_default() -> BrokerConfig {
        BrokerConfig::with_overrides([(UNCLEAN_LEADER_ELECTION_ENABLE, "true")]).unwrap()
    }

    #[test]
    fn a_fenced_leader_gives_way_to_the_first_isr_replica_in_replica_order() {
        // The ISR lists 3 before 2; the replica order decides.
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 3, 2], 1)]);
        let records = crate::brokers::fence(&before, &defaults(), 1, 5);
        assert_eq!(
            records[0],
            MetadataRecord::FenceBroker {
                broker_id: 1,
                broker_epoch: 5
            }
        );
        assert_eq!(
            records[1..],
            [MetadataRecord::PartitionChange {
                topic_id: T,
                partition_id: 0,
                leader: Some(2),
                isr: Some(vec![3, 2]),
                replicas: None,
                adding_replicas: None,
                removing_replicas: None,
                elr: None,
                last_known_elr: None,
            }]
        );
        let after = applied(&before, &records);
        assert_eq!(state(&after, 0), (2, 1, 1, vec![3, 2]));
        // Fencing again finds nothing left to change.
        assert!(crate::brokers::fence(&after, &defaults(), 1, 5).is_empty());
    }

    #[test]
    fn a_fenced_replica_is_never_elected() {
        // Broker 2 is fenced but still in the ISR (as a log from before
        // elections may hold): broker 3 leads.
        let before = image(3, &[2], &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let after = applied(&before, &crate::brokers::fence(&before, &defaults(), 1, 5));
        assert_eq!(state(&after, 0).0, 3);
    }

    #[test]
    fn a_fenced_follower_leaves_the_isr_and_the_leader_epoch_stays() {
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let after = applied(&before, &crate::brokers::fence(&before, &defaults(), 3, 5));
        assert_eq!(state(&after, 0), (1, 0, 1, vec![1, 2]));
    }

    #[test]
    fn the_last_isr_member_becomes_eligible_and_the_partition_goes_leaderless() {
        let before = image(2, &[], &[(&[1, 2], &[1], 1), (&[2, 1], &[2, 1], 2)]);
        let after = applied(&before, &crate::brokers::fence(&before, &defaults(), 1, 5));
        assert_eq!(state(&after, 0), (NO_LEADER, 1, 1, vec![]));
        assert_eq!(elr(&after, 0), (vec![1], vec![1]));
        // At min ISR (1) a partition keeps no ELR.
        assert_eq!(state(&after, 1), (2, 0, 1, vec![2]));
        assert_eq!(elr(&after, 1), (vec![], vec![]));
        assert_eq!(led_by(&after, 1), 0);
    }

    /// (ELR, last known leader) of t-`partition`.
    fn elr(image: &MetadataImage, partition: i32) -> (Vec<i32>, Vec<i32>) {
        let p = image.partition(&Uuid(T), partition).expect("a partition");
        (p.elr.clone(), p.last_known_elr.clone())
    }

    fn min_isr(n: &str) -> BrokerConfig {
        BrokerConfig::with_overrides([(MIN_INSYNC_REPLICAS, n)]).unwrap()
    }

    #[test]
    fn replicas_leaving_an_isr_below_min_isr_are_eligible_and_one_leads_it_again() {
        let config = min_isr("2");
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let after = applied(&before, &crate::brokers::fence(&before, &config, 3, 5));
        assert_eq!(state(&after, 0), (1, 0, 1, vec![1, 2]));
        assert_eq!(elr(&after, 0), (vec![], vec![]));
        let after = applied(&after, &crate::brokers::fence(&after, &config, 2, 5));
        assert_eq!(state(&after, 0), (1, 0, 2, vec![1]));
        assert_eq!(elr(&after, 0), (vec![2], vec![]));
        let after = applied(&after, &crate::brokers::fence(&after, &config, 1, 5));
        assert_eq!(state(&after, 0), (NO_LEADER, 1, 3, vec![]));
        assert_eq!(elr(&after, 0), (vec![1, 2], vec![1]));
        // Broker 2 comes back from a clean stop: it holds every committed
        // record, so it leads, with an ISR of itself.
        let after = applied(&after, &crate::brokers::unfence(&after, &config, 2, 5));
        assert_eq!(state(&after, 0), (2, 2, 4, vec![2]));
        assert_eq!(elr(&after, 0), (vec![1], vec![]));
        // Its ISR reaching min ISR empties the ELR.
        let after = applied(&after, &crate::brokers::unfence(&after, &config, 1, 5));
        let request = AlterPartition {
            broker_id: 2,
            ..alter(2, 4, &[2, 1])
        };
        let (records, _) = alter_partition(&after, &config, &request).unwrap();
        let after = applied(&after, &records);
        assert_eq!(state(&after, 0), (2, 2, 5, vec![2, 1]));
        assert_eq!(elr(&after, 0), (vec![], vec![]));
    }

    #[test]
    fn a_leader_shrinking_its_isr_below_min_isr_makes_the_others_eligible() {
        let config = min_isr("3");
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let (records, state_after) = alter_partition(&before, &config, &alter(0, 0, &[1])).unwrap();
        let after = applied(&before, &records);
        assert_eq!(state_after.isr, vec![1]);
        assert_eq!(elr(&after, 0), (vec![2, 3], vec![]));
        // min.insync.replicas at most the replication factor: 5 counts as 3.
        let (records, _) = alter_partition(&before, &min_isr("5"), &alter(0, 0, &[1, 2])).unwrap();
        assert_eq!(elr(&applied(&before, &records), 0), (vec![3], vec![]));
    }

    #[test]
    fn an_unclean_stop_leaves_the_elr_and_the_last_known_leader_leads_when_nothing_else_can() {
        let config = min_isr("2");
        let mut working = image(2, &[], &[(&[1, 2], &[1, 2], 1)]);
        for broker in [2, 1] {
            working = applied(
                &working,
                &crate::brokers::fence(&working, &config, broker, 5),
            );
        }
        assert_eq!(state(&working, 0), (NO_LEADER, 1, 2, vec![]));
        assert_eq!(elr(&working, 0), (vec![1, 2], vec![1]));
        // Broker 2 registers after an unclean stop: it leaves the ELR, and
        // coming back it may not lead.
        let records = changes_for_unclean_shutdown(&working, &config, 2);
        working = applied(&working, &records);
        assert_eq!(elr(&working, 0), (vec![1], vec![1]));
        working = applied(&working, &crate::brokers::unfence(&working, &config, 2, 5));
        assert_eq!(state(&working, 0), (NO_LEADER, 1, 3, vec![]));
        // Broker 1 too: ISR and ELR are empty, and broker 1, the last
        // leader, leads again once unfenced, with an ISR of itself.
        working = applied(
            &working,
            &changes_for_unclean_shutdown(&working, &config, 1),
        );
        assert_eq!(elr(&working, 0), (vec![], vec![1]));
        working = applied(&working, &crate::brokers::unfence(&working, &config, 1, 5));
        assert_eq!(state(&working, 0), (1, 2, 5, vec![1]));
        assert_eq!(elr(&working, 0), (vec![], vec![]));
    }

    #[test]
    fn a_replica_a_change_removes_leaves_the_elr_and_the_last_known_leader() {
        let config = min_isr("3");
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let (records, _) = alter_partition(&before, &config, &alter(0, 0, &[1])).unwrap();
        let p = applied(&before, &records)
            .partition(&Uuid(T), 0)
            .unwrap()
            .clone();
        assert_eq!(p.elr, [2, 3]);
        let moved = elr_within_replicas(
            &p,
            Change {
                replicas: Some(vec![1, 2]),
                ..Change::default()
            },
        );
        assert_eq!(moved.elr, Some(vec![2]));
        assert_eq!(moved.last_known_elr, None);
        let p = PartitionInfo {
            last_known_elr: vec![3],
            ..p
        };
        let moved = elr_within_replicas(
            &p,
            Change {
                replicas: Some(vec![1, 2]),
                ..Change::default()
            },
        );
        assert_eq!(moved.last_known_elr, Some(vec![]));
        // Replicas unchanged: nothing to drop.
        assert!(elr_within_replicas(&p, Change::default()).is_empty());
    }

    #[test]
    fn an_unclean_stop_takes_a_broker_out_of_every_isr_it_is_still_in() {
        let before = image(
            3,
            &[],
            &[(&[1, 2, 3], &[1, 2, 3], 1), (&[2, 3], &[2, 3], 2)],
        );
        let after = applied(
            &before,
            &changes_for_unclean_shutdown(&before, &defaults(), 2),
        );
        assert_eq!(state(&after, 0), (1, 0, 1, vec![1, 3]));
        assert_eq!(state(&after, 1), (3, 1, 1, vec![3]));
        assert!(changes_for_unclean_shutdown(&before, &defaults(), 4).is_empty());
    }

    #[test]
    fn a_change_of_min_isr_clears_the_elr_of_the_topics_it_applies_to() {
        let config = min_isr("2");
        let before = image(2, &[], &[(&[1, 2], &[1, 2], 1)]);
        let after = applied(&before, &crate::brokers::fence(&before, &config, 2, 5));
        assert_eq!(elr(&after, 0), (vec![2], vec![]));
        assert!(clear_elr(&after, Some(Uuid([9; 16]))).is_empty());
        let cleared = applied(&after, &clear_elr(&after, Some(Uuid(T))));
        assert_eq!(elr(&cleared, 0), (vec![], vec![]));
        assert_eq!(clear_elr(&after, None), clear_elr(&after, Some(Uuid(T))));
        assert!(clear_elr(&cleared, None).is_empty());
    }

    #[test]
    fn unclean_elections_take_any_unfenced_replica_when_the_topic_allows_them() {
        let mut before = image(3, &[3], &[(&[1, 3, 2], &[1], 1)]);
        set_topic_config(&mut before, UNCLEAN_LEADER_ELECTION_ENABLE, "true");
        let after = applied(&before, &crate::brokers::fence(&before, &defaults(), 1, 5));
        assert_eq!(state(&after, 0), (2, 1, 1, vec![2]));
    }

    #[test]
    fn the_broker_default_allows_unclean_elections_unless_the_topic_says_no() {
        let before = image(2, &[], &[(&[1, 2], &[1], 1)]);
        let after = applied(
            &before,
            &crate::brokers::fence(&before, &unclean_by_default(), 1, 5),
        );
        assert_eq!(state(&after, 0), (2, 1, 1, vec![2]));

        let mut before = before;
        set_topic_config(&mut before, UNCLEAN_LEADER_ELECTION_ENABLE, "false");
        let after = applied(
            &before,
            &crate::brokers::fence(&before, &unclean_by_default(), 1, 5),
        );
        assert_eq!(state(&after, 0), (NO_LEADER, 1, 1, vec![]));
    }

    #[test]
    fn an_old_registration_fences_nothing() {
        let before = image(2, &[], &[(&[1, 2], &[1, 2], 1)]);
        assert!(crate::brokers::fence(&before, &defaults(), 1, 4).is_empty());
    }

    #[test]
    fn an_unfenced_broker_leads_the_partitions_that_waited_for_it() {
        let before = image(2, &[], &[(&[1, 2], &[1], 1), (&[2, 1], &[2, 1], 2)]);
        let fenced = applied(&before, &crate::brokers::fence(&before, &defaults(), 1, 5));
        let records = crate::brokers::unfence(&fenced, &defaults(), 1, 5);
        assert_eq!(
            records[0],
            MetadataRecord::UnfenceBroker {
                broker_id: 1,
                broker_epoch: 5
            }
        );
        let after = applied(&fenced, &records);
        assert_eq!(state(&after, 0), (1, 2, 2, vec![1]));
        // A partition with a leader keeps it; the broker rejoins its ISR
        // through the leader's AlterPartition, not here.
        assert_eq!(state(&after, 1), (2, 0, 1, vec![2]));
    }

    #[test]
    fn an_unfenced_replica_outside_the_isr_leads_only_with_unclean_elections() {
        // t-0 lost its only ISR member, broker 2, which is gone for good.
        let before = image(2, &[1, 2], &[(&[2, 1], &[2], NO_LEADER)]);
        let after = applied(
            &before,
            &crate::brokers::unfence(&before, &defaults(), 1, 5),
        );
        assert_eq!(state(&after, 0), (NO_LEADER, 0, 0, vec![2]));
        let after = applied(
            &before,
            &crate::brokers::unfence(&before, &unclean_by_default(), 1, 5),
        );
        assert_eq!(state(&after, 0), (1, 1, 1, vec![1]));
    }

    fn alter(leader_epoch: i32, partition_epoch: i32, new_isr: &[i32]) -> AlterPartition {
        AlterPartition {
            broker_id: 1,
            broker_epoch: 5,
            topic_id: T,
            partition_id: 0,
            leader_epoch,
            partition_epoch,
            new_isr: new_isr.to_vec(),
            new_isr_epochs: Vec::new(),
        }
    }

    #[test]
    fn alter_partition_shrinks_and_expands_the_isr_bumping_the_partition_epoch_only() {
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let (records, state_after) =
            alter_partition(&before, &defaults(), &alter(0, 0, &[1, 3])).unwrap();
        let shrunk = applied(&before, &records);
        assert_eq!(state(&shrunk, 0), (1, 0, 1, vec![1, 3]));
        assert_eq!(
            state_after,
            PartitionState {
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 1,
                isr: vec![1, 3]
            }
        );
        let (records, _) = alter_partition(&shrunk, &defaults(), &alter(0, 1, &[1, 3, 2])).unwrap();
        let expanded = applied(&shrunk, &records);
        assert_eq!(state(&expanded, 0), (1, 0, 2, vec![1, 3, 2]));
        // The same ISR again: the current state, nothing to commit.
        let (records, same) =
            alter_partition(&expanded, &defaults(), &alter(0, 2, &[1, 3, 2])).unwrap();
        assert!(records.is_empty());
        assert_eq!(same.partition_epoch, 2);
    }

    #[test]
    fn alter_partition_refuses_with_kafkas_codes() {
        let mut before = image(4, &[3], &[(&[1, 2, 3], &[1, 2], 1)]);
        // Partition epoch 1 and leader epoch 1 on top of 0.
        before.apply(&MetadataRecord::PartitionChange {
            topic_id: T,
            partition_id: 0,
            leader: Some(1),
            isr: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
            elr: None,
            last_known_elr: None,
        });
        let code = |request: AlterPartition| {
            alter_partition(&before, &defaults(), &request)
                .unwrap_err()
                .code
        };
        assert_eq!(
            code(AlterPartition {
                broker_epoch: 4,
                ..alter(1, 1, &[1])
            }),
            error::STALE_BROKER_EPOCH
        );
        assert_eq!(
            code(AlterPartition {
                topic_id: [9; 16],
                ..alter(1, 1, &[1])
            }),
            error::UNKNOWN_TOPIC_ID
        );
        assert_eq!(
            code(AlterPartition {
                partition_id: 1,
                ..alter(1, 1, &[1])
            }),
            error::UNKNOWN_TOPIC_OR_PARTITION
        );
        assert_eq!(code(alter(2, 1, &[1])), error::NOT_CONTROLLER);
        assert_eq!(code(alter(1, 2, &[1])), error::NOT_CONTROLLER);
        assert_eq!(code(alter(0, 1, &[1])), error::FENCED_LEADER_EPOCH);
        assert_eq!(
            code(AlterPartition {
                broker_id: 2,
                ..alter(1, 1, &[2])
            }),
            error::INVALID_REQUEST
        );
        assert_eq!(code(alter(1, 0, &[1])), error::INVALID_UPDATE_VERSION);
        assert_eq!(code(alter(1, 1, &[])), error::INVALID_REQUEST);
        assert_eq!(code(alter(1, 1, &[2])), error::INVALID_REQUEST);
        assert_eq!(code(alter(1, 1, &[1, 1])), error::INVALID_REQUEST);
        // Broker 4 is registered and unfenced but no replica.
        assert_eq!(code(alter(1, 1, &[1, 4])), error::INVALID_REQUEST);
        // Broker 3 is a replica but fenced.
        assert_eq!(code(alter(1, 1, &[1, 2, 3])), error::INELIGIBLE_REPLICA);
        let message = alter_partition(&before, &defaults(), &alter(1, 1, &[1, 2, 3]))
            .unwrap_err()
            .message;
        assert_eq!(
            message,
            "t-0: the new ISR [1, 2, 3] names broker 3, which is fenced"
        );
        assert!(alter_partition(&before, &defaults(), &alter(1, 1, &[1])).is_ok());
    }

    #[test]
    fn alter_partition_refuses_a_member_whose_fetches_carried_an_older_broker_epoch() {
        // Every broker of the image is registered with broker epoch 5.
        let before = image(3, &[], &[(&[1, 2, 3], &[1, 3], 1)]);
        let with_epochs = |epochs: &[i64]| AlterPartition {
            new_isr_epochs: epochs.to_vec(),
            ..alter(0, 0, &[1, 3, 2])
        };
        let refused = alter_partition(&before, &defaults(), &with_epochs(&[-1, 5, 4])).unwrap_err();
        assert_eq!(refused.code, error::INELIGIBLE_REPLICA);
        assert_eq!(
            refused.message,
            "t-0: the new ISR [1, 3, 2] names broker 2, which is registered with broker epoch 5, not the epoch 4 its fetches carried"
        );
        // A current epoch passes, and so does an unknown one (-1 or none).
        for epochs in [&[-1, 5, 5][..], &[-1, -1, -1], &[-1]] {
            let (records, after) =
                alter_partition(&before, &defaults(), &with_epochs(epochs)).unwrap();
            assert_eq!(records.len(), 1);
            assert_eq!(after.isr, vec![1, 3, 2]);
        }
    }

    #[test]
    fn alter_partition_refuses_an_unregistered_member() {
        let before = image(1, &[], &[(&[1, 7], &[1], 1)]);
        let refused = alter_partition(&before, &defaults(), &alter(0, 0, &[1, 7])).unwrap_err();
        assert_eq!(refused.code, error::INELIGIBLE_REPLICA);
    }

    fn named(partitions: &[i32]) -> Vec<(String, i32)> {
        partitions.iter().map(|p| ("t".to_owned(), *p)).collect()
    }

    fn codes(outcome: &ElectionOutcome) -> Vec<(i32, ErrorCode)> {
        outcome
            .results
            .iter()
            .map(|r| (r.partition_id, r.code))
            .collect()
    }

    #[test]
    fn preferred_elections_move_leadership_to_the_first_replica_when_it_can_lead() {
        let before = image(
            3,
            &[3],
            &[
                (&[1, 2], &[1, 2], 2), // elected
                (&[1, 2], &[1, 2], 1), // already preferred
                (&[1, 2], &[2], 2),    // preferred outside the ISR
                (&[3, 2], &[2, 3], 2), // preferred fenced
            ],
        );
        let outcome = elect_preferred(&before, &named(&[0, 1, 2, 3, 0]));
        assert_eq!(
            codes(&outcome),
            [
                (0, error::NONE),
                (1, error::ELECTION_NOT_NEEDED),
                (2, error::PREFERRED_LEADER_NOT_AVAILABLE),
                (3, error::PREFERRED_LEADER_NOT_AVAILABLE),
                // Named twice: elected once.
                (0, error::ELECTION_NOT_NEEDED),
            ]
        );
        assert_eq!(outcome.results[0].message, None);
        assert_eq!(
            outcome.results[2].message.as_deref(),
            Some("The preferred leader was not available.")
        );
        assert_eq!(outcome.records.len(), 1);
        let after = applied(&before, &outcome.records);
        assert_eq!(state(&after, 0), (1, 1, 1, vec![1, 2]));
    }

    #[test]
    fn elections_name_unknown_topics_and_partitions_as_kafka_does() {
        let before = image(1, &[], &[(&[1], &[1], 1)]);
        let outcome = elect_preferred(&before, &[("u".into(), 0), ("t".into(), 4)]);
        let messages: Vec<(ErrorCode, Option<&str>)> = outcome
            .results
            .iter()
            .map(|r| (r.code, r.message.as_deref()))
            .collect();
        assert_eq!(
            messages,
            [
                (
                    error::UNKNOWN_TOPIC_OR_PARTITION,
                    Some("No such topic as u")
                ),
                (
                    error::UNKNOWN_TOPIC_OR_PARTITION,
                    Some("No such partition as t-4")
                ),
            ]
        );
    }

    #[test]
    fn electing_every_partition_leaves_out_those_that_need_none() {
        let before = image(2, &[], &[(&[1, 2], &[1, 2], 2), (&[1, 2], &[1, 2], 1)]);
        let outcome = elect_leaders(&before, &defaults(), ElectionType::Preferred, None).unwrap();
        assert_eq!(codes(&outcome), [(0, error::NONE)]);
        let outcome = elect_leaders(
            &before,
            &defaults(),
            ElectionType::Preferred,
            Some(&named(&[1])),
        )
        .unwrap();
        assert_eq!(codes(&outcome), [(1, error::ELECTION_NOT_NEEDED)]);
    }

    #[test]
    fn unclean_elections_serve_leaderless_partitions_only() {
        let before = image(
            3,
            &[1],
            &[
                (&[1, 2], &[1, 2], 2),      // has a leader
                (&[1, 3], &[1], NO_LEADER), // ISR member fenced: 3 leads
                (&[1], &[1], NO_LEADER),    // nobody can
                (&[2, 3], &[3], NO_LEADER), // ISR member 3 is unfenced
            ],
        );
        let outcome = elect_leaders(
            &before,
            &defaults(),
            ElectionType::Unclean,
            Some(&named(&[0, 1, 2, 3])),
        )
        .unwrap();
        assert_eq!(
            codes(&outcome),
            [
                (0, error::ELECTION_NOT_NEEDED),
                (1, error::NONE),
                (2, error::ELIGIBLE_LEADERS_NOT_AVAILABLE),
                (3, error::NONE),
            ]
        );
        let after = applied(&before, &outcome.records);
        assert_eq!(state(&after, 1), (3, 1, 1, vec![3]));
        // An ISR member is preferred over replica order, and the ISR stays.
        assert_eq!(state(&after, 3), (3, 1, 1, vec![3]));
    }

    #[test]
    fn too_many_elections_refuse_the_request() {
        let many: Vec<(&[i32], &[i32], i32)> =
            vec![(&[1, 2], &[1, 2], 2); ELECTIONS_PER_REQUEST_MAX + 1];
        let before = image(2, &[], &many);
        let refused =
            elect_leaders(&before, &defaults(), ElectionType::Preferred, None).unwrap_err();
        assert_eq!(refused.code, error::INVALID_REQUEST);
    }

    #[test]
    fn a_rebalance_elects_preferred_leaders_of_brokers_above_the_imbalance_threshold() {
        // Broker 1 prefers 10 partitions and leads 8 (20% not led); one of
        // the two it could lead, the other has it outside the ISR. Broker 2
        // prefers one partition and leads it.
        let mut partitions: Vec<(&[i32], &[i32], i32)> = vec![(&[1, 2], &[1, 2], 1); 8];
        partitions.push((&[1, 2], &[1, 2], 2));
        partitions.push((&[1, 2], &[2], 2));
        partitions.push((&[2, 1], &[2, 1], 2));
        let before = image(2, &[], &partitions);
        let imbalance = leader_imbalance(&before);
        assert_eq!(imbalance[&1].preferred, 10);
        assert_eq!(imbalance[&1].not_led, named(&[8, 9]));
        assert_eq!(imbalance[&2].not_led, []);
        assert!(rebalance_leaders(&before, 20).is_empty());
        let records = rebalance_leaders(&before, 10);
        let after = applied(&before, &records);
        assert_eq!(state(&after, 8), (1, 1, 1, vec![1, 2]));
        assert_eq!(state(&after, 9), (2, 0, 0, vec![2]));
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn leaderless_partitions_of_topics_that_allow_it_are_elected_uncleanly() {
        let mut before = image(2, &[1], &[(&[1, 2], &[1], NO_LEADER)]);
        assert!(elect_unclean_where_enabled(&before, &defaults()).is_empty());
        set_topic_config(&mut before, UNCLEAN_LEADER_ELECTION_ENABLE, "true");
        let after = applied(&before, &elect_unclean_where_enabled(&before, &defaults()));
        assert_eq!(state(&after, 0), (2, 1, 1, vec![2]));
    }

    #[test]
    fn fenced_leaders_left_by_an_older_log_are_moved() {
        // Fenced before fencing elected: broker 1 still leads.
        let before = image(2, &[1], &[(&[1, 2], &[1, 2], 1)]);
        let after = applied(&before, &changes_for_fenced_brokers(&before, &defaults()));
        assert_eq!(state(&after, 0), (2, 1, 1, vec![2]));
        assert!(changes_for_fenced_brokers(&after, &defaults()).is_empty());
    }

    #[test]
    fn the_periodic_check_repairs_then_elects_uncleanly_then_rebalances() {
        // t-0: fenced leader 1 (an older log); t-1: leaderless, unclean
        // allowed; t-2: led by 3, preferred 2.
        let mut before = image(
            3,
            &[1],
            &[
                (&[1, 2], &[1, 2], 1),
                (&[1, 3], &[1], NO_LEADER),
                (&[2, 3], &[2, 3], 3),
            ],
        );
        set_topic_config(&mut before, UNCLEAN_LEADER_ELECTION_ENABLE, "true");
        let after = applied(&before, &periodic_elections(&before, &defaults(), None));
        assert_eq!(state(&after, 0), (2, 1, 1, vec![2]));
        assert_eq!(state(&after, 1), (3, 1, 1, vec![3]));
        assert_eq!(state(&after, 2).0, 3, "no rebalance unless enabled");
        let after = applied(&before, &periodic_elections(&before, &defaults(), Some(10)));
        assert_eq!(state(&after, 2), (2, 1, 1, vec![2, 3]));
        // Broker 1 prefers t-0 and t-1 but is fenced: nothing more to do.
        assert!(periodic_elections(&after, &defaults(), Some(10)).is_empty());
    }

    #[test]
    fn election_types_keep_kafkas_ids_and_names() {
        for t in [ElectionType::Preferred, ElectionType::Unclean] {
            assert_eq!(ElectionType::from_id(t.id()), Some(t));
        }
        assert_eq!(ElectionType::Unclean.id(), 1);
        assert_eq!(ElectionType::Preferred.name(), "PREFERRED");
        assert_eq!(ElectionType::from_id(2), None);
    }
}
