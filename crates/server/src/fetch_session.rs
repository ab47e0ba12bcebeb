//! Fetch sessions (KIP-227): the broker remembers which partitions a
//! fetcher reads, so the fetcher's later requests name only the partitions
//! whose fetch position changed, and the broker's responses carry only the
//! partitions with something new (records, an error, a moved high watermark
//! or log start offset).
//!
//! A request's `(session_id, session_epoch)` selects what it is, as in
//! Kafka's FetchSession:
//!
//! | session_id | epoch | meaning |
//! | --- | --- | --- |
//! | 0 | -1 | no session: a full fetch, answered with session id 0 |
//! | S | -1 | close session S, then as above |
//! | any | 0 | close session S if named, then a full fetch that creates a session |
//! | S | n > 0 | an incremental fetch in S; S must exist (else FETCH_SESSION_ID_NOT_FOUND) and expect epoch n (else INVALID_FETCH_SESSION_EPOCH) |
//!
//! The cache holds at most `max.incremental.fetch.session.cache.slots`
//! sessions. When it is full, a new session may evict one that has been
//! unused for [`EVICTION_MS`], or else the smallest session (in partitions)
//! if the new one is larger; a follower's (privileged) session is evicted
//! only by another follower's. Otherwise the fetch is answered without a
//! session. Time is passed in by the caller, so the cache can be tested
//! with a fake clock.
//!
//! Invariants: a session's partitions are kept in fetch order (partitions
//! that returned records move to the back, so a response-size limit is
//! shared fairly); a cached high watermark of -1 means "send this
//! partition next time", which is how a partition with an error is
//! re-sent once the error clears.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::Rng;

use tarn_protocol::error;
use tarn_protocol::messages::fetch::{FetchPartition, FetchRequest, FetchTopic, PartitionDataOut};
use tarn_protocol::Uuid;

pub const INVALID_SESSION_ID: i32 = 0;
pub const INITIAL_EPOCH: i32 = 0;
pub const FINAL_EPOCH: i32 = -1;
/// How long a session must be unused before any new session may evict it
/// (Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS).
pub const EVICTION_MS: u64 = 120_000;

/// What a fetcher asked of one partition. Fetch v13+ names topics by id
/// (`topic` empty), earlier versions by name (`topic_id` zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionParams {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    /// The epoch of the follower's last fetched batch (v12+; -1 for a
    /// consumer or when unknown).
    pub last_fetched_epoch: i32,
    pub partition_max_bytes: i32,
}

/// One partition of a session: the last request's parameters and what the
/// last response told the fetcher.
#[derive(Debug, Clone)]
struct CachedPartition {
    params: FetchPartitionParams,
    /// Position in the session's fetch order.
    seq: u64,
    high_watermark: i64,
    log_start_offset: i64,
}

type PartitionKey = (Uuid, String, i32);

impl FetchPartitionParams {
    fn key(&self) -> PartitionKey {
        (self.topic_id, self.topic.clone(), self.partition)
    }
}

#[derive(Debug)]
pub struct FetchSession {
    pub id: i32,
    /// The epoch the next incremental request must carry.
    pub epoch: i32,
    partitions: HashMap<PartitionKey, CachedPartition>,
    order: BTreeMap<u64, PartitionKey>,
    next_seq: u64,
}

impl FetchSession {
    fn new(id: i32) -> FetchSession {
        FetchSession {
            id,
            epoch: next_epoch(INITIAL_EPOCH),
            partitions: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    fn push_back(&mut self, key: PartitionKey) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, key);
        seq
    }

    /// Adds or updates the request's partitions, then drops the forgotten
    /// ones (Kafka's order: a partition both sent and forgotten is gone).
    fn update(&mut self, params: Vec<FetchPartitionParams>, forgotten: Vec<PartitionKey>) {
        for p in params {
            let key = p.key();
            match self.partitions.get_mut(&key) {
                Some(cached) => cached.params = p,
                None => {
                    let seq = self.push_back(key.clone());
                    self.partitions.insert(
                        key,
                        CachedPartition {
                            params: p,
                            seq,
                            high_watermark: -1,
                            log_start_offset: -1,
                        },
                    );
                }
            }
        }
        for key in forgotten {
            if let Some(cached) = self.partitions.remove(&key) {
                self.order.remove(&cached.seq);
            }
        }
    }

    /// The partitions to read, in fetch order.
    pub fn fetch_list(&self) -> Vec<FetchPartitionParams> {
        self.order
            .values()
            .map(|key| self.partitions[key].params.clone())
            .collect()
    }

