//! What the metrics endpoint and the console need to know about consumer
//! groups, as a small trait so that they do not depend on how the group
//! coordinator is built.
//!
//! The broker computes lag itself: a group's lag on a partition is the
//! partition's log end offset (high watermark) minus the group's committed
//! offset, never below zero. A source only reports what it stores; it must
//! answer quickly and without blocking on I/O, because `/metrics` and the
//! console's sampler call it every few seconds.

use std::sync::Arc;

/// One group's committed offset for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed_offset: i64,
}

/// A member of a group as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct GroupMember {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    /// The partitions assigned to this member, when the coordinator knows
    /// them (consumer protocol); empty otherwise.
    pub assignment: Vec<(String, i32)>,
}

/// One group: its state as Kafka names it (`Empty`, `Stable`,
/// `PreparingRebalance`, `CompletingRebalance`, `Dead`) and its members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupOverview {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub members: Vec<GroupMember>,
}

/// Where groups and their committed offsets come from.
pub trait GroupLagSource: Send + Sync {
    /// Every group this broker coordinates.
    fn groups(&self) -> Vec<GroupOverview>;
    /// Every committed offset of every group this broker coordinates.
    fn committed_offsets(&self) -> Vec<CommittedOffset>;
}

/// The source used until the group coordinator exists: no groups.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoGroups;

impl GroupLagSource for NoGroups {
    fn groups(&self) -> Vec<GroupOverview> {
        Vec::new()
    }

    fn committed_offsets(&self) -> Vec<CommittedOffset> {
        Vec::new()
    }
}

/// The shared handle the HTTP server and the sampler hold.
pub type SharedGroupLagSource = Arc<dyn GroupLagSource>;

/// `log_end_offset - committed_offset`, never negative (a commit beyond
/// the log end, as after a truncation, is no lag rather than negative lag).
pub fn lag(log_end_offset: i64, committed_offset: i64) -> i64 {
    (log_end_offset - committed_offset).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_never_negative() {
        assert_eq!(lag(100, 40), 60);
        assert_eq!(lag(100, 100), 0);
        assert_eq!(lag(100, 150), 0);
    }

    #[test]
    fn no_groups_is_empty() {
        assert!(NoGroups.groups().is_empty());
        assert!(NoGroups.committed_offsets().is_empty());
    }
}
