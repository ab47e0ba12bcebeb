//! The controller interface: every metadata change a broker asks for goes
//! through [`Broker::submit_to_controller`] as a typed, serializable
//! [`ControllerRequest`]. On the active controller it is planned against
//! the image and committed there; elsewhere it travels to the active
//! controller over its CONTROLLER listener, and the answer waits until the
//! committed change has been published on this broker too, so that a
//! Describe right after a Create on the same broker sees the topic.
//!
//! Admin requests from clients (CreateTopics, AlterConfigs, ...) travel as
//! [`ControllerRequest::Forward`]: the client's frame, answered on the
//! controller as if the client had sent it there (Kafka's forwarding).
//!
//! The active controller also keeps broker sessions: a broker that misses
//! heartbeats for `broker.session.timeout.ms` is fenced, one that asks to
//! shut down is fenced before it is told it may, and a fenced broker that
//! has caught up with the metadata log is unfenced. Fencing and unfencing
//! commit their partition elections in the same entry
//! (`tarn_metadata::elections`): a broker told it may shut down leads
//! nothing any more. Partition leaders change their ISR through
//! [`ControllerRequest::AlterPartition`], and the leader balancer moves
//! leadership back to preferred replicas every
//! `leader.imbalance.check.interval.seconds`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use tarn_metadata::brokers::{self, BrokerRegistration};
use tarn_metadata::elections::{self, AlterPartition};
use tarn_metadata::feed::FeedRead;
use tarn_metadata::topics::{create_topic_records, NewTopic};
use tarn_metadata::{MetadataImage, MetadataRecord};
use tarn_protocol::error::{self, ErrorCode};
use tarn_protocol::records::Part;

use crate::broker::{Broker, BrokerError};

/// The private API key of controller requests on a CONTROLLER listener.
pub const CONTROLLER_API_KEY: i16 = 10_100;
/// Producer ids are handed to a broker in blocks of this size.
pub const PRODUCER_ID_BLOCK: i64 = 1000;
/// How long a submission keeps looking for an active controller.
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A metadata change asked of the active controller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ControllerRequest {
    /// A client's admin request frame (header and body, no size prefix),
    /// answered on the controller as if the client had sent it there.
    Forward {
        frame: Vec<u8>,
        /// The broker that received it from the client.
        #[serde(default)]
        origin: Option<i32>,
    },
    /// Creates the topic unless one of that name exists: automatic topic
    /// creation and internal topics. Partitions and replication factor -1
    /// mean the controller's defaults.
    EnsureTopic {
        name: String,
        num_partitions: i32,
        replication_factor: i16,
        configs: Vec<(String, Option<String>)>,
    },
    /// A block of producer ids for `broker_id`.
    AllocateProducerIds {
        broker_id: i32,
    },
    RegisterBroker(BrokerRegistration),
    Heartbeat {
        broker_id: i32,
        broker_epoch: i64,
        /// The metadata offset the broker has published.
        metadata_offset: u64,
        shutting_down: bool,
    },
    /// A partition leader's new ISR (Kafka's AlterPartition, one
    /// partition): answered with [`ControllerReply::PartitionState`] once
    /// committed, or refused with Kafka's code.
    /// Many partitions' ISR changes from one leader, as Kafka's
    /// AlterPartition request carries them: one commit for all, each
    /// checked alone (distinct partitions only).
    AlterPartitions {
        broker_id: i32,
        broker_epoch: i64,
        updates: Vec<IsrUpdate>,
    },
    AlterPartition {
        broker_id: i32,
        broker_epoch: i64,
        topic_id: [u8; 16],
        partition: i32,
        /// The leader and partition epochs the leader holds now.
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
        /// Each member's broker epoch as the leader saw it (KIP-903).
        #[serde(default)]
        new_isr_epochs: Vec<i64>,
    },
    /// A node that follows the metadata log without being a voter asks
    /// for the committed entries after `after` (any voter answers, from
    /// what it has applied); the answer waits up to `max_wait_ms` for one.
    FetchMetadata {
        /// The observer's node id.
        node_id: i32,
        after: u64,
        max_wait_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerReply {
    /// The response frame to a forwarded request, size prefix included.
    Forwarded {
        frame: Vec<u8>,
    },
    TopicEnsured {
        created: bool,
    },
    ProducerIds {
        start: i64,
        count: i64,
    },
    Registered {
        broker_epoch: i64,
    },
    Heartbeat {
        fenced: bool,
        may_shut_down: bool,
    },
    /// A partition's state after an AlterPartition.
    PartitionState {
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<i32>,
    },
    /// What became of each change of an [`ControllerRequest::AlterPartitions`],
    /// in its order: `None` committed (or already so), else the refusal.
    PartitionsAltered {
        refusals: Vec<Option<ControllerRefusal>>,
    },
    /// What a voter has of the metadata log after the offset asked for,
    /// and the active controller as it knows it (-1: none).
    Metadata {
        active_controller: i32,
        /// Its CONTROLLER listener (host:port), when known.
        #[serde(default)]
        active_address: Option<String>,
        read: FeedRead,
    },
}

/// One partition's ISR change within [`ControllerRequest::AlterPartitions`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsrUpdate {
    pub topic_id: [u8; 16],
    pub partition: i32,
    /// The leader and partition epochs the leader holds now.
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
    /// Each member's broker epoch as the leader saw it in the member's
    /// fetches, in `new_isr`'s order; -1 where it saw none (KIP-903).
    #[serde(default)]
    pub new_isr_epochs: Vec<i64>,
}

/// A request the controller would not carry out, or a controller that
/// could not be reached: Kafka's error code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (error {code})")]
pub struct ControllerRefusal {
    pub code: ErrorCode,
    pub message: String,
}

impl ControllerRefusal {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ControllerRefusal {
            code,
            message: message.into(),
        }
    }

    /// A commit that failed: NOT_CONTROLLER (so the requester looks for
    /// the new controller and retries) when this node lost the lead
    /// meanwhile, UNKNOWN_SERVER_ERROR otherwise.
    fn from_broker(e: BrokerError) -> Self {
        ControllerRefusal::new(e.commit_error_code(), e.to_string())
    }
}

