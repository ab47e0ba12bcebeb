//! FindCoordinator: a group's coordinator is the broker that leads its
//! `__consumer_offsets` partition (on one node, this one). The offsets
//! topic is created on first use, as Kafka does. v4 looks up
//! several keys at once; v5 (KIP-890) only says the client understands
//! TRANSACTION_ABORTABLE; v6 (KIP-932) adds share-partition keys. Tarn has
//! no transaction coordinator and no share groups, so those keys are
//! refused. A share key gets the error Kafka gives for an unusable key. A
//! transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as
//! InitProducerId does: the error Kafka gives a client that may not use
//! that id, which every client treats as fatal, so a transactional
//! producer fails at once with Tarn's reason. A retriable error
//! (COORDINATOR_NOT_AVAILABLE) would have it retry until its timeout, and
//! Kafka's admin client looks a coordinator up again without a backoff
//! (`kafka-transactions.sh describe` sent some 2,800 requests a second for
//! its whole minute).
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::find_coordinator::{
    Coordinator, FindCoordinatorRequest, FindCoordinatorResponse, KEY_TYPE_GROUP, KEY_TYPE_SHARE,
    KEY_TYPE_TRANSACTION,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::group;

pub const KEY: i16 = 10;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "FindCoordinator",
    min_version: 0,
    max_version: 6,
    flexible_min: 3,
};
/// Why a transactional id's coordinator is not found.
const TRANSACTIONS_UNSUPPORTED: &str =
    "transactions are not supported yet: Tarn has no transaction coordinator";
/// The first version that batches coordinator keys.
const BATCHED_VERSION: i16 = 4;
/// The first version with share-partition keys.
const SHARE_VERSION: i16 = 6;

fn failure(key: String, code: ErrorCode, message: &str) -> Coordinator {
    Coordinator {
        key,
        node_id: -1,
        host: String::new(),
        port: -1,
        error_code: code,
        error_message: Some(message.to_owned()),
    }
}

async fn find(broker: &Arc<Broker>, version: i16, key_type: i8, key: String) -> Coordinator {
    match key_type {
        KEY_TYPE_GROUP => {}
        KEY_TYPE_TRANSACTION => {
            return failure(
                key,
                error::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                TRANSACTIONS_UNSUPPORTED,
            )
        }
        // Kafka answers INVALID_REQUEST for a share key before v6 and for
        // one it cannot parse; with no share coordinator, every share key
        // is one Tarn cannot use.
        KEY_TYPE_SHARE if version >= SHARE_VERSION => {
            return failure(
                key,
                error::INVALID_REQUEST,
                "share groups are not supported",
            )
        }
        other => {
            return failure(
                key,
                error::INVALID_REQUEST,
                &format!("unknown coordinator key type {other}"),
            )
        }
    }
    if let Err(code) = group::ensure_offsets_topic(broker).await {
        return failure(key, code, "the offsets topic is not available");
    }
    // The coordinator is the leader of the group's offsets partition.
    let image = broker.metadata.image();
    let leader = broker.groups.partition_of(&key).and_then(|index| {
        let topic = image.topic(group::OFFSETS_TOPIC)?;
        let partition = topic.partitions.iter().find(|p| p.partition_id == index)?;
        image.brokers.get(&partition.leader).filter(|b| !b.fenced)
    });
    match leader {
        Some(leader) => Coordinator {
            key,
            node_id: leader.broker_id,
            host: leader.host.clone(),
            port: leader.port,
            error_code: error::NONE,
            error_message: None,
        },
        None => failure(
            key,
            error::COORDINATOR_NOT_AVAILABLE,
            "the group's offsets partition has no available leader",
        ),
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    if ctx.version.version >= BATCHED_VERSION {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in request.coordinator_keys {
            coordinators.push(find(broker, ctx.version.version, request.key_type, key).await);
        }
        return FindCoordinatorResponse {
            coordinators,
            ..Default::default()
        };
    }
    let found = find(broker, ctx.version.version, request.key_type, request.key).await;
    FindCoordinatorResponse {
        throttle_time_ms: 0,
        error_code: found.error_code,
        error_message: found.error_message,
        node_id: found.node_id,
        host: found.host,
        port: found.port,
        coordinators: Vec::new(),
    }
}
