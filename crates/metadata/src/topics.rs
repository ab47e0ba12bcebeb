//! Topic creation, growth and deletion as metadata records, shared by
//! CreateTopics, CreatePartitions, DeleteTopics and Metadata's
//! auto-creation. New partitions go where an explicit assignment says, or
//! where the placer (`crate::placement`) puts them: on the registered
//! brokers, fenced ones only as followers when too few are unfenced;
//! every new partition starts at leader epoch 0 with an ISR of its unfenced
//! replicas, led by the first of them.

use std::collections::BTreeMap;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::create_topics::CreatableReplicaAssignment;
use tarn_protocol::Uuid;

use tarn_config::{validate_topic_config, BrokerConfig};

use crate::placement::{self, PlacementError, UsableBroker};
use crate::random_uuid;
use crate::{MetadataImage, MetadataRecord, TopicInfo};

/// Kafka's limit on topic name length.
pub const TOPIC_NAME_MAX_LEN: usize = 249;
/// An upper bound on partitions per topic, so a request cannot ask the
/// broker to create millions of logs at once.
pub const PARTITIONS_MAX: i32 = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicError {
    pub code: ErrorCode,
    pub message: String,
}

fn fail<T>(code: ErrorCode, message: impl Into<String>) -> Result<T, TopicError> {
    Err(TopicError {
        code,
        message: message.into(),
    })
}

/// Kafka's topic name rule: 1 to 249 of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return fail(
            error::INVALID_TOPIC_EXCEPTION,
            "Topic name is illegal, it can't be empty",
        );
    }
    if name == "." || name == ".." {
        return fail(
            error::INVALID_TOPIC_EXCEPTION,
            "Topic name cannot be \".\" or \"..\"",
        );
    }
    if name.len() > TOPIC_NAME_MAX_LEN {
        return fail(
            error::INVALID_TOPIC_EXCEPTION,
            format!("Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LEN} characters, topic name: {name}"),
        );
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return fail(
            error::INVALID_TOPIC_EXCEPTION,
            format!("Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"),
        );
    }
    Ok(())
}

/// What a client asked for when creating a topic.
pub struct NewTopic<'a> {
    pub name: &'a str,
    /// -1 means `num.partitions`; must be -1 with an explicit assignment.
    pub num_partitions: i32,
    /// -1 means `default.replication.factor`; must be -1 with an explicit
    /// assignment.
    pub replication_factor: i16,
    /// CreateTopics' explicit assignment, one entry per partition, the
    /// preferred leader first. None or empty: the placer chooses, as Kafka
    /// treats an empty list.
    pub assignments: Option<&'a [CreatableReplicaAssignment]>,
    pub configs: Vec<(String, Option<String>)>,
}