/// What the controller sends back: the outcome, and the metadata offset
/// the requester must have published before it answers its own client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControllerResponse {
    pub offset: u64,
    pub result: Result<ControllerReply, ControllerRefusal>,
}

/// The active controller's view of broker sessions (in memory: a new
/// active controller starts every session afresh).
#[derive(Default)]
pub struct BrokerSessions(Mutex<HashMap<i32, Session>>);

struct Session {
    broker_epoch: i64,
    last_heartbeat: Instant,
    /// The broker is caught up once it has published this offset.
    caught_up_at: u64,
    /// Known dead (its heartbeat connection closed and its listener
    /// refuses): due for fencing without waiting out the timeout.
    dead: bool,
}

impl Session {
    /// A session of `broker_epoch` starting now.
    fn new(broker_epoch: i64, caught_up_at: u64) -> Session {
        Session {
            broker_epoch,
            last_heartbeat: Instant::now(),
            caught_up_at,
            dead: false,
        }
    }
}

impl BrokerSessions {
    fn touch(&self, broker_id: i32, broker_epoch: i64, caught_up_at: u64) -> u64 {
        let mut sessions = self.0.lock();
        let session = sessions
            .entry(broker_id)
            .or_insert_with(|| Session::new(broker_epoch, caught_up_at));
        if session.broker_epoch != broker_epoch {
            *session = Session::new(broker_epoch, caught_up_at);
        }
        session.last_heartbeat = Instant::now();
        // It heartbeats: alive after all.
        session.dead = false;
        session.caught_up_at
    }

    /// The (broker, epoch) pairs whose session lapsed before `now`, or
    /// that are known dead.
    fn expired(&self, now: Instant, timeout: Duration) -> Vec<(i32, i64)> {
        self.0
            .lock()
            .iter()
            .filter(|(_, s)| s.dead || now.duration_since(s.last_heartbeat) > timeout)
            .map(|(id, s)| (*id, s.broker_epoch))
            .collect()
    }

    /// Ends the session of that registration (a controlled shutdown, an
    /// unregistration); a later one of the broker is left alone.
    pub(crate) fn remove(&self, broker_id: i32, broker_epoch: i64) {
        let mut sessions = self.0.lock();
        if sessions
            .get(&broker_id)
            .is_some_and(|s| s.broker_epoch == broker_epoch)
        {
            sessions.remove(&broker_id);
        }
    }

    /// Makes that registration's session due for fencing at the next
    /// check, whatever its last heartbeat (a fence that failed is retried
    /// there).
    fn mark_dead(&self, broker_id: i32, broker_epoch: i64) {
        if let Some(session) = self
            .0
            .lock()
            .get_mut(&broker_id)
            .filter(|s| s.broker_epoch == broker_epoch)
        {
            session.dead = true;
        }
    }

    /// Starts a session, as of now, for every unfenced broker that has
    /// none: after a controller failover each gets a whole session
    /// timeout to reach the new controller.
    fn adopt(&self, brokers: impl Iterator<Item = (i32, i64)>) {
        let mut sessions = self.0.lock();
        for (broker_id, broker_epoch) in brokers {
            sessions
                .entry(broker_id)
                .or_insert_with(|| Session::new(broker_epoch, 0));
        }
    }

    fn clear(&self) {
        self.0.lock().clear();
    }
}

