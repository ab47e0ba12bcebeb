//! How a partition acts as leader or follower (Kafka's `Partition`).
//!
//! As leader it takes produce requests, serves followers' fetches from its
//! log end and consumers' up to the high watermark, tracks each follower's
//! progress ([`ReplicaSet`]) and moves the high watermark to the smallest
//! log end offset over the ISR — never while the ISR is smaller than
//! `min.insync.replicas` (KIP-966; capped at the replication factor, as
//! Kafka's effective min ISR is), and never backwards. A produce with
//! acks=all waits until the high watermark covers it.
//!
//! As follower it appends the leader's batches as they are, truncates
//! where its log diverges from the leader's (by leader epoch), and keeps
//! the high watermark the leader reports, capped by its own log end.
//!
//! A new role or leader epoch starts under the log's lock, and every
//! append and truncation checks the role and epoch it was made for under
//! that lock: a produce checked while this broker led, or a fetch answer
//! from a leader it followed, never lands once the partition moved on.
//!
//! Lock order: the log's lock, then the replica set's. Nothing here takes
//! the log's lock while holding the replica set's.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tarn_metadata::PartitionInfo;
use tarn_protocol::error;
use tarn_protocol::records::FileRegion;
use tarn_storage::{AppendInfo, Log};

use crate::blocking::off_async_workers;
use crate::isr::ReplicaSet;
use crate::replica_manager::{LogOffsets, Partition, PartitionError, Role};

/// Where a read may go: consumers stop at the high watermark, followers
/// read to the log end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadLimit {
    HighWatermark,
    LogEnd,
}

/// What the leader answers a follower's fetch.
#[derive(Debug)]
pub enum FollowerRead {
    /// The follower's log diverges from ours: its last fetched epoch ends
    /// at `end_offset` here (`epoch` is the largest of ours not above it;
    /// -1 and -1 when we know none).
    Diverging {
        epoch: i32,
        end_offset: i64,
        offsets: LogOffsets,
    },
    Records {
        region: Option<FileRegion>,
        offsets: LogOffsets,
    },
}

/// What recording a follower's fetch asks of the caller.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FollowerFetchOutcome {
    /// The high watermark moved: wake consumers and acks=all waiters.
    pub high_watermark_moved: bool,
    /// Ask the controller for this ISR (a follower caught up).
    pub expand_isr: Option<IsrChange>,
}

/// An ISR change for the controller (Kafka's AlterPartition), with the
/// epochs it was based on so a stale one is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
    /// Each member's broker epoch as its last fetch here said (-1 where
    /// none did), in `new_isr`'s order (KIP-903).
    pub broker_epochs: Vec<i64>,
    /// Which change it is: an answer settles only the change it answers.
    pub id: u64,
    /// Whether it takes members out (else it adds one).
    pub shrinks: bool,
}

/// What became of an ISR change sent to the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrChangeAnswer {
    /// The controller committed it, or the ISR already was that.
    Committed,
    /// The controller refused it with this error code.
    Refused(error::ErrorCode),
    /// No answer (the controller was unreachable, moved or slow): it may
    /// have been committed all the same.
    Unanswered,
}

