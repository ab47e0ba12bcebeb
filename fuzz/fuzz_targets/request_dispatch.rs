//! Any frame, through the broker's real request path: header peek, API and
//! version routing, the bounded body decoder of every API, the handler.
//! The first two bytes pick the API key and version from the served list
//! so most inputs reach a decoder; the rest is the body.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use tarn_broker::handlers::{dispatch, APIS};
use tarn_broker::{Broker, BrokerConfig, BrokerOptions};

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
    let world = world();
    let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
    let result = world
        .runtime
        .block_on(dispatch(&world.broker, peer, bytes::Bytes::from(frame)));
    // Either an answer or a refused request; never a panic or an abort.
    let _answer_or_refusal = result;
});