/// One partition about to be created: its replicas, and the ISR, which
/// leaves out fenced replicas and whose first member leads.
struct NewPartition {
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

impl NewPartition {
    fn record(self, topic_id: Uuid, partition_id: i32) -> MetadataRecord {
        MetadataRecord::Partition {
            topic_id: topic_id.0,
            partition_id,
            leader: self.isr[0],
            isr: self.isr,
            replicas: self.replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        }
    }
}

/// The records that create `topic`, after Kafka's checks.
pub fn create_topic_records(
    image: &MetadataImage,
    config: &BrokerConfig,
    topic: &NewTopic<'_>,
) -> Result<(Vec<MetadataRecord>, TopicInfoSummary), TopicError> {
    validate_topic_name(topic.name)?;
    if image.topic(topic.name).is_some() {
        return fail(
            error::TOPIC_ALREADY_EXISTS,
            format!("Topic '{}' already exists.", topic.name),
        );
    }
    let partitions = match topic.assignments {
        Some(given) if !given.is_empty() => assigned_partitions(image, topic, given)?,
        _ => placed_partitions(image, config, topic)?,
    };
    let mut configs = BTreeMap::new();
    for (key, value) in &topic.configs {
        let Some(value) = value else {
            return fail(
                error::INVALID_CONFIG,
                format!("Null value not supported for topic configs: {key}"),
            );
        };
        let value = validate_topic_config(key, value).map_err(|e| TopicError {
            code: error::INVALID_CONFIG,
            message: e.to_string(),
        })?;
        configs.insert(key.clone(), value);
    }
    let topic_id = loop {
        let id = random_uuid();
        if image.topic_by_id(&id).is_none() {
            break id;
        }
    };
    let summary = TopicInfoSummary {
        topic_id,
        num_partitions: partitions.len() as i32,
        replication_factor: partitions
            .first()
            .map_or(0, |p| replication_factor_of(&p.replicas)),
        configs,
    };
    let mut records = vec![MetadataRecord::Topic {
        name: topic.name.to_owned(),
        topic_id: topic_id.0,
    }];
    for (name, value) in &summary.configs {
        records.push(MetadataRecord::TopicConfig {
            topic_id: topic_id.0,
            name: name.clone(),
            value: Some(value.clone()),
        });
    }
    records.extend(
        partitions
            .into_iter()
            .zip(0..)
            .map(|(partition, partition_id)| partition.record(topic_id, partition_id)),
    );
    Ok((records, summary))
}

/// The partitions of an explicit CreateTopics assignment, in partition id
/// order, checked as Kafka's `ReplicationControlManager.createTopic`
/// checks them: the count and factor come from the assignment alone, each
/// partition once, replicas registered, distinct and as many in every
/// partition, at least one unfenced, and ids 0..n.
fn assigned_partitions(
    image: &MetadataImage,
    topic: &NewTopic<'_>,
    given: &[CreatableReplicaAssignment],
) -> Result<Vec<NewPartition>, TopicError> {
    if topic.replication_factor != -1 {
        return fail(
            error::INVALID_REQUEST,
            "A manual partition assignment was specified, but replication factor was not set to -1.",
        );
    }
    if topic.num_partitions != -1 {
        return fail(
            error::INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        );
    }
    if given.len() > PARTITIONS_MAX as usize {
        return fail(
            error::INVALID_PARTITIONS,
            format!("Number of partitions must be at most {PARTITIONS_MAX}."),
        );
    }
    let mut by_id: BTreeMap<i32, NewPartition> = BTreeMap::new();
    let mut replication_factor = None;
    for assignment in given {
        let partition_id = assignment.partition_index;
        if by_id.contains_key(&partition_id) {
            return fail(
                error::INVALID_REPLICA_ASSIGNMENT,
                format!("Found multiple manual partition assignments for partition {partition_id}"),
            );
        }
        check_assignment(image, &assignment.broker_ids, replication_factor)?;
        replication_factor = Some(assignment.broker_ids.len());
        by_id.insert(
            partition_id,
            assigned_partition(image, &assignment.broker_ids, partition_id)?,
        );
    }
    // Distinct ids as many as partitions: 0..n exactly when the largest is n - 1.
    if by_id.keys().copied().ne(0..by_id.len() as i32) {
        return fail(
            error::INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        );
    }
    Ok(by_id.into_values().collect())
}

/// The partitions the placer puts on the registered brokers, with the
/// broker defaults for -1.
fn placed_partitions(
    image: &MetadataImage,
    config: &BrokerConfig,
    topic: &NewTopic<'_>,
) -> Result<Vec<NewPartition>, TopicError> {
    let replication_factor = match topic.replication_factor {
        -1 => config.get_i64("default.replication.factor") as i16,
        n if n <= 0 => {
            return fail(
                error::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        }
        n => n,
    };
    let partitions = match topic.num_partitions {
        -1 => config.get_i64("num.partitions") as i32,
        n if n <= 0 => {
            return fail(
                error::INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        }
        n if n > PARTITIONS_MAX => {
            return fail(
                error::INVALID_PARTITIONS,
                format!("Number of partitions must be at most {PARTITIONS_MAX}."),
            )
        }
        n => n,
    };
    place_on_registered(image, 0, partitions, replication_factor).map_err(|e| TopicError {
        code: e.code(),
        message: format!("Unable to replicate the partition {replication_factor} time(s): {e}"),
    })
}

/// Kafka places new partitions on every registered broker, the fenced
/// ones only as followers once the unfenced are used up
/// ([`placement::place`]); the ISR is the unfenced replicas, led by the
/// first replica, which is always unfenced.
fn place_on_registered(
    image: &MetadataImage,
    start: i32,
    partitions: i32,
    replication_factor: i16,
) -> Result<Vec<NewPartition>, PlacementError> {
    let usable: Vec<UsableBroker<'_>> = image
        .brokers
        .values()
        .map(|b| UsableBroker {
            broker_id: b.broker_id,
            rack: b.rack.as_deref(),
            fenced: b.fenced,
        })
        .collect();
    let placed = placement::place(
        &usable,
        start,
        partitions,
        replication_factor,
        &mut rand::thread_rng(),
    )?;
    Ok(placed
        .into_iter()
        .map(|p| NewPartition {
            isr: unfenced_replicas(image, &p.replicas),
            replicas: p.replicas,
        })
        .collect())
}

/// The replicas on unfenced brokers, in replica order: a new partition's
/// ISR.
fn unfenced_replicas(image: &MetadataImage, replicas: &[i32]) -> Vec<i32> {
    replicas
        .iter()
        .copied()
        .filter(|id| image.brokers.get(id).is_some_and(|b| !b.fenced))
        .collect()
}

/// A checked explicit assignment as a partition: Kafka's ISR is the
/// unfenced replicas, its leader the first of them, and a partition none of
/// whose replicas is unfenced is refused.
fn assigned_partition(
    image: &MetadataImage,
    replicas: &[i32],
    partition_id: i32,
) -> Result<NewPartition, TopicError> {
    let isr = unfenced_replicas(image, replicas);
    if isr.is_empty() {
        return fail(
            error::INVALID_REPLICA_ASSIGNMENT,
            format!("All brokers specified in the manual partition assignment for partition {partition_id} are fenced or in controlled shutdown."),
        );
    }
    Ok(NewPartition {
        replicas: replicas.to_vec(),
        isr,
    })
}

/// A partition's replica count as CreateTopics reports it; the replicas
/// are distinct registered brokers, far fewer than `i16::MAX`.
fn replication_factor_of(replicas: &[i32]) -> i16 {
    i16::try_from(replicas.len()).unwrap_or(i16::MAX)
}

/// What was (or, with validate_only, would be) created.
#[derive(Debug, Clone)]
pub struct TopicInfoSummary {
    pub topic_id: Uuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// The records that grow topic `name` to `count` partitions, after
/// Kafka's checks: partitions can only be added, and an explicit
/// assignment must give each new partition the topic's replication factor
/// on registered brokers. Without one the placer puts them on the
/// registered brokers, as for a new topic.
pub fn create_partitions_records(
    image: &MetadataImage,
    name: &str,
    count: i32,
    assignments: Option<&[Vec<i32>]>,
) -> Result<Vec<MetadataRecord>, TopicError> {
    let Some(topic) = image.topic(name) else {
        return fail(
            error::UNKNOWN_TOPIC_OR_PARTITION,
            "This server does not host this topic-partition.",
        );
    };
    let current = topic.partitions.len() as i32;
    if count == current {
        return fail(
            error::INVALID_PARTITIONS,
            format!("Topic already has {current} partitions."),
        );
    }
    if count < current {
        return fail(
            error::INVALID_PARTITIONS,
            format!("Topic currently has {current} partitions, which is higher than the requested {count}. Partitions can only be added."),
        );
    }
    if count > PARTITIONS_MAX {
        return fail(
            error::INVALID_PARTITIONS,
            format!("Number of partitions must be at most {PARTITIONS_MAX}."),
        );
    }
    let additional = (count - current) as usize;
    let Some(first) = topic.partitions.first() else {
        return fail(
            error::UNKNOWN_SERVER_ERROR,
            format!("Invalid state: topic {name} appears to have no partitions."),
        );
    };
    let replication_factor = first.replicas.len();
    let placed: Vec<NewPartition> = match assignments {
        Some(given) => {
            if given.len() != additional {
                return fail(
                    error::INVALID_REPLICA_ASSIGNMENT,
                    format!("Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.", given.len()),
                );
            }
            let mut placed = Vec::with_capacity(additional);
            for (replicas, partition_id) in given.iter().zip(current..) {
                check_assignment(image, replicas, Some(replication_factor))?;
                placed.push(assigned_partition(image, replicas, partition_id)?);
            }
            placed
        }
        // Kafka answers a placement failure here with the placer's own
        // words, without CreateTopics' "Unable to replicate" prefix.
        None => place_on_registered(
            image,
            current,
            additional as i32,
            replication_factor_of(&first.replicas),
        )
        .map_err(|e| TopicError {
            code: e.code(),
            message: e.to_string(),
        })?,
    };
    Ok(placed
        .into_iter()
        .zip(current..)
        .map(|(partition, partition_id)| partition.record(topic.topic_id, partition_id))
        .collect())
}

/// Kafka's `validateManualPartitionAssignment`: a non-empty list of
/// registered (fenced or not) brokers, none twice, and as many as
/// `replication_factor` when one is set. Brokers are checked in id order,
/// so the message names the same broker Kafka's would.
fn check_assignment(
    image: &MetadataImage,
    replicas: &[i32],
    replication_factor: Option<usize>,
) -> Result<(), TopicError> {
    if replicas.is_empty() {
        return fail(
            error::INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        );
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    for (i, broker) in sorted.iter().enumerate() {
        if !image.brokers.contains_key(broker) {
            return fail(
                error::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes broker {broker}, but no such broker is registered."),
            );
        }
        if i > 0 && sorted[i - 1] == *broker {
            return fail(
                error::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "The manual partition assignment includes the broker {broker} more than once."
                ),
            );
        }
    }
    match replication_factor {
        Some(expected) if expected != replicas.len() => fail(
            error::INVALID_REPLICA_ASSIGNMENT,
            format!("The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {expected} replica(s).", replicas.len()),
        ),
        _ => Ok(()),
    }
}

pub fn delete_topic_records(topic: &TopicInfo) -> Vec<MetadataRecord> {
    vec![MetadataRecord::RemoveTopic {
        topic_id: topic.topic_id.0,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka() {
        assert!(validate_topic_name("orders.v1_a-b").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "ü"] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().code,
                error::INVALID_TOPIC_EXCEPTION,
                "{bad:?}"
            );
        }
        assert!(validate_topic_name(&"a".repeat(249)).is_ok());
        assert!(validate_topic_name(&"a".repeat(250)).is_err());
    }

    fn image_with_broker() -> MetadataImage {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::RegisterBroker {
            broker_id: 1,
            host: "h".into(),
            port: 1,
            rack: None,
            incarnation_id: [1; 16],
            broker_epoch: 1,
            listeners: vec![],
            fenced: false,
        });
        image
    }

    #[test]
    fn create_checks_partitions_replication_and_configs() {
        let image = image_with_broker();
        let config = BrokerConfig::default();
        let new = |p, rf, configs| NewTopic {
            name: "t",
            num_partitions: p,
            replication_factor: rf,
            assignments: None,
            configs,
        };
        let (records, summary) =
            create_topic_records(&image, &config, &new(-1, -1, vec![])).unwrap();
        assert_eq!(summary.num_partitions, 1);
        assert_eq!(records.len(), 2);
        let err = create_topic_records(&image, &config, &new(0, 1, vec![])).unwrap_err();
        assert_eq!(err.code, error::INVALID_PARTITIONS);
        let err = create_topic_records(&image, &config, &new(1, 3, vec![])).unwrap_err();
        assert_eq!(err.code, error::INVALID_REPLICATION_FACTOR);
        let err = create_topic_records(
            &image,
            &config,
            &new(1, 1, vec![("retention.mss".into(), Some("1".into()))]),
        )
        .unwrap_err();
        assert_eq!(err.code, error::INVALID_CONFIG);
        assert!(err.message.contains("retention.mss"));
    }

    #[test]
    fn partitions_can_only_be_added() {
        let mut image = image_with_broker();
        let topic = NewTopic {
            name: "t",
            num_partitions: 2,
            replication_factor: 1,
            assignments: None,
            configs: vec![],
        };
        let (records, _) = create_topic_records(&image, &BrokerConfig::default(), &topic).unwrap();
        for r in &records {
            image.apply(r);
        }
        let err = create_partitions_records(&image, "t", 2, None).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (error::INVALID_PARTITIONS, "Topic already has 2 partitions.")
        );
        let err = create_partitions_records(&image, "t", 1, None).unwrap_err();
        assert_eq!(err.code, error::INVALID_PARTITIONS);
        assert!(err.message.contains("can only be added"), "{}", err.message);
        let err = create_partitions_records(&image, "nope", 3, None).unwrap_err();
        assert_eq!(err.code, error::UNKNOWN_TOPIC_OR_PARTITION);
        for bad in [vec![vec![1], vec![1]], vec![vec![2]], vec![vec![1, 1]]] {
            let err = create_partitions_records(&image, "t", 3, Some(&bad)).unwrap_err();
            assert_eq!(err.code, error::INVALID_REPLICA_ASSIGNMENT, "{bad:?}");
        }
        let records = create_partitions_records(&image, "t", 4, None).unwrap();
        assert_eq!(records.len(), 2);
        for r in &records {
            image.apply(r);
        }
        let partitions = &image.topic("t").unwrap().partitions;
        assert_eq!(
            partitions
                .iter()
                .map(|p| p.partition_id)
                .collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert!(partitions
            .iter()
            .all(|p| p.replicas == [1] && p.leader == 1));
        let records = create_partitions_records(&image, "t", 5, Some(&[vec![1]])).unwrap();
        assert_eq!(records.len(), 1);
    }

    /// Brokers 1..=n, those in `fenced` registered fenced, racks none.
    fn image_with_brokers(n: i32, fenced: &[i32]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for broker_id in 1..=n {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id,
                host: "h".into(),
                port: 1,
                rack: None,
                incarnation_id: [broker_id as u8; 16],
                broker_epoch: 1,
                listeners: vec![],
                fenced: fenced.contains(&broker_id),
            });
        }
        image
    }

    /// A partition record as (partition id, replicas, ISR, leader, leader
    /// epoch).
    type PartitionRow = (i32, Vec<i32>, Vec<i32>, i32, i32);

    fn partitions_of(records: &[MetadataRecord]) -> Vec<PartitionRow> {
        records
            .iter()
            .filter_map(|r| match r {
                MetadataRecord::Partition {
                    partition_id,
                    replicas,
                    isr,
                    leader,
                    leader_epoch,
                    ..
                } => Some((
                    *partition_id,
                    replicas.clone(),
                    isr.clone(),
                    *leader,
                    *leader_epoch,
                )),
                _ => None,
            })
            .collect()
    }

    fn assignment(partition_index: i32, broker_ids: &[i32]) -> CreatableReplicaAssignment {
        CreatableReplicaAssignment {
            partition_index,
            broker_ids: broker_ids.to_vec(),
        }
    }

    fn assigned<'a>(given: &'a [CreatableReplicaAssignment]) -> NewTopic<'a> {
        NewTopic {
            name: "t",
            num_partitions: -1,
            replication_factor: -1,
            assignments: Some(given),
            configs: vec![],
        }
    }

    #[test]
    fn placement_puts_fenced_brokers_last_and_never_in_the_lead() {
        let image = image_with_brokers(4, &[2]);
        let config = BrokerConfig::default();
        let topic = |replication_factor| NewTopic {
            name: "t",
            num_partitions: 30,
            replication_factor,
            assignments: None,
            configs: vec![],
        };
        let (records, summary) = create_topic_records(&image, &config, &topic(3)).unwrap();
        assert_eq!(
            (summary.num_partitions, summary.replication_factor),
            (30, 3)
        );
        let partitions = partitions_of(&records);
        assert_eq!(partitions.len(), 30);
        for (i, (id, replicas, isr, leader, epoch)) in partitions.into_iter().enumerate() {
            assert_eq!(id, i as i32);
            assert!(!replicas.contains(&2), "fenced broker placed: {replicas:?}");
            assert_eq!((&isr, leader, epoch), (&replicas, replicas[0], 0));
        }
        // A factor of 4 needs the fenced broker too: a follower outside
        // the ISR, as Kafka places it.
        let (records, _) = create_topic_records(&image, &config, &topic(4)).unwrap();
        for (_, replicas, isr, leader, _) in partitions_of(&records) {
            assert_eq!(replicas.len(), 4);
            assert_ne!(leader, 2, "{replicas:?}");
            assert_eq!(leader, replicas[0]);
            let expected: Vec<i32> = replicas.iter().copied().filter(|&b| b != 2).collect();
            assert_eq!(isr, expected);
        }
        // Five is more than are registered: refused with Kafka's words.
        let err = create_topic_records(&image, &config, &topic(5)).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                error::INVALID_REPLICATION_FACTOR,
                "Unable to replicate the partition 5 time(s): The target replication factor of 5 cannot be reached because only 4 broker(s) are registered or some brokers have all their log directories cordoned."
            )
        );
    }

    #[test]
    fn all_brokers_fenced_refuses_creation_and_growth() {
        let config = BrokerConfig::default();
        let topic = NewTopic {
            name: "t",
            num_partitions: 2,
            replication_factor: 1,
            assignments: None,
            configs: vec![],
        };
        let err =
            create_topic_records(&image_with_brokers(2, &[1, 2]), &config, &topic).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                error::INVALID_REPLICATION_FACTOR,
                "Unable to replicate the partition 1 time(s): All brokers are currently fenced, or have all their log directories cordoned."
            )
        );
        let mut image = image_with_brokers(2, &[]);
        let (records, _) = create_topic_records(&image, &config, &topic).unwrap();
        for r in &records {
            image.apply(r);
        }
        image.apply(&MetadataRecord::FenceBroker {
            broker_id: 1,
            broker_epoch: 1,
        });
        image.apply(&MetadataRecord::FenceBroker {
            broker_id: 2,
            broker_epoch: 1,
        });
        let err = create_partitions_records(&image, "t", 3, None).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                error::INVALID_REPLICATION_FACTOR,
                "All brokers are currently fenced, or have all their log directories cordoned."
            )
        );
    }

    #[test]
    fn an_explicit_assignment_is_kept_and_led_by_its_first_unfenced_replica() {
        let image = image_with_brokers(3, &[3]);
        let config = BrokerConfig::default();
        // Given out of order: records come in partition id order.
        let given = [
            assignment(1, &[3, 2]),
            assignment(0, &[2, 1]),
            assignment(2, &[1, 3]),
        ];
        let (records, summary) = create_topic_records(&image, &config, &assigned(&given)).unwrap();
        assert_eq!((summary.num_partitions, summary.replication_factor), (3, 2));
        assert_eq!(
            partitions_of(&records),
            [
                (0, vec![2, 1], vec![2, 1], 2, 0),
                (1, vec![3, 2], vec![2], 2, 0),
                (2, vec![1, 3], vec![1], 1, 0),
            ]
        );
    }

    #[test]
    fn a_bad_explicit_assignment_is_refused_as_kafka_does() {
        let image = image_with_brokers(3, &[3]);
        let config = BrokerConfig::default();
        let cases: Vec<(Vec<CreatableReplicaAssignment>, &str)> = vec![
            (
                vec![assignment(0, &[1]), assignment(0, &[2])],
                "Found multiple manual partition assignments for partition 0",
            ),
            (
                vec![assignment(0, &[])],
                "The manual partition assignment includes an empty replica list.",
            ),
            (
                vec![assignment(0, &[1, 9, 7])],
                "The manual partition assignment includes broker 7, but no such broker is registered.",
            ),
            (
                vec![assignment(0, &[2, 1, 2])],
                "The manual partition assignment includes the broker 2 more than once.",
            ),
            (
                vec![assignment(0, &[1, 2]), assignment(1, &[1])],
                "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s).",
            ),
            (
                vec![assignment(0, &[1]), assignment(2, &[2])],
                "partitions should be a consecutive 0-based integer sequence",
            ),
            (
                vec![assignment(0, &[1]), assignment(1, &[3])],
                "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown.",
            ),
        ];
        for (given, message) in cases {
            let err = create_topic_records(&image, &config, &assigned(&given)).unwrap_err();
            assert_eq!(
                (err.code, err.message.as_str()),
                (error::INVALID_REPLICA_ASSIGNMENT, message),
                "{given:?}"
            );
        }
        let given = [assignment(0, &[1])];
        for (num_partitions, replication_factor) in [(1, -1), (-1, 1)] {
            let topic = NewTopic {
                num_partitions,
                replication_factor,
                ..assigned(&given)
            };
            let err = create_topic_records(&image, &config, &topic).unwrap_err();
            assert_eq!(err.code, error::INVALID_REQUEST, "{}", err.message);
        }
        // An empty assignment list is no assignment, as in Kafka.
        let (_, summary) = create_topic_records(&image, &config, &assigned(&[])).unwrap();
        assert_eq!(summary.num_partitions, 1);
    }

    #[test]
    fn grown_partitions_are_placed_on_unfenced_brokers_and_checked_as_kafka_does() {
        let mut image = image_with_brokers(3, &[]);
        let topic = NewTopic {
            name: "t",
            num_partitions: 1,
            replication_factor: 2,
            assignments: None,
            configs: vec![],
        };
        let (records, _) = create_topic_records(&image, &BrokerConfig::default(), &topic).unwrap();
        for r in &records {
            image.apply(r);
        }
        image.apply(&MetadataRecord::FenceBroker {
            broker_id: 3,
            broker_epoch: 1,
        });
        let records = create_partitions_records(&image, "t", 5, None).unwrap();
        let partitions = partitions_of(&records);
        assert_eq!(
            partitions.iter().map(|p| p.0).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        for (_, replicas, isr, leader, _) in &partitions {
            assert_eq!(replicas.len(), 2);
            assert!(!replicas.contains(&3), "fenced broker placed: {replicas:?}");
            assert_eq!((isr, *leader), (replicas, replicas[0]));
        }
        // An explicit one may name the fenced broker, which then is no ISR
        // member; one naming only fenced brokers is refused.
        let records = create_partitions_records(&image, "t", 2, Some(&[vec![3, 1]])).unwrap();
        assert_eq!(partitions_of(&records), [(1, vec![3, 1], vec![1], 1, 0)]);
        let mut image3 = image.clone();
        image3.apply(&MetadataRecord::FenceBroker {
            broker_id: 1,
            broker_epoch: 1,
        });
        let err = create_partitions_records(&image3, "t", 2, Some(&[vec![3, 1]])).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                error::INVALID_REPLICA_ASSIGNMENT,
                "All brokers specified in the manual partition assignment for partition 1 are fenced or in controlled shutdown."
            )
        );
        let err = create_partitions_records(&image, "t", 2, Some(&[vec![1]])).unwrap_err();
        assert_eq!(err.code, error::INVALID_REPLICA_ASSIGNMENT);
    }

    #[test]
    fn existing_topic_is_refused() {
        let mut image = image_with_broker();
        let config = BrokerConfig::default();
        let topic = NewTopic {
            name: "t",
            num_partitions: 2,
            replication_factor: 1,
            assignments: None,
            configs: vec![],
        };
        let (records, _) = create_topic_records(&image, &config, &topic).unwrap();
        for r in &records {
            image.apply(r);
        }
        assert_eq!(image.topic("t").unwrap().partitions.len(), 2);
        let err = create_topic_records(&image, &config, &topic).unwrap_err();
        assert_eq!(err.code, error::TOPIC_ALREADY_EXISTS);
    }
}
