//! The differential tests' harness (`tests/diff.rs`, `tests/diff_cluster.rs`):
//! the same requests sent to Apache Kafka (4.4.0, started by
//! `scripts/kafka.sh`) and to Tarn, and the decoded responses compared
//! field by field.
//!
//! A response is compared as its `Debug` text after masking the fields
//! that may differ between two clusters ([`MASKED`]: ids, throttle times,
//! error messages' wording, addresses) and normalizing what a response
//! type may list differently ([`Normalize`]). Every other difference is
//! recorded unless its scenario is in the test's known list, with the
//! reason Tarn answers otherwise.

use std::fmt::Debug;
use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use tarn_cli::client::Client;
use tarn_protocol::codec::{Decode, Encode, Uuid};
use tarn_protocol::messages::acls::*;
use tarn_protocol::messages::alter_configs::*;
use tarn_protocol::messages::client_quotas::*;
use tarn_protocol::messages::create_partitions::*;
use tarn_protocol::messages::create_topics::*;
use tarn_protocol::messages::delete_groups::*;
use tarn_protocol::messages::delete_records::*;
use tarn_protocol::messages::delete_topics::*;
use tarn_protocol::messages::describe_cluster::*;
use tarn_protocol::messages::describe_configs::*;
use tarn_protocol::messages::describe_groups::*;
use tarn_protocol::messages::describe_log_dirs::*;
use tarn_protocol::messages::describe_producers::*;
use tarn_protocol::messages::describe_topic_partitions::*;
use tarn_protocol::messages::elect_leaders::*;
use tarn_protocol::messages::fetch::*;
use tarn_protocol::messages::find_coordinator::*;
use tarn_protocol::messages::heartbeat::*;
use tarn_protocol::messages::init_producer_id::*;
use tarn_protocol::messages::join_group::*;
use tarn_protocol::messages::leave_group::*;
use tarn_protocol::messages::list_config_resources::*;
use tarn_protocol::messages::list_groups::*;
use tarn_protocol::messages::list_offsets::*;
use tarn_protocol::messages::list_transactions::*;
use tarn_protocol::messages::metadata::*;
use tarn_protocol::messages::offset_commit::*;
use tarn_protocol::messages::offset_delete::*;
use tarn_protocol::messages::offset_fetch::*;
use tarn_protocol::messages::offset_for_leader_epoch::*;
use tarn_protocol::messages::produce::*;
use tarn_protocol::messages::reassignments::*;
use tarn_protocol::messages::scram_credentials::*;
use tarn_protocol::messages::sync_group::*;
use tarn_protocol::messages::update_features::*;
use tarn_protocol::record_batch::RecordBatchBuilder;

/// Fields that may differ between two clusters, whatever the scenario.
pub const MASKED: &[(&str, &str)] = &[
    ("topic_id", "each cluster makes its own topic ids"),
    ("cluster_id", "each cluster makes its own id"),
    ("throttle_time_ms", "quotas are not compared here"),
    (
        "error_message",
        "wording is free; the error code is compared",
    ),
    (
        "batch_index_error_message",
        "wording is free; the record's index and the error code are compared",
    ),
    ("host", "each broker listens on its own address"),
    ("port", "each broker listens on its own address"),
    ("member_id", "member ids are generated"),
    ("leader", "the group leader is a generated member id"),
    ("producer_id", "producer ids are allocated per cluster"),
];

/// Topic configs Kafka 4.4 lists for every topic that Tarn does not have,
/// each with the reason. They are taken out of Kafka's answers before the
/// comparison; every other config must match in name, value and source.
pub const KAFKA_ONLY_TOPIC_CONFIGS: &[(&str, &str)] = &[
    (
        "errors.deadletterqueue.group.enable",
        "streams groups' dead-letter queues (KIP-1034): Tarn has no streams groups",
    ),
    (
        "follower.replication.throttled.replicas",
        "replication throttles come with replication",
    ),
    (
        "leader.replication.throttled.replicas",
        "replication throttles come with replication",
    ),
    (
        "local.retention.bytes",
        "tiered storage (KIP-405) is not implemented",
    ),
    (
        "local.retention.ms",
        "tiered storage (KIP-405) is not implemented",
    ),
    (
        "remote.copy.lag.bytes",
        "tiered storage (KIP-405) is not implemented",
    ),
    (
        "remote.copy.lag.ms",
        "tiered storage (KIP-405) is not implemented",
    ),
    (
        "remote.log.copy.disable",
        "tiered storage (KIP-405) is not implemented",
    ),
    (
        "remote.log.delete.on.disable",
        "tiered storage (KIP-405) is not implemented",
    ),
    (
        "remote.storage.enable",
        "tiered storage (KIP-405) is not implemented",
    ),
    ("preallocate", "Tarn never preallocates segment files"),
    (
        "max.decompressed.message.bytes",
        "Tarn caps decompression at max.message.bytes",
    ),
];

/// What may differ inside a response type beyond [`MASKED`].
pub trait Normalize {
    fn normalize(&mut self) {}
}

