//! UpdateFeatures (key 57, KIP-584): asks the controller to change the
//! finalized level of features, as `kafka-features.sh upgrade`,
//! `downgrade` and `disable` do. Flexible from version 0; v1 adds the
//! upgrade type and validate-only, v2 drops the per-feature results.
use crate::message;

message! {
    pub struct FeatureUpdateKey {
        feature: String => [0, 99],
        max_version_level: i16 => [0, 99],
        allow_downgrade: bool => [0, 0],
        upgrade_type: i8 = 1 => [1, 99],
    }
}

message! {
    pub struct UpdateFeaturesRequest {
        timeout_ms: i32 = 60000 => [0, 99],
        feature_updates: Vec<FeatureUpdateKey> => [0, 99],
        validate_only: bool => [1, 99],
    }
}

message! {
    pub struct UpdatableFeatureResult {
        feature: String => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct UpdateFeaturesResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        results: Vec<UpdatableFeatureResult> => [0, 1],
    }
}
