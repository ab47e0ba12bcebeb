//! The behaviour of the API versions Tarn serves to match Kafka 4.4: each
//! newest version is sent by hand through Tarn's own codec to the real
//! binary, and its answer checked against what Kafka 4.4 does.

use tarn_cli::client::Client;
use tarn_e2e::wire::{self, produce};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;
use tarn_protocol::messages::delete_groups::*;
use tarn_protocol::messages::describe_cluster::*;
use tarn_protocol::messages::describe_groups::*;
use tarn_protocol::messages::describe_log_dirs::*;
use tarn_protocol::messages::find_coordinator::*;
use tarn_protocol::messages::init_producer_id::*;
use tarn_protocol::messages::list_groups::*;
use tarn_protocol::messages::list_offsets::*;
use tarn_protocol::messages::metadata::*;
use tarn_protocol::messages::offset_commit::*;
use tarn_protocol::messages::offset_fetch::*;
use tarn_protocol::Uuid;

const TOPIC: &str = "versions";

/// The topic's id, from Metadata v13 (whose new top-level error is NONE).
fn topic_id(client: &mut Client, topic: &str) -> Uuid {
    let request = MetadataRequest {
        topics: Some(vec![MetadataRequestTopic {
            topic_id: Uuid::ZERO,
            name: Some(topic.into()),
        }]),
        ..Default::default()
    };
    let response: MetadataResponse = client.call(3, 13, 9, &request).unwrap();
    assert_eq!(response.error_code, error::NONE);
    assert_eq!(response.topics[0].error_code, error::NONE);
    response.topics[0].topic_id
}

/// One partition's answer to a ListOffsets of partition 0 at `version`.
fn list_offset(client: &mut Client, version: i16, timestamp: i64) -> ListOffsetsPartitionResponse {
    let request = ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: vec![ListOffsetsTopic {
            name: TOPIC.into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 0,
                current_leader_epoch: -1,
                timestamp,
                max_num_offsets: 1,
            }],
        }],
        timeout_ms: 1000,
    };
    let response: ListOffsetsResponse = client.call(2, version, 6, &request).unwrap();
    response.topics[0].partitions[0].clone()
}

#[test]
fn list_offsets_tiered_timestamps_answer_as_without_tiered_storage() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic(TOPIC, 1);
        let mut client = Client::connect(broker.bootstrap()).unwrap();
        assert!(!topic_id(&mut client, TOPIC).is_zero(), "Metadata v13");
        let appended = produce(&mut client, TOPIC, 0, wire::batch(5, 1_000, b"v"));
        assert_eq!(appended.error_code, error::NONE);

        let earliest = list_offset(&mut client, 11, EARLIEST_TIMESTAMP);
        assert_eq!((earliest.error_code, earliest.offset), (error::NONE, 0));
        // Everything is local, so the earliest local offset is the earliest.
        let local = list_offset(&mut client, 11, EARLIEST_LOCAL_TIMESTAMP);
        assert_eq!(
            (local.error_code, local.timestamp, local.offset),
            (error::NONE, -1, earliest.offset)
        );
        // Nothing is tiered: Kafka answers no offset and no epoch.
        for timestamp in [LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP] {
            let none = list_offset(&mut client, 11, timestamp);
            assert_eq!(
                (
                    none.error_code,
                    none.timestamp,
                    none.offset,
                    none.leader_epoch
                ),
                (error::NONE, -1, -1, -1),
                "timestamp {timestamp}"
            );
        }
        let latest = list_offset(&mut client, 11, LATEST_TIMESTAMP);
        assert_eq!((latest.error_code, latest.offset), (error::NONE, 5));
        // A special timestamp newer than the request's version is refused.
        for (version, timestamp) in [
            (7, EARLIEST_LOCAL_TIMESTAMP),
            (8, LATEST_TIERED_TIMESTAMP),
            (10, EARLIEST_PENDING_UPLOAD_TIMESTAMP),
        ] {
            assert_eq!(
                list_offset(&mut client, version, timestamp).error_code,
                error::UNSUPPORTED_VERSION,
                "timestamp {timestamp} at v{version}"
            );
        }
    });
}

fn commit_v10(client: &mut Client, group: &str, topic_id: Uuid, offset: i64) -> i16 {
    let request = OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: -1,
        member_id: String::new(),
        group_instance_id: None,
        retention_time_ms: -1,
        topics: vec![OffsetCommitRequestTopic {
            name: String::new(),
            topic_id,
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: 0,
                committed_offset: offset,
                committed_leader_epoch: -1,
                commit_timestamp: -1,
                committed_metadata: Some("m".into()),
            }],
        }],
    };
    let response: OffsetCommitResponse = client.call(8, 10, 8, &request).unwrap();
    assert_eq!(response.topics[0].topic_id, topic_id, "answered by id");
    response.topics[0].partitions[0].error_code
}

