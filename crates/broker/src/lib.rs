//! The Tarn broker: the network server, one handler module per Kafka API,
//! the ReplicaManager that hosts partition logs, the metadata log and
//! image, and the broker configuration.

pub mod blocking;
pub mod broker;
pub mod client_quotas;
pub mod config;
pub mod config_docs;
pub mod connection_quotas;
#[cfg(test)]
mod crash_simulation;
pub mod durability;
pub mod dynamic_config;
pub mod episode;
pub mod error_names;
pub mod fetch_session;
pub mod group;
pub mod group_lag;
pub mod handlers;
pub mod http;
pub mod log_deleter;
pub mod log_manager;
pub mod metadata;
pub mod metrics;
pub mod refusals;
pub mod replica_manager;
pub mod server;
#[cfg(test)]
mod testing;
pub mod topics;
pub mod transport;

pub use broker::{Broker, BrokerError, BrokerOptions};
pub use config::BrokerConfig;
