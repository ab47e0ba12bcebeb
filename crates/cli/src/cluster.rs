//! What the CLI's clients ask the cluster before they read or write a
//! topic: metadata, the leader of each partition with its broker's address,
//! and partition offsets by timestamp (ListOffsets, sent to each leader).
//! Shared by `groups`, `perf`, `produce` and `consume`; every broker error
//! comes back as an error naming Kafka's code, never as a silent default.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use tarn_protocol::error;
use tarn_protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic,
};
use tarn_protocol::messages::metadata::{MetadataRequest, MetadataRequestTopic, MetadataResponse};
use tarn_server::error_names::error_name;

use tarn_cli::client::Client;

/// A topic name and a partition index.
pub type TopicPartition = (String, i32);

/// How long to sleep between metadata requests while a topic's leaders
/// are being elected.
const METADATA_RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// A connection to the first reachable broker of `bootstrap`, a
/// comma-separated `host:port` list as Kafka's `bootstrap.servers`.
pub fn connect_bootstrap(bootstrap: &str) -> Result<Client> {
    let mut last_error = None;
    for address in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match Client::connect(address) {
            Ok(client) => return Ok(client),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow!("no bootstrap server given")))
}

/// Metadata for `topics` (all topics for `None`), from `bootstrap`.
pub fn metadata(
    bootstrap: &str,
    topics: Option<Vec<String>>,
    allow_auto_topic_creation: bool,
) -> Result<MetadataResponse> {
    let request = MetadataRequest {
        topics: topics.map(|names| {
            names
                .into_iter()
                .map(|name| MetadataRequestTopic {
                    name: Some(name),
                    ..Default::default()
                })
                .collect()
        }),
        allow_auto_topic_creation,
        ..Default::default()
    };
    connect_bootstrap(bootstrap)?.call(3, 12, 9, &request)
}

/// The leader of every partition of one topic and where its brokers are.
#[derive(Debug, Clone)]
pub struct TopicLeaders {
    /// Leader broker id, indexed by partition.
    pub leaders: Vec<i32>,
    /// `host:port` by broker id.
    pub brokers: BTreeMap<i32, String>,
}

impl TopicLeaders {
    pub fn partition_count(&self) -> usize {
        self.leaders.len()
    }

    /// The leader of `partition`; an error if the topic has no such
    /// partition (any more).
    pub fn leader(&self, partition: i32) -> Result<i32> {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.leaders.get(p))
            .copied()
            .ok_or_else(|| anyhow!("no partition {partition} in the topic's metadata"))
    }

    /// The address of broker `id`.
    pub fn address(&self, id: i32) -> Result<&str> {
        self.brokers
            .get(&id)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("metadata names broker {id} as a leader but not its address"))
    }
}

/// One connection per broker, opened on first use, all sending one
/// `client.id`.
pub struct Connections {
    client_id: String,
    clients: BTreeMap<i32, Client>,
}

impl Connections {
    pub fn new(client_id: &str) -> Connections {
        Connections {
            client_id: client_id.to_owned(),
            clients: BTreeMap::new(),
        }
    }

    /// The connection to `broker`, found in `leaders`.
    pub fn get(&mut self, leaders: &TopicLeaders, broker: i32) -> Result<&mut Client> {
        if !self.clients.contains_key(&broker) {
            let client = Client::connect(leaders.address(broker)?)?.with_client_id(&self.client_id);
            self.clients.insert(broker, client);
        }
        Ok(self.clients.get_mut(&broker).expect("connected above"))
    }

    /// Closes every connection, for when leaders have moved.
    pub fn clear(&mut self) {
        self.clients.clear();
    }
}

