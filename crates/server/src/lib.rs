//! The Tarn broker's server: start-up and the state handlers share
//! (`broker`), the Kafka listener and its transport, one handler module
//! per Kafka API, the glue that ties the group coordinator to the broker,
//! metrics, and the HTTP listener (Prometheus metrics and the console).

pub mod broker;
pub mod cluster;
pub mod connection_quotas;
pub mod controller;
#[cfg(test)]
mod crash_simulation;
pub mod error_names;
pub mod fetch_session;
pub mod group;
pub mod group_lag_source;
pub mod handlers;
pub mod http;
pub mod log_levels;
pub mod metrics;
mod observer;
pub mod refusals;
pub mod replica_fetcher;
pub mod replication_quota;
pub mod server;
#[cfg(test)]
mod testing;
pub mod transport;

pub use broker::{Broker, BrokerError, BrokerOptions};

pub use tarn_config::BrokerConfig;
