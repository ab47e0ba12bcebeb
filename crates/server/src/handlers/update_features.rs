//! UpdateFeatures (KIP-584): changes the finalized level of features, as
//! `kafka-features.sh upgrade`, `downgrade` and `disable` ask. A broker
//! forwards it to the active controller, as Kafka's do.
//!
//! Tarn runs at fixed levels (`api_versions`): `metadata.version` 3.3-IV3
//! (7), and `kraft.version` 1 in a dynamic quorum, 0 otherwise. So the
//! only update that succeeds is one that changes nothing: the current
//! level again (`kafka-features.sh upgrade --metadata 3.3-IV3`), or level
//! 0 of a feature Kafka knows and Tarn does not run (`disable --feature
//! group.version`). Everything else is refused as Kafka's controller
//! refuses a level its software does not support: INVALID_UPDATE_VERSION,
//! with its checks in its order (the upgrade type, a negative level, the
//! supported range, the direction), so a tool prints the same reasons.
//! `kraft.version`, whose range both levels are in, cannot change here:
//! a quorum's voters are fixed by `controller.quorum.voters` (level 0) or
//! dynamic from its format (level 1) for its whole life.
//!
//! As in Kafka, the first refused update fails the whole request, and
//! nothing is written either way, so validate-only answers the same.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::update_features::{
    FeatureUpdateKey, UpdatableFeatureResult, UpdateFeaturesRequest, UpdateFeaturesResponse,
};

use super::api_versions::{
    kraft_version, KRAFT_VERSION_FEATURE, METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL,
};
use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 57;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "UpdateFeatures",
    min_version: 0,
    max_version: 2,
    flexible_min: 0,
};

/// The features Kafka 4.4 knows besides the two above, each supported by
/// Tarn at level 0 only (its protocols are not implemented): level 0
/// passes, as it does on a Kafka controller, and any other is "not
/// supported".
const KAFKA_ONLY_FEATURES: &[&str] = &[
    "group.version",
    "transaction.version",
    "share.version",
    "streams.version",
    "eligible.leader.replicas.version",
];

/// Kafka's upgrade types (`FeatureUpdate.UpgradeType`).
const UPGRADE: i8 = 1;
const SAFE_DOWNGRADE: i8 = 2;
const UNSAFE_DOWNGRADE: i8 = 3;

pub async fn handle(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    request: UpdateFeaturesRequest,
) -> UpdateFeaturesResponse {
    let levels = Levels {
        controller_id: broker.node_id,
        kraft_version: kraft_version(&broker.config),
    };
    let outcome = request
        .feature_updates
        .iter()
        .try_for_each(|update| levels.check(update));
    if let Err(reason) = &outcome {
        tracing::warn!(%reason, "refused a features update");
    }
    answer(ctx.version.version, &request, outcome)
}

/// The levels this node runs at, and who refuses (Kafka's messages name
/// the controller that checked).
struct Levels {
    controller_id: i32,
    kraft_version: i16,
}

