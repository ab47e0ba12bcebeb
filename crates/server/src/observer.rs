//! A broker that is not a voter (`process.roles=broker`) follows the
//! committed metadata log as an observer, Kafka's word for it: it asks a
//! voter, over that voter's CONTROLLER listener, for the entries after
//! the offset it has published, and applies what comes back (the entries,
//! or the whole image when it is too far behind) through its publisher,
//! where the replica manager, the coordinators and the rest listen as on
//! a voter. It asks the active controller when it knows it (the most
//! recent log), another voter otherwise, and learns the active controller
//! from every answer, which is where its broker sends controller requests.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
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
/// How long no voter may answer before it is said at WARN (and said again
/// as often while it lasts).
const UNREACHABLE_WARN_EVERY: Duration = Duration::from_secs(10);

/// Fetches that keep failing: each is logged at debug, and once none has
/// succeeded for [`UNREACHABLE_WARN_EVERY`] it is said at WARN, since a
/// broker that never catches up serves no clients (a controller down or
/// unreachable, or a combined node whose voters name only itself, which
/// runs as a single node and serves no observers).
#[derive(Default)]
struct Unanswered {
    since: Option<tokio::time::Instant>,
    warned: Option<tokio::time::Instant>,
}

impl Unanswered {
    fn failed(&mut self, voter: &str, controllers: &[String], what: &str, error: &str) {
        tracing::debug!(%voter, %error, "{what}");
        let now = tokio::time::Instant::now();
        let since = *self.since.get_or_insert(now);
        let last = self.warned.unwrap_or(since);
        if now.duration_since(last) >= UNREACHABLE_WARN_EVERY {
            self.warned = Some(now);
            tracing::warn!(
                ?controllers,
                last_tried = %voter,
                %error,
                "no controller has served the metadata log for {} s; this broker serves clients once it has caught up",
                now.duration_since(since).as_secs()
            );
        }
    }

    fn answered(&mut self) {
        *self = Unanswered::default();
    }
}

/// Where the active controller is, for a node that is not a voter: as
/// the last answer of the metadata log said.
#[derive(Default)]
pub(crate) struct ObserverTopology {
    /// The active controller's id, -1 when none is known.
    pub(crate) leader: Arc<AtomicI32>,
    /// Its CONTROLLER listener, host:port.
    address: Mutex<Option<String>>,
}

impl ObserverTopology {
    fn learn(&self, leader: i32, address: Option<String>) {
        *self.address.lock() = address;
        self.leader.store(leader, Ordering::Release);
    }

    fn forget(&self) {
        self.leader.store(-1, Ordering::Release);
        *self.address.lock() = None;
    }
}

impl ControllerTopology for ObserverTopology {
    fn is_active(&self) -> bool {
        false
    }

    fn active_id(&self) -> i32 {
        self.leader.load(Ordering::Acquire)
    }

    fn active_address(&self) -> Option<String> {
        self.address.lock().clone()
    }
}

/// Follows the metadata log from `controllers` (CONTROLLER listeners,
/// host:port) until `stop`; `caught_up` turns true once a voter had
/// nothing newer than what this node published.
pub(crate) async fn run(
    broker: Arc<Broker>,
    controllers: Vec<String>,
    topology: Arc<ObserverTopology>,
    caught_up: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let client_id = format!("broker-{}-metadata", broker.node_id);
    let mut turn = 0usize;
    let mut connection: Option<(String, tarn_client::Connection)> = None;
    let mut unanswered = Unanswered::default();
    loop {
        if *stop.borrow() {
            return;
        }
        let (voter, kept) = match connection.take() {
            Some(kept) => kept,
            None => {
                let voter = match topology.active_address() {
                    Some(active) => active,
                    None => {
                        turn += 1;
                        controllers[turn % controllers.len()].clone()
                    }
                };
                let connected = tokio::select! {
                    connected = tarn_client::Connection::connect(&voter, &client_id, FETCH_TIMEOUT) => connected,
                    _ = stop.changed() => return,
                };
                match connected {
                    Ok(kept) => (voter, kept),
                    Err(e) => {
                        unanswered.failed(
                            &voter,
                            &controllers,
                            "cannot reach a controller for the metadata log",
                            &e.to_string(),
                        );
                        // Not the one to ask next, even if it was active.
                        topology.forget();
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
                unanswered.failed(
                    &voter,
                    &controllers,
                    "fetching the metadata log failed",
                    &why,
                );
                topology.forget();
                if pause(&mut stop).await {
                    return;
                }
            }
            Fetched::Read {
                active_controller,
                active_address,
                read,
            } => {
                unanswered.answered();
                let moved = active_address.as_ref().is_some_and(|a| *a != voter);
                topology.learn(active_controller, active_address);
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
                        %voter,
                        "caught up with the metadata log"
                    );
                    caught_up.send_replace(true);
                }
                // Keep asking this voter unless the active controller is
                // another one.
                if !moved {
                    connection = Some((voter, kept));
                }
            }
        }
    }
}

enum Fetched {
    Read {
        active_controller: i32,
        active_address: Option<String>,
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
                    active_address,
                    read,
                }),
            ..
        }) => Fetched::Read {
            active_controller,
            active_address,
            read,
        },
        Ok(other) => Fetched::Failed(format!("unexpected answer: {:?}", other.result)),
        Err(e) => Fetched::Failed(format!("unreadable answer: {e}")),
    }
}

/// Waits before the next attempt; true when the node stops meanwhile.
async fn pause(stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(RETRY_BACKOFF) => false,
        _ = stop.changed() => true,
    }
}
