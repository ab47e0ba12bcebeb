//! DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), KIP-546:
//! quotas (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
//! `controller_mutation_rate`, `connection_creation_rate`) per entity, an
//! entity being a user, a client id, both, or an IP address, each named or
//! the type's default. v1 of both is flexible.
use crate::codec::{Decode, Encode, Reader, Result, Version};
use crate::message;

/// Kafka's float64: an IEEE 754 double, big-endian.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Float64(pub f64);

impl Decode for Float64 {
    fn decode(r: &mut Reader, v: Version) -> Result<Self> {
        Ok(Float64(f64::from_bits(i64::decode(r, v)? as u64)))
    }
}

impl Encode for Float64 {
    fn encode(&self, out: &mut Vec<u8>, v: Version) {
        (self.0.to_bits() as i64).encode(out, v);
    }
}

/// `match_type` of a filter component: the name given in `match`.
pub const MATCH_TYPE_EXACT: i8 = 0;
/// The type's default entity.
pub const MATCH_TYPE_DEFAULT: i8 = 1;
/// Any entity of the type.
pub const MATCH_TYPE_SPECIFIED: i8 = 2;

message! {
    pub struct ComponentData {
        entity_type: String => [0, 99],
        match_type: i8 => [0, 99],
        r#match: Option<String> => [0, 99],
    }
}

message! {
    pub struct DescribeClientQuotasRequest {
        components: Vec<ComponentData> => [0, 99],
        strict: bool => [0, 99],
    }
}

message! {
    pub struct EntityData {
        entity_type: String => [0, 99],
        entity_name: Option<String> => [0, 99],
    }
}

message! {
    pub struct ValueData {
        key: String => [0, 99],
        value: Float64 => [0, 99],
    }
}

message! {
    pub struct DescribeEntryData {
        entity: Vec<EntityData> => [0, 99],
        values: Vec<ValueData> => [0, 99],
    }
}

message! {
    pub struct DescribeClientQuotasResponse {
        throttle_time_ms: i32 => [0, 99],
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        entries: Option<Vec<DescribeEntryData>> => [0, 99],
    }
}

message! {
    pub struct OpData {
        key: String => [0, 99],
        value: Float64 => [0, 99],
        remove: bool => [0, 99],
    }
}

message! {
    pub struct AlterEntryData {
        entity: Vec<EntityData> => [0, 99],
        ops: Vec<OpData> => [0, 99],
    }
}

message! {
    pub struct AlterClientQuotasRequest {
        entries: Vec<AlterEntryData> => [0, 99],
        validate_only: bool => [0, 99],
    }
}

message! {
    pub struct AlterEntryResult {
        error_code: i16 => [0, 99],
        error_message: Option<String> => [0, 99],
        entity: Vec<EntityData> => [0, 99],
    }
}

message! {
    pub struct AlterClientQuotasResponse {
        throttle_time_ms: i32 => [0, 99],
        entries: Vec<AlterEntryResult> => [0, 99],
    }
}
