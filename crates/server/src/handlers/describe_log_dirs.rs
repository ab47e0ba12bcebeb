//! DescribeLogDirs: this broker's data directory, the size of each hosted
//! partition's segments in it, and the size and free space of the volume
//! (kafka-log-dirs.sh, AdminClient describeLogDirs, the topic views of
//! Kafka UIs). Tarn keeps one data directory per broker, so there is one
//! result. A leader has no lag behind itself: `offset_lag` is 0, and no
//! partition has a "future" log (AlterReplicaLogDirs does not exist here).
//! Kafka 4.0 removed v0 (KIP-896), but Tarn keeps serving it: kafka-python
//! 2.3's `describe_log_dirs` speaks only v0, and v0 has v1's layout.
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use tarn_protocol::error;
use tarn_protocol::messages::describe_log_dirs::{
    DescribeLogDirsPartition, DescribeLogDirsRequest, DescribeLogDirsResponse,
    DescribeLogDirsResult, DescribeLogDirsTopic,
};

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;

pub const KEY: i16 = 35;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "DescribeLogDirs",
    min_version: 0,
    // v5 (KIP-1066) says whether a directory is cordoned (takes no new
    // partitions); Tarn cannot cordon its one directory, so never.
    max_version: 5,
    flexible_min: 2,
};

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let wanted = |topic: &str, index: i32| match &request.topics {
        None => true,
        Some(topics) => topics
            .iter()
            .any(|t| t.topic == topic && t.partitions.contains(&index)),
    };
    let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for partition in broker.replicas.partitions() {
        if !wanted(&partition.topic, partition.index) {
            continue;
        }
        // A partition closed by a concurrent deletion is no longer here.
        let Ok(size) = partition.with_log_ref(|log| log.size_bytes()) else {
            continue;
        };
        topics
            .entry(partition.topic.clone())
            .or_default()
            .push(DescribeLogDirsPartition {
                partition_index: partition.index,
                partition_size: i64::try_from(size).unwrap_or(i64::MAX),
                offset_lag: 0,
                is_future_key: false,
            });
    }
    let topics = topics
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition_index);
            DescribeLogDirsTopic { name, partitions }
        })
        .collect();
    let (total_bytes, usable_bytes) = volume_bytes(&broker.data_dir);
    DescribeLogDirsResponse {
        throttle_time_ms: 0,
        error_code: error::NONE,
        results: vec![DescribeLogDirsResult {
            error_code: error::NONE,
            log_dir: std::path::absolute(&broker.data_dir)
                .unwrap_or_else(|_| broker.data_dir.clone())
                .display()
                .to_string(),
            topics,
            total_bytes,
            usable_bytes,
            is_cordoned: false,
        }],
    }
}

/// (total, usable by this process) bytes of the volume holding `dir`, or
/// Kafka's -1 for "unknown" when the OS cannot say (a simulated file
/// system, say).
fn volume_bytes(dir: &Path) -> (i64, i64) {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return (-1, -1);
    };
    // SAFETY: `path` is a valid C string and `stats` is written by the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        tracing::debug!(dir = %dir.display(), error = %std::io::Error::last_os_error(), "statvfs");
        return (-1, -1);
    }
    let block = stats.f_frsize as i64;
    let total = (stats.f_blocks as i64).saturating_mul(block);
    let usable = (stats.f_bavail as i64).saturating_mul(block);
    (total, usable)
}

#[cfg(test)]
mod tests {
    use tarn_protocol::messages::describe_log_dirs::DescribableLogDirTopic;
    use tarn_protocol::record_batch::build_batch_for_tests;

    use super::*;

    #[tokio::test]
    async fn sizes_by_partition_and_the_volume() {
        let dir = tempfile::tempdir().unwrap();
        let broker = crate::testing::broker_with_topic(dir.path(), "sized", 3);
        let batch = build_batch_for_tests(0, 10, 1_000);
        crate::testing::append_now(&broker.replicas.get("sized", 2).unwrap(), &batch);
        let ctx = crate::testing::request_context(&SPEC, 4);
        let only = |partitions: Vec<i32>| DescribeLogDirsRequest {
            topics: Some(vec![DescribableLogDirTopic {
                topic: "sized".into(),
                partitions,
            }]),
        };
        let response = handle(&broker, &ctx, only(vec![2, 0, 7])).await;
        let result = &response.results[0];
        assert_eq!(result.log_dir, dir.path().display().to_string());
        assert!(result.total_bytes > 0 && (0..=result.total_bytes).contains(&result.usable_bytes));
        assert_eq!(result.topics.len(), 1);
        let sizes: Vec<(i32, i64)> = result.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.partition_size))
            .collect();
        assert_eq!(
            sizes,
            vec![(0, 0), (2, batch.len() as i64)],
            "asked for 0, 2 and 7"
        );

        let all = handle(&broker, &ctx, DescribeLogDirsRequest { topics: None }).await;
        let partitions: usize = all.results[0]
            .topics
            .iter()
            .map(|t| t.partitions.len())
            .sum();
        assert_eq!(partitions, 3);
        broker.shutdown().unwrap();
    }
}
