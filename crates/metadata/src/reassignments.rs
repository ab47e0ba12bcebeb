//! Partition reassignments (KIP-455), planned as KRaft's controller plans
//! them: pure functions from the image to the `PartitionChange` records
//! that start, complete or cancel one.
//!
//! - Starting one moves a partition from its replicas `current` to
//!   `target`: its replicas become `target` followed by the members of
//!   `current` not in it, `adding` is `target - current` and `removing`
//!   `current - target`. The ISR and the leader stay; the adding replicas
//!   are followers that catch up and are taken into the ISR by the
//!   leader's AlterPartition. A reassignment started while another is in
//!   progress starts from the replicas as they are (the first one's adding
//!   replicas count as current).
//! - It completes, in the same change as the ISR that allows it, once
//!   every adding replica is in the ISR and the ISR without the removing
//!   replicas is not empty: the replicas and the ISR lose the removing
//!   replicas, and a leader being removed hands over to the first target
//!   replica in that ISR on an unfenced broker. A reassignment that adds
//!   nothing completes at once.
//! - A change that drops a replica (a completion, a cancel) moves the
//!   leader epoch even when the leader stays, as Kafka's does: the dropped
//!   replica's fetches are fenced from then on.
//! - Cancelling one returns to the replicas it started from (the replicas
//!   without the adding ones), the ISR to its members among them; it is
//!   refused when none of them is in the ISR, as that would need an
//!   unclean election.
//!
//! Brokers act on the result: a broker named among the replicas hosts the
//! partition (an adding one as a follower), and one no longer named stops
//! and deletes its replica.

use tarn_protocol::error;

use crate::elections::{Change, ElectionError};
use crate::image::{partition_in, NO_LEADER};
use crate::{MetadataImage, MetadataRecord, PartitionInfo};

fn refuse<T>(code: i16, message: impl Into<String>) -> Result<T, ElectionError> {
    Err(ElectionError {
        code,
        message: message.into(),
    })
}

/// One partition of an AlterPartitionReassignments request: `target`
/// `None` cancels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub topic: String,
    pub partition_id: i32,
    pub target: Option<Vec<i32>>,
}

/// Plans every reassignment in `requests` against `image`, each against
/// the image as the earlier ones leave it, so a partition named twice
/// ends as the last asks. Returns the records to commit and one answer per
/// request, in order.
pub fn alter_reassignments(
    image: &MetadataImage,
    requests: &[Reassignment],
    allow_replication_factor_change: bool,
) -> (Vec<MetadataRecord>, Vec<Result<(), ElectionError>>) {
    let mut scratch = image.clone();
    let mut records = Vec::new();
    let mut answers = Vec::with_capacity(requests.len());
    for request in requests {
        match alter_reassignment(&scratch, request, allow_replication_factor_change) {
            Ok(record) => {
                if let Some(record) = record {
                    scratch.apply(&record);
                    records.push(record);
                }
                answers.push(Ok(()));
            }
            Err(e) => answers.push(Err(e)),
        }
    }
    (records, answers)
}

/// Plans one reassignment: the change that starts (and perhaps completes)
/// or cancels it, `None` when the partition already has the replicas
/// asked for.
///
/// Refusals, as Kafka's: UNKNOWN_TOPIC_OR_PARTITION; INVALID_REPLICA_ASSIGNMENT
/// for a target that is empty, repeats a broker or names an unregistered
/// one; INVALID_REPLICATION_FACTOR when the target changes the replication
/// factor and the request forbids it (KIP-860); NO_REASSIGNMENT_IN_PROGRESS
/// for a cancel of a partition that has none; UNKNOWN_SERVER_ERROR for a
/// cancel that would leave no ISR member among the original replicas.
pub fn alter_reassignment(
    image: &MetadataImage,
    request: &Reassignment,
    allow_replication_factor_change: bool,
) -> Result<Option<MetadataRecord>, ElectionError> {
    let name = &request.topic;
    let partition_id = request.partition_id;
    let Some(topic) = image.topic(name) else {
        return refuse(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Unable to find topic {name}"),
        );
    };
    let Some(p) = partition_in(topic, partition_id) else {
        return refuse(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            format!("Unable to find partition {name}-{partition_id}"),
        );
    };
    let change = match &request.target {
        Some(target) => {
            check_target(image, p, target, allow_replication_factor_change).map_err(|why| {
                ElectionError {
                    code: why.0,
                    message: format!("{name}-{partition_id}: {}", why.1),
                }
            })?;
            start(image, p, target)
        }
        None => Some(cancel(image, p).map_err(|e| ElectionError {
            code: e.code,
            message: format!("{name}-{partition_id}: {}", e.message),
        })?),
    };
    Ok(change.map(|c| c.record(topic.topic_id, partition_id)))
}

