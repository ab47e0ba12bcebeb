//! Client quotas (KIP-546) as Kafka's controller checks and its metadata
//! image describes them: which entities and keys are valid, and which
//! stored entities a DescribeClientQuotas filter matches. Pure functions
//! over the image; the handlers commit and read through the metadata log.
//!
//! Quotas are stored and described, not yet enforced.
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use tarn_protocol::error;
use tarn_protocol::messages::client_quotas::{
    ComponentData, EntityData, MATCH_TYPE_DEFAULT, MATCH_TYPE_EXACT, MATCH_TYPE_SPECIFIED,
};

use crate::QuotaEntity;

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// How a quota key's value must look (Kafka's QuotaConfigs types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QuotaType {
    Long,
    Int,
    Double,
}

/// The keys a user or client-id entity may carry.
const USER_CLIENT_KEYS: &[(&str, QuotaType)] = &[
    ("producer_byte_rate", QuotaType::Long),
    ("consumer_byte_rate", QuotaType::Long),
    ("request_percentage", QuotaType::Double),
    ("controller_mutation_rate", QuotaType::Double),
];
/// The keys an IP entity may carry.
const IP_KEYS: &[(&str, QuotaType)] = &[("connection_creation_rate", QuotaType::Int)];

/// A refusal: Kafka's error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaError {
    pub code: i16,
    pub message: String,
}

fn invalid(message: impl Into<String>) -> QuotaError {
    QuotaError {
        code: error::INVALID_REQUEST,
        message: message.into(),
    }
}

/// Checks an entity of an AlterClientQuotas entry and returns it in
/// stored form (pairs in type order).
pub fn validate_entity(entity: &[EntityData]) -> Result<QuotaEntity, QuotaError> {
    if entity.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    let mut pairs: BTreeMap<String, Option<String>> = BTreeMap::new();
    for e in entity {
        if pairs.contains_key(&e.entity_type) {
            return Err(invalid(format!(
                "Invalid empty client quota entity, duplicate entity entry {}",
                e.entity_type
            )));
        }
        if ![USER, CLIENT_ID, IP].contains(&e.entity_type.as_str()) {
            return Err(invalid(format!(
                "Unhandled client quota entity type: {}",
                e.entity_type
            )));
        }
        if e.entity_name.as_deref() == Some("") {
            return Err(invalid(format!("Empty {} not supported", e.entity_type)));
        }
        pairs.insert(e.entity_type.clone(), e.entity_name.clone());
    }
    if let Some(ip) = pairs.get(IP) {
        if pairs.len() > 1 {
            return Err(invalid(
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
            ));
        }
        if let Some(ip) = ip {
            if ip.parse::<IpAddr>().is_err() {
                return Err(invalid(format!("Unable to resolve address {ip}")));
            }
        }
    }
    Ok(pairs.into_iter().collect())
}

/// Checks one quota key of `entity`, and its value when it is being set.
pub fn validate_op(entity: &QuotaEntity, key: &str, value: Option<f64>) -> Result<(), QuotaError> {
    let keys = if entity.iter().any(|(t, _)| t == IP) {
        IP_KEYS
    } else {
        USER_CLIENT_KEYS
    };
    let Some((_, kind)) = keys.iter().find(|(k, _)| *k == key) else {
        return Err(invalid(format!("Invalid configuration key {key}")));
    };
    let Some(value) = value else {
        return Ok(());
    };
    if value.is_nan() || value <= 0.0 {
        return Err(invalid(format!("Quota {key} must be greater than 0")));
    }
    let max = match kind {
        QuotaType::Double => return Ok(()),
        QuotaType::Int => (f64::from(i32::MAX), "an INT"),
        QuotaType::Long => (i64::MAX as f64, "a LONG"),
    };
    if value > max.0 {
        return Err(invalid(format!(
            "Proposed value for {key} is too large for {}.",
            max.1
        )));
    }
    if value - value.floor() >= 1e-7 {
        return Err(invalid(format!(
            "Proposed value for {key} is not an integer."
        )));
    }
    Ok(())
}

