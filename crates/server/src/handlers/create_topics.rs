//! CreateTopics: validates each topic, then commits its records; with
//! `validate_only` it answers as if it had created them.
use std::collections::HashSet;
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::create_topics::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse,
};

use tarn_metadata::topics::{create_topic_records, NewTopic, TopicError, TopicInfoSummary};
use tarn_metadata::MetadataImage;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 19;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "CreateTopics",
    min_version: 2,
    max_version: 7,
    flexible_min: 5,
};

enum Outcome {
    Created(TopicInfoSummary),
    Failed(TopicError),
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut seen = HashSet::new();
    let duplicates: HashSet<String> = request
        .topics
        .iter()
        .filter(|t| !seen.insert(t.name.clone()))
        .map(|t| t.name.clone())
        .collect();
    // Kafka answers each topic name once, however often it was asked for.
    let mut answered = HashSet::new();
    let mut results = Vec::new();
    for topic in &request.topics {
        if !answered.insert(topic.name.as_str()) {
            continue;
        }
        let outcome = if duplicates.contains(&topic.name) {
            Outcome::Failed(TopicError {
                code: error::INVALID_REQUEST,
                message: format!("Create topics request from client `{}` contains multiple entries for the following topics: {}", ctx.client_id(), topic.name),
            })
        } else if !topic.assignments.is_empty() && topic.num_partitions != -1 {
            Outcome::Failed(TopicError {
                code: error::INVALID_REQUEST,
                message: "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
            })
        } else {
            create_one(broker, topic, request.validate_only).await
        };
        results.push(result_for(broker, &topic.name, outcome));
    }
    CreateTopicsResponse {
        throttle_time_ms: 0,
        topics: results,
    }
}

async fn create_one(
    broker: &Broker,
    topic: &tarn_protocol::messages::create_topics::CreatableTopic,
    validate_only: bool,
) -> Outcome {
    let new = NewTopic {
        name: &topic.name,
        num_partitions: topic.num_partitions,
        replication_factor: topic.replication_factor,
        assignments: Some(&topic.assignments),
        configs: topic
            .configs
            .iter()
            .map(|c| (c.name.clone(), c.value.clone()))
            .collect(),
    };
    let build = |image: &MetadataImage| match create_topic_records(image, &broker.config, &new) {
        Ok((_, summary)) if validate_only => Ok((vec![], Ok(summary))),
        Ok((records, summary)) => Ok((records, Ok(summary))),
        Err(e) => Ok((vec![], Err(e))),
    };
    let partitions = usize::try_from(topic.num_partitions)
        .unwrap_or(0)
        .max(topic.assignments.len());
    match broker.commit_metadata_async(partitions, build).await {
        Ok(Ok(summary)) => {
            if !validate_only {
                tracing::info!(topic = %topic.name, partitions = summary.num_partitions, "created topic");
            }
            Outcome::Created(summary)
        }
        Ok(Err(e)) => Outcome::Failed(e),
        Err(e) => {
            tracing::error!(topic = %topic.name, error = %e, "create topic");
            Outcome::Failed(TopicError {
                code: e.commit_error_code(),
                message: e.to_string(),
            })
        }
    }
}

fn result_for(broker: &Broker, name: &str, outcome: Outcome) -> CreatableTopicResult {
    match outcome {
        Outcome::Created(summary) => CreatableTopicResult {
            name: name.to_owned(),
            topic_id: summary.topic_id,
            error_code: error::NONE,
            error_message: None,
            num_partitions: summary.num_partitions,
            replication_factor: summary.replication_factor,
            configs: Some(
                broker
                    .config_view(&broker.metadata.image())
                    .created_topic_entries(&summary.configs)
                    .into_iter()
                    .map(|entry| CreatableTopicConfigs {
                        name: entry.name.to_owned(),
                        value: entry.value,
                        read_only: false,
                        config_source: entry.source.id(),
                        is_sensitive: false,
                    })
                    .collect(),
            ),
            topic_config_error_code: error::NONE,
        },
        Outcome::Failed(e) => CreatableTopicResult {
            name: name.to_owned(),
            error_code: e.code,
            error_message: Some(e.message),
            // Kafka sends an empty list, not null, with an error.
            configs: Some(Vec::new()),
            ..Default::default()
        },
    }
}
