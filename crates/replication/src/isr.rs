//! The leader's view of a partition's replicas, as Kafka's `Partition`
//! keeps it: each follower's log end offset (learned from its fetches) and
//! when it last caught up with the leader, the in-sync replica set the
//! metadata holds, and an ISR change sent to the controller and not yet
//! committed. From these come the high watermark and the ISR changes the
//! leader asks for.
//!
//! No I/O and no clock of its own: callers pass the time, so the rules
//! are tested alone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ids of ISR changes, unique in the process: an answer that comes back
/// after its partition was taken over (a new `ReplicaSet`) must not settle
/// a change the new one started.
static NEXT_CHANGE_ID: AtomicU64 = AtomicU64::new(1);

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The offset the follower asked for last, which is its log end
    /// offset; -1 until it fetched from this leader.
    pub log_end_offset: i64,
    /// When the follower last had everything the leader had.
    pub last_caught_up_ms: i64,
    /// The broker epoch its last fetch carried (Fetch v15+), -1 when
    /// none did: an ISR change names it, so that the controller refuses
    /// a member whose registration has moved on since (KIP-903).
    pub broker_epoch: i64,
    /// When it last fetched, and the leader's log end offset then.
    last_fetch_ms: i64,
    last_fetch_leader_log_end_offset: i64,
}

impl FollowerState {
    fn new(now_ms: i64) -> FollowerState {
        FollowerState {
            log_end_offset: -1,
            // As Kafka does when a leader takes over: members are given a
            // full lag period to show up before they are dropped.
            last_caught_up_ms: now_ms,
            broker_epoch: -1,
            last_fetch_ms: -1,
            last_fetch_leader_log_end_offset: -1,
        }
    }
}

/// The replicas of a partition this broker leads.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    local: i32,
    replicas: Vec<i32>,
    /// The committed ISR, as the metadata has it.
    isr: Vec<i32>,
    partition_epoch: i32,
    /// An ISR sent to the controller and not yet seen committed, with the
    /// id of the change that asked for it.
    pending_isr: Option<(u64, Vec<i32>)>,
    followers: BTreeMap<i32, FollowerState>,
}

impl ReplicaSet {
    /// The state of a leader that has just taken over (or of a partition
    /// this broker does not lead: then nothing here is consulted).
    pub fn new(
        local: i32,
        replicas: &[i32],
        isr: &[i32],
        partition_epoch: i32,
        now_ms: i64,
    ) -> ReplicaSet {
        let followers = replicas
            .iter()
            .filter(|r| **r != local)
            .map(|r| (*r, FollowerState::new(now_ms)))
            .collect();
        ReplicaSet {
            local,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            partition_epoch,
            pending_isr: None,
            followers,
        }
    }

    /// Takes a newer assignment or ISR from the metadata, keeping what is
    /// known of followers that remain. A pending ISR change is settled once
    /// the partition epoch moves (committed or overtaken).
    pub fn update(&mut self, replicas: &[i32], isr: &[i32], partition_epoch: i32, now_ms: i64) {
        if partition_epoch != self.partition_epoch {
            self.pending_isr = None;
        }
        self.followers.retain(|r, _| replicas.contains(r));
        for r in replicas {
            if *r != self.local {
                self.followers
                    .entry(*r)
                    .or_insert_with(|| FollowerState::new(now_ms));
            }
        }
        self.replicas = replicas.to_vec();
        self.isr = isr.to_vec();
        self.partition_epoch = partition_epoch;
    }

    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn follower(&self, replica: i32) -> Option<&FollowerState> {
        self.followers.get(&replica)
    }

    /// Whether an ISR change is waiting for the controller.
    pub fn change_pending(&self) -> bool {
        self.pending_isr.is_some()
    }

    /// Whether the change waiting for the controller is the one `id` names.
    pub fn change_pending_is(&self, id: u64) -> bool {
        self.pending_isr
            .as_ref()
            .is_some_and(|(pending, _)| *pending == id)
    }

