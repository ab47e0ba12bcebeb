//! Fetch: whole record batches from each requested partition, waiting up
//! to `max_wait_ms` for `min_bytes` of data. The wait is woken by appends
//! (the replica manager's data version), not by polling.
//!
//! Record data is never read into memory: each partition's records are a
//! file range of its segment, which the connection sends with sendfile(2)
//! after the bytes of the response before it.
//!
//! Limits follow Kafka (KIP-74): each partition returns at most
//! `partition_max_bytes` and the response at most `max_bytes`, except that
//! the first batch of the first partition with data is returned whole even
//! when it is larger, so a consumer can always make progress.
use std::sync::Arc;
use std::time::Duration;

use tarn_protocol::error;
use tarn_protocol::messages::fetch::{
    FetchRequest, FetchResponseOut, FetchableTopicResponseOut, PartitionDataOut,
};
use tarn_protocol::records::Records;

use super::{ApiSpec, RequestContext};
use crate::broker::Broker;
use crate::replica_manager::PartitionError;

pub const KEY: i16 = 1;
pub const SPEC: ApiSpec = ApiSpec {
    key: KEY,
    name: "Fetch",
    min_version: 4,
    max_version: 12,
    flexible_min: 12,
};

/// A bound on how long any fetch may wait, whatever the client asks.
const MAX_WAIT_MS_LIMIT: i32 = 60_000;

pub async fn handle(
    broker: &Arc<Broker>,
    _ctx: &RequestContext,
    request: FetchRequest,
) -> FetchResponseOut {
    let mut changes = broker.replicas.subscribe();
    let wait_ms = request.max_wait_ms.clamp(0, MAX_WAIT_MS_LIMIT) as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    loop {
        verify_on_blocking_thread(broker, &request).await;
        // Mark the current version seen before reading, so an append that
        // lands after this read wakes the wait below.
        changes.borrow_and_update();
        let (response, bytes, any_error) = read_all(broker, &request);
        let satisfied = bytes >= request.min_bytes.max(0) as usize || any_error;
        if satisfied || tokio::time::Instant::now() >= deadline {
            broker.metrics.fetched(&response);
            return response;
        }
        let _waiting = broker.metrics.fetch_waiting();
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) | Err(_) => {
                let response = read_all(broker, &request).0;
                broker.metrics.fetched(&response);
                return response;
            }
        }
    }
}

/// Runs the CRC checks the reads of `request` need (bytes of a segment
/// this process did not write, read for the first time: up to a whole
/// segment) on tokio's blocking pool, so they hold up neither the worker
/// thread that serves other connections nor the partitions' locks. A check
/// that fails is not reported here: the read that follows runs it again
/// and answers its error.
async fn verify_on_blocking_thread(broker: &Arc<Broker>, request: &FetchRequest) {
    let verifiers: Vec<_> = request
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (&t.topic, p)))
        .filter_map(|(topic, p)| {
            broker
                .replicas
                .get(topic, p.partition)?
                .verification_for(p.fetch_offset)
        })
        .collect();
    if verifiers.is_empty() {
        return;
    }
    let checks =
        tokio::task::spawn_blocking(move || verifiers.iter().filter(|v| v.run().is_err()).count());
    match checks.await {
        Ok(0) => {}
        Ok(failed) => tracing::debug!(
            failed,
            "segment checks failed; the reads will answer the errors"
        ),
        Err(e) => tracing::error!(error = %e, "segment check task failed"),
    }
}

fn read_all(broker: &Broker, request: &FetchRequest) -> (FetchResponseOut, usize, bool) {
    let read_committed = request.isolation_level == 1;
    let mut budget = request.max_bytes.max(0) as usize;
    let mut total = 0usize;
    let mut any_error = false;
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let limit = (p.partition_max_bytes.max(0) as usize).min(budget);
            let hosted = broker.replicas.get(&topic.topic, p.partition);
            let known = hosted.is_some();
            let result = hosted
                .ok_or_else(|| {
                    PartitionError::new(
                        error::UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.",
                    )
                })
                .and_then(|partition| {
                    partition.check_epoch(p.current_leader_epoch)?;
                    partition.read_region(p.fetch_offset, limit, total == 0)
                });
            let data = match result {
                Ok((region, offsets)) => {
                    let records = match region {
                        Some(region) => Records::file(region),
                        None => Records::default(),
                    };
                    total += records.len();
                    budget = budget.saturating_sub(records.len());
                    PartitionDataOut {
                        partition_index: p.partition,
                        error_code: error::NONE,
                        high_watermark: offsets.high_watermark,
                        last_stable_offset: offsets.high_watermark,
                        log_start_offset: offsets.log_start_offset,
                        // Kafka lists aborted transactions (none here: no
                        // transactions yet) only to read_committed fetches.
                        aborted_transactions: read_committed.then(Vec::new),
                        records: Some(records),
                        ..Default::default()
                    }
                }
                // As Kafka: an error carries no offsets (-1), and only a
                // partition it does not know gets an empty aborted list.
                Err(e) => {
                    any_error = true;
                    PartitionDataOut {
                        partition_index: p.partition,
                        error_code: e.code,
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        aborted_transactions: (!known).then(Vec::new),
                        records: Some(Records::default()),
                        ..Default::default()
                    }
                }
            };
            partitions.push(data);
        }
        responses.push(FetchableTopicResponseOut {
            topic: topic.topic.clone(),
            partitions,
            ..Default::default()
        });
    }
    let response = FetchResponseOut {
        throttle_time_ms: 0,
        error_code: error::NONE,
        session_id: 0,
        responses,
    };
    (response, total, any_error)
}