impl Broker {
    /// Carries `request` out on the active controller (this node, or the
    /// one the quorum names) and returns once the change it committed is
    /// published here. Retries while no controller is known or the one
    /// asked is no longer active, for up to 30 seconds.
    pub async fn submit_to_controller(
        self: &Arc<Self>,
        request: ControllerRequest,
    ) -> Result<ControllerReply, ControllerRefusal> {
        let deadline = Instant::now() + SUBMIT_TIMEOUT;
        loop {
            let response = if self.is_active_controller() {
                execute_local(self, &request)
            } else {
                match self.send_to_active_controller(&request).await {
                    Ok(response) => response,
                    Err(refusal) => ControllerResponse {
                        offset: 0,
                        result: Err(refusal),
                    },
                }
            };
            match response.result {
                Err(refusal) if refusal.code == error::NOT_CONTROLLER => {
                    if Instant::now() >= deadline {
                        return Err(refusal);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                result => {
                    let publisher = self.metadata.publisher();
                    let published = tokio::time::timeout(
                        deadline.saturating_duration_since(Instant::now()),
                        publisher.wait_for(response.offset),
                    )
                    .await;
                    if published.is_err() {
                        return Err(ControllerRefusal::new(
                            error::REQUEST_TIMED_OUT,
                            format!(
                                "the controller committed metadata offset {} but this broker has not caught up with it",
                                response.offset
                            ),
                        ));
                    }
                    return result;
                }
            }
        }
    }
}

/// Carries out a request that came over the CONTROLLER listener; this
/// node must be the active controller (NOT_CONTROLLER otherwise).
pub async fn execute(broker: &Arc<Broker>, request: ControllerRequest) -> ControllerResponse {
    // The node that asked waits to see what it changed applied: it must
    // hear of the commit at once, not with the next entry.
    let _awaited = broker
        .controller_topology
        .quorum()
        .map(|(quorum, _)| quorum.followers_awaited());
    let result = match request {
        ControllerRequest::Forward { frame, origin } if broker.is_active_controller() => {
            forwarded(broker, frame, origin.unwrap_or(broker.node_id)).await
        }
        request => return execute_local(broker, &request),
    };
    ControllerResponse {
        offset: broker.metadata.publisher().published_offset(),
        result,
    }
}

/// Carries out `request` on this node when it is the active controller.
/// A forwarded frame is answered by [`execute`] only: a broker that finds
/// itself the active controller answers its clients' requests itself.
fn execute_local(broker: &Broker, request: &ControllerRequest) -> ControllerResponse {
    if !broker.is_active_controller() {
        return ControllerResponse {
            offset: 0,
            result: Err(ControllerRefusal::new(
                error::NOT_CONTROLLER,
                format!("node {} is not the active controller", broker.node_id),
            )),
        };
    }
    let result = match request {
        ControllerRequest::Forward { .. } => Err(ControllerRefusal::new(
            error::INVALID_REQUEST,
            "the active controller answers its own clients' requests",
        )),
        ControllerRequest::FetchMetadata { .. } => Err(ControllerRefusal::new(
            error::INVALID_REQUEST,
            "the metadata log is served on a voter's CONTROLLER listener",
        )),
        ControllerRequest::EnsureTopic {
            name,
            num_partitions,
            replication_factor,
            configs,
        } => ensure_topic(
            broker,
            name,
            *num_partitions,
            *replication_factor,
            configs.clone(),
        ),
        ControllerRequest::AllocateProducerIds { broker_id } => {
            allocate_producer_ids(broker, *broker_id)
        }
        ControllerRequest::RegisterBroker(registration) => register(broker, registration.clone()),
        ControllerRequest::Heartbeat {
            broker_id,
            broker_epoch,
            metadata_offset,
            shutting_down,
        } => heartbeat(
            broker,
            *broker_id,
            *broker_epoch,
            *metadata_offset,
            *shutting_down,
        ),
        ControllerRequest::AlterPartitions {
            broker_id,
            broker_epoch,
            updates,
        } => alter_partitions(broker, *broker_id, *broker_epoch, updates),
        ControllerRequest::AlterPartition {
            broker_id,
            broker_epoch,
            topic_id,
            partition,
            leader_epoch,
            partition_epoch,
            new_isr,
            new_isr_epochs,
        } => alter_partition(
            broker,
            &AlterPartition {
                broker_id: *broker_id,
                broker_epoch: *broker_epoch,
                topic_id: *topic_id,
                partition_id: *partition,
                leader_epoch: *leader_epoch,
                partition_epoch: *partition_epoch,
                new_isr: new_isr.clone(),
                new_isr_epochs: new_isr_epochs.clone(),
            },
        ),
    };
    ControllerResponse {
        offset: broker.metadata.publisher().published_offset(),
        result,
    }
}

/// Sends a client's admin request `frame` to the active controller and
/// returns its answer once the change is published here; `None` when this
/// node is the active controller (or becomes it meanwhile), which then
/// answers the request itself.
pub async fn forward(
    broker: &Arc<Broker>,
    frame: &[u8],
) -> Option<Result<Vec<u8>, ControllerRefusal>> {
    forward_within(broker, frame, REQUEST_TIMEOUT).await
}

/// [`forward`] of a request the active controller may hold for up to
/// `answer_within` (an AddRaftVoter waits for the new voter to catch up).
pub async fn forward_within(
    broker: &Arc<Broker>,
    frame: &[u8],
    answer_within: Duration,
) -> Option<Result<Vec<u8>, ControllerRefusal>> {
    let request = ControllerRequest::Forward {
        frame: frame.to_vec(),
        origin: Some(broker.node_id),
    };
    let deadline = Instant::now() + SUBMIT_TIMEOUT;
    loop {
        if broker.is_active_controller() {
            return None;
        }
        let sent = broker.send_to_active_controller_within(&request, answer_within);
        let response = match sent.await {
            Ok(response) => response,
            Err(refusal) => ControllerResponse {
                offset: 0,
                result: Err(refusal),
            },
        };
        match response.result {
            Err(refusal) if refusal.code == error::NOT_CONTROLLER && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(refusal) => return Some(Err(refusal)),
            Ok(ControllerReply::Forwarded { frame }) => {
                let published = tokio::time::timeout(
                    deadline.saturating_duration_since(Instant::now()),
                    broker.metadata.publisher().wait_for(response.offset),
                )
                .await;
                if published.is_err() {
                    tracing::warn!(offset = response.offset, "answering a forwarded request before this broker caught up with the metadata it committed");
                }
                return Some(Ok(frame));
            }
            Ok(other) => {
                return Some(Err(ControllerRefusal::new(
                    error::UNKNOWN_SERVER_ERROR,
                    format!("the controller answered a forwarded request with {other:?}"),
                )))
            }
        }
    }
}

async fn forwarded(
    broker: &Arc<Broker>,
    frame: Vec<u8>,
    origin: i32,
) -> Result<ControllerReply, ControllerRefusal> {
    let peer = SocketAddr::from(([127, 0, 0, 1], 0));
    match crate::handlers::dispatch_received_by(broker, peer, Bytes::from(frame), origin).await {
        Ok(Some(parts)) => {
            let mut frame = Vec::with_capacity(parts.len());
            for part in parts.parts {
                match part {
                    Part::Bytes(bytes) => frame.extend_from_slice(&bytes),
                    Part::File(_) => {
                        return Err(ControllerRefusal::new(
                            error::INVALID_REQUEST,
                            "a forwarded request's answer holds records",
                        ))
                    }
                }
            }
            Ok(ControllerReply::Forwarded { frame })
        }
        Ok(None) => Err(ControllerRefusal::new(
            error::INVALID_REQUEST,
            "a forwarded request must be answered",
        )),
        Err(e) => Err(ControllerRefusal::new(
            error::INVALID_REQUEST,
            e.to_string(),
        )),
    }
}

fn ensure_topic(
    broker: &Broker,
    name: &str,
    num_partitions: i32,
    replication_factor: i16,
    configs: Vec<(String, Option<String>)>,
) -> Result<ControllerReply, ControllerRefusal> {
    let created = broker
        .commit_metadata(|image| {
            if image.topic(name).is_some() {
                return Ok((vec![], Ok(false)));
            }
            let new = NewTopic {
                name,
                num_partitions,
                replication_factor,
                configs,
                assignments: None,
            };
            Ok(match create_topic_records(image, &broker.config, &new) {
                Ok((records, _)) => (records, Ok(true)),
                Err(e) => (vec![], Err(ControllerRefusal::new(e.code, e.message))),
            })
        })
        .map_err(ControllerRefusal::from_broker)??;
    if created {
        tracing::info!(topic = name, "created topic");
    }
    Ok(ControllerReply::TopicEnsured { created })
}

fn allocate_producer_ids(
    broker: &Broker,
    broker_id: i32,
) -> Result<ControllerReply, ControllerRefusal> {
    let start = broker
        .commit_metadata(|image| {
            let start = image.next_producer_id;
            let record = MetadataRecord::ProducerIds {
                broker_id,
                next_producer_id: start + PRODUCER_ID_BLOCK,
            };
            Ok((vec![record], start))
        })
        .map_err(ControllerRefusal::from_broker)?;
    Ok(ControllerReply::ProducerIds {
        start,
        count: PRODUCER_ID_BLOCK,
    })
}

fn register(
    broker: &Broker,
    registration: BrokerRegistration,
) -> Result<ControllerReply, ControllerRefusal> {
    let broker_id = registration.broker_id;
    let broker_epoch = broker
        .commit_metadata(|image| {
            Ok(match brokers::register(image, &registration) {
                Ok((mut records, epoch)) => {
                    // A new registration of a broker whose previous process
                    // stopped uncleanly takes it out of every ISR and ELR in
                    // the same entry (KIP-966).
                    if !records.is_empty() && !brokers::stopped_cleanly(image, &registration) {
                        let mut after = image.clone();
                        for record in &records {
                            after.apply(record);
                        }
                        let config = effective(broker, &after);
                        let removed =
                            elections::changes_for_unclean_shutdown(&after, &config, broker_id);
                        if !removed.is_empty() {
                            tracing::info!(
                                broker_id,
                                partitions = removed.len(),
                                "broker stopped uncleanly: it leaves the ISR and ELR of its partitions"
                            );
                        }
                        records.extend(removed);
                    }
                    (records, Ok(epoch))
                }
                Err(e) => (vec![], Err(ControllerRefusal::new(e.code, e.message))),
            })
        })
        .map_err(ControllerRefusal::from_broker)??;
    let offset = broker.metadata.publisher().published_offset();
    broker.sessions.touch(broker_id, broker_epoch, offset);
    tracing::info!(broker_id, broker_epoch, "registered broker");
    Ok(ControllerReply::Registered { broker_epoch })
}

fn heartbeat(
    broker: &Broker,
    broker_id: i32,
    broker_epoch: i64,
    metadata_offset: u64,
    shutting_down: bool,
) -> Result<ControllerReply, ControllerRefusal> {
    let image = broker.metadata.image();
    let known = brokers::check_epoch(&image, broker_id, broker_epoch)
        .map_err(|e| ControllerRefusal::new(e.code, e.message))?;
    let fenced = known.fenced;
    if shutting_down {
        broker.sessions.remove(broker_id, broker_epoch);
        commit_fence(broker, broker_id, broker_epoch, "controlled shutdown")?;
        // The fence and its elections are committed: the broker leads
        // nothing now, unless the commit left a partition it still leads
        // (it never should), and then it must keep asking.
        let still_leads = elections::led_by(&broker.metadata.image(), broker_id);
        if still_leads > 0 {
            tracing::error!(
                broker_id,
                still_leads,
                "a broker fenced for controlled shutdown still leads partitions"
            );
        }
        return Ok(ControllerReply::Heartbeat {
            fenced: true,
            may_shut_down: still_leads == 0,
        });
    }
    let caught_up_at = broker
        .sessions
        .touch(broker_id, broker_epoch, known_offset(broker));
    if fenced && metadata_offset >= caught_up_at {
        let elected = broker
            .commit_metadata(|image| {
                let records =
                    brokers::unfence(image, &effective(broker, image), broker_id, broker_epoch);
                let elected = records.len().saturating_sub(1);
                Ok((records, elected))
            })
            .map_err(ControllerRefusal::from_broker)?;
        tracing::info!(broker_id, broker_epoch, elected, "unfenced broker");
        return Ok(ControllerReply::Heartbeat {
            fenced: false,
            may_shut_down: false,
        });
    }
    Ok(ControllerReply::Heartbeat {
        fenced,
        may_shut_down: false,
    })
}

/// The controller's effective config as `image` makes it: what decides
/// `unclean.leader.election.enable` for topics that do not set it.
fn effective(broker: &Broker, image: &MetadataImage) -> tarn_config::BrokerConfig {
    broker.config_view(image).effective()
}

fn known_offset(broker: &Broker) -> u64 {
    broker.metadata.publisher().published_offset()
}

/// Fences the broker and moves its leadership and ISR memberships off it,
/// in one commit.
fn commit_fence(
    broker: &Broker,
    broker_id: i32,
    broker_epoch: i64,
    why: &str,
) -> Result<(), ControllerRefusal> {
    let changed = broker
        .commit_metadata(|image| {
            let records = brokers::fence(image, &effective(broker, image), broker_id, broker_epoch);
            let changed = records.len();
            Ok((records, changed))
        })
        .map_err(ControllerRefusal::from_broker)?;
    if changed > 0 {
        tracing::info!(
            broker_id,
            broker_epoch,
            why,
            records = changed,
            "fenced broker"
        );
    }
    Ok(())
}

fn alter_partition(
    broker: &Broker,
    request: &AlterPartition,
) -> Result<ControllerReply, ControllerRefusal> {
    let state = broker
        .commit_metadata(|image| {
            Ok(
                match elections::alter_partition(image, &effective(broker, image), request) {
                    Ok((records, state)) => (records, Ok(state)),
                    Err(e) => (vec![], Err(ControllerRefusal::new(e.code, e.message))),
                },
            )
        })
        .map_err(ControllerRefusal::from_broker)??;
    Ok(ControllerReply::PartitionState {
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        partition_epoch: state.partition_epoch,
        isr: state.isr,
    })
}

/// Carries out a leader's ISR changes of several partitions in one commit:
/// each is checked against the image alone (they name distinct
/// partitions), the accepted ones' records committed together.
fn alter_partitions(
    broker: &Broker,
    broker_id: i32,
    broker_epoch: i64,
    updates: &[IsrUpdate],
) -> Result<ControllerReply, ControllerRefusal> {
    let refusals = broker
        .commit_metadata(|image| {
            let mut records = Vec::new();
            let mut refusals = Vec::with_capacity(updates.len());
            let config = effective(broker, image);
            for u in updates {
                let request = AlterPartition {
                    broker_id,
                    broker_epoch,
                    topic_id: u.topic_id,
                    partition_id: u.partition,
                    leader_epoch: u.leader_epoch,
                    partition_epoch: u.partition_epoch,
                    new_isr: u.new_isr.clone(),
                    new_isr_epochs: u.new_isr_epochs.clone(),
                };
                match elections::alter_partition(image, &config, &request) {
                    Ok((changes, _)) => {
                        records.extend(changes);
                        refusals.push(None);
                    }
                    Err(e) => refusals.push(Some(ControllerRefusal::new(e.code, e.message))),
                }
            }
            Ok((records, refusals))
        })
        .map_err(ControllerRefusal::from_broker)?;
    Ok(ControllerReply::PartitionsAltered { refusals })
}

/// The active controller's session timer: fences every broker whose
/// session lapsed. Runs on every node; does nothing while the node is not
/// the active controller, and forgets every session when it stops being
/// one.
pub async fn run_session_timer(
    broker: Arc<Broker>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let timeout = Duration::from_millis(broker.config.get_i64("broker.session.timeout.ms") as u64);
    let tick = Duration::from_millis(250);
    let mut was_active = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => return,
        }
        let active = broker.is_active_controller();
        if !active {
            if was_active {
                broker.sessions.clear();
            }
            was_active = false;
            continue;
        }
        was_active = true;
        let image = broker.metadata.image();
        broker.sessions.adopt(
            image
                .unfenced_brokers()
                .map(|b| (b.broker_id, b.broker_epoch)),
        );
        // A session ends once its fence commits: one whose fence failed
        // stays expired and is fenced again at the next check, not a
        // whole session timeout later (the check would adopt it afresh).
        for (broker_id, broker_epoch) in broker.sessions.expired(Instant::now(), timeout) {
            let outcome = tarn_replication::blocking::off_async_workers(|| {
                commit_fence(&broker, broker_id, broker_epoch, "session timed out")
            });
            match outcome {
                Ok(()) => broker.sessions.remove(broker_id, broker_epoch),
                Err(e) => {
                    tracing::warn!(broker_id, error = %e, "fencing a broker whose session lapsed failed; retrying at the next check")
                }
            }
        }
    }
}

