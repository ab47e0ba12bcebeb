//! The Tarn broker: the network server, one handler module per Kafka API,
//! the ReplicaManager that hosts partition logs, the metadata log and
//! image, and the broker configuration.

pub mod broker;
pub mod config;
pub mod handlers;
pub mod log_manager;
pub mod metadata;
pub mod replica_manager;
pub mod server;
pub mod topics;

pub use broker::{Broker, BrokerError, BrokerOptions};
pub use config::BrokerConfig;
