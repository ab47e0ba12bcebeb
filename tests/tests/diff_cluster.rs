//! Differential tests of a cluster: the same requests sent to three Apache
//! Kafka nodes (4.4.0, each a broker and a controller, started by
//! `scripts/kafka.sh`) and to three Tarn nodes, node by node, and the
//! answers compared field by field (`tarn_e2e::diff`). What only a
//! cluster answers: replica assignments and their errors, requests that
//! reach a broker that does not lead the partition (and what it says of
//! the leader: KIP-951), acks=all against `min.insync.replicas`, leader
//! elections and reassignments that have nothing to do, the answers of a
//! follower, broker configs on each broker, group requests away from the
//! group's coordinator; then node 3 of each cluster stops and the other
//! two answer for what is left (leadership moved, ISRs shrunk, replicas
//! offline, leader epochs, a partition with no replica left), and node 3
//! comes back twice, once after that clean stop and once after a SIGKILL
//! (eligible leader replicas, KIP-966, at work both ways). Topics are
//! created with explicit replica assignments, so that both clusters place
//! and lead every partition alike.

use std::time::Duration;

use tarn_cli::client::Client;
use tarn_e2e::cluster::Cluster;
use tarn_e2e::diff::*;
use tarn_e2e::run_with_timeout;
use tarn_e2e::wire::join_request;
use tarn_protocol::messages::create_partitions::*;
use tarn_protocol::messages::create_topics::*;
use tarn_protocol::messages::delete_records::*;
use tarn_protocol::messages::describe_cluster::*;
use tarn_protocol::messages::describe_configs::*;
use tarn_protocol::messages::describe_producers::*;
use tarn_protocol::messages::describe_topic_partitions::*;
use tarn_protocol::messages::elect_leaders::*;
use tarn_protocol::messages::fetch::*;
use tarn_protocol::messages::find_coordinator::*;
use tarn_protocol::messages::heartbeat::*;
use tarn_protocol::messages::incremental_alter_configs::*;
use tarn_protocol::messages::init_producer_id::*;
use tarn_protocol::messages::join_group::*;
use tarn_protocol::messages::list_groups::*;
use tarn_protocol::messages::list_offsets::*;
use tarn_protocol::messages::metadata::*;
use tarn_protocol::messages::offset_commit::*;
use tarn_protocol::messages::offset_fetch::*;
use tarn_protocol::messages::offset_for_leader_epoch::*;
use tarn_protocol::messages::produce::*;
use tarn_protocol::messages::reassignments::*;
use tarn_protocol::messages::sync_group::*;
use tarn_protocol::record_batch::RecordBatchBuilder;

/// Scenarios whose answers differ on purpose, each with the reason.
const KNOWN: &[(&str, &str)] = &[];

/// Fields that differ between two clusters beyond [`MASKED`]: in KRaft a
/// broker names a random live broker as the "controller" in Metadata and
/// DescribeCluster (clients send controller requests to any broker, which
/// forwards them); a producer's last timestamp is the time it wrote.
const CLUSTER_MASKED: &[&str] = &["controller_id", "last_timestamp"];

const NODES: usize = 3;
const FORMED: Duration = Duration::from_secs(60);

/// The [`Diff`] with the clients of one node pair in it at a time.
struct Nodes {
    d: Diff,
    /// Node `i + 1`'s clients, Tarn's and Kafka's; `None` for the pair in
    /// `d`.
    slots: Vec<Option<(Client, Client)>>,
    current: usize,
}

impl Nodes {
    /// The diff with node `node`'s clients (1-based) in it.
    fn at(&mut self, node: usize) -> &mut Diff {
        if node != self.current {
            let (tarn, kafka) = self.slots[node - 1].take().expect("a node's clients");
            let tarn = std::mem::replace(&mut self.d.tarn, tarn);
            let kafka = std::mem::replace(&mut self.d.kafka, kafka);
            self.slots[self.current - 1] = Some((tarn, kafka));
            self.current = node;
        }
        &mut self.d
    }
}

impl Nodes {
    /// New connections to node `node` of both clusters (after it started
    /// again).
    fn reconnect(&mut self, node: usize, tarn: &Cluster, kafka: &[KafkaNode]) {
        let clients = (
            Client::connect(&tarn.address(node as i32)).expect("connect to Tarn"),
            Client::connect(&kafka[node - 1].bootstrap).expect("connect to Kafka"),
        );
        if node == self.current {
            (self.d.tarn, self.d.kafka) = clients;
        } else {
            self.slots[node - 1] = Some(clients);
        }
    }
}

const ALTER_REASSIGNMENTS: (i16, i16, i16) = (45, 0, 0);
const LIST_REASSIGNMENTS: (i16, i16, i16) = (46, 0, 0);

/// Partition `i` on brokers `replicas[i]`, the first its preferred leader.
fn assigned(name: &str, replicas: &[&[i32]], configs: &[(&str, &str)]) -> CreatableTopic {
    CreatableTopic {
        num_partitions: -1,
        replication_factor: -1,
        assignments: replicas
            .iter()
            .enumerate()
            .map(|(i, brokers)| CreatableReplicaAssignment {
                partition_index: i as i32,
                broker_ids: brokers.to_vec(),
            })
            .collect(),
        ..topic(name, 0, 0, configs)
    }
}

