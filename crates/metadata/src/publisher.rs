//! The publisher: applies committed metadata entries to the image, one at
//! a time in commit order, and tells every listener what changed.
//!
//! A broker learns of metadata only here, whoever committed it: this node
//! (a quorum of one), or the active controller of a cluster, whose
//! committed entries reach every node through the quorum. Listeners (the
//! replica manager, the group coordinator, metrics, the console) react to
//! each published entry; a caller that committed a change and must see it
//! applied waits for its offset with [`MetadataPublisher::wait_for`].

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use tarn_protocol::Uuid;

use crate::{MetadataImage, MetadataRecord};

/// One committed entry as a listener sees it.
pub struct MetadataDelta<'a> {
    /// The entry's offset in the metadata log.
    pub offset: u64,
    pub records: &'a [MetadataRecord],
    /// The image before the entry.
    pub previous: &'a Arc<MetadataImage>,
    /// The records are a whole image (a snapshot installed from the
    /// quorum's leader), not a change to the previous one.
    pub snapshot: bool,
}

impl MetadataDelta<'_> {
    /// The topics (ids) the entry's records name, or `None` when a record
    /// can change any topic (a broker config or registration does).
    pub fn touched_topics(&self) -> Option<Vec<Uuid>> {
        if self.snapshot {
            return None;
        }
        let mut ids = Vec::new();
        for record in self.records {
            match record.topic_id() {
                Some(id) if !ids.contains(&id) => ids.push(id),
                Some(_) => {}
                None if record.changes_broker_config() => return None,
                None => {}
            }
        }
        Some(ids)
    }

    /// The topics the entry removed, by name, as the previous image had them.
    pub fn removed_topics(&self) -> Vec<&str> {
        if self.snapshot {
            let kept: Vec<[u8; 16]> = self
                .records
                .iter()
                .filter_map(|r| match r {
                    MetadataRecord::Topic { topic_id, .. } => Some(*topic_id),
                    _ => None,
                })
                .collect();
            return self
                .previous
                .topics()
                .filter(|t| !kept.contains(&t.topic_id.0))
                .map(|t| t.name.as_str())
                .collect();
        }
        self.records
            .iter()
            .filter_map(|record| match record {
                MetadataRecord::RemoveTopic { topic_id } => self
                    .previous
                    .topic_by_id(&Uuid(*topic_id))
                    .map(|t| t.name.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Something that reacts to published metadata. It runs while the
/// publisher holds its lock, so it sees entries one at a time and in
/// order; it should not wait on the network.
pub trait MetadataListener: Send + Sync {
    /// Names the listener in errors and logs.
    fn name(&self) -> &'static str;
    /// `image` is the image with the entry applied.
    fn on_publish(
        &self,
        delta: &MetadataDelta<'_>,
        image: &Arc<MetadataImage>,
    ) -> Result<(), String>;
}

/// A listener failed to apply an entry. The entry is committed and
/// published all the same (the image and the other listeners have it):
/// what failed is this node's reaction, which the caller reports.
#[derive(Debug, thiserror::Error)]
#[error("{listener} failed to apply metadata entry {offset}: {message}")]
pub struct PublishError {
    pub listener: &'static str,
    pub offset: u64,
    pub message: String,
}

pub struct MetadataPublisher {
    image: RwLock<Arc<MetadataImage>>,
    /// The offset of the last published entry.
    published: watch::Sender<u64>,
    listeners: RwLock<Vec<Arc<dyn MetadataListener>>>,
    /// Publishes one entry at a time.
    serial: Mutex<()>,
}

impl MetadataPublisher {
    /// A publisher whose image already holds the entries up to `offset`.
    pub fn new(image: MetadataImage, offset: u64) -> Self {
        MetadataPublisher {
            image: RwLock::new(Arc::new(image)),
            published: watch::channel(offset).0,
            listeners: RwLock::new(Vec::new()),
            serial: Mutex::new(()),
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().clone()
    }

    pub fn published_offset(&self) -> u64 {
        *self.published.borrow()
    }

    /// Changes every time an entry is published; the value is its offset.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.published.subscribe()
    }

    /// Adds a listener for the entries published from now on.
    pub fn register(&self, listener: Arc<dyn MetadataListener>) {
        self.listeners.write().push(listener);
    }

    /// Applies the entry at `offset` and runs every listener on it. An
    /// entry at or below the published offset was published already (a
    /// replay after a snapshot, say) and is skipped. Every listener runs
    /// even when one fails; the first failure is returned.
    pub fn publish(&self, offset: u64, records: &[MetadataRecord]) -> Result<(), PublishError> {
        let _serial = self.serial.lock();
        if offset <= self.published_offset() {
            return Ok(());
        }
        let previous = self.image();
        let mut next = (*previous).clone();
        for record in records {
            next.apply(record);
        }
        self.announce(offset, records, previous, next, false)
    }

    /// Replaces the image with `image`, which holds every entry up to
    /// `offset` (a snapshot from the quorum), and tells the listeners.
    pub fn install(&self, offset: u64, image: MetadataImage) -> Result<(), PublishError> {
        let _serial = self.serial.lock();
        let records = image.to_records();
        let previous = self.image();
        self.announce(offset, &records, previous, image, true)
    }

    /// Makes `next` the image and runs the listeners; under `serial`.
    fn announce(
        &self,
        offset: u64,
        records: &[MetadataRecord],
        previous: Arc<MetadataImage>,
        next: MetadataImage,
        snapshot: bool,
    ) -> Result<(), PublishError> {
        let next = Arc::new(next);
        *self.image.write() = next.clone();
        let delta = MetadataDelta {
            offset,
            records,
            previous: &previous,
            snapshot,
        };
        let listeners = self.listeners.read().clone();
        let mut failed = None;
        for listener in listeners {
            if let Err(message) = listener.on_publish(&delta, &next) {
                tracing::error!(listener = listener.name(), offset, error = %message, "applying committed metadata failed");
                failed.get_or_insert(PublishError {
                    listener: listener.name(),
                    offset,
                    message,
                });
            }
        }
        self.published.send_replace(offset);
        failed.map_or(Ok(()), Err)
    }

    /// Returns once the entry at `offset` is published here.
    pub async fn wait_for(&self, offset: u64) {
        let mut published = self.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        if published.wait_for(|p| *p >= offset).await.is_err() {
            unreachable!("the publisher outlives its waiters");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::topic;

    /// What a listener saw of one entry: its offset, the topics it
    /// touched and the topics it removed.
    type Seen = (u64, Option<Vec<Uuid>>, Vec<String>);

    struct Recorder(Mutex<Vec<Seen>>);

    impl MetadataListener for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn on_publish(
            &self,
            delta: &MetadataDelta<'_>,
            image: &Arc<MetadataImage>,
        ) -> Result<(), String> {
            let removed = delta
                .removed_topics()
                .into_iter()
                .map(str::to_owned)
                .collect();
            self.0
                .lock()
                .push((delta.offset, delta.touched_topics(), removed));
            if image.topic("refused").is_some() {
                return Err("refused".into());
            }
            Ok(())
        }
    }

    #[test]
    fn listeners_see_each_entry_once_in_order() {
        let publisher = MetadataPublisher::new(MetadataImage::default(), 0);
        let recorder = Arc::new(Recorder(Mutex::new(Vec::new())));
        publisher.register(recorder.clone());
        publisher.publish(1, &[topic("a", 1)]).unwrap();
        publisher.publish(1, &[topic("again", 9)]).unwrap();
        publisher
            .publish(
                2,
                &[MetadataRecord::BrokerConfig {
                    broker_id: None,
                    name: "log.retention.ms".into(),
                    value: Some("1".into()),
                }],
            )
            .unwrap();
        publisher
            .publish(3, &[MetadataRecord::RemoveTopic { topic_id: [1; 16] }])
            .unwrap();
        let seen = recorder.0.lock().clone();
        assert_eq!(
            seen,
            vec![
                (1, Some(vec![Uuid([1; 16])]), vec![]),
                (2, None, vec![]),
                (3, Some(vec![Uuid([1; 16])]), vec!["a".to_owned()]),
            ]
        );
        assert!(
            publisher.image().topic("again").is_none(),
            "a republished offset is skipped"
        );
        assert_eq!(publisher.published_offset(), 3);
    }

    #[test]
    fn a_failing_listener_is_reported_and_the_entry_still_published() {
        let publisher = MetadataPublisher::new(MetadataImage::default(), 0);
        publisher.register(Arc::new(Recorder(Mutex::new(Vec::new()))));
        let e = publisher.publish(1, &[topic("refused", 2)]).unwrap_err();
        assert_eq!((e.listener, e.offset), ("recorder", 1));
        assert!(publisher.image().topic("refused").is_some());
        assert_eq!(publisher.published_offset(), 1);
    }

    #[tokio::test]
    async fn wait_for_returns_once_the_offset_is_published() {
        let publisher = Arc::new(MetadataPublisher::new(MetadataImage::default(), 0));
        let waiter = tokio::spawn({
            let publisher = publisher.clone();
            async move { publisher.wait_for(2).await }
        });
        publisher.publish(1, &[topic("a", 1)]).unwrap();
        assert!(!waiter.is_finished());
        publisher.publish(2, &[topic("b", 2)]).unwrap();
        waiter.await.unwrap();
    }
}