impl Partition {
    /// This broker's log end offset (read without the log's lock).
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }

    /// The committed in-sync replicas, as the metadata last said.
    pub fn isr(&self) -> Vec<i32> {
        self.replica_set.lock().isr().to_vec()
    }

    pub fn replicas(&self) -> Vec<i32> {
        self.replica_set.lock().replicas().to_vec()
    }

    /// The ISR size acks=all and the high watermark need: the topic's
    /// `min.insync.replicas`, but never more than the replicas there are
    /// (Kafka's effective min ISR).
    pub fn min_insync_replicas(&self) -> usize {
        let replicas = self.replica_set.lock().replicas().len();
        self.effective_min_isr(replicas)
    }

    fn effective_min_isr(&self, replicas: usize) -> usize {
        let configured = self.min_insync_replicas.load(Ordering::Acquire).max(1) as usize;
        configured.min(replicas.max(1))
    }

    /// The committed ISR's size and the effective min ISR, under one lock.
    fn isr_size_and_min(&self) -> (usize, usize) {
        let set = self.replica_set.lock();
        (
            set.isr().len(),
            self.effective_min_isr(set.replicas().len()),
        )
    }

    /// Whether the ISR is smaller than the replicas.
    pub fn under_replicated(&self) -> bool {
        let set = self.replica_set.lock();
        set.isr().len() < set.replicas().len()
    }

    /// Leader: the log end offset follower `replica` last fetched from,
    /// -1 when unknown.
    pub fn follower_log_end_offset(&self, replica: i32) -> i64 {
        self.replica_set
            .lock()
            .follower(replica)
            .map_or(-1, |f| f.log_end_offset)
    }

    /// Leader: how many records the slowest follower (of those that have
    /// fetched) is behind this log's end; 0 elsewhere.
    pub fn max_follower_lag(&self) -> i64 {
        if self.role() != Role::Leader {
            return 0;
        }
        let end = self.log_end_offset();
        let set = self.replica_set.lock();
        set.replicas()
            .iter()
            .filter_map(|r| set.follower(*r))
            .filter(|f| f.log_end_offset >= 0)
            .map(|f| end - f.log_end_offset)
            .max()
            .unwrap_or(0)
            .max(0)
    }

    /// Takes the partition's state from the metadata: its leader, leader
    /// epoch, replicas and ISR. Becoming leader (or leader in a new epoch)
    /// starts the followers' tracking afresh. Returns whether this broker's
    /// role or the leader epoch changed.
    pub(crate) fn apply_assignment(
        &self,
        p: &PartitionInfo,
        partition_epoch: i32,
        min_insync_replicas: i32,
        now_ms: i64,
    ) -> bool {
        self.min_insync_replicas
            .store(min_insync_replicas, Ordering::Release);
        // Only the metadata publisher changes the leader and its epoch, so
        // this reading still holds once the lock is taken.
        let changed = self.leader() != p.leader || self.leader_epoch() != p.leader_epoch;
        let leads_anew = changed && p.leader == self.local_node;
        // A new role or epoch starts under the log's lock (taken first, the
        // order every append takes), held until the replica set is reset:
        // appends and truncations check the role and epoch under it, so
        // none made for the old one lands after the new one began (a
        // follower's append of its old leader's batches past the epoch a
        // new leader just started, say).
        let mut log = changed.then(|| self.log.lock());
        if leads_anew {
            // Led without a break when it led the epoch just before
            // (epochs move by one per change).
            let continues =
                self.leader() == self.local_node && self.leader_epoch() + 1 == p.leader_epoch;
            if !continues {
                self.led_since_epoch
                    .store(p.leader_epoch, Ordering::Release);
            }
        }
        self.leader.store(p.leader, Ordering::Release);
        self.leader_epoch.store(p.leader_epoch, Ordering::Release);
        if let Some(Some(log)) = log.as_deref_mut().filter(|_| leads_anew) {
            // A checkpoint write (and its fsyncs) when the epoch is new.
            if let Err(e) = off_async_workers(|| log.assign_leader_epoch(p.leader_epoch)) {
                tracing::error!(topic = %self.topic, partition = self.index, leader_epoch = p.leader_epoch, error = %e, "cannot record the new leader epoch; the log is offline");
            }
        }
        {
            let mut set = self.replica_set.lock();
            if leads_anew {
                *set = ReplicaSet::new(
                    self.local_node,
                    &p.replicas,
                    &p.isr,
                    partition_epoch,
                    now_ms,
                );
                self.leader_epoch_start_offset
                    .store(self.log_end_offset(), Ordering::Release);
            } else {
                set.update(&p.replicas, &p.isr, partition_epoch, now_ms);
            }
        }
        drop(log);
        if self.role() == Role::Leader {
            self.maybe_increment_high_watermark();
        }
        // Waiters re-check who leads.
        self.hw_changes.send_modify(|_| {});
        changed
    }

    /// After any change of the log, under its lock: mirrors the log end
    /// and moves the high watermark as the role allows (a truncation may
    /// lower it on a follower).
    pub(crate) fn update_high_watermark(&self, log: &Log) {
        let end = log.log_end_offset();
        self.log_end_offset.store(end, Ordering::Release);
        match self.role() {
            Role::Leader => {
                self.maybe_increment_high_watermark();
            }
            Role::Follower => {
                if self.high_watermark.fetch_min(end, Ordering::AcqRel) > end {
                    self.hw_changes.send_replace(end);
                }
            }
        }
    }

    /// Leader: raises the high watermark to what the ISR allows. Returns
    /// whether it moved.
    pub(crate) fn maybe_increment_high_watermark(&self) -> bool {
        let bound = {
            let set = self.replica_set.lock();
            if set.isr().len() < self.effective_min_isr(set.replicas().len()) {
                return false;
            }
            match set.high_watermark_bound(self.log_end_offset()) {
                Some(bound) => bound,
                None => return false,
            }
        };
        let old = self.high_watermark.fetch_max(bound, Ordering::AcqRel);
        if bound > old {
            self.hw_changes.send_replace(bound);
            true
        } else {
            false
        }
    }

    /// NOT_ENOUGH_REPLICAS when an acks=all produce may not even be
    /// appended: the ISR is smaller than `min.insync.replicas`.
    pub fn check_enough_replicas(&self) -> Result<(), PartitionError> {
        let (isr, min) = self.isr_size_and_min();
        if isr < min {
            return Err(PartitionError::new(
                error::NOT_ENOUGH_REPLICAS,
                format!(
                    "The size of the current ISR {isr} is insufficient to satisfy the min.isr requirement of {min} for partition {}-{}",
                    self.topic, self.index
                ),
            ));
        }
        Ok(())
    }

    /// Whether this broker leads, without a break since `leader_epoch`
    /// (what it appended in that epoch is still in its log).
    pub fn leads_since(&self, leader_epoch: i32) -> bool {
        self.role() == Role::Leader && self.led_since_epoch.load(Ordering::Acquire) <= leader_epoch
    }

    /// Waits until the high watermark reaches `end` (acks=all), at most
    /// `timeout`: REQUEST_TIMED_OUT then, NOT_LEADER_OR_FOLLOWER when this
    /// broker stops leading meanwhile (a later epoch in which it still
    /// leads without a break, as after a reassignment dropped a replica,
    /// keeps the wait), and NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR
    /// shrank below `min.insync.replicas` after the append.
    pub async fn wait_replicated(
        &self,
        end: i64,
        leader_epoch: i32,
        timeout: Duration,
    ) -> Result<(), PartitionError> {
        let mut changes = self.hw_changes.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            if !self.leads_since(leader_epoch) {
                return Err(PartitionError::new(
                    error::NOT_LEADER_OR_FOLLOWER,
                    format!(
                        "leadership of {}-{} moved while the produce waited for its replicas",
                        self.topic, self.index
                    ),
                ));
            }
            if self.high_watermark() >= end {
                let (isr, min) = self.isr_size_and_min();
                if isr < min {
                    return Err(PartitionError::new(
                        error::NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        format!("the ISR of {}-{} shrank to {isr}, below min.insync.replicas {min}, after the append", self.topic, self.index),
                    ));
                }
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => unreachable!("the partition holds the sender"),
                Err(_) => {
                    return Err(PartitionError::new(
                        error::REQUEST_TIMED_OUT,
                        format!(
                            "the replicas of {}-{} did not reach offset {end} in time",
                            self.topic, self.index
                        ),
                    ))
                }
            }
        }
    }

    /// Leader: serves a follower's fetch. Checks the follower's last
    /// fetched epoch against this log first (Fetch v12+): when they
    /// diverge, the answer says where, with no records. Otherwise records
    /// the follower's position (which may move the high watermark or let
    /// it join the ISR) and reads from `fetch_offset` to the log end.
    pub fn follower_fetch(
        &self,
        replica: i32,
        replica_epoch: i64,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        max_bytes: usize,
        now_ms: i64,
    ) -> Result<(FollowerRead, FollowerFetchOutcome), PartitionError> {
        match self.follower_position(
            replica,
            replica_epoch,
            fetch_offset,
            last_fetched_epoch,
            now_ms,
        )? {
            Err(diverging) => Ok((diverging, FollowerFetchOutcome::default())),
            Ok(outcome) => {
                let (region, offsets) =
                    self.read_region(fetch_offset, max_bytes, true, ReadLimit::LogEnd)?;
                Ok((FollowerRead::Records { region, offsets }, outcome))
            }
        }
    }

    /// Checks a consumer's last fetched epoch (Fetch v12+, the
    /// Java consumer's truncation detection, KIP-320) as Kafka does before
    /// reading: an epoch this log cannot place is OFFSET_OUT_OF_RANGE, and
    /// one that ends here before `fetch_offset` (or a newer one than this
    /// log has below it) is a divergence, answered with where it ends and
    /// no records. `None`: read on.
    pub fn consumer_divergence(
        &self,
        fetch_offset: i64,
        last_fetched_epoch: i32,
    ) -> Result<Option<FollowerRead>, PartitionError> {
        if last_fetched_epoch < 0 {
            return Ok(None);
        }
        // A follower serving consumers (KIP-392) answers from its own log.
        let current = self.leader_epoch();
        let leads = self.role() == crate::replica_manager::Role::Leader;
        let (epoch, end_offset) = self.with_log_ref(|log| match leads {
            true => log.end_offset_for_epoch_as_leader(last_fetched_epoch, current),
            false => log.end_offset_for_epoch(last_fetched_epoch),
        })?;
        if epoch < 0 || end_offset < 0 {
            return Err(PartitionError::new(
                error::OFFSET_OUT_OF_RANGE,
                format!(
                    "{}-{} has no record of leader epoch {last_fetched_epoch}",
                    self.topic, self.index
                ),
            ));
        }
        if end_offset < fetch_offset || epoch < last_fetched_epoch {
            return Ok(Some(FollowerRead::Diverging {
                epoch,
                end_offset,
                offsets: self.offsets()?,
            }));
        }
        Ok(None)
    }

    /// Leader: a follower's fetch without its read (which the caller makes
    /// as it sends): the divergence (`Err`, a [`FollowerRead::Diverging`])
    /// or, once the follower's position is recorded, what that asks.
    pub fn follower_position(
        &self,
        replica: i32,
        replica_epoch: i64,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        now_ms: i64,
    ) -> Result<Result<FollowerFetchOutcome, FollowerRead>, PartitionError> {
        self.check_leader()?;
        if last_fetched_epoch >= 0 {
            let (epoch, end_offset) =
                self.with_log_ref(|log| log.end_offset_for_epoch(last_fetched_epoch))?;
            // An epoch this log does not know (it has none, or the
            // follower's is newer) is not reported: the read then finds
            // the follower's offset out of range, and the follower
            // settles it with ListOffsets.
            if epoch >= 0 && (end_offset < fetch_offset || epoch < last_fetched_epoch) {
                return Ok(Err(FollowerRead::Diverging {
                    epoch,
                    end_offset,
                    offsets: self.offsets()?,
                }));
            }
        }
        // A follower ahead of this log has records it does not: it is
        // told so (the read's OFFSET_OUT_OF_RANGE) before its position
        // counts for the high watermark.
        if fetch_offset > self.log_end_offset() {
            return Err(PartitionError::new(
                error::OFFSET_OUT_OF_RANGE,
                format!(
                    "follower {replica} fetches {}-{} at {fetch_offset}, past the leader's log end {}",
                    self.topic,
                    self.index,
                    self.log_end_offset()
                ),
            ));
        }
        Ok(Ok(self.record_follower_fetch(
            replica,
            replica_epoch,
            fetch_offset,
            now_ms,
        )?))
    }

    fn record_follower_fetch(
        &self,
        replica: i32,
        replica_epoch: i64,
        fetch_offset: i64,
        now_ms: i64,
    ) -> Result<FollowerFetchOutcome, PartitionError> {
        let leader_end = self.log_end_offset();
        {
            let mut set = self.replica_set.lock();
            if !set.record_fetch(replica, replica_epoch, fetch_offset, leader_end, now_ms) {
                return Err(PartitionError::new(
                    error::NOT_LEADER_OR_FOLLOWER,
                    format!(
                        "broker {replica} is not a replica of {}-{}",
                        self.topic, self.index
                    ),
                ));
            }
        }
        let high_watermark_moved = self.maybe_increment_high_watermark();
        let expand_isr = {
            let mut set = self.replica_set.lock();
            let wanted = set.expansion(
                replica,
                self.high_watermark(),
                self.leader_epoch_start_offset.load(Ordering::Acquire),
            );
            wanted.map(|new_isr| {
                let id = set.begin_change(new_isr.clone());
                IsrChange {
                    leader_epoch: self.leader_epoch(),
                    partition_epoch: set.partition_epoch(),
                    broker_epochs: set.broker_epochs(&new_isr),
                    new_isr,
                    id,
                    shrinks: false,
                }
            })
        };
        Ok(FollowerFetchOutcome {
            high_watermark_moved,
            expand_isr,
        })
    }

    /// Leader: the ISR without members that have not caught up for
    /// `lag_max_ms`, as a change for the controller (marked pending).
    pub fn maybe_shrink_isr(&self, now_ms: i64, lag_max_ms: i64) -> Option<IsrChange> {
        if self.role() != Role::Leader {
            return None;
        }
        let mut set = self.replica_set.lock();
        let new_isr = set.shrink(now_ms, lag_max_ms)?;
        let id = set.begin_change(new_isr.clone());
        Some(IsrChange {
            leader_epoch: self.leader_epoch(),
            partition_epoch: set.partition_epoch(),
            broker_epochs: set.broker_epochs(&new_isr),
            new_isr,
            id,
            shrinks: true,
        })
    }

    /// Leader: settles `change` by what the controller answered, as
    /// Kafka's leader does; true when it is to be sent again. While a
    /// change is pending the high watermark counts the members it adds
    /// (the maximal ISR), so it stays pending until it is known not to
    /// have been committed, or until the metadata moves the partition on
    /// (which settles it, committed or overtaken):
    ///
    /// - committed: settled once the ISR here is the one asked for (a
    ///   commit that changed it settles it when it is applied here);
    /// - INELIGIBLE_REPLICA or OPERATION_NOT_ATTEMPTED: the controller
    ///   says it applied nothing, now or ever (the partition epoch it
    ///   checked is current): settled, a later check may ask again;
    /// - STALE_BROKER_EPOCH or NOT_CONTROLLER: sent again;
    /// - any other refusal (stale epochs, an unknown or moved partition):
    ///   the controller holds newer state, which the metadata brings;
    /// - no answer: sent again, since it may have been committed (and a
    ///   member it adds may be in the ISR the next metadata brings).
    ///
    /// An answer to a change no longer pending (overtaken by the
    /// metadata, or by another change) settles nothing.
    pub fn isr_change_answered(&self, change: &IsrChange, answer: IsrChangeAnswer) -> bool {
        let mut set = self.replica_set.lock();
        if !set.change_pending_is(change.id) {
            return false;
        }
        match answer {
            IsrChangeAnswer::Committed => {
                if set.isr() == change.new_isr.as_slice() {
                    set.change_settled(change.id);
                }
                false
            }
            IsrChangeAnswer::Refused(
                error::INELIGIBLE_REPLICA | error::OPERATION_NOT_ATTEMPTED,
            ) => {
                set.change_settled(change.id);
                false
            }
            IsrChangeAnswer::Refused(error::STALE_BROKER_EPOCH | error::NOT_CONTROLLER)
            | IsrChangeAnswer::Unanswered => true,
            IsrChangeAnswer::Refused(_) => false,
        }
    }

    /// Follower: whether this broker still follows in `leader_epoch`. A
    /// fetch answer from an earlier epoch (or one that arrives after this
    /// broker became leader) is stale: FENCED_LEADER_EPOCH.
    fn check_following(&self, leader_epoch: i32) -> Result<(), PartitionError> {
        let current = self.leader_epoch();
        if self.role() == Role::Follower && current == leader_epoch {
            return Ok(());
        }
        Err(PartitionError::new(
            error::FENCED_LEADER_EPOCH,
            format!(
                "{}-{} moved on from following in leader epoch {leader_epoch} (now epoch {current}, leader {})",
                self.topic,
                self.index,
                self.leader()
            ),
        ))
    }

    /// Follower: appends batches its leader sent, as they are. Runs on
    /// the calling thread (a roll may fsync): call it off async workers.
    /// A flush that `flush.messages` makes due is queued, not awaited
    /// here: the replica fetcher awaits `durability_barrier` before its
    /// next fetch reports the new log end to the leader.
    ///
    /// `leader_epoch` is the epoch the batches were fetched in: once the
    /// partition has moved on (another epoch, or this broker leads), they
    /// are refused (FENCED_LEADER_EPOCH, checked under the log's lock).
    pub fn append_as_follower(
        &self,
        leader_epoch: i32,
        records: &[u8],
    ) -> Result<AppendInfo, PartitionError> {
        let step = self.with_log(|log| {
            self.check_following(leader_epoch)?;
            self.check_writes()?;
            self.sync_topic_id_before_append(log)?;
            let info = log
                .append_as_follower(records)
                .map_err(|e| self.reported("appending", e.into()))?;
            let flush = if log.flush_due() {
                log.prepare_flush()?
            } else {
                None
            };
            Ok((info, flush))
        });
        let (info, flush) = self.note_storage(&self.writes_failing, "appending", step)?;
        if let Some(target) = flush {
            self.flush_requested_upto
                .fetch_max(target.upto(), Ordering::AcqRel);
            self.submit_flush(target);
        }
        Ok(info)
    }

    /// Follower: takes the high watermark the leader of `leader_epoch`
    /// reported, capped by this log's end; true when that moved it.
    /// Ignored once the partition moved on.
    pub fn update_follower_high_watermark(
        &self,
        leader_epoch: i32,
        leader_high_watermark: i64,
    ) -> bool {
        if self.check_following(leader_epoch).is_err() {
            return false;
        }
        let hw = leader_high_watermark.min(self.log_end_offset()).max(0);
        let moved = self.high_watermark.swap(hw, Ordering::AcqRel) != hw;
        if moved {
            self.hw_changes.send_replace(hw);
        }
        moved
    }

    /// Follower: removes everything at and after `offset`, as the leader
    /// of `leader_epoch` asked (refused, as appends are, once the
    /// partition moved on).
    pub fn truncate_to(&self, leader_epoch: i32, offset: i64) -> Result<(), PartitionError> {
        let step = self.with_log(|log| {
            self.check_following(leader_epoch)?;
            if offset < log.log_end_offset() {
                tracing::info!(topic = %self.topic, partition = self.index, from = log.log_end_offset(), to = offset, "truncating to the leader's log");
            }
            // Even at the log end: an epoch this replica started as a
            // leader and wrote nothing in still ends there, and would be
            // sent as its last fetched epoch again (Kafka's truncateTo
            // drops it the same way).
            off_async_workers(|| log.truncate_to(offset))?;
            self.truncated_durability(log);
            Ok(())
        });
        self.note_storage(&self.writes_failing, "truncating", step)
    }

    /// Follower: empties the log and starts it at `offset` (the leader's
    /// log start is past this log's end), as the leader of `leader_epoch`
    /// asked.
    pub fn truncate_fully_and_start_at(
        &self,
        leader_epoch: i32,
        offset: i64,
    ) -> Result<(), PartitionError> {
        let step = self.with_log(|log| {
            self.check_following(leader_epoch)?;
            tracing::info!(topic = %self.topic, partition = self.index, offset, "starting over at the leader's log start");
            off_async_workers(|| log.truncate_fully_and_start_at(offset))?;
            self.truncated_durability(log);
            Ok(())
        });
        self.note_storage(&self.writes_failing, "truncating", step)
    }

    /// After a truncation (durable when it returns): the completions
    /// learn the log's durable offset, now its new end, so a write past
    /// it waits for its own flush again instead of counting as durable
    /// because the cut bytes were; flushes queued before it cover nothing
    /// past the new end either.
    fn truncated_durability(&self, log: &Log) {
        self.flush_requested_upto
            .fetch_min(log.log_end_offset(), Ordering::AcqRel);
        self.durability.publisher().publish(&log.durability());
    }

    /// Follower: what the next fetch from the leader sends: this log's
    /// end, the epoch of its last batch, and its start.
    pub fn fetch_position(&self) -> Result<(i64, i32, i64), PartitionError> {
        self.with_log_ref(|log| {
            (
                log.log_end_offset(),
                log.latest_epoch().unwrap_or(-1),
                log.log_start_offset(),
            )
        })
    }

    /// Follower: the truncation point for a divergence the leader
    /// reported, from this log's own end for that epoch.
    pub fn divergence_truncation_offset(
        &self,
        epoch: i32,
        end_offset: i64,
    ) -> Result<i64, PartitionError> {
        self.with_log_ref(|log| {
            if epoch < 0 || end_offset < 0 {
                // The leader knows no epoch of ours: keep what is committed.
                return self.high_watermark().min(log.log_end_offset());
            }
            let (own_epoch, own_end) = log.end_offset_for_epoch(epoch);
            let mut offset = end_offset.min(log.log_end_offset());
            if own_epoch >= 0 && own_end >= 0 {
                offset = offset.min(own_end);
            }
            offset
        })
    }

    /// Follower: raises the log start offset to the leader's.
    pub fn follow_log_start_offset(
        &self,
        leader_epoch: i32,
        leader_log_start_offset: i64,
    ) -> Result<(), PartitionError> {
        let step = self.with_log(|log| {
            self.check_following(leader_epoch)?;
            if leader_log_start_offset > log.log_start_offset()
                && leader_log_start_offset <= log.log_end_offset()
            {
                log.delete_records_before(leader_log_start_offset)?;
            }
            Ok(())
        });
        self.note_storage(&self.writes_failing, "moving the log start", step)
    }
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("topic", &self.topic)
            .field("index", &self.index)
            .field("leader", &self.leader())
            .field("leader_epoch", &self.leader_epoch())
            .field("high_watermark", &self.high_watermark())
            .finish_non_exhaustive()
    }
}
