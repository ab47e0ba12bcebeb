//! The metadata record types, in the spirit of KRaft's records.
//!
//! Every record type has a schema version, written beside it in the log.
//! A change to a type's fields that an older build would misread (a new
//! field that matters, a changed meaning) bumps its version in
//! [`MetadataRecord::version`] and [`MetadataRecord::max_version`], so an
//! older build refuses the entry instead of misreading it.

use serde::{Deserialize, Serialize};

use tarn_protocol::Uuid;

/// One listener a broker registered, as Kafka's BrokerRegistrationRecord
/// lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: i32,
    pub security_protocol: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// A broker (re-)registered. `host` and `port` are its client listener
    /// as advertised. Version 1 added the incarnation, the epoch (the
    /// offset of the entry that registered it, as in KRaft), every
    /// listener and whether it starts fenced; a version 0 record is a
    /// single-node broker, never fenced.
    RegisterBroker {
        broker_id: i32,
        host: String,
        port: i32,
        rack: Option<String>,
        #[serde(default)]
        incarnation_id: [u8; 16],
        #[serde(default)]
        broker_epoch: i64,
        #[serde(default)]
        listeners: Vec<Endpoint>,
        #[serde(default)]
        fenced: bool,
    },
    /// The cluster's id, chosen by the first active controller of a quorum
    /// (or given by `tarn storage format`); every node adopts it.
    ClusterIdentity {
        cluster_id: String,
    },
    /// The broker missed its heartbeats (or asked to shut down): clients
    /// are no longer sent to it, and it leads no partition.
    FenceBroker {
        broker_id: i32,
        broker_epoch: i64,
    },
    /// The broker caught up with the metadata log and may serve.
    UnfenceBroker {
        broker_id: i32,
        broker_epoch: i64,
    },
    /// The broker's registration is removed (UnregisterBroker, for a
    /// broker gone for good); a later registration of the id gets a newer
    /// epoch than this one.
    UnregisterBroker {
        broker_id: i32,
        broker_epoch: i64,
    },
    Topic {
        name: String,
        topic_id: [u8; 16],
    },
    /// A partition's whole state: new partitions, and snapshots. `leader`
    /// -1 means it has none. Version 1 added the partition epoch, which
    /// every change of leader, ISR or replicas bumps and which AlterPartition
    /// checks; an older build would drop it and so accept stale requests.
    /// Version 2 added the replicas a reassignment is adding and removing
    /// (both among `replicas`), which an older build would take for
    /// settled members. Version 3 (written only when either is set) added
    /// the eligible leader replicas and the last known leader (KIP-966),
    /// without which an older build would elect no leader from them.
    Partition {
        topic_id: [u8; 16],
        partition_id: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        leader: i32,
        leader_epoch: i32,
        #[serde(default)]
        partition_epoch: i32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        adding_replicas: Vec<i32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removing_replicas: Vec<i32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        elr: Vec<i32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        last_known_elr: Vec<i32>,
    },
    /// A change to an existing partition (Kafka's PartitionChangeRecord):
    /// each `Some` field replaces the partition's value. Applying it bumps
    /// the partition epoch; a `leader` given (even the same one) also bumps
    /// the leader epoch. An ISR-only change keeps the leader epoch.
    /// Version 1 added a reassignment's adding and removing replicas
    /// (`Some(vec![])` when it completes or is cancelled). Version 2
    /// (written only when either is set) added the eligible leader
    /// replicas and the last known leader, as `Partition` version 3.
    PartitionChange {
        topic_id: [u8; 16],
        partition_id: i32,
        #[serde(default)]
        leader: Option<i32>,
        #[serde(default)]
        isr: Option<Vec<i32>>,
        #[serde(default)]
        replicas: Option<Vec<i32>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        adding_replicas: Option<Vec<i32>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        removing_replicas: Option<Vec<i32>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        elr: Option<Vec<i32>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_known_elr: Option<Vec<i32>>,
    },
    /// A topic config set (`value` Some) or removed (None).
    TopicConfig {
        topic_id: [u8; 16],
        name: String,
        value: Option<String>,
    },
    RemoveTopic {
        topic_id: [u8; 16],
    },
    /// A dynamic broker config set (`value` Some) or removed (None), for
    /// one broker or, with `broker_id` None, as the cluster-wide default.
    BrokerConfig {
        broker_id: Option<i32>,
        name: String,
        value: Option<String>,
    },
    /// The next producer id block starts at `next_producer_id`.
    ProducerIds {
        broker_id: i32,
        next_producer_id: i64,
    },
    /// A client quota (`producer_byte_rate`, ...) set (`value` Some) or
    /// removed (None) for one entity: its (entity type, name) pairs in
    /// type order, a None name meaning the type's default entity (Kafka's
    /// ClientQuotaRecord).
    ClientQuota {
        entity: Vec<(String, Option<String>)>,
        key: String,
        value: Option<f64>,
    },
}

