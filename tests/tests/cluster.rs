//! Clusters of real processes on loopback: the metadata quorum forms in any
//! start order, a killed controller is replaced and metadata keeps
//! committing, dead brokers are fenced and restarted ones rejoin with a new
//! epoch, admin requests work on every broker, clients produce to and
//! consume from partitions led by different brokers, and leadership moves
//! off brokers that stop or die, as `tarn leader-election` then reports.
//! Nodes that are only controllers and nodes that are only brokers (which
//! follow the metadata log without voting) make a cluster as well.
//!
//! Times are printed, never asserted (machines are shared): the waits are
//! generous bounds on "eventually". bench/cluster.sh measures them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use tarn_cli::client::Client;
use tarn_e2e::cluster::{Cluster, Own};
use tarn_e2e::disk::SmallDisk;
use tarn_e2e::kafka::{
    assert_keys_count_up, consume_all, consume_from, consumer, create_assigned, Outgoing, Record,
    TestProducer,
};
use tarn_e2e::{cli, run_with_timeout, wire};
use tarn_protocol::messages::fetch::{FetchPartition, FetchRequest, FetchResponse, FetchTopic};
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataRequestTopic, MetadataResponse};
use tarn_protocol::messages::produce::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceData, ProduceRequest, ProduceResponse,
    TopicProduceData,
};
use tarn_protocol::Uuid;

/// Long enough for elections, sessions and a slow machine.
const FORMED: Duration = Duration::from_secs(60);
const TEST_LIMIT: Duration = Duration::from_secs(240);

#[test]
fn three_nodes_form_in_any_order_and_every_broker_takes_admin_requests() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(3, &[3, 1, 2], &[]);
        let controller = cluster.wait_until_formed(FORMED);
        let views: Vec<_> = cluster
            .running()
            .into_iter()
            .map(|id| cluster.view(id).expect("view"))
            .collect();
        let ids: BTreeSet<&str> = views.iter().map(|v| v.cluster_id.as_str()).collect();
        assert_eq!(ids.len(), 1, "one cluster id: {views:?}");
        assert!(!views[0].cluster_id.is_empty());
        println!("formed; active controller {controller}");

        for id in cluster.running() {
            // Created through this broker (forwarded when it is not the
            // controller), and seen by it as soon as the create returns.
            let topic = format!("made-on-{id}");
            let address = cluster.address(id);
            let out = cli::create_topic(&address, &topic, 3, 1, &[]);
            assert!(out.status.success(), "create on node {id}: {out}");
            let view = cluster.view(id).expect("view");
            assert_eq!(
                view.leaders.get(&topic).map(Vec::len),
                Some(3),
                "node {id}: {view:?}"
            );
            let out = cli::alter_topic_config(&address, &topic, "retention.ms=60000");
            assert!(out.status.success(), "alter configs on node {id}: {out}");
        }
        // Every broker sees every topic, with the same leaders.
        for id in cluster.running() {
            let (view, _) = cluster.wait_for(id, FORMED, "every topic", |v| {
                (1..=3).all(|n| v.leaders.contains_key(&format!("made-on-{n}")))
            });
            assert_eq!(view.leaders, cluster.view(1).expect("view").leaders);
        }
        // A broker logger is answered by the broker it names, which
        // forwards the request's other resources to the controller.
        let broker = (1..=3).find(|id| *id != controller).expect("a broker");
        let answers = alter_logger_and_topic(&cluster, broker, "made-on-2");
        assert!(answers.iter().all(|code| *code == 0), "{answers:?}");
        assert_eq!(
            logger_level(&cluster, broker, "tarn_storage"),
            "FATAL",
            "set on node {broker}"
        );
        assert_ne!(
            logger_level(&cluster, controller, "tarn_storage"),
            "FATAL",
            "the controller's own levels stay"
        );
        let out = cli::run(&[
            "configs",
            "--bootstrap-server",
            &cluster.address(broker),
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            "made-on-2",
        ]);
        assert!(
            out.status.success() && out.stdout.contains("retention.ms=120000"),
            "{out}"
        );
        let out = cli::run(&[
            "configs",
            "--bootstrap-server",
            &cluster.address(2),
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            "made-on-1",
        ]);
        assert!(
            out.status.success() && out.stdout.contains("retention.ms=60000"),
            "{out}"
        );
        let out = cli::run(&[
            "topics",
            "delete",
            "--bootstrap-server",
            &cluster.address(3),
            "--topic",
            "made-on-2",
        ]);
        assert!(out.status.success(), "delete: {out}");
        assert!(!cluster
            .view(3)
            .expect("view")
            .leaders
            .contains_key("made-on-2"));
    });
}

/// IncrementalAlterConfigs sent to node `id`: its own logger
/// `tarn_storage` set to FATAL, and `topic`'s retention.ms to 120000;
/// returns the two error codes.
fn alter_logger_and_topic(cluster: &Cluster, id: i32, topic: &str) -> Vec<i16> {
    use tarn_protocol::messages::incremental_alter_configs::*;
    let resource =
        |resource_type: i8, name: &str, key: &str, value: &str| IncrementalAlterConfigsResource {
            resource_type,
            resource_name: name.into(),
            configs: vec![IncrementalAlterableConfig {
                name: key.into(),
                config_operation: OP_SET,
                value: Some(value.into()),
            }],
        };
    let request = IncrementalAlterConfigsRequest {
        resources: vec![
            resource(8, &id.to_string(), "tarn_storage", "FATAL"),
            resource(2, topic, "retention.ms", "120000"),
        ],
        validate_only: false,
    };
    let mut client = Client::connect(&cluster.address(id)).expect("connect");
    let response: IncrementalAlterConfigsResponse = client
        .call(44, 1, 1, &request)
        .expect("IncrementalAlterConfigs");
    assert_eq!(response.responses.len(), 2, "{response:?}");
    response.responses.iter().map(|r| r.error_code).collect()
}

