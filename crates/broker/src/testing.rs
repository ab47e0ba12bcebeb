//! Helpers for the broker's own unit tests.

use std::path::Path;
use std::sync::Arc;

use crate::broker::{Broker, BrokerOptions};
use crate::config::BrokerConfig;
use crate::topics::{create_topic_records, NewTopic};

/// A broker with default settings in `dir`, with one topic of
/// `partitions` partitions created through the metadata log.
pub fn broker_with_topic(dir: &Path, topic: &str, partitions: i32) -> Arc<Broker> {
    let broker = Broker::start(BrokerOptions {
        data_dir: dir.to_owned(),
        node_id: 1,
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        config: BrokerConfig::default(),
    })
    .expect("start a broker");
    broker
        .commit_metadata(|image| {
            let new = NewTopic {
                name: topic,
                num_partitions: partitions,
                replication_factor: 1,
                configs: vec![],
            };
            let (records, _) = create_topic_records(image, &broker.config, &new)
                .map_err(|e| crate::BrokerError::Invalid(e.message))?;
            Ok((records, ()))
        })
        .expect("create a topic");
    broker
}