impl Normalize for CreateTopicsResponse {
    fn normalize(&mut self) {
        for topic in &mut self.topics {
            let Some(configs) = topic.configs.as_mut() else {
                continue;
            };
            configs.retain(|c| {
                !KAFKA_ONLY_TOPIC_CONFIGS
                    .iter()
                    .any(|(name, _)| *name == c.name)
            });
            for config in configs {
                // Kafka 4.4 with eligible leader replicas (KIP-966) writes
                // min.insync.replicas as a cluster-wide dynamic default
                // (source 3) at start-up; Tarn has no ELR, so it is the
                // default (5) there.
                if config.name == "min.insync.replicas" && config.config_source == 3 {
                    config.config_source = 5;
                }
            }
        }
    }
}

impl Normalize for DescribeConfigsResponse {
    fn normalize(&mut self) {
        for result in &mut self.results {
            result.configs.retain(|c| {
                !KAFKA_ONLY_TOPIC_CONFIGS
                    .iter()
                    .any(|(name, _)| *name == c.name)
            });
            // The order of the keys is no part of the answer's meaning
            // (Kafka lists them in its config definitions' order).
            result.configs.sort_by(|a, b| a.name.cmp(&b.name));
            for config in &mut result.configs {
                // Tarn writes its own documentation: only its presence is
                // compared.
                if let Some(doc) = config.documentation.as_mut() {
                    doc.clear();
                }
                if config.name == "min.insync.replicas" && config.config_source == 3 {
                    config.config_source = 5;
                    config.synonyms.retain(|s| s.source != 3);
                }
            }
            // So the cluster default's keys list Kafka's min.insync.replicas
            // even when no one set it: taken out.
            if result.resource_type == 4 && result.resource_name.is_empty() {
                result
                    .configs
                    .retain(|c| !(c.name == "min.insync.replicas" && c.synonyms.is_empty()));
            }
        }
    }
}

macro_rules! compared_as_they_are {
    ($($t:ty),* $(,)?) => { $(impl Normalize for $t {})* };
}

compared_as_they_are!(
    ProduceResponse,
    ListOffsetsResponse,
    DeleteRecordsResponse,
    CreatePartitionsResponse,
    InitProducerIdResponse,
    SyncGroupResponse,
    HeartbeatResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    FindCoordinatorResponse,
    DescribeClusterResponse,
    DescribeProducersResponse,
    AlterConfigsResponse,
    ElectLeadersResponse,
    OffsetForLeaderEpochResponse,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
    LeaveGroupResponse,
    OffsetDeleteResponse,
    DescribeTopicPartitionsResponse,
    DescribeAclsResponse,
    CreateAclsResponse,
    DeleteAclsResponse,
    UpdateFeaturesResponse,
    ListTransactionsResponse,
);

/// Responses whose one list each broker orders its own way, compared
/// sorted by `key`.
macro_rules! compared_sorted {
    ($($t:ty: $list:ident by $key:ident),* $(,)?) => {
        $(impl Normalize for $t {
            fn normalize(&mut self) {
                self.$list.sort_by(|a, b| a.$key.cmp(&b.$key));
            }
        })*
    };
}

// Kafka lists every topic in an order of its own, and groups by the
// `__consumer_offsets` partition that holds each.
compared_sorted!(
    MetadataResponse: topics by name,
    ListGroupsResponse: groups by group_id,
    DeleteGroupsResponse: results by group_id,
);

// A group's members in an order of each broker's own; the test gives each
// member metadata of its own, since their ids are generated.
impl Normalize for JoinGroupResponse {
    fn normalize(&mut self) {
        self.members.sort_by(|a, b| a.metadata.cmp(&b.metadata));
    }
}

impl Normalize for DescribeGroupsResponse {
    fn normalize(&mut self) {
        self.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        for group in &mut self.groups {
            // Metadata is described only in a Stable group: the last
            // synced assignment tells members apart in the other states.
            group.members.sort_by(|a, b| {
                (&a.member_metadata, &a.member_assignment)
                    .cmp(&(&b.member_metadata, &b.member_assignment))
            });
        }
    }
}

// Each broker compresses in its own way (Kafka's zstd frames carry no
// content size and end with an empty block, Tarn's the other way round):
// compressed batches are compared by what they hold, re-encoded without
// compression (same header fields, new length and CRC).
impl Normalize for FetchResponse {
    fn normalize(&mut self) {
        // A fetch session's id is drawn at random; whether there is one
        // (not 0) is compared.
        self.session_id = self.session_id.signum();
        use tarn_protocol::record_batch::{recompress_batch, BatchIter, Compression};
        for partition in self
            .responses
            .iter_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            let Some(records) = partition.records.as_ref() else {
                continue;
            };
            let mut plain = Vec::with_capacity(records.len());
            let mut compressed = false;
            let mut batches = BatchIter::new(records);
            for batch in batches.by_ref() {
                let Ok((start, header)) = batch else {
                    break;
                };
                let bytes = &records[start..start + header.total_size()];
                if header.compression() == Compression::None {
                    plain.extend_from_slice(bytes);
                } else {
                    compressed = true;
                    recompress_batch(bytes, &header, Compression::None, 1 << 24, &mut plain)
                        .expect("a fetched compressed batch decompresses");
                }
            }
            if compressed {
                // What is not a whole batch (a partial one at the end) as
                // it came.
                plain.extend_from_slice(&records[batches.position()..]);
                partition.records = Some(Bytes::from(plain));
            }
        }
    }
}

