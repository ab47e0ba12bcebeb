//! The fetcher's side of a fetch session (KIP-227; Kafka's
//! `FetchSessionHandler`), for a follower that fetches many partitions
//! from one leader over one connection.
//!
//! The first fetch names every partition with epoch 0 and asks the leader
//! to open a session. Once it has, each later fetch names only the
//! partitions whose fetch parameters changed since the last request the
//! leader took (or that are new to the session), lists as forgotten those
//! the fetcher no longer wants, and carries the session's next epoch; the
//! leader remembers the rest and answers only the partitions with news.
//! A partition the fetcher leaves out of a round (backing off, throttled)
//! is forgotten and sent whole when it is wanted again, as Kafka's fetcher
//! does.
//!
//! Invariant: `sent` is what the leader's session holds, as of the last
//! response taken. A request whose answer is not taken (an error, a lost
//! connection) leaves the handler to open a new session with the next
//! fetch, naming the old one so the leader can drop it.

use std::collections::HashMap;

use tarn_protocol::error;
use tarn_protocol::messages::fetch::{FetchPartition, FetchTopic, ForgottenTopic};
use tarn_protocol::Uuid;

/// No session (Kafka's INVALID_SESSION_ID).
pub const NO_SESSION: i32 = 0;
/// The epoch of a full fetch that opens a session.
const INITIAL_EPOCH: i32 = 0;

/// A partition by topic id and index.
pub type PartitionKey = (Uuid, i32);

/// The session fields and partitions of one fetch request.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFetch {
    pub session_id: i32,
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    pub forgotten_topics_data: Vec<ForgottenTopic>,
}

impl SessionFetch {
    /// Whether the request is a full one (every wanted partition named).
    pub fn is_full(&self) -> bool {
        self.session_epoch == INITIAL_EPOCH
    }
}

/// One fetcher's session with one leader.
#[derive(Debug, Default)]
pub struct FetchSessionHandler {
    session_id: i32,
    /// The epoch of the next request: 0 opens a new session.
    next_epoch: i32,
    /// What the leader's session holds (see the module's invariant).
    sent: HashMap<PartitionKey, FetchPartition>,
    /// What the request in flight leaves the session holding, once its
    /// answer is taken.
    in_flight: Option<HashMap<PartitionKey, FetchPartition>>,
}

impl FetchSessionHandler {
    pub fn new() -> FetchSessionHandler {
        FetchSessionHandler::default()
    }

    /// The session id and the partitions it holds at the leader.
    pub fn session(&self) -> (i32, usize) {
        (self.session_id, self.sent.len())
    }

    /// The request for `wanted` (every partition to fetch in this round,
    /// in order): all of them for a full fetch; for an incremental one the
    /// new and changed ones, and the session's others as forgotten.
    pub fn build(&mut self, wanted: &[(Uuid, FetchPartition)]) -> SessionFetch {
        let full = self.next_is_full();
        let mut topics: Vec<FetchTopic> = Vec::new();
        let mut next = HashMap::with_capacity(wanted.len());
        for (topic_id, partition) in wanted {
            let key = (*topic_id, partition.partition);
            let unchanged = !full && self.sent.get(&key) == Some(partition);
            next.insert(key, partition.clone());
            if unchanged {
                continue;
            }
            match topics.last_mut() {
                Some(t) if t.topic_id == *topic_id => t.partitions.push(partition.clone()),
                _ => topics.push(FetchTopic {
                    topic: String::new(),
                    topic_id: *topic_id,
                    partitions: vec![partition.clone()],
                }),
            }
        }
        let mut forgotten: Vec<ForgottenTopic> = Vec::new();
        if !full {
            let mut gone: Vec<PartitionKey> = self
                .sent
                .keys()
                .filter(|key| !next.contains_key(key))
                .copied()
                .collect();
            gone.sort_unstable();
            for (topic_id, index) in gone {
                match forgotten.last_mut() {
                    Some(t) if t.topic_id == topic_id => t.partitions.push(index),
                    _ => forgotten.push(ForgottenTopic {
                        topic: String::new(),
                        topic_id,
                        partitions: vec![index],
                    }),
                }
            }
        }
        self.in_flight = Some(next);
        SessionFetch {
            session_id: self.session_id,
            session_epoch: if full { INITIAL_EPOCH } else { self.next_epoch },
            topics,
            forgotten_topics_data: forgotten,
        }
    }

    /// Takes the answer to the last request built: its top-level error and
    /// session id. `Ok` means the response's partitions can be used (those
    /// it leaves out have nothing new); `Err` says why not, and the next
    /// request opens a new session.
    pub fn handle_response(&mut self, error_code: i16, session_id: i32) -> Result<(), String> {
        let Some(next) = self.in_flight.take() else {
            return Err("a fetch response with no request in flight".to_owned());
        };
        let was_full = self.next_is_full();
        if error_code != error::NONE {
            let reason = format!("the leader refused the fetch session (error {error_code})");
            if error_code == error::FETCH_SESSION_ID_NOT_FOUND {
                // The leader has no such session to close.
                self.session_id = NO_SESSION;
            }
            self.restart();
            return Err(reason);
        }
        if was_full {
            // Opened, or (id 0) the leader had no room: full fetches go on.
            self.session_id = session_id;
            if session_id == NO_SESSION {
                self.restart();
            } else {
                self.sent = next;
                self.next_epoch = next_epoch(INITIAL_EPOCH);
            }
            return Ok(());
        }
        if session_id != self.session_id {
            let reason = format!(
                "an incremental fetch in session {} was answered for session {session_id}",
                self.session_id
            );
            self.restart();
            return Err(reason);
        }
        self.sent = next;
        self.next_epoch = next_epoch(self.next_epoch);
        Ok(())
    }

