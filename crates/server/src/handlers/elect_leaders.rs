//! ElectLeaders: preferred (type 0) or unclean (type 1) leader elections,
//! planned by `tarn_metadata::elections` on the active controller (a
//! broker forwards the request there) and committed as one entry. Each
//! partition is answered NONE, ELECTION_NOT_NEEDED,
//! PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
//! UNKNOWN_TOPIC_OR_PARTITION; a null partition list elects every
//! partition and leaves out those that need no election. A request that
//! fails whole (an unknown election type, too many elections, a failed
//! commit) carries its code at the top (v1+) and on every partition it
//! named.
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::elect_leaders::{
    ElectLeadersPartitionResult, ElectLeadersRequest, ElectLeadersResponse, ReplicaElectionResult,
};

use tarn_metadata::elections::{self, ElectionError, ElectionType, PartitionElection};

use super::{ApiSpec, RequestContext};
use crate::broker::{Broker, BrokerError};

pub const KEY: i16 = 43;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "ElectLeaders",
    min_version: 0,
    max_version: 2,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: ElectLeadersRequest,
) -> ElectLeadersResponse {
    let named: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.clone(), *p)))
            .collect()
    });
    let outcome = match ElectionType::from_id(request.election_type) {
        Some(election) => elect(broker, election, named.as_deref()),
        None => Err(ElectionError {
            code: error::INVALID_REQUEST,
            message: format!("Unknown election type {}", request.election_type),
        }),
    };
    match outcome {
        Ok(results) => ElectLeadersResponse {
            throttle_time_ms: 0,
            error_code: error::NONE,
            replica_election_results: by_topic(results),
        },
        Err(e) => refused(&request, e),
    }
}

fn elect(
    broker: &Broker,
    election: ElectionType,
    named: Option<&[(String, i32)]>,
) -> Result<Vec<PartitionElection>, ElectionError> {
    let outcome = broker.commit_metadata(|image| -> Result<_, BrokerError> {
        let config = broker.config_view(image).effective();
        Ok(
            match elections::elect_leaders(image, &config, election, named) {
                Ok(outcome) => (outcome.records, Ok(outcome.results)),
                Err(e) => (Vec::new(), Err(e)),
            },
        )
    });
    match outcome {
        Ok(Ok(results)) => {
            let elected = results.iter().filter(|r| r.code == error::NONE).count();
            if elected > 0 {
                tracing::info!(election = election.name(), elected, "elected leaders");
            }
            Ok(results)
        }
        Ok(Err(e)) => Err(e),
        Err(e) => {
            tracing::error!(error = %e, "commit leader elections");
            Err(ElectionError {
                code: e.commit_error_code(),
                message: e.to_string(),
            })
        }
    }
}

/// The answers grouped by topic, topics in the order they first appear.
fn by_topic(results: Vec<PartitionElection>) -> Vec<ReplicaElectionResult> {
    let mut topics: Vec<ReplicaElectionResult> = Vec::new();
    for r in results {
        let answer = ElectLeadersPartitionResult {
            partition_id: r.partition_id,
            error_code: r.code,
            error_message: r.message,
        };
        match topics.iter_mut().find(|t| t.topic == r.topic) {
            Some(topic) => topic.partition_result.push(answer),
            None => topics.push(ReplicaElectionResult {
                topic: r.topic,
                partition_result: vec![answer],
            }),
        }
    }
    topics
}

