//! Differential tests: the same request sequences sent to Apache Kafka
//! (4.4.0, one KRaft node started by `scripts/kafka.sh`) and to Tarn, and
//! the decoded responses compared field by field.
//!
//! A response is compared as its `Debug` text after masking the fields
//! that may differ between two clusters ([`MASKED`]: ids, throttle times,
//! error messages' wording, addresses). Every other difference fails the
//! test unless its scenario is in [`KNOWN`], with the reason Tarn answers
//! otherwise. The report lists every scenario either way, so a run shows
//! what was compared.

use bytes::Bytes;
use tarn_cli::client::Client;
use tarn_e2e::cluster::free_port;
use tarn_e2e::diff::*;
use tarn_e2e::wire::join_request;
use tarn_e2e::{run_with_timeout, BrokerOptions, TarnBroker};
use tarn_protocol::codec::Uuid;
use tarn_protocol::messages::acls::*;
use tarn_protocol::messages::alter_configs::*;
use tarn_protocol::messages::client_quotas::*;
use tarn_protocol::messages::create_partitions::*;
use tarn_protocol::messages::create_topics::*;
use tarn_protocol::messages::delete_groups::*;
use tarn_protocol::messages::delete_records::*;
use tarn_protocol::messages::delete_topics::*;
use tarn_protocol::messages::describe_cluster::*;
use tarn_protocol::messages::describe_configs::*;
use tarn_protocol::messages::describe_groups::*;
use tarn_protocol::messages::describe_log_dirs::*;
use tarn_protocol::messages::describe_producers::*;
use tarn_protocol::messages::describe_topic_partitions::*;
use tarn_protocol::messages::elect_leaders::*;
use tarn_protocol::messages::fetch::*;
use tarn_protocol::messages::find_coordinator::*;
use tarn_protocol::messages::heartbeat::*;
use tarn_protocol::messages::incremental_alter_configs::*;
use tarn_protocol::messages::init_producer_id::*;
use tarn_protocol::messages::join_group::*;
use tarn_protocol::messages::leave_group::*;
use tarn_protocol::messages::list_config_resources::*;
use tarn_protocol::messages::list_groups::*;
use tarn_protocol::messages::list_offsets::*;
use tarn_protocol::messages::list_transactions::*;
use tarn_protocol::messages::metadata::*;
use tarn_protocol::messages::offset_commit::*;
use tarn_protocol::messages::offset_delete::*;
use tarn_protocol::messages::offset_fetch::*;
use tarn_protocol::messages::offset_for_leader_epoch::*;
use tarn_protocol::messages::produce::*;
use tarn_protocol::messages::scram_credentials::*;
use tarn_protocol::messages::sync_group::*;
use tarn_protocol::messages::update_features::*;
use tarn_protocol::record_batch::RecordBatchBuilder;

/// Scenarios whose answers differ on purpose, each with the reason.
const KNOWN: &[(&str, &str)] = &[
    (
        "Metadata: a new topic, auto-created",
        "Kafka answers the request that auto-creates a topic UNKNOWN_TOPIC_OR_PARTITION (its \
         broker asks the controller without waiting), so the client asks again; Tarn waits \
         for the creation to commit and answers the new topic, sparing that round trip",
    ),
    (
        "IncrementalAlterConfigs of a topic: an unknown operation",
        "Kafka answers UNKNOWN_SERVER_ERROR (an exception escapes its handler for an operation id \
     it does not know); Tarn answers INVALID_REQUEST, which says what is wrong",
    ),
];

/// Broker keys compared by name: the cluster keys both nodes are given
/// alike (`TARN_AS_KAFKA_SH`) or leave at a default Tarn shares with Kafka.
/// Left out, each for a reason: `listeners`, `advertised.listeners`,
/// `controller.quorum.voters` and `log.dirs` name each node's own ports
/// and paths; `listener.security.protocol.map`, `num.network.threads` and
/// `num.io.threads` are reconfigurable at run time in Kafka but read-only
/// in Tarn, which cannot apply them; `socket.receive.buffer.bytes`
/// defaults to the system's size (-1) in Tarn and to 102400 in Kafka
/// (bench/RESULTS-vs-kafka.md, "Socket buffers", says why); `broker.rack`
/// and the other keys with no default are null in Kafka and empty in Tarn.
const COMPARED_BROKER_KEYS: &[&str] = &[
    "process.roles",
    "node.id",
    "controller.listener.names",
    "inter.broker.listener.name",
    "security.inter.broker.protocol",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "controller.quorum.election.timeout.ms",
    "controller.quorum.fetch.timeout.ms",
    "socket.send.buffer.bytes",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.roll.ms",
    "log.roll.hours",
    "log.roll.jitter.ms",
    "log.roll.jitter.hours",
];

/// Static keys both nodes start with beyond `TARN_AS_KAFKA_SH`: hours from
/// which Kafka derives `log.retention.ms`, `log.roll.ms` and
/// `log.roll.jitter.ms` (and so the topics' `retention.ms`, `segment.ms` and
/// `segment.jitter.ms`), so that describing configs compares where a
/// derived value is said to come from. Long enough to change nothing else.
const STATIC_TIME_KEYS: &[(&str, &str)] = &[
    ("log.retention.hours", "100"),
    ("log.roll.hours", "50"),
    ("log.roll.jitter.hours", "1"),
];

/// The cluster keys `scripts/kafka.sh` writes into Kafka's
/// server.properties, given to Tarn too so that their sources agree (the
/// controller listener's port 0 is any free port: nothing binds it yet).
const TARN_AS_KAFKA_SH: &[(&str, &str)] = &[
    ("process.roles", "broker,controller"),
    ("node.id", "1"),
    (
        "listeners",
        "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
    ),
    ("controller.listener.names", "CONTROLLER"),
    (
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    ),
    ("inter.broker.listener.name", "PLAINTEXT"),
];

/// DescribeConfigs of topics (resource type 2), and of the broker (4) for
/// `COMPARED_BROKER_KEYS` only: Kafka lists some 350 broker keys, Tarn the
/// ones it has.
fn describe_configs(d: &mut Diff) {
    d.call::<_, DescribeConfigsResponse>(
        "DescribeConfigs: the broker's cluster keys",
        DESCRIBE_CONFIGS,
        &describe_configs_request(4, "1", Some(COMPARED_BROKER_KEYS), false, true),
    );
    for (what, name, keys, synonyms, documentation) in [
        ("a topic's every key", "d-new", None, false, false),
        (
            "a topic with synonyms and documentation",
            "d-cfg",
            None,
            true,
            true,
        ),
        (
            "named keys of a topic",
            "d-cfg",
            Some(&["cleanup.policy", "retention.ms"][..]),
            true,
            false,
        ),
        (
            "an unknown key of a topic",
            "d-cfg",
            Some(&["no.such.key"][..]),
            false,
            false,
        ),
        ("a topic that does not exist", "d-none", None, false, false),
    ] {
        d.call::<_, DescribeConfigsResponse>(
            &format!("DescribeConfigs: {what}"),
            DESCRIBE_CONFIGS,
            &describe_configs_request(2, name, keys, synonyms, documentation),
        );
    }
}

/// Client quotas stored and read back (KIP-546), and the ACL requests
/// of a broker with no authorizer.
fn quotas_and_acls(d: &mut Diff) {
    let entity = |parts: &[(&str, Option<&str>)]| -> Vec<EntityData> {
        parts
            .iter()
            .map(|(entity_type, entity_name)| EntityData {
                entity_type: (*entity_type).into(),
                entity_name: entity_name.map(str::to_owned),
            })
            .collect()
    };
    let set = |parts: &[(&str, Option<&str>)], ops: &[(&str, f64, bool)]| AlterEntryData {
        entity: entity(parts),
        ops: ops
            .iter()
            .map(|(key, value, remove)| OpData {
                key: (*key).into(),
                value: Float64(*value),
                remove: *remove,
            })
            .collect(),
    };
    let alter = |entries, validate_only| AlterClientQuotasRequest {
        entries,
        validate_only,
    };
    for (what, request) in [
        (
            "a user's byte rates, validate only",
            alter(
                vec![set(
                    &[("user", Some("alice"))],
                    &[("producer_byte_rate", 1024.0, false)],
                )],
                true,
            ),
        ),
        (
            "a user's and a client's rates",
            alter(
                vec![
                    set(
                        &[("user", Some("alice"))],
                        &[
                            ("producer_byte_rate", 1024.0, false),
                            ("consumer_byte_rate", 2048.0, false),
                        ],
                    ),
                    set(
                        &[("client-id", Some("app"))],
                        &[("request_percentage", 50.0, false)],
                    ),
                ],
                false,
            ),
        ),
        (
            "a user's and client's default, and an IP's connection rate",
            alter(
                vec![
                    set(
                        &[("user", None), ("client-id", Some("app"))],
                        &[("producer_byte_rate", 4096.0, false)],
                    ),
                    set(
                        &[("ip", Some("10.0.0.1"))],
                        &[("connection_creation_rate", 10.0, false)],
                    ),
                ],
                false,
            ),
        ),
        (
            "an entity type twice",
            alter(
                vec![set(
                    &[("user", Some("bob")), ("user", Some("carol"))],
                    &[("producer_byte_rate", 1.0, false)],
                )],
                false,
            ),
        ),
        (
            "a key twice",
            alter(
                vec![set(
                    &[("user", Some("bob"))],
                    &[
                        ("producer_byte_rate", 1.0, false),
                        ("producer_byte_rate", 2.0, false),
                    ],
                )],
                false,
            ),
        ),
        (
            "no entity",
            alter(vec![set(&[], &[("producer_byte_rate", 1.0, false)])], false),
        ),
        (
            "remove a rate",
            alter(
                vec![set(
                    &[("user", Some("alice"))],
                    &[("consumer_byte_rate", 0.0, true)],
                )],
                false,
            ),
        ),
    ] {
        d.call::<_, AlterClientQuotasResponse>(
            &format!("AlterClientQuotas: {what}"),
            ALTER_CLIENT_QUOTAS,
            &request,
        );
    }
    // One entity, one quota each: (entity type, name, key, value).
    for (what, entity_type, name, key, value) in [
        ("an unknown key", "user", "bob", "no_such_rate", 1.0),
        (
            "a key of another entity type",
            "ip",
            "10.0.0.2",
            "producer_byte_rate",
            1.0,
        ),
        ("a negative rate", "user", "bob", "producer_byte_rate", -5.0),
        (
            "a byte rate that is no whole number",
            "user",
            "bob",
            "producer_byte_rate",
            1.5,
        ),
        (
            "an IP that is no address",
            "ip",
            "not-an-ip",
            "connection_creation_rate",
            1.0,
        ),
        (
            "an unknown entity type",
            "group",
            "g",
            "producer_byte_rate",
            1.0,
        ),
    ] {
        let entry = set(&[(entity_type, Some(name))], &[(key, value, false)]);
        d.call::<_, AlterClientQuotasResponse>(
            &format!("AlterClientQuotas: {what}"),
            ALTER_CLIENT_QUOTAS,
            &alter(vec![entry], false),
        );
    }
    let component = |entity_type: &str, match_type: i8, name: Option<&str>| ComponentData {
        entity_type: entity_type.into(),
        match_type,
        r#match: name.map(str::to_owned),
    };
    let describe = |components, strict| DescribeClientQuotasRequest { components, strict };
    // Kafka's broker learns a committed quota a moment after it answers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let kafka: DescribeClientQuotasResponse = d
            .kafka
            .call(
                DESCRIBE_CLIENT_QUOTAS.0,
                DESCRIBE_CLIENT_QUOTAS.1,
                DESCRIBE_CLIENT_QUOTAS.2,
                &describe(vec![component("user", 0, Some("alice"))], true),
            )
            .expect("DescribeClientQuotas");
        let values = kafka
            .entries
            .iter()
            .flatten()
            .map(|e| e.values.len())
            .sum::<usize>();
        if values == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Kafka: alice's quotas: {kafka:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for (what, request) in [
        (
            "a user, exactly",
            describe(vec![component("user", 0, Some("alice"))], false),
        ),
        (
            "a user, strictly",
            describe(vec![component("user", 0, Some("alice"))], true),
        ),
        (
            "any client id, strictly",
            describe(vec![component("client-id", 2, None)], true),
        ),
        (
            "the default user",
            describe(vec![component("user", 1, None)], false),
        ),
        (
            "the default user, strictly",
            describe(vec![component("user", 1, None)], true),
        ),
        (
            "an IP",
            describe(vec![component("ip", 0, Some("10.0.0.1"))], false),
        ),
        ("every IP", describe(vec![component("ip", 2, None)], true)),
        (
            "an unknown match type",
            describe(vec![component("user", 7, None)], false),
        ),
        (
            "an exact match with no name",
            describe(vec![component("user", 0, None)], false),
        ),
        (
            "an entity type twice",
            describe(
                vec![component("user", 2, None), component("user", 2, None)],
                false,
            ),
        ),
        (
            "an IP beside a user",
            describe(
                vec![component("user", 2, None), component("ip", 2, None)],
                false,
            ),
        ),
    ] {
        d.call::<_, DescribeClientQuotasResponse>(
            &format!("DescribeClientQuotas: {what}"),
            DESCRIBE_CLIENT_QUOTAS,
            &request,
        );
    }

    // No authorizer: every ACL request is refused.
    d.call::<_, DescribeAclsResponse>(
        "DescribeAcls: any",
        DESCRIBE_ACLS,
        &DescribeAclsRequest {
            resource_type_filter: 1,
            resource_name_filter: None,
            pattern_type_filter: 1,
            principal_filter: None,
            host_filter: None,
            operation: 1,
            permission_type: 1,
        },
    );
    d.call::<_, CreateAclsResponse>(
        "CreateAcls: a topic's read",
        CREATE_ACLS,
        &CreateAclsRequest {
            creations: vec![AclCreation {
                resource_type: 2,
                resource_name: "d-log".into(),
                resource_pattern_type: 3,
                principal: "User:alice".into(),
                host: "*".into(),
                operation: 3,
                permission_type: 3,
            }],
        },
    );
    d.call::<_, DeleteAclsResponse>(
        "DeleteAcls: any",
        DELETE_ACLS,
        &DeleteAclsRequest {
            filters: vec![DeleteAclsFilter {
                resource_type_filter: 1,
                resource_name_filter: None,
                pattern_type_filter: 1,
                principal_filter: None,
                host_filter: None,
                operation: 1,
                permission_type: 1,
            }],
        },
    );
}

