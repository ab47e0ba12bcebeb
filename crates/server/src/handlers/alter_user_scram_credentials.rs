//! AlterUserScramCredentials (key 51, KIP-554): creates, replaces or
//! deletes users' SCRAM credentials (kafka-configs.sh `--alter
//! --entity-type users --add-config 'SCRAM-SHA-256=[password=...]'`).
//!
//! Kafka's controller refuses every user's change with UNSUPPORTED_VERSION
//! ("The current metadata.version does not support SCRAM") below
//! metadata.version 3.5-IV2, before checking anything else; Tarn runs at
//! 3.3-IV3 (`api_versions`) and answers the same, one result per user
//! named, in the order first named. The request is forwarded to the
//! active controller, where credentials will be committed once SASL lands.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::scram_credentials::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 51;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "AlterUserScramCredentials",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

/// Kafka's answer to a SCRAM change below metadata.version 3.5-IV2.
const SCRAM_UNSUPPORTED: &str = "The current metadata.version does not support SCRAM";

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    alter(&request)
}

fn alter(request: &AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse {
    let named = request
        .deletions
        .iter()
        .map(|d| d.name.as_str())
        .chain(request.upsertions.iter().map(|u| u.name.as_str()));
    let users = super::describe_user_scram_credentials::times_named(named);
    AlterUserScramCredentialsResponse {
        throttle_time_ms: 0,
        results: users
            .into_iter()
            .map(|(user, _)| AlterUserScramCredentialsResult {
                user: user.to_owned(),
                error_code: error::UNSUPPORTED_VERSION,
                error_message: Some(SCRAM_UNSUPPORTED.to_owned()),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tarn_protocol::messages::scram_credentials::{
        ScramCredentialDeletion, ScramCredentialUpsertion, SCRAM_SHA_256,
    };

    use super::*;

    #[test]
    fn every_user_named_is_refused_once() {
        let upsert = |name: &str| ScramCredentialUpsertion {
            name: name.to_owned(),
            mechanism: SCRAM_SHA_256,
            iterations: 8192,
            salt: Bytes::from_static(b"salt"),
            salted_password: Bytes::from_static(&[1; 32]),
        };
        let request = AlterUserScramCredentialsRequest {
            deletions: vec![ScramCredentialDeletion {
                name: "bob".to_owned(),
                mechanism: SCRAM_SHA_256,
            }],
            upsertions: vec![upsert("alice"), upsert("bob"), upsert("alice")],
        };
        let response = alter(&request);
        let results: Vec<(&str, i16, Option<&str>)> = response
            .results
            .iter()
            .map(|r| (r.user.as_str(), r.error_code, r.error_message.as_deref()))
            .collect();
        assert_eq!(
            results,
            vec![
                ("bob", error::UNSUPPORTED_VERSION, Some(SCRAM_UNSUPPORTED)),
                ("alice", error::UNSUPPORTED_VERSION, Some(SCRAM_UNSUPPORTED))
            ]
        );
        assert!(alter(&AlterUserScramCredentialsRequest::default())
            .results
            .is_empty());
    }
}
