//! Any frame, through the broker's real request path: header peek, API and
//! version routing, the bounded body decoder of every API, the handler.
//! The first two bytes pick the API key and version from the served list
//! so most inputs reach a decoder; the rest is the body.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;

use tarn_metadata::topics::delete_topic_records;
use tarn_protocol::messages::create_topics::CreateTopicsRequest;
use tarn_protocol::{Decode, Reader, Version};
use tarn_server::handlers::{dispatch, APIS};
use tarn_server::{Broker, BrokerConfig, BrokerError, BrokerOptions};

/// Partitions hold open files until the file-handle cache lands, so the
/// fuzzer keeps the broker small: it skips creating huge topics and drops
/// every topic once there are more than this many partitions.
const PARTITIONS_MAX: usize = 500;

struct World {
    runtime: tokio::runtime::Runtime,
    broker: Arc<Broker>,
    _dir: tempfile::TempDir,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let broker = Broker::start(BrokerOptions {
            data_dir: dir.path().to_owned(),
            node_id: 1,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
            config: BrokerConfig::default(),
            env: None,
        })
        .expect("start broker");
        // Paused time: a long-poll fetch completes at once instead of
        // stalling the fuzzer for its max_wait_ms.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        World {
            runtime,
            broker,
            _dir: dir,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let spec = &APIS[data[0] as usize % APIS.len()];
    let span = (spec.max_version - spec.min_version + 1) as usize;
    let version = spec.min_version + (data[1] as usize % span) as i16;
    let mut frame = Vec::with_capacity(data.len() + 8);
    frame.extend_from_slice(&spec.key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&7i32.to_be_bytes());
    frame.extend_from_slice(&data[2..]);
    if spec.key == 19 && asks_for_many_partitions(version, spec.flexible_min, &frame) {
        return;
    }
    let world = world();
    let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
    let result = world
        .runtime
        .block_on(dispatch(&world.broker, peer, bytes::Bytes::from(frame)));
    // Either an answer or a refused request; never a panic or an abort.
    let _answer_or_refusal = result;
    drop_topics_if_large(&world.broker);
});

fn asks_for_many_partitions(version: i16, flexible_min: i16, frame: &[u8]) -> bool {
    let v = Version::new(version, flexible_min);
    let mut r = Reader::new(bytes::Bytes::copy_from_slice(frame));
    let header = tarn_protocol::header::RequestHeader::decode(&mut r, v.flexible);
    match header.and_then(|_| CreateTopicsRequest::decode(&mut r, v)) {
        Ok(request) => {
            request
                .topics
                .iter()
                .map(|t| t.num_partitions.max(t.assignments.len() as i32).max(1) as usize)
                .sum::<usize>()
                > PARTITIONS_MAX
        }
        Err(_) => false,
    }
}

fn drop_topics_if_large(broker: &Broker) {
    let image = broker.metadata.image();
    let partitions: usize = image.topics().map(|t| t.partitions.len()).sum();
    if partitions <= PARTITIONS_MAX {
        return;
    }
    broker
        .commit_metadata(|image| -> Result<_, BrokerError> {
            Ok((
                image
                    .topics()
                    .flat_map(|t| delete_topic_records(t))
                    .collect(),
                (),
            ))
        })
        .expect("drop topics");
}