fn check_target(
    image: &MetadataImage,
    p: &PartitionInfo,
    target: &[i32],
    allow_replication_factor_change: bool,
) -> Result<(), (i16, String)> {
    if target.is_empty() {
        return Err((
            error::INVALID_REPLICA_ASSIGNMENT,
            "the target replica list is empty".to_string(),
        ));
    }
    for (i, broker) in target.iter().enumerate() {
        if target[..i].contains(broker) {
            return Err((
                error::INVALID_REPLICA_ASSIGNMENT,
                format!("the target replicas {target:?} name broker {broker} twice"),
            ));
        }
        if !image.brokers.contains_key(broker) {
            return Err((
                error::INVALID_REPLICA_ASSIGNMENT,
                format!("the target replicas {target:?} name broker {broker}, but no such broker is registered"),
            ));
        }
    }
    let factor = p.target_replicas().len();
    if !allow_replication_factor_change && target.len() != factor {
        return Err((
            error::INVALID_REPLICATION_FACTOR,
            format!(
                "the replication factor would change from {factor} to {}, which the request does not allow",
                target.len()
            ),
        ));
    }
    Ok(())
}

/// The change that moves `p` toward `target`, completing it at once when
/// the ISR allows; `None` when `p` is settled on `target` already.
fn start(image: &MetadataImage, p: &PartitionInfo, target: &[i32]) -> Option<Change> {
    if !p.is_reassigning() && p.replicas == target {
        return None;
    }
    let current = &p.replicas;
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect();
    let removing: Vec<i32> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    let mut moving = p.clone();
    moving.replicas = replicas.clone();
    moving.adding_replicas = adding.clone();
    moving.removing_replicas = removing.clone();
    if let Some(done) = completion(image, &moving, &p.isr) {
        return Some(done);
    }
    // A new target may drop replicas an earlier reassignment was adding.
    Some(crate::elections::elr_within_replicas(
        p,
        Change {
            replicas: Some(replicas),
            adding_replicas: Some(adding),
            removing_replicas: Some(removing),
            ..Change::default()
        },
    ))
}

/// The change that completes `p`'s reassignment once its ISR is `isr`
/// (an ISR its leader asks for, or the current one), `None` while it
/// cannot complete or none is in progress. The change carries the ISR.
pub(crate) fn completion(image: &MetadataImage, p: &PartitionInfo, isr: &[i32]) -> Option<Change> {
    if !p.is_reassigning() {
        return None;
    }
    let new_isr: Vec<i32> = isr
        .iter()
        .copied()
        .filter(|r| !p.removing_replicas.contains(r))
        .collect();
    if new_isr.is_empty() || !p.adding_replicas.iter().all(|r| new_isr.contains(r)) {
        return None;
    }
    let replicas = p.target_replicas();
    let leader = leader_among(image, p.leader, &replicas, &new_isr)?;
    Some(fence_removed_replicas(
        p,
        Change {
            leader: (leader != p.leader).then_some(leader),
            isr: Some(new_isr),
            replicas: Some(replicas),
            adding_replicas: Some(Vec::new()),
            removing_replicas: Some(Vec::new()),
            ..Change::default()
        },
    ))
}

