//! DeleteTopics: by name (all versions) or by topic id (v6+). The topic
//! leaves the metadata at once, so it can be re-created at once.
use std::collections::BTreeSet;
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::delete_topics::{
    DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse,
};
use tarn_protocol::Uuid;

use tarn_metadata::topics::delete_topic_records;
use tarn_metadata::MetadataImage;

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
    let (names, ids, mut responses) = checked(&broker.metadata.image(), wanted);
    for name in names {
        responses.push(delete_one(broker, Some(name), Uuid::ZERO).await);
    }
    for id in ids {
        responses.push(delete_one(broker, None, id).await);
    }
    DeleteTopicsResponse {
        throttle_time_ms: 0,
        responses,
    }
}

fn refused(name: Option<String>, topic_id: Uuid, message: &str) -> DeletableTopicResult {
    DeletableTopicResult {
        name,
        topic_id,
        error_code: error::INVALID_REQUEST,
        error_message: Some(message.to_owned()),
    }
}

/// Kafka's checks of a DeleteTopics request before anything is deleted:
/// an entry with both a name and an id, or neither, is refused; a name or
/// an id given twice is refused once and deletes nothing; so is a name
/// whose topic's id is also given. Returns the names and the ids to
/// delete (each in the order first given) and the refusals.
fn checked(
    image: &MetadataImage,
    wanted: Vec<(Option<String>, Uuid)>,
) -> (Vec<String>, Vec<Uuid>, Vec<DeletableTopicResult>) {
    let mut refusals = Vec::new();
    let (mut names, mut ids) = (Vec::new(), Vec::new());
    for (name, id) in wanted {
        match (name, id == Uuid::ZERO) {
            (None, true) => refusals.push(refused(
                None,
                id,
                "Neither topic name nor id were specified.",
            )),
            (None, false) => ids.push(id),
            (Some(name), true) => names.push(name),
            (Some(name), false) => refusals.push(refused(
                Some(name),
                id,
                "You may not specify both topic name and topic id.",
            )),
        }
    }
    let duplicate_names = repeated(&names);
    let duplicate_ids = repeated(&ids);
    for name in &duplicate_names {
        refusals.push(refused(
            Some(name.clone()),
            Uuid::ZERO,
            "Duplicate topic name.",
        ));
    }
    for id in &duplicate_ids {
        refusals.push(refused(None, *id, "Duplicate topic id."));
    }
    let given_ids: BTreeSet<Uuid> = ids.iter().copied().collect();
    let mut dropped_ids = duplicate_ids;
    let mut kept_names = Vec::new();
    for name in names {
        if duplicate_names.contains(&name) {
            continue;
        }
        match image.topic(&name).map(|t| t.topic_id) {
            Some(id) if given_ids.contains(&id) => {
                dropped_ids.insert(id);
                refusals.push(refused(
                    Some(name),
                    id,
                    "The provided topic name maps to an ID that was already supplied.",
                ));
            }
            _ => kept_names.push(name),
        }
    }
    let kept_ids = ids
        .into_iter()
        .filter(|id| !dropped_ids.contains(id))
        .collect();
    (kept_names, kept_ids, refusals)
}

/// The items of `all` given more than once.
fn repeated<T: Ord + Clone>(all: &[T]) -> BTreeSet<T> {
    let mut seen = BTreeSet::new();
    all.iter().filter(|x| !seen.insert(*x)).cloned().collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_metadata::MetadataRecord;

    fn codes(refusals: &[DeletableTopicResult]) -> Vec<(Option<&str>, Uuid, i16)> {
        let mut out: Vec<_> = refusals
            .iter()
            .map(|r| (r.name.as_deref(), r.topic_id, r.error_code))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn requests_are_checked_as_kafka_checks_them() {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: [5; 16],
        });
        let (t_id, other) = (Uuid([5; 16]), Uuid([9; 16]));
        let bad = error::INVALID_REQUEST;
        let wanted = vec![
            (Some("a".to_owned()), Uuid::ZERO),
            (Some("b".to_owned()), Uuid::ZERO),
            (Some("a".to_owned()), Uuid::ZERO),
            (Some("a".to_owned()), Uuid::ZERO),
            (None, Uuid::ZERO),
            (Some("c".to_owned()), other),
            (None, Uuid([3; 16])),
            (None, Uuid([3; 16])),
            (None, other),
            (Some("t".to_owned()), Uuid::ZERO),
            (None, t_id),
        ];
        let (names, ids, refusals) = checked(&image, wanted);
        assert_eq!(names, vec!["b".to_owned()]);
        assert_eq!(ids, vec![other]);
        assert_eq!(
            codes(&refusals),
            vec![
                (None, Uuid::ZERO, bad),
                (None, Uuid([3; 16]), bad),
                (Some("a"), Uuid::ZERO, bad),
                (Some("c"), other, bad),
                (Some("t"), t_id, bad),
            ]
        );
    }
}
