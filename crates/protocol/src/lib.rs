//! The Kafka wire protocol as Tarn speaks it: a bounded codec for the
//! requests and responses of every API the broker serves, request and
//! response headers, Kafka's error codes, and a zero-copy view of v2
//! record batches with CRC-32C and the compression codecs. No I/O lives
//! here.

pub mod codec;
pub mod compression;
pub mod consumer_protocol;
pub mod error;
pub mod header;
pub mod messages;
pub mod record_batch;
pub mod records;

pub use codec::{Decode, DecodeError, Encode, Reader, Uuid, Version};