/// Kafka's answer to a request that failed whole: the code at the top and
/// on every partition named.
fn refused(request: &ElectLeadersRequest, e: ElectionError) -> ElectLeadersResponse {
    let replica_election_results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| ReplicaElectionResult {
            topic: t.topic.clone(),
            partition_result: t
                .partitions
                .iter()
                .map(|p| ElectLeadersPartitionResult {
                    partition_id: *p,
                    error_code: e.code,
                    error_message: Some(e.message.clone()),
                })
                .collect(),
        })
        .collect();
    ElectLeadersResponse {
        throttle_time_ms: 0,
        error_code: e.code,
        replica_election_results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::messages::elect_leaders::ElectLeadersTopicPartitions;

    fn request(election_type: i8, partitions: Option<&[i32]>) -> ElectLeadersRequest {
        ElectLeadersRequest {
            election_type,
            topic_partitions: partitions.map(|p| {
                vec![ElectLeadersTopicPartitions {
                    topic: "t".into(),
                    partitions: p.to_vec(),
                }]
            }),
            timeout_ms: 1000,
        }
    }

    fn codes(response: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
        response
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result
                    .iter()
                    .map(|p| (t.topic.clone(), p.partition_id, p.error_code))
            })
            .collect()
    }

    #[tokio::test]
    async fn a_preferred_election_commits_the_new_leader() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 2);
        // Broker 2 joins, and t-0 prefers it though broker 1 leads.
        let topic_id = broker.metadata.image().topic("t").unwrap().topic_id;
        broker
            .commit_metadata(|_| {
                let records = vec![
                    tarn_metadata::MetadataRecord::RegisterBroker {
                        broker_id: 2,
                        host: "127.0.0.1".into(),
                        port: 9093,
                        rack: None,
                        incarnation_id: [2; 16],
                        broker_epoch: 0,
                        listeners: vec![],
                        fenced: false,
                    },
                    tarn_metadata::MetadataRecord::Partition {
                        topic_id: topic_id.0,
                        partition_id: 0,
                        replicas: vec![2, 1],
                        isr: vec![1, 2],
                        leader: 1,
                        leader_epoch: 0,
                        partition_epoch: 0,
                        adding_replicas: Vec::new(),
                        removing_replicas: Vec::new(),
                        elr: Vec::new(),
                        last_known_elr: Vec::new(),
                    },
                ];
                Ok((records, ()))
            })
            .unwrap();
        let ctx = crate::testing::request_context(&SPEC, 2);
        let response = handle(&broker, &ctx, request(0, Some(&[0, 1, 5]))).await;
        assert_eq!(response.error_code, error::NONE);
        assert_eq!(
            codes(&response),
            [
                ("t".into(), 0, error::NONE),
                ("t".into(), 1, error::ELECTION_NOT_NEEDED),
                ("t".into(), 5, error::UNKNOWN_TOPIC_OR_PARTITION),
            ]
        );
        let image = broker.metadata.image();
        let p = image.partition(&topic_id, 0).unwrap();
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (2, 1, 1));
        // Every partition: none needs an election now, so none is listed.
        let response = handle(&broker, &ctx, request(0, None)).await;
        assert_eq!(codes(&response), []);
        // Unclean elections are for leaderless partitions only.
        let response = handle(&broker, &ctx, request(1, Some(&[0]))).await;
        assert_eq!(
            codes(&response),
            [("t".into(), 0, error::ELECTION_NOT_NEEDED)]
        );
        let response = handle(&broker, &ctx, request(2, Some(&[0]))).await;
        assert_eq!(response.error_code, error::INVALID_REQUEST);
        assert_eq!(codes(&response), [("t".into(), 0, error::INVALID_REQUEST)]);
    }

    #[test]
    fn answers_are_grouped_by_topic_in_request_order() {
        let result = |topic: &str, partition_id, code| PartitionElection {
            topic: topic.into(),
            partition_id,
            code,
            message: None,
        };
        let grouped = by_topic(vec![
            result("b", 1, error::NONE),
            result("a", 0, error::ELECTION_NOT_NEEDED),
            result("b", 0, error::NONE),
        ]);
        let shape: Vec<(&str, Vec<i32>)> = grouped
            .iter()
            .map(|t| {
                (
                    t.topic.as_str(),
                    t.partition_result.iter().map(|p| p.partition_id).collect(),
                )
            })
            .collect();
        assert_eq!(shape, [("b", vec![1, 0]), ("a", vec![0])]);
    }

    #[test]
    fn a_request_refused_whole_names_the_code_on_every_partition() {
        let request = ElectLeadersRequest {
            election_type: 7,
            topic_partitions: Some(vec![ElectLeadersTopicPartitions {
                topic: "t".into(),
                partitions: vec![0, 1],
            }]),
            timeout_ms: 1000,
        };
        let response = refused(
            &request,
            ElectionError {
                code: error::INVALID_REQUEST,
                message: "Unknown election type 7".into(),
            },
        );
        assert_eq!(response.error_code, error::INVALID_REQUEST);
        let codes: Vec<(i32, i16)> = response.replica_election_results[0]
            .partition_result
            .iter()
            .map(|p| (p.partition_id, p.error_code))
            .collect();
        assert_eq!(
            codes,
            [(0, error::INVALID_REQUEST), (1, error::INVALID_REQUEST)]
        );
    }
}
