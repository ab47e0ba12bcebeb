//! A broker that is not a voter (`process.roles=broker`) follows the
//! committed metadata log as an observer, Kafka's word for it: it asks a
//! voter, over that voter's CONTROLLER listener, for the entries after
//! the offset it has published, and applies what comes back (the entries,
//! or the whole image when it is too far behind) through its publisher,
//! where the replica manager, the coordinators and the rest listen as on
//! a voter. It asks the active controller when it knows it (the most
//! recent log), another voter otherwise, and learns the active controller
//! from every answer, which is where its broker sends controller requests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tarn_metadata::feed::{self, FeedRead};
use tarn_replication::blocking::off_async_workers;

use crate::broker::Broker;
use crate::controller::{
    encode_request, ControllerReply, ControllerRequest, ControllerResponse, ControllerTopology,
};

/// How long a voter holds a fetch that has nothing new yet.
const FETCH_WAIT: Duration = Duration::from_millis(500);
/// How long a fetch may take in all before the voter counts as gone.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before asking again after a voter could not be reached.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// Where the active controller is, for a node that is not a voter: as
/// the last answer of the metadata log said.
pub(crate) struct ObserverTopology {
    /// The active controller's id, -1 when none is known.
    pub(crate) leader: Arc<AtomicI32>,
    pub(crate) controllers: BTreeMap<i32, String>,
}

impl ControllerTopology for ObserverTopology {
    fn is_active(&self) -> bool {
        false
    }

    fn active_id(&self) -> i32 {
        self.leader.load(Ordering::Acquire)
    }

    fn active_address(&self) -> Option<String> {
        self.controllers.get(&self.active_id()).cloned()
    }
}

/// Follows the metadata log until `stop`; `caught_up` turns true once a
/// voter had nothing newer than what this node published.
pub(crate) async fn run(
    broker: Arc<Broker>,
    controllers: BTreeMap<i32, String>,
    leader: Arc<AtomicI32>,
    caught_up: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let ids: Vec<i32> = controllers.keys().copied().collect();
    let client_id = format!("broker-{}-metadata", broker.node_id);
    let mut turn = 0usize;
    let mut connection: Option<(i32, tarn_client::Connection)> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let (voter, kept) = match connection.take() {
            Some(kept) => kept,
            None => {
                let known = leader.load(Ordering::Acquire);
                let voter = if controllers.contains_key(&known) {
                    known
                } else {
                    turn += 1;
                    ids[turn % ids.len()]
                };
                let address = &controllers[&voter];
                let connected = tokio::select! {
                    connected = tarn_client::Connection::connect(address, &client_id, FETCH_TIMEOUT) => connected,
                    _ = stop.changed() => return,
                };
                match connected {
                    Ok(kept) => (voter, kept),
                    Err(e) => {
                        tracing::debug!(voter, error = %e, "cannot reach a controller for the metadata log");
                        forget_unreachable(&leader, voter);
                        if pause(&mut stop).await {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        let mut kept = kept;
        match fetch(&broker, &mut kept, &client_id, &mut stop).await {
            Fetched::Stopped => return,
            Fetched::Failed(why) => {
                tracing::debug!(voter, error = %why, "fetching the metadata log failed");
                forget_unreachable(&leader, voter);
                if pause(&mut stop).await {
                    return;
                }
            }
            Fetched::Read {
                active_controller,
                read,
            } => {
                leader.store(active_controller, Ordering::Release);
                let nothing_newer = matches!(&read, FeedRead::Entries(e) if e.is_empty());
                let publisher = broker.metadata.publisher();
                // A listener's failure leaves the entry published, as on a
                // voter: the image must not stop at it.
                if let Err(e) = off_async_workers(|| feed::follow(publisher, read)) {
                    tracing::error!(error = %e, "applying committed metadata on this node");
                }
                if nothing_newer && !*caught_up.borrow() {
                    tracing::info!(
                        offset = publisher.published_offset(),
                        voter,
                        "caught up with the metadata log"
                    );
                    caught_up.send_replace(true);
                }
                // Keep asking this voter unless the active controller is
                // another one.
                if active_controller == voter || !controllers.contains_key(&active_controller) {
                    connection = Some((voter, kept));
                }
            }
        }
    }
}

enum Fetched {
    Read {
        active_controller: i32,
        read: FeedRead,
    },
    Failed(String),
    Stopped,
}

async fn fetch(
    broker: &Broker,
    connection: &mut tarn_client::Connection,
    client_id: &str,
    stop: &mut watch::Receiver<bool>,
) -> Fetched {
    let request = ControllerRequest::FetchMetadata {
        node_id: broker.node_id,
        after: broker.metadata.publisher().published_offset(),
        max_wait_ms: FETCH_WAIT.as_millis() as u64,
    };
    let frame = encode_request(1, client_id, &request);
    let answer = tokio::select! {
        answer = connection.round_trip(&frame) => answer,
        _ = stop.changed() => return Fetched::Stopped,
    };
    let bytes = match answer {
        Ok(bytes) => bytes,
        Err(e) => return Fetched::Failed(e.to_string()),
    };
    if bytes.len() < 4 || bytes[..4] != 1i32.to_be_bytes() {
        return Fetched::Failed("the voter answered another request".into());
    }
    match serde_json::from_slice::<ControllerResponse>(&bytes[4..]) {
        Ok(ControllerResponse {
            result:
                Ok(ControllerReply::Metadata {
                    active_controller,
                    read,
                }),
            ..
        }) => Fetched::Read {
            active_controller,
            read,
        },
        Ok(other) => Fetched::Failed(format!("unexpected answer: {:?}", other.result)),
        Err(e) => Fetched::Failed(format!("unreadable answer: {e}")),
    }
}

/// A voter that cannot be reached is not the one to ask next, even when
/// it was the active controller.
fn forget_unreachable(leader: &AtomicI32, voter: i32) {
    // Only this task stores the leader: no other store can come between.
    if leader.load(Ordering::Acquire) == voter {
        leader.store(-1, Ordering::Release);
    }
}

/// Waits before the next attempt; true when the node stops meanwhile.
async fn pause(stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(RETRY_BACKOFF) => false,
        _ = stop.changed() => true,
    }
}
