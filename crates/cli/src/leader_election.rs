//! `tarn leader-election`: Kafka's kafka-leader-election.sh. Sends one
//! ElectLeaders request (any broker forwards it to the active controller)
//! for one partition (`--topic` with `--partition`), the partitions of a
//! JSON file (`--path-to-json-file`, `{"partitions":[{"topic":..,
//! "partition":..}]}`) or every partition (`--all-topic-partitions`), and
//! prints what Kafka's tool prints: the partitions elected, those whose
//! valid leader was already elected, and each failure. Failures go to
//! standard error and make the command exit non-zero.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::Value;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::elect_leaders::{
    ElectLeadersRequest, ElectLeadersResponse, ElectLeadersTopicPartitions,
};
use tarn_server::error_names::error_name;

use crate::cluster::{connect_bootstrap, TopicPartition};

/// ElectLeaders, version 2 (the first flexible one; Kafka 4 serves 0 to 2).
const ELECT_LEADERS: (i16, i16, i16) = (43, 2, 2);
/// How long the controller may take (Kafka's tool waits 30 seconds).
const ELECTION_TIMEOUT_MS: i32 = 30_000;

#[derive(Args)]
pub struct LeaderElectionArgs {
    /// host:port of a broker; several may be given, comma-separated.
    #[arg(long)]
    bootstrap_server: Option<String>,
    /// PREFERRED: move leadership to the first replica where it is not the
    /// leader; UNCLEAN: give leaderless partitions any live replica.
    #[arg(long)]
    election_type: Option<String>,
    /// The topic of the one partition to elect (with --partition).
    #[arg(long)]
    topic: Option<String>,
    /// The partition of --topic to elect.
    #[arg(long)]
    partition: Option<i32>,
    /// Elect every partition that the election type applies to.
    #[arg(long)]
    all_topic_partitions: bool,
    /// A JSON file listing the partitions: {"partitions":[{"topic":"t","partition":0}]}.
    #[arg(long)]
    path_to_json_file: Option<PathBuf>,
}

/// The election type Kafka's tool takes, in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ElectionType {
    Preferred,
    Unclean,
}

impl ElectionType {
    fn parse(text: &str) -> Result<ElectionType> {
        match text.to_ascii_uppercase().as_str() {
            "PREFERRED" => Ok(ElectionType::Preferred),
            "UNCLEAN" => Ok(ElectionType::Unclean),
            _ => bail!("Invalid election type {text}: expected PREFERRED or UNCLEAN"),
        }
    }

    fn id(self) -> i8 {
        match self {
            ElectionType::Preferred => 0,
            ElectionType::Unclean => 1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ElectionType::Preferred => "PREFERRED",
            ElectionType::Unclean => "UNCLEAN",
        }
    }
}

/// What to send: the bootstrap servers, the type, and the partitions
/// (`None` for every partition).
struct Plan {
    bootstrap: String,
    election: ElectionType,
    partitions: Option<BTreeSet<TopicPartition>>,
}

/// Kafka's option checks, with its messages.
fn plan(args: LeaderElectionArgs) -> Result<Plan> {
    let mut missing = Vec::new();
    if args.bootstrap_server.is_none() {
        missing.push("bootstrap-server");
    }
    if args.election_type.is_none() {
        missing.push("election-type");
    }
    let (Some(bootstrap), Some(election)) = (args.bootstrap_server, args.election_type) else {
        bail!("Missing required option(s): {}", missing.join(", "));
    };
    let chosen = [
        args.topic.is_some(),
        args.all_topic_partitions,
        args.path_to_json_file.is_some(),
    ];
    if chosen.iter().filter(|c| **c).count() != 1 {
        bail!("One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file");
    }
    let partitions = match (args.topic, args.partition, args.path_to_json_file) {
        (Some(_), None, _) => bail!("Missing required option(s): partition"),
        (None, Some(_), _) => bail!("Option partition is only allowed if topic is used"),
        (Some(topic), Some(partition), _) => Some(BTreeSet::from([(topic, partition)])),
        (None, None, Some(path)) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("read {}", path.display()))?;
            Some(parse_election_data(&text)?)
        }
        (None, None, None) => None,
    };
    Ok(Plan {
        bootstrap,
        election: ElectionType::parse(&election)?,
        partitions,
    })
}

