//! `tarn log-dirs --describe`: Kafka's kafka-log-dirs.sh. Asks the broker
//! for its log directories (DescribeLogDirs) and prints Kafka's two status
//! lines, then one line of JSON in Kafka's layout: each broker's
//! directories with every partition's size in bytes, its offset lag and
//! whether it is a future log. `--topic-list` keeps only those topics.

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use tarn_protocol::messages::describe_log_dirs::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use tarn_server::error_names::error_name;

use crate::cluster::{connect_bootstrap, metadata};

/// DescribeLogDirs, version 1: the layout every broker since Kafka 1.1
/// answers (the last before flexible versions).
const DESCRIBE_LOG_DIRS: (i16, i16, i16) = (35, 1, 2);

#[derive(Args)]
pub struct LogDirsArgs {
    /// Describe the log directories (the only action, as in Kafka's tool).
    #[arg(long)]
    describe: bool,
    #[arg(long)]
    bootstrap_server: String,
    /// Comma-separated topics to show; all topics when absent.
    #[arg(long)]
    topic_list: Option<String>,
}

pub fn run(args: LogDirsArgs) -> Result<()> {
    if !args.describe {
        bail!("Exactly one of the actions should be specified: --describe");
    }
    let topics: Option<Vec<String>> = args.topic_list.as_deref().map(|list| {
        list.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    });
    let brokers = metadata(&args.bootstrap_server, None, false)?.brokers;
    println!("Querying brokers for log directories information");
    let mut described = Vec::new();
    for broker in &brokers {
        let address = format!("{}:{}", broker.host, broker.port);
        let mut client = connect_bootstrap(&address)?;
        let (key, version, flexible_min) = DESCRIBE_LOG_DIRS;
        let response: DescribeLogDirsResponse = client.call(
            key,
            version,
            flexible_min,
            &DescribeLogDirsRequest { topics: None },
        )?;
        described.push((broker.node_id, response));
    }
    let ids: Vec<String> = described.iter().map(|(id, _)| id.to_string()).collect();
    println!(
        "Received log directory information from brokers {}",
        ids.join(",")
    );
    println!("{}", to_json(&described, topics.as_deref()));
    Ok(())
}

/// Kafka's JSON: `{"brokers":[{"broker":N,"logDirs":[...]}],"version":1}`.
fn to_json(described: &[(i32, DescribeLogDirsResponse)], topics: Option<&[String]>) -> String {
    let shown = |name: &str| topics.is_none_or(|t| t.iter().any(|t| t == name));
    let brokers: Vec<serde_json::Value> = described
        .iter()
        .map(|(id, response)| {
            let dirs: Vec<serde_json::Value> = response
                .results
                .iter()
                .map(|dir| {
                    let partitions: Vec<serde_json::Value> = dir
                        .topics
                        .iter()
                        .filter(|t| shown(&t.name))
                        .flat_map(|t| {
                            t.partitions.iter().map(move |p| {
                                json!({
                                    "partition": format!("{}-{}", t.name, p.partition_index),
                                    "size": p.partition_size,
                                    "offsetLag": p.offset_lag,
                                    "isFuture": p.is_future_key,
                                })
                            })
                        })
                        .collect();
                    let error = (dir.error_code != 0).then(|| error_name(dir.error_code));
                    json!({"partitions": partitions, "error": error, "logDir": dir.log_dir})
                })
                .collect();
            json!({"broker": id, "logDirs": dirs})
        })
        .collect();
    json!({"brokers": brokers, "version": 1}).to_string()
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::describe_log_dirs::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };

    use super::*;

    #[test]
    fn prints_kafkas_json_and_filters_topics() {
        let partition = |index, size| DescribeLogDirsPartition {
            partition_index: index,
            partition_size: size,
            offset_lag: 0,
            is_future_key: false,
        };
        let response = DescribeLogDirsResponse {
            throttle_time_ms: 0,
            error_code: 0,
            results: vec![DescribeLogDirsResult {
                error_code: 0,
                log_dir: "/data".into(),
                topics: vec![
                    DescribeLogDirsTopic {
                        name: "a".into(),
                        partitions: vec![partition(0, 10), partition(1, 0)],
                    },
                    DescribeLogDirsTopic {
                        name: "b".into(),
                        partitions: vec![partition(0, 7)],
                    },
                ],
                total_bytes: -1,
                usable_bytes: -1,
                is_cordoned: false,
            }],
        };
        let described = [(1, response)];
        let only_b = to_json(&described, Some(&["b".to_owned()]));
        assert_eq!(
            only_b,
            r#"{"brokers":[{"broker":1,"logDirs":[{"error":null,"logDir":"/data","partitions":[{"isFuture":false,"offsetLag":0,"partition":"b-0","size":7}]}]}],"version":1}"#
        );
        let all: serde_json::Value = serde_json::from_str(&to_json(&described, None)).unwrap();
        assert_eq!(
            all["brokers"][0]["logDirs"][0]["partitions"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}
