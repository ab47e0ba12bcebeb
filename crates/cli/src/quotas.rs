//! The client quota side of `tarn configs` (kafka-configs.sh's `users`,
//! `clients` and `ips` entity types, KIP-546): `--describe` lists the
//! quotas of the entities a filter matches with DescribeClientQuotas,
//! `--alter` sets and removes them with AlterClientQuotas, with the output
//! and checks of kafka-configs.sh 4.4.
//!
//! A quota entity is a user, a client id, both, or an IP address, each
//! named or its type's default. Users also carry SCRAM credentials in
//! Kafka; Tarn cannot store them yet (its brokers refuse them as Kafka
//! does at metadata.version 3.3-IV3), so this command refuses them too.

use anyhow::{bail, Context, Result};

use tarn_protocol::error;
use tarn_protocol::messages::client_quotas::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, AlterEntryData, ComponentData,
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, DescribeEntryData, EntityData,
    Float64, OpData, MATCH_TYPE_DEFAULT, MATCH_TYPE_EXACT, MATCH_TYPE_SPECIFIED,
};

use tarn_cli::client::Client;

use crate::configs::refusal;

/// kafka-configs.sh's quota entity types, by their protocol names.
pub const USERS: &str = "users";
pub const CLIENTS: &str = "clients";
pub const IPS: &str = "ips";

/// Quota keys of users and clients, and of IP addresses.
const USER_CLIENT_KEYS: [&str; 4] = [
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
];
const IP_KEYS: [&str; 1] = ["connection_creation_rate"];
const SCRAM_KEYS: [&str; 2] = ["SCRAM-SHA-256", "SCRAM-SHA-512"];

/// One part of a quota entity: its kafka-configs.sh type, and a name
/// (`Some("")` for the type's default, `None` for any entity of the type,
/// which only a describe may ask for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub kind: &'static str,
    pub name: Option<String>,
}

impl Part {
    /// The entity type's name in the protocol.
    fn protocol_type(&self) -> &'static str {
        match self.kind {
            USERS => "user",
            CLIENTS => "client-id",
            _ => "ip",
        }
    }
}

/// The entity types kafka-configs.sh names, as this module's constants.
pub fn quota_kind(entity_type: &str) -> Option<&'static str> {
    [USERS, CLIENTS, IPS]
        .into_iter()
        .find(|k| *k == entity_type)
}

/// The entities `parts` match exactly (a named part its name, a default
/// part the default, an unnamed part any entity of its type), with their
/// quotas, in the broker's order.
fn matching(client: &mut Client, parts: &[Part]) -> Result<Vec<DescribeEntryData>> {
    let components = parts
        .iter()
        .map(|p| ComponentData {
            entity_type: p.protocol_type().to_owned(),
            match_type: match p.name.as_deref() {
                None => MATCH_TYPE_SPECIFIED,
                Some("") => MATCH_TYPE_DEFAULT,
                Some(_) => MATCH_TYPE_EXACT,
            },
            r#match: p.name.clone().filter(|n| !n.is_empty()),
        })
        .collect();
    let request = DescribeClientQuotasRequest {
        components,
        strict: true,
    };
    let response: DescribeClientQuotasResponse = client.call(48, 1, 1, &request)?;
    if response.error_code != error::NONE {
        bail!(
            "describing client quotas failed: {}",
            refusal(response.error_code, response.error_message.as_deref())
        );
    }
    Ok(response.entries.unwrap_or_default())
}

/// `--describe`: one line per matching entity, as kafka-configs.sh
/// prints them (the entities and each one's quotas in the broker's order).
pub fn describe(client: &mut Client, parts: &[Part]) -> Result<()> {
    for entry in matching(client, parts)? {
        let entity: Vec<String> = ["user", "client-id", "ip"]
            .into_iter()
            .filter_map(|t| {
                let part = entry.entity.iter().find(|e| e.entity_type == t)?;
                let shown = if t == "user" { "user-principal" } else { t };
                Some(match &part.entity_name {
                    Some(name) => format!("{shown} '{name}'"),
                    None => format!("the default {shown}"),
                })
            })
            .collect();
        let values: Vec<String> = entry
            .values
            .iter()
            .map(|v| format!("{}={}", v.key, java_double(v.value.0)))
            .collect();
        println!(
            "Quota configs for {} are {}",
            entity.join(", "),
            values.join(", ")
        );
    }
    Ok(())
}

