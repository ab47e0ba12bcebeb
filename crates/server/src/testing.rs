//! Helpers for the broker's own unit tests.

use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use tarn_protocol::codec::{Decode, Encode, Reader, Version};
use tarn_protocol::header::{decode_response_header, RequestHeader};

use crate::handlers::{ApiSpec, Endpoint, RequestContext};

use tarn_config::BrokerConfig;
use tarn_metadata::topics::{create_topic_records, NewTopic};
use tarn_replication::replica_manager::Partition;

use crate::broker::{Broker, BrokerOptions};

/// Appends `records` to a partition whose settings need no flush, so its
/// completion has resolved already; panics otherwise.
pub fn append_now(partition: &Partition, records: &[u8]) -> tarn_storage::AppendInfo {
    let appended = partition.append(records).expect("append");
    appended
        .completion
        .now_or_pending()
        .expect("no flush is due with these settings")
        .expect("append durable as configured");
    appended.info
}

/// A broker with default settings in `dir`, with one topic of
/// `partitions` partitions created through the metadata log.
pub fn broker_with_topic(dir: &Path, topic: &str, partitions: i32) -> Arc<Broker> {
    let broker = Broker::start(BrokerOptions {
        data_dir: dir.to_owned(),
        node_id: 1,
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        config: BrokerConfig::default(),
        env: None,
    })
    .expect("start a broker");
    create_topic(&broker, topic, partitions);
    broker
}

/// Creates `topic` through the metadata log.
pub fn create_topic(broker: &Broker, topic: &str, partitions: i32) {
    broker
        .commit_metadata(|image| {
            let new = NewTopic {
                name: topic,
                num_partitions: partitions,
                replication_factor: 1,
                assignments: None,
                configs: vec![],
            };
            let (records, _) = create_topic_records(image, &broker.config, &new)
                .map_err(|e| crate::BrokerError::Invalid(e.message))?;
            Ok((records, ()))
        })
        .expect("create a topic");
}

/// Writes one request frame (a non-flexible header).
pub async fn send_request<T: Encode>(
    stream: &mut (impl AsyncWrite + Unpin),
    api_key: i16,
    version: Version,
    correlation_id: i32,
    body: &T,
) {
    let header = RequestHeader {
        api_key,
        api_version: version.version,
        correlation_id,
        client_id: Some("test".into()),
    };
    let mut frame = vec![0u8; 4];
    header.encode(&mut frame, false);
    body.encode(&mut frame, version);
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    stream.write_all(&frame).await.expect("send a request");
}

/// Reads one response frame: its correlation id and body.
pub async fn read_response<T: Decode>(
    stream: &mut (impl AsyncRead + Unpin),
    version: Version,
) -> (i32, T) {
    let len = stream.read_i32().await.expect("read a response");
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body).await.expect("read a response");
    let mut r = Reader::new(bytes::Bytes::from(body));
    let correlation_id = decode_response_header(&mut r, 1, false).expect("response header");
    (
        correlation_id,
        T::decode(&mut r, version).expect("response body"),
    )
}

/// The context a handler sees for a request of `spec`'s API at `version`.
pub fn request_context(spec: &ApiSpec, version: i16) -> RequestContext {
    RequestContext {
        header: RequestHeader {
            api_key: spec.key,
            api_version: version,
            correlation_id: 1,
            client_id: None,
        },
        version: Version::new(version, spec.flexible_min),
        peer: "127.0.0.1:1".parse().expect("address"),
        // The test brokers are node 1.
        receiving_node: 1,
        endpoint: Endpoint::Broker,
    }
}