impl Normalize for DescribeLogDirsResponse {
    fn normalize(&mut self) {
        // Each broker's own directory, and its file system's sizes.
        for result in &mut self.results {
            result.log_dir.clear();
            result.total_bytes = result.total_bytes.min(0);
            result.usable_bytes = result.usable_bytes.min(0);
            // In an order of each broker's own.
            result.topics.sort_by(|a, b| a.name.cmp(&b.name));
            for topic in &mut result.topics {
                topic.partitions.sort_by_key(|p| p.partition_index);
            }
        }
    }
}

impl Normalize for DeleteTopicsResponse {
    fn normalize(&mut self) {
        // Kafka shuffles its answers (so that their places say nothing of
        // topics the caller may not see).
        self.responses
            .sort_by(|a, b| (&a.name, a.error_code).cmp(&(&b.name, b.error_code)));
    }
}

impl Normalize for AlterClientQuotasResponse {
    fn normalize(&mut self) {
        // Kafka echoes an entity from a map, in its own order.
        for entry in &mut self.entries {
            entry
                .entity
                .sort_by(|a, b| a.entity_type.cmp(&b.entity_type));
        }
    }
}

impl Normalize for DescribeClientQuotasResponse {
    fn normalize(&mut self) {
        for entry in self.entries.iter_mut().flatten() {
            entry
                .entity
                .sort_by(|a, b| a.entity_type.cmp(&b.entity_type));
            entry.values.sort_by(|a, b| a.key.cmp(&b.key));
        }
        if let Some(entries) = self.entries.as_mut() {
            entries.sort_by_key(|e| format!("{:?}", e.entity));
        }
    }
}

impl Normalize for ListConfigResourcesResponse {
    fn normalize(&mut self) {
        // Kafka lists topics from a hash set, in its order.
        self.config_resources.sort_by(|a, b| {
            (a.resource_type, &a.resource_name).cmp(&(b.resource_type, &b.resource_name))
        });
    }
}

impl Normalize for DescribeUserScramCredentialsResponse {
    fn normalize(&mut self) {
        // Kafka answers the users from a hash map, in its order.
        self.results.sort_by(|a, b| a.user.cmp(&b.user));
    }
}

/// One Apache Kafka node for the whole test, stopped when dropped.
pub struct KafkaNode {
    pub dir: tempfile::TempDir,
    pub bootstrap: String,
    /// Its CONTROLLER listener.
    pub controller: String,
    /// SIGKILLed rather than stopped when dropped: the nodes of a quorum
    /// stopped one after another can each wait out a controlled shutdown
    /// that the others no longer answer, and their data is thrown away.
    killed_on_drop: bool,
    /// Stopped already ([`KafkaNode::stop`]): nothing left to do on drop.
    stopped: bool,
    /// What `scripts/kafka.sh start` was given besides the directory and
    /// port, for [`KafkaNode::start_again`].
    env: Vec<(&'static str, String)>,
}

impl KafkaNode {
    /// One node (broker and controller) with `properties` added to its
    /// server.properties.
    pub fn start_with(properties: &[(&str, &str)]) -> KafkaNode {
        let dir = tempfile::Builder::new()
            .prefix("kafka-diff-")
            .tempdir()
            .expect("create a scratch dir");
        let port = free_port_pair();
        let extra: Vec<String> = properties.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut node = KafkaNode {
            dir,
            bootstrap: format!("127.0.0.1:{port}"),
            controller: format!("127.0.0.1:{}", port + 1),
            killed_on_drop: false,
            stopped: true,
            env: vec![("KAFKA_EXTRA_PROPERTIES", extra.join("\n"))],
        };
        let out = node.run_start();
        assert!(
            out.status.success(),
            "scripts/kafka.sh start failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        node
    }

    /// `scripts/kafka.sh start` on this node's directory and port: formats
    /// the directory the first time, then starts on what is in it.
    fn run_start(&mut self) -> std::process::Output {
        let port = self
            .bootstrap
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse::<u16>().ok())
            .expect("a node's port");
        let out = Command::new(kafka_sh())
            .arg("start")
            .arg(self.dir.path())
            .arg(port.to_string())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run scripts/kafka.sh start");
        // Even a failed start may have left a process behind: drop stops it.
        self.stopped = false;
        out
    }