/// The partitions of a `--path-to-json-file` file, refused as Kafka's tool
/// refuses it: empty, without "partitions", or naming a partition twice.
fn parse_election_data(text: &str) -> Result<BTreeSet<TopicPartition>> {
    if text.trim().is_empty() {
        bail!("Replica election data is empty");
    }
    let value: Value = serde_json::from_str(text).context("parse the replica election data")?;
    let Some(list) = value.get("partitions") else {
        bail!("Replica election data is missing \"partitions\" field");
    };
    let Some(list) = list.as_array() else {
        bail!("Replica election data: \"partitions\" is not an array");
    };
    let mut partitions = BTreeSet::new();
    let mut duplicates = BTreeSet::new();
    for entry in list {
        let topic = entry.get("topic").and_then(Value::as_str);
        let partition = entry
            .get("partition")
            .and_then(Value::as_i64)
            .and_then(|p| i32::try_from(p).ok());
        let (Some(topic), Some(partition)) = (topic, partition) else {
            bail!("Replica election data: {entry} needs a string \"topic\" and an integer \"partition\"");
        };
        let key = (topic.to_owned(), partition);
        if !partitions.insert(key.clone()) {
            duplicates.insert(key);
        }
    }
    if !duplicates.is_empty() {
        bail!(
            "Replica election data contains duplicate partitions: [{}]",
            names(&duplicates)
        );
    }
    Ok(partitions)
}