/// ListConfigResources at v1 (every type, some types, a type it does not
/// know) and at v0 (client metrics only), once the earlier scenarios have
/// created their topics on both brokers.
fn config_resources(d: &mut Diff) {
    for (what, resource_types) in [
        ("every type", vec![]),
        ("topics", vec![2]),
        ("brokers and their loggers", vec![4, 8]),
        ("groups and client metrics", vec![32, 16]),
        ("topics and an unknown type", vec![2, 1]),
    ] {
        d.call::<_, ListConfigResourcesResponse>(
            &format!("ListConfigResources: {what}"),
            LIST_CONFIG_RESOURCES,
            &ListConfigResourcesRequest { resource_types },
        );
    }
    d.call::<_, ListConfigResourcesResponse>(
        "ListConfigResources v0: client metrics",
        (74, 0, 0),
        &ListConfigResourcesRequest::default(),
    );
}

/// DescribeUserScramCredentials where no user has a credential (Kafka's
/// node runs at its own metadata.version, which allows them, but none is
/// created): every user, each named user, and a user named twice.
/// AlterUserScramCredentials is not compared: Tarn answers as Kafka does
/// at metadata.version 3.3-IV3, checked against such a node by
/// tests/python/test_kafka_tools.py.
fn scram_credentials(d: &mut Diff) {
    let users = |names: &[&str]| DescribeUserScramCredentialsRequest {
        users: Some(
            names
                .iter()
                .map(|n| ScramUserName { name: (*n).into() })
                .collect(),
        ),
    };
    for (what, request) in [
        (
            "every user, as null",
            DescribeUserScramCredentialsRequest { users: None },
        ),
        ("every user, as an empty list", users(&[])),
        ("a user without a credential", users(&["alice"])),
        (
            "a user named twice and another",
            users(&["bob", "alice", "bob"]),
        ),
    ] {
        d.call::<_, DescribeUserScramCredentialsResponse>(
            &format!("DescribeUserScramCredentials: {what}"),
            DESCRIBE_USER_SCRAM_CREDENTIALS,
            &request,
        );
    }
}

/// ListOffsets' special timestamps, leader epochs and duplicates, and
/// FindCoordinator's batched and bad keys (after `groups`, so that the
/// offsets topic exists on both).
fn offsets_and_coordinators(d: &mut Diff) {
    let list = |partitions: &[(i32, i64, i32)], isolation_level: i8| ListOffsetsRequest {
        replica_id: -1,
        isolation_level,
        topics: vec![ListOffsetsTopic {
            name: "d-log".into(),
            partitions: partitions
                .iter()
                .map(
                    |&(partition_index, timestamp, current_leader_epoch)| ListOffsetsPartition {
                        partition_index,
                        timestamp,
                        current_leader_epoch,
                        ..Default::default()
                    },
                )
                .collect(),
        }],
        ..Default::default()
    };
    for (what, version, request) in [
        ("earliest local (-4)", 9, list(&[(0, -4, -1)], 0)),
        ("latest tiered (-5)", 9, list(&[(0, -5, -1)], 0)),
        ("an unknown negative timestamp", 9, list(&[(0, -9, -1)], 0)),
        ("latest, read_committed", 7, list(&[(0, -1, -1)], 1)),
        ("the current leader epoch", 7, list(&[(0, -1, 0)], 0)),
        ("a later leader epoch", 7, list(&[(0, -1, 5)], 0)),
        ("a partition twice", 7, list(&[(0, -1, -1), (0, -2, -1)], 0)),
    ] {
        d.call::<_, ListOffsetsResponse>(
            &format!("ListOffsets v{version}: {what}"),
            (LIST_OFFSETS.0, version, LIST_OFFSETS.2),
            &request,
        );
    }
    let batched = |keys: &[&str], key_type: i8| FindCoordinatorRequest {
        key_type,
        coordinator_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        ..Default::default()
    };
    for (what, request) in [
        ("two groups at once", batched(&["d-g", "d-simple"], 0)),
        ("an empty group id", batched(&[""], 0)),
        ("an unknown key type", batched(&["d-g"], 9)),
    ] {
        d.call::<_, FindCoordinatorResponse>(
            &format!("FindCoordinator v4: {what}"),
            (FIND_COORDINATOR.0, 4, FIND_COORDINATOR.2),
            &request,
        );
    }
    d.call::<_, FindCoordinatorResponse>(
        "FindCoordinator v3: an empty group id",
        FIND_COORDINATOR,
        &FindCoordinatorRequest {
            key: String::new(),
            key_type: 0,
            ..Default::default()
        },
    );
}

/// More arguments Kafka refuses on the admin paths of partitions and
/// records, and what a single node says of its producers and leaders.
fn partition_admin_edges(d: &mut Diff) {
    let two_topics = CreatePartitionsRequest {
        topics: vec![
            CreatePartitionsTopic {
                name: "d-new".into(),
                count: 9,
                assignments: None,
            },
            CreatePartitionsTopic {
                name: "d-new".into(),
                count: 9,
                assignments: None,
            },
        ],
        timeout_ms: 30_000,
        validate_only: true,
    };
    d.call::<_, CreatePartitionsResponse>(
        "CreatePartitions: the same topic twice",
        CREATE_PARTITIONS,
        &two_topics,
    );
    d.call::<_, CreatePartitionsResponse>(
        "CreatePartitions: an invalid topic name",
        CREATE_PARTITIONS,
        &create_partitions_request("a/b", 2, true),
    );
    d.call::<_, CreatePartitionsResponse>(
        "CreatePartitions: an internal topic",
        CREATE_PARTITIONS,
        &create_partitions_request("__consumer_offsets", 60, true),
    );
    let mut twice = delete_records_request("d-log", 0, 15);
    let again = twice.topics[0].partitions[0].clone();
    twice.topics[0].partitions.push(again);
    for (what, request) in [
        ("a partition twice", twice),
        ("an offset below -1", delete_records_request("d-log", 0, -5)),
        (
            "a topic that does not exist",
            delete_records_request("d-none", 0, 1),
        ),
    ] {
        d.call::<_, DeleteRecordsResponse>(
            &format!("DeleteRecords: {what}"),
            DELETE_RECORDS,
            &request,
        );
    }
    for (what, request) in [
        (
            "preferred, already the leader",
            elect_leaders(0, "d-log", vec![0]),
        ),
        (
            "unclean, a leader in place",
            elect_leaders(1, "d-log", vec![0]),
        ),
        (
            "a partition that does not exist",
            elect_leaders(0, "d-log", vec![7]),
        ),
        (
            "an unknown election type",
            elect_leaders(5, "d-log", vec![0]),
        ),
    ] {
        d.call::<_, ElectLeadersResponse>(
            &format!("ElectLeaders: {what}"),
            ELECT_LEADERS,
            &request,
        );
    }
    for (what, topic, partition) in [
        ("an idempotent producer's partition", "d-idem", 0),
        ("a partition with no producers", "d-new", 0),
        ("a partition that does not exist", "d-idem", 5),
        ("a topic that does not exist", "d-none", 0),
    ] {
        d.call::<_, DescribeProducersResponse>(
            &format!("DescribeProducers: {what}"),
            DESCRIBE_PRODUCERS,
            &DescribeProducersRequest {
                topics: vec![DescribeProducersTopicRequest {
                    name: topic.into(),
                    partition_indexes: vec![partition],
                }],
            },
        );
    }
}