    /// Starts a node stopped or killed before on its data directory, with
    /// the settings it first had; waits until Kafka says it started.
    pub fn start_again(&mut self) {
        assert!(self.stopped, "Kafka in {:?} still runs", self.dir.path());
        let out = self.run_start();
        assert!(
            out.status.success(),
            "scripts/kafka.sh start (again) failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// SIGKILL, as a crash ends a node: no controlled shutdown, no clean
    /// shutdown marker; waits until the process is gone.
    pub fn kill(&mut self) {
        let pid_file = self.dir.path().join("kafka.pid");
        let pid = std::fs::read_to_string(&pid_file).expect("read kafka.pid");
        let pid = pid.trim();
        let status = Command::new("kill")
            .arg("-KILL")
            .arg(pid)
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid}: {status}");
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // The java process is not our child (kafka.sh started it), so
        // its exit shows as its /proc entry going away.
        while proc_dir.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "Kafka pid {pid} still there 30 s after SIGKILL"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::fs::remove_file(&pid_file).expect("remove kafka.pid");
        self.stopped = true;
    }

    /// `n` nodes forming one KRaft quorum (each a broker and a controller,
    /// node ids 1 to `n`), started at once since each start waits for the
    /// quorum; in node id order.
    pub fn start_cluster(n: usize) -> Vec<KafkaNode> {
        let mut ports: Vec<u16> = Vec::with_capacity(n);
        while ports.len() < n {
            let port = free_port_pair();
            if ports.iter().all(|p| p.abs_diff(port) > 1) {
                ports.push(port);
            }
        }
        // Resolved once before the starts, which would race to write it.
        let out = Command::new(kafka_sh())
            .arg("classpath")
            .output()
            .expect("run scripts/kafka.sh classpath");
        assert!(
            out.status.success(),
            "scripts/kafka.sh classpath failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{}@127.0.0.1:{}", i + 1, port + 1))
            .collect::<Vec<_>>()
            .join(",");
        let starts: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                let voters = voters.clone();
                std::thread::spawn(move || {
                    let dir = tempfile::Builder::new()
                        .prefix("kafka-diff-cluster-")
                        .tempdir()
                        .expect("create a scratch dir");
                    let mut node = KafkaNode {
                        dir,
                        bootstrap: format!("127.0.0.1:{port}"),
                        controller: format!("127.0.0.1:{}", port + 1),
                        killed_on_drop: true,
                        stopped: true,
                        env: vec![
                            ("KAFKA_NODE_ID", (i + 1).to_string()),
                            ("KAFKA_VOTERS", voters),
                            ("KAFKA_CLUSTER_ID", "TarnDiffCluster0000001".to_owned()),
                        ],
                    };
                    let out = node.run_start();
                    (node, out)
                })
            })
            .collect();
        let started: Vec<_> = starts
            .into_iter()
            .map(|start| start.join().expect("a Kafka start thread"))
            .collect();
        for (node, out) in &started {
            assert!(
                out.status.success(),
                "scripts/kafka.sh start of {} failed:\n{}\n{}",
                node.bootstrap,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        started.into_iter().map(|(node, _)| node).collect()
    }

    /// SIGTERM, as an operator stops a node: a controlled shutdown (its
    /// partitions' leadership moves to other in-sync replicas), then the
    /// exit; waits for it.
    pub fn stop(&mut self) {
        let out = Command::new(kafka_sh())
            .arg("stop")
            .arg(self.dir.path())
            .output()
            .expect("run scripts/kafka.sh stop");
        assert!(
            out.status.success(),
            "scripts/kafka.sh stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.stopped = true;
    }
}

impl Drop for KafkaNode {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        if self.killed_on_drop {
            let pid = std::fs::read_to_string(self.dir.path().join("kafka.pid"));
            match pid.map(|pid| Command::new("kill").arg("-KILL").arg(pid.trim()).status()) {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => {
                    eprintln!("kill -KILL of Kafka in {:?}: {status}", self.dir.path())
                }
                Ok(Err(e)) | Err(e) => eprintln!("kill Kafka in {:?}: {e}", self.dir.path()),
            }
            return;
        }
        match Command::new(kafka_sh())
            .arg("stop")
            .arg(self.dir.path())
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "scripts/kafka.sh stop failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("run scripts/kafka.sh stop: {e}"),
        }
    }
}

pub fn kafka_sh() -> PathBuf {
    crate::workspace_root().join("scripts").join("kafka.sh")
}

/// A port whose successor is free too (Kafka's controller listener).
pub fn free_port_pair() -> u16 {
    for _ in 0..50 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a free port")
            .port();
        if std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair on 127.0.0.1");
}