impl Levels {
    /// Kafka's `FeatureControlManager.updateFeature` checks, in its order,
    /// against Tarn's levels; the reason for a refusal.
    fn check(&self, update: &FeatureUpdateKey) -> Result<(), String> {
        let feature = update.feature.as_str();
        let level = update.max_version_level;
        let refuse = |reason: &str| {
            Err(format!(
                "Invalid update version {level} for feature {feature}. {reason}"
            ))
        };
        let upgrade_type = update.upgrade_type;
        if ![UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE].contains(&upgrade_type) {
            return refuse("The controller does not support the given upgrade type.");
        }
        if level < 0 {
            return refuse("A feature version cannot be less than 0.");
        }
        let (supported, current) = match feature {
            METADATA_VERSION_FEATURE => (
                (METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
                METADATA_VERSION_LEVEL,
            ),
            KRAFT_VERSION_FEATURE => ((0, 1), self.kraft_version),
            _ => ((0, 0), 0),
        };
        if !(supported.0..=supported.1).contains(&level) {
            let node = self.controller_id;
            return match supported {
                (_, 0) => refuse(&format!(
                    "Local controller {node} does not support this feature."
                )),
                (min, max) if min == max => refuse(&format!(
                    "Local controller {node} only supports versions {min}"
                )),
                (min, max) => refuse(&format!(
                    "Local controller {node} only supports versions {min}-{max}"
                )),
            };
        }
        if level < current && upgrade_type == UPGRADE {
            return refuse(
                "Can't downgrade the version of this feature without setting the upgrade type \
                 to either safe or unsafe downgrade.",
            );
        }
        if level > current && upgrade_type != UPGRADE {
            return refuse("Can't downgrade to a newer version.");
        }
        if feature == KRAFT_VERSION_FEATURE && level != current {
            return refuse(if current == 0 {
                "Tarn cannot change kraft.version: a quorum whose voters are fixed (by \
                 controller.quorum.voters, or a single node) runs at kraft.version 0; one \
                 formatted with --standalone or --initial-controllers runs at 1."
            } else {
                "Tarn cannot change kraft.version: this quorum was formatted as a dynamic \
                 one (kraft.version 1) and stays one."
            });
        }
        let known = [METADATA_VERSION_FEATURE, KRAFT_VERSION_FEATURE]
            .iter()
            .chain(KAFKA_ONLY_FEATURES)
            .any(|name| *name == feature);
        if !known {
            return refuse(&format!("Feature {feature} not found."));
        }
        Ok(())
    }
}

/// Kafka's answer: on a refusal, only the top-level error; on success,
/// from v0 to v1 one result per update, whose message is the error's
/// name ("NONE", as Kafka's `Errors.message()` gives for no error).
fn answer(
    version: i16,
    request: &UpdateFeaturesRequest,
    outcome: Result<(), String>,
) -> UpdateFeaturesResponse {
    match outcome {
        Err(reason) => UpdateFeaturesResponse {
            throttle_time_ms: 0,
            error_code: error::INVALID_UPDATE_VERSION,
            error_message: Some(format!(
                "The update failed for all features since the following feature had an \
                 error: {reason}"
            )),
            results: Vec::new(),
        },
        Ok(()) => UpdateFeaturesResponse {
            throttle_time_ms: 0,
            error_code: error::NONE,
            error_message: None,
            results: match version {
                0 | 1 => request
                    .feature_updates
                    .iter()
                    .map(|update| UpdatableFeatureResult {
                        feature: update.feature.clone(),
                        error_code: error::NONE,
                        error_message: Some("NONE".into()),
                    })
                    .collect(),
                _ => Vec::new(),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(feature: &str, level: i16, upgrade_type: i8) -> FeatureUpdateKey {
        FeatureUpdateKey {
            feature: feature.into(),
            max_version_level: level,
            allow_downgrade: false,
            upgrade_type,
        }
    }

    const STATIC: Levels = Levels {
        controller_id: 3,
        kraft_version: 0,
    };
    const DYNAMIC: Levels = Levels {
        controller_id: 3,
        kraft_version: 1,
    };

    fn reason(levels: &Levels, feature: &str, level: i16, upgrade_type: i8) -> String {
        levels
            .check(&update(feature, level, upgrade_type))
            .expect_err("refused")
    }

    #[test]
    fn the_levels_tarn_runs_at_are_accepted_again() {
        for levels in [&STATIC, &DYNAMIC] {
            let kraft = levels.kraft_version;
            for (feature, level, upgrade_type) in [
                ("metadata.version", 7, UPGRADE),
                ("metadata.version", 7, SAFE_DOWNGRADE),
                ("kraft.version", kraft, UPGRADE),
                ("group.version", 0, SAFE_DOWNGRADE),
                ("transaction.version", 0, UNSAFE_DOWNGRADE),
                ("eligible.leader.replicas.version", 0, UPGRADE),
            ] {
                assert_eq!(
                    levels.check(&update(feature, level, upgrade_type)),
                    Ok(()),
                    "{feature} {level}"
                );
            }
        }
    }

    #[test]
    fn refusals_give_kafkas_reasons_in_kafkas_order() {
        assert_eq!(
            reason(&STATIC, "metadata.version", 8, UPGRADE),
            "Invalid update version 8 for feature metadata.version. Local controller 3 only \
             supports versions 7"
        );
        assert_eq!(
            reason(&STATIC, "metadata.version", 0, SAFE_DOWNGRADE),
            "Invalid update version 0 for feature metadata.version. Local controller 3 only \
             supports versions 7"
        );
        assert_eq!(
            reason(&STATIC, "group.version", 1, UPGRADE),
            "Invalid update version 1 for feature group.version. Local controller 3 does not \
             support this feature."
        );
        assert_eq!(
            reason(&STATIC, "foo.version", 1, UPGRADE),
            "Invalid update version 1 for feature foo.version. Local controller 3 does not \
             support this feature."
        );
        assert_eq!(
            reason(&STATIC, "foo.version", 0, SAFE_DOWNGRADE),
            "Invalid update version 0 for feature foo.version. Feature foo.version not found."
        );
        assert_eq!(
            reason(&STATIC, "kraft.version", 2, UPGRADE),
            "Invalid update version 2 for feature kraft.version. Local controller 3 only \
             supports versions 0-1"
        );
        // The upgrade type is checked first, then the sign, then the range.
        assert!(reason(&STATIC, "foo.version", -1, 4).ends_with("the given upgrade type."));
        assert!(reason(&STATIC, "foo.version", -1, UPGRADE).ends_with("less than 0."));
        assert!(reason(&DYNAMIC, "kraft.version", 0, UPGRADE)
            .ends_with("either safe or unsafe downgrade."));
        assert!(reason(&STATIC, "kraft.version", 1, SAFE_DOWNGRADE)
            .ends_with("Can't downgrade to a newer version."));
        // In range and in the right direction, but not something Tarn does.
        assert!(reason(&STATIC, "kraft.version", 1, UPGRADE).contains("controller.quorum.voters"));
        assert!(reason(&DYNAMIC, "kraft.version", 0, SAFE_DOWNGRADE).contains("stays one"));
    }

    #[test]
    fn answers_carry_per_feature_results_up_to_v1_and_only_on_success() {
        let request = UpdateFeaturesRequest {
            timeout_ms: 60_000,
            feature_updates: vec![update("metadata.version", 7, UPGRADE)],
            validate_only: false,
        };
        let v1 = answer(1, &request, Ok(()));
        assert_eq!((v1.error_code, &v1.error_message), (error::NONE, &None));
        assert_eq!(v1.results.len(), 1);
        assert_eq!(v1.results[0].feature, "metadata.version");
        assert!(answer(2, &request, Ok(())).results.is_empty());
        let refused = answer(1, &request, Err("Invalid update version 8".into()));
        assert_eq!(refused.error_code, error::INVALID_UPDATE_VERSION);
        assert!(refused.results.is_empty());
        assert_eq!(
            refused.error_message.as_deref(),
            Some(
                "The update failed for all features since the following feature had an error: \
                 Invalid update version 8"
            )
        );
    }
}