/// `--alter`: checks the keys as kafka-configs.sh does, then sends one
/// AlterClientQuotas for the entity and prints its confirmation.
pub fn alter(
    client: &mut Client,
    parts: &[Part],
    added: &[(String, String)],
    deleted: &[String],
) -> Result<()> {
    let Some(head) = parts.first() else {
        bail!("no entity to alter");
    };
    if parts.iter().any(|p| p.name.is_none()) {
        bail!(
            "An entity name must be specified with --alter of {}",
            head.kind
        );
    }
    // kafka-configs.sh's rule: IP addresses take connection quotas, a user
    // alone quotas or SCRAM credentials, a client (alone or with a user)
    // quotas only.
    let is_scram = |k: &str| SCRAM_KEYS.contains(&k);
    let user_keys: Vec<&str> = USER_CLIENT_KEYS
        .iter()
        .chain(&SCRAM_KEYS)
        .copied()
        .collect();
    let (allowed, subject, kind): (&[&str], &str, &str) = if head.kind == IPS {
        (&IP_KEYS, "connection quota configs", IPS)
    } else if head.kind == USERS && parts.len() == 1 {
        (&user_keys, "quota and SCRAM credential configs", USERS)
    } else {
        (&USER_CLIENT_KEYS, "quota configs", CLIENTS)
    };
    let added_keys: Vec<&str> = added.iter().map(|(k, _)| k.as_str()).collect();
    let deleted_keys: Vec<&str> = deleted.iter().map(String::as_str).collect();
    for (verb, keys) in [("added", &added_keys), ("deleted", &deleted_keys)] {
        let unknown: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| !allowed.contains(k))
            .collect();
        if !unknown.is_empty() {
            bail!(
                "Only {subject} can be {verb} for '{kind}' using --bootstrap-server. Unexpected \
                 config names: {}",
                unknown.join(",")
            );
        }
    }
    if added_keys.iter().chain(&deleted_keys).any(|k| is_scram(k)) {
        bail!(
            "SCRAM credentials cannot be stored: Tarn runs at metadata.version 3.3-IV3, where \
             Kafka does not support SCRAM"
        );
    }
    let stored: Vec<String> = matching(client, parts)?
        .into_iter()
        .flat_map(|e| e.values)
        .map(|v| v.key)
        .collect();
    let invalid: Vec<&str> = deleted
        .iter()
        .filter(|k| !stored.contains(k))
        .map(String::as_str)
        .collect();
    if !invalid.is_empty() {
        bail!("Invalid config(s): {}", invalid.join(","));
    }
    let mut ops = Vec::new();
    for (key, value) in added {
        let value: f64 = value.trim().parse().with_context(|| {
            format!("Cannot parse quota configuration value for {key}: {value}")
        })?;
        ops.push(OpData {
            key: key.clone(),
            value: Float64(value),
            remove: false,
        });
    }
    ops.extend(deleted.iter().map(|key| OpData {
        key: key.clone(),
        value: Float64(0.0),
        remove: true,
    }));
    let request = AlterClientQuotasRequest {
        entries: vec![AlterEntryData {
            entity: parts
                .iter()
                .map(|p| EntityData {
                    entity_type: p.protocol_type().to_owned(),
                    entity_name: p.name.clone().filter(|n| !n.is_empty()),
                })
                .collect(),
            ops,
        }],
        validate_only: false,
    };
    let response: AlterClientQuotasResponse = client.call(49, 1, 1, &request)?;
    let result = response
        .entries
        .first()
        .context("broker returned no result for the entity")?;
    if result.error_code != error::NONE {
        bail!(
            "Error while executing config command : {}",
            refusal(result.error_code, result.error_message.as_deref())
        );
    }
    match head.name.as_deref() {
        Some("") | None => println!(
            "Completed updating default config for {} in the cluster.",
            head.kind
        ),
        Some(name) => println!(
            "Completed updating config for {} {name}.",
            &head.kind[..head.kind.len() - 1]
        ),
    }
    Ok(())
}

/// A double as Java's `Double.toString` writes it (kafka-configs.sh prints
/// quotas so): plain decimals with at least one fractional digit from
/// 10^-3 up to 10^7, else `d.dddE<n>`, with the fewest digits that read
/// back as the same double.
pub fn java_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    if (1e-3..1e7).contains(&value.abs()) {
        let plain = format!("{value}");
        return if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        };
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("Rust's {:e} always writes an exponent");
    if mantissa.contains('.') {
        format!("{mantissa}E{exponent}")
    } else {
        format!("{mantissa}.0E{exponent}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java_prints_them() {
        for (value, java) in [
            (1024.0, "1024.0"),
            (12.5, "12.5"),
            (0.001, "0.001"),
            (0.0005, "5.0E-4"),
            (9_999_999.0, "9999999.0"),
            (10_000_000.0, "1.0E7"),
            (10_485_760.0, "1.048576E7"),
            (-2.5e9, "-2.5E9"),
            (0.0, "0.0"),
        ] {
            assert_eq!(java_double(value), java, "{value}");
        }
    }
}