/// Kafka's rule for a change whose replicas leave out a broker the
/// partition had: the leader epoch moves even when the leader stays. A
/// replica's fetches made before it applied its removal (and deleted its
/// log) carry the old epoch and are then fenced, so none of them takes a
/// broker back into the ISR it has since emptied its log under: a
/// replica removed and added again while behind on the metadata would
/// otherwise join the ISR on the log it had, holding an empty one.
fn fence_removed_replicas(p: &PartitionInfo, mut change: Change) -> Change {
    let removes = change
        .replicas
        .as_ref()
        .is_some_and(|replicas| p.replicas.iter().any(|r| !replicas.contains(r)));
    if removes && change.leader.is_none() {
        change.leader = Some(p.leader);
    }
    crate::elections::elr_within_replicas(p, change)
}

/// The leader of a partition whose replicas become `replicas` and ISR
/// `isr`: the current one if it stays in the ISR, else the first replica
/// in the ISR on an unfenced broker. `None` when none qualifies.
fn leader_among(image: &MetadataImage, current: i32, replicas: &[i32], isr: &[i32]) -> Option<i32> {
    if current != NO_LEADER && isr.contains(&current) {
        return Some(current);
    }
    replicas
        .iter()
        .copied()
        .find(|r| isr.contains(r) && image.brokers.get(r).is_some_and(|b| !b.fenced))
}

/// The change that returns `p` to the replicas its reassignment started
/// from.
fn cancel(image: &MetadataImage, p: &PartitionInfo) -> Result<Change, ElectionError> {
    if !p.is_reassigning() {
        return refuse(
            error::NO_REASSIGNMENT_IN_PROGRESS,
            "no reassignment is in progress",
        );
    }
    let original: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding_replicas.contains(r))
        .collect();
    let isr: Vec<i32> = p
        .isr
        .iter()
        .copied()
        .filter(|r| original.contains(r))
        .collect();
    if isr.is_empty() {
        return refuse(
            error::UNKNOWN_SERVER_ERROR,
            format!(
                "reverting to replicas {original:?} would need an unclean leader election: none of them is in the ISR {:?}",
                p.isr
            ),
        );
    }
    let leader = leader_among(image, p.leader, &original, &isr).unwrap_or(NO_LEADER);
    Ok(fence_removed_replicas(
        p,
        Change {
            leader: (leader != p.leader).then_some(leader),
            isr: (isr != p.isr).then_some(isr),
            replicas: Some(original),
            adding_replicas: Some(Vec::new()),
            removing_replicas: Some(Vec::new()),
            ..Change::default()
        },
    ))
}

/// A partition's reassignment in progress, as ListPartitionReassignments
/// answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ongoing {
    pub topic: String,
    pub partition_id: i32,
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

impl Ongoing {
    fn of(topic: &str, p: &PartitionInfo) -> Ongoing {
        Ongoing {
            topic: topic.to_string(),
            partition_id: p.partition_id,
            replicas: p.replicas.clone(),
            adding_replicas: p.adding_replicas.clone(),
            removing_replicas: p.removing_replicas.clone(),
        }
    }
}