/// `text` with the value of every field named in `fields` replaced by `_`.
/// Works on `{:?}` output: a value runs to the next `,` or closing bracket
/// at its own nesting depth, outside string literals.
pub fn mask(text: &str, fields: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for field in fields {
            let key = format!("{field}: ");
            let boundary = out
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if boundary && rest.starts_with(&key) {
                out.push_str(&key);
                out.push('_');
                rest = skip_value(&rest[key.len()..]);
                continue 'outer;
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

pub fn skip_value(text: &str) -> &str {
    let (mut depth, mut in_string, mut escaped) = (0i32, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return &text[i..],
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => return &text[i..],
            _ => {}
        }
    }
    ""
}

/// Requests sent by [`Diff::send_pending`], each answer read on a thread
/// of its own (Tarn's, then Kafka's).
pub struct Pending<Resp> {
    scenario: String,
    answers: [std::thread::JoinHandle<Result<Resp, String>>; 2],
}

/// Which broker a [`Diff::call_each`] request is for.
pub const TARN: usize = 0;
pub const KAFKA: usize = 1;

/// The two brokers and what was found.
pub struct Diff {
    pub tarn: Client,
    pub kafka: Client,
    pub compared: Vec<String>,
    pub differences: Vec<String>,
    /// Scenarios whose answers differ on purpose, each with the reason.
    pub known: &'static [(&'static str, &'static str)],
    /// Fields masked besides [`MASKED`] in this test's answers.
    pub masked: &'static [&'static str],
}

impl Diff {
    /// Creates `name` on both brokers (comparing the answers) and waits
    /// until each serves it: Kafka answers CreateTopics once the controller
    /// committed the topic, a moment before its broker leads the partitions.
    pub fn setup_topic(&mut self, name: &str, partitions: i32) {
        self.call::<_, CreateTopicsResponse>(
            &format!("setup: topic {name}"),
            CREATE_TOPICS,
            &create(vec![topic(name, partitions, 1, &[])], false),
        );
        self.wait_served(name, partitions);
    }

    /// The id each broker gave topic `name` (Tarn's, then Kafka's).
    pub fn topic_ids(&mut self, name: &str) -> [Uuid; 2] {
        [&mut self.tarn, &mut self.kafka].map(|client| {
            let response = metadata_of(client, name);
            let id = response.topics[0].topic_id;
            assert!(!id.is_zero(), "{name} has no topic id: {response:?}");
            id
        })
    }

    /// Waits until both brokers lead every partition of `name`: their
    /// Metadata names a leader, and ListOffsets, which only the leader's
    /// replica manager answers, works (Kafka's metadata cache can name the
    /// leader a moment before its replica manager takes the partition on).
    pub fn wait_served(&mut self, name: &str, partitions: i32) {
        self.wait_named_leaders(name, partitions);
        let request = ListOffsetsRequest {
            replica_id: -1,
            topics: vec![ListOffsetsTopic {
                name: name.into(),
                partitions: (0..partitions)
                    .map(|partition_index| ListOffsetsPartition {
                        partition_index,
                        timestamp: -1,
                        ..Default::default()
                    })
                    .collect(),
            }],
            ..Default::default()
        };
        self.wait_each(
            &format!("{name} was not led within 30 s"),
            POLL,
            |client| {
                client
                    .call::<_, ListOffsetsResponse>(
                        LIST_OFFSETS.0,
                        LIST_OFFSETS.1,
                        LIST_OFFSETS.2,
                        &request,
                    )
                    .expect("ListOffsets")
            },
            |response| {
                response
                    .topics
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .all(|p| p.error_code == 0)
            },
        );
    }

    /// Waits until both brokers' Metadata names a leader for every
    /// partition of `name`.
    fn wait_named_leaders(&mut self, name: &str, partitions: i32) {
        self.wait_each(
            &format!("{name} was not served within 30 s"),
            POLL,
            |client| metadata_of(client, name),
            |response| {
                response.topics.iter().all(|t| {
                    t.error_code == 0
                        && t.partitions.len() == partitions as usize
                        && t.partitions
                            .iter()
                            .all(|p| p.error_code == 0 && p.leader_id >= 0)
                })
            },
        );
    }

    /// Waits until neither broker knows topic `name` (Kafka's broker
    /// learns of a deletion a moment after its controller answers).
    pub fn wait_gone(&mut self, name: &str) {
        self.wait_each(
            &format!("{name} was still known after 30 s"),
            POLL,
            |client| metadata_of(client, name),
            |response| response.topics.iter().all(|t| t.error_code != 0),
        );
    }

    /// Asks each broker with `ask`, every `every`, until `ready` holds of
    /// its answer; panics with `what` and the last answer after 30 s.
    fn wait_each<R: Debug>(
        &mut self,
        what: &str,
        every: std::time::Duration,
        mut ask: impl FnMut(&mut Client) -> R,
        ready: impl Fn(&R) -> bool,
    ) {
        for client in [&mut self.tarn, &mut self.kafka] {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let response = ask(client);
                if ready(&response) {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{what}: {response:?}");
                std::thread::sleep(every);
            }
        }
    }

    /// Sends `request` to both brokers at `version` and compares the
    /// answers; returns them (Tarn's first) for scenarios that go on.
    pub fn call<Req: Encode, Resp: Decode + Debug + Normalize + Clone>(
        &mut self,
        scenario: &str,
        (api_key, version, flexible_min): (i16, i16, i16),
        request: &Req,
    ) -> (Resp, Resp) {
        let tarn: Resp = self
            .tarn
            .call(api_key, version, flexible_min, request)
            .unwrap_or_else(|e| panic!("{scenario}: Tarn: {e:#}"));
        let kafka: Resp = self
            .kafka
            .call(api_key, version, flexible_min, request)
            .unwrap_or_else(|e| panic!("{scenario}: Kafka: {e:#}"));
        self.compare(scenario, &tarn, &kafka);
        (tarn, kafka)
    }

    /// Like [`Diff::call`], with a request of its own for each broker
    /// (`make(TARN)`, `make(KAFKA)`), so ids a broker handed out go back
    /// to that broker.
    pub fn call_each<Req: Encode, Resp: Decode + Debug + Normalize + Clone>(
        &mut self,
        scenario: &str,
        (api_key, version, flexible_min): (i16, i16, i16),
        make: impl Fn(usize) -> Req,
    ) -> (Resp, Resp) {
        let tarn: Resp = self
            .tarn
            .call(api_key, version, flexible_min, &make(TARN))
            .unwrap_or_else(|e| panic!("{scenario}: Tarn: {e:#}"));
        let kafka: Resp = self
            .kafka
            .call(api_key, version, flexible_min, &make(KAFKA))
            .unwrap_or_else(|e| panic!("{scenario}: Kafka: {e:#}"));
        self.compare(scenario, &tarn, &kafka);
        (tarn, kafka)
    }

    /// Like [`Diff::call`], each broker asked again while it answers a
    /// retriable coordinator error (see [`until_ready`]).
    pub fn call_until_ready<Req: Encode, Resp: Decode + Debug + Normalize + Clone>(
        &mut self,
        scenario: &str,
        api: (i16, i16, i16),
        request: &Req,
        error: impl Fn(&Resp) -> i16,
    ) -> (Resp, Resp) {
        let tarn: Resp = until_ready(&mut self.tarn, api, request, &error);
        let kafka: Resp = until_ready(&mut self.kafka, api, request, &error);
        self.compare(scenario, &tarn, &kafka);
        (tarn, kafka)
    }

    /// Sends each broker its request (`make(TARN)`, `make(KAFKA)`) on a
    /// connection of its own and returns without the answers, for a
    /// request a broker answers only once something else happens (a
    /// JoinGroup once its rebalance completes, a follower's SyncGroup once
    /// the leader's arrives); [`Diff::finish`] compares them.
    pub fn send_pending<Req: Encode, Resp: Decode + Send + 'static>(
        &mut self,
        scenario: &str,
        (api_key, version, flexible_min): (i16, i16, i16),
        make: impl Fn(usize) -> Req,
    ) -> Pending<Resp> {
        let answers = [TARN, KAFKA].map(|b| {
            let bootstrap = [&self.tarn, &self.kafka][b].bootstrap().to_owned();
            let mut client = Client::connect(&bootstrap)
                .unwrap_or_else(|e| panic!("{scenario}: connect to {bootstrap}: {e:#}"));
            client
                .send_only(
                    api_key,
                    tarn_protocol::codec::Version::new(version, flexible_min),
                    &make(b),
                )
                .unwrap_or_else(|e| panic!("{scenario}: send to {bootstrap}: {e:#}"));
            std::thread::spawn(move || {
                client
                    .receive(api_key, version, flexible_min)
                    .map_err(|e| format!("{e:#}"))
            })
        });
        Pending {
            scenario: scenario.to_owned(),
            answers,
        }
    }

    /// Waits for the answers of [`Diff::send_pending`] and compares them.
    pub fn finish<Resp: Debug + Normalize + Clone>(
        &mut self,
        pending: Pending<Resp>,
    ) -> (Resp, Resp) {
        let scenario = pending.scenario;
        let [tarn, kafka] = pending.answers.map(|answer| {
            answer
                .join()
                .unwrap_or_else(|_| panic!("{scenario}: the reading thread panicked"))
                .unwrap_or_else(|e| panic!("{scenario}: {e}"))
        });
        self.compare(&scenario, &tarn, &kafka);
        (tarn, kafka)
    }

    /// Waits until both brokers describe `group` in `state` (a request on
    /// another connection may still be on its way when its sender returns).
    pub fn wait_group_state(&mut self, group: &str, state: &str) {
        let request = DescribeGroupsRequest {
            groups: vec![group.into()],
            include_authorized_operations: false,
        };
        self.wait_each(
            &format!("{group} not {state} within 30 s"),
            std::time::Duration::from_millis(20),
            |client| {
                client
                    .call::<_, DescribeGroupsResponse>(
                        DESCRIBE_GROUPS.0,
                        DESCRIBE_GROUPS.1,
                        DESCRIBE_GROUPS.2,
                        &request,
                    )
                    .expect("DescribeGroups")
            },
            |response| response.groups.iter().all(|g| g.group_state == state),
        );
    }

    pub fn compare<T: Debug + Normalize + Clone>(&mut self, scenario: &str, tarn: &T, kafka: &T) {
        let (mut tarn, mut kafka) = (tarn.clone(), kafka.clone());
        tarn.normalize();
        kafka.normalize();
        let fields: Vec<&str> = MASKED
            .iter()
            .map(|(f, _)| *f)
            .chain(self.masked.iter().copied())
            .collect();
        let (t, k) = (
            mask(&format!("{tarn:?}"), &fields),
            mask(&format!("{kafka:?}"), &fields),
        );
        self.compared.push(scenario.to_owned());
        if t != k {
            let known = self.known.iter().find(|(s, _)| *s == scenario);
            let line = format!(
                "{scenario}{}\n    tarn:  {t}\n    kafka: {k}",
                known.map_or(String::new(), |(_, why)| format!(" (known: {why})"))
            );
            if known.is_none() {
                self.differences.push(line);
            } else {
                eprintln!("{line}");
            }
        }
    }
}