/// A request that names the same partition or resource twice: Kafka
/// reads most of them as maps (the entry given last counts, and is
/// answered once) and refuses some.
fn duplicates(d: &mut Diff) {
    let mut commit = memberless_commit("d-simple", "d-log", 0, 3);
    let again = OffsetCommitRequestPartition {
        committed_offset: 4,
        ..commit.topics[0].partitions[0].clone()
    };
    commit.topics[0].partitions.push(again);
    d.call::<_, OffsetCommitResponse>("OffsetCommit: a partition twice", OFFSET_COMMIT, &commit);
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch: a partition twice",
        OFFSET_FETCH,
        &OffsetFetchRequest {
            group_id: "d-simple".into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "d-log".into(),
                partition_indexes: vec![0, 0],
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    let mut fetch = fetch_request("d-log", 0, 15, 1 << 20, 0);
    let again = fetch.topics[0].partitions[0].clone();
    fetch.topics[0].partitions.push(again);
    d.call::<_, FetchResponse>("Fetch: a partition twice", FETCH, &fetch);
    let mut epochs = offset_for_leader_epoch("d-log", 0, 0);
    let again = epochs.topics[0].partitions[0].clone();
    epochs.topics[0].partitions.push(again);
    d.call::<_, OffsetForLeaderEpochResponse>(
        "OffsetForLeaderEpoch: a partition twice",
        OFFSET_FOR_LEADER_EPOCH,
        &epochs,
    );
    let mut producers = describe_producers("d-idem", 0);
    producers.topics[0].partition_indexes.push(0);
    d.call::<_, DescribeProducersResponse>(
        "DescribeProducers: a partition twice",
        DESCRIBE_PRODUCERS,
        &producers,
    );
    d.call::<_, ElectLeadersResponse>(
        "ElectLeaders: a partition twice",
        ELECT_LEADERS,
        &elect_leaders(0, "d-log", vec![0, 0]),
    );
    let mut describe = describe_configs_request(2, "d-cfg", Some(&["retention.ms"]), false, false);
    let again = describe.resources[0].clone();
    describe.resources.push(again);
    d.call::<_, DescribeConfigsResponse>(
        "DescribeConfigs: a resource twice",
        DESCRIBE_CONFIGS,
        &describe,
    );
    let set = |value: &str| incremental(2, "d-cfg", &[("retention.ms", OP_SET, Some(value))]);
    d.call::<_, IncrementalAlterConfigsResponse>(
        "IncrementalAlterConfigs: a resource twice",
        INCREMENTAL_ALTER_CONFIGS,
        &IncrementalAlterConfigsRequest {
            resources: vec![set("100000"), set("200000")],
            validate_only: true,
        },
    );
    // Not compared: a legacy AlterConfigs naming a resource twice, which
    // Kafka 4.4 left unanswered for a minute here.
    let mut list = list_offsets_request("d-log", 0, -1);
    let again = list.topics[0].clone();
    list.topics.push(again);
    d.call::<_, ListOffsetsResponse>("ListOffsets: a topic twice", LIST_OFFSETS, &list);
}

/// One IncrementalAlterConfigs resource: `(key, op, value)` each.
fn incremental(
    resource_type: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
) -> IncrementalAlterConfigsResource {
    IncrementalAlterConfigsResource {
        resource_type,
        resource_name: name.into(),
        configs: ops
            .iter()
            .map(|(key, op, value)| IncrementalAlterableConfig {
                name: (*key).into(),
                config_operation: *op,
                value: value.map(str::to_owned),
            })
            .collect(),
    }
}

/// One AlterConfigs resource: the whole set of its dynamic configs.
fn whole(resource_type: i8, name: &str, configs: &[(&str, Option<&str>)]) -> AlterConfigsResource {
    AlterConfigsResource {
        resource_type,
        resource_name: name.into(),
        configs: configs
            .iter()
            .map(|(key, value)| AlterableConfig {
                name: (*key).into(),
                value: value.map(str::to_owned),
            })
            .collect(),
    }
}

/// Waits until both brokers describe `key` of `resource_type`/`name` as
/// `value` (Kafka's broker applies a committed change a moment after the
/// controller answers).
fn wait_config(d: &mut Diff, resource_type: i8, name: &str, key: &str, value: Option<&str>) {
    let request = describe_configs_request(resource_type, name, Some(&[key]), false, false);
    for (broker, client) in [("Tarn", &mut d.tarn), ("Kafka", &mut d.kafka)] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let answer: DescribeConfigsResponse = client
                .call(
                    DESCRIBE_CONFIGS.0,
                    DESCRIBE_CONFIGS.1,
                    DESCRIBE_CONFIGS.2,
                    &request,
                )
                .expect("DescribeConfigs");
            let now = answer
                .results
                .first()
                .and_then(|r| r.configs.iter().find(|c| c.name == key))
                .map(|c| c.value.clone());
            if now.as_ref().is_some_and(|v| v.as_deref() == value) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{broker}: {name} {key} is not {value:?}: {answer:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Every path of IncrementalAlterConfigs and AlterConfigs and their
/// errors, on a topic, the broker and the cluster default, each change
/// described back (with synonyms) once both brokers apply it.
/// Broker loggers (resource type 8, KIP-412): the loggers differ (Kafka's
/// are Java classes, Tarn's its modules), so what is compared is `root`,
/// which both have, and every refusal.
fn broker_loggers(d: &mut Diff) {
    const LOGGER: i8 = 8;
    for (what, name) in [
        ("an empty broker id", ""),
        ("another broker's id", "2"),
        ("a broker id that is no number", "one"),
    ] {
        d.call::<_, DescribeConfigsResponse>(
            &format!("DescribeConfigs of the broker loggers: {what}"),
            DESCRIBE_CONFIGS,
            &describe_configs_request(LOGGER, name, None, false, false),
        );
    }
    let alter = |name: &str, ops: &[(&str, i8, Option<&str>)], validate_only| {
        IncrementalAlterConfigsRequest {
            resources: vec![incremental(LOGGER, name, ops)],
            validate_only,
        }
    };
    let describe_root = |d: &mut Diff, when: &str| {
        d.call::<_, DescribeConfigsResponse>(
            &format!("DescribeConfigs of the root logger {when}"),
            DESCRIBE_CONFIGS,
            &describe_configs_request(LOGGER, "1", Some(&["root"]), true, true),
        );
    };
    for (what, request) in [
        (
            "SET root to INFO",
            alter("1", &[("root", 0, Some("INFO"))], false),
        ),
        (
            "SET root to WARN, validate only",
            alter("1", &[("root", 0, Some("WARN"))], true),
        ),
    ] {
        d.call::<_, IncrementalAlterConfigsResponse>(
            &format!("IncrementalAlterConfigs of the broker loggers: {what}"),
            INCREMENTAL_ALTER_CONFIGS,
            &request,
        );
    }
    describe_root(d, "after SET and a validate-only SET");
    for (what, request) in [
        (
            "another broker's id",
            alter("2", &[("root", 0, Some("INFO"))], false),
        ),
        (
            "an empty broker id",
            alter("", &[("root", 0, Some("INFO"))], false),
        ),
        (
            "a level in lower case",
            alter("1", &[("root", 0, Some("debug"))], false),
        ),
        (
            "a level that does not exist",
            alter("1", &[("root", 0, Some("LOUD"))], false),
        ),
        (
            "a logger that does not exist",
            alter("1", &[("no.such.logger", 0, Some("INFO"))], false),
        ),
        ("a null level", alter("1", &[("root", 0, None)], false)),
        ("DELETE root", alter("1", &[("root", 1, None)], false)),
        (
            "DELETE a logger that does not exist",
            alter("1", &[("no.such.logger", 1, None)], false),
        ),
        ("APPEND", alter("1", &[("root", 2, Some("INFO"))], false)),
        ("SUBTRACT", alter("1", &[("root", 3, Some("INFO"))], false)),
        (
            "a valid SET beside a refused one",
            alter(
                "1",
                &[("root", 0, Some("WARN")), ("root", 2, Some("INFO"))],
                false,
            ),
        ),
    ] {
        d.call::<_, IncrementalAlterConfigsResponse>(
            &format!("IncrementalAlterConfigs of the broker loggers: {what}"),
            INCREMENTAL_ALTER_CONFIGS,
            &request,
        );
    }
    describe_root(d, "after refused changes");
    d.call::<_, AlterConfigsResponse>(
        "AlterConfigs of the broker loggers",
        ALTER_CONFIGS,
        &AlterConfigsRequest {
            resources: vec![whole(LOGGER, "1", &[("root", Some("INFO"))])],
            validate_only: false,
        },
    );
}

fn alter_configs(d: &mut Diff) {
    d.call::<_, CreateTopicsResponse>(
        "setup: topic d-alter",
        CREATE_TOPICS,
        &create(vec![topic("d-alter", 1, 1, &[])], false),
    );
    d.wait_served("d-alter", 1);
    let topic_keys = Some(
        &[
            "retention.ms",
            "segment.bytes",
            "cleanup.policy",
            "max.message.bytes",
        ][..],
    );
    let describe_topic = |d: &mut Diff, when: &str| {
        d.call::<_, DescribeConfigsResponse>(
            &format!("DescribeConfigs of d-alter {when}"),
            DESCRIBE_CONFIGS,
            &describe_configs_request(2, "d-alter", topic_keys, true, false),
        );
    };
    let incremental_request = |resources, validate_only| IncrementalAlterConfigsRequest {
        resources,
        validate_only,
    };
    let t = |ops: &[(&str, i8, Option<&str>)]| vec![incremental(2, "d-alter", ops)];
    for (what, resources, validate_only) in [
        (
            "SET two keys, validate only",
            t(&[
                ("retention.ms", OP_SET, Some("5000")),
                ("segment.bytes", OP_SET, Some("2000000")),
            ]),
            true,
        ),
        (
            "SET two keys",
            t(&[
                ("retention.ms", OP_SET, Some("5000")),
                ("segment.bytes", OP_SET, Some("2000000")),
            ]),
            false,
        ),
        (
            "the same key twice",
            t(&[
                ("retention.ms", OP_SET, Some("6000")),
                ("retention.ms", OP_DELETE, None),
            ]),
            false,
        ),
        (
            "a topic that does not exist",
            vec![incremental(
                2,
                "d-alter-none",
                &[("retention.ms", OP_SET, Some("1"))],
            )],
            false,
        ),
        (
            "a topic name that is not valid",
            vec![incremental(
                2,
                "a/b",
                &[("retention.ms", OP_SET, Some("1"))],
            )],
            false,
        ),
        (
            "an unknown resource type",
            vec![incremental(
                99,
                "d-alter",
                &[("retention.ms", OP_SET, Some("1"))],
            )],
            false,
        ),
        (
            "a good and a bad resource in one request",
            vec![
                incremental(
                    2,
                    "d-alter",
                    &[("max.message.bytes", OP_SET, Some("500000"))],
                ),
                incremental(2, "d-alter", &[("retention.ms", OP_SET, Some("soon"))]),
            ],
            false,
        ),
    ] {
        d.call::<_, IncrementalAlterConfigsResponse>(
            &format!("IncrementalAlterConfigs of a topic: {what}"),
            INCREMENTAL_ALTER_CONFIGS,
            &incremental_request(resources, validate_only),
        );
    }
    // One key each: (key, operation, value), in order.
    for (what, key, op, value) in [
        ("SET an unknown key", "no.such.key", OP_SET, Some("1")),
        (
            "SET a value that is no number",
            "retention.ms",
            OP_SET,
            Some("soon"),
        ),
        (
            "SET a value below the minimum",
            "segment.bytes",
            OP_SET,
            Some("1"),
        ),
        ("SET with no value", "retention.ms", OP_SET, None),
        ("an unknown operation", "retention.ms", 7, Some("6000")),
        (
            "APPEND to a key that is no list",
            "retention.ms",
            OP_APPEND,
            Some("1"),
        ),
        (
            "SUBTRACT from a key that is no list",
            "retention.ms",
            OP_SUBTRACT,
            Some("1"),
        ),
        (
            "APPEND compact to cleanup.policy",
            "cleanup.policy",
            OP_APPEND,
            Some("compact"),
        ),
        (
            "APPEND a value cleanup.policy already has",
            "cleanup.policy",
            OP_APPEND,
            Some("compact"),
        ),
        (
            "APPEND a value cleanup.policy cannot have",
            "cleanup.policy",
            OP_APPEND,
            Some("forever"),
        ),
        (
            "DELETE a key never set",
            "max.message.bytes",
            OP_DELETE,
            None,
        ),
    ] {
        d.call::<_, IncrementalAlterConfigsResponse>(
            &format!("IncrementalAlterConfigs of a topic: {what}"),
            INCREMENTAL_ALTER_CONFIGS,
            &incremental_request(t(&[(key, op, value)]), false),
        );
    }
    wait_config(d, 2, "d-alter", "cleanup.policy", Some("delete,compact"));
    describe_topic(d, "after SET and APPEND");
    d.call::<_, IncrementalAlterConfigsResponse>(
        "IncrementalAlterConfigs of a topic: SUBTRACT delete from cleanup.policy, DELETE retention.ms",
        INCREMENTAL_ALTER_CONFIGS,
        &incremental_request(
            t(&[
                ("cleanup.policy", OP_SUBTRACT, Some("delete")),
                ("retention.ms", OP_DELETE, None),
            ]),
            false,
        ),
    );
    wait_config(d, 2, "d-alter", "cleanup.policy", Some("compact"));
    describe_topic(d, "after SUBTRACT and DELETE");

    // The broker and the cluster default ("").
    for (what, broker, key, value) in [
        (
            "a dynamic key of this broker",
            "1",
            "log.retention.ms",
            "7200000",
        ),
        ("a key that needs a restart", "1", "num.partitions", "3"),
        (
            "log.retention.hours, not dynamic",
            "1",
            "log.retention.hours",
            "3",
        ),
        ("a broker that does not exist", "7", "log.retention.ms", "1"),
        (
            "a broker name that is no number",
            "one",
            "log.retention.ms",
            "1",
        ),
        ("the cluster default", "", "log.segment.bytes", "4000000"),
        (
            "the cluster default, a bad value",
            "",
            "log.segment.bytes",
            "big",
        ),
    ] {
        let resource = incremental(4, broker, &[(key, OP_SET, Some(value))]);
        d.call::<_, IncrementalAlterConfigsResponse>(
            &format!("IncrementalAlterConfigs of the broker: {what}"),
            INCREMENTAL_ALTER_CONFIGS,
            &incremental_request(vec![resource], false),
        );
    }
    wait_config(d, 4, "1", "log.retention.ms", Some("7200000"));
    wait_config(d, 4, "", "log.segment.bytes", Some("4000000"));
    // Not log.retention.hours: once any dynamic broker config changed,
    // Kafka 4.4 reports its value as the default (168) while its first
    // synonym still names the static 100 as the source; the describe before
    // any change compares it.
    let broker_keys = Some(&["log.retention.ms", "log.segment.bytes"][..]);
    d.call::<_, DescribeConfigsResponse>(
        "DescribeConfigs of the broker after its changes",
        DESCRIBE_CONFIGS,
        &describe_configs_request(4, "1", broker_keys, true, false),
    );
    d.call::<_, DescribeConfigsResponse>(
        "DescribeConfigs of the cluster default",
        DESCRIBE_CONFIGS,
        &describe_configs_request(4, "", None, true, false),
    );
    describe_topic(d, "after the broker's changes");

    // AlterConfigs replaces a resource's whole set of dynamic configs.
    let whole_request = |resources, validate_only| AlterConfigsRequest {
        resources,
        validate_only,
    };
    // (resource type, name, its whole set of dynamic configs). Kafka 4.4
    // (with eligible leader replicas, KIP-966) refuses to drop the
    // cluster-wide min.insync.replicas it writes at start-up, so the set
    // replacing the cluster default's keeps it.
    for (what, resource_type, name, key, value, validate_only) in [
        (
            "a topic, validate only",
            2,
            "d-alter",
            "retention.ms",
            Some("9000"),
            true,
        ),
        (
            "a topic's whole set",
            2,
            "d-alter",
            "retention.ms",
            Some("9000"),
            false,
        ),
        (
            "a topic, an unknown key",
            2,
            "d-alter",
            "no.such.key",
            Some("1"),
            false,
        ),
        (
            "a topic, a bad value",
            2,
            "d-alter",
            "segment.bytes",
            Some("many"),
            false,
        ),
        (
            "a topic, no value",
            2,
            "d-alter",
            "retention.ms",
            None,
            false,
        ),
        (
            "a topic that does not exist",
            2,
            "d-alter-none",
            "retention.ms",
            Some("1"),
            false,
        ),
        (
            "the broker's whole set",
            4,
            "1",
            "log.cleaner.delete.retention.ms",
            Some("1000"),
            false,
        ),
        (
            "the broker, a key that needs a restart",
            4,
            "1",
            "num.partitions",
            Some("2"),
            false,
        ),
        (
            "the cluster default's whole set",
            4,
            "",
            "min.insync.replicas",
            Some("1"),
            false,
        ),
    ] {
        d.call::<_, AlterConfigsResponse>(
            &format!("AlterConfigs: {what}"),
            ALTER_CONFIGS,
            &whole_request(
                vec![whole(resource_type, name, &[(key, value)])],
                validate_only,
            ),
        );
    }
    wait_config(d, 2, "d-alter", "cleanup.policy", Some("delete"));
    wait_config(d, 4, "1", "log.retention.ms", None);
    wait_config(d, 2, "d-alter", "segment.bytes", Some("1073741824"));
    describe_topic(d, "after AlterConfigs");
    d.call::<_, DescribeConfigsResponse>(
        "DescribeConfigs of the broker after AlterConfigs",
        DESCRIBE_CONFIGS,
        &describe_configs_request(
            4,
            "1",
            Some(&["log.retention.ms", "log.cleaner.delete.retention.ms"][..]),
            true,
            false,
        ),
    );
    d.call::<_, AlterConfigsResponse>(
        "AlterConfigs: the broker's whole set, emptied",
        ALTER_CONFIGS,
        &whole_request(vec![whole(4, "1", &[])], false),
    );
}

/// Deleting topics, by name and by id, and the admin reads of topics
/// kafka-topics.sh and the Admin client use (DescribeTopicPartitions with
/// its paging, DescribeLogDirs).
fn topic_admin(d: &mut Diff) {
    let (tarn, kafka) = d.call::<_, CreateTopicsResponse>(
        "setup: topics d-del, d-del2 and d-del3",
        CREATE_TOPICS,
        &create(
            vec![
                topic("d-del", 3, 1, &[]),
                topic("d-del2", 1, 1, &[]),
                topic("d-del3", 1, 1, &[]),
            ],
            false,
        ),
    );
    let ids = [tarn.topics[1].topic_id, kafka.topics[1].topic_id];
    for (name, partitions) in [("d-del", 3), ("d-del2", 1), ("d-del3", 1)] {
        d.wait_served(name, partitions);
    }
    for (what, request) in [
        (
            "two topics",
            describe_partitions(&["d-del", "d-del2"], 2000, None),
        ),
        (
            "a page of two partitions",
            describe_partitions(&["d-del", "d-del2"], 2, None),
        ),
        (
            "the page after it",
            describe_partitions(&["d-del", "d-del2"], 2, Some(("d-del", 2))),
        ),
        (
            "a cursor on a topic not asked for",
            describe_partitions(&["d-del2"], 2000, Some(("d-del", 0))),
        ),
        (
            "a cursor past the topic's partitions",
            describe_partitions(&["d-del", "d-del2"], 2000, Some(("d-del", 7))),
        ),
        (
            "a topic that does not exist",
            describe_partitions(&["d-none"], 2000, None),
        ),
        (
            "a topic name that is not valid",
            describe_partitions(&["a/b"], 2000, None),
        ),
    ] {
        d.call::<_, DescribeTopicPartitionsResponse>(
            &format!("DescribeTopicPartitions: {what}"),
            DESCRIBE_TOPIC_PARTITIONS,
            &request,
        );
    }
    let log_dirs = |topic: &str, partitions: &[i32]| DescribeLogDirsRequest {
        topics: Some(vec![DescribableLogDirTopic {
            topic: topic.into(),
            partitions: partitions.to_vec(),
        }]),
    };
    for (what, request) in [
        ("a topic's partitions", log_dirs("d-del", &[0, 1, 2])),
        ("a partition that does not exist", log_dirs("d-del", &[5])),
        ("a topic that does not exist", log_dirs("d-none", &[0])),
    ] {
        d.call::<_, DescribeLogDirsResponse>(
            &format!("DescribeLogDirs: {what}"),
            DESCRIBE_LOG_DIRS,
            &request,
        );
    }
    let by_name = |names: &[&str]| DeleteTopicsRequest {
        topics: names
            .iter()
            .map(|n| DeleteTopicState {
                name: Some((*n).to_owned()),
                topic_id: Uuid::default(),
            })
            .collect(),
        timeout_ms: 30_000,
        ..Default::default()
    };
    for (what, request) in [
        ("a topic that does not exist", by_name(&["d-none"])),
        ("a topic name that is not valid", by_name(&["a/b"])),
        ("the same topic twice", by_name(&["d-del", "d-del"])),
        (
            "a name twice beside a good one",
            by_name(&["d-none", "d-del3", "d-none"]),
        ),
        (
            "neither a name nor an id",
            DeleteTopicsRequest {
                topics: vec![DeleteTopicState {
                    name: None,
                    topic_id: Uuid::default(),
                }],
                timeout_ms: 30_000,
                ..Default::default()
            },
        ),
        (
            "both a name and an id",
            DeleteTopicsRequest {
                topics: vec![DeleteTopicState {
                    name: Some("d-del".into()),
                    topic_id: Uuid([7; 16]),
                }],
                timeout_ms: 30_000,
                ..Default::default()
            },
        ),
        ("an internal topic", by_name(&["__consumer_offsets"])),
        (
            "an id that no topic has",
            DeleteTopicsRequest {
                topics: vec![DeleteTopicState {
                    name: None,
                    topic_id: Uuid([7; 16]),
                }],
                timeout_ms: 30_000,
                ..Default::default()
            },
        ),
        ("a topic", by_name(&["d-del"])),
    ] {
        d.call::<_, DeleteTopicsResponse>(
            &format!("DeleteTopics: {what}"),
            DELETE_TOPICS,
            &request,
        );
    }
    d.call_each::<_, DeleteTopicsResponse>("DeleteTopics: a topic by id", DELETE_TOPICS, |b| {
        DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: None,
                topic_id: ids[b],
            }],
            timeout_ms: 30_000,
            ..Default::default()
        }
    });
    for name in ["d-del", "d-del2", "d-del3"] {
        d.wait_gone(name);
    }
    d.call::<_, MetadataResponse>(
        "Metadata: deleted topics",
        METADATA,
        &metadata_request(&["d-del", "d-del2"], false),
    );
    d.call::<_, DeleteTopicsResponse>(
        "DeleteTopics: a topic deleted before",
        DELETE_TOPICS,
        &by_name(&["d-del"]),
    );
    d.call::<_, CreateTopicsResponse>(
        "CreateTopics: a deleted topic's name again",
        CREATE_TOPICS,
        &create(vec![topic("d-del", 1, 1, &[])], false),
    );
}