/// The reassignments in progress: of every partition when `named` is
/// `None`, else of the partitions named (those that exist and have one).
pub fn ongoing(image: &MetadataImage, named: Option<&[(String, i32)]>) -> Vec<Ongoing> {
    match named {
        None => image
            .topics()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.is_reassigning())
                    .map(|p| Ongoing::of(&t.name, p))
            })
            .collect(),
        Some(named) => named
            .iter()
            .filter_map(|(topic, id)| {
                let p = partition_in(image.topic(topic)?, *id)?;
                p.is_reassigning().then(|| Ongoing::of(topic, p))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elections::{alter_partition, AlterPartition};
    use crate::image::ChangeFields;

    const TOPIC_ID: [u8; 16] = [7; 16];

    /// Brokers 1-5 registered (epoch = id * 10), those in `fenced` fenced,
    /// and topic `t` with one partition on `replicas`, ISR `isr`, led by
    /// `leader`.
    fn image(replicas: &[i32], isr: &[i32], leader: i32, fenced: &[i32]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in 1..=5 {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id: id,
                host: "127.0.0.1".into(),
                port: 9000 + id,
                rack: None,
                incarnation_id: [id as u8; 16],
                broker_epoch: i64::from(id) * 10,
                listeners: Vec::new(),
                fenced: fenced.contains(&id),
            });
        }
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: TOPIC_ID,
        });
        image.apply(&MetadataRecord::Partition {
            topic_id: TOPIC_ID,
            partition_id: 0,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 3,
            partition_epoch: 5,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        });
        image
    }

    fn partition(image: &MetadataImage) -> PartitionInfo {
        image.partition(&crate::Uuid(TOPIC_ID), 0).unwrap().clone()
    }

    fn reassign(image: &mut MetadataImage, target: Option<&[i32]>) -> Result<(), ElectionError> {
        let request = Reassignment {
            topic: "t".into(),
            partition_id: 0,
            target: target.map(<[i32]>::to_vec),
        };
        let (records, mut answers) = alter_reassignments(image, &[request], true);
        for r in &records {
            image.apply(r);
        }
        answers.pop().unwrap()
    }

    /// The leader's AlterPartition asking for `new_isr`.
    fn alter_isr(image: &mut MetadataImage, new_isr: &[i32]) {
        let p = partition(image);
        let request = AlterPartition {
            broker_id: p.leader,
            broker_epoch: i64::from(p.leader) * 10,
            topic_id: TOPIC_ID,
            partition_id: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: new_isr.to_vec(),
            new_isr_epochs: Vec::new(),
        };
        let (records, state) =
            alter_partition(image, &tarn_config::BrokerConfig::default(), &request).unwrap();
        for r in &records {
            image.apply(r);
        }
        let after = partition(image);
        assert_eq!(state.isr, after.isr);
        assert_eq!(state.leader, after.leader);
        assert_eq!(state.partition_epoch, after.partition_epoch);
    }

    #[test]
    fn a_move_adds_then_completes_when_the_new_replicas_join_the_isr() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, &[]);
        reassign(&mut image, Some(&[2, 3, 4])).unwrap();
        let p = partition(&image);
        assert_eq!(p.replicas, [2, 3, 4, 1]);
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (vec![4], vec![1])
        );
        assert_eq!(
            (p.isr.clone(), p.leader, p.leader_epoch),
            (vec![1, 2, 3], 1, 3)
        );
        assert_eq!(ongoing(&image, None).len(), 1);

        // Broker 4 caught up: the leader takes it in, which completes the
        // move and hands the lead from the removed broker 1 to broker 2.
        alter_isr(&mut image, &[1, 2, 3, 4]);
        let p = partition(&image);
        assert_eq!(p.replicas, [2, 3, 4]);
        assert_eq!(p.isr, [2, 3, 4]);
        assert!(!p.is_reassigning());
        assert_eq!((p.leader, p.leader_epoch), (2, 4));
        assert!(ongoing(&image, None).is_empty());
    }

    #[test]
    fn a_move_keeps_a_leader_that_stays() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 2, &[]);
        reassign(&mut image, Some(&[4, 5, 2])).unwrap();
        alter_isr(&mut image, &[1, 2, 3, 4]);
        assert!(
            partition(&image).is_reassigning(),
            "broker 5 has not joined"
        );
        alter_isr(&mut image, &[1, 2, 3, 4, 5]);
        let p = partition(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (vec![4, 5, 2], vec![2, 4, 5])
        );
        // The leader stays; its epoch moves, as brokers 1 and 3 left.
        assert_eq!((p.leader, p.leader_epoch), (2, 4));
    }

    /// A removed replica is fenced by a new leader epoch, whether the
    /// removal completes a move or cancels one, while a change that drops
    /// no replica keeps the epoch.
    #[test]
    fn dropping_a_replica_moves_the_leader_epoch() {
        let mut image = image(&[1, 2], &[1, 2], 1, &[]);
        reassign(&mut image, Some(&[1, 2, 3])).unwrap();
        assert_eq!(partition(&image).leader_epoch, 3, "adding keeps it");
        reassign(&mut image, None).unwrap();
        let p = partition(&image);
        assert_eq!((p.replicas.clone(), p.leader), (vec![1, 2], 1));
        assert_eq!(p.leader_epoch, 4, "the cancel dropped broker 3");
        reassign(&mut image, Some(&[1, 3])).unwrap();
        assert_eq!(partition(&image).leader_epoch, 4);
        alter_isr(&mut image, &[1, 2, 3]);
        let p = partition(&image);
        assert_eq!((p.replicas.clone(), p.leader), (vec![1, 3], 1));
        assert_eq!(p.leader_epoch, 5, "the completion dropped broker 2");
    }

    #[test]
    fn removing_replicas_alone_completes_at_once() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, &[]);
        reassign(&mut image, Some(&[2, 3])).unwrap();
        let p = partition(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![2, 3], vec![2, 3], 2)
        );
        assert!(!p.is_reassigning());
        assert_eq!(p.partition_epoch, 6, "one change");
    }

    #[test]
    fn the_same_replicas_change_nothing() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, &[]);
        let before = partition(&image);
        reassign(&mut image, Some(&[1, 2, 3])).unwrap();
        assert_eq!(partition(&image), before);
        // A new order is a new preferred leader: a change.
        reassign(&mut image, Some(&[3, 2, 1])).unwrap();
        assert_eq!(partition(&image).replicas, [3, 2, 1]);
        assert_eq!(partition(&image).leader, 1);
    }

    #[test]
    fn a_cancel_returns_to_the_original_replicas() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, &[]);
        reassign(&mut image, Some(&[4, 5, 1])).unwrap();
        alter_isr(&mut image, &[1, 2, 3, 4]);
        reassign(&mut image, None).unwrap();
        let p = partition(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![1, 2, 3], vec![1, 2, 3], 1)
        );
        assert!(!p.is_reassigning());
        let e = reassign(&mut image, None).unwrap_err();
        assert_eq!(e.code, error::NO_REASSIGNMENT_IN_PROGRESS);
    }

    #[test]
    fn a_second_reassignment_starts_from_the_replicas_as_they_are() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, &[]);
        reassign(&mut image, Some(&[1, 2, 4])).unwrap();
        reassign(&mut image, Some(&[1, 2, 5])).unwrap();
        let p = partition(&image);
        assert_eq!(p.replicas, [1, 2, 5, 4, 3]);
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (vec![5], vec![4, 3])
        );
        alter_isr(&mut image, &[1, 2, 3, 5]);
        let p = partition(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone()),
            (vec![1, 2, 5], vec![1, 2, 5])
        );
    }

    #[test]
    fn bad_targets_are_refused_with_kafkas_codes() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, &[]);
        let code = |image: &mut MetadataImage, target: &[i32]| {
            reassign(image, Some(target)).unwrap_err().code
        };
        assert_eq!(code(&mut image, &[]), error::INVALID_REPLICA_ASSIGNMENT);
        assert_eq!(
            code(&mut image, &[1, 1, 2]),
            error::INVALID_REPLICA_ASSIGNMENT
        );
        assert_eq!(
            code(&mut image, &[1, 2, 9]),
            error::INVALID_REPLICA_ASSIGNMENT
        );
        let request = Reassignment {
            topic: "t".into(),
            partition_id: 0,
            target: Some(vec![1, 2]),
        };
        let (records, answers) = alter_reassignments(&image, &[request], false);
        assert!(records.is_empty());
        assert_eq!(
            answers[0].as_ref().unwrap_err().code,
            error::INVALID_REPLICATION_FACTOR
        );
        let unknown = Reassignment {
            topic: "t".into(),
            partition_id: 4,
            target: Some(vec![1]),
        };
        let (_, answers) = alter_reassignments(&image, &[unknown], true);
        assert_eq!(
            answers[0].as_ref().unwrap_err().code,
            error::UNKNOWN_TOPIC_OR_PARTITION
        );
    }

    #[test]
    fn a_move_waits_for_an_unfenced_leader_among_the_targets() {
        // The targets' ISR members are all fenced: nothing may lead, so the
        // move does not complete.
        let mut image = image(&[1, 2], &[1, 2], 1, &[]);
        let mut p = partition(&image);
        p.apply_change(&ChangeFields {
            replicas: Some(&[2, 1]),
            removing_replicas: Some(&[1]),
            ..ChangeFields::default()
        });
        image.apply(&MetadataRecord::FenceBroker {
            broker_id: 2,
            broker_epoch: 20,
        });
        assert_eq!(completion(&image, &p, &[1, 2]), None);
    }
}
