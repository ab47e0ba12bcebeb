//! FindCoordinator: this broker coordinates every group whose
//! `__consumer_offsets` partition it leads (on one node, all of them). The
//! offsets topic is created here on first use, as Kafka does. v4 looks up
//! several keys at once; v5 (KIP-890) only says the client understands
//! TRANSACTION_ABORTABLE; v6 (KIP-932) adds share-partition keys. Tarn has
//! no transaction coordinator and no share groups, so those keys are
//! refused, each with the error Kafka gives for an unusable key.
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

fn find(broker: &Broker, version: i16, key_type: i8, key: String) -> Coordinator {
    match key_type {
        KEY_TYPE_GROUP => {}
        KEY_TYPE_TRANSACTION => {
            return failure(
                key,
                error::COORDINATOR_NOT_AVAILABLE,
                "transactions are not supported yet",
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
    if let Err(code) = group::ensure_offsets_topic(broker) {
        return failure(key, code, "the offsets topic is not available");
    }
    let local = broker
        .groups
        .partition_of(&key)
        .is_some_and(|p| group::GroupStore::is_local(broker.groups.store(), p));
    if !local {
        return failure(
            key,
            error::NOT_COORDINATOR,
            "this broker does not lead the group's offsets partition",
        );
    }
    let image = broker.metadata.image();
    match image.brokers.get(&broker.node_id) {
        Some(me) => Coordinator {
            key,
            node_id: me.broker_id,
            host: me.host.clone(),
            port: me.port,
            error_code: error::NONE,
            error_message: None,
        },
        None => failure(
            key,
            error::COORDINATOR_NOT_AVAILABLE,
            "this broker is not registered",
        ),
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    if ctx.version.version >= BATCHED_VERSION {
        return FindCoordinatorResponse {
            coordinators: request
                .coordinator_keys
                .into_iter()
                .map(|key| find(broker, ctx.version.version, request.key_type, key))
                .collect(),
            ..Default::default()
        };
    }
    let found = find(broker, ctx.version.version, request.key_type, request.key);
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
