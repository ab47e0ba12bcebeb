//! The controller's rules for broker registrations, as KRaft's cluster
//! control applies them: pure functions from the image and a request to
//! the records that carry the change out.
//!
//! A broker registers once per start (its incarnation): the registration
//! gets a new broker epoch and starts fenced. The broker heartbeats; it is
//! unfenced once it has caught up with the metadata log, and fenced again
//! when its session lapses or it asks to shut down. Records naming an
//! older epoch change nothing (`MetadataImage::apply`).
//!
//! Fencing and unfencing carry their partition elections in the same
//! commit (`crate::elections`): a fenced broker leads nothing from the
//! entry that fences it on, and an unfenced one leads what waited for it
//! from the entry that unfences it.

use serde::{Deserialize, Serialize};

use tarn_config::BrokerConfig;
use tarn_protocol::error::{self, ErrorCode};

use crate::records::{Endpoint, MetadataRecord};
use crate::{elections, MetadataImage};

/// What a starting broker tells the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub broker_id: i32,
    /// New on every start of the broker process.
    pub incarnation_id: [u8; 16],
    /// Every listener, advertised; clients are sent to `client_listener`.
    pub listeners: Vec<Endpoint>,
    pub client_listener: String,
    pub rack: Option<String>,
    /// Set when this node is also the (single) quorum and so has every
    /// committed entry: it is registered unfenced.
    pub caught_up: bool,
    /// The cluster the broker's data directory was formatted for, if any.
    pub cluster_id: Option<String>,
    /// The broker epoch its previous process had when it shut down
    /// cleanly (read from its clean-shutdown marker), -1 when it did not
    /// (Kafka's `PreviousBrokerEpoch`, KIP-966).
    #[serde(default = "no_epoch")]
    pub previous_broker_epoch: i64,
}

fn no_epoch() -> i64 {
    -1
}

/// Whether the broker registering with `request` stopped cleanly last
/// time: the epoch its clean-shutdown marker names is the one it is
/// registered with. A broker the image does not know counts as unclean,
/// as in Kafka (it is in no ISR then).
pub fn stopped_cleanly(image: &MetadataImage, request: &BrokerRegistration) -> bool {
    image
        .brokers
        .get(&request.broker_id)
        .is_some_and(|known| known.broker_epoch == request.previous_broker_epoch)
}

/// A refusal of a registration or heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerError {
    pub code: ErrorCode,
    pub message: String,
}

/// The records that register `request`, and the broker epoch it gets.
/// The same incarnation registering again (a retried request) keeps its
/// epoch and adds nothing. Another incarnation of an unfenced broker is
/// refused with DUPLICATE_BROKER_REGISTRATION until the old one's session
/// lapses (or it shuts down), so two processes cannot share an id.
pub fn register(
    image: &MetadataImage,
    request: &BrokerRegistration,
) -> Result<(Vec<MetadataRecord>, i64), BrokerError> {
    let Some(client) = request
        .listeners
        .iter()
        .find(|l| l.name == request.client_listener)
    else {
        return Err(BrokerError {
            code: error::INVALID_REQUEST,
            message: format!(
                "broker {} registered no listener named {}",
                request.broker_id, request.client_listener
            ),
        });
    };
    if let (Some(ours), Some(theirs)) = (&image.cluster_id, &request.cluster_id) {
        if ours != theirs {
            return Err(BrokerError {
                code: error::INCONSISTENT_CLUSTER_ID,
                message: format!(
                    "broker {} belongs to cluster {theirs}, not to this cluster {ours}",
                    request.broker_id
                ),
            });
        }
    }
    let known = image.brokers.get(&request.broker_id);
    if let Some(known) = known {
        if known.incarnation_id == request.incarnation_id {
            return Ok((Vec::new(), known.broker_epoch));
        }
        if !known.fenced {
            return Err(BrokerError {
                code: error::DUPLICATE_BROKER_REGISTRATION,
                message: format!(
                    "Another broker is registered with that broker id {}.",
                    request.broker_id
                ),
            });
        }
    }
    let previous = known
        .map(|b| b.broker_epoch)
        .or_else(|| image.unregistered_epochs.get(&request.broker_id).copied());
    let broker_epoch = previous.map_or(0, |epoch| epoch + 1);
    let record = MetadataRecord::RegisterBroker {
        broker_id: request.broker_id,
        host: client.host.clone(),
        port: client.port,
        rack: request.rack.clone(),
        incarnation_id: request.incarnation_id,
        broker_epoch,
        listeners: request.listeners.clone(),
        fenced: !request.caught_up,
    };
    Ok((vec![record], broker_epoch))
}