/// The most commits one balancer check makes: each carries at most
/// `REBALANCE_ELECTIONS_MAX` preferred elections, and a check continues
/// while the last one was full.
const BALANCE_COMMITS_MAX: usize = 100;

/// The active controller's leader balancer: every
/// `leader.imbalance.check.interval.seconds` it commits
/// `elections::periodic_elections` (preferred leaders back where a broker
/// leads less than `leader.imbalance.per.broker.percentage` allows, if
/// `auto.leader.rebalance.enable`). Runs on every node; does nothing
/// while the node is not the active controller.
pub async fn run_leader_balancer(
    broker: Arc<Broker>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let seconds = broker
        .config
        .get_i64("leader.imbalance.check.interval.seconds");
    let interval = Duration::from_secs(seconds.max(1) as u64);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        if !broker.is_active_controller() {
            continue;
        }
        match tarn_replication::blocking::off_async_workers(|| balance_leaders(&broker)) {
            Ok(0) => {}
            Ok(changed) => tracing::info!(changed, "leader balancer changed partitions"),
            Err(e) => tracing::warn!(error = %e, "leader balancer; will retry at the next check"),
        }
    }
}

/// One check of the leader balancer: the partitions it changed.
pub fn balance_leaders(broker: &Broker) -> Result<usize, ControllerRefusal> {
    let rebalance = broker
        .config
        .get_bool("auto.leader.rebalance.enable")
        .then(|| {
            broker
                .config
                .get_i64("leader.imbalance.per.broker.percentage")
        });
    let mut changed = 0;
    for _ in 0..BALANCE_COMMITS_MAX {
        let committed = broker
            .commit_metadata(|image| {
                let records =
                    elections::periodic_elections(image, &effective(broker, image), rebalance);
                let count = records.len();
                Ok((records, count))
            })
            .map_err(ControllerRefusal::from_broker)?;
        changed += committed;
        if committed < elections::REBALANCE_ELECTIONS_MAX {
            break;
        }
    }
    Ok(changed)
}