/// The level node `id` describes for its logger `logger`.
fn logger_level(cluster: &Cluster, id: i32, logger: &str) -> String {
    let mut loggers = wire::broker_loggers(&cluster.address(id), id);
    loggers
        .remove(logger)
        .unwrap_or_else(|| panic!("node {id} has no logger {logger}: {loggers:?}"))
}

#[test]
fn clients_produce_and_consume_across_leaders_on_different_brokers() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(3, &[1, 2, 3], &[]);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(1), "spread", 6, 1, &[]);
        assert!(out.status.success(), "{out}");
        let view = cluster.view(2).expect("view");
        let leaders: BTreeSet<i32> = view.leaders["spread"].iter().copied().collect();
        assert_eq!(
            leaders,
            BTreeSet::from([1, 2, 3]),
            "leaders spread: {view:?}"
        );

        let bootstrap = cluster.address(3);
        let mut producer = TestProducer::new(&bootstrap, &[("acks", "all")]);
        let records: Vec<Outgoing> = (0..600)
            .map(|i| Record::kv(&format!("k{i}"), &format!("v{i}")).into())
            .collect();
        let delivered = producer.produce_all("spread", &records);
        let partitions: BTreeSet<i32> = delivered.iter().map(|d| d.partition).collect();
        assert_eq!(partitions.len(), 6, "keys spread over every partition");
        let consumed = consume_all(&cluster.address(1), "spread", 600, Duration::from_secs(60));
        assert_eq!(consumed.len(), 600);
        let values: BTreeSet<_> = consumed.iter().map(|c| c.record.value.clone()).collect();
        assert_eq!(values.len(), 600, "every record once");

        // A group's first request creates __consumer_offsets with Kafka's
        // default of three replicas in a cluster (a single node gives it
        // one).
        let group: BaseConsumer = consumer(&bootstrap, &[("group.id", "spread-group")]);
        let mut partitions = TopicPartitionList::new();
        partitions.add_partition("spread", 0);
        group
            .committed_offsets(partitions, Duration::from_secs(60))
            .expect("the group's committed offsets");
        let (view, _) = cluster.wait_for(1, FORMED, "__consumer_offsets", |v| {
            v.replicas.contains_key("__consumer_offsets")
        });
        let factors: BTreeSet<usize> = view.replicas["__consumer_offsets"]
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(factors, BTreeSet::from([3]), "{view:?}");
    });
}

