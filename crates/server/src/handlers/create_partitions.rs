//! CreatePartitions: grows topics to a larger partition count; the new
//! partitions' logs are opened by the replica sync that follows the
//! commit. Asking for the same or a smaller count is INVALID_PARTITIONS;
//! `validate_only` checks without committing.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::create_partitions::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreatePartitionsTopic,
    CreatePartitionsTopicResult,
};

use tarn_metadata::topics::{create_partitions_records, TopicError};
use tarn_metadata::MetadataImage;

use super::{ApiSpec, RequestContext};
use crate::broker::{Broker, BrokerError};

pub const KEY: i16 = 37;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "CreatePartitions",
    min_version: 0,
    max_version: 3,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for topic in &request.topics {
        *counts.entry(topic.name.as_str()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(request.topics.len());
    let mut answered = HashSet::new();
    for topic in &request.topics {
        // A topic named twice is answered once, as Kafka answers it.
        if !answered.insert(topic.name.as_str()) {
            continue;
        }
        let outcome = if counts[topic.name.as_str()] > 1 {
            Err(TopicError {
                code: error::INVALID_REQUEST,
                message: "Duplicate topic in request.".into(),
            })
        } else {
            grow(broker, topic, request.validate_only).await
        };
        let (error_code, error_message) = match outcome {
            Ok(()) => (error::NONE, None),
            Err(e) => (e.code, Some(e.message)),
        };
        results.push(CreatePartitionsTopicResult {
            name: topic.name.clone(),
            error_code,
            error_message,
        });
    }
    CreatePartitionsResponse {
        throttle_time_ms: 0,
        results,
    }
}

async fn grow(
    broker: &Broker,
    topic: &CreatePartitionsTopic,
    validate_only: bool,
) -> Result<(), TopicError> {
    let assignments: Option<Vec<Vec<i32>>> = topic
        .assignments
        .as_ref()
        .map(|a| a.iter().map(|x| x.broker_ids.clone()).collect());
    let build = |image: &MetadataImage| -> Result<_, BrokerError> {
        Ok(
            match create_partitions_records(image, &topic.name, topic.count, assignments.as_deref())
            {
                Ok(_) if validate_only => (Vec::new(), Ok(())),
                Ok(records) => (records, Ok(())),
                Err(e) => (Vec::new(), Err(e)),
            },
        )
    };
    // The new count bounds the partitions added.
    let added_at_most = usize::try_from(topic.count).unwrap_or(0);
    match broker.commit_metadata_async(added_at_most, build).await {
        Ok(Ok(())) => {
            if !validate_only {
                tracing::info!(topic = %topic.name, partitions = topic.count, "added partitions");
            }
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(e) => {
            tracing::error!(topic = %topic.name, error = %e, "create partitions");
            Err(TopicError {
                code: e.commit_error_code(),
                message: e.to_string(),
            })
        }
    }
}