/// The leaders of `topic`'s partitions. A topic whose leaders are not
/// elected yet (just auto-created, say) is asked again until `wait` has
/// passed; a topic the broker does not have fails at once with
/// UNKNOWN_TOPIC_OR_PARTITION (auto-creation is off, or not allowed).
pub fn topic_leaders(
    bootstrap: &str,
    topic: &str,
    allow_auto_topic_creation: bool,
    wait: Duration,
) -> Result<TopicLeaders> {
    let deadline = Instant::now() + wait;
    loop {
        let response = metadata(
            bootstrap,
            Some(vec![topic.to_owned()]),
            allow_auto_topic_creation,
        )?;
        let entry = response
            .topics
            .iter()
            .find(|t| t.name.as_deref() == Some(topic))
            .ok_or_else(|| anyhow!("metadata response lacks topic {topic}"))?;
        let code = entry.error_code;
        let elected =
            !entry.partitions.is_empty() && entry.partitions.iter().all(|p| p.leader_id >= 0);
        if code == error::NONE && elected {
            let mut partitions = entry.partitions.clone();
            partitions.sort_by_key(|p| p.partition_index);
            if partitions
                .iter()
                .enumerate()
                .any(|(i, p)| p.partition_index != i as i32)
            {
                bail!("metadata for topic {topic} skips partition indexes");
            }
            let brokers = response
                .brokers
                .iter()
                .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
                .collect();
            return Ok(TopicLeaders {
                leaders: partitions.iter().map(|p| p.leader_id).collect(),
                brokers,
            });
        }
        let retriable = matches!(code, error::NONE | error::LEADER_NOT_AVAILABLE);
        if !retriable || Instant::now() >= deadline {
            let reason = if code == error::NONE {
                "no leader for some partitions".to_owned()
            } else {
                format!("{} ({code})", error_name(code))
            };
            bail!("topic '{topic}': {reason}");
        }
        thread::sleep(METADATA_RETRY_BACKOFF);
    }
}

/// ListOffsets for `partitions` at `timestamp` (or -1 latest, -2
/// earliest), sent to each partition's leader. None where no offset
/// matches the timestamp or the partition does not exist.
pub fn list_offsets(
    bootstrap: &str,
    partitions: &BTreeSet<TopicPartition>,
    timestamp: i64,
) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
    let mut out = BTreeMap::new();
    if partitions.is_empty() {
        return Ok(out);
    }
    let topics: BTreeSet<String> = partitions.iter().map(|(t, _)| t.clone()).collect();
    let meta = metadata(bootstrap, Some(topics.into_iter().collect()), false)?;
    let addresses: HashMap<i32, String> = meta
        .brokers
        .iter()
        .map(|b| (b.node_id, format!("{}:{}", b.host, b.port)))
        .collect();
    let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (topic, partition) in partitions {
        let leader = meta
            .topics
            .iter()
            .find(|t| t.name.as_deref() == Some(topic))
            .and_then(|t| {
                t.partitions
                    .iter()
                    .find(|p| p.partition_index == *partition)
            })
            .map(|p| p.leader_id);
        let Some(leader) = leader else {
            // A partition that no longer exists has no offsets.
            out.insert((topic.clone(), *partition), None);
            continue;
        };
        by_leader
            .entry(leader)
            .or_default()
            .entry(topic.clone())
            .or_default()
            .push(*partition);
    }
    for (leader, topics) in by_leader {
        let address = addresses
            .get(&leader)
            .with_context(|| format!("no address for leader broker {leader}"))?;
        let request = ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 0,
            topics: topics
                .into_iter()
                .map(|(name, ps)| ListOffsetsTopic {
                    name,
                    partitions: ps
                        .into_iter()
                        .map(|p| ListOffsetsPartition {
                            partition_index: p,
                            timestamp,
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect(),
            timeout_ms: 30_000,
        };
        let response: ListOffsetsResponse = Client::connect(address)?.call(2, 7, 6, &request)?;
        for topic in response.topics {
            for p in topic.partitions {
                if p.error_code != error::NONE {
                    bail!(
                        "cannot list offsets of {}-{}: {} ({})",
                        topic.name,
                        p.partition_index,
                        error_name(p.error_code),
                        p.error_code
                    );
                }
                let offset = (p.offset >= 0).then_some(p.offset);
                out.insert((topic.name.clone(), p.partition_index), offset);
            }
        }
    }
    Ok(out)
}