/// The answers of broker `via` to a Produce at `version` and to a Fetch at
/// `fetch_version` for partition `partition` of `topic` (named by `id`
/// where the version wants ids): their error codes, the leader each names,
/// and the endpoints each lists.
fn refused_by(
    cluster: &Cluster,
    via: i32,
    (topic, id, partition): (&str, Uuid, i32),
    (version, fetch_version): (i16, i16),
) -> [(i16, LeaderIdAndEpoch, Vec<NodeEndpoint>); 2] {
    let mut client = Client::connect(&cluster.address(via)).expect("connect");
    let produce = ProduceRequest {
        acks: 1,
        timeout_ms: 5_000,
        topic_data: vec![TopicProduceData {
            name: if version < 13 {
                topic.into()
            } else {
                String::new()
            },
            topic_id: if version < 13 { Uuid::ZERO } else { id },
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(wire::batch(1, 1_000, b"hint").into()),
            }],
        }],
        ..Default::default()
    };
    let produced: ProduceResponse = client.call(0, version, 9, &produce).expect("produce");
    let answer = &produced.responses[0].partition_responses[0];
    let fetch = FetchRequest {
        max_wait_ms: 0,
        topics: vec![FetchTopic {
            topic: topic.into(),
            topic_id: id,
            partitions: vec![FetchPartition {
                partition,
                partition_max_bytes: 1 << 20,
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    let fetched: FetchResponse = client.call(1, fetch_version, 12, &fetch).expect("fetch");
    let read = &fetched.responses[0].partitions[0];
    [
        (
            answer.error_code,
            answer.current_leader.clone(),
            produced.node_endpoints.clone(),
        ),
        (
            read.error_code,
            read.current_leader.clone(),
            fetched.node_endpoints.clone(),
        ),
    ]
}

#[test]
fn a_broker_that_does_not_lead_a_partition_names_its_leader() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(3, &[1, 2, 3], &[("broker.rack", "r")]);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(1), "hinted", 1, 1, &[]);
        assert!(out.status.success(), "{out}");
        let (view, _) = cluster.wait_for(1, FORMED, "hinted led", |v| {
            v.leaders.get("hinted").is_some_and(|l| l[0] >= 1)
        });
        let leader = view.leaders["hinted"][0];
        let via = if leader == 1 { 2 } else { 1 };
        cluster.wait_for(via, FORMED, "hinted led", |v| {
            v.leaders.get("hinted") == Some(&vec![leader])
        });
        let mut client = Client::connect(&cluster.address(via)).expect("connect");
        let metadata: MetadataResponse = client
            .call(
                3,
                12,
                9,
                &MetadataRequest {
                    topics: Some(vec![MetadataRequestTopic {
                        name: Some("hinted".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
            )
            .expect("metadata");
        let (id, epoch) = (
            metadata.topics[0].topic_id,
            metadata.topics[0].partitions[0].leader_epoch,
        );
        let named = LeaderIdAndEpoch {
            leader_id: leader,
            leader_epoch: epoch,
        };
        let (host, port) = cluster
            .address(leader)
            .rsplit_once(':')
            .map(|(h, p)| (h.to_owned(), p.parse::<i32>().expect("port")))
            .expect("host:port");
        let endpoint = NodeEndpoint {
            node_id: leader,
            host,
            port,
            rack: Some("r".into()),
        };
        // Produce v10+ and Fetch v16+ name the leader and its endpoint
        // (KIP-951), by name and by topic id alike.
        for versions in [(10, 16), (12, 17), (13, 17)] {
            let answers = refused_by(&cluster, via, ("hinted", id, 0), versions);
            for (what, answer) in ["produce", "fetch"].iter().zip(answers) {
                assert_eq!(
                    answer,
                    (6, named.clone(), vec![endpoint.clone()]),
                    "{what} at {versions:?} through broker {via}"
                );
            }
        }
        // Older versions have no room for the hint.
        let answers = refused_by(&cluster, via, ("hinted", id, 0), (9, 15));
        for answer in answers {
            assert_eq!(answer, (6, LeaderIdAndEpoch::default(), Vec::new()));
        }
        // The leader itself takes the records, by topic id too.
        let answers = refused_by(&cluster, leader, ("hinted", id, 0), (13, 17));
        for answer in answers {
            assert_eq!(answer, (0, LeaderIdAndEpoch::default(), Vec::new()));
        }
    });
}

#[test]
fn a_killed_controller_is_replaced_and_a_killed_broker_is_fenced_then_rejoins() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(
            3,
            &[2, 3, 1],
            &[
                ("broker.session.timeout.ms", "3000"),
                ("broker.heartbeat.interval.ms", "500"),
            ],
        );
        let controller = cluster.wait_until_formed(FORMED);
        cluster.kill(controller);
        let killed = Instant::now();
        let survivor = cluster.running()[0];
        let mut attempts = 0;
        loop {
            attempts += 1;
            let out = cli::create_topic(&cluster.address(survivor), "after-failover", 1, 1, &[]);
            if out.status.success() {
                break;
            }
            assert!(
                killed.elapsed() < FORMED,
                "no commit after the controller died: {out}"
            );
        }
        println!(
            "controller {controller} killed; a topic was created {:?} later ({attempts} attempts)",
            killed.elapsed()
        );
        let (view, fenced_after) =
            cluster.wait_for(survivor, FORMED, "the dead broker fenced", |v| {
                !v.brokers.contains_key(&controller)
            });
        println!("broker {controller} fenced after {fenced_after:?}");
        assert_ne!(view.controller, controller);
        // The new leader retried the dead node several times a second
        // meanwhile: one line says so, not one per retry.
        let leader = cluster.node(view.controller).logs();
        let gone = format!("quorum peer does not answer; retrying node={controller}");
        assert_eq!(leader.matches(&gone).count(), 1, "{leader}");
        assert!(!leader.contains("failed to send a heartbeat"), "{leader}");

        cluster.start_again(controller);
        cluster.wait_until_formed(FORMED);
        let back = format!("quorum peer answers again node={controller}");
        let deadline = Instant::now() + FORMED;
        while !cluster.node(view.controller).logs().contains(&back) {
            assert!(
                Instant::now() < deadline,
                "{}",
                cluster.node(view.controller).logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let logs: String = cluster
            .running()
            .into_iter()
            .map(|id| cluster.node(id).logs())
            .collect();
        assert!(
            logs.contains(&format!(
                "registered broker broker_id={controller} broker_epoch=1"
            )),
            "the restarted broker registers with a new epoch"
        );
        let view = cluster.view(controller).expect("view");
        assert!(
            view.leaders.contains_key("after-failover"),
            "it caught up: {view:?}"
        );
    });
}

#[test]
fn a_stopped_broker_is_fenced_before_it_exits() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], &[]);
        let controller = cluster.wait_until_formed(FORMED);
        let leaving = if controller == 3 { 2 } else { 3 };
        cluster.stop(leaving);
        let view = cluster.view(controller).expect("view");
        assert!(
            !view.brokers.contains_key(&leaving),
            "a controlled shutdown fences the broker before it exits: {view:?}"
        );
    });
}

#[test]
fn a_stopped_active_controller_hands_its_leadership_over() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], &[]);
        let controller = cluster.wait_until_formed(FORMED);
        let before = cluster.quorum_view(controller).expect("describe quorum");
        cluster.stop(controller);
        let logs = cluster.node(controller).logs();
        assert!(
            logs.contains("handed the metadata quorum's leadership over before stopping"),
            "node {controller} stopped without handing its leadership over:\n{logs}"
        );
        let survivor = cluster.running()[0];
        let (view, _) = cluster.wait_for(survivor, FORMED, "a new controller", |v| {
            v.controller != controller && v.controller > 0
        });
        let after = cluster.quorum_view(survivor).expect("describe quorum");
        assert_eq!(after.leader, view.controller);
        assert!(after.epoch > before.epoch, "{before:?} -> {after:?}");
        let out = cli::create_topic(&cluster.address(survivor), "after-hand-over", 1, 1, &[]);
        assert!(out.status.success(), "{out}");
    });
}

#[test]
fn five_nodes_form_and_place_replicas_over_them() {
    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start(5, &[4, 2, 5, 1, 3], &[]);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(4), "wide", 10, 3, &[]);
        assert!(out.status.success(), "{out}");
        let out = cli::create_topic(&cluster.address(2), "too-wide", 1, 6, &[]);
        assert!(!out.status.success(), "six replicas over five brokers");
        assert!(out.stderr.contains("INVALID_REPLICATION_FACTOR"), "{out}");
        let view = cluster.view(5).expect("view");
        let leaders: BTreeSet<i32> = view.leaders["wide"].iter().copied().collect();
        assert_eq!(leaders.len(), 5, "leaders over every broker: {view:?}");
    });
}