    /// The request's answer never came (a lost connection, a timeout): the
    /// next request opens a new session, closing this one.
    pub fn handle_error(&mut self) {
        self.in_flight = None;
        self.restart();
    }

    /// Whether the next request is a full one. Without a session the
    /// epoch is always the initial one, so the epoch alone says it.
    fn next_is_full(&self) -> bool {
        self.next_epoch == INITIAL_EPOCH
    }

    /// Keeps the session id (so the leader can close it) and makes the
    /// next fetch a full one.
    fn restart(&mut self) {
        self.next_epoch = INITIAL_EPOCH;
        self.sent.clear();
    }
}

/// The epoch after `epoch`, wrapping past i32::MAX to 1 as Kafka does.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        let mut bytes = [0u8; 16];
        bytes[15] = n;
        Uuid(bytes)
    }

    fn at(index: i32, offset: i64) -> FetchPartition {
        FetchPartition {
            partition: index,
            current_leader_epoch: 3,
            fetch_offset: offset,
            last_fetched_epoch: 3,
            log_start_offset: 0,
            partition_max_bytes: 1 << 20,
            ..Default::default()
        }
    }

    fn named(fetch: &SessionFetch) -> Vec<(u8, i32, i64)> {
        fetch
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic_id.0[15], p.partition, p.fetch_offset))
            })
            .collect()
    }

    fn forgotten(fetch: &SessionFetch) -> Vec<(u8, i32)> {
        fetch
            .forgotten_topics_data
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id.0[15], *p)))
            .collect()
    }

    #[test]
    fn after_a_full_fetch_only_changes_and_removals_are_sent() {
        let mut handler = FetchSessionHandler::new();
        let wanted = vec![
            (topic(1), at(0, 10)),
            (topic(1), at(1, 20)),
            (topic(2), at(0, 5)),
        ];
        let first = handler.build(&wanted);
        assert_eq!((first.session_id, first.session_epoch), (NO_SESSION, 0));
        assert_eq!(named(&first), vec![(1, 0, 10), (1, 1, 20), (2, 0, 5)]);
        handler.handle_response(error::NONE, 77).unwrap();
        assert_eq!(handler.session(), (77, 3));

        // Nothing changed: an empty incremental fetch at epoch 1.
        let quiet = handler.build(&wanted);
        assert_eq!((quiet.session_id, quiet.session_epoch), (77, 1));
        assert!(named(&quiet).is_empty() && forgotten(&quiet).is_empty());
        handler.handle_response(error::NONE, 77).unwrap();

        // One partition moved on, one is left out this round, one is new.
        let moved = vec![
            (topic(1), at(0, 15)),
            (topic(2), at(0, 5)),
            (topic(3), at(4, 0)),
        ];
        let next = handler.build(&moved);
        assert_eq!(next.session_epoch, 2);
        assert_eq!(named(&next), vec![(1, 0, 15), (3, 4, 0)]);
        assert_eq!(forgotten(&next), vec![(1, 1)]);
        assert!(!next.is_full());
        handler.handle_response(error::NONE, 77).unwrap();
        assert_eq!(handler.session(), (77, 3));

        // The left-out partition comes back whole; the moved one is sent
        // again as its position differs from the session's.
        let back = handler.build(&wanted);
        assert_eq!(named(&back), vec![(1, 0, 10), (1, 1, 20)]);
        assert_eq!(forgotten(&back), vec![(3, 4)]);
    }

    #[test]
    fn a_refused_or_lost_fetch_opens_a_new_session_with_a_full_fetch() {
        let mut handler = FetchSessionHandler::new();
        let wanted = vec![(topic(1), at(0, 10)), (topic(1), at(1, 20))];
        handler.build(&wanted);
        handler.handle_response(error::NONE, 9).unwrap();
        handler.build(&wanted);
        // A stale epoch: the next fetch names the old session, epoch 0.
        assert!(handler
            .handle_response(error::INVALID_FETCH_SESSION_EPOCH, 0)
            .is_err());
        let retry = handler.build(&wanted);
        assert_eq!((retry.session_id, retry.session_epoch), (9, 0));
        assert_eq!(named(&retry).len(), 2);
        handler.handle_response(error::NONE, 10).unwrap();

        // The leader lost the session: nothing to close.
        handler.build(&wanted);
        assert!(handler
            .handle_response(error::FETCH_SESSION_ID_NOT_FOUND, 0)
            .is_err());
        let fresh = handler.build(&wanted);
        assert_eq!((fresh.session_id, fresh.session_epoch), (NO_SESSION, 0));
        handler.handle_response(error::NONE, 11).unwrap();

        // A lost connection, then an answer for another session.
        handler.build(&wanted);
        handler.handle_error();
        let after_loss = handler.build(&wanted);
        assert_eq!((after_loss.session_id, after_loss.session_epoch), (11, 0));
        handler.handle_response(error::NONE, 12).unwrap();
        handler.build(&wanted);
        assert!(handler.handle_response(error::NONE, 13).is_err());
        assert!(handler.build(&wanted).is_full());
    }

    #[test]
    fn a_leader_without_room_gets_full_fetches() {
        let mut handler = FetchSessionHandler::new();
        let wanted = vec![(topic(1), at(0, 10))];
        handler.build(&wanted);
        handler.handle_response(error::NONE, NO_SESSION).unwrap();
        let again = handler.build(&wanted);
        assert_eq!((again.session_id, again.session_epoch), (NO_SESSION, 0));
        assert_eq!(named(&again).len(), 1);
        assert_eq!(handler.session(), (NO_SESSION, 0));
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        assert_eq!(next_epoch(1), 2);
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
