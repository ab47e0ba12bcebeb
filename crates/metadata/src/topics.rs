//! Topic creation, growth and deletion as metadata records, shared by
//! CreateTopics, CreatePartitions, DeleteTopics and Metadata's
//! auto-creation.

use std::collections::BTreeMap;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::Uuid;

use tarn_config::{validate_topic_config, BrokerConfig};

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
    /// -1 means `num.partitions`.
    pub num_partitions: i32,
    /// -1 means `default.replication.factor`.
    pub replication_factor: i16,
    pub configs: Vec<(String, Option<String>)>,
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
    let partitions = match topic.num_partitions {
        -1 => config.get_i64("num.partitions") as i32,
        n if n <= 0 => {
            return fail(
                error::INVALID_PARTITIONS,
                "Number of partitions must be larger than 0.",
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
    let replication_factor = match topic.replication_factor {
        -1 => config.get_i64("default.replication.factor") as i16,
        n if n <= 0 => {
            return fail(
                error::INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0.",
            )
        }
        n => n,
    };
    let brokers: Vec<i32> = image.brokers.keys().copied().collect();
    if replication_factor as usize > brokers.len() {
        return fail(
            error::INVALID_REPLICATION_FACTOR,
            format!(
                "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {} broker(s) are registered.",
                brokers.len()
            ),
        );
    }
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
    let mut records = vec![MetadataRecord::Topic {
        name: topic.name.to_owned(),
        topic_id: topic_id.0,
    }];
    for (name, value) in &configs {
        records.push(MetadataRecord::TopicConfig {
            topic_id: topic_id.0,
            name: name.clone(),
            value: Some(value.clone()),
        });
    }
    for partition_id in 0..partitions {
        // Spread leaders round-robin over the registered brokers.
        let replicas: Vec<i32> = (0..replication_factor as usize)
            .map(|r| brokers[(partition_id as usize + r) % brokers.len()])
            .collect();
        records.push(MetadataRecord::Partition {
            topic_id: topic_id.0,
            partition_id,
            leader: replicas[0],
            isr: replicas.clone(),
            replicas,
            leader_epoch: 0,
        });
    }
    Ok((
        records,
        TopicInfoSummary {
            topic_id,
            num_partitions: partitions,
            replication_factor,
            configs,
        },
    ))
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
/// on registered brokers.
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
    let replication_factor = topic.partitions.first().map_or(1, |p| p.replicas.len());
    let brokers: Vec<i32> = image.brokers.keys().copied().collect();
    if brokers.is_empty() {
        return fail(
            error::INVALID_REPLICATION_FACTOR,
            "Unable to place new partitions: no broker is registered.",
        );
    }
    let placed: Vec<Vec<i32>> = match assignments {
        Some(given) => {
            if given.len() != additional {
                return fail(
                    error::INVALID_REPLICA_ASSIGNMENT,
                    format!("Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.", given.len()),
                );
            }
            for replicas in given {
                check_assignment(replicas, replication_factor, &brokers)?;
            }
            given.to_vec()
        }
        // Spread leaders round-robin over the registered brokers, as at creation.
        None => (current..count)
            .map(|partition_id| {
                (0..replication_factor)
                    .map(|r| brokers[(partition_id as usize + r) % brokers.len()])
                    .collect()
            })
            .collect(),
    };
    Ok(placed
        .into_iter()
        .zip(current..count)
        .map(|(replicas, partition_id)| MetadataRecord::Partition {
            topic_id: topic.topic_id.0,
            partition_id,
            leader: replicas[0],
            isr: replicas.clone(),
            replicas,
            leader_epoch: 0,
        })
        .collect())
}

fn check_assignment(
    replicas: &[i32],
    replication_factor: usize,
    brokers: &[i32],
) -> Result<(), TopicError> {
    if replicas.len() != replication_factor {
        return fail(
            error::INVALID_REPLICA_ASSIGNMENT,
            format!("The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {replication_factor} replica(s).", replicas.len()),
        );
    }
    for (i, broker) in replicas.iter().enumerate() {
        if !brokers.contains(broker) {
            return fail(
                error::INVALID_REPLICA_ASSIGNMENT,
                format!("The manual partition assignment includes broker {broker}, but no such broker is registered."),
            );
        }
        if replicas[..i].contains(broker) {
            return fail(
                error::INVALID_REPLICA_ASSIGNMENT,
                format!(
                    "The manual partition assignment includes the broker {broker} more than once."
                ),
            );
        }
    }
    Ok(())
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

    #[test]
    fn existing_topic_is_refused() {
        let mut image = image_with_broker();
        let config = BrokerConfig::default();
        let topic = NewTopic {
            name: "t",
            num_partitions: 2,
            replication_factor: 1,
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