impl MetadataRecord {
    /// The schema version this build writes for the record's type.
    pub fn version(&self) -> u16 {
        // Exhaustive, so a new record type is given its version here (and
        // its name in `max_version`).
        match self {
            MetadataRecord::Partition {
                elr,
                last_known_elr,
                ..
            } => {
                if elr.is_empty() && last_known_elr.is_empty() {
                    2
                } else {
                    3
                }
            }
            MetadataRecord::PartitionChange {
                elr,
                last_known_elr,
                ..
            } => {
                if elr.is_none() && last_known_elr.is_none() {
                    1
                } else {
                    2
                }
            }
            MetadataRecord::RegisterBroker { .. } => 1,
            MetadataRecord::FenceBroker { .. }
            | MetadataRecord::UnfenceBroker { .. }
            | MetadataRecord::UnregisterBroker { .. }
            | MetadataRecord::ClusterIdentity { .. } => 0,
            MetadataRecord::Topic { .. }
            | MetadataRecord::TopicConfig { .. }
            | MetadataRecord::RemoveTopic { .. }
            | MetadataRecord::BrokerConfig { .. }
            | MetadataRecord::ProducerIds { .. }
            | MetadataRecord::ClientQuota { .. } => 0,
        }
    }

    /// The newest schema version this build reads for the record type
    /// named `kind` (the log's `type` tag), or `None` for a type it does
    /// not know.
    pub fn max_version(kind: &str) -> Option<u16> {
        match kind {
            "Partition" => Some(3),
            "PartitionChange" => Some(2),
            "RegisterBroker" => Some(1),
            "ClusterIdentity" | "FenceBroker" | "UnfenceBroker" | "UnregisterBroker" | "Topic"
            | "TopicConfig" | "RemoveTopic" | "BrokerConfig" | "ProducerIds" | "ClientQuota" => {
                Some(0)
            }
            _ => None,
        }
    }

    /// The topic a record is about, if any.
    pub fn topic_id(&self) -> Option<Uuid> {
        match self {
            MetadataRecord::Topic { topic_id, .. }
            | MetadataRecord::Partition { topic_id, .. }
            | MetadataRecord::PartitionChange { topic_id, .. }
            | MetadataRecord::TopicConfig { topic_id, .. }
            | MetadataRecord::RemoveTopic { topic_id } => Some(Uuid(*topic_id)),
            MetadataRecord::RegisterBroker { .. }
            | MetadataRecord::ClusterIdentity { .. }
            | MetadataRecord::FenceBroker { .. }
            | MetadataRecord::UnfenceBroker { .. }
            | MetadataRecord::UnregisterBroker { .. }
            | MetadataRecord::BrokerConfig { .. }
            | MetadataRecord::ProducerIds { .. }
            | MetadataRecord::ClientQuota { .. } => None,
        }
    }

    /// Whether the record can change the effective broker config (and so
    /// the settings of every hosted log).
    pub fn changes_broker_config(&self) -> bool {
        matches!(self, MetadataRecord::BrokerConfig { .. })
    }

    pub fn topic_uuid(id: &[u8; 16]) -> Uuid {
        Uuid(*id)
    }
}