/// Kafka's `TopicPartition` form, `topic-partition`, comma-separated.
fn names<'a>(partitions: impl IntoIterator<Item = &'a TopicPartition>) -> String {
    partitions
        .into_iter()
        .map(|(t, p)| format!("{t}-{p}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn request(plan: &Plan) -> ElectLeadersRequest {
    let topic_partitions = plan.partitions.as_ref().map(|partitions| {
        let mut topics: Vec<ElectLeadersTopicPartitions> = Vec::new();
        for (topic, partition) in partitions {
            match topics.last_mut().filter(|t| t.topic == *topic) {
                Some(t) => t.partitions.push(*partition),
                None => topics.push(ElectLeadersTopicPartitions {
                    topic: topic.clone(),
                    partitions: vec![*partition],
                }),
            }
        }
        topics
    });
    ElectLeadersRequest {
        election_type: plan.election.id(),
        topic_partitions,
        timeout_ms: ELECTION_TIMEOUT_MS,
    }
}

/// What the tool prints for a response: lines for standard output, lines
/// for standard error, and how many partitions failed.
#[derive(Debug, PartialEq, Eq)]
struct Report {
    out: Vec<String>,
    err: Vec<String>,
    failed: usize,
}

fn report(election: ElectionType, response: &ElectLeadersResponse) -> Result<Report> {
    if response.error_code != error::NONE {
        let message = response
            .replica_election_results
            .iter()
            .flat_map(|t| &t.partition_result)
            .find_map(|p| p.error_message.clone())
            .unwrap_or_default();
        bail!(
            "Leader election failed: {} ({}): {message}",
            error_name(response.error_code),
            response.error_code
        );
    }
    let mut elected = BTreeSet::new();
    let mut not_needed = BTreeSet::new();
    let mut failed: Vec<(TopicPartition, ErrorCode, String)> = Vec::new();
    for topic in &response.replica_election_results {
        for p in &topic.partition_result {
            let key = (topic.topic.clone(), p.partition_id);
            match p.error_code {
                error::NONE => {
                    elected.insert(key);
                }
                error::ELECTION_NOT_NEEDED => {
                    not_needed.insert(key);
                }
                code => failed.push((key, code, p.error_message.clone().unwrap_or_default())),
            }
        }
    }
    failed.sort();
    let mut out = Vec::new();
    if !elected.is_empty() {
        out.push(format!(
            "Successfully completed leader election ({}) for partitions {}",
            election.name(),
            names(&elected)
        ));
    }
    if !not_needed.is_empty() {
        out.push(format!(
            "Valid replica already elected for partitions {}",
            names(&not_needed)
        ));
    }
    let err = failed
        .iter()
        .map(|((topic, partition), code, message)| {
            format!(
                "Error completing leader election ({}) for partition: {topic}-{partition}: {} ({code}): {message}",
                election.name(),
                error_name(*code),
            )
        })
        .collect();
    Ok(Report {
        out,
        err,
        failed: failed.len(),
    })
}

pub fn run(args: LeaderElectionArgs) -> Result<()> {
    let plan = plan(args)?;
    let mut client = connect_bootstrap(&plan.bootstrap)?;
    let (key, version, flexible_min) = ELECT_LEADERS;
    let response: ElectLeadersResponse = client
        .call(key, version, flexible_min, &request(&plan))
        .context("send ElectLeaders")?;
    let report = report(plan.election, &response)?;
    for line in &report.out {
        println!("{line}");
    }
    for line in &report.err {
        eprintln!("{line}");
    }
    if report.failed > 0 {
        bail!("{} replica(s) could not be elected", report.failed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::elect_leaders::{
        ElectLeadersPartitionResult, ReplicaElectionResult,
    };

    use super::*;

    fn args() -> LeaderElectionArgs {
        LeaderElectionArgs {
            bootstrap_server: Some("127.0.0.1:9092".into()),
            election_type: Some("preferred".into()),
            topic: None,
            partition: None,
            all_topic_partitions: false,
            path_to_json_file: None,
        }
    }

    fn refusal(args: LeaderElectionArgs) -> String {
        match plan(args) {
            Ok(_) => panic!("the options were accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn options_are_checked_with_kafkas_messages() {
        assert_eq!(
            refusal(LeaderElectionArgs {
                bootstrap_server: None,
                election_type: None,
                ..args()
            }),
            "Missing required option(s): bootstrap-server, election-type"
        );
        assert_eq!(
            refusal(args()),
            "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"
        );
        assert_eq!(
            refusal(LeaderElectionArgs {
                topic: Some("t".into()),
                all_topic_partitions: true,
                ..args()
            }),
            "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"
        );
        assert_eq!(
            refusal(LeaderElectionArgs {
                topic: Some("t".into()),
                ..args()
            }),
            "Missing required option(s): partition"
        );
        assert_eq!(
            refusal(LeaderElectionArgs {
                partition: Some(0),
                all_topic_partitions: true,
                ..args()
            }),
            "Option partition is only allowed if topic is used"
        );
        assert_eq!(
            refusal(LeaderElectionArgs {
                election_type: Some("dirty".into()),
                all_topic_partitions: true,
                ..args()
            }),
            "Invalid election type dirty: expected PREFERRED or UNCLEAN"
        );
        let every = plan(LeaderElectionArgs {
            election_type: Some("UNCLEAN".into()),
            all_topic_partitions: true,
            ..args()
        })
        .unwrap();
        assert_eq!(every.election, ElectionType::Unclean);
        assert_eq!(request(&every).topic_partitions, None);
        assert_eq!(request(&every).election_type, 1);
    }

    #[test]
    fn the_json_file_lists_partitions_once_each() {
        let parsed = parse_election_data(
            r#"{"partitions":[{"topic":"b","partition":1},{"topic":"a","partition":2},{"topic":"b","partition":0}]}"#,
        )
        .unwrap();
        let plan = Plan {
            bootstrap: String::new(),
            election: ElectionType::Preferred,
            partitions: Some(parsed),
        };
        let topics: Vec<(String, Vec<i32>)> = request(&plan)
            .topic_partitions
            .unwrap()
            .into_iter()
            .map(|t| (t.topic, t.partitions))
            .collect();
        assert_eq!(
            topics,
            [("a".to_owned(), vec![2]), ("b".to_owned(), vec![0, 1])]
        );
        let duplicate = parse_election_data(
            r#"{"partitions":[{"topic":"a","partition":2},{"topic":"a","partition":2}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            duplicate.to_string(),
            "Replica election data contains duplicate partitions: [a-2]"
        );
        assert_eq!(
            parse_election_data(r#"{"topics":[]}"#)
                .unwrap_err()
                .to_string(),
            "Replica election data is missing \"partitions\" field"
        );
        assert_eq!(
            parse_election_data("  ").unwrap_err().to_string(),
            "Replica election data is empty"
        );
        assert!(parse_election_data(r#"{"partitions":[{"topic":"a"}]}"#).is_err());
    }

    fn result(
        partition_id: i32,
        code: ErrorCode,
        message: Option<&str>,
    ) -> ElectLeadersPartitionResult {
        ElectLeadersPartitionResult {
            partition_id,
            error_code: code,
            error_message: message.map(str::to_owned),
        }
    }

    #[test]
    fn the_report_says_what_kafkas_tool_says() {
        let response = ElectLeadersResponse {
            throttle_time_ms: 0,
            error_code: 0,
            replica_election_results: vec![ReplicaElectionResult {
                topic: "t".into(),
                partition_result: vec![
                    result(1, error::NONE, None),
                    result(0, error::NONE, None),
                    result(
                        2,
                        error::ELECTION_NOT_NEEDED,
                        Some("Leader election not needed for topic partition."),
                    ),
                    result(
                        3,
                        error::PREFERRED_LEADER_NOT_AVAILABLE,
                        Some("The preferred leader was not available."),
                    ),
                ],
            }],
        };
        let printed = report(ElectionType::Preferred, &response).unwrap();
        assert_eq!(
            printed,
            Report {
                out: vec![
                    "Successfully completed leader election (PREFERRED) for partitions t-0, t-1".into(),
                    "Valid replica already elected for partitions t-2".into(),
                ],
                err: vec![
                    "Error completing leader election (PREFERRED) for partition: t-3: PREFERRED_LEADER_NOT_AVAILABLE (80): The preferred leader was not available.".into()
                ],
                failed: 1,
            }
        );
        let refused = ElectLeadersResponse {
            error_code: error::INVALID_REQUEST,
            ..response
        };
        assert!(report(ElectionType::Preferred, &refused).is_err());
    }
}