    /// Keeps only the results the fetcher must hear about, records what
    /// they told it, and moves partitions that returned records to the
    /// back of the fetch order.
    pub fn filter_response(
        &mut self,
        results: Vec<(FetchPartitionParams, PartitionDataOut)>,
    ) -> Vec<(FetchPartitionParams, PartitionDataOut)> {
        let mut kept = Vec::new();
        for (params, data) in results {
            let key = params.key();
            let Some(cached) = self.partitions.get_mut(&key) else {
                // Forgotten by a concurrent request in the meantime.
                continue;
            };
            let has_records = data.records.as_ref().is_some_and(|r| !r.is_empty());
            let mut must_respond = has_records;
            if cached.high_watermark != data.high_watermark {
                must_respond = true;
                cached.high_watermark = data.high_watermark;
            }
            if cached.log_start_offset != data.log_start_offset {
                must_respond = true;
                cached.log_start_offset = data.log_start_offset;
            }
            if data.error_code != error::NONE {
                must_respond = true;
                cached.high_watermark = -1;
            }
            // A follower must hear where its log diverges, a consumer which
            // replica to read from, whatever else changed.
            let diverging = data.diverging_epoch.epoch >= 0 || data.diverging_epoch.end_offset >= 0;
            if diverging || data.preferred_read_replica >= 0 {
                must_respond = true;
            }
            if has_records {
                self.order.remove(&cached.seq);
                cached.seq = self.next_seq;
                self.next_seq += 1;
                self.order.insert(cached.seq, key);
            }
            if must_respond {
                kept.push((params, data));
            }
        }
        kept
    }
}

/// The epoch after `epoch`, wrapping past i32::MAX to 1 as Kafka does.
pub fn next_epoch(epoch: i32) -> i32 {
    if epoch < 0 {
        FINAL_EPOCH
    } else if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// How one Fetch request is served.
#[derive(Debug)]
pub enum FetchContext {
    /// No session: answer every requested partition, session id 0.
    Sessionless(Vec<FetchPartitionParams>),
    /// A full fetch that tries to create a session once it is answered.
    Full {
        partitions: Vec<FetchPartitionParams>,
        privileged: bool,
    },
    /// A fetch in an existing session.
    Incremental(Arc<Mutex<FetchSession>>),
    /// The session cannot be used: answer with this top-level error only.
    Error(i16),
}

impl FetchContext {
    /// The partitions to read, in order.
    pub fn fetch_list(&self) -> Vec<FetchPartitionParams> {
        match self {
            FetchContext::Sessionless(p) | FetchContext::Full { partitions: p, .. } => p.clone(),
            FetchContext::Incremental(session) => session.lock().fetch_list(),
            FetchContext::Error(_) => Vec::new(),
        }
    }
}

/// Every partition a request names, in request order. Kafka reads them
/// as an ordered map: a partition named twice is fetched once, at the
/// place it was first named, with what it was named with last.
pub fn request_params(request: &FetchRequest) -> Vec<FetchPartitionParams> {
    let named: Vec<(&FetchTopic, &FetchPartition)> = request
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .collect();
    // Where each partition was named last, keyed without copying names.
    let mut last = HashMap::new();
    for (i, (t, p)) in named.iter().enumerate() {
        last.insert((&t.topic_id, t.topic.as_str(), p.partition), i);
    }
    // At its first place (the later ones find it taken), what it was
    // named with last.
    named
        .iter()
        .filter_map(|(t, p)| {
            let (t, p) = named[last.remove(&(&t.topic_id, t.topic.as_str(), p.partition))?];
            Some(FetchPartitionParams {
                topic: t.topic.clone(),
                topic_id: t.topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
                partition_max_bytes: p.partition_max_bytes,
            })
        })
        .collect()
}

fn forgotten(request: &FetchRequest) -> Vec<PartitionKey> {
    request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.topic_id, t.topic.clone(), *p))
        })
        .collect()
}

struct Entry {
    session: Arc<Mutex<FetchSession>>,
    /// Copies of the session's fields eviction orders by, kept here so
    /// choosing a victim never locks a session.
    privileged: bool,
    last_used_ms: u64,
}

/// The bounded cache of fetch sessions, keyed by session id.
pub struct FetchSessionCache {
    slots_max: usize,
    sessions: Mutex<HashMap<i32, Entry>>,
}