/// Where the active controller is, as this node knows it.
pub trait ControllerTopology: Send + Sync {
    /// Whether this node is the active controller now.
    fn is_active(&self) -> bool;
    /// The active controller's node id, -1 when none is known.
    fn active_id(&self) -> i32;
    /// The CONTROLLER listener (host:port) of the active controller, when
    /// one is known and it is not this node.
    fn active_address(&self) -> Option<String>;
    /// The quorum as its leader sees it, when this node leads a quorum of
    /// several (DescribeQuorum).
    fn describe_quorum(&self) -> Option<QuorumDescription> {
        None
    }
    /// This node's part of the metadata quorum, and whether its voters can
    /// change (a KIP-853 dynamic quorum); none on a single node or an
    /// observer.
    fn quorum(&self) -> Option<(tarn_quorum::Quorum, bool)> {
        None
    }
    /// The voters' CONTROLLER listeners (host:port) by node id, as a
    /// voter knows them (DescribeCluster on a CONTROLLER listener); none
    /// on a single node or an observer.
    fn controllers(&self) -> BTreeMap<i32, String> {
        BTreeMap::new()
    }
}

/// The metadata quorum as its leader sees it: what DescribeQuorum says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader: i32,
    /// The leader's Raft term (Kafka's leader epoch of the metadata log).
    pub epoch: i32,
    /// The offset after the last committed entry.
    pub high_watermark: i64,
    pub voters: Vec<ReplicaProgress>,
    pub observers: Vec<ReplicaProgress>,
    /// Each voter's CONTROLLER listener, host:port.
    pub listeners: BTreeMap<i32, String>,
    /// Each voter's directory id (base64), where the membership records
    /// one (a dynamic quorum's, KIP-853).
    pub directory_ids: BTreeMap<i32, String>,
}

/// How far one replica of the metadata log has come, as its leader
/// knows: -1 where it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub id: i32,
    pub log_end_offset: i64,
    /// Wall-clock milliseconds of its last fetch (or acknowledgement).
    pub last_fetch_ms: i64,
    /// Wall-clock milliseconds when it last had everything committed.
    pub last_caught_up_ms: i64,
}

