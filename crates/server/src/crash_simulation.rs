//! The whole broker on a simulated machine: every file through a
//! `SimFileSystem` that can lose power, every client through in-process
//! pipes (`transport::MemoryListener`). Producers with acks=all on a topic
//! with `flush.messages=1` get answers; then the machine halts mid-run,
//! loses what was not fsynced (torn at seeded points) and boots again.
//! Whatever the seed, the restarted broker still has the topic and every
//! acknowledged record at its acknowledged offset, and its logs are a clean
//! prefix of what was written. The same holds for offset commits: one
//! acknowledged under `log.flush.interval.messages=1` survives the cut.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tarn_protocol::codec::Version;
use tarn_protocol::messages::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    OffsetCommitResponse,
};
use tarn_protocol::messages::produce::{
    PartitionProduceData, ProduceRequest, ProduceResponse, TopicProduceData,
};
use tarn_protocol::record_batch::{BatchIter, RecordBatchBuilder};
use tarn_replication::replica_manager::ReadLimit;
use tarn_storage::sim::SimFileSystem;
use tarn_storage::{LogEnv, ManualClock};

use tarn_config::BrokerConfig;

use crate::broker::{Broker, BrokerOptions};
use crate::testing::{create_topic, read_response, send_request};
use crate::transport::memory_listener;

const PRODUCE_V3: Version = Version {
    version: 3,
    flexible: false,
};
const OFFSET_COMMIT_V2: Version = Version {
    version: 2,
    flexible: false,
};
const PARTITIONS: i32 = 3;
const SEEDS: u64 = 12;

/// A simulated machine: its file system (seeded) and the broker's view
/// of it, with a clock that moves only when told to.
fn machine(seed: u64) -> (Arc<SimFileSystem>, LogEnv) {
    let fs = Arc::new(SimFileSystem::new(seed));
    let env = LogEnv::new(
        fs.clone(),
        64,
        Arc::new(ManualClock::new(1_700_000_000_000)),
    );
    (fs, env)
}

/// The broker's Kafka listener on in-process pipes, with one client.
struct Served {
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    client: tokio::io::DuplexStream,
}

impl Served {
    async fn start(broker: &Arc<Broker>) -> Served {
        let (listener, connector) = memory_listener(4);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(crate::server::run(broker.clone(), listener, stopped));
        let peer: SocketAddr = "10.0.0.2:40000".parse().expect("address");
        let client = connector.connect(peer).await.expect("connect");
        Served {
            stop,
            server,
            client,
        }
    }

    async fn stop(self) {
        self.stop.send(true).expect("stop the server");
        self.server.await.expect("server task");
    }
}

/// The machine, already halted, loses power (unsynced bytes torn at seeded
/// points) and boots again; the broker process dies with it, so its
/// shutdown writes nothing.
fn crash(fs: &SimFileSystem, broker: Arc<Broker>) {
    assert!(broker.shutdown().is_err(), "shutdown on a halted machine");
    drop(broker);
    fs.power_cut(true);
    fs.restart();
}

fn start(env: &LogEnv) -> Arc<Broker> {
    Broker::start(BrokerOptions {
        data_dir: PathBuf::from("/data"),
        node_id: 1,
        advertised_host: "memory".into(),
        advertised_port: 9092,
        config: BrokerConfig::with_overrides([("log.flush.interval.messages", "1")])
            .expect("valid settings"),
        env: Some(env.clone()),
    })
    .expect("start the broker")
}

/// (partition, offset) -> value of every record of `topic` in `broker`.
fn stored(broker: &Broker, topic: &str) -> BTreeMap<(i32, i64), Vec<u8>> {
    stored_in(broker, topic, PARTITIONS)
}