/// Waits until every broker of both clusters has registered (Kafka's
/// brokers unfence a moment after the quorum forms).
fn wait_for_brokers(n: &mut Nodes) {
    let request = DescribeClusterRequest {
        include_cluster_authorized_operations: false,
        endpoint_type: 1,
        ..Default::default()
    };
    wait_until(
        n,
        1,
        "the brokers did not register",
        |client| -> DescribeClusterResponse {
            client
                .call(
                    DESCRIBE_CLUSTER.0,
                    DESCRIBE_CLUSTER.1,
                    DESCRIBE_CLUSTER.2,
                    &request,
                )
                .expect("DescribeCluster")
        },
        |response| response.brokers.len() == NODES,
    );
}

/// Asks node `node` of each cluster with `ask` until `ready` holds of the
/// answer, for at most [`FORMED`] each; panics with `what` and the last
/// answer otherwise.
fn wait_until<R: std::fmt::Debug>(
    n: &mut Nodes,
    node: usize,
    what: &str,
    mut ask: impl FnMut(&mut Client) -> R,
    ready: impl Fn(&R) -> bool,
) {
    let d = n.at(node);
    for (cluster, client) in [("Tarn", &mut d.tarn), ("Kafka", &mut d.kafka)] {
        let deadline = std::time::Instant::now() + FORMED;
        loop {
            let answer = ask(client);
            if ready(&answer) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{cluster} node {node}: {what}: {answer:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits until node `node` of both clusters knows every partition of
/// `name` led by its preferred leader, with every replica in sync.
fn wait_led(n: &mut Nodes, node: usize, name: &str, partitions: usize) {
    let what = format!("{name} not led by its preferred leaders");
    wait_until(
        n,
        node,
        &what,
        |client| metadata_of(client, name),
        |response| {
            response.topics.iter().all(|t| {
                t.error_code == 0
                    && t.partitions.len() == partitions
                    && t.partitions.iter().all(|p| {
                        p.error_code == 0
                            && p.replica_nodes.first() == Some(&p.leader_id)
                            && p.isr_nodes.len() == p.replica_nodes.len()
                    })
            })
        },
    );
}

fn create_topics(n: &mut Nodes) {
    let d = n.at(1);
    let cases: Vec<(&str, CreatableTopic)> = vec![
        (
            "replication factor 4 on 3 brokers",
            topic("c-rf4", 1, 4, &[]),
        ),
        ("replication factor 3", topic("c-rf3", 2, 3, &[])),
        (
            "an assignment naming a broker that does not exist",
            assigned("c-ghost", &[&[1, 7]], &[]),
        ),
        (
            "an assignment naming a broker twice",
            assigned("c-twice", &[&[1, 1]], &[]),
        ),
        (
            "an assignment with partitions of different sizes",
            assigned("c-uneven", &[&[1, 2], &[2]], &[]),
        ),
        (
            "an assignment that skips partition 1",
            CreatableTopic {
                assignments: vec![
                    CreatableReplicaAssignment {
                        partition_index: 0,
                        broker_ids: vec![1],
                    },
                    CreatableReplicaAssignment {
                        partition_index: 2,
                        broker_ids: vec![2],
                    },
                ],
                ..assigned("c-gap", &[], &[])
            },
        ),
        (
            "an assignment beside a partition count",
            CreatableTopic {
                num_partitions: 2,
                ..assigned("c-both", &[&[1]], &[])
            },
        ),
        ("an empty replica list", assigned("c-empty", &[&[]], &[])),
    ];
    for (what, case) in &cases {
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics, validate only: {what}"),
            CREATE_TOPICS,
            &create(vec![case.clone()], true),
        );
    }
    for (what, case) in cases {
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics: {what}"),
            CREATE_TOPICS,
            &create(vec![case], false),
        );
    }
    let created: [(&str, CreatableTopic); 4] = [
        (
            "three partitions, each led by another broker",
            assigned("c-three", &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]], &[]),
        ),
        (
            "min.insync.replicas above the replication factor",
            assigned("c-strict", &[&[1, 2, 3]], &[("min.insync.replicas", "4")]),
        ),
        (
            "min.insync.replicas equal to the replication factor",
            assigned("c-isr3", &[&[1, 2, 3]], &[("min.insync.replicas", "3")]),
        ),
        ("one replica, on node 3", assigned("c-alone", &[&[3]], &[])),
    ];
    for (what, topic) in created {
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics: {what}"),
            CREATE_TOPICS,
            &create(vec![topic], false),
        );
    }
    for node in 1..=NODES {
        wait_led(n, node, "c-three", 3);
        wait_led(n, node, "c-strict", 1);
        wait_led(n, node, "c-isr3", 1);
        wait_led(n, node, "c-alone", 1);
    }
}

fn metadata(n: &mut Nodes) {
    for node in 1..=NODES {
        n.at(node).call::<_, MetadataResponse>(
            &format!("Metadata from node {node}: a topic on three brokers"),
            METADATA,
            &metadata_request(&["c-three", "c-strict"], false),
        );
    }
}

