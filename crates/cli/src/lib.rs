//! The pieces of the `tarn` binary that tests reuse: a minimal blocking
//! Kafka protocol client.

pub mod client;