/// Like [`stored`], for a topic of `partitions` partitions.
fn stored_in(broker: &Broker, topic: &str, partitions: i32) -> BTreeMap<(i32, i64), Vec<u8>> {
    let mut out = BTreeMap::new();
    for partition in 0..partitions {
        let p = broker
            .replicas
            .get(topic, partition)
            .expect("partition hosted");
        let mut next = 0;
        loop {
            let (bytes, offsets) = p
                .read(next, usize::MAX, true, ReadLimit::HighWatermark)
                .expect("read");
            if bytes.is_empty() {
                assert_eq!(next, offsets.high_watermark, "no gap below the end");
                break;
            }
            for item in BatchIter::new(&bytes) {
                let (position, header) = item.expect("stored batches are valid");
                let batch = &bytes[position..position + header.total_size()];
                let records = tarn_protocol::record_batch::RecordIter::new(batch, &header)
                    .expect("uncompressed");
                for record in records {
                    let record = record.expect("record");
                    let offset = header.base_offset + i64::from(record.offset_delta);
                    out.insert((partition, offset), record.value.expect("value").to_vec());
                }
                next = header.last_offset() + 1;
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_a_crash_of_the_whole_machine() {
    let (mut acked_total, mut refused_total) = (0, 0);
    for seed in 0..SEEDS {
        let (fs, env) = machine(seed);
        let broker = start(&env);
        create_topic(&broker, "orders", PARTITIONS);
        let mut served = Served::start(&broker).await;

        // Produce until the machine halts, at a seeded request.
        let requests = 5 + fs.random(25) as i32;
        let halt_at = fs.random(requests as u64) as i32;
        let mut acknowledged: BTreeMap<(i32, i64), Vec<u8>> = BTreeMap::new();
        for id in 0..requests {
            if id == halt_at {
                fs.halt();
            }
            let partition = id % PARTITIONS;
            let values: Vec<Vec<u8>> = (0..1 + fs.random(4))
                .map(|r| format!("seed {seed} request {id} record {r}").into_bytes())
                .collect();
            let mut batch = RecordBatchBuilder::new();
            for value in &values {
                batch = batch.record(1_700_000_000_000, None, Some(value));
            }
            let request = ProduceRequest {
                transactional_id: None,
                acks: -1,
                timeout_ms: 30_000,
                topic_data: vec![TopicProduceData {
                    name: "orders".into(),
                    topic_id: Default::default(),
                    partition_data: vec![PartitionProduceData {
                        index: partition,
                        records: Some(batch.build().into()),
                    }],
                }],
            };
            send_request(&mut served.client, 0, PRODUCE_V3, id, &request).await;
            let (correlation_id, response): (i32, ProduceResponse) =
                read_response(&mut served.client, PRODUCE_V3).await;
            assert_eq!(correlation_id, id);
            let answer = &response.responses[0].partition_responses[0];
            if answer.error_code == 0 {
                acked_total += 1;
                assert!(
                    id < halt_at,
                    "seed {seed}: request {id} acknowledged after the halt"
                );
                for (i, value) in values.into_iter().enumerate() {
                    acknowledged.insert((partition, answer.base_offset + i as i64), value);
                }
            } else {
                refused_total += 1;
            }
        }
        served.stop().await;
        crash(&fs, broker);

        let broker = start(&env);
        let after = stored(&broker, "orders");
        for (position, value) in &acknowledged {
            assert_eq!(
                after.get(position),
                Some(value),
                "seed {seed}: acknowledged record at {position:?}"
            );
        }
        broker.shutdown().expect("clean shutdown after the restart");
    }
    // The seeds cover both sides of the halt.
    assert!(
        acked_total > 20 && refused_total > 20,
        "{acked_total} acknowledged, {refused_total} refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_offset_commits_survive_a_crash_of_the_whole_machine() {
    let (mut acked_total, mut refused_total) = (0, 0);
    for seed in 0..SEEDS {
        let (fs, env) = machine(seed);
        let broker = start(&env);
        create_topic(&broker, "orders", PARTITIONS);
        let mut served = Served::start(&broker).await;

        // A standalone consumer commits ever larger offsets until the
        // machine halts, at a seeded request (never the first, which also
        // creates the offsets topic).
        let requests = 3 + fs.random(12) as i32;
        let halt_at = 1 + fs.random(requests as u64 - 1) as i32;
        let mut last_acked = None;
        for id in 0..requests {
            if id == halt_at {
                fs.halt();
            }
            let offset = 100 * i64::from(id) + fs.random(99) as i64;
            let request = OffsetCommitRequest {
                group_id: "audit".into(),
                generation_id_or_member_epoch: -1,
                member_id: String::new(),
                group_instance_id: None,
                retention_time_ms: -1,
                topics: vec![OffsetCommitRequestTopic {
                    name: "orders".into(),
                    partitions: vec![OffsetCommitRequestPartition {
                        partition_index: 1,
                        committed_offset: offset,
                        committed_leader_epoch: -1,
                        commit_timestamp: -1,
                        committed_metadata: None,
                    }],
                    ..Default::default()
                }],
            };
            send_request(&mut served.client, 8, OFFSET_COMMIT_V2, id, &request).await;
            let (correlation_id, response): (i32, OffsetCommitResponse) =
                read_response(&mut served.client, OFFSET_COMMIT_V2).await;
            assert_eq!(correlation_id, id);
            if response.topics[0].partitions[0].error_code == 0 {
                assert!(
                    id < halt_at,
                    "seed {seed}: commit {id} acknowledged after the halt"
                );
                acked_total += 1;
                last_acked = Some(offset);
            } else {
                refused_total += 1;
            }
        }
        served.stop().await;
        crash(&fs, broker);

        let broker = start(&env);
        let committed = broker
            .groups
            .fetch_offsets("audit", Some(vec![("orders".to_string(), 1)]))
            .expect("the coordinator serves the group");
        let recovered = committed[0].1.as_ref().map(|o| o.offset);
        assert_eq!(
            recovered, last_acked,
            "seed {seed}: the last acknowledged commit is what the restarted broker has"
        );
        broker.shutdown().expect("clean shutdown after the restart");
    }
    assert!(
        acked_total > SEEDS as i32 && refused_total > SEEDS as i32 / 2,
        "{acked_total} acknowledged, {refused_total} refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_is_never_acknowledged_and_takes_the_partition_offline() {
    let (fs, env) = machine(1);
    let broker = start(&env);
    create_topic(&broker, "orders", 1);
    let partition = broker.replicas.get("orders", 0).expect("hosted");
    let batch = RecordBatchBuilder::new()
        .record(1_700_000_000_000, None, Some(b"v"))
        .build();
    let first = partition.append(&batch).expect("append");
    first.completion.wait().await.expect("fsynced");
    let segment = std::path::Path::new("/data/orders-0/00000000000000000000.log");
    assert!(fs.fail_fsyncs(segment, 1));
    let second = partition.append(&batch).expect("written to the page cache");
    let e = second
        .completion
        .wait()
        .await
        .expect_err("the fsync failed");
    assert_eq!(e.code, tarn_protocol::error::KAFKA_STORAGE_ERROR);
    // The file system would now report fsyncs as done without the lost
    // pages; the partition must not take writes and claim them durable.
    assert!(partition.is_offline());
    let e = partition.append(&batch).expect_err("offline");
    assert_eq!(e.code, tarn_protocol::error::KAFKA_STORAGE_ERROR);
    assert!(broker.shutdown().is_err(), "its log cannot close cleanly");
    drop((partition, broker));
    fs.power_cut(false);

    // A restart recovers what is really on disk: the first record only.
    let broker = start(&env);
    let partition = broker.replicas.get("orders", 0).expect("hosted");
    assert!(!partition.is_offline());
    assert_eq!(partition.offsets().expect("open").high_watermark, 1);
    let third = partition.append(&batch).expect("append after the restart");
    assert_eq!(third.info.base_offset, 1);
    third.completion.wait().await.expect("fsynced");
    broker.shutdown().expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_of_the_offsets_topic_moves_the_coordinator_away() {
    use crate::handlers::offset_commit;
    let (fs, env) = machine(2);
    let broker = start(&env);
    create_topic(&broker, "orders", 1);
    let ctx = crate::testing::request_context(&offset_commit::SPEC, 2);
    let commit = |offset: i64| OffsetCommitRequest {
        group_id: "audit".into(),
        generation_id_or_member_epoch: -1,
        member_id: String::new(),
        group_instance_id: None,
        retention_time_ms: -1,
        topics: vec![OffsetCommitRequestTopic {
            name: "orders".into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                committed_leader_epoch: -1,
                commit_timestamp: -1,
                committed_metadata: None,
            }],
            ..Default::default()
        }],
    };
    let code = |r: &OffsetCommitResponse| r.topics[0].partitions[0].error_code;
    let first = offset_commit::handle(&broker, &ctx, commit(5)).await;
    assert_eq!(code(&first), tarn_protocol::error::NONE);
    let partition = broker.groups.partition_of("audit").expect("offsets topic");
    let segment = PathBuf::from(format!(
        "/data/__consumer_offsets-{partition}/00000000000000000000.log"
    ));
    assert!(fs.fail_fsyncs(&segment, 1));
    let failed = offset_commit::handle(&broker, &ctx, commit(9)).await;
    assert_eq!(code(&failed), tarn_protocol::error::NOT_COORDINATOR);
    // The group's state may be ahead of the disk now: it is not served.
    assert_eq!(
        broker.groups.fetch_offsets("audit", None).unwrap_err(),
        tarn_protocol::error::NOT_COORDINATOR
    );
    let again = offset_commit::handle(&broker, &ctx, commit(10)).await;
    assert_eq!(code(&again), tarn_protocol::error::NOT_COORDINATOR);
    assert!(broker.shutdown().is_err(), "the offsets log cannot close");
    drop(broker);
    fs.power_cut(false);
    let broker = start(&env);
    let committed = broker
        .groups
        .fetch_offsets("audit", None)
        .expect("served again after the restart");
    assert_eq!(committed[0].1.as_ref().map(|o| o.offset), Some(5));
    broker.shutdown().expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_rolled_by_produces_are_fsynced_in_the_background_and_survive() {
    let (fs, env) = machine(3);
    let start_small_segments = || {
        Broker::start(BrokerOptions {
            data_dir: PathBuf::from("/data"),
            node_id: 1,
            advertised_host: "memory".into(),
            advertised_port: 9092,
            config: BrokerConfig::with_overrides([("log.segment.bytes", "2000")])
                .expect("valid settings"),
            env: Some(env.clone()),
        })
        .expect("start the broker")
    };
    let broker = start_small_segments();
    create_topic(&broker, "orders", 1);
    let partition = broker.replicas.get("orders", 0).expect("hosted");
    for i in 0..60 {
        let value = format!("record {i} {}", "x".repeat(200));
        let batch = RecordBatchBuilder::new()
            .record(1_700_000_000_000, None, Some(value.as_bytes()))
            .build();
        let appended = partition.append(&batch).expect("append");
        assert_eq!(appended.info.base_offset, i);
        appended
            .completion
            .wait()
            .await
            .expect("as durable as configured");
    }
    let bases = partition
        .with_log_ref(|log| log.segment_base_offsets())
        .expect("open");
    assert!(bases.len() > 3, "{bases:?}");
    // The roll flusher's thread fsyncs each closed segment; once the last
    // one is done, everything below the active segment is durable.
    let active = *bases.last().expect("a segment");
    for _ in 0..1000 {
        let durable = partition
            .with_log_ref(|log| log.durable_offset())
            .expect("open");
        if durable >= active {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let durable = partition
        .with_log_ref(|log| log.durable_offset())
        .expect("open");
    assert!(
        durable >= active,
        "durable to {durable}, active from {active}"
    );
    for base in &bases[..bases.len() - 1] {
        let path = PathBuf::from(format!("/data/orders-0/{base:020}.log"));
        // Once by the flusher; a roll or flush that found the segment
        // still waiting fsynced it too.
        assert!(fs.fsyncs(&path) >= 1, "rolled segment {base} fsynced");
    }
    // No flush.messages: only the active segment may lose data.
    fs.halt();
    assert!(broker.shutdown().is_err());
    drop((partition, broker));
    fs.power_cut(true);
    fs.restart();
    let broker = start_small_segments();
    let stored = stored_in(&broker, "orders", 1);
    for offset in 0..active {
        let value = stored
            .get(&(0, offset))
            .unwrap_or_else(|| panic!("offset {offset} of a rolled segment lost"));
        assert!(value.starts_with(format!("record {offset} ").as_bytes()));
    }
    broker.shutdown().expect("clean shutdown");
}
