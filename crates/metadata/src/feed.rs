//! The committed metadata log as nodes that are not voters follow it.
//!
//! A broker-only node (`process.roles=broker`) is not a member of the
//! quorum; like a Kafka broker fetching `__cluster_metadata` from the
//! controllers, it asks a voter for the committed entries after the offset
//! it has published. Every voter keeps its latest applied entries in a
//! [`MetadataFeed`] and serves them in log order; a follower further
//! behind than what is kept gets the whole image instead (a snapshot).
//!
//! Entries and the image are taken under the same lock that publishes
//! them on the voter, so an image and the offset it covers always match:
//! a follower never applies an entry twice or skips one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::log::{MetadataLog, MetadataLogError};
use crate::{MetadataImage, MetadataPublisher, MetadataRecord, PublishError};

/// Most records the kept entries hold in all (an entry of one topic with
/// many partitions holds many): beyond it the oldest entries go, and a
/// follower that needs them gets the image.
pub const FEED_RECORDS_MAX: usize = 50_000;
/// Most entries in one answer.
pub const FEED_READ_ENTRIES_MAX: usize = 1_000;

/// One committed entry: its offset in the metadata log and its records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeedEntry {
    pub offset: u64,
    pub records: Vec<MetadataRecord>,
}

/// What a voter answers a follower at some offset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FeedRead {
    /// The entries committed after the offset asked for, in log order;
    /// none when this voter has applied nothing newer.
    Entries(Vec<FeedEntry>),
    /// The whole image, covering every entry up to `offset`: the entries
    /// after the offset asked for are no longer kept.
    Image {
        offset: u64,
        records: Vec<MetadataRecord>,
    },
}

/// A voter's latest applied entries. Its state machine publishes through
/// it ([`MetadataFeed::publish`], [`MetadataFeed::install`]).
pub struct MetadataFeed {
    publisher: Arc<MetadataPublisher>,
    kept: Mutex<Kept>,
}

struct Kept {
    entries: VecDeque<FeedEntry>,
    records: usize,
    /// Every entry after this offset is in `entries`.
    complete_after: u64,
}

impl MetadataFeed {
    pub fn new(publisher: Arc<MetadataPublisher>) -> Self {
        let complete_after = publisher.published_offset();
        MetadataFeed {
            publisher,
            kept: Mutex::new(Kept {
                entries: VecDeque::new(),
                records: 0,
                complete_after,
            }),
        }
    }

    pub fn publisher(&self) -> &Arc<MetadataPublisher> {
        &self.publisher
    }

    /// Publishes the committed entry at `offset` and keeps it.
    pub fn publish(&self, offset: u64, records: Vec<MetadataRecord>) -> Result<(), PublishError> {
        let mut kept = self.kept.lock();
        if offset <= self.publisher.published_offset() {
            return Ok(());
        }
        let published = self.publisher.publish(offset, &records);
        kept.records += records.len();
        kept.entries.push_back(FeedEntry { offset, records });
        while kept.records > FEED_RECORDS_MAX {
            let Some(oldest) = kept.entries.pop_front() else {
                break;
            };
            kept.records -= oldest.records.len();
            kept.complete_after = oldest.offset;
        }
        published
    }

    /// Replaces the image with a snapshot covering the log up to `offset`;
    /// the kept entries, all older, go.
    pub fn install(&self, offset: u64, image: MetadataImage) -> Result<(), PublishError> {
        let mut kept = self.kept.lock();
        let installed = self.publisher.install(offset, image);
        kept.entries.clear();
        kept.records = 0;
        kept.complete_after = offset;
        installed
    }

    /// What a follower that has published up to `after` needs next.
    pub fn read_after(&self, after: u64) -> FeedRead {
        let kept = self.kept.lock();
        let published = self.publisher.published_offset();
        if after >= published {
            return FeedRead::Entries(Vec::new());
        }
        if after < kept.complete_after {
            return FeedRead::Image {
                offset: published,
                records: self.publisher.image().to_records(),
            };
        }
        FeedRead::Entries(
            kept.entries
                .iter()
                .skip_while(|e| e.offset <= after)
                .take(FEED_READ_ENTRIES_MAX)
                .cloned()
                .collect(),
        )
    }
}

/// Applies what a voter answered to a follower's `publisher`.
pub fn follow(publisher: &MetadataPublisher, read: FeedRead) -> Result<(), PublishError> {
    match read {
        FeedRead::Entries(entries) => {
            for entry in entries {
                publisher.publish(entry.offset, &entry.records)?;
            }
            Ok(())
        }
        FeedRead::Image { offset, records } => {
            if offset <= publisher.published_offset() {
                return Ok(());
            }
            let mut image = MetadataImage::default();
            for record in &records {
                image.apply(record);
            }
            publisher.install(offset, image)
        }
    }
}

/// The metadata log of a node that follows the quorum without being a
/// voter: it commits nothing itself (its broker sends its controller
/// requests to the active controller), and names the active controller
/// its feed last reported.
pub struct FollowingLog {
    publisher: Arc<MetadataPublisher>,
    leader: Arc<AtomicI32>,
}