#[test]
fn an_isolated_controller_stops_leading_while_the_majority_commits() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start_partitionable(3, &[1, 2, 3], &[]);
        let controller = cluster.wait_until_formed(FORMED);
        let majority: Vec<i32> = cluster
            .running()
            .into_iter()
            .filter(|id| *id != controller)
            .collect();
        cluster.isolate(controller);
        let cut = Instant::now();

        // The majority elects a controller of its own and commits.
        let (view, elected) = cluster.wait_for(majority[0], FORMED, "a new controller", |v| {
            majority.contains(&v.controller)
        });
        println!(
            "node {controller} cut off; node {} leads after {elected:?}",
            view.controller
        );
        loop {
            let out = cli::create_topic(&cluster.address(majority[1]), "majority-side", 2, 1, &[]);
            if out.status.success() {
                break;
            }
            assert!(
                cut.elapsed() < FORMED,
                "the majority never committed: {out}"
            );
        }
        // The isolated node stops naming itself once its lease lapses, and
        // learns nothing the majority committed.
        let (view, stepped_down) =
            cluster.wait_for(controller, FORMED, "the old leader's lease lapsing", |v| {
                v.controller != controller
            });
        println!("node {controller} stopped claiming to lead after {stepped_down:?}");
        assert!(!view.leaders.contains_key("majority-side"), "{view:?}");

        cluster.heal();
        cluster.wait_for(controller, FORMED, "the healed node catching up", |v| {
            v.leaders.contains_key("majority-side") && majority.contains(&v.controller)
        });
        cluster.wait_until_formed(FORMED);
    });
}

#[test]
fn a_node_formatted_for_another_cluster_is_refused() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], &[]);
        cluster.wait_until_formed(FORMED);
        let ours = cluster.view(1).expect("view").cluster_id;
        cluster.stop(3);
        let theirs = "MkU3OEVBNTcwNTJENDM2Qg";
        assert_ne!(ours, theirs);
        cluster.reformat(3, theirs);
        cluster.start_again(3);
        let status = cluster.wait_exit(3, FORMED);
        assert!(!status.success(), "a node of another cluster must not join");
        let logs = cluster.node(3).logs();
        assert!(logs.contains("INCONSISTENT_CLUSTER_ID"), "{logs}");
        assert_eq!(cluster.view(1).expect("view").cluster_id, ours);
    });
}

#[test]
fn a_node_that_lost_its_quorum_still_stops_on_sigterm() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], &[]);
        cluster.wait_until_formed(FORMED);
        cluster.kill(1);
        cluster.kill(2);
        // No controller answers its controlled shutdown: it gives up on
        // it and exits cleanly, within the harness's stop timeout.
        cluster.stop(3);
    });
}

#[test]
fn leadership_moves_off_stopped_and_dead_brokers_and_leader_election_reports_it() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(
            3,
            &[1, 2, 3],
            &[
                ("broker.session.timeout.ms", "3000"),
                ("broker.heartbeat.interval.ms", "500"),
            ],
        );
        let controller = cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(controller), "elect", 3, 3, &[]);
        assert!(out.status.success(), "{out}");
        // New partitions are led by their preferred (first) replica.
        let (view, _) = cluster.wait_for(controller, FORMED, "elect led", |v| {
            v.leaders
                .get("elect")
                .is_some_and(|l| l.len() == 3 && !l.contains(&-1))
        });
        let preferred = view.leaders["elect"].clone();
        let others: Vec<i32> = (1..=3).filter(|id| *id != controller).collect();
        let (stopped, killed) = (others[0], others[1]);

        // A controlled shutdown moves leadership before the broker exits.
        cluster.stop(stopped);
        let view = cluster.view(controller).expect("view");
        assert!(
            !view.leaders["elect"].contains(&stopped) && !view.leaders["elect"].contains(&-1),
            "broker {stopped} stopped but leads: {view:?}"
        );
        cluster.start_again(stopped);
        cluster.wait_until_formed(FORMED);
        // It catches up and rejoins every ISR it left.
        cluster.wait_for(
            controller,
            FORMED,
            "the restarted broker in every ISR",
            |v| v.isr["elect"].iter().all(|isr| isr.contains(&stopped)),
        );

        // A dead broker's partitions get new leaders once it is fenced.
        cluster.kill(killed);
        cluster.wait_for(
            controller,
            FORMED,
            "the dead broker's partitions moved",
            |v| v.leaders["elect"].iter().all(|l| *l != killed && *l != -1),
        );

        // The dead broker's preferred partition cannot go back to it; the
        // restarted broker's can, and does.
        let bootstrap = cluster.address(controller);
        let every = cli::run(&[
            "leader-election",
            "--bootstrap-server",
            &bootstrap,
            "--election-type",
            "preferred",
            "--all-topic-partitions",
        ]);
        assert!(!every.status.success(), "{every}");
        for (partition, leader) in preferred.iter().enumerate() {
            let line = format!(
                "Error completing leader election (PREFERRED) for partition: elect-{partition}: PREFERRED_LEADER_NOT_AVAILABLE"
            );
            assert_eq!(
                every.stderr.contains(&line),
                *leader == killed,
                "partition {partition} preferred by {leader}: {every}"
            );
        }
        assert!(
            every.stderr.contains("1 replica(s) could not be elected"),
            "{every}"
        );
        let view = cluster.view(controller).expect("view");
        for (partition, leader) in preferred.iter().enumerate() {
            if *leader != killed {
                assert_eq!(view.leaders["elect"][partition], *leader, "{view:?}");
            }
        }
        let own = preferred
            .iter()
            .position(|l| *l == controller)
            .expect("a partition the controller prefers");
        let one = cli::run(&[
            "leader-election",
            "--bootstrap-server",
            &bootstrap,
            "--election-type",
            "PREFERRED",
            "--topic",
            "elect",
            "--partition",
            &own.to_string(),
        ]);
        assert!(one.status.success(), "{one}");
        assert_eq!(
            one.stdout,
            format!("Valid replica already elected for partitions elect-{own}\n")
        );
    });
}

