//! The in-memory metadata image: what the metadata log says right now.
//!
//! An image is cloned on every commit (the publisher applies the entry to
//! a copy, and a controller plans on one). The topic maps are persistent
//! (`imbl`): a clone shares their nodes and costs nothing whatever the
//! number of topics, and a change copies only the path to what it
//! touches. Topics are shared (`Arc<TopicInfo>`) the same way: a record
//! that changes a topic copies that topic alone (`Arc::make_mut`), so an
//! older image never sees a newer change. A partition's epochs only grow: a `PartitionChange` bumps the
//! partition epoch, and the leader epoch too when it names a leader.

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_protocol::Uuid;

use super::records::{Endpoint, MetadataRecord};

#[derive(Debug, Clone, PartialEq)]
pub struct BrokerInfo {
    pub broker_id: i32,
    /// The client listener clients are sent to.
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub incarnation_id: [u8; 16],
    pub broker_epoch: i64,
    pub listeners: Vec<Endpoint>,
    /// A fenced broker is registered but not served to clients and leads
    /// nothing.
    pub fenced: bool,
}

impl BrokerInfo {
    /// The listener named `name`, or the client listener when the broker
    /// registered none by name (a single-node broker before clusters).
    pub fn listener(&self, name: &str) -> Option<(&str, i32)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == name)
            .map(|l| (l.host.as_str(), l.port))
    }
}

/// The leader id of a partition that has none.
pub const NO_LEADER: i32 = -1;

/// The fields a `PartitionChange` sets, `None` where it leaves the
/// partition's value.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChangeFields<'a> {
    pub leader: Option<i32>,
    pub isr: Option<&'a [i32]>,
    pub replicas: Option<&'a [i32]>,
    pub adding_replicas: Option<&'a [i32]>,
    pub removing_replicas: Option<&'a [i32]>,
    pub elr: Option<&'a [i32]>,
    pub last_known_elr: Option<&'a [i32]>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionInfo {
    pub partition_id: i32,
    /// In preference order: the first is the preferred leader.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// [`NO_LEADER`] when the partition has none.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Bumped by every change of leader, ISR or replicas; an AlterPartition
    /// must name the current one.
    pub partition_epoch: i32,
    /// A reassignment in progress (KIP-455): the replicas it adds and
    /// those it will remove, both among `replicas`. Empty when none is.
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
    /// Eligible leader replicas (KIP-966): replicas that left the ISR
    /// while it was below `min.insync.replicas`, so hold every committed
    /// record; one may lead once the ISR is empty.
    pub elr: Vec<i32>,
    /// The leader the partition had when its ISR emptied (Kafka keeps it
    /// in the same field as the last known ELR); it may lead again once
    /// neither ISR nor ELR has a member.
    pub last_known_elr: Vec<i32>,
}

