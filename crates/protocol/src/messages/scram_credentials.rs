//! DescribeUserScramCredentials (key 50) and AlterUserScramCredentials
//! (key 51), KIP-554: the SCRAM credentials stored for users, described
//! by mechanism and iteration count, and created, replaced or deleted
//! with a client-side salted password. Both have only a v0, flexible.
use bytes::Bytes;

use crate::message;

/// `mechanism` of SCRAM-SHA-256.
pub const SCRAM_SHA_256: i8 = 1;
/// `mechanism` of SCRAM-SHA-512.
pub const SCRAM_SHA_512: i8 = 2;

message! {
    pub struct ScramUserName {
        name: String => [0, 99],
    }
}

message! {
    pub struct DescribeUserScramCredentialsRequest {
        users: Option<Vec<ScramUserName>> => [0, 99],
    }
}

message! {
    pub struct CredentialInfo {
        mechanism: i8 => [0, 99],
        iterations: i32 => [0, 99],
    }
}

message! {
    pub struct DescribeUserScramCredentialsResult {
        user: String => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        credential_infos: Vec<CredentialInfo> => [0, 99],
    }
}

message! {
    pub struct DescribeUserScramCredentialsResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        results: Vec<DescribeUserScramCredentialsResult> => [0, 99],
    }
}

message! {
    pub struct ScramCredentialDeletion {
        name: String => [0, 99],
        mechanism: i8 => [0, 99],
    }
}

message! {
    pub struct ScramCredentialUpsertion {
        name: String => [0, 99],
        mechanism: i8 => [0, 99],
        iterations: i32 => [0, 99],
        salt: Bytes => [0, 99],
        salted_password: Bytes => [0, 99],
    }
}

message! {
    pub struct AlterUserScramCredentialsRequest {
        deletions: Vec<ScramCredentialDeletion> => [0, 99],
        upsertions: Vec<ScramCredentialUpsertion> => [0, 99],
    }
}

message! {
    pub struct AlterUserScramCredentialsResult {
        user: String => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
    }
}

message! {
    pub struct AlterUserScramCredentialsResponse {
        throttle_time_ms: i32 => [0, 99],
        results: Vec<AlterUserScramCredentialsResult> => [0, 99],
    }
}