/// A broker whose disk fills up stops, as Kafka halts a broker whose log
/// directory failed, and the partitions it led move to in-sync replicas on
/// the other brokers: an idempotent producer with acks=all carries on, and
/// every record is acknowledged and read back once, in order. Given space,
/// the broker comes back with the same records. (A single node keeps
/// serving instead: `disk_full.rs`.)
#[test]
fn a_broker_whose_disk_fills_stops_and_its_partitions_move_to_the_others() {
    run_with_timeout(TEST_LIMIT, || {
        let disk = SmallDisk::mount("6m");
        let own = [Own {
            settings: &[],
            data_dir: Some(disk.path().join("node1")),
        }];
        let mut cluster = Cluster::start_own(3, &[1, 2, 3], &[], &own);
        let controller = cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(controller), "full", 3, 3, &[]);
        assert!(out.status.success(), "{out}");
        let (view, _) = cluster.wait_for(controller, FORMED, "full led, every ISR whole", |v| {
            v.leaders
                .get("full")
                .is_some_and(|l| l.len() == 3 && !l.contains(&-1))
                && v.isr["full"].iter().all(|isr| isr.len() == 3)
        });
        let partition = view.leaders["full"]
            .iter()
            .position(|leader| *leader == 1)
            .expect("node 1 leads one of three partitions") as i32;

        // 20 MB into the partition node 1 leads: more than three times its disk.
        let count = 20_000;
        let value = "x".repeat(1000);
        let mut producer = TestProducer::new(
            &cluster.bootstrap(),
            &[
                ("acks", "all"),
                ("enable.idempotence", "true"),
                ("message.timeout.ms", "120000"),
            ],
        );
        for i in 0..count {
            producer.send(
                "full",
                &Outgoing {
                    record: Record::kv(&i.to_string(), &value),
                    partition: Some(partition),
                    timestamp_ms: None,
                },
            );
        }
        let reports = producer.flush(Duration::from_secs(180));
        let failed: Vec<_> = reports.iter().filter(|r| r.is_err()).collect();
        assert!(
            failed.is_empty(),
            "{} of {count} records not acknowledged, first: {:?}",
            failed.len(),
            failed.first()
        );

        let status = cluster.wait_exit(1, FORMED);
        let logs = cluster.node(1).logs();
        assert!(!status.success(), "node 1 exited with {status}: {logs}");
        assert!(
            logs.contains("storage failed (") && logs.contains("No space left on device"),
            "node 1 did not stop for its full disk: {logs}"
        );
        let survivor = if controller == 1 { 2 } else { controller };
        let (view, _) = cluster.wait_for(survivor, FORMED, "full led by survivors", |v| {
            v.leaders["full"].iter().all(|l| *l == 2 || *l == 3)
        });
        println!("after node 1 stopped: {view:?}");

        let read_back = |bootstrap: &str| {
            let read = consume_from(
                bootstrap,
                "full",
                &[(partition, Offset::Beginning)],
                count,
                Duration::from_secs(120),
            );
            assert_keys_count_up(&read, count);
        };
        read_back(&cluster.address(survivor));

        // Space returns: node 1 starts again, recovers its log, catches up,
        // and once it leads its partition again reads back the same records.
        disk.resize("64m");
        cluster.start_again(1);
        cluster.wait_for(survivor, FORMED, "node 1 back in every ISR", |v| {
            v.isr["full"].iter().all(|isr| isr.contains(&1))
        });
        let out = cli::run(&[
            "leader-election",
            "--bootstrap-server",
            &cluster.address(survivor),
            "--election-type",
            "preferred",
            "--topic",
            "full",
            "--partition",
            &partition.to_string(),
        ]);
        assert!(out.status.success(), "{out}");
        cluster.wait_for(survivor, FORMED, "node 1 leads again", |v| {
            v.leaders["full"][partition as usize] == 1
        });
        read_back(&cluster.address(1));
    });
}

/// A voter whose disk fills up stops once its Raft log cannot be written
/// (as Kafka halts a node whose metadata log directory failed), and the
/// other two voters keep committing.
#[test]
fn a_voter_that_cannot_write_its_metadata_log_stops_and_the_others_commit() {
    run_with_timeout(TEST_LIMIT, || {
        let disk = SmallDisk::mount("4m");
        let own = [Own {
            // No high-watermark checkpoint to fail first (it would stop
            // the broker too, for its own reason).
            settings: &[("replica.high.watermark.checkpoint.interval.ms", "3600000")],
            data_dir: Some(disk.path().join("node1")),
        }];
        let mut cluster = Cluster::start_own(3, &[1, 2, 3], &[], &own);
        let controller = cluster.wait_until_formed(FORMED);
        let survivor = if controller == 1 { 2 } else { controller };
        let address = cluster.address(survivor);
        let out = cli::create_topic(&address, "configured", 1, 1, &[]);
        assert!(out.status.success(), "{out}");
        // Node 1 may host the partition: it must have created it before
        // its disk fills, or it stops for that instead.
        cluster.wait_for(1, FORMED, "configured known to node 1", |v| {
            v.leaders.contains_key("configured")
        });

        // Fill node 1's disk, then commit changes that write nothing there
        // but the Raft log: a topic's retention, again and again.
        disk.fill("ballast");
        let mut changes = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !cluster.nodes[0].exited() {
            assert!(
                Instant::now() < deadline,
                "node 1 still runs after {changes} changes"
            );
            let retention = format!("retention.ms={}", 60_000 + changes);
            let out = cli::alter_topic_config(&address, "configured", &retention);
            assert!(out.status.success(), "change {changes}: {out}");
            changes += 1;
        }
        println!("node 1 stopped after {changes} changes");
        let status = cluster.wait_exit(1, FORMED);
        let logs = cluster.node(1).logs();
        assert!(!status.success(), "node 1 exited with {status}: {logs}");
        assert!(
            logs.contains("the metadata quorum stopped on this node")
                && logs.contains("No space left on device"),
            "node 1 did not stop for its metadata log: {logs}"
        );
        let out = cli::create_topic(&address, "after", 1, 1, &[]);
        assert!(out.status.success(), "{out}");
    });
}

