//! DeleteTopics: by name (all versions) or by topic id (v6+). The topic
//! leaves the metadata at once, so it can be re-created at once.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::delete_topics::{
    DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse,
};
use tarn_protocol::Uuid;

use tarn_metadata::topics::delete_topic_records;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 20;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DeleteTopics",
    min_version: 1,
    max_version: 6,
    flexible_min: 4,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<String>, Uuid)> = if ctx.version.version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), Uuid::ZERO))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, topic_id) in wanted {
        responses.push(delete_one(broker, name, topic_id).await);
    }
    DeleteTopicsResponse {
        throttle_time_ms: 0,
        responses,
    }
}

async fn delete_one(broker: &Broker, name: Option<String>, topic_id: Uuid) -> DeletableTopicResult {
    let mut result = DeletableTopicResult {
        name: name.clone(),
        topic_id,
        ..Default::default()
    };
    let outcome = broker
        .commit_metadata_async(0, |image| {
            let topic = match &name {
                Some(n) => image.topic(n),
                None => image.topic_by_id(&topic_id),
            };
            match topic {
                Some(t) if t.is_internal() => Ok((
                    vec![],
                    Err((
                        error::INVALID_REQUEST,
                        format!("Topic {} is internal and cannot be deleted", t.name),
                    )),
                )),
                Some(t) => Ok((delete_topic_records(t), Ok((t.name.clone(), t.topic_id)))),
                None if name.is_some() => Ok((
                    vec![],
                    Err((
                        error::UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.".to_owned(),
                    )),
                )),
                None => Ok((
                    vec![],
                    Err((
                        error::UNKNOWN_TOPIC_ID,
                        "This server does not host this topic ID.".to_owned(),
                    )),
                )),
            }
        })
        .await;
    match outcome {
        Ok(Ok((deleted_name, deleted_id))) => {
            tracing::info!(topic = %deleted_name, "deleted topic");
            result.name = Some(deleted_name);
            result.topic_id = deleted_id;
        }
        Ok(Err((code, message))) => {
            result.error_code = code;
            result.error_message = Some(message);
        }
        Err(e) => {
            tracing::error!(error = %e, "delete topic");
            result.error_code = e.commit_error_code();
            result.error_message = Some(e.to_string());
        }
    }
    result
}