/// c-three's partition 0 is led by node 1; nodes 2 and 3 follow it.
fn a_follower_answers(n: &mut Nodes) {
    n.at(1).call::<_, ProduceResponse>(
        "Produce, acks=all, to the leader",
        PRODUCE_V12,
        &produce_request("c-three", 0, batch(3, 1_000)),
    );
    for node in [2, 3] {
        wait_follower_high_watermark(n, node, "c-three", 3);
        let d = n.at(node);
        d.call::<_, ProduceResponse>(
            &format!("Produce v9 to follower {node}"),
            PRODUCE,
            &produce_request("c-three", 0, batch(3, 2_000)),
        );
        d.call::<_, ProduceResponse>(
            &format!("Produce v12 to follower {node}"),
            PRODUCE_V12,
            &produce_request("c-three", 0, batch(3, 2_000)),
        );
        d.call::<_, FetchResponse>(
            &format!("Fetch v12 from follower {node}"),
            FETCH,
            &fetch_request("c-three", 0, 0, 1 << 20, 0),
        );
        let ids = d.topic_ids("c-three");
        d.call_each::<_, FetchResponse>(
            &format!("Fetch v18 from follower {node}, with a rack"),
            FETCH_V18,
            |broker| {
                let mut request = fetch_request("c-three", 0, 0, 1 << 20, 0);
                request.topics[0].topic_id = ids[broker];
                request.rack_id = "rack-a".into();
                request
            },
        );
        d.call::<_, ListOffsetsResponse>(
            &format!("ListOffsets from follower {node}"),
            LIST_OFFSETS,
            &list_offsets_request("c-three", 0, -1),
        );
        d.call::<_, OffsetForLeaderEpochResponse>(
            &format!("OffsetForLeaderEpoch from follower {node}"),
            OFFSET_FOR_LEADER_EPOCH,
            &offset_for_leader_epoch("c-three", 0, 0),
        );
        d.call::<_, DeleteRecordsResponse>(
            &format!("DeleteRecords on follower {node}"),
            DELETE_RECORDS,
            &delete_records_request("c-three", 0, 1),
        );
        d.call::<_, DescribeProducersResponse>(
            &format!("DescribeProducers from follower {node}"),
            DESCRIBE_PRODUCERS,
            &describe_producers("c-three", 0),
        );
    }
    let d = n.at(1);
    d.call::<_, FetchResponse>(
        "Fetch from the leader",
        FETCH,
        &fetch_request("c-three", 0, 0, 1 << 20, 0),
    );
    d.call::<_, OffsetForLeaderEpochResponse>(
        "OffsetForLeaderEpoch from the leader, epoch 0",
        OFFSET_FOR_LEADER_EPOCH,
        &offset_for_leader_epoch("c-three", 0, 0),
    );
    d.call::<_, OffsetForLeaderEpochResponse>(
        "OffsetForLeaderEpoch from the leader, an epoch it never had",
        OFFSET_FOR_LEADER_EPOCH,
        &offset_for_leader_epoch("c-three", 0, 5),
    );
    d.call::<_, ProduceResponse>(
        "Produce, acks=all, min.insync.replicas 4 of 3 in sync",
        PRODUCE_V12,
        &produce_request("c-strict", 0, batch(3, 1_000)),
    );
    let mut one = produce_request("c-strict", 0, batch(3, 1_000));
    one.acks = 1;
    d.call::<_, ProduceResponse>(
        "Produce, acks=1, min.insync.replicas 4 of 3 in sync",
        PRODUCE_V12,
        &one,
    );
    // Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its producer id
    // blocks are allocated.
    let (tarn, kafka) = d.call_until_ready(
        "InitProducerId for an idempotent producer",
        INIT_PRODUCER_ID,
        &InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: -1,
            producer_id: -1,
            producer_epoch: -1,
        },
        |r: &InitProducerIdResponse| r.error_code,
    );
    let ids = [tarn.producer_id, kafka.producer_id];
    d.call_each::<_, ProduceResponse>(
        "Produce an idempotent batch to the leader",
        PRODUCE_V12,
        |broker| {
            let records = RecordBatchBuilder::new()
                .producer(ids[broker], 0, 0)
                .record(5_000, Some(b"k"), Some(b"v"))
                .build();
            produce_request("c-three", 0, records.into())
        },
    );
    d.call::<_, DescribeProducersResponse>(
        "DescribeProducers from the leader",
        DESCRIBE_PRODUCERS,
        &describe_producers("c-three", 0),
    );
    // A follower answers from its own replica (kafka-transactions.sh
    // describe-producers --broker-id asks one).
    wait_follower_high_watermark(n, 2, "c-three", 4);
    n.at(2).call::<_, DescribeProducersResponse>(
        "DescribeProducers from a follower with the batch",
        DESCRIBE_PRODUCERS,
        &describe_producers("c-three", 0),
    );
}

/// Waits until node `node` of both clusters, a follower of `topic`'s
/// partition 0, knows the high watermark `expected` (a follower learns it
/// from its next fetch, a moment after the leader).
fn wait_follower_high_watermark(n: &mut Nodes, node: usize, topic: &str, expected: i64) {
    let what = format!("high watermark of {topic}-0 not {expected}");
    wait_until(
        n,
        node,
        &what,
        |client| -> FetchResponse {
            client
                .call(
                    FETCH.0,
                    FETCH.1,
                    FETCH.2,
                    &fetch_request(topic, 0, 0, 1 << 20, 0),
                )
                .expect("Fetch")
        },
        |response| response.responses[0].partitions[0].high_watermark == expected,
    );
}

