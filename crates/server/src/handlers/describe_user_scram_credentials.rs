//! DescribeUserScramCredentials (key 50, KIP-554): each user's SCRAM
//! credentials, by mechanism and iteration count, as a Kafka broker
//! answers from its metadata image: every user that has one when the
//! request names none (a null or empty list), else each named user once,
//! RESOURCE_NOT_FOUND for one without a credential and DUPLICATE_RESOURCE
//! for one named more than once. kafka-configs.sh asks this whenever it
//! describes users.
//!
//! No credential exists in Tarn yet: SCRAM needs metadata.version 3.5-IV2
//! in Kafka, Tarn runs at 3.3-IV3 (`api_versions`), and
//! AlterUserScramCredentials refuses every change at that level as Kafka
//! does. The answer is built over the credentials given to [`describe`],
//! so that the SASL work only has to pass the image's.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::scram_credentials::{
    CredentialInfo, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 50;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeUserScramCredentials",
    min_version: 0,
    max_version: 0,
    flexible_min: 0,
};

pub async fn handle(
    _broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    describe(&request, &BTreeMap::new())
}

/// The answer to `request` over `credentials` (each user's credentials,
/// by mechanism): named users in the order first named, or every user
/// with a credential in name order.
pub fn describe(
    request: &DescribeUserScramCredentialsRequest,
    credentials: &BTreeMap<String, Vec<CredentialInfo>>,
) -> DescribeUserScramCredentialsResponse {
    let named: Vec<(&str, usize)> = match &request.users {
        Some(users) if !users.is_empty() => times_named(users.iter().map(|u| u.name.as_str())),
        _ => credentials.keys().map(|user| (user.as_str(), 1)).collect(),
    };
    let results = named
        .into_iter()
        .map(|(user, times)| {
            let mut result = DescribeUserScramCredentialsResult {
                user: user.to_owned(),
                error_code: error::NONE,
                error_message: None,
                credential_infos: Vec::new(),
            };
            if times > 1 {
                result.error_code = error::DUPLICATE_RESOURCE;
                result.error_message = Some(format!(
                    "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
                ));
            } else {
                match credentials.get(user) {
                    Some(infos) if !infos.is_empty() => result.credential_infos = infos.clone(),
                    _ => {
                        result.error_code = error::RESOURCE_NOT_FOUND;
                        result.error_message = Some(format!(
                            "Attempt to describe a user credential that does not exist: {user}"
                        ));
                    }
                }
            }
            result
        })
        .collect();
    DescribeUserScramCredentialsResponse {
        throttle_time_ms: 0,
        error_code: error::NONE,
        error_message: None,
        results,
    }
}

/// Each name once, in the order first named, with how many times it was
/// named (in one pass: a request may name very many users).
pub(super) fn times_named<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(&'a str, usize)> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut named: Vec<(&str, usize)> = Vec::new();
    for name in names {
        match index.get(name) {
            Some(&i) => named[i].1 += 1,
            None => {
                index.insert(name, named.len());
                named.push((name, 1));
            }
        }
    }
    named
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::scram_credentials::{ScramUserName, SCRAM_SHA_256, SCRAM_SHA_512};

    use super::*;

    fn request(users: Option<&[&str]>) -> DescribeUserScramCredentialsRequest {
        DescribeUserScramCredentialsRequest {
            users: users.map(|names| {
                names
                    .iter()
                    .map(|n| ScramUserName {
                        name: (*n).to_owned(),
                    })
                    .collect()
            }),
        }
    }

    fn outcomes(response: &DescribeUserScramCredentialsResponse) -> Vec<(&str, i16, usize)> {
        response
            .results
            .iter()
            .map(|r| (r.user.as_str(), r.error_code, r.credential_infos.len()))
            .collect()
    }

    #[test]
    fn describes_every_user_or_each_named_one_once() {
        let info = |mechanism| CredentialInfo {
            mechanism,
            iterations: 8192,
        };
        let credentials = BTreeMap::from([
            ("bob".to_owned(), vec![info(SCRAM_SHA_256)]),
            (
                "alice".to_owned(),
                vec![info(SCRAM_SHA_256), info(SCRAM_SHA_512)],
            ),
        ]);
        for all in [None, Some(&[][..])] {
            let response = describe(&request(all), &credentials);
            assert_eq!(
                outcomes(&response),
                vec![("alice", error::NONE, 2), ("bob", error::NONE, 1)]
            );
        }
        let named = describe(
            &request(Some(&["carol", "bob", "carol", "alice"])),
            &credentials,
        );
        assert_eq!(
            outcomes(&named),
            vec![
                ("carol", error::DUPLICATE_RESOURCE, 0),
                ("bob", error::NONE, 1),
                ("alice", error::NONE, 2)
            ]
        );
        assert_eq!(
            named.results[0].error_message.as_deref(),
            Some("Cannot describe SCRAM credentials for the same user twice in a single request: carol")
        );
        let missing = describe(&request(Some(&["dave"])), &credentials);
        assert_eq!(
            outcomes(&missing),
            vec![("dave", error::RESOURCE_NOT_FOUND, 0)]
        );
        assert_eq!(
            missing.results[0].error_message.as_deref(),
            Some("Attempt to describe a user credential that does not exist: dave")
        );
        assert!(describe(&request(None), &BTreeMap::new())
            .results
            .is_empty());
    }
}