pub const CREATE_TOPICS: (i16, i16, i16) = (19, 7, 5);
pub const METADATA: (i16, i16, i16) = (3, 12, 9);
pub const PRODUCE: (i16, i16, i16) = (0, 9, 9);
pub const PRODUCE_V12: (i16, i16, i16) = (0, 12, 9);
pub const PRODUCE_V13: (i16, i16, i16) = (0, 13, 9);
pub const FETCH: (i16, i16, i16) = (1, 12, 12);
pub const FETCH_V18: (i16, i16, i16) = (1, 18, 12);
pub const LIST_OFFSETS: (i16, i16, i16) = (2, 7, 6);
pub const DELETE_RECORDS: (i16, i16, i16) = (21, 2, 2);
pub const CREATE_PARTITIONS: (i16, i16, i16) = (37, 3, 2);
pub const INIT_PRODUCER_ID: (i16, i16, i16) = (22, 4, 2);
pub const JOIN_GROUP: (i16, i16, i16) = (11, 9, 6);
pub const SYNC_GROUP: (i16, i16, i16) = (14, 5, 4);
pub const HEARTBEAT: (i16, i16, i16) = (12, 4, 4);
pub const OFFSET_COMMIT: (i16, i16, i16) = (8, 8, 8);
pub const OFFSET_FETCH: (i16, i16, i16) = (9, 8, 6);
pub const FIND_COORDINATOR: (i16, i16, i16) = (10, 3, 3);
pub const DESCRIBE_CONFIGS: (i16, i16, i16) = (32, 4, 4);
pub const DESCRIBE_GROUPS: (i16, i16, i16) = (15, 5, 5);
pub const ELECT_LEADERS: (i16, i16, i16) = (43, 2, 2);
pub const OFFSET_FOR_LEADER_EPOCH: (i16, i16, i16) = (23, 4, 4);
pub const DESCRIBE_PRODUCERS: (i16, i16, i16) = (61, 0, 0);
pub const DESCRIBE_CLIENT_QUOTAS: (i16, i16, i16) = (48, 1, 1);
pub const ALTER_CLIENT_QUOTAS: (i16, i16, i16) = (49, 1, 1);
pub const DESCRIBE_USER_SCRAM_CREDENTIALS: (i16, i16, i16) = (50, 0, 0);
pub const LIST_CONFIG_RESOURCES: (i16, i16, i16) = (74, 1, 0);
pub const DESCRIBE_ACLS: (i16, i16, i16) = (29, 3, 2);
pub const CREATE_ACLS: (i16, i16, i16) = (30, 3, 2);
pub const DELETE_ACLS: (i16, i16, i16) = (31, 3, 2);
pub const DELETE_TOPICS: (i16, i16, i16) = (20, 6, 4);
pub const DESCRIBE_LOG_DIRS: (i16, i16, i16) = (35, 4, 2);
pub const DESCRIBE_TOPIC_PARTITIONS: (i16, i16, i16) = (75, 0, 0);
pub const LIST_GROUPS: (i16, i16, i16) = (16, 5, 3);
pub const LEAVE_GROUP: (i16, i16, i16) = (13, 5, 4);
pub const DELETE_GROUPS: (i16, i16, i16) = (42, 2, 2);
pub const OFFSET_DELETE: (i16, i16, i16) = (47, 0, i16::MAX);
pub const ALTER_CONFIGS: (i16, i16, i16) = (33, 2, 2);
pub const INCREMENTAL_ALTER_CONFIGS: (i16, i16, i16) = (44, 1, 1);
pub const DESCRIBE_CLUSTER: (i16, i16, i16) = (60, 1, 0);
pub const UPDATE_FEATURES: (i16, i16, i16) = (57, 2, 0);
pub const LIST_TRANSACTIONS: (i16, i16, i16) = (66, 2, 0);
/// Retriable coordinator errors: COORDINATOR_LOAD_IN_PROGRESS (14),
/// COORDINATOR_NOT_AVAILABLE (15), NOT_COORDINATOR (16).
pub const COORDINATOR_NOT_READY: [i16; 3] = [14, 15, 16];