/// Polls DescribeQuorum on broker `id` until `done` holds.
fn wait_quorum(
    cluster: &Cluster,
    id: i32,
    done: impl Fn(&tarn_e2e::cluster::QuorumView) -> bool,
) -> (tarn_e2e::cluster::QuorumView, Duration) {
    let start = Instant::now();
    loop {
        let seen = cluster.quorum_view(id);
        if let Ok(view) = &seen {
            if done(view) {
                return (view.clone(), start.elapsed());
            }
        }
        assert!(
            start.elapsed() < FORMED,
            "broker {id}: last DescribeQuorum {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kafka's smallest isolated mode: one node that is only a controller,
/// the sole voter (`controller.quorum.voters=1@...`), and brokers that
/// join it. It forms a quorum of one that keeps its lead (nobody else
/// acknowledges it), serves the brokers the metadata log and their
/// heartbeats, and comes back from a SIGKILL with the metadata intact.
/// Eligible leader replicas (KIP-966): a replica that left an ISR below
/// `min.insync.replicas` may lead once the ISR is empty, after a clean
/// stop; after an unclean one (SIGKILL) it may have lost records, so it
/// leaves the ELR and does not lead, and the replica that stopped cleanly
/// does. No acknowledged record is lost on the way. One dedicated
/// controller keeps the quorum while both replicas (brokers 2 and 3) are
/// down; broker 4, which holds no replica, tells what the cluster decided.
#[test]
fn a_cleanly_stopped_eligible_replica_leads_an_emptied_isr_and_an_uncleanly_stopped_one_does_not() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start_separated(
            1,
            3,
            &[1, 2, 3, 4],
            &[
                ("broker.session.timeout.ms", "3000"),
                ("broker.heartbeat.interval.ms", "500"),
            ],
        );
        cluster.wait_until_formed(FORMED);
        create_assigned(
            &cluster.address(4),
            "elr",
            &[&[2, 3]],
            &[("min.insync.replicas", "2")],
        );
        cluster.wait_for(4, FORMED, "elr led by 2 with both in sync", |v| {
            v.leaders.get("elr").is_some_and(|l| l[0] == 2) && v.isr["elr"][0].len() == 2
        });
        let mut producer = TestProducer::new(&cluster.address(4), &[("acks", "all")]);
        let records: Vec<Outgoing> = (0..50)
            .map(|i| Record::kv(&format!("k{i}"), &format!("v{i}")).into())
            .collect();
        producer.produce_all("elr", &records);
        drop(producer);

        // Both stop cleanly, the follower first: the ISR empties into the ELR.
        cluster.stop(3);
        cluster.stop(2);
        cluster.wait_for(4, FORMED, "elr leaderless", |v| {
            v.leaders["elr"][0] == -1 && v.isr["elr"][0].is_empty()
        });
        // The follower comes back from its clean stop: it holds every
        // committed record, so it leads, with an ISR of itself. (Its high
        // watermark, below min ISR, stays where its last fetch left it, so
        // what a consumer sees from it is not checked here.)
        cluster.start_again(3);
        cluster.wait_for(4, FORMED, "the eligible follower leads alone", |v| {
            v.leaders["elr"][0] == 3 && v.isr["elr"][0] == [3]
        });

        // It dies (SIGKILL) and comes back: an unclean stop takes it out of
        // the ELR, so once its new registration is unfenced it still does
        // not lead.
        cluster.kill(3);
        cluster.wait_for(4, FORMED, "the dead broker fenced", |v| {
            !v.brokers.contains_key(&3) && v.leaders["elr"][0] == -1
        });
        cluster.start_again(3);
        let (view, _) = cluster.wait_for(4, FORMED, "the restarted broker unfenced", |v| {
            v.brokers.contains_key(&3)
        });
        assert_eq!(view.leaders["elr"][0], -1, "{view:?}");
        // The replica that stopped cleanly is still eligible, and leads;
        // the other catches up and rejoins.
        cluster.start_again(2);
        cluster.wait_for(
            4,
            FORMED,
            "the cleanly stopped replica leads, both in sync",
            |v| v.leaders["elr"][0] == 2 && v.isr["elr"][0].len() == 2,
        );
        let consumed = consume_all(&cluster.address(4), "elr", 50, FORMED);
        assert_eq!(consumed.len(), 50, "every record, once");
    });
}

#[test]
fn one_dedicated_controller_serves_brokers_and_survives_its_restart() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster =
            Cluster::start_separated(1, 2, &[2, 1, 3], &[("broker.heartbeat.interval.ms", "500")]);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(2), "alone", 2, 2, &[]);
        assert!(out.status.success(), "{out}");
        let mut producer = TestProducer::new(&cluster.address(3), &[("acks", "all")]);
        let records: Vec<Outgoing> = (0..100)
            .map(|i| Record::kv(&format!("k{i}"), &format!("v{i}")).into())
            .collect();
        producer.produce_all("alone", &records);
        // Heartbeats keep both brokers unfenced well past the election
        // timeout that a lapsing lease would stop the controller after.
        std::thread::sleep(Duration::from_secs(3));
        cluster.wait_until_formed(FORMED);

        cluster.kill(1);
        cluster.start_again(1);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(3), "after-restart", 1, 2, &[]);
        assert!(out.status.success(), "{out}");
        let (view, _) = cluster.wait_for(2, FORMED, "both topics", |v| {
            v.leaders.contains_key("alone") && v.leaders.contains_key("after-restart")
        });
        assert_eq!(view.brokers.keys().copied().collect::<Vec<_>>(), [2, 3]);
        let consumed = consume_all(&cluster.address(2), "alone", 100, FORMED);
        assert_eq!(consumed.len(), 100, "every record, once");
    });
}