/// Node 3 of each cluster stops cleanly; nodes 1 and 2 answer for what
/// is left: partitions it led move to the next in-sync replica, the ISRs
/// shrink, and what needs three brokers is refused.
fn a_broker_stops(n: &mut Nodes, tarn: &mut Cluster, kafka: &mut [KafkaNode]) {
    n.at(1).call::<_, ProduceResponse>(
        "Produce, acks=all, min.insync.replicas 3 of 3 in sync",
        PRODUCE_V12,
        &produce_request("c-isr3", 0, batch(2, 1_000)),
    );
    tarn.stop(3);
    kafka[2].stop();
    for node in [1, 2] {
        wait_without_node_3(n, node, &["c-three", "c-strict", "c-isr3"]);
        wait_leaderless(n, node, "c-alone");
    }
    for node in [1, 2] {
        let d = n.at(node);
        d.call::<_, MetadataResponse>(
            &format!("Metadata from node {node} once node 3 stopped"),
            METADATA,
            &metadata_request(&["c-three", "c-strict", "c-isr3"], false),
        );
        d.call::<_, MetadataResponse>(
            &format!("Metadata from node {node}: a partition whose only replica stopped"),
            METADATA,
            &metadata_request(&["c-alone"], false),
        );
        d.call::<_, DescribeTopicPartitionsResponse>(
            &format!(
                "DescribeTopicPartitions from node {node} once node 3 stopped: eligible leader replicas"
            ),
            DESCRIBE_TOPIC_PARTITIONS,
            &describe_partitions(&["c-alone", "c-isr3", "c-strict", "c-three"], 2000, None),
        );
        d.call::<_, DescribeClusterResponse>(
            &format!("DescribeCluster from node {node} once node 3 stopped"),
            DESCRIBE_CLUSTER,
            &DescribeClusterRequest {
                include_cluster_authorized_operations: false,
                endpoint_type: 1,
                ..Default::default()
            },
        );
    }
    let d = n.at(1);
    d.call::<_, ProduceResponse>(
        "Produce to a partition whose only replica stopped",
        PRODUCE_V12,
        &produce_request("c-alone", 0, batch(2, 1_000)),
    );
    // Partition 2 of c-three is led by node 1 in leader epoch 1 now.
    for (what, epoch) in [("the old", 0), ("the current", 1), ("a future", 5)] {
        let mut fetch = fetch_request("c-three", 2, 0, 1 << 20, 0);
        fetch.topics[0].partitions[0].current_leader_epoch = epoch;
        d.call::<_, FetchResponse>(
            &format!("Fetch from the new leader in {what} leader epoch"),
            FETCH,
            &fetch,
        );
        let mut list = list_offsets_request("c-three", 2, -1);
        list.topics[0].partitions[0].current_leader_epoch = epoch;
        d.call::<_, ListOffsetsResponse>(
            &format!("ListOffsets from the new leader in {what} leader epoch"),
            LIST_OFFSETS,
            &list,
        );
        let mut epochs = offset_for_leader_epoch("c-three", 2, 0);
        epochs.topics[0].partitions[0].current_leader_epoch = epoch;
        d.call::<_, OffsetForLeaderEpochResponse>(
            &format!("OffsetForLeaderEpoch of epoch 0 from the new leader in {what} leader epoch"),
            OFFSET_FOR_LEADER_EPOCH,
            &epochs,
        );
    }
    d.call::<_, ProduceResponse>(
        "Produce, acks=all, to the partition node 3 led, now led by node 1",
        PRODUCE_V12,
        &produce_request("c-three", 2, batch(2, 1_000)),
    );
    d.call::<_, ProduceResponse>(
        "Produce, acks=all, min.insync.replicas 3 of 2 in sync",
        PRODUCE_V12,
        &produce_request("c-isr3", 0, batch(2, 2_000)),
    );
    let mut one = produce_request("c-isr3", 0, batch(2, 2_000));
    one.acks = 1;
    d.call::<_, ProduceResponse>(
        "Produce, acks=1, min.insync.replicas 3 of 2 in sync",
        PRODUCE_V12,
        &one,
    );
    // A change of min.insync.replicas empties the topic's eligible leader
    // replicas (Kafka's ClearElrRecord).
    d.call::<_, IncrementalAlterConfigsResponse>(
        "IncrementalAlterConfigs: min.insync.replicas of a topic with eligible leader replicas",
        INCREMENTAL_ALTER_CONFIGS,
        &IncrementalAlterConfigsRequest {
            resources: vec![IncrementalAlterConfigsResource {
                resource_type: 2,
                resource_name: "c-isr3".into(),
                configs: vec![IncrementalAlterableConfig {
                    name: "min.insync.replicas".into(),
                    config_operation: 0,
                    value: Some("2".into()),
                }],
            }],
            validate_only: false,
        },
    );
    for node in [1, 2] {
        wait_until(
            n,
            node,
            "c-isr3 keeps eligible leader replicas",
            |client| {
                let (key, version, flexible) = DESCRIBE_TOPIC_PARTITIONS;
                client
                    .call::<_, DescribeTopicPartitionsResponse>(
                        key,
                        version,
                        flexible,
                        &describe_partitions(&["c-isr3"], 2000, None),
                    )
                    .expect("DescribeTopicPartitions")
            },
            |response| {
                response.topics.iter().all(|t| {
                    t.partitions.iter().all(|p| {
                        p.eligible_leader_replicas
                            .as_ref()
                            .is_some_and(|e| e.is_empty())
                    })
                })
            },
        );
        n.at(node).call::<_, DescribeTopicPartitionsResponse>(
            &format!("DescribeTopicPartitions from node {node} after min.insync.replicas changed"),
            DESCRIBE_TOPIC_PARTITIONS,
            &describe_partitions(&["c-isr3", "c-strict"], 2000, None),
        );
    }
    let d = n.at(1);
    d.call::<_, ElectLeadersResponse>(
        "ElectLeaders, preferred, the preferred leader stopped",
        ELECT_LEADERS,
        &elect_leaders(0, "c-three", vec![0, 1, 2]),
    );
    for validate_only in [true, false] {
        let how = if validate_only { ", validate only" } else { "" };
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics{how}: replication factor 3 with 2 brokers up"),
            CREATE_TOPICS,
            &create(vec![topic("c-short", 1, 3, &[])], validate_only),
        );
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics{how}: an assignment naming the stopped broker"),
            CREATE_TOPICS,
            &create(vec![assigned("c-on-3", &[&[3, 1]], &[])], validate_only),
        );
    }
    for node in [1, 2] {
        wait_led_by_any(n, node, "c-on-3");
        n.at(node).call::<_, MetadataResponse>(
            &format!(
                "Metadata from node {node}: a topic created with a replica on the stopped broker"
            ),
            METADATA,
            &metadata_request(&["c-on-3"], false),
        );
    }
    let d = n.at(1);
    d.call::<_, CreatePartitionsResponse>(
        "CreatePartitions, validate only: an assignment naming the stopped broker",
        CREATE_PARTITIONS,
        &CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: "c-three".into(),
                count: 4,
                assignments: Some(vec![CreatePartitionsAssignment {
                    broker_ids: vec![3, 1, 2],
                }]),
            }],
            timeout_ms: 30_000,
            validate_only: true,
        },
    );
}