/// Sends `request` until the answer's error is not a retriable coordinator
/// error, as clients do while a coordinator loads (Kafka creates
/// `__consumer_offsets` on the first FindCoordinator).
pub fn until_ready<Req: Encode, Resp: Decode>(
    client: &mut Client,
    (api_key, version, flexible_min): (i16, i16, i16),
    request: &Req,
    error: impl Fn(&Resp) -> i16,
) -> Resp {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let response: Resp = client
            .call(api_key, version, flexible_min, request)
            .expect("call a coordinator");
        let code = error(&response);
        if !COORDINATOR_NOT_READY.contains(&code) {
            return response;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "coordinator not ready after 60 s (error {code})"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

impl Diff {
    /// FindCoordinator on both brokers until each has a coordinator for
    /// `key` (0: group, 1: transaction), then compares the answers.
    pub fn find_coordinator(&mut self, key: &str, key_type: i8) {
        let request = FindCoordinatorRequest {
            key: key.into(),
            key_type,
            ..Default::default()
        };
        self.call_until_ready(
            &format!("FindCoordinator: {key}"),
            FIND_COORDINATOR,
            &request,
            |r: &FindCoordinatorResponse| r.error_code,
        );
        // Kafka answers FindCoordinator before its coordinator has loaded
        // the group's partition: wait until a group request is served.
        if key_type == 0 {
            let probe = HeartbeatRequest {
                group_id: key.into(),
                generation_id: -1,
                member_id: "probe".into(),
                group_instance_id: None,
            };
            for client in [&mut self.tarn, &mut self.kafka] {
                until_ready(client, HEARTBEAT, &probe, |r: &HeartbeatResponse| {
                    r.error_code
                });
            }
        }
    }
}

pub fn topic(
    name: &str,
    partitions: i32,
    replication: i16,
    configs: &[(&str, &str)],
) -> CreatableTopic {
    CreatableTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: replication,
        configs: configs
            .iter()
            .map(|(k, v)| CreatableTopicConfig {
                name: (*k).into(),
                value: Some((*v).into()),
            })
            .collect(),
        ..Default::default()
    }
}

pub fn create(topics: Vec<CreatableTopic>, validate_only: bool) -> CreateTopicsRequest {
    CreateTopicsRequest {
        topics,
        timeout_ms: 30_000,
        validate_only,
    }
}

/// `client`'s broker's Metadata for topic `name` (no auto-creation).
/// How often a wait asks both brokers again.
const POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// A DescribeTopicPartitions request for `names`, at most `limit`
/// partitions, from `cursor` (topic, partition) when given.
pub fn describe_partitions(
    names: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsRequest {
    DescribeTopicPartitionsRequest {
        topics: names
            .iter()
            .map(|n| TopicRequest {
                name: (*n).to_owned(),
            })
            .collect(),
        response_partition_limit: limit,
        cursor: NullableCursor(cursor.map(|(topic_name, partition_index)| Cursor {
            topic_name: topic_name.to_owned(),
            partition_index,
        })),
    }
}

pub fn metadata_of(client: &mut Client, name: &str) -> MetadataResponse {
    client
        .call(
            METADATA.0,
            METADATA.1,
            METADATA.2,
            &metadata_request(&[name], false),
        )
        .expect("metadata")
}

pub fn metadata_request(names: &[&str], auto_create: bool) -> MetadataRequest {
    MetadataRequest {
        topics: Some(
            names
                .iter()
                .map(|n| MetadataRequestTopic {
                    name: Some((*n).into()),
                    ..Default::default()
                })
                .collect(),
        ),
        allow_auto_topic_creation: auto_create,
        ..Default::default()
    }
}

/// A batch of `records` records keyed `k0`, `k1`, ..., timestamps 10 ms
/// apart from `first_timestamp`.
pub fn batch(records: usize, first_timestamp: i64) -> Bytes {
    let mut builder = RecordBatchBuilder::new();
    for i in 0..records {
        builder = builder.record(
            first_timestamp + i as i64 * 10,
            Some(format!("k{i}").as_bytes()),
            Some(b"value"),
        );
    }
    Bytes::from(builder.build())
}

pub fn produce_request(topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 30_000,
        topic_data: vec![TopicProduceData {
            name: topic.into(),
            topic_id: Default::default(),
            partition_data: vec![PartitionProduceData {
                index: partition,
                records: Some(records),
            }],
        }],
    }
}

pub fn delete_records_request(topic: &str, partition: i32, offset: i64) -> DeleteRecordsRequest {
    DeleteRecordsRequest {
        topics: vec![DeleteRecordsTopic {
            name: topic.into(),
            partitions: vec![DeleteRecordsPartition {
                partition_index: partition,
                offset,
            }],
        }],
        timeout_ms: 30_000,
    }
}

pub fn offset_for_leader_epoch(
    topic: &str,
    partition: i32,
    leader_epoch: i32,
) -> OffsetForLeaderEpochRequest {
    OffsetForLeaderEpochRequest {
        replica_id: -1,
        topics: vec![OffsetForLeaderTopic {
            topic: topic.into(),
            partitions: vec![OffsetForLeaderPartition {
                partition,
                current_leader_epoch: -1,
                leader_epoch,
            }],
        }],
    }
}

pub fn describe_producers(topic: &str, partition: i32) -> DescribeProducersRequest {
    DescribeProducersRequest {
        topics: vec![DescribeProducersTopicRequest {
            name: topic.into(),
            partition_indexes: vec![partition],
        }],
    }
}

/// ElectLeaders of `partitions` of `topic`: `election_type` 0 preferred,
/// 1 unclean.
pub fn elect_leaders(election_type: i8, topic: &str, partitions: Vec<i32>) -> ElectLeadersRequest {
    ElectLeadersRequest {
        election_type,
        topic_partitions: Some(vec![ElectLeadersTopicPartitions {
            topic: topic.into(),
            partitions,
        }]),
        timeout_ms: 30_000,
    }
}

pub fn list_offsets_request(topic: &str, partition: i32, timestamp: i64) -> ListOffsetsRequest {
    ListOffsetsRequest {
        replica_id: -1,
        topics: vec![ListOffsetsTopic {
            name: topic.into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: partition,
                timestamp,
                ..Default::default()
            }],
        }],
        ..Default::default()
    }
}