/// Checks that `broker_epoch` is the broker's current registration:
/// STALE_BROKER_EPOCH for an older one, and for an unknown broker.
pub fn check_epoch(
    image: &MetadataImage,
    broker_id: i32,
    broker_epoch: i64,
) -> Result<&crate::BrokerInfo, BrokerError> {
    match image.brokers.get(&broker_id) {
        Some(b) if b.broker_epoch == broker_epoch => Ok(b),
        Some(b) => Err(BrokerError {
            code: error::STALE_BROKER_EPOCH,
            message: format!(
                "broker {broker_id} heartbeat epoch {broker_epoch}, registered epoch {}",
                b.broker_epoch
            ),
        }),
        None => Err(BrokerError {
            code: error::STALE_BROKER_EPOCH,
            message: format!("broker {broker_id} is not registered"),
        }),
    }
}

/// The records that unfence a caught-up broker and elect it where
/// leaderless partitions wait for it, or none when it is unfenced already.
/// `config` is the controller's effective config (for
/// `unclean.leader.election.enable`).
pub fn unfence(
    image: &MetadataImage,
    config: &BrokerConfig,
    broker_id: i32,
    broker_epoch: i64,
) -> Vec<MetadataRecord> {
    match image.brokers.get(&broker_id) {
        Some(b) if b.broker_epoch == broker_epoch && b.fenced => {
            let record = MetadataRecord::UnfenceBroker {
                broker_id,
                broker_epoch,
            };
            let mut after = image.clone();
            after.apply(&record);
            let mut records = vec![record];
            records.extend(elections::changes_for_unfenced_broker(
                &after, config, broker_id,
            ));
            records
        }
        _ => Vec::new(),
    }
}

/// The records that fence a broker whose session lapsed or that is
/// shutting down, with the partition changes that move leadership off it
/// and take it out of the ISRs it shares; the FenceBroker record is left
/// out when it is fenced already, and nothing is returned when the epoch
/// is not its current registration or nothing is left to change.
pub fn fence(
    image: &MetadataImage,
    config: &BrokerConfig,
    broker_id: i32,
    broker_epoch: i64,
) -> Vec<MetadataRecord> {
    let Some(b) = image
        .brokers
        .get(&broker_id)
        .filter(|b| b.broker_epoch == broker_epoch)
    else {
        return Vec::new();
    };
    let mut records = Vec::new();
    let after = if b.fenced {
        None
    } else {
        let record = MetadataRecord::FenceBroker {
            broker_id,
            broker_epoch,
        };
        let mut after = image.clone();
        after.apply(&record);
        records.push(record);
        Some(after)
    };
    records.extend(elections::changes_for_fenced_broker(
        after.as_ref().unwrap_or(image),
        config,
        broker_id,
    ));
    records
}