fn fetch_v10(
    client: &mut Client,
    group: &str,
    topics: Option<Vec<OffsetFetchRequestTopic>>,
) -> OffsetFetchResponseGroup {
    let request = OffsetFetchRequest {
        groups: vec![OffsetFetchRequestGroup {
            group_id: group.into(),
            member_id: None,
            member_epoch: -1,
            topics,
        }],
        require_stable: false,
        ..Default::default()
    };
    let response: OffsetFetchResponse = client.call(9, 10, 6, &request).unwrap();
    response.groups.into_iter().next().expect("one group")
}

#[test]
fn offset_commit_and_fetch_v10_name_topics_by_id() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic(TOPIC, 1);
        let mut client = Client::connect(broker.bootstrap()).unwrap();
        let id = topic_id(&mut client, TOPIC);
        let unknown = Uuid([7; 16]);

        assert_eq!(commit_v10(&mut client, "by-id", id, 42), error::NONE);
        assert_eq!(
            commit_v10(&mut client, "by-id", unknown, 1),
            error::UNKNOWN_TOPIC_ID
        );

        let asked = fetch_v10(
            &mut client,
            "by-id",
            Some(vec![
                OffsetFetchRequestTopic {
                    name: String::new(),
                    topic_id: id,
                    partition_indexes: vec![0],
                },
                OffsetFetchRequestTopic {
                    name: String::new(),
                    topic_id: unknown,
                    partition_indexes: vec![0, 1],
                },
            ]),
        );
        assert_eq!(asked.error_code, error::NONE);
        assert_eq!(asked.topics.len(), 2);
        assert_eq!(asked.topics[0].topic_id, id);
        let p = &asked.topics[0].partitions[0];
        assert_eq!((p.error_code, p.committed_offset), (error::NONE, 42));
        assert_eq!(asked.topics[1].topic_id, unknown);
        let codes: Vec<i16> = asked.topics[1]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, vec![error::UNKNOWN_TOPIC_ID; 2]);

        // Every committed offset, named by id.
        let all = fetch_v10(&mut client, "by-id", None);
        assert_eq!(all.error_code, error::NONE);
        assert_eq!(all.topics.len(), 1);
        assert_eq!(all.topics[0].topic_id, id);
        assert_eq!(all.topics[0].partitions[0].committed_offset, 42);

        // The same offset read by name at v9.
        let request = OffsetFetchRequest {
            groups: vec![OffsetFetchRequestGroup {
                group_id: "by-id".into(),
                member_id: None,
                member_epoch: -1,
                topics: Some(vec![OffsetFetchRequestTopic {
                    name: TOPIC.into(),
                    topic_id: Uuid::ZERO,
                    partition_indexes: vec![0],
                }]),
            }],
            ..Default::default()
        };
        let v9: OffsetFetchResponse = client.call(9, 9, 6, &request).unwrap();
        assert_eq!(v9.groups[0].topics[0].name, TOPIC);
        assert_eq!(v9.groups[0].topics[0].partitions[0].committed_offset, 42);
    });
}

fn list_groups(client: &mut Client, states: &[&str], types: &[&str]) -> Vec<ListedGroup> {
    let request = ListGroupsRequest {
        states_filter: states.iter().map(|s| (*s).to_owned()).collect(),
        types_filter: types.iter().map(|s| (*s).to_owned()).collect(),
    };
    let response: ListGroupsResponse = client.call(16, 5, 3, &request).unwrap();
    assert_eq!(response.error_code, error::NONE);
    response.groups
}

fn describe_group(client: &mut Client, version: i16, group: &str) -> DescribedGroup {
    let request = DescribeGroupsRequest {
        groups: vec![group.into()],
        include_authorized_operations: false,
    };
    let response: DescribeGroupsResponse = client.call(15, version, 5, &request).unwrap();
    response.groups.into_iter().next().expect("one group")
}