impl FetchSessionCache {
    pub fn new(slots_max: usize) -> FetchSessionCache {
        FetchSessionCache {
            slots_max,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Partitions held by all sessions together.
    pub fn partitions_cached(&self) -> usize {
        let sessions = self.sessions.lock();
        sessions.values().map(|e| e.session.lock().len()).sum()
    }

    /// Decides how `request` is served, applying an incremental request's
    /// changes to its session and moving the session to its next epoch.
    /// `privileged`: the fetcher is a follower (a replica id in the
    /// request, or in its replica state from v15).
    pub fn new_context(
        &self,
        request: &FetchRequest,
        privileged: bool,
        now_ms: u64,
    ) -> FetchContext {
        let (id, epoch) = (request.session_id, request.session_epoch);
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != INVALID_SESSION_ID {
                self.sessions.lock().remove(&id);
            }
            let partitions = request_params(request);
            return if epoch == FINAL_EPOCH {
                FetchContext::Sessionless(partitions)
            } else {
                FetchContext::Full {
                    partitions,
                    privileged,
                }
            };
        }
        let mut sessions = self.sessions.lock();
        let Some(entry) = sessions.get_mut(&id) else {
            return FetchContext::Error(error::FETCH_SESSION_ID_NOT_FOUND);
        };
        let session = entry.session.clone();
        let mut guard = session.lock();
        if guard.epoch != epoch {
            return FetchContext::Error(error::INVALID_FETCH_SESSION_EPOCH);
        }
        guard.update(request_params(request), forgotten(request));
        guard.epoch = next_epoch(guard.epoch);
        entry.last_used_ms = now_ms;
        drop(guard);
        FetchContext::Incremental(session)
    }

    /// Creates a session for a full fetch's answered partitions, evicting
    /// another if the cache is full and the rules allow; returns its id,
    /// or [`INVALID_SESSION_ID`] when no slot could be had.
    pub fn maybe_create(
        &self,
        privileged: bool,
        results: &[(FetchPartitionParams, PartitionDataOut)],
        now_ms: u64,
    ) -> i32 {
        let mut sessions = self.sessions.lock();
        if sessions.len() >= self.slots_max
            && !try_evict(&mut sessions, privileged, results.len(), now_ms)
        {
            return INVALID_SESSION_ID;
        }
        let id = loop {
            let id = rand::thread_rng().gen_range(1..=i32::MAX);
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let mut session = FetchSession::new(id);
        for (params, data) in results {
            let key = params.key();
            let seq = session.push_back(key.clone());
            let failed = data.error_code != error::NONE;
            session.partitions.insert(
                key,
                CachedPartition {
                    params: params.clone(),
                    seq,
                    high_watermark: if failed { -1 } else { data.high_watermark },
                    log_start_offset: data.log_start_offset,
                },
            );
        }
        sessions.insert(
            id,
            Entry {
                session: Arc::new(Mutex::new(session)),
                privileged,
                last_used_ms: now_ms,
            },
        );
        id
    }
}

/// Makes room for a new session of `size` partitions: the least recently
/// used session if it is stale, else the smallest session the newcomer
/// outranks (privileged first, then size).
fn try_evict(
    sessions: &mut HashMap<i32, Entry>,
    privileged: bool,
    size: usize,
    now_ms: u64,
) -> bool {
    let stalest = sessions
        .iter()
        .min_by_key(|(id, e)| (e.last_used_ms, **id))
        .map(|(id, e)| (*id, e.last_used_ms));
    if let Some((id, last_used_ms)) = stalest {
        if now_ms.saturating_sub(last_used_ms) > EVICTION_MS {
            sessions.remove(&id);
            return true;
        }
    }
    let victim = sessions
        .iter()
        .filter(|(_, e)| privileged || !e.privileged)
        .map(|(id, e)| (e.privileged, e.session.lock().len(), *id))
        .min();
    match victim {
        Some((victim_privileged, victim_size, id))
            if (privileged, size) > (victim_privileged, victim_size) =>
        {
            sessions.remove(&id);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: i32, epoch: i32, partitions: &[(&str, i32, i64)]) -> FetchRequest {
        FetchRequest {
            session_id: id,
            session_epoch: epoch,
            topics: partitions
                .iter()
                .map(|(topic, partition, offset)| FetchTopic {
                    topic: topic.to_string(),
                    partitions: vec![FetchPartition {
                        partition: *partition,
                        fetch_offset: *offset,
                        partition_max_bytes: 1024,
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_partition_named_twice_is_fetched_once_where_first_named() {
        let offsets = |req: &FetchRequest| -> Vec<(String, i32, i64)> {
            request_params(req)
                .into_iter()
                .map(|p| (p.topic, p.partition, p.fetch_offset))
                .collect()
        };
        let once = request(0, -1, &[("a", 0, 5), ("b", 0, 6), ("a", 1, 7)]);
        assert_eq!(
            offsets(&once),
            [("a".into(), 0, 5), ("b".into(), 0, 6), ("a".into(), 1, 7)]
        );
        let twice = request(0, -1, &[("a", 0, 5), ("b", 0, 6), ("a", 0, 9)]);
        assert_eq!(offsets(&twice), [("a".into(), 0, 9), ("b".into(), 0, 6)]);
    }

    fn answered(request: &FetchRequest) -> Vec<(FetchPartitionParams, PartitionDataOut)> {
        request_params(request)
            .into_iter()
            .map(|p| {
                let data = PartitionDataOut {
                    partition_index: p.partition,
                    high_watermark: 10,
                    log_start_offset: 0,
                    ..Default::default()
                };
                (p, data)
            })
            .collect()
    }

    /// Creates a session of `size` partitions of topic `t`; returns its id.
    fn create(cache: &FetchSessionCache, privileged: bool, size: i32, now_ms: u64) -> i32 {
        let parts: Vec<_> = (0..size).map(|p| ("t", p, 0)).collect();
        let req = request(0, INITIAL_EPOCH, &parts);
        let FetchContext::Full { privileged, .. } = cache.new_context(&req, privileged, now_ms)
        else {
            panic!("epoch 0 is a full fetch");
        };
        cache.maybe_create(privileged, &answered(&req), now_ms)
    }

    #[test]
    fn epochs_select_the_kind_of_fetch() {
        let cache = FetchSessionCache::new(10);
        assert!(matches!(
            cache.new_context(&request(0, FINAL_EPOCH, &[("t", 0, 0)]), false, 0),
            FetchContext::Sessionless(_)
        ));
        let id = create(&cache, false, 2, 0);
        assert_ne!(id, INVALID_SESSION_ID);
        assert!(matches!(
            cache.new_context(&request(id + 1, 1, &[]), false, 0),
            FetchContext::Error(error::FETCH_SESSION_ID_NOT_FOUND)
        ));
        assert!(matches!(
            cache.new_context(&request(id, 2, &[]), false, 0),
            FetchContext::Error(error::INVALID_FETCH_SESSION_EPOCH)
        ));
        assert!(matches!(
            cache.new_context(&request(id, 1, &[]), false, 0),
            FetchContext::Incremental(_)
        ));
        // The epoch moved on: a retry of epoch 1 is refused.
        assert!(matches!(
            cache.new_context(&request(id, 1, &[]), false, 0),
            FetchContext::Error(error::INVALID_FETCH_SESSION_EPOCH)
        ));
        // Epoch -1 closes the session and fetches without one.
        assert!(matches!(
            cache.new_context(&request(id, FINAL_EPOCH, &[]), false, 0),
            FetchContext::Sessionless(_)
        ));
        assert!(cache.is_empty());
        // Epoch 0 naming a session closes it too, before a new full fetch.
        let id = create(&cache, false, 1, 0);
        assert!(matches!(
            cache.new_context(&request(id, INITIAL_EPOCH, &[("t", 0, 0)]), false, 0),
            FetchContext::Full { .. }
        ));
        assert!(cache.is_empty());
    }

    #[test]
    fn incremental_requests_add_update_and_forget_partitions() {
        let cache = FetchSessionCache::new(10);
        let id = create(&cache, false, 2, 0);
        let mut req = request(id, 1, &[("t", 1, 7), ("u", 0, 3)]);
        req.forgotten_topics_data = vec![tarn_protocol::messages::fetch::ForgottenTopic {
            topic: "t".into(),
            partitions: vec![0],
            ..Default::default()
        }];
        let FetchContext::Incremental(session) = cache.new_context(&req, false, 0) else {
            panic!("incremental");
        };
        let list: Vec<_> = session
            .lock()
            .fetch_list()
            .into_iter()
            .map(|p| (p.topic, p.partition, p.fetch_offset))
            .collect();
        assert_eq!(list, vec![("t".into(), 1, 7), ("u".into(), 0, 3)]);
        assert_eq!(session.lock().epoch, 2);
        assert_eq!(cache.partitions_cached(), 2);
    }

    #[test]
    fn responses_carry_only_partitions_with_news() {
        let cache = FetchSessionCache::new(10);
        let id = create(&cache, false, 3, 0);
        let FetchContext::Incremental(session) = cache.new_context(&request(id, 1, &[]), false, 0)
        else {
            panic!("incremental");
        };
        let mut session = session.lock();
        let mut results = answered(&request(0, 0, &[("t", 0, 0), ("t", 1, 0), ("t", 2, 0)]));
        // Partition 0 has records, 1 a new high watermark, 2 nothing new.
        results[0].1.records = Some(tarn_protocol::records::Records::Bytes(
            bytes::Bytes::from_static(b"batch"),
        ));
        results[1].1.high_watermark = 11;
        let kept: Vec<i32> = session
            .filter_response(results.clone())
            .iter()
            .map(|(p, _)| p.partition)
            .collect();
        assert_eq!(kept, vec![0, 1]);
        // Partition 0 returned records, so it is read last from now on.
        let order: Vec<i32> = session.fetch_list().iter().map(|p| p.partition).collect();
        assert_eq!(order, vec![1, 2, 0]);
        // An error is always sent, and the partition is sent again once
        // the error clears even though nothing else changed.
        let mut failing = answered(&request(0, 0, &[("t", 2, 0)]));
        failing[0].1.error_code = error::NOT_LEADER_OR_FOLLOWER;
        assert_eq!(session.filter_response(failing).len(), 1);
        let cleared = answered(&request(0, 0, &[("t", 2, 0)]));
        assert_eq!(session.filter_response(cleared.clone()).len(), 1);
        assert_eq!(session.filter_response(cleared).len(), 0);
        // A divergence for a follower and a preferred read replica for a
        // consumer are sent though the offsets are unchanged.
        let mut diverging = answered(&request(0, 0, &[("t", 1, 0)]));
        diverging[0].1.high_watermark = 11;
        diverging[0].1.diverging_epoch = tarn_protocol::messages::fetch::EpochEndOffset {
            epoch: 2,
            end_offset: 5,
        };
        assert_eq!(session.filter_response(diverging).len(), 1);
        let mut elsewhere = answered(&request(0, 0, &[("t", 1, 0)]));
        elsewhere[0].1.high_watermark = 11;
        elsewhere[0].1.preferred_read_replica = 2;
        assert_eq!(session.filter_response(elsewhere).len(), 1);
    }

    #[test]
    fn a_full_cache_evicts_stale_then_smaller_sessions_only() {
        let cache = FetchSessionCache::new(2);
        let small = create(&cache, false, 1, 0);
        let big = create(&cache, false, 3, 0);
        assert_ne!(small, INVALID_SESSION_ID);
        assert_ne!(big, INVALID_SESSION_ID);
        // Full, and a newcomer no larger than the smallest: no session.
        assert_eq!(create(&cache, false, 1, 1), INVALID_SESSION_ID);
        assert_eq!(cache.len(), 2);
        // A larger newcomer evicts the smallest session.
        let two = create(&cache, false, 2, 2);
        assert_ne!(two, INVALID_SESSION_ID);
        assert!(matches!(
            cache.new_context(&request(small, 1, &[]), false, 3),
            FetchContext::Error(error::FETCH_SESSION_ID_NOT_FOUND)
        ));
        // Keep `two` in use; `big` goes stale and any newcomer may evict it.
        assert!(matches!(
            cache.new_context(&request(two, 1, &[]), false, EVICTION_MS),
            FetchContext::Incremental(_)
        ));
        let late = create(&cache, false, 1, EVICTION_MS + 1);
        assert_ne!(late, INVALID_SESSION_ID);
        assert!(matches!(
            cache.new_context(&request(big, 1, &[]), false, EVICTION_MS + 1),
            FetchContext::Error(error::FETCH_SESSION_ID_NOT_FOUND)
        ));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_followers_session_is_evicted_only_by_a_follower() {
        let cache = FetchSessionCache::new(1);
        let follower = create(&cache, true, 1, 0);
        assert_ne!(follower, INVALID_SESSION_ID);
        assert_eq!(create(&cache, false, 50, 1), INVALID_SESSION_ID);
        let other = create(&cache, true, 2, 2);
        assert_ne!(other, INVALID_SESSION_ID);
        assert_eq!(cache.len(), 1);
        // A consumer's session is evicted by a follower of any size.
        let cache = FetchSessionCache::new(1);
        create(&cache, false, 5, 0);
        assert_ne!(create(&cache, true, 1, 1), INVALID_SESSION_ID);
    }

    #[test]
    fn no_slots_means_no_sessions() {
        let cache = FetchSessionCache::new(0);
        assert_eq!(create(&cache, false, 3, 0), INVALID_SESSION_ID);
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(FINAL_EPOCH), FINAL_EPOCH);
    }
}
