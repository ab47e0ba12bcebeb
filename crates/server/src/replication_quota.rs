//! Replication throttles (KIP-73), as kafka-reassign-partitions.sh's
//! `--throttle` sets them: a partition's replicas named by the topic's
//! `leader.replication.throttled.replicas` (on the leader) or
//! `follower.replication.throttled.replicas` (on the follower), as
//! `partition:broker` pairs or `*`, move at most
//! `leader.replication.throttled.rate` (or `follower...`) bytes a second
//! on this broker while they are out of the ISR. A replica in the ISR is
//! never held back, so acks=all writes do not wait for a throttle.
//!
//! The rate is Kafka's windowed one: bytes over the last
//! `replication.quota.window.num` windows of
//! `replication.quota.window.size.seconds`, divided by at least all but
//! one of them, so a fresh quota is not exceeded by its first bytes.
//! Once it is exceeded, throttled partitions get no bytes (the leader
//! answers them empty, the follower leaves them out of its fetch) until
//! the rate falls under the limit again.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use tarn_config::BrokerConfig;
use tarn_metadata::MetadataImage;

/// One side's throttled traffic (the leader's, or the follower's).
pub struct ReplicationQuota {
    /// (window start, bytes in it), oldest first.
    windows: Mutex<VecDeque<(Instant, u64)>>,
}

impl Default for ReplicationQuota {
    fn default() -> Self {
        ReplicationQuota {
            windows: Mutex::new(VecDeque::new()),
        }
    }
}

/// The window count and size a quota is measured over.
#[derive(Debug, Clone, Copy)]
pub struct QuotaWindows {
    pub count: u32,
    pub size: Duration,
}

impl ReplicationQuota {
    /// Counts `bytes` of throttled replication at `now`.
    pub fn record(&self, bytes: u64, now: Instant, windows: QuotaWindows) {
        let mut all = self.windows.lock();
        match all.back_mut() {
            Some((start, total)) if now.duration_since(*start) < windows.size => *total += bytes,
            _ => all.push_back((now, bytes)),
        }
        Self::expire(&mut all, now, windows);
    }

    /// Whether the measured rate is above `limit` bytes a second.
    pub fn exceeded(&self, limit: u64, now: Instant, windows: QuotaWindows) -> bool {
        let mut all = self.windows.lock();
        Self::expire(&mut all, now, windows);
        let Some((oldest, _)) = all.front() else {
            return false;
        };
        let bytes: u64 = all.iter().map(|(_, b)| b).sum();
        let least = windows.size * windows.count.saturating_sub(1).max(1);
        let elapsed = now.duration_since(*oldest).max(least);
        bytes as f64 / elapsed.as_secs_f64() > limit as f64
    }

    fn expire(all: &mut VecDeque<(Instant, u64)>, now: Instant, windows: QuotaWindows) {
        let span = windows.size * windows.count.max(1);
        while all
            .front()
            .is_some_and(|(start, _)| now.duration_since(*start) >= span)
        {
            all.pop_front();
        }
    }
}

/// Which end of replication a throttle holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Leader,
    Follower,
}

impl Side {
    fn list_key(self) -> &'static str {
        match self {
            Side::Leader => "leader.replication.throttled.replicas",
            Side::Follower => "follower.replication.throttled.replicas",
        }
    }

    fn rate_key(self) -> &'static str {
        match self {
            Side::Leader => "leader.replication.throttled.rate",
            Side::Follower => "follower.replication.throttled.rate",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Side::Leader => "leader",
            Side::Follower => "follower",
        }
    }
}

/// A throttle that applies to one replica: its rate and windows.
#[derive(Debug, Clone, Copy)]
pub struct Throttle {
    pub limit: u64,
    pub windows: QuotaWindows,
}

/// The throttle of `side` on this broker (`broker_id`, leading or
/// following) for `partition` of `topic`: when the topic's list names the
/// replica and the broker's rate (`config`, the effective one) is finite.
/// Whether the replica is in the ISR is the caller's to check.
pub fn throttle_for(
    image: &MetadataImage,
    config: &BrokerConfig,
    side: Side,
    topic: &str,
    partition: i32,
    broker_id: i32,
) -> Option<Throttle> {
    let list = image.topic(topic)?.configs.get(side.list_key())?;
    if !names_replica(list, partition, broker_id) {
        return None;
    }
    let limit = u64::try_from(config.get_i64(side.rate_key())).unwrap_or(0);
    if limit == u64::try_from(i64::MAX).unwrap_or(u64::MAX) {
        return None;
    }
    Some(Throttle {
        limit,
        windows: QuotaWindows {
            count: u32::try_from(config.get_i64("replication.quota.window.num")).unwrap_or(11),
            size: Duration::from_secs(
                u64::try_from(config.get_i64("replication.quota.window.size.seconds")).unwrap_or(1),
            ),
        },
    })
}

/// Whether a throttled-replicas list (`*`, or `partition:broker` pairs,
/// comma-separated) names `partition` on `broker`. Entries that do not
/// parse name nothing.
pub fn names_replica(list: &str, partition: i32, broker: i32) -> bool {
    list.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        let Some((p, b)) = entry.split_once(':') else {
            return false;
        };
        p.trim().parse::<i32>().ok() == Some(partition)
            && b.trim().parse::<i32>().ok() == Some(broker)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOWS: QuotaWindows = QuotaWindows {
        count: 11,
        size: Duration::from_secs(1),
    };

    #[test]
    fn lists_name_replicas_as_kafka_writes_them() {
        assert!(names_replica("*", 3, 7));
        assert!(names_replica("0:1,0:2, 1:3", 1, 3));
        assert!(!names_replica("0:1,0:2", 0, 3));
        assert!(!names_replica("", 0, 1));
        assert!(!names_replica("junk,0", 0, 1));
    }

    #[test]
    fn a_rate_is_exceeded_once_the_window_holds_more_than_it_allows() {
        let quota = ReplicationQuota::default();
        let start = Instant::now();
        assert!(!quota.exceeded(1_000, start, WINDOWS));
        // Ten windows' worth at the limit is not above it.
        quota.record(10_000, start, WINDOWS);
        assert!(!quota.exceeded(1_000, start, WINDOWS));
        quota.record(1, start, WINDOWS);
        assert!(quota.exceeded(1_000, start, WINDOWS));
        // Once those windows pass, the bytes no longer count.
        let later = start + Duration::from_secs(11);
        assert!(!quota.exceeded(1_000, later, WINDOWS));
        // Bytes spread over the span are measured over it.
        for s in 0..11u64 {
            quota.record(900, later + Duration::from_secs(s), WINDOWS);
        }
        assert!(!quota.exceeded(1_000, later + Duration::from_secs(10), WINDOWS));
        assert!(quota.exceeded(800, later + Duration::from_secs(10), WINDOWS));
    }
}
