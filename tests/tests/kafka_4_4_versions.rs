//! The behaviour of the API versions Tarn serves to match Kafka 4.4: each
//! newest version is sent by hand through Tarn's own codec to the real
//! binary, and its answer checked against what Kafka 4.4 does.

use tarn_cli::client::Client;
use tarn_e2e::wire::{self, produce};
use tarn_e2e::{run_with_timeout, TarnBroker, TEST_TIMEOUT};
use tarn_protocol::error;
use tarn_protocol::messages::list_offsets::*;
use tarn_protocol::messages::metadata::*;
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