#[test]
fn controllers_and_brokers_on_separate_nodes_form_fail_over_and_serve_clients() {
    run_with_timeout(TEST_LIMIT, || {
        // Brokers first: they wait for the quorum, in any order.
        let mut cluster = Cluster::start_separated(
            3,
            2,
            &[4, 2, 5, 1, 3],
            &[
                ("broker.session.timeout.ms", "3000"),
                ("broker.heartbeat.interval.ms", "500"),
            ],
        );
        let named = cluster.wait_until_formed(FORMED);
        assert!(
            [4, 5].contains(&named),
            "clients are named a broker: {named}"
        );
        let out = cli::create_topic(&cluster.address(4), "split", 4, 2, &[]);
        assert!(out.status.success(), "{out}");
        let (view, _) = cluster.wait_for(5, FORMED, "the topic on broker 5", |v| {
            v.leaders.contains_key("split")
        });
        let leaders: BTreeSet<i32> = view.leaders["split"].iter().copied().collect();
        assert_eq!(leaders, BTreeSet::from([4, 5]), "{view:?}");
        assert_eq!(view.brokers.keys().copied().collect::<Vec<_>>(), [4, 5]);

        let mut producer = TestProducer::new(&cluster.address(5), &[("acks", "all")]);
        let records: Vec<Outgoing> = (0..400)
            .map(|i| Record::kv(&format!("k{i}"), &format!("v{i}")).into())
            .collect();
        producer.produce_all("split", &records);
        let consumed = consume_all(&cluster.address(4), "split", 400, FORMED);
        let values: BTreeSet<_> = consumed.iter().map(|c| c.record.value.clone()).collect();
        assert_eq!(values.len(), 400, "every record once");

        // Every controller names the same active one; kill it.
        let active = cluster
            .active_controller_seen_by(1)
            .expect("controller 1 answers");
        assert!((1..=3).contains(&active), "{active}");
        for id in [2, 3] {
            let seen = cluster.active_controller_seen_by(id).expect("it answers");
            assert!(
                seen == active || seen == -1,
                "{id} sees {seen}, 1 sees {active}"
            );
        }
        // DescribeQuorum through a broker: the same leader, the voters, and
        // the brokers as the observers that follow the log.
        let quorum = cluster.quorum_view(4).expect("DescribeQuorum");
        assert_eq!(quorum.leader, active, "{quorum:?}");
        assert_eq!(quorum.voters, [1, 2, 3], "{quorum:?}");
        assert_eq!(quorum.observers, [4, 5], "{quorum:?}");
        assert!(quorum.high_watermark > 0, "{quorum:?}");

        cluster.kill(active);
        let killed = Instant::now();
        loop {
            let out = cli::create_topic(&cluster.address(5), "after-failover", 1, 2, &[]);
            if out.status.success() {
                break;
            }
            assert!(
                killed.elapsed() < FORMED,
                "no commit after the active controller died: {out}"
            );
        }
        println!(
            "controller {active} killed; a topic was created {:?} later",
            killed.elapsed()
        );
        let survivor = (1..=3).find(|id| *id != active).expect("a survivor");
        let next = cluster
            .active_controller_seen_by(survivor)
            .expect("answers");
        assert!(next != active, "a new active controller, not {active}");
        let (after, _) = wait_quorum(&cluster, 5, |q| q.leader == next);
        assert!(after.epoch > quorum.epoch, "{quorum:?} then {after:?}");

        // A dead broker is fenced; restarted, it catches up from the log.
        cluster.kill(5);
        cluster.wait_for(4, FORMED, "broker 5 fenced", |v| {
            !v.brokers.contains_key(&5)
        });
        let out = cli::create_topic(&cluster.address(4), "while-5-was-down", 2, 1, &[]);
        assert!(out.status.success(), "{out}");
        cluster.start_again(5);
        cluster.start_again(active);
        cluster.wait_until_formed(FORMED);
        let (view, _) = cluster.wait_for(5, FORMED, "broker 5 caught up", |v| {
            v.leaders.contains_key("while-5-was-down") && v.leaders.contains_key("after-failover")
        });
        assert_eq!(view.brokers.keys().copied().collect::<Vec<_>>(), [4, 5]);
        let consumed = consume_all(&cluster.address(5), "split", 400, FORMED);
        assert_eq!(consumed.len(), 400, "the restarted broker serves its data");
        let rejoined = cluster
            .active_controller_seen_by(active)
            .expect("the restarted controller answers");
        println!("the restarted controller {active} sees {rejoined} as active");

        // A broker that knows only controller.quorum.bootstrap.servers
        // finds the quorum, follows the log and takes partitions.
        let added = cluster.add_bootstrapped_broker(&[]);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(added), "on-three-brokers", 3, 3, &[]);
        assert!(out.status.success(), "{out}");
        let (view, _) = cluster.wait_for(added, FORMED, "the topic on the new broker", |v| {
            v.leaders.contains_key("on-three-brokers")
        });
        assert_eq!(
            view.brokers.keys().copied().collect::<Vec<_>>(),
            [4, 5, added]
        );
        let (quorum, _) = wait_quorum(&cluster, added, |q| q.observers.contains(&added));
        assert_eq!(quorum.observers, [4, 5, added], "{quorum:?}");
    });
}