/// The topics whose replicas include node 3 when it comes back.
const ON_NODE_3: [&str; 5] = ["c-alone", "c-isr3", "c-on-3", "c-strict", "c-three"];

/// Node 3 of each cluster starts again after its clean stop, is SIGKILLed
/// once it is back in every ISR, and starts again: what a returning
/// replica gets from eligible leader replicas (KIP-966), cleanly and
/// uncleanly stopped. A clean stop leaves it eligible, so it leads the
/// partition it alone held again; a kill takes it out of every ISR and
/// eligible set when it registers again.
fn node_3_returns(n: &mut Nodes, tarn: &mut Cluster, kafka: &mut [KafkaNode]) {
    tarn.start_again(3);
    kafka[2].start_again();
    n.reconnect(3, tarn, kafka);
    compare_with_node_3_back(n, "after a clean stop");
    tarn.kill(3);
    kafka[2].kill();
    for node in [1, 2] {
        wait_without_node_3(n, node, &["c-three", "c-strict", "c-isr3", "c-on-3"]);
        wait_leaderless(n, node, "c-alone");
        n.at(node).call::<_, DescribeTopicPartitionsResponse>(
            &format!("DescribeTopicPartitions from node {node} once node 3 was killed"),
            DESCRIBE_TOPIC_PARTITIONS,
            &describe_partitions(&ON_NODE_3, 2000, None),
        );
    }
    tarn.start_again(3);
    kafka[2].start_again();
    n.reconnect(3, tarn, kafka);
    compare_with_node_3_back(n, "after it was killed");
}

/// Waits until every node of both clusters lists node 3 again, in every
/// ISR of [`ON_NODE_3`] with every partition led, then compares what each
/// node says of them.
fn compare_with_node_3_back(n: &mut Nodes, how: &str) {
    for node in 1..=NODES {
        wait_until(
            n,
            node,
            &format!("node 3 not back in every ISR {how}"),
            |client| metadata_of_topics(client, &ON_NODE_3),
            |response| {
                response.brokers.len() == NODES
                    && response.topics.iter().all(|t| {
                        t.partitions.iter().all(|p| {
                            let mut isr = p.isr_nodes.clone();
                            let mut replicas = p.replica_nodes.clone();
                            isr.sort_unstable();
                            replicas.sort_unstable();
                            p.leader_id >= 0 && isr == replicas
                        })
                    })
            },
        );
    }
    for node in 1..=NODES {
        let d = n.at(node);
        d.call::<_, MetadataResponse>(
            &format!("Metadata from node {node}: node 3 back {how}"),
            METADATA,
            &metadata_request(&ON_NODE_3, false),
        );
        d.call::<_, DescribeTopicPartitionsResponse>(
            &format!("DescribeTopicPartitions from node {node}: node 3 back {how}"),
            DESCRIBE_TOPIC_PARTITIONS,
            &describe_partitions(&ON_NODE_3, 2000, None),
        );
    }
}

/// Waits until node `node` of both clusters knows a leader for every
/// partition of `name`.
fn wait_led_by_any(n: &mut Nodes, node: usize, name: &str) {
    let what = format!("{name} not led");
    wait_until(
        n,
        node,
        &what,
        |client| metadata_of(client, name),
        |response| {
            response.topics.iter().all(|t| {
                t.error_code == 0
                    && !t.partitions.is_empty()
                    && t.partitions.iter().all(|p| p.leader_id >= 0)
            })
        },
    );
}

/// Waits until node `node` of both clusters knows no leader for any
/// partition of `name`.
fn wait_leaderless(n: &mut Nodes, node: usize, name: &str) {
    let what = format!("{name} still led");
    wait_until(
        n,
        node,
        &what,
        |client| metadata_of(client, name),
        |response| {
            response.topics[0]
                .partitions
                .iter()
                .all(|p| p.leader_id < 0)
        },
    );
}

/// Metadata of `topics` (none created by the asking).
fn metadata_of_topics(client: &mut Client, topics: &[&str]) -> MetadataResponse {
    client
        .call(
            METADATA.0,
            METADATA.1,
            METADATA.2,
            &metadata_request(topics, false),
        )
        .expect("Metadata")
}

/// Waits until node `node` of both clusters lists two brokers and no
/// partition of `topics` led by node 3 or with it in sync.
fn wait_without_node_3(n: &mut Nodes, node: usize, topics: &[&str]) {
    wait_until(
        n,
        node,
        "node 3 still listed",
        |client| metadata_of_topics(client, topics),
        |response| {
            response.brokers.len() == 2
                && response.topics.iter().all(|t| {
                    t.partitions
                        .iter()
                        .all(|p| p.leader_id != 3 && !p.isr_nodes.contains(&3))
                })
        },
    );
}

