//! AlterReplicaLogDirs (KIP-113): a Tarn broker has one log directory, so
//! the only move it can make is to where a replica already is. For each
//! partition: NONE when the path is this broker's data directory and the
//! replica is here (nothing to move); REPLICA_NOT_AVAILABLE when it is not
//! here yet (a reassignment is adding it: kafka-reassign-partitions.sh
//! asks again until it is); LOG_DIR_NOT_FOUND for any other path;
//! UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
use std::path::Path;
use std::sync::Arc;

use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::messages::alter_replica_log_dirs::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult, AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 34;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "AlterReplicaLogDirs",
    min_version: 1,
    max_version: 2,
    flexible_min: 2,
};

/// Whether `path` names the directory `data_dir` (as DescribeLogDirs
/// reports it, absolute, or any spelling that resolves to it).
fn is_data_dir(path: &str, data_dir: &Path) -> bool {
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        // Unresolvable (gone, or no permission): only the exact spelling.
        _ => a == b,
    };
    same(Path::new(path), data_dir)
}

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    let image = broker.metadata.image();
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for dir in &request.dirs {
        let ours = is_data_dir(&dir.path, &broker.data_dir);
        for topic in &dir.topics {
            let known = image.topic(&topic.name);
            let partitions = topic.partitions.iter().map(|index| {
                let code: ErrorCode = match known {
                    _ if !ours => error::LOG_DIR_NOT_FOUND,
                    None => error::UNKNOWN_TOPIC_OR_PARTITION,
                    Some(t) if !t.partitions.iter().any(|p| p.partition_id == *index) => {
                        error::UNKNOWN_TOPIC_OR_PARTITION
                    }
                    Some(_) if broker.replicas.get(&topic.name, *index).is_some() => error::NONE,
                    Some(_) => error::REPLICA_NOT_AVAILABLE,
                };
                AlterReplicaLogDirPartitionResult {
                    partition_index: *index,
                    error_code: code,
                }
            });
            let partitions: Vec<_> = partitions.collect();
            match results.iter_mut().find(|r| r.topic_name == topic.name) {
                Some(r) => r.partitions.extend(partitions),
                None => results.push(AlterReplicaLogDirTopicResult {
                    topic_name: topic.name.clone(),
                    partitions,
                }),
            }
        }
    }
    AlterReplicaLogDirsResponse {
        throttle_time_ms: 0,
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::messages::alter_replica_log_dirs::{
        AlterReplicaLogDir, AlterReplicaLogDirTopic,
    };

    fn ask(path: &str, topic: &str, partitions: &[i32]) -> AlterReplicaLogDirsRequest {
        AlterReplicaLogDirsRequest {
            dirs: vec![AlterReplicaLogDir {
                path: path.into(),
                topics: vec![AlterReplicaLogDirTopic {
                    name: topic.into(),
                    partitions: partitions.to_vec(),
                }],
            }],
        }
    }

    fn codes(response: &AlterReplicaLogDirsResponse) -> Vec<(String, i32, i16)> {
        response
            .results
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_name.clone(), p.partition_index, p.error_code))
            })
            .collect()
    }

    #[tokio::test]
    async fn only_the_data_directory_a_replica_is_in_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "t", 2);
        let ctx = crate::testing::request_context(&SPEC, 2);
        let here = std::path::absolute(&broker.data_dir)
            .unwrap()
            .display()
            .to_string();
        let answer = handle(&broker, &ctx, ask(&here, "t", &[0, 1, 7])).await;
        assert_eq!(
            codes(&answer),
            [
                ("t".to_string(), 0, error::NONE),
                ("t".to_string(), 1, error::NONE),
                ("t".to_string(), 7, error::UNKNOWN_TOPIC_OR_PARTITION),
            ]
        );
        let answer = handle(&broker, &ctx, ask("/elsewhere", "t", &[0])).await;
        assert_eq!(
            codes(&answer),
            [("t".to_string(), 0, error::LOG_DIR_NOT_FOUND)]
        );
        let answer = handle(&broker, &ctx, ask(&here, "gone", &[0])).await;
        assert_eq!(
            codes(&answer),
            [("gone".to_string(), 0, error::UNKNOWN_TOPIC_OR_PARTITION)]
        );
    }
}