#[test]
fn group_apis_filter_by_type_and_report_missing_groups() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic(TOPIC, 1);
        let mut client = Client::connect(broker.bootstrap()).unwrap();
        let id = topic_id(&mut client, TOPIC);
        // A commit without membership makes an Empty classic group.
        assert_eq!(commit_v10(&mut client, "simple", id, 1), error::NONE);

        let all = list_groups(&mut client, &[], &[]);
        assert_eq!(all.len(), 1);
        assert_eq!(
            (
                all[0].group_id.as_str(),
                all[0].group_state.as_str(),
                all[0].group_type.as_str()
            ),
            ("simple", "Empty", "classic")
        );
        // Type and state filters, case-insensitive as in Kafka.
        assert_eq!(list_groups(&mut client, &[], &["Classic"]).len(), 1);
        assert_eq!(list_groups(&mut client, &["EMPTY"], &["classic"]).len(), 1);
        assert!(list_groups(&mut client, &[], &["consumer"]).is_empty());
        assert!(list_groups(&mut client, &[], &["share", "streams"]).is_empty());
        assert!(list_groups(&mut client, &["stable"], &["classic"]).is_empty());

        // DescribeGroups v6 names a missing group as an error; v5 does not.
        let missing = describe_group(&mut client, 6, "missing");
        assert_eq!(missing.error_code, error::GROUP_ID_NOT_FOUND);
        assert_eq!(
            missing.error_message.as_deref(),
            Some("Group missing not found.")
        );
        assert_eq!(missing.group_state, "Dead");
        let old = describe_group(&mut client, 5, "missing");
        assert_eq!(
            (old.error_code, old.group_state.as_str()),
            (error::NONE, "Dead")
        );
        let simple = describe_group(&mut client, 6, "simple");
        assert_eq!(
            (
                simple.error_code,
                simple.error_message,
                simple.group_state.as_str()
            ),
            (error::NONE, None, "Empty")
        );

        // DeleteGroups v3: per-group codes; Kafka 4.4 sets no message.
        let request = DeleteGroupsRequest {
            groups_names: vec!["simple".into(), "missing".into()],
        };
        let deleted: DeleteGroupsResponse = client.call(42, 3, 2, &request).unwrap();
        let results: Vec<(&str, i16, Option<&str>)> = deleted
            .results
            .iter()
            .map(|r| {
                (
                    r.group_id.as_str(),
                    r.error_code,
                    r.error_message.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            results,
            vec![
                ("simple", error::NONE, None),
                ("missing", error::GROUP_ID_NOT_FOUND, None)
            ]
        );
        assert!(list_groups(&mut client, &[], &[]).is_empty());
    });
}

fn find(client: &mut Client, version: i16, key_type: i8, key: &str) -> Coordinator {
    let request = FindCoordinatorRequest {
        key: String::new(),
        key_type,
        coordinator_keys: vec![key.into()],
    };
    let response: FindCoordinatorResponse = client.call(10, version, 3, &request).unwrap();
    response.coordinators.into_iter().next().expect("one key")
}

#[test]
fn cluster_apis_at_their_newest_versions() {
    run_with_timeout(TEST_TIMEOUT, || {
        let broker = TarnBroker::start();
        broker.create_topic(TOPIC, 1);
        let mut client = Client::connect(broker.bootstrap()).unwrap();

        // FindCoordinator v6: groups as before; no share coordinator here,
        // so a share key is refused as Kafka refuses one it cannot use.
        for version in [5, 6] {
            let group = find(&mut client, version, KEY_TYPE_GROUP, "g");
            assert_eq!(group.error_code, error::NONE, "v{version}");
            assert_eq!(group.node_id, 1);
        }
        let key = format!("g:{}:0", topic_id(&mut client, TOPIC));
        for version in [5, 6] {
            let share = find(&mut client, version, KEY_TYPE_SHARE, &key);
            assert_eq!(share.error_code, error::INVALID_REQUEST, "v{version}");
            assert_eq!(share.node_id, -1);
        }

        // DescribeCluster v2: asking for fenced brokers changes nothing,
        // since Tarn fences none.
        let request = DescribeClusterRequest {
            include_cluster_authorized_operations: false,
            endpoint_type: 1,
            include_fenced_brokers: true,
        };
        let cluster: DescribeClusterResponse = client.call(60, 2, 0, &request).unwrap();
        assert_eq!(cluster.error_code, error::NONE);
        assert_eq!(cluster.brokers.len(), 1);
        assert!(!cluster.brokers[0].is_fenced);

        // DescribeLogDirs v5: the one directory is not cordoned.
        let dirs: DescribeLogDirsResponse = client
            .call(35, 5, 2, &DescribeLogDirsRequest { topics: None })
            .unwrap();
        assert_eq!(dirs.results.len(), 1);
        let dir = &dirs.results[0];
        assert_eq!(dir.error_code, error::NONE);
        assert!(!dir.is_cordoned);
        assert!(dir.topics.iter().any(|t| t.name == TOPIC));

        // InitProducerId v5 hands out an idempotent producer id as v4 does.
        let request = InitProducerIdRequest {
            transactional_id: None,
            transaction_timeout_ms: 60_000,
            producer_id: -1,
            producer_epoch: -1,
        };
        let init: InitProducerIdResponse = client.call(22, 5, 2, &request).unwrap();
        assert_eq!(init.error_code, error::NONE);
        assert!(init.producer_id >= 0);
    });
}