fn create_topics(d: &mut Diff) {
    let cases: Vec<(&str, CreatableTopic)> = vec![
        ("a new topic", topic("d-new", 3, 1, &[])),
        ("an existing topic", topic("d-new", 1, 1, &[])),
        ("a name with a slash", topic("bad/name", 1, 1, &[])),
        (
            "a name of 250 characters",
            topic(&"x".repeat(250), 1, 1, &[]),
        ),
        ("the name ..", topic("..", 1, 1, &[])),
        ("zero partitions", topic("d-zero", 0, 1, &[])),
        ("replication factor 0", topic("d-rf0", 1, 0, &[])),
        ("more replicas than brokers", topic("d-rf2", 1, 2, &[])),
        (
            "a config that is not a number",
            topic("d-badcfg", 1, 1, &[("retention.ms", "soon")]),
        ),
        (
            "an unknown config",
            topic("d-unknown", 1, 1, &[("no.such.config", "1")]),
        ),
        ("broker defaults (-1, -1)", topic("d-defaults", -1, -1, &[])),
        (
            "a valid config",
            topic("d-cfg", 1, 1, &[("cleanup.policy", "compact")]),
        ),
    ];
    for (what, t) in cases {
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics: {what}"),
            CREATE_TOPICS,
            &create(vec![t], false),
        );
    }
    d.call::<_, CreateTopicsResponse>(
        "CreateTopics: validate_only",
        CREATE_TOPICS,
        &create(vec![topic("d-validate", 2, 1, &[])], true),
    );
    d.call::<_, CreateTopicsResponse>(
        "CreateTopics: one name twice in a request",
        CREATE_TOPICS,
        &create(
            vec![topic("d-twice", 1, 1, &[]), topic("d-twice", 1, 1, &[])],
            false,
        ),
    );
    let with_assignment = CreatableTopic {
        assignments: vec![CreatableReplicaAssignment {
            partition_index: 0,
            broker_ids: vec![1],
        }],
        ..topic("d-assigned", 1, 1, &[])
    };
    d.call::<_, CreateTopicsResponse>(
        "CreateTopics: assignments and a partition count",
        CREATE_TOPICS,
        &create(vec![with_assignment], false),
    );
    let assigned = |name: &str, assignments: &[(i32, &[i32])], replication: i16| CreatableTopic {
        assignments: assignments
            .iter()
            .map(|(partition_index, broker_ids)| CreatableReplicaAssignment {
                partition_index: *partition_index,
                broker_ids: broker_ids.to_vec(),
            })
            .collect(),
        ..topic(name, -1, replication, &[])
    };
    let cases = [
        (
            "an explicit assignment",
            assigned("d-explicit", &[(1, &[1]), (0, &[1])], -1),
        ),
        (
            "an assignment naming an unregistered broker",
            assigned("d-unregistered", &[(0, &[1, 7])], -1),
        ),
        (
            "an assignment naming a broker twice",
            assigned("d-twice-broker", &[(0, &[1, 1])], -1),
        ),
        (
            "an assignment with an empty replica list",
            assigned("d-empty-replicas", &[(0, &[])], -1),
        ),
        (
            "an assignment skipping a partition id",
            assigned("d-gap", &[(0, &[1]), (2, &[1])], -1),
        ),
        (
            "an assignment giving a partition twice",
            assigned("d-dup-partition", &[(0, &[1]), (0, &[1])], -1),
        ),
        (
            "an assignment and a replication factor",
            assigned("d-assigned-rf", &[(0, &[1])], 1),
        ),
    ];
    for (what, t) in cases {
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics: {what}"),
            CREATE_TOPICS,
            &create(vec![t], false),
        );
    }
    d.wait_served("d-new", 3);
    d.wait_served("d-cfg", 1);
    d.wait_served("d-explicit", 2);
}

fn metadata(d: &mut Diff) {
    d.call::<_, MetadataResponse>(
        "Metadata: existing topics",
        METADATA,
        &metadata_request(&["d-new", "d-cfg"], false),
    );
    d.call::<_, MetadataResponse>(
        "Metadata: unknown topic, no auto-creation",
        METADATA,
        &metadata_request(&["d-missing"], false),
    );
    d.call::<_, MetadataResponse>(
        "Metadata: an invalid name",
        METADATA,
        &metadata_request(&["bad/name"], true),
    );
    d.call::<_, MetadataResponse>(
        "Metadata: a topic that validate_only did not create",
        METADATA,
        &metadata_request(&["d-validate"], false),
    );
    d.call::<_, MetadataResponse>(
        "Metadata: no topics",
        METADATA,
        &metadata_request(&[], false),
    );
    d.call::<_, MetadataResponse>(
        "Metadata: every topic",
        METADATA,
        &MetadataRequest {
            topics: None,
            allow_auto_topic_creation: false,
            ..Default::default()
        },
    );
    d.call::<_, MetadataResponse>(
        "Metadata: a topic twice",
        METADATA,
        &metadata_request(&["d-new", "d-new"], false),
    );
    d.call::<_, MetadataResponse>(
        "Metadata: with the topics' authorized operations",
        METADATA,
        &MetadataRequest {
            include_topic_authorized_operations: true,
            ..metadata_request(&["d-new", "d-missing"], false)
        },
    );
    let ids = d.topic_ids("d-cfg");
    d.call_each::<_, MetadataResponse>("Metadata: a topic by id", METADATA, |b| MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            topic_id: ids[b],
            name: None,
        }]),
        allow_auto_topic_creation: false,
        ..Default::default()
    });
    d.call::<_, MetadataResponse>(
        "Metadata: an id no topic has",
        METADATA,
        &MetadataRequest {
            topics: Some(vec![MetadataRequestTopic {
                topic_id: Uuid([7; 16]),
                name: None,
            }]),
            allow_auto_topic_creation: false,
            ..Default::default()
        },
    );
    d.call::<_, MetadataResponse>(
        "Metadata: a new topic, auto-created",
        METADATA,
        &metadata_request(&["d-auto"], true),
    );
    d.wait_served("d-auto", 1);
    d.call::<_, MetadataResponse>(
        "Metadata: the auto-created topic",
        METADATA,
        &metadata_request(&["d-auto"], false),
    );
}