    /// The committed ISR together with members a pending change adds
    /// (Kafka's "maximal ISR"): the high watermark must cover them all,
    /// so a member is never in the ISR without having every record below
    /// it, whichever way the change goes.
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut members = self.isr.clone();
        if let Some((_, pending)) = &self.pending_isr {
            for r in pending {
                if !members.contains(r) {
                    members.push(*r);
                }
            }
        }
        members
    }

    /// Records a follower's fetch from `fetch_offset`, sent with
    /// `broker_epoch` (-1: not said), while the leader's log ended at
    /// `leader_log_end_offset`. False for a broker that is not a replica
    /// of the partition.
    pub fn record_fetch(
        &mut self,
        replica: i32,
        broker_epoch: i64,
        fetch_offset: i64,
        leader_log_end_offset: i64,
        now_ms: i64,
    ) -> bool {
        let Some(state) = self.followers.get_mut(&replica) else {
            return false;
        };
        // Kafka's rule: caught up now when it asked for the leader's end,
        // or as of its previous fetch when it now asks for what the
        // leader's end was then.
        if fetch_offset >= leader_log_end_offset {
            state.last_caught_up_ms = state.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= state.last_fetch_leader_log_end_offset && state.last_fetch_ms >= 0
        {
            state.last_caught_up_ms = state.last_caught_up_ms.max(state.last_fetch_ms);
        }
        state.log_end_offset = fetch_offset;
        state.broker_epoch = broker_epoch;
        state.last_fetch_ms = now_ms;
        state.last_fetch_leader_log_end_offset = leader_log_end_offset;
        true
    }

    /// The high watermark the replicas allow: the smallest log end offset
    /// over the maximal ISR, the leader's being `leader_log_end_offset`.
    /// `None` while a member has not fetched from this leader yet.
    pub fn high_watermark_bound(&self, leader_log_end_offset: i64) -> Option<i64> {
        // Every append asks this: walk the maximal ISR without collecting it.
        let pending = self.pending_isr.iter().flat_map(|(_, isr)| isr);
        let mut bound = leader_log_end_offset;
        for &member in self.isr.iter().chain(pending) {
            if member == self.local {
                continue;
            }
            let state = self.followers.get(&member)?;
            if state.log_end_offset < 0 {
                return None;
            }
            bound = bound.min(state.log_end_offset);
        }
        Some(bound)
    }

    /// The ISR to ask for when a follower outside it has caught up: its
    /// log end offset reached the high watermark and the start of the
    /// leader's current epoch (so it holds this leader's history). Only
    /// `fetching`, the follower whose fetch is being recorded, may join: a
    /// follower that stopped fetching (dead, say) must not be taken back
    /// on the position it last had, as Kafka expands the ISR only for the
    /// replica that fetched. `None` when it does not qualify or a change is
    /// already pending. Members are listed by id, as Kafka's leader lists
    /// them (its ISR is a hash set, which iterates broker ids in order), so
    /// that both show the same ISR.
    pub fn expansion(
        &self,
        fetching: i32,
        high_watermark: i64,
        epoch_start_offset: i64,
    ) -> Option<Vec<i32>> {
        if self.pending_isr.is_some() {
            return None;
        }
        let joining: Vec<i32> = self
            .followers
            .iter()
            .filter(|(r, s)| {
                **r == fetching
                    && !self.isr.contains(r)
                    && s.log_end_offset >= 0
                    && s.log_end_offset >= high_watermark
                    && s.log_end_offset >= epoch_start_offset
            })
            .map(|(r, _)| *r)
            .collect();
        if joining.is_empty() {
            return None;
        }
        let mut isr = self.isr.clone();
        isr.extend(joining);
        isr.sort_unstable();
        Some(isr)
    }

    /// The ISR to ask for when members have not caught up for more than
    /// `lag_max_ms`: the others (the leader always stays), by id as in
    /// [`ReplicaSet::expansion`]. `None` when all keep up or a change is
    /// already pending.
    pub fn shrink(&self, now_ms: i64, lag_max_ms: i64) -> Option<Vec<i32>> {
        if self.pending_isr.is_some() {
            return None;
        }
        let lagging = |r: &i32| {
            *r != self.local
                && self
                    .followers
                    .get(r)
                    .is_none_or(|s| now_ms - s.last_caught_up_ms > lag_max_ms)
        };
        if !self.isr.iter().any(lagging) {
            return None;
        }
        let mut isr: Vec<i32> = self.isr.iter().copied().filter(|r| !lagging(r)).collect();
        isr.sort_unstable();
        Some(isr)
    }

    /// The broker epoch each member of `isr` last fetched with, in its
    /// order: -1 for the leader itself and for followers whose fetches
    /// said none (the controller checks only the others).
    pub fn broker_epochs(&self, isr: &[i32]) -> Vec<i64> {
        isr.iter()
            .map(|r| self.followers.get(r).map_or(-1, |s| s.broker_epoch))
            .collect()
    }

    /// Notes an ISR change sent to the controller; its id.
    pub fn begin_change(&mut self, isr: Vec<i32>) -> u64 {
        let id = NEXT_CHANGE_ID.fetch_add(1, Ordering::Relaxed);
        self.pending_isr = Some((id, isr));
        id
    }

    /// Change `id` is settled without the metadata moving on (the ISR
    /// already was that, or the controller said it did not apply it): it
    /// is no longer pending, and a later check may ask again. Nothing
    /// when another change (or none) is pending by now.
    pub fn change_settled(&mut self, id: u64) {
        if self.change_pending_is(id) {
            self.pending_isr = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_watermark_is_the_smallest_end_over_the_isr() {
        let mut set = ReplicaSet::new(1, &[1, 2, 3], &[1, 2, 3], 0, 0);
        // Until every member has fetched, nothing may be exposed.
        assert_eq!(set.high_watermark_bound(10), None);
        assert!(set.record_fetch(2, -1, 7, 10, 5));
        assert_eq!(set.high_watermark_bound(10), None);
        assert!(set.record_fetch(3, -1, 10, 10, 5));
        assert_eq!(set.high_watermark_bound(10), Some(7));
        // A member out of the ISR does not hold it back.
        set.update(&[1, 2, 3], &[1, 3], 1, 6);
        assert_eq!(set.high_watermark_bound(10), Some(10));
        // A broker that is no replica is refused.
        assert!(!set.record_fetch(4, -1, 10, 10, 6));
    }

    #[test]
    fn a_pending_expansion_counts_for_the_high_watermark() {
        let mut set = ReplicaSet::new(1, &[1, 2], &[1], 0, 0);
        assert_eq!(set.high_watermark_bound(5), Some(5));
        set.record_fetch(2, 7, 5, 8, 1);
        assert_eq!(set.expansion(2, 5, 0), Some(vec![1, 2]));
        // The change names the broker epoch each follower fetched with
        // (KIP-903); the leader's own is -1.
        assert_eq!(set.broker_epochs(&[1, 2]), vec![-1, 7]);
        // Only for the follower that fetched.
        assert_eq!(set.expansion(3, 5, 0), None);
        // Not before it has the start of this leader's epoch.
        assert_eq!(set.expansion(2, 5, 6), None);
        let first = set.begin_change(vec![1, 2]);
        assert_eq!(set.maximal_isr(), vec![1, 2]);
        assert_eq!(set.high_watermark_bound(8), Some(5));
        assert_eq!(set.expansion(2, 5, 0), None, "one change at a time");
        set.change_settled(first);
        assert_eq!(set.high_watermark_bound(8), Some(8));
        // A committed change clears the pending one.
        let second = set.begin_change(vec![1, 2]);
        set.update(&[1, 2], &[1, 2], 1, 2);
        assert!(!set.change_pending());
        assert_eq!(set.isr(), &[1, 2]);
        // A late answer to a change settles nothing but that change.
        let third = set.begin_change(vec![1]);
        set.change_settled(second);
        set.change_settled(first);
        assert!(set.change_pending_is(third));
    }

    #[test]
    fn followers_that_do_not_catch_up_leave_the_isr() {
        let mut set = ReplicaSet::new(1, &[1, 2, 3], &[1, 2, 3], 0, 1_000);
        assert_eq!(set.shrink(30_000, 30_000), None);
        // 2 keeps up; 3 fetches but stays behind the leader's end.
        set.record_fetch(2, -1, 100, 100, 20_000);
        set.record_fetch(3, -1, 50, 100, 20_000);
        set.record_fetch(3, -1, 60, 120, 25_000);
        assert_eq!(set.shrink(31_001, 30_000), Some(vec![1, 2]));
        // Fetching up to where the leader ended at its previous fetch
        // counts as caught up as of that fetch.
        set.record_fetch(3, -1, 120, 130, 31_000);
        assert_eq!(set.follower(3).unwrap().last_caught_up_ms, 25_000);
        assert_eq!(set.shrink(31_001, 30_000), None);
        assert_eq!(set.shrink(55_001, 30_000), Some(vec![1]));
    }

    /// Whatever order the ISR came in, the ISR a leader asks for lists its
    /// members by id, as Kafka's leader does.
    #[test]
    fn isr_changes_list_members_by_id() {
        let mut set = ReplicaSet::new(3, &[3, 1, 2], &[3, 2], 0, 0);
        set.record_fetch(1, -1, 10, 10, 1);
        set.record_fetch(2, -1, 10, 10, 1);
        assert_eq!(set.expansion(1, 10, 0), Some(vec![1, 2, 3]));
        let mut set = ReplicaSet::new(3, &[3, 1, 2], &[3, 2, 1], 0, 0);
        set.record_fetch(2, -1, 10, 10, 40_000);
        assert_eq!(set.shrink(40_000, 30_000), Some(vec![2, 3]));
    }
}