impl PartitionInfo {
    /// Applies a `PartitionChange`'s fields, as Kafka's
    /// `PartitionRegistration.merge` does: a leader given (even the same
    /// one) is a new leader epoch, and every change is a new partition
    /// epoch.
    pub fn apply_change(&mut self, change: &ChangeFields<'_>) {
        let ChangeFields {
            leader,
            isr,
            replicas,
            adding_replicas,
            removing_replicas,
            elr,
            last_known_elr,
        } = *change;
        if let Some(leader) = leader {
            self.leader = leader;
            self.leader_epoch += 1;
        }
        if let Some(isr) = isr {
            self.isr = isr.to_vec();
        }
        if let Some(replicas) = replicas {
            self.replicas = replicas.to_vec();
        }
        if let Some(adding) = adding_replicas {
            self.adding_replicas = adding.to_vec();
        }
        if let Some(removing) = removing_replicas {
            self.removing_replicas = removing.to_vec();
        }
        if let Some(elr) = elr {
            self.elr = elr.to_vec();
        }
        if let Some(last_known_elr) = last_known_elr {
            self.last_known_elr = last_known_elr.to_vec();
        }
        self.partition_epoch += 1;
    }

    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas a reassignment in progress moves to (the replicas
    /// without those it removes); the replicas when none is.
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }

    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// The first replica, which leads when it can.
    pub fn preferred_leader(&self) -> Option<i32> {
        self.replicas.first().copied()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: Uuid,
    pub partitions: Vec<PartitionInfo>,
    pub configs: BTreeMap<String, String>,
}

impl TopicInfo {
    pub fn is_internal(&self) -> bool {
        self.name.starts_with("__")
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataImage {
    /// Set by the quorum's first active controller; `None` on a single
    /// node, whose id is in its meta.properties alone.
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// The last broker epoch of each id whose registration was removed
    /// (and not registered since), so that a new registration of the id
    /// gets a newer epoch than anything its old one wrote.
    pub unregistered_epochs: BTreeMap<i32, i64>,
    topics_by_id: imbl::HashMap<Uuid, Arc<TopicInfo>>,
    /// Shared names: copying a node of the map copies reference counts,
    /// not names.
    topic_ids: imbl::OrdMap<Arc<str>, Uuid>,
    pub next_producer_id: i64,
    /// Dynamic broker configs set as the cluster-wide default.
    pub cluster_configs: BTreeMap<String, String>,
    /// Dynamic broker configs set for one broker.
    pub broker_configs: BTreeMap<i32, BTreeMap<String, String>>,
    /// Client quotas by entity (see `MetadataRecord::ClientQuota`); an
    /// entity with no quota left is removed.
    pub client_quotas: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
}

/// A client quota entity: (entity type, name) pairs in type order, a None
/// name for the type's default entity.
pub type QuotaEntity = Vec<(String, Option<String>)>;

impl MetadataImage {
    /// Registered brokers that are not fenced, in id order: those clients
    /// see and partitions are placed on.
    pub fn unfenced_brokers(&self) -> impl Iterator<Item = &BrokerInfo> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// The replicas among `replicas` whose broker is fenced or not
    /// registered at all, in replica order: what Metadata and
    /// DescribeTopicPartitions list as offline, as Kafka's brokers do.
    pub fn offline_replicas(&self, replicas: &[i32]) -> Vec<i32> {
        replicas
            .iter()
            .copied()
            .filter(|id| self.brokers.get(id).is_none_or(|b| b.fenced))
            .collect()
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicInfo>> {
        self.topic_ids
            .get(name)
            .and_then(|id| self.topics_by_id.get(id))
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&Arc<TopicInfo>> {
        self.topics_by_id.get(id)
    }

    /// Topics in name order.
    pub fn topics(&self) -> impl Iterator<Item = &Arc<TopicInfo>> {
        self.topic_ids
            .values()
            .filter_map(|id| self.topics_by_id.get(id))
    }

    /// Records that rebuild this image from an empty one: what a snapshot
    /// of the metadata log holds, so that start-up and a node that fell
    /// behind replay the image, not the whole history.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        if let Some(cluster_id) = &self.cluster_id {
            records.push(MetadataRecord::ClusterIdentity {
                cluster_id: cluster_id.clone(),
            });
        }
        for (broker_id, broker_epoch) in &self.unregistered_epochs {
            records.push(MetadataRecord::UnregisterBroker {
                broker_id: *broker_id,
                broker_epoch: *broker_epoch,
            });
        }
        for b in self.brokers.values() {
            records.push(MetadataRecord::RegisterBroker {
                broker_id: b.broker_id,
                host: b.host.clone(),
                port: b.port,
                rack: b.rack.clone(),
                incarnation_id: b.incarnation_id,
                broker_epoch: b.broker_epoch,
                listeners: b.listeners.clone(),
                fenced: b.fenced,
            });
        }
        for t in self.topics() {
            records.push(MetadataRecord::Topic {
                name: t.name.clone(),
                topic_id: t.topic_id.0,
            });
            for (name, value) in &t.configs {
                records.push(MetadataRecord::TopicConfig {
                    topic_id: t.topic_id.0,
                    name: name.clone(),
                    value: Some(value.clone()),
                });
            }
            for p in &t.partitions {
                records.push(MetadataRecord::Partition {
                    topic_id: t.topic_id.0,
                    partition_id: p.partition_id,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    adding_replicas: p.adding_replicas.clone(),
                    removing_replicas: p.removing_replicas.clone(),
                    elr: p.elr.clone(),
                    last_known_elr: p.last_known_elr.clone(),
                });
            }
        }
        if self.next_producer_id > 0 {
            records.push(MetadataRecord::ProducerIds {
                broker_id: -1,
                next_producer_id: self.next_producer_id,
            });
        }
        let configs = std::iter::once((None, &self.cluster_configs))
            .chain(self.broker_configs.iter().map(|(id, c)| (Some(*id), c)));
        for (broker_id, configs) in configs {
            for (name, value) in configs {
                records.push(MetadataRecord::BrokerConfig {
                    broker_id,
                    name: name.clone(),
                    value: Some(value.clone()),
                });
            }
        }
        for (entity, quotas) in &self.client_quotas {
            for (key, value) in quotas {
                records.push(MetadataRecord::ClientQuota {
                    entity: entity.clone(),
                    key: key.clone(),
                    value: Some(*value),
                });
            }
        }
        records
    }

    /// The partition `partition_id` of topic `topic_id`, if both exist.
    pub fn partition(&self, topic_id: &Uuid, partition_id: i32) -> Option<&PartitionInfo> {
        let topic = self.topics_by_id.get(topic_id)?;
        partition_in(topic, partition_id)
    }

    fn apply_partition_change(
        &mut self,
        topic_id: Uuid,
        partition_id: i32,
        change: &ChangeFields<'_>,
    ) {
        // Look before copying: a change to a partition that is gone (its
        // topic deleted in the same entry, say) must not copy the topic.
        let known = self.topics_by_id.get(&topic_id).and_then(|t| {
            t.partitions
                .binary_search_by_key(&partition_id, |p| p.partition_id)
                .ok()
        });
        let (Some(index), Some(topic)) = (known, self.topics_by_id.get_mut(&topic_id)) else {
            tracing::warn!(%topic_id, partition_id, "a partition change names no known partition");
            return;
        };
        Arc::make_mut(topic).partitions[index].apply_change(change);
    }

    pub fn apply(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::RegisterBroker {
                broker_id,
                host,
                port,
                rack,
                incarnation_id,
                broker_epoch,
                listeners,
                fenced,
            } => {
                self.unregistered_epochs.remove(broker_id);
                self.brokers.insert(
                    *broker_id,
                    BrokerInfo {
                        broker_id: *broker_id,
                        host: host.clone(),
                        port: *port,
                        rack: rack.clone(),
                        incarnation_id: *incarnation_id,
                        broker_epoch: *broker_epoch,
                        listeners: listeners.clone(),
                        fenced: *fenced,
                    },
                );
            }
            MetadataRecord::ClusterIdentity { cluster_id } => {
                // The first one counts: a cluster's id never changes.
                self.cluster_id.get_or_insert_with(|| cluster_id.clone());
            }
            MetadataRecord::FenceBroker {
                broker_id,
                broker_epoch,
            }
            | MetadataRecord::UnfenceBroker {
                broker_id,
                broker_epoch,
            } => {
                let fence = matches!(record, MetadataRecord::FenceBroker { .. });
                // A record for an older registration changes nothing.
                if let Some(broker) = self
                    .brokers
                    .get_mut(broker_id)
                    .filter(|b| b.broker_epoch == *broker_epoch)
                {
                    broker.fenced = fence;
                }
            }
            MetadataRecord::UnregisterBroker {
                broker_id,
                broker_epoch,
            } => {
                // A record for an older registration changes nothing; in a
                // snapshot, the id is not registered at all.
                match self.brokers.get(broker_id) {
                    Some(b) if b.broker_epoch != *broker_epoch => {}
                    _ => {
                        self.brokers.remove(broker_id);
                        self.unregistered_epochs.insert(*broker_id, *broker_epoch);
                    }
                }
            }
            MetadataRecord::Topic { name, topic_id } => {
                let id = Uuid(*topic_id);
                self.topic_ids.insert(Arc::from(name.as_str()), id);
                self.topics_by_id.insert(
                    id,
                    Arc::new(TopicInfo {
                        name: name.clone(),
                        topic_id: id,
                        partitions: Vec::new(),
                        configs: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition {
                topic_id,
                partition_id,
                replicas,
                isr,
                leader,
                leader_epoch,
                partition_epoch,
                adding_replicas,
                removing_replicas,
                elr,
                last_known_elr,
            } => {
                if let Some(topic) = self.topics_by_id.get_mut(&Uuid(*topic_id)) {
                    let topic = Arc::make_mut(topic);
                    let info = PartitionInfo {
                        partition_id: *partition_id,
                        replicas: replicas.clone(),
                        isr: isr.clone(),
                        leader: *leader,
                        leader_epoch: *leader_epoch,
                        partition_epoch: *partition_epoch,
                        adding_replicas: adding_replicas.clone(),
                        removing_replicas: removing_replicas.clone(),
                        elr: elr.clone(),
                        last_known_elr: last_known_elr.clone(),
                    };
                    match topic
                        .partitions
                        .binary_search_by_key(partition_id, |p| p.partition_id)
                    {
                        Ok(i) => topic.partitions[i] = info,
                        Err(i) => topic.partitions.insert(i, info),
                    }
                }
            }
            MetadataRecord::PartitionChange {
                topic_id,
                partition_id,
                leader,
                isr,
                replicas,
                adding_replicas,
                removing_replicas,
                elr,
                last_known_elr,
            } => self.apply_partition_change(
                Uuid(*topic_id),
                *partition_id,
                &ChangeFields {
                    leader: *leader,
                    isr: isr.as_deref(),
                    replicas: replicas.as_deref(),
                    adding_replicas: adding_replicas.as_deref(),
                    removing_replicas: removing_replicas.as_deref(),
                    elr: elr.as_deref(),
                    last_known_elr: last_known_elr.as_deref(),
                },
            ),
            MetadataRecord::TopicConfig {
                topic_id,
                name,
                value,
            } => {
                if let Some(topic) = self.topics_by_id.get_mut(&Uuid(*topic_id)) {
                    let topic = Arc::make_mut(topic);
                    match value {
                        Some(v) => topic.configs.insert(name.clone(), v.clone()),
                        None => topic.configs.remove(name),
                    };
                }
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(topic) = self.topics_by_id.remove(&Uuid(*topic_id)) {
                    self.topic_ids.remove(topic.name.as_str());
                }
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::BrokerConfig {
                broker_id,
                name,
                value,
            } => {
                let configs = match broker_id {
                    None => &mut self.cluster_configs,
                    Some(id) => self.broker_configs.entry(*id).or_default(),
                };
                match value {
                    Some(v) => configs.insert(name.clone(), v.clone()),
                    None => configs.remove(name),
                };
                if let Some(id) = broker_id {
                    if self.broker_configs.get(id).is_some_and(BTreeMap::is_empty) {
                        self.broker_configs.remove(id);
                    }
                }
            }
            MetadataRecord::ClientQuota { entity, key, value } => {
                let quotas = self.client_quotas.entry(entity.clone()).or_default();
                match value {
                    Some(v) => quotas.insert(key.clone(), *v),
                    None => quotas.remove(key),
                };
                if quotas.is_empty() {
                    self.client_quotas.remove(entity);
                }
            }
        }
    }
}

/// `topic`'s partition `partition_id`; partitions are kept in id order.
pub(crate) fn partition_in(topic: &TopicInfo, partition_id: i32) -> Option<&PartitionInfo> {
    topic
        .partitions
        .binary_search_by_key(&partition_id, |p| p.partition_id)
        .ok()
        .map(|i| &topic.partitions[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_rebuilt_from_its_records_is_the_same_image() {
        let mut image = MetadataImage::default();
        let records = vec![
            MetadataRecord::ClusterIdentity {
                cluster_id: "c".into(),
            },
            MetadataRecord::RegisterBroker {
                broker_id: 2,
                host: "h".into(),
                port: 9,
                rack: Some("r".into()),
                incarnation_id: [4; 16],
                broker_epoch: 3,
                listeners: vec![],
                fenced: true,
            },
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: [1; 16],
            },
            MetadataRecord::TopicConfig {
                topic_id: [1; 16],
                name: "retention.ms".into(),
                value: Some("5".into()),
            },
            MetadataRecord::Partition {
                topic_id: [1; 16],
                partition_id: 0,
                replicas: vec![2],
                isr: vec![2],
                leader: 2,
                leader_epoch: 4,
                partition_epoch: 6,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
                elr: Vec::new(),
                last_known_elr: Vec::new(),
            },
            MetadataRecord::ProducerIds {
                broker_id: 2,
                next_producer_id: 2000,
            },
            MetadataRecord::BrokerConfig {
                broker_id: None,
                name: "log.retention.ms".into(),
                value: Some("9".into()),
            },
            MetadataRecord::BrokerConfig {
                broker_id: Some(2),
                name: "log.cleaner.threads".into(),
                value: Some("2".into()),
            },
            MetadataRecord::ClientQuota {
                entity: vec![("user".into(), Some("u".into()))],
                key: "producer_byte_rate".into(),
                value: Some(100.0),
            },
        ];
        for record in &records {
            image.apply(record);
        }
        let mut rebuilt = MetadataImage::default();
        for record in image.to_records() {
            rebuilt.apply(&record);
        }
        assert_eq!(rebuilt, image);
    }

    #[test]
    fn topics_are_added_configured_and_removed() {
        let id = [7u8; 16];
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        for p in [1, 0] {
            image.apply(&MetadataRecord::Partition {
                topic_id: id,
                partition_id: p,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
                elr: Vec::new(),
                last_known_elr: Vec::new(),
            });
        }
        image.apply(&MetadataRecord::TopicConfig {
            topic_id: id,
            name: "retention.ms".into(),
            value: Some("5".into()),
        });
        let topic = image.topic("t").unwrap();
        assert_eq!(topic.partitions.len(), 2);
        assert_eq!(topic.partitions[0].partition_id, 0);
        assert_eq!(topic.configs["retention.ms"], "5");
        image.apply(&MetadataRecord::RemoveTopic { topic_id: id });
        assert!(image.topic("t").is_none());
        assert!(image.topic_by_id(&Uuid(id)).is_none());
    }

    #[test]
    fn partition_changes_bump_epochs_and_leave_older_images_alone() {
        let id = [3u8; 16];
        let mut image = MetadataImage::default();
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id: id,
        });
        image.apply(&MetadataRecord::Partition {
            topic_id: id,
            partition_id: 0,
            replicas: vec![1, 2],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 3,
            partition_epoch: 7,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        });
        let before = image.clone();
        let change = |leader, isr: Option<Vec<i32>>| MetadataRecord::PartitionChange {
            topic_id: id,
            partition_id: 0,
            leader,
            isr,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
            elr: None,
            last_known_elr: None,
        };
        // An ISR change alone keeps the leader epoch.
        image.apply(&change(None, Some(vec![1])));
        let p = image.partition(&Uuid(id), 0).unwrap();
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 3, 8));
        assert_eq!(p.isr, [1]);
        image.apply(&change(Some(NO_LEADER), None));
        let p = image.partition(&Uuid(id), 0).unwrap();
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (-1, 4, 9));
        // The clone taken before shares nothing that changed.
        let old = before.partition(&Uuid(id), 0).unwrap();
        assert_eq!(
            (old.leader, old.leader_epoch, old.partition_epoch),
            (1, 3, 7)
        );
        assert_eq!(old.isr, [1, 2]);
        // A change to a partition that does not exist changes nothing.
        let unchanged = image.clone();
        image.apply(&MetadataRecord::PartitionChange {
            topic_id: id,
            partition_id: 5,
            leader: Some(1),
            isr: None,
            replicas: None,
            adding_replicas: None,
            removing_replicas: None,
            elr: None,
            last_known_elr: None,
        });
        assert_eq!(image, unchanged);
        // Snapshots keep the epochs.
        let mut rebuilt = MetadataImage::default();
        for record in image.to_records() {
            rebuilt.apply(&record);
        }
        assert_eq!(rebuilt, image);
    }

    #[test]
    fn broker_configs_are_set_and_removed_per_level() {
        let mut image = MetadataImage::default();
        let record = |broker_id, value: Option<&str>| MetadataRecord::BrokerConfig {
            broker_id,
            name: "log.retention.ms".into(),
            value: value.map(str::to_owned),
        };
        image.apply(&record(None, Some("1")));
        image.apply(&record(Some(3), Some("2")));
        assert_eq!(image.cluster_configs["log.retention.ms"], "1");
        assert_eq!(image.broker_configs[&3]["log.retention.ms"], "2");
        image.apply(&record(Some(3), None));
        assert!(image.broker_configs.is_empty());
        image.apply(&record(None, None));
        assert!(image.cluster_configs.is_empty());
    }
}
