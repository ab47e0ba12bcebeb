//! UnregisterBroker (KIP-631): removes a broker's registration, as
//! `kafka-cluster.sh unregister` asks for a broker that is gone for good
//! (a drained one, say). The active controller plans it
//! (`tarn_metadata::brokers::unregister`: fenced, moved off every ISR and
//! leadership, then forgotten) and commits it as one entry; a broker
//! forwards the request there. A broker still running registers again at
//! its next heartbeat, so a broker is stopped before it is unregistered.
//! A removed controller that went on as a broker is a learner of the
//! metadata quorum: unregistered, it leaves the quorum's membership too.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::unregister_broker::{
    UnregisterBrokerRequest, UnregisterBrokerResponse,
};

use tarn_metadata::brokers;

use super::{ApiSpec, RequestContext};
use crate::broker::{Broker, BrokerError};

pub const KEY: i16 = 64;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "UnregisterBroker",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: UnregisterBrokerRequest,
) -> UnregisterBrokerResponse {
    let broker_id = request.broker_id;
    let outcome = broker.commit_metadata(|image| -> Result<_, BrokerError> {
        let config = broker.config_view(image).effective();
        match brokers::unregister(image, &config, broker_id) {
            Ok(records) => {
                let epoch = image.brokers.get(&broker_id).map(|b| b.broker_epoch);
                Ok((records, Ok(epoch)))
            }
            Err(refused) => Ok((Vec::new(), Err(refused))),
        }
    });
    let answer = |error_code, error_message| UnregisterBrokerResponse {
        throttle_time_ms: 0,
        error_code,
        error_message,
    };
    match outcome {
        Ok(Ok(epoch)) => {
            if let Some(epoch) = epoch {
                // Its session ends here: nothing is left to fence.
                broker.sessions.remove(broker_id, epoch);
            }
            tracing::info!(broker_id, "unregistered broker");
            forget_learner(broker, broker_id).await;
            answer(error::NONE, None)
        }
        Ok(Err(refused)) => {
            if refused.code == error::BROKER_ID_NOT_REGISTERED {
                // Unregistered before: a learner left then goes now.
                forget_learner(broker, broker_id).await;
            }
            answer(refused.code, Some(refused.message))
        }
        Err(e) => {
            tracing::error!(error = %e, broker_id, "commit the unregistration of a broker");
            answer(e.commit_error_code(), Some(e.to_string()))
        }
    }
}

/// Takes `broker_id` out of the metadata quorum's membership when it is a
/// learner there (a controller removed while its broker lived). The
/// unregistration stands either way; a failure is logged, and asking
/// again (answered BROKER_ID_NOT_REGISTERED) retries it.
async fn forget_learner(broker: &Arc<Broker>, broker_id: i32) {
    let (Some((quorum, _)), Ok(id)) = (
        broker.controller_topology.quorum(),
        u64::try_from(broker_id),
    ) else {
        return;
    };
    if let Err(e) = quorum.remove_learner(id).await {
        tracing::warn!(broker_id, error = %e, "could not take the unregistered broker out of the metadata quorum's learners");
    }
}