fn elections_and_reassignments(n: &mut Nodes) {
    let d = n.at(2);
    d.call::<_, ElectLeadersResponse>(
        "ElectLeaders, preferred, every leader already preferred",
        ELECT_LEADERS,
        &elect_leaders(0, "c-three", vec![0, 1, 2]),
    );
    d.call::<_, ElectLeadersResponse>(
        "ElectLeaders, unclean, every leader alive",
        ELECT_LEADERS,
        &elect_leaders(1, "c-three", vec![0]),
    );
    d.call::<_, ElectLeadersResponse>(
        "ElectLeaders, a partition that does not exist",
        ELECT_LEADERS,
        &elect_leaders(0, "c-three", vec![9]),
    );
    d.call::<_, ElectLeadersResponse>(
        "ElectLeaders, a topic that does not exist",
        ELECT_LEADERS,
        &elect_leaders(0, "c-none", vec![0]),
    );
    let reassign = |topic: &str, partition: i32, replicas: Option<Vec<i32>>| {
        AlterPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            topics: vec![ReassignableTopic {
                name: topic.into(),
                partitions: vec![ReassignablePartition {
                    partition_index: partition,
                    replicas,
                }],
            }],
            ..Default::default()
        }
    };
    for (what, request) in [
        (
            "a topic that does not exist",
            reassign("c-none", 0, Some(vec![1, 2])),
        ),
        (
            "a partition that does not exist",
            reassign("c-three", 9, Some(vec![1, 2])),
        ),
        (
            "a broker that does not exist",
            reassign("c-three", 0, Some(vec![1, 7])),
        ),
        (
            "a broker named twice",
            reassign("c-three", 0, Some(vec![1, 1])),
        ),
        ("no replicas", reassign("c-three", 0, Some(vec![]))),
        (
            "cancelling where none is in progress",
            reassign("c-three", 0, None),
        ),
        (
            "the replicas it has",
            reassign("c-three", 1, Some(vec![2, 3, 1])),
        ),
    ] {
        d.call::<_, AlterPartitionReassignmentsResponse>(
            &format!("AlterPartitionReassignments: {what}"),
            ALTER_REASSIGNMENTS,
            &request,
        );
    }
    d.call::<_, ListPartitionReassignmentsResponse>(
        "ListPartitionReassignments: none in progress",
        LIST_REASSIGNMENTS,
        &ListPartitionReassignmentsRequest {
            timeout_ms: 30_000,
            topics: None,
        },
    );
    let mut twice = reassign("c-three", 1, Some(vec![2, 3, 1]));
    let again = twice.topics[0].partitions[0].clone();
    twice.topics[0].partitions.push(again);
    d.call::<_, AlterPartitionReassignmentsResponse>(
        "AlterPartitionReassignments: a partition named twice",
        ALTER_REASSIGNMENTS,
        &twice,
    );
    let mut twice = reassign("c-three", 1, Some(vec![2, 3, 1]));
    let again = twice.topics[0].clone();
    twice.topics.push(again);
    d.call::<_, AlterPartitionReassignmentsResponse>(
        "AlterPartitionReassignments: a topic named twice",
        ALTER_REASSIGNMENTS,
        &twice,
    );

    // Reassignments carried out: a replica dropped, then one added.
    d.call::<_, CreateTopicsResponse>(
        "setup: topic c-move on brokers 1, 2 and 3",
        CREATE_TOPICS,
        &create(vec![assigned("c-move", &[&[1, 2, 3]], &[])], false),
    );
    wait_led(n, 2, "c-move", 1);
    for (what, replicas) in [
        ("a replica dropped", vec![2, 1]),
        ("a replica added", vec![3, 2, 1]),
    ] {
        let d = n.at(2);
        d.call::<_, AlterPartitionReassignmentsResponse>(
            &format!("AlterPartitionReassignments: {what}"),
            ALTER_REASSIGNMENTS,
            &reassign("c-move", 0, Some(replicas.clone())),
        );
        let done = format!("c-move not on {replicas:?} with each replica in sync");
        wait_until(
            n,
            2,
            &done,
            |client| metadata_of(client, "c-move"),
            |response| {
                response.topics.iter().all(|t| {
                    t.partitions
                        .iter()
                        .all(|p| p.replica_nodes == replicas && p.isr_nodes.len() == replicas.len())
                })
            },
        );
        let d = n.at(2);
        d.call::<_, MetadataResponse>(
            &format!("Metadata: c-move after {what}"),
            METADATA,
            &metadata_request(&["c-move"], false),
        );
        d.call::<_, ListPartitionReassignmentsResponse>(
            &format!("ListPartitionReassignments: after {what}"),
            LIST_REASSIGNMENTS,
            &ListPartitionReassignmentsRequest {
                timeout_ms: 30_000,
                topics: None,
            },
        );
    }
    let d = n.at(2);
    let partitions = |assignments: Option<Vec<Vec<i32>>>, count: i32| CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic {
            name: "c-three".into(),
            count,
            assignments: assignments.map(|a| {
                a.into_iter()
                    .map(|broker_ids| CreatePartitionsAssignment { broker_ids })
                    .collect()
            }),
        }],
        timeout_ms: 30_000,
        validate_only: true,
    };
    for (what, request) in [
        (
            "a broker that does not exist",
            partitions(Some(vec![vec![1, 2, 7]]), 4),
        ),
        (
            "a broker named twice",
            partitions(Some(vec![vec![1, 1, 2]]), 4),
        ),
        (
            "fewer replicas than the topic's",
            partitions(Some(vec![vec![1, 2]]), 4),
        ),
        (
            "fewer assignments than new partitions",
            partitions(Some(vec![vec![1, 2, 3]]), 5),
        ),
        ("no assignment", partitions(None, 4)),
    ] {
        d.call::<_, CreatePartitionsResponse>(
            &format!("CreatePartitions, validate only: {what}"),
            CREATE_PARTITIONS,
            &request,
        );
    }
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster: brokers",
        DESCRIBE_CLUSTER,
        &DescribeClusterRequest {
            include_cluster_authorized_operations: false,
            endpoint_type: 1,
            ..Default::default()
        },
    );
}

