//! Kafka's configuration files start Tarn: a Kafka 4 `server.properties`
//! (paths and ports adjusted) serves the listener it names, bad keys and
//! listeners stop start-up naming them, and `tarn storage format` ties the
//! data directory to the cluster id that Metadata then reports.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tarn_cli::client::Client;
use tarn_e2e::cluster::free_port;
use tarn_e2e::{parse_ready_line, run_with_timeout, tarn_bin, TEST_TIMEOUT};
use tarn_protocol::messages::metadata::*;
use tarn_protocol::Uuid;

/// Kafka 4's shipped `config/server.properties` (KRaft, one node that is
/// broker and controller), with `{port}`, `{controller}` and `{dir}` to
/// fill in.
const KAFKA_SERVER_PROPERTIES: &str = "\
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:{controller}

############################# Socket Server Settings #############################
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs={dir}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
";

struct Node {
    scratch: tempfile::TempDir,
    port: u16,
}

impl Node {
    fn new() -> Node {
        Node {
            scratch: tempfile::tempdir().expect("create a scratch dir"),
            port: free_port(),
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.scratch.path().join("kraft-combined-logs")
    }

    /// Writes Kafka's server.properties, with `extra` lines appended.
    fn server_properties(&self, extra: &str) -> PathBuf {
        let text = KAFKA_SERVER_PROPERTIES
            .replace("{port}", &self.port.to_string())
            .replace("{controller}", &free_port().to_string())
            .replace("{dir}", &self.data_dir().display().to_string());
        let path = self.scratch.path().join("server.properties");
        std::fs::write(&path, format!("{text}{extra}")).expect("write server.properties");
        path
    }
}

/// A running `tarn serve`, killed when dropped.
struct Serving(Child);

impl Drop for Serving {
    fn drop(&mut self) {
        if let Err(e) = self.0.kill().and_then(|()| self.0.wait().map(drop)) {
            eprintln!("stop tarn serve: {e}");
        }
    }
}

fn serve(config: &Path) -> (Serving, String) {
    let mut child = Command::new(tarn_bin())
        .args(["serve", "--http-listen", "off", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tarn serve");
    let stdout = child.stdout.take().expect("piped stdout");
    let serving = Serving(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        tx.send(read.map(|_| line))
            .expect("hand over the ready line");
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a ready line within 30 s")
        .expect("read the ready line");
    let (addr, _dir) = parse_ready_line(&line).unwrap_or_else(|| panic!("ready line {line:?}"));
    (serving, addr)
}

/// Runs `tarn serve` expecting it to refuse; returns its stderr.
fn refused(args: &[&str], config: Option<&Path>) -> String {
    let mut command = Command::new(tarn_bin());
    command
        .arg("serve")
        .args(["--http-listen", "off"])
        .args(args);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let output = command.output().expect("run tarn serve");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "tarn serve {args:?} started: {stderr}"
    );
    stderr
}

fn metadata(port: u16) -> MetadataResponse {
    let mut client = Client::connect(&format!("127.0.0.1:{port}")).expect("connect");
    client
        .call(3, 12, 9, &MetadataRequest::default())
        .expect("Metadata")
}

fn tarn(args: &[&str]) -> std::process::Output {
    Command::new(tarn_bin())
        .args(args)
        .output()
        .expect("run tarn")
}

/// A new cluster (or directory) id from `tarn storage random-uuid`.
fn random_uuid() -> String {
    let out = tarn(&["storage", "random-uuid"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `tarn storage format -t CLUSTER_ID FLAGS... CONFIG_FLAG CONFIG`, which
/// must succeed.
fn format_node(cluster_id: &str, flags: &[&str], config_flag: &str, config: &Path) {
    let mut args = vec!["storage", "format", "-t", cluster_id];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[config_flag, config.to_str().unwrap()]);
    let format = tarn(&args);
    assert!(format.status.success(), "{format:?}");
}

/// Metadata from the broker on `port` once it lists `count` brokers,
/// asked again until `deadline`.
fn wait_for_brokers(port: u16, count: usize, deadline: std::time::Instant) -> MetadataResponse {
    loop {
        let answer = metadata(port);
        if answer.brokers.len() == count {
            return answer;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} brokers on port {port} in time: {:?}",
            answer.brokers
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Creates `topic` with `partitions` through the broker on `create_on`
/// (`tarn topics create`), then checks every broker of `ports` shows it
/// with that many partitions.
fn create_topic_seen_by(create_on: &str, ports: &[u16], topic: &str, partitions: usize) {
    let created = tarn(&[
        "topics",
        "create",
        "--bootstrap-server",
        create_on,
        "--topic",
        topic,
        "--partitions",
        &partitions.to_string(),
    ]);
    assert!(created.status.success(), "{created:?}");
    for port in ports {
        let topics = metadata(*port).topics;
        let found = topics
            .iter()
            .find(|t| t.name.as_deref() == Some(topic))
            .unwrap_or_else(|| panic!("topic {topic} on port {port}: {topics:?}"));
        assert_eq!(found.partitions.len(), partitions, "{found:?}");
    }
}

#[test]
fn kafkas_server_properties_starts_tarn_on_the_listener_it_names() {
    run_with_timeout(TEST_TIMEOUT, || {
        let node = Node::new();
        let config = node.server_properties("");
        let (_serving, addr) = serve(&config);
        // `listeners=PLAINTEXT://:port` binds every interface.
        assert_eq!(addr, format!("0.0.0.0:{}", node.port));
        // A quorum of one voter, as Kafka's: the broker is listed once it
        // registered and the controller unfenced it.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let metadata = wait_for_brokers(node.port, 1, deadline);
        let broker = &metadata.brokers[0];
        // Advertised as advertised.listeners says, not as bound.
        assert_eq!(
            (broker.node_id, broker.host.as_str(), broker.port),
            (1, "localhost", i32::from(node.port))
        );
        // Written once the node adopts the cluster id its quorum chose,
        // which its registration does not wait for.
        while !node.data_dir().join("meta.properties").exists() {
            assert!(std::time::Instant::now() < deadline, "no meta.properties");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

#[test]
fn an_unknown_key_in_server_properties_stops_start_up_naming_it() {
    let node = Node::new();
    let config = node.server_properties("zookeeper.connect=localhost:2181\n");
    let stderr = refused(&[], Some(&config));
    assert!(
        stderr.contains("unknown config key 'zookeeper.connect'"),
        "{stderr}"
    );
}

#[test]
fn bad_listeners_stop_start_up_naming_the_key() {
    let node = Node::new();
    let config = node.server_properties("");
    for (set, expected) in [
        (
            "listeners=PLAINTEXT:/127.0.0.1:9092",
            "listeners: unable to parse",
        ),
        (
            "listeners=INTERNAL://127.0.0.1:9092",
            "no security protocol defined for listener INTERNAL",
        ),
        (
            "inter.broker.listener.name=NOPE",
            "inter.broker.listener.name",
        ),
        ("log.dirs=/tmp/a,/tmp/b", "JBOD"),
    ] {
        let stderr = refused(&["--set", set], Some(&config));
        assert!(stderr.contains(expected), "--set {set}: {stderr}");
    }
    // SSL and SASL parse as Kafka's, but only PLAINTEXT is served.
    let stderr = refused(
        &[
            "--set",
            "listeners=SSL://127.0.0.1:9093",
            "--set",
            "security.inter.broker.protocol=SSL",
        ],
        None,
    );
    assert!(stderr.contains("Tarn serves only PLAINTEXT"), "{stderr}");
    // A flag and its key that disagree.
    let stderr = refused(&["--listen", "127.0.0.1:1"], Some(&config));
    assert!(
        stderr.contains("--listen 127.0.0.1:1 and listeners="),
        "{stderr}"
    );
}

/// The three-node start itself is tests/tests/cluster.rs's; a node that is
/// not among the voters it names fails validation.
#[test]
fn a_node_outside_its_voters_fails_validation() {
    let stderr = refused(
        &[
            "--set",
            "node.id=4",
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
            "--set",
            "controller.listener.names=CONTROLLER",
            "--set",
            "controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:29093",
        ],
        None,
    );
    assert!(stderr.contains("controller.quorum.voters"), "{stderr}");
}

#[test]
fn random_uuid_prints_a_kafka_style_base64_uuid() {
    let first = tarn(&["storage", "random-uuid"]);
    assert!(first.status.success());
    let first = String::from_utf8(first.stdout).unwrap();
    let second = String::from_utf8(tarn(&["storage", "random-uuid"]).stdout).unwrap();
    for id in [&first, &second] {
        let id = id.strip_suffix('\n').expect("one line");
        assert_eq!(id.len(), 22, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{id}"
        );
        assert!(Uuid::from_base64(id).is_some(), "{id}");
    }
    assert_ne!(first, second);
}

#[test]
fn storage_format_gives_serve_its_cluster_id() {
    run_with_timeout(TEST_TIMEOUT, || {
        let node = Node::new();
        let config = node.server_properties("");
        let config_arg = config.to_str().unwrap();
        let id = random_uuid();
        let id = id.as_str();
        // Kafka 4's server.properties names a dynamic quorum
        // (controller.quorum.bootstrap.servers): as kafka-storage.sh does,
        // format asks how it starts, and Kafka's quickstart says
        // --standalone.
        let unsaid = tarn(&["storage", "format", "-t", id, "--config", config_arg]);
        assert!(!unsaid.status.success(), "{unsaid:?}");
        assert!(
            String::from_utf8_lossy(&unsaid.stderr).contains("--standalone"),
            "{unsaid:?}"
        );
        let format = tarn(&[
            "storage",
            "format",
            "--standalone",
            "--cluster-id",
            id,
            "--config",
            config_arg,
        ]);
        assert!(format.status.success(), "{format:?}");
        let meta = std::fs::read_to_string(node.data_dir().join("meta.properties")).unwrap();
        for line in ["version=1", "node.id=1", &format!("cluster.id={id}")] {
            assert!(meta.lines().any(|l| l == line), "{line} in {meta}");
        }
        let directory_id = meta
            .lines()
            .find_map(|l| l.strip_prefix("directory.id="))
            .unwrap_or_else(|| panic!("no directory.id in {meta}"));
        // The one initial voter: this node, its controller listener as
        // advertised, and its directory id.
        let voters = std::fs::read_to_string(
            node.data_dir()
                .join("__cluster_metadata-0")
                .join("bootstrap-voters"),
        )
        .unwrap();
        let (voter, directory) = voters.trim().rsplit_once(':').unwrap();
        assert!(voter.starts_with("1@localhost:"), "{voters}");
        assert_eq!(directory, directory_id, "{voters}");
        let info = tarn(&["storage", "info", "--config", config_arg]);
        assert!(
            String::from_utf8_lossy(&info.stdout).contains(voters.trim()),
            "{info:?}"
        );

        // Formatted already: refused, unless --ignore-formatted; another
        // cluster id is refused either way.
        let again = tarn(&["storage", "format", "-t", id, "--config", config_arg]);
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("already formatted"));
        let ignored = tarn(&["storage", "format", "-t", id, "-g", "--config", config_arg]);
        assert!(ignored.status.success(), "{ignored:?}");
        let other = random_uuid();
        let other = tarn(&[
            "storage", "format", "-t", &other, "-g", "--config", config_arg,
        ]);
        assert!(!other.status.success());
        assert!(String::from_utf8_lossy(&other.stderr).contains("is formatted for cluster"));
        let bad = tarn(&[
            "storage",
            "format",
            "-t",
            "not-a-uuid",
            "--config",
            config_arg,
        ]);
        assert!(String::from_utf8_lossy(&bad.stderr).contains("valid UUID"));

        let info = tarn(&["storage", "info", "--config", config_arg]);
        assert!(info.status.success(), "{info:?}");
        assert!(String::from_utf8_lossy(&info.stdout).contains(&format!("cluster.id={id}")));

        let (_serving, _) = serve(&config);
        assert_eq!(metadata(node.port).cluster_id.as_deref(), Some(id));
    });
}

#[test]
fn serve_refuses_a_directory_formatted_for_another_node() {
    let node = Node::new();
    let config = node.server_properties("");
    let config_arg = config.to_str().unwrap();
    let id = random_uuid();
    let format = tarn(&[
        "storage",
        "format",
        "-t",
        &id,
        "--standalone",
        "--config",
        config_arg,
        "--set",
        "node.id=2",
    ]);
    assert!(format.status.success(), "{format:?}");
    let stderr = refused(&[], Some(&config));
    assert!(stderr.contains("belongs to node.id 2, not 1"), "{stderr}");
}

/// Writes nodeN.properties in `scratch` for nodes 1, 2, ... of a dynamic
/// quorum: broker and controller each, on the (Kafka, controller) ports
/// given, all with every controller listener as
/// `controller.quorum.bootstrap.servers`.
fn dynamic_quorum_properties(scratch: &Path, ports: &[(u16, u16)]) -> Vec<PathBuf> {
    let bootstrap = ports
        .iter()
        .map(|(_, c)| format!("127.0.0.1:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    ports
        .iter()
        .enumerate()
        .map(|(i, (kafka, controller))| {
            let id = i + 1;
            let path = scratch.join(format!("node{id}.properties"));
            let text = format!(
                "process.roles=broker,controller\nnode.id={id}\n\
                 controller.quorum.bootstrap.servers={bootstrap}\n\
                 listeners=PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{controller}\n\
                 controller.listener.names=CONTROLLER\n\
                 log.dirs={}\n",
                scratch.join(format!("data{id}")).display()
            );
            std::fs::write(&path, text).expect("write properties");
            path
        })
        .collect()
}

/// Three controllers of a dynamic quorum (KIP-853), each formatted with
/// the same `--initial-controllers` as kafka-storage.sh takes them, and
/// started with only `controller.quorum.bootstrap.servers`: they form one
/// cluster of three brokers. A controller not formatted so, or formatted
/// without itself among the voters, is refused with what to do.
#[test]
fn controllers_formatted_with_initial_controllers_form_a_dynamic_quorum() {
    run_with_timeout(TEST_TIMEOUT, || {
        let scratch = tempfile::tempdir().expect("create a scratch dir");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}:{}", i + 1, random_uuid()))
            .collect::<Vec<_>>()
            .join(",");
        let configs = dynamic_quorum_properties(scratch.path(), &ports);
        let config_arg = |i: usize| configs[i].to_str().unwrap().to_owned();

        // Not formatted: serve says how to start the quorum.
        let stderr = refused(&[], Some(&configs[0]));
        assert!(stderr.contains("--initial-controllers"), "{stderr}");
        // Voters that leave this node out: Tarn cannot add it later.
        let without = initial.split(',').skip(1).collect::<Vec<_>>().join(",");
        let cluster_id = random_uuid();
        let refused_format = tarn(&[
            "storage",
            "format",
            "-t",
            &cluster_id,
            "-I",
            &without,
            "--config",
            &config_arg(0),
        ]);
        assert!(!refused_format.status.success(), "{refused_format:?}");
        assert!(
            String::from_utf8_lossy(&refused_format.stderr).contains("does not name node 1"),
            "{refused_format:?}"
        );

        for config in &configs {
            format_node(&cluster_id, &["-I", &initial], "--config", config);
        }
        // Every node needs a majority before it is ready: start all three,
        // then read their ready lines.
        let mut children: Vec<Serving> = configs
            .iter()
            .map(|config| {
                Serving(
                    Command::new(tarn_bin())
                        .args(["serve", "--http-listen", "off", "--config"])
                        .arg(config)
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::inherit())
                        .spawn()
                        .expect("spawn tarn serve"),
                )
            })
            .collect();
        for child in &mut children {
            let stdout = child.0.stdout.take().expect("piped stdout");
            let mut line = String::new();
            BufReader::new(stdout)
                .read_line(&mut line)
                .expect("read the ready line");
            assert!(parse_ready_line(&line).is_some(), "ready line {line:?}");
        }
        // One cluster of three brokers, with the id it was formatted with.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let answer = wait_for_brokers(ports[0].0, 3, deadline);
        assert_eq!(answer.cluster_id.as_deref(), Some(cluster_id.as_str()));
        drop(children);
    });
}

/// Kafka's quickstart for a dynamic quorum that grows: the first
/// controller formatted `--standalone` while its bootstrap servers also
/// name a controller that is not running (and not a voter), and a
/// broker-only node formatted with just the cluster id that finds the
/// quorum through those bootstrap servers. The one voter leads, both
/// brokers register, and a topic created on the broker-only node (which
/// forwards it to the controller) is seen by both.
#[test]
fn a_standalone_controller_leads_and_brokers_join_it_through_bootstrap_servers() {
    run_with_timeout(TEST_TIMEOUT, || {
        let scratch = tempfile::tempdir().expect("create a scratch dir");
        let (kafka1, controller1, kafka2) = (free_port(), free_port(), free_port());
        // Nothing ever listens on the second bootstrap server.
        let bootstrap = format!("127.0.0.1:{controller1},127.0.0.1:{}", free_port());
        let write = |name: &str, text: String| {
            let path = scratch.path().join(name);
            std::fs::write(&path, text).expect("write properties");
            path
        };
        let controller = write(
            "node1.properties",
            format!(
                "process.roles=broker,controller\nnode.id=1\n\
                 controller.quorum.bootstrap.servers={bootstrap}\n\
                 listeners=PLAINTEXT://127.0.0.1:{kafka1},CONTROLLER://127.0.0.1:{controller1}\n\
                 controller.listener.names=CONTROLLER\nlog.dirs={}\n",
                scratch.path().join("data1").display()
            ),
        );
        let broker = write(
            "node2.properties",
            format!(
                "process.roles=broker\nnode.id=2\n\
                 controller.quorum.bootstrap.servers={bootstrap}\n\
                 listeners=PLAINTEXT://127.0.0.1:{kafka2}\n\
                 controller.listener.names=CONTROLLER\nlog.dirs={}\n",
                scratch.path().join("data2").display()
            ),
        );
        let cluster_id = random_uuid();
        format_node(&cluster_id, &["--standalone"], "--config", &controller);
        format_node(&cluster_id, &[], "--config", &broker);
        let (_controller, _) = serve(&controller);
        let (_broker, _) = serve(&broker);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for port in [kafka1, kafka2] {
            let answer = wait_for_brokers(port, 2, deadline);
            assert_eq!(answer.cluster_id.as_deref(), Some(cluster_id.as_str()));
            assert_eq!(answer.controller_id, 1, "the only voter is the controller");
        }
        create_topic_seen_by(
            &format!("127.0.0.1:{kafka2}"),
            &[kafka1, kafka2],
            "grown",
            2,
        );
    });
}

/// AddRaftVoter through the node on `port`, waiting 30 s for the voter to
/// catch up.
fn add_raft_voter(
    port: u16,
    cluster_id: Option<&str>,
    voter_id: i32,
    controller_port: u16,
) -> (i16, String) {
    add_raft_voter_within(port, cluster_id, voter_id, controller_port, 30_000)
}

fn add_raft_voter_within(
    port: u16,
    cluster_id: Option<&str>,
    voter_id: i32,
    controller_port: u16,
    timeout_ms: i32,
) -> (i16, String) {
    use tarn_protocol::messages::raft_voters::*;
    let mut client = Client::connect(&format!("127.0.0.1:{port}")).expect("connect");
    client
        .set_read_timeout(Duration::from_millis(timeout_ms as u64) + Duration::from_secs(30))
        .expect("set the read timeout");
    let response: AddRaftVoterResponse = client
        .call(
            80,
            1,
            0,
            &AddRaftVoterRequest {
                cluster_id: cluster_id.map(str::to_owned),
                timeout_ms,
                voter_id,
                voter_directory_id: Uuid::default(),
                listeners: vec![AddRaftVoterListener {
                    name: "CONTROLLER".into(),
                    host: "127.0.0.1".into(),
                    port: controller_port,
                }],
                ack_when_committed: true,
            },
        )
        .expect("AddRaftVoter");
    (
        response.error_code,
        response.error_message.unwrap_or_default(),
    )
}

fn remove_raft_voter(port: u16, cluster_id: &str, voter_id: i32) -> (i16, String) {
    use tarn_protocol::messages::raft_voters::*;
    let mut client = Client::connect(&format!("127.0.0.1:{port}")).expect("connect");
    let response: RemoveRaftVoterResponse = client
        .call(
            81,
            0,
            0,
            &RemoveRaftVoterRequest {
                cluster_id: Some(cluster_id.to_owned()),
                voter_id,
                voter_directory_id: Uuid::default(),
            },
        )
        .expect("RemoveRaftVoter");
    (
        response.error_code,
        response.error_message.unwrap_or_default(),
    )
}

/// The voters DescribeQuorum names, asked of the broker on `port`.
fn quorum_voters(port: u16) -> Vec<i32> {
    use tarn_protocol::messages::describe_quorum::*;
    let mut client = Client::connect(&format!("127.0.0.1:{port}")).expect("connect");
    let response: DescribeQuorumResponse = client
        .call(
            55,
            2,
            0,
            &DescribeQuorumRequest {
                topics: vec![DescribeQuorumRequestTopic {
                    topic_name: "__cluster_metadata".into(),
                    partitions: vec![DescribeQuorumRequestPartition { partition_index: 0 }],
                }],
            },
        )
        .expect("DescribeQuorum");
    let partition = &response.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{response:?}");
    partition
        .current_voters
        .iter()
        .map(|v| v.replica_id)
        .collect()
}

/// Kafka 4's way to grow a dynamic quorum (KIP-853): the first controller
/// formatted `--standalone`, two more formatted `--no-initial-controllers`
/// and started (they wait), then each added with AddRaftVoter (what
/// `kafka-metadata-quorum.sh add-controller` sends). The three are then
/// the quorum: it commits after the first is killed, and the dead one is
/// removed with RemoveRaftVoter. Adding a voter twice and removing one
/// that is not are refused with Kafka's codes; a single node refuses both.
#[test]
fn controllers_formatted_to_join_are_added_to_a_running_quorum() {
    run_with_timeout(TEST_TIMEOUT, || {
        let scratch = tempfile::tempdir().expect("create a scratch dir");
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let configs = dynamic_quorum_properties(scratch.path(), &ports);
        let cluster_id = random_uuid();
        format_node(&cluster_id, &["--standalone"], "--config", &configs[0]);
        for config in &configs[1..] {
            format_node(
                &cluster_id,
                &["--no-initial-controllers"],
                "--config",
                config,
            );
        }
        let mut nodes: Vec<Option<Serving>> =
            configs.iter().map(|config| Some(serve(config).0)).collect();
        let kafka = |i: usize| ports[i].0;
        assert_eq!(quorum_voters(kafka(0)), [1]);
        for id in [2, 3] {
            let (code, message) =
                add_raft_voter(kafka(0), Some(&cluster_id), id, ports[id as usize - 1].1);
            assert_eq!(code, 0, "add voter {id}: {message}");
        }
        let (code, message) = add_raft_voter(kafka(0), Some(&cluster_id), 2, ports[1].1);
        assert_eq!(code, 126, "DUPLICATE_VOTER: {message}");
        assert_eq!(quorum_voters(kafka(0)), [1, 2, 3]);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for i in 0..3 {
            let answer = wait_for_brokers(kafka(i), 3, deadline);
            assert_eq!(answer.cluster_id.as_deref(), Some(cluster_id.as_str()));
        }
        // A controller that joined restarts from its own log: no voters
        // are configured for it, the log's membership says it votes.
        drop(nodes[2].take());
        nodes[2] = Some(serve(&configs[2]).0);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        wait_for_brokers(kafka(2), 3, deadline);
        assert_eq!(quorum_voters(kafka(2)), [1, 2, 3]);

        // Without its first voter the quorum still commits.
        drop(nodes[0].take());
        let survivors = [kafka(1), kafka(2)];
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let created = tarn(&[
                "topics",
                "create",
                "--bootstrap-server",
                &format!("127.0.0.1:{}", kafka(1)),
                "--topic",
                "after-the-first",
                "--partitions",
                "2",
            ]);
            if created.status.success() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{created:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
        // The broker that answered has applied the change; the other
        // learns of it soon after, as in Kafka.
        for port in survivors {
            loop {
                let topics = metadata(port).topics;
                if topics
                    .iter()
                    .any(|t| t.name.as_deref() == Some("after-the-first"))
                {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{topics:?}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let (code, message) = remove_raft_voter(kafka(1), &cluster_id, 1);
        assert_eq!(code, 0, "remove voter 1: {message}");
        assert_eq!(quorum_voters(kafka(2)), [2, 3]);
        let (code, message) = remove_raft_voter(kafka(2), &cluster_id, 1);
        assert_eq!(code, 127, "VOTER_NOT_FOUND: {message}");
        // The dead one cannot be added back: it never catches up. Through
        // a node that is not the active controller, the answer comes once
        // the request's own timeout (longer than a forwarded request's
        // usual 10 s) has passed, not a retry's.
        let active = metadata(kafka(1)).controller_id;
        let passive = [2, 3].into_iter().find(|id| *id != active).unwrap();
        let (code, message) = add_raft_voter_within(
            kafka(passive as usize - 1),
            Some(&cluster_id),
            1,
            ports[0].1,
            12_000,
        );
        assert_eq!(code, 7, "REQUEST_TIMED_OUT: {message}");
        // Asked to remove itself, the active controller hands over first
        // and the other removes it: one answer, and the one left leads.
        let active = metadata(kafka(1)).controller_id;
        let (code, message) = remove_raft_voter(kafka(1), &cluster_id, active);
        assert_eq!(code, 0, "remove the active controller {active}: {message}");
        let rest: Vec<i32> = [2, 3].into_iter().filter(|id| *id != active).collect();
        assert_eq!(quorum_voters(kafka(rest[0] as usize - 1)), rest);
        drop(nodes);

        // A single node is no quorum whose voters change.
        let single = tarn_e2e::TarnBroker::start();
        let port: u16 = single
            .bootstrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let (code, message) = add_raft_voter(port, None, 2, free_port());
        assert_eq!(code, 35, "UNSUPPORTED_VERSION: {message}");
        single.assert_no_panic();
    });
}

/// The keys of Kafka 4's shipped `config/controller.properties` and
/// `config/broker.properties` (its isolated-mode quickstart): each
/// file's own, then [`KAFKA_SHIPPED_COMMON_PROPERTIES`]; with
/// `{controller}`, `{port}` and `{dir}` to fill in.
const KAFKA_CONTROLLER_PROPERTIES: &str = "\
process.roles=controller
node.id=1
controller.quorum.bootstrap.servers=localhost:{controller}
listeners=CONTROLLER://:{controller}
advertised.listeners=CONTROLLER://localhost:{controller}
controller.listener.names=CONTROLLER
num.recovery.threads.per.data.dir=1
";
const KAFKA_BROKER_PROPERTIES: &str = "\
process.roles=broker
node.id=2
controller.quorum.bootstrap.servers=localhost:{controller}
listeners=PLAINTEXT://localhost:{port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.recovery.threads.per.data.dir=2
";
/// The keys both files give the same values.
const KAFKA_SHIPPED_COMMON_PROPERTIES: &str = "\
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={dir}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
";

/// Kafka 4's isolated-mode quickstart as its docs give it: the shipped
/// controller and broker properties, `format -t ID --standalone -c
/// controller.properties` and `format -t ID -c broker.properties`, then
/// both started. The dedicated controller (the quorum's one voter) serves
/// the broker, which registers, is unfenced and takes a topic.
#[test]
fn kafkas_controller_and_broker_properties_start_an_isolated_pair() {
    run_with_timeout(TEST_TIMEOUT, || {
        let scratch = tempfile::tempdir().expect("create a scratch dir");
        let (port, controller) = (free_port(), free_port());
        let write = |name: &str, own: &str| {
            let path = scratch.path().join(format!("{name}.properties"));
            let text = format!("{own}{KAFKA_SHIPPED_COMMON_PROPERTIES}")
                .replace("{port}", &port.to_string())
                .replace("{controller}", &controller.to_string())
                .replace(
                    "{dir}",
                    &scratch
                        .path()
                        .join(format!("{name}-logs"))
                        .display()
                        .to_string(),
                );
            std::fs::write(&path, text).expect("write properties");
            path
        };
        let controller_config = write("controller", KAFKA_CONTROLLER_PROPERTIES);
        let broker_config = write("broker", KAFKA_BROKER_PROPERTIES);
        let cluster_id = random_uuid();
        format_node(&cluster_id, &["--standalone"], "-c", &controller_config);
        format_node(&cluster_id, &[], "-c", &broker_config);
        let (_controller, _) = serve(&controller_config);
        let (_broker, _) = serve(&broker_config);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let answer = wait_for_brokers(port, 1, deadline);
        assert_eq!(answer.brokers[0].node_id, 2, "{answer:?}");
        assert_eq!(answer.cluster_id.as_deref(), Some(cluster_id.as_str()));
        create_topic_seen_by(&format!("localhost:{port}"), &[port], "isolated", 3);
    });
}

/// Kafka 4's combined quickstart, unformatted (Tarn needs no format
/// step): the shipped server.properties makes a quorum of one voter that
/// other brokers can join, as Kafka's does. A broker started with Kafka's
/// shipped broker.properties, pointed at the same bootstrap server,
/// registers; a topic of replication factor 2 created through it has a
/// replica on each node, and both list it.
#[test]
fn kafkas_combined_quickstart_is_joined_by_a_broker() {
    run_with_timeout(TEST_TIMEOUT, || {
        let scratch = tempfile::tempdir().expect("create a scratch dir");
        let (port, controller, broker_port) = (free_port(), free_port(), free_port());
        let write = |name: &str, text: String| {
            let path = scratch.path().join(format!("{name}.properties"));
            let dir = scratch.path().join(format!("{name}-logs"));
            let text = text
                .replace("{controller}", &controller.to_string())
                .replace("{dir}", &dir.display().to_string());
            std::fs::write(&path, text).expect("write properties");
            path
        };
        let combined = write(
            "server",
            KAFKA_SERVER_PROPERTIES.replace("{port}", &port.to_string()),
        );
        let broker = write(
            "broker",
            format!("{KAFKA_BROKER_PROPERTIES}{KAFKA_SHIPPED_COMMON_PROPERTIES}")
                .replace("{port}", &broker_port.to_string()),
        );
        let (_combined, _) = serve(&combined);
        let (_broker, _) = serve(&broker);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut cluster_ids = Vec::new();
        for port in [port, broker_port] {
            let answer = wait_for_brokers(port, 2, deadline);
            assert_eq!(answer.controller_id, 1, "the only voter is the controller");
            cluster_ids.push(answer.cluster_id.expect("a cluster id"));
        }
        assert_eq!(cluster_ids[0], cluster_ids[1], "one cluster");
        let created = tarn(&[
            "topics",
            "create",
            "--bootstrap-server",
            &format!("localhost:{broker_port}"),
            "--topic",
            "joined",
            "--partitions",
            "2",
            "--replication-factor",
            "2",
        ]);
        assert!(created.status.success(), "{created:?}");
        for port in [port, broker_port] {
            let topics = metadata(port).topics;
            let joined = topics
                .iter()
                .find(|t| t.name.as_deref() == Some("joined"))
                .unwrap_or_else(|| panic!("topic joined on port {port}: {topics:?}"));
            assert_eq!(joined.partitions.len(), 2, "{joined:?}");
            for partition in &joined.partitions {
                let mut replicas = partition.replica_nodes.clone();
                replicas.sort_unstable();
                assert_eq!(replicas, [1, 2], "{joined:?}");
            }
        }
    });
}

/// A data directory that a single node wrote (Tarn before quorums of one
/// voter could be joined ran Kafka's combined quickstart so) keeps
/// running as a single node under that configuration, with its topics.
#[test]
fn a_single_nodes_data_directory_stays_a_single_node_under_the_combined_quickstart() {
    run_with_timeout(TEST_TIMEOUT, || {
        let node = Node::new();
        let single = node.scratch.path().join("single.properties");
        std::fs::write(
            &single,
            format!(
                "listeners=PLAINTEXT://127.0.0.1:{}\nlog.dirs={}\n",
                node.port,
                node.data_dir().display()
            ),
        )
        .expect("write single.properties");
        {
            let (_single, _) = serve(&single);
            create_topic_seen_by(&format!("127.0.0.1:{}", node.port), &[node.port], "kept", 2);
        }
        let (_combined, _) = serve(&node.server_properties(""));
        let answer = metadata(node.port);
        assert_eq!(answer.brokers.len(), 1, "{answer:?}");
        let kept = answer
            .topics
            .iter()
            .find(|t| t.name.as_deref() == Some("kept"))
            .unwrap_or_else(|| panic!("topic kept: {:?}", answer.topics));
        assert_eq!(kept.partitions.len(), 2, "{kept:?}");
        assert!(
            !node
                .data_dir()
                .join("__cluster_metadata-0")
                .join("quorum-state")
                .exists(),
            "no quorum was started in a single node's directory"
        );
    });
}

/// A static quorum cannot also be formatted as a dynamic one.
#[test]
fn standalone_is_refused_for_a_static_quorum() {
    let scratch = tempfile::tempdir().expect("create a scratch dir");
    let path = scratch.path().join("node.properties");
    std::fs::write(
        &path,
        format!(
            "process.roles=broker,controller\nnode.id=1\n\
             controller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093\n\
             listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n\
             controller.listener.names=CONTROLLER\nlog.dirs={}\n",
            scratch.path().join("data").display()
        ),
    )
    .expect("write properties");
    let id = random_uuid();
    let format = tarn(&[
        "storage",
        "format",
        "-t",
        &id,
        "--standalone",
        "--config",
        path.to_str().unwrap(),
    ]);
    assert!(!format.status.success(), "{format:?}");
    assert!(
        String::from_utf8_lossy(&format.stderr).contains("controller.quorum.voters is set"),
        "{format:?}"
    );
}
