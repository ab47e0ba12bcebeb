//! InitProducerId: hands idempotent producers a producer id and epoch.
//! Transactions are a later issue, so a transactional id is refused.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::init_producer_id::{InitProducerIdRequest, InitProducerIdResponse};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 22;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "InitProducerId",
    min_version: 0,
    // v5 only says the client understands TRANSACTION_ABORTABLE (KIP-890),
    // which Tarn never returns. v6 (two-phase commit, KIP-939) is not
    // served by Kafka 4.4 either.
    max_version: 5,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    // Kafka takes a producer id and epoch together or neither (KIP-360).
    if (request.producer_id == -1) != (request.producer_epoch == -1) {
        return InitProducerIdResponse {
            error_code: error::INVALID_REQUEST,
            producer_epoch: -1,
            ..Default::default()
        };
    }
    if request.transactional_id.is_some() {
        tracing::info!(client_id = ctx.client_id(), peer = %ctx.peer, "transactional producer refused: transactions are not supported yet");
        return InitProducerIdResponse {
            error_code: error::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_epoch: -1,
            ..Default::default()
        };
    }
    match broker.next_producer_id().await {
        Ok(producer_id) => InitProducerIdResponse {
            producer_id,
            producer_epoch: 0,
            ..Default::default()
        },
        Err(e) => {
            tracing::error!(error = %e, "allocate producer id");
            InitProducerIdResponse {
                error_code: error::UNKNOWN_SERVER_ERROR,
                producer_epoch: -1,
                ..Default::default()
            }
        }
    }
}