/// Kafka's admin clients reach the controllers themselves (KIP-919,
/// `bootstrap.controllers`, the tools' `--bootstrap-controller`): on its
/// CONTROLLER listener each controller, a dedicated one included, lists
/// the APIs it serves there, describes the controllers (not the brokers)
/// with the active one, refuses the other endpoint type as Kafka does,
/// takes an admin request whichever controller gets it, and closes the
/// connection on an API a controller does not serve.
#[test]
fn admin_clients_reach_the_controllers_on_their_controller_listeners() {
    use tarn_cli::client::Client;
    use tarn_protocol::messages::api_versions::*;
    use tarn_protocol::messages::create_topics::*;
    use tarn_protocol::messages::describe_cluster::*;
    use tarn_protocol::messages::metadata::MetadataRequest;

    run_with_timeout(TEST_LIMIT, || {
        let cluster = Cluster::start_separated(3, 1, &[1, 2, 3, 4], &[]);
        cluster.wait_until_formed(FORMED);
        let connect = |address: &str| Client::connect(address).expect("connect");
        let describe = |address: &str, endpoint_type: i8| -> DescribeClusterResponse {
            let request = DescribeClusterRequest {
                endpoint_type,
                ..Default::default()
            };
            connect(address)
                .call(60, 1, 0, &request)
                .expect("DescribeCluster")
        };

        for id in 1..=3 {
            let versions: ApiVersionsResponse = connect(&cluster.controller_address(id))
                .call(18, 3, 3, &ApiVersionsRequest::default())
                .expect("ApiVersions");
            assert_eq!(versions.error_code, 0, "{versions:?}");
            let keys: BTreeSet<i16> = versions.api_keys.iter().map(|k| k.api_key).collect();
            for served in [18, 19, 20, 32, 37, 44, 55, 60, 80, 81] {
                assert!(
                    keys.contains(&served),
                    "controller {id} lacks {served}: {keys:?}"
                );
            }
            for broker_only in [0, 1, 3, 10, 11] {
                assert!(
                    !keys.contains(&broker_only),
                    "controller {id} lists {broker_only}"
                );
            }
        }

        // Every controller names the same three, and the active one, once
        // the quorum agrees on it.
        let deadline = Instant::now() + FORMED;
        let active = loop {
            let answers: Vec<DescribeClusterResponse> = (1..=3)
                .map(|id| describe(&cluster.controller_address(id), 2))
                .collect();
            let active = answers[0].controller_id;
            if active > 0 && answers.iter().all(|a| a.controller_id == active) {
                for answer in &answers {
                    assert_eq!(answer.error_code, 0, "{answer:?}");
                    assert_eq!(answer.endpoint_type, 2, "{answer:?}");
                    let listed: Vec<(i32, String)> = answer
                        .brokers
                        .iter()
                        .map(|b| (b.broker_id, format!("{}:{}", b.host, b.port)))
                        .collect();
                    let expected: Vec<(i32, String)> = (1..=3)
                        .map(|id| (id, cluster.controller_address(id)))
                        .collect();
                    assert_eq!(listed, expected, "{answer:?}");
                }
                break active;
            }
            assert!(
                Instant::now() < deadline,
                "no agreed active controller: {answers:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };

        // The other endpoint type, and one that does not exist.
        let brokers_of_a_controller = describe(&cluster.controller_address(1), 1);
        assert_eq!(
            brokers_of_a_controller.error_code, 114,
            "{brokers_of_a_controller:?}"
        );
        let controllers_of_a_broker = describe(&cluster.address(4), 2);
        assert_eq!(
            controllers_of_a_broker.error_code, 114,
            "{controllers_of_a_broker:?}"
        );
        let unknown = describe(&cluster.address(4), 3);
        assert_eq!(unknown.error_code, 115, "{unknown:?}");
        let brokers = describe(&cluster.address(4), 1);
        assert_eq!(brokers.error_code, 0, "{brokers:?}");
        // A broker names a live broker, which forwards what a client sends
        // a controller: clients of brokers need not reach a dedicated one.
        assert_eq!(brokers.controller_id, 4, "{brokers:?}");
        assert_eq!(
            brokers
                .brokers
                .iter()
                .map(|b| b.broker_id)
                .collect::<Vec<_>>(),
            [4]
        );

        // CreateTopics sent to a controller that is not the active one.
        let passive = (1..=3)
            .find(|id| *id != active)
            .expect("a passive controller");
        let request = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "made-on-a-controller".into(),
                num_partitions: 2,
                replication_factor: 1,
                ..Default::default()
            }],
            timeout_ms: 30_000,
            validate_only: false,
        };
        let created: CreateTopicsResponse = connect(&cluster.controller_address(passive))
            .call(19, 5, 5, &request)
            .expect("CreateTopics");
        assert_eq!(created.topics.len(), 1, "{created:?}");
        assert_eq!(created.topics[0].error_code, 0, "{created:?}");
        cluster.wait_for(4, FORMED, "the topic on the broker", |v| {
            v.leaders.contains_key("made-on-a-controller")
        });

        // Metadata is a broker's API: the controller closes the connection.
        let mut client = connect(&cluster.controller_address(passive));
        let refused = client.call::<_, tarn_protocol::messages::metadata::MetadataResponse>(
            3,
            12,
            9,
            &MetadataRequest::default(),
        );
        assert!(
            refused.is_err(),
            "Metadata answered on a CONTROLLER listener"
        );
    });
}

/// A voter restarted with a log behind the quorum's learns the commit
/// index from the leader, so until then its image is stale (or empty, with
/// no snapshot yet). It answers clients only once it has caught up (its
/// broker unfenced): the first Metadata it answers after the restart
/// already lists a topic created while it was down, and the ones before.
/// Serving earlier told clients their topics did not exist (librdkafka
/// then dropped the partitions it was fetching).
#[test]
fn a_restarted_voter_answers_clients_only_once_it_caught_up() {
    run_with_timeout(TEST_LIMIT, || {
        let mut cluster = Cluster::start(3, &[1, 2, 3], &[]);
        cluster.wait_until_formed(FORMED);
        let out = cli::create_topic(&cluster.address(1), "before", 3, 3, &[]);
        assert!(out.status.success(), "{out}");
        cluster.wait_for(3, FORMED, "the topic on node 3", |v| {
            v.leaders.contains_key("before")
        });
        cluster.kill(3);
        let out = cli::create_topic(&cluster.address(1), "while-down", 2, 2, &[]);
        assert!(out.status.success(), "{out}");
        cluster.start_again(3);
        // No wait: the first answer of the restarted node.
        let view = cluster.view(3).expect("Metadata from the restarted node");
        for topic in ["before", "while-down"] {
            assert!(view.leaders.contains_key(topic), "{topic}: {view:?}");
        }
        assert_eq!(view.brokers.len(), 3, "{view:?}");
    });
}