/// Broker configs in a cluster: a broker describes and alters only its own
/// (the Admin client sends a broker's configs to that broker), and a change
/// it takes reaches it through the controller.
fn broker_configs(n: &mut Nodes) {
    let set = |broker: &str, key: &str, value: Option<&str>, validate_only: bool| {
        IncrementalAlterConfigsRequest {
            resources: vec![IncrementalAlterConfigsResource {
                resource_type: 4,
                resource_name: broker.into(),
                configs: vec![IncrementalAlterableConfig {
                    name: key.into(),
                    config_operation: if value.is_some() { 0 } else { 1 },
                    value: value.map(str::to_owned),
                }],
            }],
            validate_only,
        }
    };
    let keys = Some(&["log.retention.ms", "log.retention.hours", "no.such.key"][..]);
    let d = n.at(1);
    d.call::<_, DescribeConfigsResponse>(
        "DescribeConfigs of broker 2 sent to broker 1",
        DESCRIBE_CONFIGS,
        &describe_configs_request(4, "2", keys, true, false),
    );
    d.call::<_, IncrementalAlterConfigsResponse>(
        "IncrementalAlterConfigs: broker 2's config sent to broker 1",
        INCREMENTAL_ALTER_CONFIGS,
        &set("2", "log.retention.ms", Some("3600000"), false),
    );
    let d = n.at(2);
    for (what, request) in [
        (
            "a read-only key",
            set("2", "log.dirs", Some("/elsewhere"), false),
        ),
        (
            "an unknown key, kept as a custom config",
            set("2", "no.such.key", Some("1"), false),
        ),
        (
            "a value that is no number",
            set("2", "log.retention.ms", Some("soon"), false),
        ),
        (
            "log.retention.ms, validate only",
            set("2", "log.retention.ms", Some("3600000"), true),
        ),
        (
            "log.retention.ms",
            set("2", "log.retention.ms", Some("3600000"), false),
        ),
    ] {
        d.call::<_, IncrementalAlterConfigsResponse>(
            &format!("IncrementalAlterConfigs of broker 2 on broker 2: {what}"),
            INCREMENTAL_ALTER_CONFIGS,
            &request,
        );
    }
    wait_config(n, 2, "log.retention.ms", "3600000");
    for node in [2, 3] {
        let name = node.to_string();
        n.at(node).call::<_, DescribeConfigsResponse>(
            &format!("DescribeConfigs of broker {node} on itself after broker 2's change"),
            DESCRIBE_CONFIGS,
            &describe_configs_request(4, &name, keys, true, false),
        );
    }
    n.at(2).call::<_, IncrementalAlterConfigsResponse>(
        "IncrementalAlterConfigs of broker 2 on broker 2: log.retention.ms deleted",
        INCREMENTAL_ALTER_CONFIGS,
        &set("2", "log.retention.ms", None, false),
    );
}

/// Waits until node `node` of both clusters reports broker config `key`
/// of itself at `value`.
fn wait_config(n: &mut Nodes, node: usize, key: &str, value: &str) {
    let name = node.to_string();
    let what = format!("{key} not {value}");
    wait_until(
        n,
        node,
        &what,
        |client| -> DescribeConfigsResponse {
            client
                .call(
                    DESCRIBE_CONFIGS.0,
                    DESCRIBE_CONFIGS.1,
                    DESCRIBE_CONFIGS.2,
                    &describe_configs_request(4, &name, Some(&[key][..]), false, false),
                )
                .expect("DescribeConfigs")
        },
        |response| {
            response
                .results
                .first()
                .and_then(|r| r.configs.first())
                .and_then(|c| c.value.as_deref())
                == Some(value)
        },
    );
}