impl FollowingLog {
    /// `leader` holds the active controller's id, -1 when none is known.
    pub fn new(publisher: Arc<MetadataPublisher>, leader: Arc<AtomicI32>) -> Self {
        FollowingLog { publisher, leader }
    }

    fn refuse(&self) -> MetadataLogError {
        let leader = self.leader.load(Ordering::Acquire);
        MetadataLogError::NotController {
            leader: (leader >= 0).then_some(leader),
        }
    }
}

impl MetadataLog for FollowingLog {
    /// The feed brings the image; there is nothing local to replay.
    fn replay(&self) -> Result<Vec<MetadataRecord>, MetadataLogError> {
        Ok(Vec::new())
    }

    fn append(&mut self, _records: &[MetadataRecord]) -> Result<u64, MetadataLogError> {
        Err(self.refuse())
    }

    fn end_offset(&self) -> u64 {
        self.publisher.published_offset()
    }

    fn prepare(&mut self) -> Result<bool, MetadataLogError> {
        Err(self.refuse())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::topic;

    fn feed() -> MetadataFeed {
        MetadataFeed::new(Arc::new(MetadataPublisher::new(
            MetadataImage::default(),
            0,
        )))
    }

    fn follower() -> MetadataPublisher {
        MetadataPublisher::new(MetadataImage::default(), 0)
    }

    /// Follows `feed` until it has nothing newer.
    fn catch_up(feed: &MetadataFeed, follower: &MetadataPublisher) {
        loop {
            match feed.read_after(follower.published_offset()) {
                FeedRead::Entries(entries) if entries.is_empty() => return,
                read => follow(follower, read).expect("apply what the feed sent"),
            }
        }
    }

    #[test]
    fn a_follower_gets_the_entries_after_its_offset_in_order() {
        let feed = feed();
        feed.publish(2, vec![topic("a", 1)]).expect("publish");
        feed.publish(5, vec![topic("b", 2)]).expect("publish");
        let FeedRead::Entries(entries) = feed.read_after(2) else {
            panic!("the entries after 2 are kept");
        };
        assert_eq!(
            entries,
            vec![FeedEntry {
                offset: 5,
                records: vec![topic("b", 2)]
            }]
        );
        assert_eq!(feed.read_after(5), FeedRead::Entries(vec![]));
        // A follower ahead of this voter (it read a more advanced one)
        // waits for it.
        assert_eq!(feed.read_after(9), FeedRead::Entries(vec![]));

        let follower = follower();
        catch_up(&feed, &follower);
        assert_eq!(follower.published_offset(), 5);
        assert_eq!(*follower.image(), *feed.publisher().image());
    }

    #[test]
    fn a_follower_behind_the_kept_entries_gets_the_image_and_then_entries() {
        let feed = feed();
        let per_entry = FEED_RECORDS_MAX / 4 + 1;
        let mut offset = 0;
        for round in 0..5u8 {
            offset += 1;
            let records = (0..per_entry)
                .map(|i| {
                    let mut topic_id = [round; 16];
                    topic_id[..8].copy_from_slice(&(i as u64).to_be_bytes());
                    MetadataRecord::Topic {
                        name: format!("t{round}-{i}"),
                        topic_id,
                    }
                })
                .collect();
            feed.publish(offset, records).expect("publish");
        }
        match feed.read_after(0) {
            FeedRead::Image {
                offset: covered, ..
            } => assert_eq!(covered, offset),
            FeedRead::Entries(_) => panic!("the first entries were dropped"),
        }
        let follower = follower();
        catch_up(&feed, &follower);
        assert!(
            *follower.image() == *feed.publisher().image(),
            "the follower rebuilt the voter's image"
        );

        feed.publish(offset + 1, vec![topic("late", 9)])
            .expect("publish");
        let FeedRead::Entries(entries) = feed.read_after(offset) else {
            panic!("the latest entries are kept");
        };
        assert_eq!(entries.len(), 1);
        catch_up(&feed, &follower);
        assert!(
            *follower.image() == *feed.publisher().image(),
            "the follower applied the entry after the image"
        );
        assert_eq!(follower.published_offset(), offset + 1);
    }

    #[test]
    fn an_installed_snapshot_is_served_as_the_image_to_those_behind_it() {
        let feed = feed();
        feed.publish(1, vec![topic("a", 1)]).expect("publish");
        let mut image = MetadataImage::default();
        image.apply(&topic("a", 1));
        image.apply(&topic("b", 2));
        feed.install(7, image.clone()).expect("install");
        match feed.read_after(1) {
            FeedRead::Image { offset, records } => {
                assert_eq!(offset, 7);
                assert_eq!(records, image.to_records());
            }
            FeedRead::Entries(_) => panic!("entries before a snapshot are not kept"),
        }
        assert_eq!(feed.read_after(7), FeedRead::Entries(vec![]));
        // An image older than what the follower has is not applied.
        let follower = follower();
        catch_up(&feed, &follower);
        follow(
            &follower,
            FeedRead::Image {
                offset: 3,
                records: vec![],
            },
        )
        .expect("an older image is ignored");
        assert_eq!(*follower.image(), image);
    }
}