/// `request` naming its topics by `id` instead (Produce v13+).
/// What Produce refuses, record by record and request by request, on
/// topics with configs that make records invalid.
fn produce_errors(d: &mut Diff) {
    d.call::<_, CreateTopicsResponse>(
        "setup: topics d-perr, d-compact, d-small and d-zstd",
        CREATE_TOPICS,
        &create(
            vec![
                topic("d-perr", 1, 1, &[]),
                topic("d-compact", 1, 1, &[("cleanup.policy", "compact")]),
                topic("d-small", 1, 1, &[("max.message.bytes", "200")]),
                topic("d-zstd", 1, 1, &[("compression.type", "zstd")]),
            ],
            false,
        ),
    );
    for name in ["d-perr", "d-compact", "d-small", "d-zstd"] {
        d.wait_served(name, 1);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64;
    let keyed = |key: Option<&[u8]>| {
        Bytes::from(
            RecordBatchBuilder::new()
                .record(1_000, Some(b"k"), Some(b"v"))
                .record(1_001, key, Some(b"v"))
                .build(),
        )
    };
    let corrupt = {
        let mut bytes = batch(2, 1_000).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        Bytes::from(bytes)
    };
    let two_batches = {
        let mut bytes = batch(2, 1_000).to_vec();
        bytes.extend_from_slice(&batch(3, 2_000));
        Bytes::from(bytes)
    };
    let transactional = Bytes::from(
        RecordBatchBuilder::new()
            .transactional(true)
            .record(1_000, Some(b"k"), Some(b"v"))
            .build(),
    );
    let with_acks = |acks: i16| ProduceRequest {
        acks,
        ..produce_request("d-perr", 0, batch(1, 1_000))
    };
    let twice = {
        let mut request = produce_request("d-perr", 0, batch(1, 1_000));
        let again = request.topic_data[0].partition_data[0].clone();
        request.topic_data[0].partition_data.push(again);
        request
    };
    for (what, request) in [
        ("acks=1", with_acks(1)),
        ("acks=2", with_acks(2)),
        ("acks=-2", with_acks(-2)),
        (
            "a null key on a compacted topic",
            produce_request("d-compact", 0, keyed(None)),
        ),
        (
            "keys on a compacted topic",
            produce_request("d-compact", 0, keyed(Some(b"k2"))),
        ),
        (
            "a batch over max.message.bytes",
            produce_request("d-small", 0, batch(20, 1_000)),
        ),
        (
            "a batch whose CRC fails",
            produce_request("d-perr", 0, corrupt),
        ),
        (
            "two batches in one partition",
            produce_request("d-perr", 0, two_batches),
        ),
        (
            "a record two hours ahead of the broker's clock",
            produce_request("d-perr", 0, batch(1, now + 2 * 3_600_000)),
        ),
        (
            "a transactional batch without a producer id",
            produce_request("d-perr", 0, transactional),
        ),
        ("no bytes", produce_request("d-perr", 0, Bytes::new())),
        (
            "bytes that are no batch",
            produce_request("d-perr", 0, Bytes::from_static(&[1, 2, 3, 4, 5])),
        ),
        ("a partition twice", twice),
        (
            "an internal topic not made yet",
            produce_request("__consumer_offsets", 0, batch(1, 1_000)),
        ),
    ] {
        d.call::<_, ProduceResponse>(&format!("Produce: {what}"), PRODUCE, &request);
    }
    let zstd = Bytes::from(
        RecordBatchBuilder::new()
            .compression(tarn_protocol::record_batch::Compression::Zstd)
            .record(1_000, Some(b"k"), Some(b"v"))
            .build(),
    );
    for (what, version) in [("v6", 6), ("v7", 7)] {
        d.call::<_, ProduceResponse>(
            &format!("Produce {what}: a zstd batch"),
            (PRODUCE.0, version, PRODUCE.2),
            &produce_request("d-perr", 0, zstd.clone()),
        );
    }
    d.call::<_, ProduceResponse>(
        "Produce: to a zstd topic",
        PRODUCE,
        &produce_request("d-zstd", 0, batch(2, 1_000)),
    );
    for (what, version) in [("v9", 9), ("v10", 10)] {
        d.call::<_, FetchResponse>(
            &format!("Fetch {what}: a zstd topic"),
            (FETCH.0, version, FETCH.2),
            &fetch_request("d-zstd", 0, 0, 1 << 20, 0),
        );
    }
    d.call::<_, ListOffsetsResponse>(
        "ListOffsets: d-perr's end after the errors",
        LIST_OFFSETS,
        &list_offsets_request("d-perr", 0, -1),
    );
}

fn by_topic_id(mut request: ProduceRequest, id: Uuid) -> ProduceRequest {
    for topic in &mut request.topic_data {
        topic.name.clear();
        topic.topic_id = id;
    }
    request
}

fn produce_list_offsets_and_fetch(d: &mut Diff) {
    d.setup_topic("d-log", 1);
    // The first batch at v9, the second at v12 (the same request), the
    // third at v13, which names the topic by each broker's own id.
    d.call::<_, ProduceResponse>(
        "Produce: batch 0 of 5 records",
        PRODUCE,
        &produce_request("d-log", 0, batch(5, 1_000)),
    );
    d.call::<_, ProduceResponse>(
        "Produce v12: batch 1 of 5 records",
        PRODUCE_V12,
        &produce_request("d-log", 0, batch(5, 2_000)),
    );
    let ids = d.topic_ids("d-log");
    d.call_each::<_, ProduceResponse>(
        "Produce v13: batch 2 of 5 records, the topic named by its id",
        PRODUCE_V13,
        |broker| by_topic_id(produce_request("d-log", 0, batch(5, 3_000)), ids[broker]),
    );
    d.call::<_, ProduceResponse>(
        "Produce: to a partition that does not exist",
        PRODUCE,
        &produce_request("d-log", 7, batch(1, 1_000)),
    );
    d.call_each::<_, ProduceResponse>(
        "Produce v13: to a partition that does not exist",
        PRODUCE_V13,
        |broker| by_topic_id(produce_request("d-log", 7, batch(1, 1_000)), ids[broker]),
    );
    d.call::<_, ProduceResponse>(
        "Produce v13: a topic id neither broker knows",
        PRODUCE_V13,
        &by_topic_id(produce_request("d-log", 0, batch(1, 1_000)), Uuid([7; 16])),
    );
    d.call::<_, ProduceResponse>(
        "Produce v13: the zero topic id",
        PRODUCE_V13,
        &by_topic_id(produce_request("d-log", 0, batch(1, 1_000)), Uuid::ZERO),
    );
    for (what, timestamp) in [
        ("earliest", -2),
        ("latest", -1),
        ("max timestamp", -3),
        ("before the first record", 10),
        ("inside the second batch", 2_015),
        ("after the last record", 9_999),
    ] {
        d.call::<_, ListOffsetsResponse>(
            &format!("ListOffsets: {what}"),
            LIST_OFFSETS,
            &list_offsets_request("d-log", 0, timestamp),
        );
    }
    d.call::<_, ListOffsetsResponse>(
        "ListOffsets: a partition that does not exist",
        LIST_OFFSETS,
        &list_offsets_request("d-log", 3, -1),
    );
    for (what, offset, max_bytes, isolation) in [
        ("from the start", 0, 1 << 20, 0),
        ("from inside a batch", 7, 1 << 20, 0),
        ("max bytes smaller than a batch", 0, 10, 0),
        ("read_committed", 0, 1 << 20, 1),
        ("at the log end", 15, 1 << 20, 0),
        ("past the log end", 16, 1 << 20, 0),
    ] {
        d.call::<_, FetchResponse>(
            &format!("Fetch: {what}"),
            FETCH,
            &fetch_request("d-log", 0, offset, max_bytes, isolation),
        );
    }
    d.call::<_, FetchResponse>(
        "Fetch: a partition that does not exist",
        FETCH,
        &fetch_request("d-log", 5, 0, 1 << 20, 0),
    );
    d.call::<_, FetchResponse>(
        "Fetch: a topic that does not exist",
        FETCH,
        &fetch_request("d-none", 0, 0, 1 << 20, 0),
    );
    // v18, by each broker's topic id, with the high watermark field a
    // replica would send (a consumer's fetch may carry it too).
    let by_id = |id: Uuid, high_watermark: i64| {
        let mut request = fetch_request("", 0, 5, 1 << 20, 0);
        request.topics[0].topic_id = id;
        request.topics[0].partitions[0].high_watermark = high_watermark;
        request
    };
    d.call_each::<_, FetchResponse>("Fetch v18: by topic id", FETCH_V18, |broker| {
        by_id(ids[broker], i64::MAX)
    });
    d.call_each::<_, FetchResponse>(
        "Fetch v18: by topic id, with a high watermark",
        FETCH_V18,
        |broker| by_id(ids[broker], 3),
    );
    d.call::<_, FetchResponse>(
        "Fetch v18: a topic id neither broker knows",
        FETCH_V18,
        &by_id(Uuid([7; 16]), i64::MAX),
    );
}

fn create_partitions_request(
    topic: &str,
    count: i32,
    validate_only: bool,
) -> CreatePartitionsRequest {
    CreatePartitionsRequest {
        topics: vec![CreatePartitionsTopic {
            name: topic.into(),
            count,
            assignments: None,
        }],
        timeout_ms: 30_000,
        validate_only,
    }
}

fn delete_records_and_create_partitions(d: &mut Diff) {
    for (what, partition, offset) in [
        ("to offset 3", 0, 3),
        ("to an offset below the log start", 0, 1),
        ("past the high watermark", 0, 99),
        ("to the high watermark (-1)", 0, -1),
        ("of a partition that does not exist", 4, 0),
    ] {
        d.call::<_, DeleteRecordsResponse>(
            &format!("DeleteRecords: {what}"),
            DELETE_RECORDS,
            &delete_records_request("d-log", partition, offset),
        );
    }
    d.call::<_, ListOffsetsResponse>(
        "ListOffsets: earliest after DeleteRecords",
        LIST_OFFSETS,
        &list_offsets_request("d-log", 0, -2),
    );
    for (what, topic, count, validate_only) in [
        ("fewer partitions", "d-new", 2, false),
        ("the same count", "d-new", 3, false),
        ("validate_only", "d-new", 6, true),
        ("more partitions", "d-new", 5, false),
        ("an unknown topic", "d-none", 2, false),
    ] {
        d.call::<_, CreatePartitionsResponse>(
            &format!("CreatePartitions: {what}"),
            CREATE_PARTITIONS,
            &create_partitions_request(topic, count, validate_only),
        );
    }
}

/// A batch from an idempotent producer.
fn idempotent_batch(producer_id: i64, epoch: i16, sequence: i32, records: usize) -> Bytes {
    let mut builder = RecordBatchBuilder::new().producer(producer_id, epoch, sequence);
    for i in 0..records {
        builder = builder.record(1_000 + i as i64, Some(b"k"), Some(b"v"));
    }
    Bytes::from(builder.build())
}

fn idempotence(d: &mut Diff) {
    d.setup_topic("d-idem", 1);
    let request = InitProducerIdRequest {
        transactional_id: None,
        transaction_timeout_ms: -1,
        ..Default::default()
    };
    let (tarn, kafka) = d.call_until_ready(
        "InitProducerId: idempotent",
        INIT_PRODUCER_ID,
        &request,
        |r: &InitProducerIdResponse| r.error_code,
    );
    let ids = [
        (tarn.producer_id, tarn.producer_epoch),
        (kafka.producer_id, kafka.producer_epoch),
    ];
    // Each broker gets batches from its own producer id.
    let cases: [(&str, i32, usize); 5] = [
        ("sequence 0", 0, 3),
        ("the same batch again (a duplicate)", 0, 3),
        ("the next sequence", 3, 2),
        ("a gap in the sequence", 9, 1),
        ("a sequence from before the last 5 batches' window", 1, 1),
    ];
    for (what, sequence, records) in cases {
        d.call_each::<_, ProduceResponse>(&format!("Produce idempotent: {what}"), PRODUCE, |b| {
            let (id, epoch) = ids[b];
            produce_request("d-idem", 0, idempotent_batch(id, epoch, sequence, records))
        });
    }
    d.call_each::<_, ProduceResponse>(
        "Produce idempotent: a new epoch that starts past sequence 0",
        PRODUCE,
        |b| {
            let (id, epoch) = ids[b];
            produce_request("d-idem", 0, idempotent_batch(id, epoch + 1, 5, 1))
        },
    );
    let epoch_cases: [(&str, i16, i32); 3] = [
        ("a new epoch from sequence 0", 1, 0),
        ("the new epoch's next sequence", 1, 1),
        ("the old epoch after the new one", 0, 3),
    ];
    for (what, epoch_delta, sequence) in epoch_cases {
        d.call_each::<_, ProduceResponse>(&format!("Produce idempotent: {what}"), PRODUCE, |b| {
            let (id, epoch) = ids[b];
            produce_request(
                "d-idem",
                0,
                idempotent_batch(id, epoch + epoch_delta, sequence, 1),
            )
        });
    }
    // A producer id this broker never handed out (ids near the top of the
    // range, which neither broker reaches here).
    for (what, sequence) in [
        ("an unknown producer id from sequence 0", 0),
        ("an unknown producer id past sequence 0", 7),
    ] {
        d.call::<_, ProduceResponse>(
            &format!("Produce idempotent: {what}"),
            PRODUCE,
            &produce_request(
                "d-idem",
                0,
                idempotent_batch(i64::MAX / 2 + i64::from(sequence), 0, sequence, 1),
            ),
        );
    }
    // KIP-360: an idempotent producer that gives its id and epoch gets a
    // producer id back (a new one: only transactional ids bump epochs).
    d.call_each::<_, InitProducerIdResponse>(
        "InitProducerId: an idempotent producer that names its id and epoch",
        INIT_PRODUCER_ID,
        |b| InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: -1,
            producer_id: ids[b].0,
            producer_epoch: ids[b].1,
        },
    );
    d.call::<_, InitProducerIdResponse>(
        "InitProducerId: an id with no epoch",
        INIT_PRODUCER_ID,
        &InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: -1,
            producer_id: 5,
            producer_epoch: -1,
        },
    );
}

/// JoinGroup's refusals, and a static member (KIP-345) replaced by a new
/// instance of itself, which fences the old one.
fn group_edges(d: &mut Diff) {
    d.find_coordinator("d-e", 0);
    let join = |group: &str, f: &dyn Fn(&mut JoinGroupRequest)| {
        let mut request = join_request(group, "", "consumer");
        f(&mut request);
        request
    };
    for (what, request) in [
        ("an empty group id", join("", &|_| {})),
        (
            "a session timeout below group.min.session.timeout.ms",
            join("d-e", &|r| r.session_timeout_ms = 1),
        ),
        (
            "a session timeout above group.max.session.timeout.ms",
            join("d-e", &|r| r.session_timeout_ms = 1_000_000_000),
        ),
        ("no protocols", join("d-e", &|r| r.protocols.clear())),
        (
            "no protocol type",
            join("d-e", &|r| r.protocol_type.clear()),
        ),
    ] {
        d.call::<_, JoinGroupResponse>(&format!("JoinGroup: {what}"), JOIN_GROUP, &request);
    }
    let static_join = |member_id: &str| {
        join("d-e", &|r| {
            r.group_instance_id = Some("instance-1".into());
            r.member_id = member_id.into();
        })
    };
    // A static member needs no second join (no MEMBER_ID_REQUIRED).
    let (tarn, kafka) =
        d.call::<_, JoinGroupResponse>("JoinGroup: a static member", JOIN_GROUP, &static_join(""));
    let first = [tarn.member_id, kafka.member_id];
    let generation = [tarn.generation_id, kafka.generation_id];
    d.call_each::<_, SyncGroupResponse>("SyncGroup: the static member", SYNC_GROUP, |b| {
        SyncGroupRequest {
            group_id: "d-e".into(),
            generation_id: generation[b],
            member_id: first[b].clone(),
            group_instance_id: Some("instance-1".into()),
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![SyncGroupRequestAssignment {
                member_id: first[b].clone(),
                assignment: Bytes::from_static(&[0, 1, 0, 0, 0, 0, 0, 0]),
            }],
        }
    });
    d.call::<_, JoinGroupResponse>(
        "JoinGroup: the static member's instance with an unknown member id",
        JOIN_GROUP,
        &static_join("made-up"),
    );
    let (tarn, kafka) = d.call::<_, JoinGroupResponse>(
        "JoinGroup: a new instance of the static member",
        JOIN_GROUP,
        &static_join(""),
    );
    let second = [tarn.member_id, kafka.member_id];
    let heartbeat = |member: &[String; 2], b: usize| HeartbeatRequest {
        group_id: "d-e".into(),
        generation_id: generation[b],
        member_id: member[b].clone(),
        group_instance_id: Some("instance-1".into()),
    };
    d.call_each::<_, HeartbeatResponse>("Heartbeat: the fenced old instance", HEARTBEAT, |b| {
        heartbeat(&first, b)
    });
    d.call_each::<_, HeartbeatResponse>("Heartbeat: the new instance", HEARTBEAT, |b| {
        heartbeat(&second, b)
    });
    d.call_each::<_, LeaveGroupResponse>(
        "LeaveGroup: the old instance by its instance id",
        LEAVE_GROUP,
        |b| LeaveGroupRequest {
            group_id: "d-e".into(),
            members: vec![MemberIdentity {
                member_id: first[b].clone(),
                group_instance_id: Some("instance-1".into()),
                reason: None,
            }],
            ..Default::default()
        },
    );
    d.call_each::<_, LeaveGroupResponse>(
        "LeaveGroup: the new instance by its instance id",
        LEAVE_GROUP,
        |b| LeaveGroupRequest {
            group_id: "d-e".into(),
            members: vec![MemberIdentity {
                member_id: second[b].clone(),
                group_instance_id: Some("instance-1".into()),
                reason: None,
            }],
            ..Default::default()
        },
    );
}