pub fn fetch_request(
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    isolation: i8,
) -> FetchRequest {
    FetchRequest {
        max_wait_ms: 0,
        min_bytes: 0,
        max_bytes,
        isolation_level: isolation,
        topics: vec![FetchTopic {
            topic: topic.into(),
            partitions: vec![FetchPartition {
                partition,
                fetch_offset: offset,
                partition_max_bytes: max_bytes,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// DescribeConfigs of one resource (2: a topic, 4: a broker), of `keys`
/// or every key.
pub fn describe_configs_request(
    resource_type: i8,
    name: &str,
    keys: Option<&[&str]>,
    synonyms: bool,
    documentation: bool,
) -> DescribeConfigsRequest {
    DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type,
            resource_name: name.into(),
            configuration_keys: keys.map(|k| k.iter().map(|s| (*s).to_owned()).collect()),
        }],
        include_synonyms: synonyms,
        include_documentation: documentation,
    }
}

/// OffsetCommit of `offset` for `topic`-`partition` by a group without
/// members (generation -1, no member id), as the Admin client and
/// consumers that assign partitions themselves commit.
pub fn memberless_commit(
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> OffsetCommitRequest {
    OffsetCommitRequest {
        group_id: group.into(),
        generation_id_or_member_epoch: -1,
        member_id: String::new(),
        topics: vec![OffsetCommitRequestTopic {
            name: topic.into(),
            partitions: vec![OffsetCommitRequestPartition {
                partition_index: partition,
                committed_offset: offset,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_replaces_only_whole_field_values() {
        let text = r#"R { topic_id: Uuid([1, 2]), name: "a, b", error_message: Some("x, \"y\""), my_topic_id: 3, n: 1 }"#;
        assert_eq!(
            mask(text, &["topic_id", "error_message"]),
            r#"R { topic_id: _, name: "a, b", error_message: _, my_topic_id: 3, n: 1 }"#
        );
    }
}