/// A DescribeClientQuotas filter, checked.
#[derive(Debug, Default)]
pub struct QuotaFilter {
    /// Types that must have exactly this name (None: the default entity).
    exact: BTreeMap<String, Option<String>>,
    /// Types that must be present, with any name.
    any: BTreeSet<String>,
    strict: bool,
}

impl QuotaFilter {
    pub fn new(components: &[ComponentData], strict: bool) -> Result<QuotaFilter, QuotaError> {
        let mut filter = QuotaFilter {
            strict,
            ..Default::default()
        };
        for c in components {
            let t = &c.entity_type;
            if t.is_empty() {
                return Err(invalid("Invalid empty entity type."));
            }
            if filter.exact.contains_key(t) || filter.any.contains(t) {
                return Err(invalid(format!(
                    "Entity type {t} cannot appear more than once in the filter."
                )));
            }
            if ![USER, CLIENT_ID, IP].contains(&t.as_str()) {
                return Err(QuotaError {
                    code: error::UNSUPPORTED_VERSION,
                    message: format!("Unsupported entity type {t}"),
                });
            }
            match (c.match_type, &c.r#match) {
                (MATCH_TYPE_EXACT, Some(name)) => {
                    filter.exact.insert(t.clone(), Some(name.clone()));
                }
                (MATCH_TYPE_EXACT, None) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                    ))
                }
                (MATCH_TYPE_DEFAULT, None) => {
                    filter.exact.insert(t.clone(), None);
                }
                (MATCH_TYPE_DEFAULT, Some(_)) => {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                    ))
                }
                (MATCH_TYPE_SPECIFIED, None) => {
                    filter.any.insert(t.clone());
                }
                (MATCH_TYPE_SPECIFIED, Some(_)) => return Err(invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )),
                (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
            }
        }
        let has = |t: &str| filter.exact.contains_key(t) || filter.any.contains(t);
        if has(IP) && (has(USER) || has(CLIENT_ID)) {
            return Err(invalid(
                "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.",
            ));
        }
        Ok(filter)
    }

    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        if self.strict && entity.len() != self.exact.len() + self.any.len() {
            return false;
        }
        let name_of = |t: &str| entity.iter().find(|(et, _)| et == t).map(|(_, n)| n);
        self.exact.iter().all(|(t, want)| name_of(t) == Some(want))
            && self.any.iter().all(|t| name_of(t).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(pairs: &[(&str, Option<&str>)]) -> Vec<EntityData> {
        pairs
            .iter()
            .map(|(t, n)| EntityData {
                entity_type: t.to_string(),
                entity_name: n.map(str::to_owned),
            })
            .collect()
    }

    fn component(t: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData {
            entity_type: t.into(),
            match_type,
            r#match: name.map(str::to_owned),
        }
    }

    #[test]
    fn entities_are_checked_as_kafka_does() {
        let ok = validate_entity(&entity(&[(CLIENT_ID, None), (USER, Some("alice"))])).unwrap();
        assert_eq!(
            ok,
            vec![
                (CLIENT_ID.to_owned(), None),
                (USER.to_owned(), Some("alice".to_owned()))
            ]
        );
        assert!(validate_entity(&entity(&[(IP, Some("10.0.0.1"))])).is_ok());
        assert!(validate_entity(&entity(&[(IP, None)])).is_ok());
        for bad in [
            entity(&[]),
            entity(&[(USER, Some("a")), (USER, Some("b"))]),
            entity(&[("group", Some("g"))]),
            entity(&[(USER, Some(""))]),
            entity(&[(IP, Some("10.0.0.1")), (USER, None)]),
            entity(&[(IP, Some("not an address"))]),
        ] {
            let e = validate_entity(&bad).unwrap_err();
            assert_eq!(e.code, error::INVALID_REQUEST, "{bad:?}: {e:?}");
        }
    }

    #[test]
    fn keys_and_values_are_checked_by_type() {
        let user = validate_entity(&entity(&[(USER, Some("u"))])).unwrap();
        let ip = validate_entity(&entity(&[(IP, None)])).unwrap();
        assert!(validate_op(&user, "producer_byte_rate", Some(1024.0)).is_ok());
        assert!(validate_op(&user, "request_percentage", Some(12.5)).is_ok());
        assert!(validate_op(&user, "producer_byte_rate", None).is_ok());
        assert!(validate_op(&ip, "connection_creation_rate", Some(10.0)).is_ok());
        for (entity, key, value) in [
            (&user, "no_such_quota", Some(1.0)),
            (&user, "no_such_quota", None),
            (&user, "connection_creation_rate", Some(1.0)),
            (&ip, "producer_byte_rate", Some(1.0)),
            (&user, "producer_byte_rate", Some(1.5)),
            (&user, "producer_byte_rate", Some(0.0)),
            (&user, "request_percentage", Some(-1.0)),
            (&ip, "connection_creation_rate", Some(3e9)),
        ] {
            let e = validate_op(entity, key, value).unwrap_err();
            assert_eq!(e.code, error::INVALID_REQUEST, "{key}={value:?}: {e:?}");
        }
    }

    #[test]
    fn filters_match_exact_default_and_any_names() {
        let alice = validate_entity(&entity(&[(USER, Some("alice"))])).unwrap();
        let default_user = validate_entity(&entity(&[(USER, None)])).unwrap();
        let alice_app =
            validate_entity(&entity(&[(USER, Some("alice")), (CLIENT_ID, Some("app"))])).unwrap();
        let matching = |components: &[ComponentData], strict: bool| -> Vec<bool> {
            let filter = QuotaFilter::new(components, strict).unwrap();
            [&alice, &default_user, &alice_app]
                .iter()
                .map(|e| filter.matches(e))
                .collect()
        };
        assert_eq!(matching(&[], false), vec![true, true, true]);
        assert_eq!(matching(&[], true), vec![false, false, false]);
        let exact = [component(USER, MATCH_TYPE_EXACT, Some("alice"))];
        assert_eq!(matching(&exact, false), vec![true, false, true]);
        assert_eq!(matching(&exact, true), vec![true, false, false]);
        let default = [component(USER, MATCH_TYPE_DEFAULT, None)];
        assert_eq!(matching(&default, false), vec![false, true, false]);
        let any = [component(USER, MATCH_TYPE_SPECIFIED, None)];
        assert_eq!(matching(&any, true), vec![true, true, false]);

        for (components, code) in [
            (
                vec![component("", MATCH_TYPE_EXACT, Some("x"))],
                error::INVALID_REQUEST,
            ),
            (
                vec![component(USER, MATCH_TYPE_EXACT, None)],
                error::INVALID_REQUEST,
            ),
            (
                vec![component(USER, MATCH_TYPE_DEFAULT, Some("x"))],
                error::INVALID_REQUEST,
            ),
            (vec![component(USER, 7, None)], error::INVALID_REQUEST),
            (
                vec![
                    component(USER, MATCH_TYPE_SPECIFIED, None),
                    component(USER, MATCH_TYPE_DEFAULT, None),
                ],
                error::INVALID_REQUEST,
            ),
            (
                vec![
                    component(IP, MATCH_TYPE_SPECIFIED, None),
                    component(USER, MATCH_TYPE_DEFAULT, None),
                ],
                error::INVALID_REQUEST,
            ),
            (
                vec![component("group", MATCH_TYPE_SPECIFIED, None)],
                error::UNSUPPORTED_VERSION,
            ),
        ] {
            assert_eq!(
                QuotaFilter::new(&components, false).unwrap_err().code,
                code,
                "{components:?}"
            );
        }
    }
}