/// Fetch sessions (KIP-227), as the Java consumer uses them: a session
/// made by a full fetch, incremental fetches that name only what changed,
/// a partition forgotten, wrong epochs and ids, and the session closed.
/// Each broker's own session id goes back to it.
fn fetch_sessions(d: &mut Diff) {
    d.setup_topic("d-fs", 2);
    d.call::<_, ProduceResponse>(
        "setup: 3 records into d-fs-0",
        PRODUCE,
        &produce_request("d-fs", 0, batch(3, 1_000)),
    );
    let fetch =
        |session_id: i32, session_epoch: i32, partitions: &[(i32, i64)], forgotten: &[i32]| {
            FetchRequest {
                max_wait_ms: 0,
                min_bytes: 0,
                max_bytes: 1 << 20,
                session_id,
                session_epoch,
                topics: if partitions.is_empty() {
                    Vec::new()
                } else {
                    vec![FetchTopic {
                        topic: "d-fs".into(),
                        partitions: partitions
                            .iter()
                            .map(|(partition, fetch_offset)| FetchPartition {
                                partition: *partition,
                                fetch_offset: *fetch_offset,
                                partition_max_bytes: 1 << 20,
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }]
                },
                forgotten_topics_data: if forgotten.is_empty() {
                    Vec::new()
                } else {
                    vec![ForgottenTopic {
                        topic: "d-fs".into(),
                        partitions: forgotten.to_vec(),
                        ..Default::default()
                    }]
                },
                ..Default::default()
            }
        };
    let (tarn, kafka) = d.call::<_, FetchResponse>(
        "Fetch: a full fetch that opens a session",
        FETCH,
        &fetch(0, 0, &[(0, 0), (1, 0)], &[]),
    );
    let ids = [tarn.session_id, kafka.session_id];
    assert_ne!(ids[KAFKA], 0, "Kafka opened no fetch session: {kafka:?}");
    for (what, epoch, partitions) in [
        ("an incremental fetch with nothing new", 1, &[][..]),
        (
            "an incremental fetch that moves partition 0 on",
            2,
            &[(0, 3)][..],
        ),
    ] {
        d.call_each::<_, FetchResponse>(&format!("Fetch: {what}"), FETCH, |b| {
            fetch(ids[b], epoch, partitions, &[])
        });
    }
    d.call::<_, ProduceResponse>(
        "setup: 2 records into d-fs-1",
        PRODUCE,
        &produce_request("d-fs", 1, batch(2, 2_000)),
    );
    d.call_each::<_, FetchResponse>(
        "Fetch: an incremental fetch after records arrived",
        FETCH,
        |b| fetch(ids[b], 3, &[], &[]),
    );
    for (what, epoch) in [
        ("an epoch the session is not at", 9),
        ("an epoch it was at before", 2),
    ] {
        d.call_each::<_, FetchResponse>(&format!("Fetch: {what}"), FETCH, |b| {
            fetch(ids[b], epoch, &[], &[])
        });
    }
    d.call::<_, FetchResponse>(
        "Fetch: a session id neither broker gave",
        FETCH,
        &fetch(0x7eed_beef, 1, &[], &[]),
    );
    d.call_each::<_, FetchResponse>(
        "Fetch: an incremental fetch that forgets partition 1",
        FETCH,
        |b| fetch(ids[b], 4, &[], &[1]),
    );
    d.call_each::<_, FetchResponse>(
        "Fetch: an incremental fetch that adds partition 1 back",
        FETCH,
        |b| fetch(ids[b], 5, &[(1, 0)], &[]),
    );
    d.call_each::<_, FetchResponse>("Fetch: the session closed by its final epoch", FETCH, |b| {
        fetch(ids[b], -1, &[(0, 0)], &[])
    });
    d.call_each::<_, FetchResponse>("Fetch: the closed session", FETCH, |b| {
        fetch(ids[b], 6, &[], &[])
    });
    d.call::<_, FetchResponse>(
        "Fetch: a full fetch that asks for no session",
        FETCH,
        &fetch(0, -1, &[(0, 0)], &[]),
    );
    let (tarn, kafka) = d.call::<_, FetchResponse>(
        "Fetch: another session",
        FETCH,
        &fetch(0, 0, &[(0, 0)], &[]),
    );
    let ids = [tarn.session_id, kafka.session_id];
    assert_ne!(ids[KAFKA], 0, "Kafka opened no fetch session: {kafka:?}");
    d.call_each::<_, FetchResponse>(
        "Fetch: epoch 0 with the session's id, which starts it over",
        FETCH,
        |b| fetch(ids[b], 0, &[(1, 0)], &[]),
    );
    d.call_each::<_, FetchResponse>("Fetch: the session started over, incremental", FETCH, |b| {
        fetch(ids[b], 1, &[], &[])
    });
}

/// The oldest versions Kafka 4 still serves, which older clients send
/// (Metadata v0, whose empty list means every topic; Produce v3; Fetch
/// v4), and a consumer's fetch that names a leader epoch the partition
/// is not at, or a last fetched epoch it never had.
fn versions_and_epochs(d: &mut Diff) {
    let every_topic_v0 = MetadataRequest {
        topics: Some(Vec::new()),
        ..Default::default()
    };
    d.call::<_, MetadataResponse>(
        "Metadata v0: an empty list, which means every topic",
        (METADATA.0, 0, METADATA.2),
        &every_topic_v0,
    );
    for (what, topics) in [
        ("no list, which means every topic", None),
        ("an empty list, which means none", Some(Vec::new())),
    ] {
        d.call::<_, MetadataResponse>(
            &format!("Metadata v1: {what}"),
            (METADATA.0, 1, METADATA.2),
            &MetadataRequest {
                topics,
                ..Default::default()
            },
        );
    }
    d.call::<_, MetadataResponse>(
        "Metadata v4: d-fs, no auto-creation",
        (METADATA.0, 4, METADATA.2),
        &metadata_request(&["d-fs", "d-fs-missing"], false),
    );
    d.call::<_, ProduceResponse>(
        "Produce v3: a batch",
        (PRODUCE.0, 3, PRODUCE.2),
        &produce_request("d-fs", 0, batch(2, 3_000)),
    );
    for version in [4, 8, 11] {
        d.call::<_, FetchResponse>(
            &format!("Fetch v{version}: d-fs-0 from the start"),
            (FETCH.0, version, FETCH.2),
            &fetch_request("d-fs", 0, 0, 1 << 20, 0),
        );
    }
    let epochs = |current_leader_epoch: i32, fetch_offset: i64, last_fetched_epoch: i32| {
        let mut request = fetch_request("d-fs", 0, fetch_offset, 1 << 20, 0);
        let partition = &mut request.topics[0].partitions[0];
        partition.current_leader_epoch = current_leader_epoch;
        partition.last_fetched_epoch = last_fetched_epoch;
        request
    };
    for (what, request) in [
        ("the partition's leader epoch", epochs(0, 0, -1)),
        ("a leader epoch above the partition's", epochs(5, 0, -1)),
        ("a last fetched epoch the log never had", epochs(0, 3, 4)),
        ("a last fetched epoch past the log's end", epochs(0, 9, 0)),
    ] {
        d.call::<_, FetchResponse>(&format!("Fetch: {what}"), FETCH, &request);
    }
}

/// Older versions of the APIs clients still send (each the oldest or a
/// middle one Kafka 4 serves): configs, offsets, coordinators, topics, and
/// a whole member's life in a group at the versions a client of the 2.x
/// era speaks (JoinGroup v2, SyncGroup v1, Heartbeat v1, OffsetCommit v3,
/// OffsetFetch v3, LeaveGroup v1).
fn older_versions(d: &mut Diff) {
    for version in [1, 2, 3] {
        d.call::<_, DescribeConfigsResponse>(
            &format!("DescribeConfigs v{version}: named keys of a topic"),
            (DESCRIBE_CONFIGS.0, version, DESCRIBE_CONFIGS.2),
            &describe_configs_request(
                2,
                "d-cfg",
                Some(&["cleanup.policy", "retention.ms"]),
                true,
                true,
            ),
        );
    }
    for version in [1, 2, 4, 6] {
        for (what, timestamp) in [("earliest", -2), ("latest", -1), ("by timestamp", 2_500)] {
            d.call::<_, ListOffsetsResponse>(
                &format!("ListOffsets v{version}: {what}"),
                (LIST_OFFSETS.0, version, LIST_OFFSETS.2),
                &list_offsets_request("d-log", 0, timestamp),
            );
        }
    }
    for version in [0, 1, 2] {
        d.call::<_, FindCoordinatorResponse>(
            &format!("FindCoordinator v{version}: a group"),
            (FIND_COORDINATOR.0, version, FIND_COORDINATOR.2),
            &FindCoordinatorRequest {
                key: "d-old".into(),
                ..Default::default()
            },
        );
    }
    for version in [2, 3, 4] {
        d.call::<_, CreateTopicsResponse>(
            &format!("CreateTopics v{version}: validate only"),
            (CREATE_TOPICS.0, version, CREATE_TOPICS.2),
            &create(vec![topic("d-old-topic", 2, 1, &[])], true),
        );
    }
    d.call::<_, DeleteTopicsResponse>(
        "DeleteTopics v1: a topic that does not exist",
        (DELETE_TOPICS.0, 1, DELETE_TOPICS.2),
        &DeleteTopicsRequest {
            topic_names: vec!["d-old-none".into()],
            timeout_ms: 30_000,
            ..Default::default()
        },
    );
    for version in [7, 9] {
        d.call::<_, MetadataResponse>(
            &format!("Metadata v{version}: d-log"),
            (METADATA.0, version, METADATA.2),
            &metadata_request(&["d-log"], false),
        );
    }

    // A member of group d-old at the versions of a 2.x client: no member
    // id needed to join (KIP-394 came with JoinGroup v4).
    d.find_coordinator("d-old", 0);
    let (tarn, kafka) = d.call::<_, JoinGroupResponse>(
        "JoinGroup v2: a new member, joined at once",
        (JOIN_GROUP.0, 2, JOIN_GROUP.2),
        &join_request("d-old", "", "consumer"),
    );
    let member = [tarn.member_id, kafka.member_id];
    let generation = [tarn.generation_id, kafka.generation_id];
    d.call_each::<_, SyncGroupResponse>(
        "SyncGroup v1: the leader",
        (SYNC_GROUP.0, 1, SYNC_GROUP.2),
        |b| SyncGroupRequest {
            group_id: "d-old".into(),
            generation_id: generation[b],
            member_id: member[b].clone(),
            assignments: vec![SyncGroupRequestAssignment {
                member_id: member[b].clone(),
                assignment: Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0]),
            }],
            ..Default::default()
        },
    );
    let heartbeat = |b: usize| HeartbeatRequest {
        group_id: "d-old".into(),
        generation_id: generation[b],
        member_id: member[b].clone(),
        group_instance_id: None,
    };
    d.call_each::<_, HeartbeatResponse>(
        "Heartbeat v1: the member",
        (HEARTBEAT.0, 1, HEARTBEAT.2),
        heartbeat,
    );
    d.call_each::<_, OffsetCommitResponse>(
        "OffsetCommit v3: the member's commit",
        (OFFSET_COMMIT.0, 3, OFFSET_COMMIT.2),
        |b| {
            let mut request = memberless_commit("d-old", "d-log", 0, 7);
            request.generation_id_or_member_epoch = generation[b];
            request.member_id = member[b].clone();
            request
        },
    );
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch v3: the member's commit, and every topic",
        (OFFSET_FETCH.0, 3, OFFSET_FETCH.2),
        &OffsetFetchRequest {
            group_id: "d-old".into(),
            topics: None,
            ..Default::default()
        },
    );
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch v1: the member's commit",
        (OFFSET_FETCH.0, 1, OFFSET_FETCH.2),
        &OffsetFetchRequest {
            group_id: "d-old".into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "d-log".into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
    d.call_each::<_, LeaveGroupResponse>(
        "LeaveGroup v1: the member",
        (LEAVE_GROUP.0, 1, LEAVE_GROUP.2),
        |b| LeaveGroupRequest {
            group_id: "d-old".into(),
            member_id: member[b].clone(),
            ..Default::default()
        },
    );
    d.call_each::<_, HeartbeatResponse>(
        "Heartbeat v1: after leaving",
        (HEARTBEAT.0, 1, HEARTBEAT.2),
        heartbeat,
    );
}

/// Commits whose details Kafka checks: metadata longer than
/// `offset.metadata.max.bytes` (4096), a negative offset, a null
/// metadata, a leader epoch; read back by OffsetFetch. And a fetch that
/// waits for `min_bytes` it never gets.
fn commit_details(d: &mut Diff) {
    d.find_coordinator("d-commit", 0);
    let long = "m".repeat(4097);
    let commit = |offset: i64, metadata: Option<&str>, epoch: i32| {
        let mut request = memberless_commit("d-commit", "d-log", 0, offset);
        let partition = &mut request.topics[0].partitions[0];
        partition.committed_metadata = metadata.map(str::to_owned);
        partition.committed_leader_epoch = epoch;
        request
    };
    let fetch_back = OffsetFetchRequest {
        group_id: "d-commit".into(),
        topics: Some(vec![OffsetFetchRequestTopic {
            name: "d-log".into(),
            partition_indexes: vec![0],
            ..Default::default()
        }]),
        ..Default::default()
    };
    for (what, request) in [
        ("metadata of 4096 bytes", commit(3, Some(&long[..4096]), -1)),
        ("metadata of 4097 bytes", commit(4, Some(&long), -1)),
        ("a negative offset", commit(-5, Some("neg"), -1)),
        ("a null metadata", commit(6, None, -1)),
        ("a leader epoch", commit(7, Some("e"), 0)),
    ] {
        d.call::<_, OffsetCommitResponse>(
            &format!("OffsetCommit: {what}"),
            OFFSET_COMMIT,
            &request,
        );
        d.call::<_, OffsetFetchResponse>(
            &format!("OffsetFetch: after a commit of {what}"),
            OFFSET_FETCH,
            &fetch_back,
        );
    }
    let mut waiting = fetch_request("d-log", 0, 0, 1 << 20, 0);
    waiting.min_bytes = 1 << 20;
    waiting.max_wait_ms = 200;
    d.call::<_, FetchResponse>(
        "Fetch: min_bytes not reached within max_wait_ms",
        FETCH,
        &waiting,
    );
}