/// Group requests sent to a broker that is not the group's coordinator:
/// NOT_COORDINATOR, which sends clients to FindCoordinator again. Each
/// cluster places `__consumer_offsets` (and so the coordinator) its own
/// way, so each is asked through a broker of its own that does not
/// coordinate the group.
fn groups_off_their_coordinator(n: &mut Nodes, tarn: &Cluster, kafka: &[KafkaNode]) {
    let group = "c-group";
    let (tarn_coordinator, kafka_coordinator) = coordinators(n, tarn, kafka, group);
    let mut d = pair(
        tarn,
        kafka,
        other_node(tarn_coordinator),
        other_node(kafka_coordinator),
    );
    d.call::<_, JoinGroupResponse>(
        "JoinGroup on a broker that does not coordinate the group",
        JOIN_GROUP,
        &join_request(group, "", "consumer"),
    );
    d.call::<_, SyncGroupResponse>(
        "SyncGroup on a broker that does not coordinate the group",
        SYNC_GROUP,
        &SyncGroupRequest {
            group_id: group.into(),
            generation_id: 1,
            member_id: "member".into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![],
        },
    );
    d.call::<_, HeartbeatResponse>(
        "Heartbeat on a broker that does not coordinate the group",
        HEARTBEAT,
        &HeartbeatRequest {
            group_id: group.into(),
            generation_id: 1,
            member_id: "member".into(),
            group_instance_id: None,
        },
    );
    d.call::<_, OffsetCommitResponse>(
        "OffsetCommit on a broker that does not coordinate the group",
        OFFSET_COMMIT,
        &memberless_commit(group, "c-three", 0, 1),
    );
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch on a broker that does not coordinate the group",
        OFFSET_FETCH,
        &OffsetFetchRequest {
            group_id: group.into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "c-three".into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    // A group with committed offsets is listed by its coordinator only
    // (the Admin client asks every broker and merges the lists).
    let simple = "c-simple";
    let (tarn_coordinator, kafka_coordinator) = coordinators(n, tarn, kafka, simple);
    let mut on_coordinator = pair(tarn, kafka, tarn_coordinator, kafka_coordinator);
    on_coordinator.call::<_, OffsetCommitResponse>(
        "OffsetCommit of a group without members on its coordinator",
        OFFSET_COMMIT,
        &memberless_commit(simple, "c-three", 0, 1),
    );
    let list = ListGroupsRequest {
        states_filter: vec![],
        types_filter: vec![],
    };
    on_coordinator.call::<_, ListGroupsResponse>(
        "ListGroups on the group's coordinator",
        LIST_GROUPS,
        &list,
    );
    let mut elsewhere = pair(
        tarn,
        kafka,
        other_node(tarn_coordinator),
        other_node(kafka_coordinator),
    );
    elsewhere.call::<_, ListGroupsResponse>(
        "ListGroups on a broker that coordinates no group",
        LIST_GROUPS,
        &list,
    );
    for mut part in [d, on_coordinator, elsewhere] {
        n.d.compared.append(&mut part.compared);
        n.d.differences.append(&mut part.differences);
    }
}

/// The node that coordinates `group` in each cluster (Tarn's, Kafka's),
/// once it serves the group: Kafka names a coordinator a moment before it
/// has loaded the group's partition (NOT_COORDINATOR meanwhile).
fn coordinators(n: &mut Nodes, tarn: &Cluster, kafka: &[KafkaNode], group: &str) -> (i32, i32) {
    let find = FindCoordinatorRequest {
        key: group.into(),
        key_type: 0,
        ..Default::default()
    };
    let coordinator = |client: &mut Client| {
        until_ready(
            client,
            FIND_COORDINATOR,
            &find,
            |r: &FindCoordinatorResponse| r.error_code,
        )
        .node_id
    };
    let ids = (coordinator(&mut n.d.tarn), coordinator(&mut n.d.kafka));
    let probe = HeartbeatRequest {
        group_id: group.into(),
        generation_id: -1,
        member_id: "probe".into(),
        group_instance_id: None,
    };
    let mut served = pair(tarn, kafka, ids.0, ids.1);
    for client in [&mut served.tarn, &mut served.kafka] {
        until_ready(client, HEARTBEAT, &probe, |r: &HeartbeatResponse| {
            r.error_code
        });
    }
    ids
}

/// The first node other than `node`.
fn other_node(node: i32) -> i32 {
    (1..=NODES as i32)
        .find(|id| *id != node)
        .expect("another node")
}

/// A [`Diff`] between Tarn's node `tarn_node` and Kafka's `kafka_node`.
fn pair(tarn: &Cluster, kafka: &[KafkaNode], tarn_node: i32, kafka_node: i32) -> Diff {
    Diff {
        tarn: Client::connect(&tarn.address(tarn_node)).expect("connect to Tarn"),
        kafka: Client::connect(&kafka[kafka_node as usize - 1].bootstrap)
            .expect("connect to Kafka"),
        compared: Vec::new(),
        differences: Vec::new(),
        known: KNOWN,
        masked: CLUSTER_MASKED,
    }
}

#[test]
fn a_tarn_cluster_answers_as_an_apache_kafka_cluster_does() {
    run_with_timeout(Duration::from_secs(400), || {
        let mut kafka = KafkaNode::start_cluster(NODES);
        let mut tarn = Cluster::start(NODES, &[1, 2, 3], &[]);
        tarn.wait_until_formed(FORMED);
        let mut slots: Vec<Option<(Client, Client)>> = (1..=NODES)
            .map(|id| {
                Some((
                    Client::connect(&tarn.address(id as i32)).expect("connect to Tarn"),
                    Client::connect(&kafka[id - 1].bootstrap).expect("connect to Kafka"),
                ))
            })
            .collect();
        let (first_tarn, first_kafka) = slots[0].take().expect("node 1");
        let mut n = Nodes {
            d: Diff {
                tarn: first_tarn,
                kafka: first_kafka,
                compared: Vec::new(),
                differences: Vec::new(),
                known: KNOWN,
                masked: CLUSTER_MASKED,
            },
            slots,
            current: 1,
        };
        wait_for_brokers(&mut n);
        create_topics(&mut n);
        metadata(&mut n);
        a_follower_answers(&mut n);
        elections_and_reassignments(&mut n);
        broker_configs(&mut n);
        groups_off_their_coordinator(&mut n, &tarn, &kafka);
        a_broker_stops(&mut n, &mut tarn, &mut kafka);
        node_3_returns(&mut n, &mut tarn, &mut kafka);
        let d = &n.d;
        eprintln!(
            "compared {} scenarios with an Apache Kafka cluster",
            d.compared.len()
        );
        assert!(
            d.differences.is_empty(),
            "{} of {} scenarios answer otherwise than Apache Kafka:\n{}",
            d.differences.len(),
            d.compared.len(),
            d.differences.join("\n")
        );
    });
}