/// How long an observer that stopped fetching stays listed (Kafka's
/// observer session).
const OBSERVER_FORGOTTEN_AFTER: Duration = Duration::from_secs(300);

/// The observers that fetch the metadata log from this voter.
#[derive(Default)]
pub struct ObserverBook(Mutex<BTreeMap<i32, ObserverSeen>>);

#[derive(Clone, Copy)]
struct ObserverSeen {
    log_end_offset: i64,
    fetched: Instant,
    caught_up: Option<Instant>,
}

impl ObserverBook {
    /// Observer `id` fetched after `after`, with nothing newer to have
    /// when `caught_up`.
    pub fn fetched(&self, id: i32, after: u64, caught_up: bool) {
        let now = Instant::now();
        let mut seen = self.0.lock();
        let previous = seen.get(&id).and_then(|s| s.caught_up);
        seen.insert(
            id,
            ObserverSeen {
                log_end_offset: i64::try_from(after).map_or(i64::MAX, |a| a.saturating_add(1)),
                fetched: now,
                caught_up: if caught_up { Some(now) } else { previous },
            },
        );
    }

    /// The observers seen lately, by id.
    pub fn progress(&self) -> Vec<ReplicaProgress> {
        let mut seen = self.0.lock();
        seen.retain(|_, s| s.fetched.elapsed() < OBSERVER_FORGOTTEN_AFTER);
        seen.iter()
            .map(|(id, s)| ReplicaProgress {
                id: *id,
                log_end_offset: s.log_end_offset,
                last_fetch_ms: wall_clock_ms(s.fetched),
                last_caught_up_ms: s.caught_up.map_or(-1, wall_clock_ms),
            })
            .collect()
    }
}

/// The wall-clock time, in milliseconds since the epoch, of `at`.
pub fn wall_clock_ms(at: Instant) -> i64 {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    now_ms - at.elapsed().as_millis() as i64
}

/// A quorum of one: this node is always the active controller.
pub struct SingleNode;

impl ControllerTopology for SingleNode {
    fn is_active(&self) -> bool {
        true
    }
    fn active_id(&self) -> i32 {
        -1
    }
    fn active_address(&self) -> Option<String> {
        None
    }
}

/// A controller request frame: a Kafka request header (v1) with
/// [`CONTROLLER_API_KEY`] and the request as JSON.
pub fn encode_request(
    correlation_id: i32,
    client_id: &str,
    request: &ControllerRequest,
) -> Vec<u8> {
    let header = tarn_protocol::header::RequestHeader {
        api_key: CONTROLLER_API_KEY,
        api_version: 0,
        correlation_id,
        client_id: Some(client_id.to_owned()),
    };
    let mut frame = vec![0u8; 4];
    header.encode(&mut frame, false);
    frame.extend_from_slice(
        &serde_json::to_vec(request).expect("a controller request serializes to JSON"),
    );
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

/// The answer frame to a controller request: the correlation id, then the
/// response as JSON.
pub fn encode_response(correlation_id: i32, response: &ControllerResponse) -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(
        &serde_json::to_vec(response).expect("a controller response serializes to JSON"),
    );
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

/// How long one controller request over the network may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl Broker {
    /// Sends `request` to the active controller's CONTROLLER listener.
    async fn send_to_active_controller(
        &self,
        request: &ControllerRequest,
    ) -> Result<ControllerResponse, ControllerRefusal> {
        self.send_to_active_controller_within(request, REQUEST_TIMEOUT)
            .await
    }

    /// [`Broker::send_to_active_controller`], its answer awaited up to
    /// `answer_within`.
    async fn send_to_active_controller_within(
        &self,
        request: &ControllerRequest,
        answer_within: Duration,
    ) -> Result<ControllerResponse, ControllerRefusal> {
        let unreachable = |message: String| ControllerRefusal::new(error::NOT_CONTROLLER, message);
        let Some(address) = self.controller_topology.active_address() else {
            return Err(unreachable("no active controller is known yet".into()));
        };
        let client_id = format!("broker-{}", self.node_id);
        let frame = encode_request(1, &client_id, request);
        let response = if matches!(request, ControllerRequest::Heartbeat { .. }) {
            self.heartbeat_round_trip(&address, &client_id, &frame)
                .await
                .map_err(|e| unreachable(e.to_string()))?
        } else {
            self.pooled_round_trip(&address, &client_id, &frame, answer_within)
                .await
                .map_err(|e| unreachable(e.to_string()))?
        };
        if response.len() < 4 || response[..4] != 1i32.to_be_bytes() {
            return Err(unreachable(format!("{address} answered another request")));
        }
        serde_json::from_slice(&response[4..]).map_err(|e| {
            ControllerRefusal::new(
                error::UNKNOWN_SERVER_ERROR,
                format!("{address} sent an unreadable controller response: {e}"),
            )
        })
    }
}

/// How many idle connections to the active controller a broker keeps.
const IDLE_CONTROLLER_CONNECTIONS: usize = 8;

impl Broker {
    /// Sends `frame` to the active controller at `address` on an idle
    /// connection kept from an earlier request, or a new one. Only a
    /// connection whose exchange completed goes back to the pool: one
    /// that failed or timed out could still deliver a late answer. A kept
    /// connection that fails before answering is replaced once (the
    /// controller may have closed it while idle); the request may then
    /// reach the controller twice, as a client's retry would, which its
    /// answer tells (a topic that already exists, say).
    async fn pooled_round_trip(
        &self,
        address: &str,
        client_id: &str,
        frame: &[u8],
        answer_within: Duration,
    ) -> Result<Bytes, tarn_client::ClientError> {
        let kept = {
            let mut pool = self.controller_connections.lock();
            // A new active controller: the old one's connections are of no use.
            pool.retain(|(to, _)| to == address);
            pool.pop()
        };
        if let Some((_, mut connection)) = kept {
            match connection.round_trip_within(frame, answer_within).await {
                Ok(response) => {
                    self.keep_controller_connection(address, connection);
                    return Ok(response);
                }
                Err(e @ tarn_client::ClientError::Timeout { .. }) => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "a kept controller connection failed; opening another");
                }
            }
        }
        let mut connection =
            tarn_client::Connection::connect(address, client_id, REQUEST_TIMEOUT).await?;
        let response = connection.round_trip_within(frame, answer_within).await?;
        self.keep_controller_connection(address, connection);
        Ok(response)
    }

    fn keep_controller_connection(&self, address: &str, connection: tarn_client::Connection) {
        let mut pool = self.controller_connections.lock();
        if pool.len() < IDLE_CONTROLLER_CONNECTIONS {
            pool.push((address.to_owned(), connection));
        }
    }
}

