//! ApiVersions (key 18). v5 lets a client say which cluster and
//! node it believes it is talking to.
use crate::message;

message! {
    pub struct ApiVersionsRequest {
        client_software_name: String => [3, 99],
        client_software_version: String => [3, 99],
        cluster_id: Option<String> => [5, 99],
        node_id: i32 = -1 => [5, 99],
    }
}

message! {
    pub struct ApiVersion {
        api_key: i16 => [0, 99],
        min_version: i16 => [0, 99],
        max_version: i16 => [0, 99],
    }
}

message! {
    /// A feature (KIP-584) and the levels this broker could run at.
    pub struct SupportedFeatureKey {
        name: String => [3, 99],
        min_version: i16 => [3, 99],
        max_version: i16 => [3, 99],
    }
}

message! {
    /// A feature and the level the cluster runs at.
    pub struct FinalizedFeatureKey {
        name: String => [3, 99],
        max_version_level: i16 => [3, 99],
        min_version_level: i16 => [3, 99],
    }
}

message! {
    pub struct ApiVersionsResponse {
        error_code: i16 => [0, 99],
        api_keys: Vec<ApiVersion> => [0, 99],
        throttle_time_ms: i32 => [1, 99],
    }
    tagged {
        0 => supported_features: Vec<SupportedFeatureKey> => [3, 99],
        1 => finalized_features_epoch: i64 = -1 => [3, 99],
        2 => finalized_features: Vec<FinalizedFeatureKey> => [3, 99],
        3 => zk_migration_ready: bool => [3, 99],
    }
}