/// The records that remove broker `broker_id`'s registration (Kafka's
/// UnregisterBroker): it is fenced first, with the elections that move
/// leadership off it and take it out of every ISR, then forgotten; the
/// partitions keep it among their replicas until they are reassigned.
/// BROKER_ID_NOT_REGISTERED when it is not registered. A broker still
/// running registers again at its next heartbeat.
pub fn unregister(
    image: &MetadataImage,
    config: &BrokerConfig,
    broker_id: i32,
) -> Result<Vec<MetadataRecord>, BrokerError> {
    let Some(known) = image.brokers.get(&broker_id) else {
        return Err(BrokerError {
            code: error::BROKER_ID_NOT_REGISTERED,
            message: format!("Broker ID {broker_id} is not currently registered"),
        });
    };
    let mut records = fence(image, config, broker_id, known.broker_epoch);
    records.push(MetadataRecord::UnregisterBroker {
        broker_id,
        broker_epoch: known.broker_epoch,
    });
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(incarnation: u8, caught_up: bool) -> BrokerRegistration {
        BrokerRegistration {
            broker_id: 2,
            incarnation_id: [incarnation; 16],
            listeners: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 29092,
                security_protocol: "PLAINTEXT".into(),
            }],
            client_listener: "PLAINTEXT".into(),
            rack: Some("a".into()),
            caught_up,
            cluster_id: Some("c".into()),
            previous_broker_epoch: -1,
        }
    }

    fn applied(image: &mut MetadataImage, records: Vec<MetadataRecord>) {
        for record in &records {
            image.apply(record);
        }
    }

    #[test]
    fn a_broker_registers_fenced_and_is_unfenced_once_caught_up() {
        let mut image = MetadataImage::default();
        let (records, epoch) = register(&image, &registration(1, false)).unwrap();
        applied(&mut image, records);
        let broker = &image.brokers[&2];
        assert!(broker.fenced);
        assert_eq!((broker.host.as_str(), broker.port), ("127.0.0.1", 29092));
        assert_eq!(image.unfenced_brokers().count(), 0);

        assert_eq!(
            register(&image, &registration(1, false)).unwrap(),
            (vec![], epoch)
        );
        let records = unfence(&image, &BrokerConfig::default(), 2, epoch);
        applied(&mut image, records);
        assert!(!image.brokers[&2].fenced);
        assert!(unfence(&image, &BrokerConfig::default(), 2, epoch).is_empty());
    }

    #[test]
    fn a_second_process_with_the_same_id_waits_for_the_first_to_be_fenced() {
        let mut image = MetadataImage::default();
        let (records, first) = register(&image, &registration(1, true)).unwrap();
        applied(&mut image, records);
        let refused = register(&image, &registration(2, true)).unwrap_err();
        assert_eq!(refused.code, error::DUPLICATE_BROKER_REGISTRATION);

        let records = fence(&image, &BrokerConfig::default(), 2, first);
        applied(&mut image, records);
        let (records, second) = register(&image, &registration(2, true)).unwrap();
        applied(&mut image, records);
        assert_eq!(second, first + 1);
        assert_eq!(
            check_epoch(&image, 2, first).unwrap_err().code,
            error::STALE_BROKER_EPOCH
        );
        // The old incarnation's records no longer count.
        applied(
            &mut image,
            vec![MetadataRecord::FenceBroker {
                broker_id: 2,
                broker_epoch: first,
            }],
        );
        assert!(!image.brokers[&2].fenced);
    }

    #[test]
    fn a_broker_of_another_cluster_is_refused() {
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::ClusterIdentity {
            cluster_id: "other".into(),
        });
        let refused = register(&image, &registration(1, true)).unwrap_err();
        assert_eq!(refused.code, error::INCONSISTENT_CLUSTER_ID);
    }

    #[test]
    fn a_registration_must_name_its_client_listener() {
        let mut request = registration(1, true);
        request.client_listener = "EXTERNAL".into();
        let refused = register(&MetadataImage::default(), &request).unwrap_err();
        assert_eq!(refused.code, error::INVALID_REQUEST);
    }

    #[test]
    fn an_unregistered_broker_is_forgotten_and_registers_again_with_a_newer_epoch() {
        let mut image = MetadataImage::default();
        let refused = unregister(&image, &BrokerConfig::default(), 2).unwrap_err();
        assert_eq!(refused.code, error::BROKER_ID_NOT_REGISTERED);

        let (records, first) = register(&image, &registration(1, true)).unwrap();
        applied(&mut image, records);
        let records = unregister(&image, &BrokerConfig::default(), 2).unwrap();
        assert!(matches!(
            records.first(),
            Some(MetadataRecord::FenceBroker { broker_id: 2, .. })
        ));
        applied(&mut image, records);
        assert!(!image.brokers.contains_key(&2));
        assert_eq!(
            check_epoch(&image, 2, first).unwrap_err().code,
            error::STALE_BROKER_EPOCH
        );

        // A snapshot keeps what the id's next epoch must exceed.
        let mut restored = MetadataImage::default();
        applied(&mut restored, image.to_records());
        assert_eq!(restored.unregistered_epochs, image.unregistered_epochs);
        let (records, second) = register(&restored, &registration(2, true)).unwrap();
        assert_eq!(second, first + 1);
        applied(&mut restored, records);
        assert!(restored.unregistered_epochs.is_empty());
        // The old registration's unregister record no longer applies.
        restored.apply(&MetadataRecord::UnregisterBroker {
            broker_id: 2,
            broker_epoch: first,
        });
        assert!(restored.brokers.contains_key(&2));
    }
}