impl Broker {
    /// Sends a heartbeat frame on the connection kept open to the active
    /// controller at `address`, opening it first when there is none (or
    /// it led elsewhere). A kept connection that fails is replaced once:
    /// the controller may have closed it while idle.
    async fn heartbeat_round_trip(
        &self,
        address: &str,
        client_id: &str,
        frame: &[u8],
    ) -> Result<Bytes, tarn_client::ClientError> {
        let mut kept = self.heartbeat_connection.lock().await;
        if kept.as_ref().is_some_and(|(to, _)| to != address) {
            *kept = None;
        }
        if let Some((_, connection)) = kept.as_mut() {
            match connection.round_trip(frame).await {
                Ok(response) => return Ok(response),
                Err(e) => {
                    tracing::debug!(error = %e, "the kept controller connection failed; opening another");
                    *kept = None;
                }
            }
        }
        let mut connection =
            tarn_client::Connection::connect(address, client_id, REQUEST_TIMEOUT).await?;
        let response = connection.round_trip(frame).await?;
        *kept = Some((address.to_owned(), connection));
        Ok(response)
    }
}

/// How long the active controller waits for a broker's listener to
/// accept a connection when it probes a broker whose heartbeat
/// connection closed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How many times, and how far apart, it probes: a dying process closes
/// its connections one by one, so its listener may still accept just
/// after its heartbeat connection closed.
const PROBES: u32 = 10;
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// The active controller saw the connection that carried the heartbeats
/// of `broker_id` at `broker_epoch` close. With Tarn's
/// `broker.session.fence.on.disconnect`, it probes the broker's client
/// listener: a refused connection means no process listens there any
/// more (it died: the kernel closed its sockets), and the broker is
/// fenced at once instead of after `broker.session.timeout.ms`. A broker
/// that accepts, or cannot be reached in time (paused, or cut off by the
/// network), keeps its session, which times out as usual.
pub async fn heartbeat_connection_closed(broker: Arc<Broker>, broker_id: i32, broker_epoch: i64) {
    if !broker.is_active_controller()
        || !broker.config.get_bool("broker.session.fence.on.disconnect")
    {
        return;
    }
    let address = {
        let image = broker.metadata.image();
        match image
            .brokers
            .get(&broker_id)
            .filter(|b| b.broker_epoch == broker_epoch && !b.fenced)
        {
            Some(b) => format!("{}:{}", b.host, b.port),
            None => return,
        }
    };
    let mut refused = false;
    let mut last_error = None;
    for attempt in 0..PROBES {
        if attempt > 0 {
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        let probe =
            tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(&address)).await;
        match probe {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused = true;
                break;
            }
            // It accepts (alive, or still dying), cannot be reached in
            // time (paused, or cut off), or failed otherwise (a reset from
            // a listener being closed, no route): ask again.
            Ok(Err(e)) => last_error = Some(e),
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    if !refused {
        if let Some(e) = last_error {
            tracing::info!(broker_id, %address, error = %e, "a broker's heartbeat connection closed and probing its listener failed; its session decides");
        }
        return;
    }
    let still_registered = broker
        .metadata
        .image()
        .brokers
        .get(&broker_id)
        .is_some_and(|b| b.broker_epoch == broker_epoch && !b.fenced);
    if !still_registered || !broker.is_active_controller() {
        return;
    }
    let outcome = tarn_replication::blocking::off_async_workers(|| {
        commit_fence(
            &broker,
            broker_id,
            broker_epoch,
            "its controller connection closed and its listener refuses connections",
        )
    });
    match outcome {
        Ok(()) => broker.sessions.remove(broker_id, broker_epoch),
        Err(e) => {
            // The session check fences it at its next round instead.
            tracing::warn!(broker_id, error = %e, "fencing a broker whose connection closed failed; the session check retries");
            broker.sessions.mark_dead(broker_id, broker_epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_protocol::Uuid;

    /// A single node (broker 1, always the active controller) with topic
    /// "t" whose one partition has replicas [1, 2] in `isr`, led by 1, and
    /// broker 2 registered unfenced.
    fn cluster_of_two(dir: &std::path::Path, isr: &[i32]) -> (Arc<Broker>, Uuid) {
        let broker = crate::testing::broker_with_topic(dir, "t", 1);
        let topic_id = broker.metadata.image().topic("t").unwrap().topic_id;
        let isr = isr.to_vec();
        broker
            .commit_metadata(|_| {
                let records = vec![
                    MetadataRecord::RegisterBroker {
                        broker_id: 2,
                        host: "127.0.0.1".into(),
                        port: 9093,
                        rack: None,
                        incarnation_id: [2; 16],
                        broker_epoch: 0,
                        listeners: vec![],
                        fenced: false,
                    },
                    MetadataRecord::Partition {
                        topic_id: topic_id.0,
                        partition_id: 0,
                        replicas: vec![1, 2],
                        isr,
                        leader: 1,
                        leader_epoch: 0,
                        partition_epoch: 0,
                        adding_replicas: Vec::new(),
                        removing_replicas: Vec::new(),
                        elr: Vec::new(),
                        last_known_elr: Vec::new(),
                    },
                ];
                Ok((records, ()))
            })
            .unwrap();
        (broker, topic_id)
    }

    fn epoch_of(broker: &Broker, broker_id: i32) -> i64 {
        broker.metadata.image().brokers[&broker_id].broker_epoch
    }

    /// (leader, leader epoch, partition epoch, ISR) of t-0.
    fn state(broker: &Broker, topic_id: &Uuid) -> (i32, i32, i32, Vec<i32>) {
        let image = broker.metadata.image();
        let p = image.partition(topic_id, 0).unwrap();
        (p.leader, p.leader_epoch, p.partition_epoch, p.isr.clone())
    }

    fn run(
        broker: &Broker,
        request: ControllerRequest,
    ) -> Result<ControllerReply, ControllerRefusal> {
        execute_local(broker, &request).result
    }

    fn alter(
        broker: &Broker,
        topic_id: &Uuid,
        partition_epoch: i32,
        new_isr: &[i32],
    ) -> ControllerRequest {
        ControllerRequest::AlterPartition {
            broker_id: 1,
            broker_epoch: epoch_of(broker, 1),
            topic_id: topic_id.0,
            partition: 0,
            leader_epoch: 0,
            partition_epoch,
            new_isr: new_isr.to_vec(),
            new_isr_epochs: Vec::new(),
        }
    }

    fn heartbeat(broker: &Broker, broker_id: i32, shutting_down: bool) -> ControllerRequest {
        ControllerRequest::Heartbeat {
            broker_id,
            broker_epoch: epoch_of(broker, broker_id),
            metadata_offset: broker.metadata.publisher().published_offset(),
            shutting_down,
        }
    }

    /// A session whose fence failed is not lost (a later check would
    /// otherwise adopt the broker afresh and wait a whole timeout): a
    /// broker known dead is due at once, until it heartbeats again.
    #[test]
    fn a_broker_known_dead_is_due_for_fencing_until_it_heartbeats() {
        let sessions = BrokerSessions::default();
        let timeout = Duration::from_secs(9);
        sessions.touch(2, 7, 0);
        sessions.touch(3, 8, 0);
        assert!(sessions.expired(Instant::now(), timeout).is_empty());
        sessions.mark_dead(2, 6);
        assert!(
            sessions.expired(Instant::now(), timeout).is_empty(),
            "another registration's"
        );
        sessions.mark_dead(2, 7);
        assert_eq!(sessions.expired(Instant::now(), timeout), vec![(2, 7)]);
        sessions.adopt([(2, 7), (3, 8)].into_iter());
        assert_eq!(
            sessions.expired(Instant::now(), timeout),
            vec![(2, 7)],
            "adopting keeps it due"
        );
        sessions.touch(2, 7, 0);
        assert!(sessions.expired(Instant::now(), timeout).is_empty());
        sessions.mark_dead(3, 8);
        sessions.remove(3, 8);
        assert!(sessions.expired(Instant::now(), timeout).is_empty());
    }

    #[test]
    fn alter_partition_answers_the_committed_state_or_kafkas_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let (broker, topic_id) = cluster_of_two(dir.path(), &[1]);
        let reply = run(&broker, alter(&broker, &topic_id, 0, &[1, 2])).unwrap();
        assert_eq!(
            reply,
            ControllerReply::PartitionState {
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 1,
                isr: vec![1, 2],
            }
        );
        assert_eq!(state(&broker, &topic_id), (1, 0, 1, vec![1, 2]));
        let refused = run(&broker, alter(&broker, &topic_id, 0, &[1])).unwrap_err();
        assert_eq!(refused.code, error::INVALID_UPDATE_VERSION);
        assert_eq!(state(&broker, &topic_id), (1, 0, 1, vec![1, 2]));
    }

    #[test]
    fn a_broker_may_shut_down_once_its_leadership_moved_and_leads_again_when_unfenced() {
        let dir = tempfile::tempdir().unwrap();
        let (broker, topic_id) = cluster_of_two(dir.path(), &[1, 2]);
        // The follower leaves the ISR; the leader epoch stays.
        let reply = run(&broker, heartbeat(&broker, 2, true)).unwrap();
        assert_eq!(
            reply,
            ControllerReply::Heartbeat {
                fenced: true,
                may_shut_down: true
            }
        );
        assert_eq!(state(&broker, &topic_id), (1, 0, 1, vec![1]));
        // The leader, now the last ISR member, leaves the partition
        // leaderless in the same commit that fences it: the ISR empties
        // into the eligible leader replicas.
        let reply = run(&broker, heartbeat(&broker, 1, true)).unwrap();
        assert_eq!(
            reply,
            ControllerReply::Heartbeat {
                fenced: true,
                may_shut_down: true
            }
        );
        assert_eq!(state(&broker, &topic_id), (-1, 1, 2, vec![]));
        let p = broker
            .metadata
            .image()
            .partition(&topic_id, 0)
            .unwrap()
            .clone();
        assert_eq!((p.elr, p.last_known_elr), (vec![1], vec![1]));
        assert!(broker.metadata.image().brokers[&1].fenced);
        // Back, caught up: unfenced, and it leads again.
        let reply = run(&broker, heartbeat(&broker, 1, false)).unwrap();
        assert_eq!(
            reply,
            ControllerReply::Heartbeat {
                fenced: false,
                may_shut_down: false
            }
        );
        assert_eq!(state(&broker, &topic_id), (1, 2, 3, vec![1]));
    }

    #[test]
    fn the_leader_balancer_moves_leadership_to_the_preferred_replica() {
        let dir = tempfile::tempdir().unwrap();
        let (broker, topic_id) = cluster_of_two(dir.path(), &[1, 2]);
        // Broker 2 is preferred for t-0 but does not lead it.
        broker
            .commit_metadata(|_| {
                Ok((
                    vec![MetadataRecord::PartitionChange {
                        topic_id: topic_id.0,
                        partition_id: 0,
                        leader: None,
                        isr: None,
                        replicas: Some(vec![2, 1]),
                        adding_replicas: None,
                        removing_replicas: None,
                        elr: None,
                        last_known_elr: None,
                    }],
                    (),
                ))
            })
            .unwrap();
        assert_eq!(balance_leaders(&broker).unwrap(), 1);
        assert_eq!(state(&broker, &topic_id), (2, 1, 2, vec![1, 2]));
        assert_eq!(balance_leaders(&broker).unwrap(), 0);
    }
}