/// Topics named by id where the request allows it: OffsetCommit and
/// OffsetFetch v10, Metadata v12. Each broker's own id for d-log; ids are
/// masked in the answers, so only whether a topic was found is compared.
fn topic_ids(d: &mut Diff) {
    let ids = d.topic_ids("d-log");
    let unknown = Uuid([9; 16]);
    d.find_coordinator("d-ids", 0);
    let commit = |id: Uuid, partition: i32| {
        let mut request = memberless_commit("d-ids", "", partition, 3);
        request.topics[0].topic_id = id;
        request
    };
    const OFFSET_COMMIT_V10: (i16, i16, i16) = (OFFSET_COMMIT.0, 10, OFFSET_COMMIT.2);
    const OFFSET_FETCH_V10: (i16, i16, i16) = (OFFSET_FETCH.0, 10, OFFSET_FETCH.2);
    d.call_each::<_, OffsetCommitResponse>(
        "OffsetCommit v10: a topic by id",
        OFFSET_COMMIT_V10,
        |b| commit(ids[b], 0),
    );
    d.call_each::<_, OffsetCommitResponse>(
        "OffsetCommit v10: a partition that does not exist, by id",
        OFFSET_COMMIT_V10,
        |b| commit(ids[b], 9),
    );
    d.call::<_, OffsetCommitResponse>(
        "OffsetCommit v10: a topic id neither broker knows",
        OFFSET_COMMIT_V10,
        &commit(unknown, 0),
    );
    d.call::<_, OffsetCommitResponse>(
        "OffsetCommit v10: the zero topic id",
        OFFSET_COMMIT_V10,
        &commit(Uuid::default(), 0),
    );
    let fetch = |topics: Option<Vec<(Uuid, Vec<i32>)>>| OffsetFetchRequest {
        groups: vec![OffsetFetchRequestGroup {
            group_id: "d-ids".into(),
            topics: topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|(topic_id, partition_indexes)| OffsetFetchRequestTopic {
                        topic_id,
                        partition_indexes,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    d.call_each::<_, OffsetFetchResponse>(
        "OffsetFetch v10: a topic by id",
        OFFSET_FETCH_V10,
        |b| fetch(Some(vec![(ids[b], vec![0, 1, 9])])),
    );
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch v10: a topic id neither broker knows",
        OFFSET_FETCH_V10,
        &fetch(Some(vec![(unknown, vec![0])])),
    );
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch v10: every topic of the group",
        OFFSET_FETCH_V10,
        &fetch(None),
    );
    let by_id = |ids: Vec<Uuid>| MetadataRequest {
        topics: Some(
            ids.into_iter()
                .map(|topic_id| MetadataRequestTopic {
                    topic_id,
                    name: None,
                })
                .collect(),
        ),
        allow_auto_topic_creation: false,
        ..Default::default()
    };
    d.call_each::<_, MetadataResponse>("Metadata: a topic by id", METADATA, |b| {
        by_id(vec![ids[b]])
    });
    d.call::<_, MetadataResponse>(
        "Metadata: a topic id neither broker knows",
        METADATA,
        &by_id(vec![unknown]),
    );
}

/// A subscription (v0) of d-r's members to d-log, each told apart by its
/// user data, since member ids are generated.
fn subscription(user_data: u8) -> Bytes {
    let mut bytes = vec![0, 0, 0, 0, 0, 1, 0, 5];
    bytes.extend_from_slice(b"d-log");
    bytes.extend_from_slice(&[0, 0, 0, 1, user_data]);
    Bytes::from(bytes)
}

/// An assignment (v0) of d-log's `partitions`.
fn assignment(partitions: &[i32]) -> Bytes {
    let mut bytes = vec![0, 0, 0, 0, 0, 1, 0, 5];
    bytes.extend_from_slice(b"d-log");
    bytes.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
    for partition in partitions {
        bytes.extend_from_slice(&partition.to_be_bytes());
    }
    bytes.extend_from_slice(&(-1i32).to_be_bytes());
    Bytes::from(bytes)
}

/// A rebalance of group d-r from start to end, on each broker: a second
/// member joins a stable group, the first is told REBALANCE_IN_PROGRESS
/// until it rejoins, the follower's SyncGroup waits for the leader's, and
/// the follower leaves. Between the steps, what each API answers in each
/// state (PreparingRebalance, CompletingRebalance, Stable).
fn rebalances(d: &mut Diff) {
    let join = |member_id: &str, user_data: u8| {
        let mut request = join_request("d-r", member_id, "consumer");
        request.protocols[0].metadata = subscription(user_data);
        request
    };
    let heartbeat = |member: &[String; 2], generation: &[i32; 2], b: usize| HeartbeatRequest {
        group_id: "d-r".into(),
        generation_id: generation[b],
        member_id: member[b].clone(),
        group_instance_id: None,
    };
    let commit = |member: &[String; 2], generation: &[i32; 2], b: usize| OffsetCommitRequest {
        group_id: "d-r".into(),
        generation_id_or_member_epoch: generation[b],
        member_id: member[b].clone(),
        topics: vec![OffsetCommitRequestTopic {
            name: "d-log".into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: 1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let sync = |member: &[String; 2],
                generation: &[i32; 2],
                assignments: &[(&[String; 2], &[i32])],
                b: usize| SyncGroupRequest {
        group_id: "d-r".into(),
        generation_id: generation[b],
        member_id: member[b].clone(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: assignments
            .iter()
            .map(|(to, partitions)| SyncGroupRequestAssignment {
                member_id: to[b].clone(),
                assignment: assignment(partitions),
            })
            .collect(),
    };
    let describe = DescribeGroupsRequest {
        groups: vec!["d-r".into()],
        include_authorized_operations: false,
    };
    d.find_coordinator("d-r", 0);

    let (tarn, kafka) = d.call::<_, JoinGroupResponse>(
        "JoinGroup: d-r's first member without an id",
        JOIN_GROUP,
        &join("", b'a'),
    );
    let a = [tarn.member_id, kafka.member_id];
    let (tarn, kafka) = d.call_each::<_, JoinGroupResponse>(
        "JoinGroup: d-r's first member with its id",
        JOIN_GROUP,
        |b| join(&a[b], b'a'),
    );
    let first = [tarn.generation_id, kafka.generation_id];
    d.call_each::<_, SyncGroupResponse>("SyncGroup: d-r's only member", SYNC_GROUP, |b| {
        sync(&a, &first, &[(&a, &[0])], b)
    });
    let mut other_protocol = join("", b'c');
    other_protocol.protocols[0].name = "roundrobin".into();
    d.call::<_, JoinGroupResponse>(
        "JoinGroup: a member with only a protocol the group does not use",
        JOIN_GROUP,
        &other_protocol,
    );

    // A second member: its join waits until the first rejoins.
    let (tarn, kafka) = d.call::<_, JoinGroupResponse>(
        "JoinGroup: a second member of a stable group, without an id",
        JOIN_GROUP,
        &join("", b'b'),
    );
    let b_ids = [tarn.member_id, kafka.member_id];
    let second_join = d.send_pending::<_, JoinGroupResponse>(
        "JoinGroup: the second member, answered once the rebalance completes",
        JOIN_GROUP,
        |b| join(&b_ids[b], b'b'),
    );
    // What the group's description, a member's heartbeat and a member's
    // commit get in a state of the rebalance.
    let probe = |d: &mut Diff,
                 when: &str,
                 beating: &[String; 2],
                 committing: &[String; 2],
                 generation: &[i32; 2]| {
        d.call::<_, DescribeGroupsResponse>(
            &format!("DescribeGroups: {when}"),
            DESCRIBE_GROUPS,
            &describe,
        );
        d.call_each::<_, HeartbeatResponse>(&format!("Heartbeat: {when}"), HEARTBEAT, |b| {
            heartbeat(beating, generation, b)
        });
        d.call_each::<_, OffsetCommitResponse>(
            &format!("OffsetCommit: {when}"),
            OFFSET_COMMIT,
            |b| commit(committing, generation, b),
        );
    };
    d.wait_group_state("d-r", "PreparingRebalance");
    probe(d, "while the group prepares a rebalance", &a, &a, &first);
    d.call_each::<_, SyncGroupResponse>(
        "SyncGroup: while the group prepares a rebalance",
        SYNC_GROUP,
        |b| sync(&a, &first, &[(&a, &[0])], b),
    );
    let (tarn, kafka) = d.call_each::<_, JoinGroupResponse>(
        "JoinGroup: the first member rejoins, completing the rebalance",
        JOIN_GROUP,
        |b| join(&a[b], b'a'),
    );
    let second = [tarn.generation_id, kafka.generation_id];
    d.finish(second_join);

    // CompletingRebalance: the leader has not sent the assignment yet.
    probe(
        d,
        "while the group awaits its assignment",
        &b_ids,
        &a,
        &second,
    );
    d.call_each::<_, SyncGroupResponse>(
        "SyncGroup: a follower naming another protocol",
        SYNC_GROUP,
        |b| SyncGroupRequest {
            protocol_name: Some("roundrobin".into()),
            ..sync(&b_ids, &second, &[], b)
        },
    );
    d.call_each::<_, SyncGroupResponse>(
        "SyncGroup: a follower naming another protocol type",
        SYNC_GROUP,
        |b| SyncGroupRequest {
            protocol_type: Some("connect".into()),
            ..sync(&b_ids, &second, &[], b)
        },
    );
    let follower_sync = d.send_pending::<_, SyncGroupResponse>(
        "SyncGroup: a follower, answered with what the leader assigned it",
        SYNC_GROUP,
        |b| sync(&b_ids, &second, &[], b),
    );
    // Usually before the leader's assignment: the answer is the same
    // either way.
    std::thread::sleep(std::time::Duration::from_millis(100));
    d.call_each::<_, SyncGroupResponse>(
        "SyncGroup: the leader's assignment for both members",
        SYNC_GROUP,
        |b| sync(&a, &second, &[(&a, &[0]), (&b_ids, &[])], b),
    );
    d.finish(follower_sync);

    // Stable with two members, until the follower leaves.
    probe(d, "a stable group of two members", &a, &b_ids, &second);
    d.call_each::<_, LeaveGroupResponse>("LeaveGroup: the follower leaves", LEAVE_GROUP, |b| {
        LeaveGroupRequest {
            group_id: "d-r".into(),
            members: vec![MemberIdentity {
                member_id: b_ids[b].clone(),
                group_instance_id: None,
                reason: None,
            }],
            ..Default::default()
        }
    });
    d.call_each::<_, HeartbeatResponse>("Heartbeat: after a member left", HEARTBEAT, |b| {
        heartbeat(&a, &second, b)
    });
    d.call_each::<_, HeartbeatResponse>("Heartbeat: the member that left", HEARTBEAT, |b| {
        heartbeat(&b_ids, &second, b)
    });
    let (tarn, kafka) = d.call_each::<_, JoinGroupResponse>(
        "JoinGroup: the first member rejoins alone",
        JOIN_GROUP,
        |b| join(&a[b], b'a'),
    );
    let third = [tarn.generation_id, kafka.generation_id];
    d.call_each::<_, SyncGroupResponse>("SyncGroup: the member left alone", SYNC_GROUP, |b| {
        sync(&a, &third, &[(&a, &[0])], b)
    });
    d.call::<_, DescribeGroupsResponse>(
        "DescribeGroups: the group after the follower left",
        DESCRIBE_GROUPS,
        &describe,
    );
}

/// The group APIs' error paths; returns the member ids d-g's member got
/// from each broker (`TARN`, `KAFKA`).
fn groups(d: &mut Diff) -> [String; 2] {
    for group in ["d-g", "d-simple", "d-nogroup"] {
        d.find_coordinator(group, 0);
    }
    d.call::<_, HeartbeatResponse>(
        "Heartbeat: a group that does not exist",
        HEARTBEAT,
        &HeartbeatRequest {
            group_id: "d-nogroup".into(),
            generation_id: 1,
            member_id: "nobody".into(),
            group_instance_id: None,
        },
    );
    d.call::<_, JoinGroupResponse>(
        "JoinGroup: an unknown member id",
        JOIN_GROUP,
        &join_request("d-g", "made-up-member", "consumer"),
    );
    // The first join without a member id is told to rejoin with the id it
    // was given (KIP-394); each broker's id is its own.
    let (tarn, kafka) = d.call::<_, JoinGroupResponse>(
        "JoinGroup: a new member without an id",
        JOIN_GROUP,
        &join_request("d-g", "", "consumer"),
    );
    let ids = [tarn.member_id, kafka.member_id];
    let (tarn, kafka) = d.call_each::<_, JoinGroupResponse>(
        "JoinGroup: the member rejoins with its id",
        JOIN_GROUP,
        |b| join_request("d-g", &ids[b], "consumer"),
    );
    let generation = [tarn.generation_id, kafka.generation_id];
    d.call::<_, JoinGroupResponse>(
        "JoinGroup: another protocol type",
        JOIN_GROUP,
        &join_request("d-g", "", "connect"),
    );
    for (what, generation_delta, use_member) in [
        ("Heartbeat: the right generation", 0, true),
        ("Heartbeat: a wrong generation", 5, true),
        ("Heartbeat: an unknown member", 0, false),
    ] {
        let request = |i: usize| HeartbeatRequest {
            group_id: "d-g".into(),
            generation_id: generation[i] + generation_delta,
            member_id: if use_member {
                ids[i].clone()
            } else {
                "stranger".into()
            },
            group_instance_id: None,
        };
        d.call_each::<_, HeartbeatResponse>(what, HEARTBEAT, request);
    }
    let sync = |i: usize, generation_id: i32| SyncGroupRequest {
        group_id: "d-g".into(),
        generation_id,
        member_id: ids[i].clone(),
        group_instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments: vec![SyncGroupRequestAssignment {
            member_id: ids[i].clone(),
            assignment: Bytes::from_static(&[0, 1, 0, 0, 0, 0, 0, 0]),
        }],
    };
    for (what, delta) in [
        ("SyncGroup: a wrong generation", 3),
        ("SyncGroup: the leader's assignment", 0),
    ] {
        d.call_each::<_, SyncGroupResponse>(what, SYNC_GROUP, |b| sync(b, generation[b] + delta));
    }
    let commit =
        |i: usize, generation_id: i32, member: Option<&str>, topic: &str, partition: i32| {
            OffsetCommitRequest {
                group_id: "d-g".into(),
                generation_id_or_member_epoch: generation_id,
                member_id: member.map_or_else(|| ids[i].clone(), str::to_owned),
                topics: vec![OffsetCommitRequestTopic {
                    name: topic.into(),
                    partitions: vec![OffsetCommitRequestPartition {
                        partition_index: partition,
                        committed_offset: 4,
                        committed_metadata: Some("m".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }
        };
    for (what, delta, member, topic, partition) in [
        ("OffsetCommit: by the member", 0, None, "d-log", 0),
        ("OffsetCommit: a wrong generation", 2, None, "d-log", 0),
        (
            "OffsetCommit: an unknown member",
            0,
            Some("stranger"),
            "d-log",
            0,
        ),
        ("OffsetCommit: an unknown topic", 0, None, "d-none", 0),
        (
            "OffsetCommit: a partition that does not exist",
            0,
            None,
            "d-log",
            9,
        ),
    ] {
        d.call_each::<_, OffsetCommitResponse>(what, OFFSET_COMMIT, |b| {
            commit(b, generation[b] + delta, member, topic, partition)
        });
    }
    let simple_commit = memberless_commit("d-simple", "d-log", 0, 2);
    d.call::<_, OffsetCommitResponse>(
        "OffsetCommit: a simple (memberless) group",
        OFFSET_COMMIT,
        &simple_commit,
    );
    let group =
        |group_id: &str, topics: Option<Vec<OffsetFetchRequestTopic>>| OffsetFetchRequestGroup {
            group_id: group_id.into(),
            topics,
            ..Default::default()
        };
    let d_log = || {
        Some(vec![OffsetFetchRequestTopic {
            name: "d-log".into(),
            partition_indexes: vec![0, 9],
            ..Default::default()
        }])
    };
    for (what, require_stable, groups) in [
        (
            "three groups at once",
            false,
            vec![
                group("d-g", d_log()),
                group("d-simple", d_log()),
                group("d-nogroup", d_log()),
            ],
        ),
        (
            "every topic of two groups",
            false,
            vec![group("d-g", None), group("d-simple", None)],
        ),
        ("stable offsets only", true, vec![group("d-g", d_log())]),
    ] {
        d.call::<_, OffsetFetchResponse>(
            &format!("OffsetFetch v8: {what}"),
            (OFFSET_FETCH.0, 8, OFFSET_FETCH.2),
            &OffsetFetchRequest {
                groups,
                require_stable,
                ..Default::default()
            },
        );
    }
    for (what, group) in [
        ("OffsetFetch: the group's commit", "d-g"),
        ("OffsetFetch: a simple group", "d-simple"),
        ("OffsetFetch: a group that does not exist", "d-nogroup"),
    ] {
        let request = OffsetFetchRequest {
            group_id: group.into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "d-log".into(),
                partition_indexes: vec![0, 9],
                ..Default::default()
            }]),
            ..Default::default()
        };
        d.call::<_, OffsetFetchResponse>(what, OFFSET_FETCH, &request);
    }
    ids
}

/// The group admin APIs (what kafka-consumer-groups.sh and the Admin
/// client send) on the groups `groups` left: d-g with one member
/// (`ids`), d-simple with a memberless commit.
fn group_admin(d: &mut Diff, ids: &[String; 2]) {
    let describe = |groups: &[&str]| DescribeGroupsRequest {
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        include_authorized_operations: false,
    };
    d.call::<_, ProduceResponse>(
        "Produce: an internal topic",
        PRODUCE,
        &produce_request("__consumer_offsets", 0, batch(1, 1_000)),
    );
    let all = ["d-g", "d-simple", "d-nogroup"];
    for (what, version) in [("v5", 5), ("v6", 6)] {
        d.call::<_, DescribeGroupsResponse>(
            &format!("DescribeGroups {what}: a member's group, a simple group, no group"),
            (DESCRIBE_GROUPS.0, version, DESCRIBE_GROUPS.2),
            &describe(&all),
        );
    }
    let list = |states: &[&str], types: &[&str]| ListGroupsRequest {
        states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
        types_filter: types.iter().map(|s| (*s).to_owned()).collect(),
    };
    for (what, states, types) in [
        ("every group", &[][..], &[][..]),
        ("Stable groups", &["Stable"][..], &[][..]),
        ("Empty groups", &["Empty"][..], &[][..]),
        ("states in another case", &["stable", "EMPTY"][..], &[][..]),
        ("an unknown state", &["Sleepy"][..], &[][..]),
        ("classic groups", &[][..], &["classic"][..]),
        ("consumer (KIP-848) groups", &[][..], &["consumer"][..]),
    ] {
        d.call::<_, ListGroupsResponse>(
            &format!("ListGroups: {what}"),
            LIST_GROUPS,
            &list(states, types),
        );
    }
    let offset_delete = |group: &str, topic: &str, partitions: &[i32]| OffsetDeleteRequest {
        group_id: group.into(),
        topics: vec![OffsetDeleteRequestTopic {
            name: topic.into(),
            partitions: partitions
                .iter()
                .map(|&partition_index| OffsetDeleteRequestPartition { partition_index })
                .collect(),
        }],
    };
    for (what, group, topic, partitions) in [
        ("a simple group's offset", "d-simple", "d-log", &[0][..]),
        ("the same offset again", "d-simple", "d-log", &[0][..]),
        (
            "a topic that does not exist",
            "d-simple",
            "d-none",
            &[0][..],
        ),
        (
            "a partition that does not exist",
            "d-simple",
            "d-log",
            &[9][..],
        ),
        (
            "a group that does not exist",
            "d-nogroup",
            "d-log",
            &[0][..],
        ),
        ("a group with a member", "d-g", "d-log", &[0][..]),
    ] {
        d.call::<_, OffsetDeleteResponse>(
            &format!("OffsetDelete: {what}"),
            OFFSET_DELETE,
            &offset_delete(group, topic, partitions),
        );
    }
    let delete = |groups: &[&str]| DeleteGroupsRequest {
        groups_names: groups.iter().map(|g| (*g).to_owned()).collect(),
    };
    d.call::<_, DeleteGroupsResponse>(
        "DeleteGroups: a group with a member",
        DELETE_GROUPS,
        &delete(&["d-g"]),
    );
    let leave = |group: &str, member: &str| LeaveGroupRequest {
        group_id: group.into(),
        members: vec![MemberIdentity {
            member_id: member.into(),
            group_instance_id: None,
            reason: Some("diff".into()),
        }],
        ..Default::default()
    };
    for (what, group, member) in [
        ("an unknown member", "d-g", "stranger"),
        ("a group that does not exist", "d-nogroup", "stranger"),
    ] {
        d.call::<_, LeaveGroupResponse>(
            &format!("LeaveGroup: {what}"),
            LEAVE_GROUP,
            &leave(group, member),
        );
    }
    d.call_each::<_, LeaveGroupResponse>("LeaveGroup: the member", LEAVE_GROUP, |b| {
        leave("d-g", &ids[b])
    });
    d.call::<_, DescribeGroupsResponse>(
        "DescribeGroups: after the member left",
        DESCRIBE_GROUPS,
        &describe(&all),
    );
    d.call::<_, DeleteGroupsResponse>(
        "DeleteGroups: two empty groups and one that does not exist",
        DELETE_GROUPS,
        &delete(&["d-g", "d-simple", "d-nogroup"]),
    );
    d.call::<_, DescribeGroupsResponse>(
        "DescribeGroups: after they were deleted",
        DESCRIBE_GROUPS,
        &describe(&all),
    );
    d.call::<_, OffsetFetchResponse>(
        "OffsetFetch: a deleted group",
        OFFSET_FETCH,
        &OffsetFetchRequest {
            group_id: "d-g".into(),
            topics: Some(vec![OffsetFetchRequestTopic {
                name: "d-log".into(),
                partition_indexes: vec![0],
                ..Default::default()
            }]),
            ..Default::default()
        },
    );
}

/// UpdateFeatures where both brokers agree whatever their metadata.version:
/// `kraft.version` 0, the level both quorums of fixed voters run at (at
/// every version, v0 without an upgrade type, with and without
/// validate-only), and each refusal that comes before the levels are
/// looked at (an unknown upgrade type, a negative level, an unknown
/// feature). The levels themselves differ (Kafka's node runs at its
/// release's metadata.version), so they are compared against a Kafka node
/// at Tarn's level by tests/python/test_kafka_tools.py.
fn update_features(d: &mut Diff) {
    let request =
        |feature: &str, level: i16, upgrade_type: i8, validate_only: bool| UpdateFeaturesRequest {
            timeout_ms: 60_000,
            feature_updates: vec![FeatureUpdateKey {
                feature: feature.into(),
                max_version_level: level,
                allow_downgrade: true,
                upgrade_type,
            }],
            validate_only,
        };
    for version in 0..=2 {
        d.call::<_, UpdateFeaturesResponse>(
            &format!("UpdateFeatures v{version}: kraft.version disabled"),
            (UPDATE_FEATURES.0, version, UPDATE_FEATURES.2),
            &request("kraft.version", 0, 2, false),
        );
    }
    for (what, request) in [
        (
            "kraft.version disabled, validate only",
            request("kraft.version", 0, 2, true),
        ),
        (
            "an unknown upgrade type",
            request("group.version", 0, 4, false),
        ),
        ("a negative level", request("group.version", -1, 2, false)),
        (
            "an unknown feature",
            request("no.such.version", 1, 1, false),
        ),
        (
            "an unknown feature disabled",
            request("no.such.version", 0, 2, false),
        ),
    ] {
        d.call::<_, UpdateFeaturesResponse>(
            &format!("UpdateFeatures: {what}"),
            UPDATE_FEATURES,
            &request,
        );
    }
}

/// ListTransactions on two brokers with no transaction (Tarn has no
/// transaction coordinator; Kafka's has seen none): filters of every kind,
/// an unknown state filter, and transactional-id patterns that compile and
/// that do not (KIP-1152), at each version.
fn list_transactions(d: &mut Diff) {
    let request = |states: &[&str], pattern: Option<&str>| ListTransactionsRequest {
        state_filters: states.iter().map(|s| (*s).to_owned()).collect(),
        producer_id_filters: vec![1, 2],
        duration_filter: 1000,
        transactional_id_pattern: pattern.map(str::to_owned),
    };
    for version in 0..=2 {
        d.call::<_, ListTransactionsResponse>(
            &format!("ListTransactions v{version}: no filter"),
            (LIST_TRANSACTIONS.0, version, LIST_TRANSACTIONS.2),
            &ListTransactionsRequest {
                duration_filter: -1,
                ..Default::default()
            },
        );
    }
    for (what, request) in [
        (
            "every filter, a known state",
            request(&["Ongoing"], Some("app-.*")),
        ),
        ("an unknown state", request(&["Ongoing", "Running"], None)),
        ("an empty pattern", request(&[], Some(""))),
        (
            "a pattern that does not compile",
            request(&[], Some("app-[")),
        ),
        (
            "a pattern RE2 does not take (look-ahead)",
            request(&[], Some("(?=app).*")),
        ),
    ] {
        d.call::<_, ListTransactionsResponse>(
            &format!("ListTransactions: {what}"),
            LIST_TRANSACTIONS,
            &request,
        );
    }
}

fn describe_cluster_request(endpoint_type: i8) -> DescribeClusterRequest {
    DescribeClusterRequest {
        endpoint_type,
        ..Default::default()
    }
}

/// DescribeCluster's endpoint types (KIP-919) on a broker listener, then
/// on each one's CONTROLLER listener: Tarn as a quorum of one (the node
/// kafka.sh starts is one), reached as `--bootstrap-controller` reaches it.
fn describe_cluster(d: &mut Diff, tarn_controller: &str, kafka_controller: &str) {
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster: brokers",
        DESCRIBE_CLUSTER,
        &describe_cluster_request(1),
    );
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster: controllers, of a broker",
        DESCRIBE_CLUSTER,
        &describe_cluster_request(2),
    );
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster: an endpoint type that does not exist",
        DESCRIBE_CLUSTER,
        &describe_cluster_request(3),
    );
    let brokers = (
        std::mem::replace(
            &mut d.tarn,
            Client::connect(tarn_controller).expect("connect to Tarn's controller"),
        ),
        std::mem::replace(
            &mut d.kafka,
            Client::connect(kafka_controller).expect("connect to Kafka's controller"),
        ),
    );
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster on the controller: controllers",
        DESCRIBE_CLUSTER,
        &describe_cluster_request(2),
    );
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster on the controller: brokers",
        DESCRIBE_CLUSTER,
        &describe_cluster_request(1),
    );
    d.call::<_, DescribeClusterResponse>(
        "DescribeCluster v0 on the controller",
        (60, 0, 0),
        &describe_cluster_request(1),
    );
    (d.tarn, d.kafka) = brokers;
}

#[test]
fn tarn_answers_as_apache_kafka_does() {
    run_with_timeout(std::time::Duration::from_secs(300), || {
        let kafka = KafkaNode::start_with(STATIC_TIME_KEYS);
        let tarn = TARN_AS_KAFKA_SH
            .iter()
            .chain(STATIC_TIME_KEYS)
            .fold(BrokerOptions::default(), |options, (key, value)| {
                options.set(key, value)
            });
        let tarn = TarnBroker::start_with(tarn);
        let mut d = Diff {
            tarn: Client::connect(tarn.bootstrap()).expect("connect to Tarn"),
            kafka: Client::connect(&kafka.bootstrap).expect("connect to Kafka"),
            compared: Vec::new(),
            differences: Vec::new(),
            known: KNOWN,
            masked: &[],
        };
        create_topics(&mut d);
        metadata(&mut d);
        topic_admin(&mut d);
        produce_errors(&mut d);
        describe_configs(&mut d);
        alter_configs(&mut d);
        broker_loggers(&mut d);
        quotas_and_acls(&mut d);
        scram_credentials(&mut d);
        config_resources(&mut d);
        produce_list_offsets_and_fetch(&mut d);
        delete_records_and_create_partitions(&mut d);
        idempotence(&mut d);
        partition_admin_edges(&mut d);
        // d-g's member, which group_admin describes, lives for its session
        // timeout (10 s) without heartbeats: the groups after it wait.
        let ids = groups(&mut d);
        group_edges(&mut d);
        duplicates(&mut d);
        group_admin(&mut d, &ids);
        offsets_and_coordinators(&mut d);
        rebalances(&mut d);
        topic_ids(&mut d);
        fetch_sessions(&mut d);
        versions_and_epochs(&mut d);
        older_versions(&mut d);
        commit_details(&mut d);
        update_features(&mut d);
        list_transactions(&mut d);
        // A quorum of one with a CONTROLLER listener, as Kafka's node is.
        let (port, controller) = (free_port(), free_port());
        let quorum_of_one = BrokerOptions {
            listeners: Some(format!(
                "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}"
            )),
            ..BrokerOptions::default()
        };
        let quorum_of_one = TARN_AS_KAFKA_SH
            .iter()
            .filter(|(key, _)| *key != "listeners")
            .fold(quorum_of_one, |options, (key, value)| {
                options.set(key, value)
            })
            .set(
                "controller.quorum.voters",
                &format!("1@127.0.0.1:{controller}"),
            );
        let quorum_of_one = TarnBroker::start_with(quorum_of_one);
        d.tarn = Client::connect(quorum_of_one.bootstrap()).expect("connect to Tarn");
        // Until it registered its broker with itself.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let response: DescribeClusterResponse = d
                .tarn
                .call(
                    DESCRIBE_CLUSTER.0,
                    DESCRIBE_CLUSTER.1,
                    DESCRIBE_CLUSTER.2,
                    &describe_cluster_request(1),
                )
                .expect("DescribeCluster");
            if response.controller_id == 1 && !response.brokers.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the quorum of one did not form: {response:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        describe_cluster(
            &mut d,
            &format!("127.0.0.1:{controller}"),
            &kafka.controller,
        );
        eprintln!("compared {} scenarios with Apache Kafka", d.compared.len());
        assert!(
            d.differences.is_empty(),
            "{} of {} scenarios answer otherwise than Apache Kafka:\n{}",
            d.differences.len(),
            d.compared.len(),
            d.differences.join("\n")
        );
    });
}
