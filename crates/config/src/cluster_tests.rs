//! Unit tests of `cluster`: one for each of Kafka's rules, and the parsing
//! edge cases of listeners, voters and protocol maps.

use super::*;

fn cluster(pairs: &[(&str, &str)]) -> Result<ClusterConfig, ClusterConfigError> {
    let config = BrokerConfig::with_overrides(pairs.iter().copied()).expect("valid keys");
    ClusterConfig::from_config(&config)
}

fn refused(pairs: &[(&str, &str)]) -> ClusterConfigError {
    cluster(pairs).expect_err("refused")
}

const THREE_NODES: &[(&str, &str)] = &[
    ("node.id", "1"),
    ("process.roles", "broker,controller"),
    (
        "listeners",
        "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
    ),
    ("controller.listener.names", "CONTROLLER"),
    (
        "controller.quorum.voters",
        "1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093",
    ),
];

fn with(
    base: &[(&'static str, &'static str)],
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut pairs: Vec<_> = base
        .iter()
        .filter(|(k, _)| !more.iter().any(|(m, _)| m == k))
        .copied()
        .collect();
    pairs.extend_from_slice(more);
    pairs
}

#[test]
fn defaults_are_one_node_that_is_broker_and_controller() {
    let c = cluster(&[]).unwrap();
    assert!(c.is_broker() && c.is_controller());
    assert_eq!(c.node_id, 1);
    assert_eq!(c.quorum(), Quorum::SingleNode);
    let kafka = c.kafka_listener().unwrap();
    assert_eq!(
        (kafka.name.as_str(), kafka.host.as_str(), kafka.port),
        ("PLAINTEXT", "127.0.0.1", 9092)
    );
    assert_eq!(c.advertised_listener(kafka), Some(kafka));
    assert_eq!(c.log_dir, PathBuf::from("./tarn-data"));
    assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
    assert_eq!(
        (
            c.broker_heartbeat_interval_ms,
            c.broker_session_timeout_ms,
            c.quorum_election_timeout_ms,
            c.quorum_fetch_timeout_ms
        ),
        (2000, 9000, 1000, 2000)
    );
    assert!(c.check_servable().is_ok());
}

#[test]
fn three_node_command_parses_and_is_a_quorum_of_voters() {
    let c = cluster(THREE_NODES).unwrap();
    let Quorum::Voters(voters) = c.quorum() else {
        panic!("expected voters, got {:?}", c.quorum());
    };
    assert_eq!(voters.len(), 3);
    assert_eq!(voters[&2], ("127.0.0.1".to_owned(), 29093));
    // The controller listener is no broker listener, and not advertised
    // to clients.
    assert_eq!(c.kafka_listener().unwrap().port, 19092);
    assert_eq!(c.advertised_listeners.len(), 1);
    assert_eq!(c.advertised_controller_listeners[0].port, 19093);
    // Not in the map, but KRaft maps the controller listener to PLAINTEXT.
    assert_eq!(
        c.controller_listeners().next().unwrap().security_protocol,
        SecurityProtocol::Plaintext
    );
}

/// Kafka 4's combined quickstart: a dynamic quorum whose bootstrap server
/// is this node, which other brokers can join as Kafka's can.
#[test]
fn kafkas_shipped_server_properties_bootstraps_from_itself() {
    let c = cluster(&[
        ("process.roles", "broker,controller"),
        ("node.id", "1"),
        ("controller.quorum.bootstrap.servers", "localhost:9093"),
        ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
        ("inter.broker.listener.name", "PLAINTEXT"),
        (
            "advertised.listeners",
            "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        ),
        ("controller.listener.names", "CONTROLLER"),
        (
            "listener.security.protocol.map",
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ("log.dirs", "/tmp/kraft-combined-logs"),
    ])
    .unwrap();
    assert_eq!(
        c.quorum(),
        Quorum::Bootstrap(vec![("localhost".to_owned(), 9093)])
    );
    assert!(c.bootstraps_only_itself());
    let kafka = c.kafka_listener().unwrap();
    assert_eq!(kafka.bind_address(), "0.0.0.0:9092");
    assert_eq!(c.advertised_listener(kafka).unwrap().host, "localhost");
    assert_eq!(c.log_dir, PathBuf::from("/tmp/kraft-combined-logs"));
}

/// A broker and controller that is the only voter: a quorum of one that
/// other brokers can join, as Kafka's is.
#[test]
fn a_single_voter_that_is_this_node_is_a_quorum() {
    let c = cluster(&with(
        THREE_NODES,
        &[("controller.quorum.voters", "1@127.0.0.1:19093")],
    ))
    .unwrap();
    let voters = BTreeMap::from([(1, ("127.0.0.1".to_owned(), 19093))]);
    assert_eq!(c.quorum(), Quorum::Voters(voters));
}

/// One dedicated controller for brokers elsewhere (Kafka's isolated mode
/// at its smallest): a quorum of one voter they can join.
#[test]
fn a_sole_voter_that_is_only_a_controller_is_a_quorum() {
    let c = cluster(&with(
        THREE_NODES,
        &[
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://127.0.0.1:19093"),
            ("controller.quorum.voters", "1@127.0.0.1:19093"),
        ],
    ))
    .unwrap();
    let voters = BTreeMap::from([(1, ("127.0.0.1".to_owned(), 19093))]);
    assert_eq!(c.quorum(), Quorum::Voters(voters));
}

#[test]
fn bootstrap_servers_elsewhere_are_a_quorum_to_join() {
    let c = cluster(&with(
        THREE_NODES,
        &[
            ("controller.quorum.voters", ""),
            ("controller.quorum.bootstrap.servers", "10.0.0.2:9093"),
        ],
    ))
    .unwrap();
    assert_eq!(
        c.quorum(),
        Quorum::Bootstrap(vec![("10.0.0.2".to_owned(), 9093)])
    );
    assert!(!c.bootstraps_only_itself());
}

#[test]
fn listener_syntax_follows_kafka() {
    let c = cluster(&[
        (
            "listeners",
            "plaintext://[::1]:9092,CONTROLLER://:9093, EXTERNAL://host-1.example:9094",
        ),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,EXTERNAL:PLAINTEXT",
        ),
        ("controller.listener.names", "controller"),
    ])
    .unwrap();
    let l = &c.listeners;
    assert_eq!(
        (l[0].name.as_str(), l[0].host.as_str(), l[0].port),
        ("PLAINTEXT", "::1", 9092)
    );
    assert_eq!(l[0].bind_address(), "[::1]:9092");
    assert_eq!(l[0].to_string(), "PLAINTEXT://[::1]:9092");
    assert_eq!(l[1].host, "");
    assert_eq!(l[2].host, "host-1.example");
    assert_eq!(c.broker_listeners().count(), 2);
    for bad in [
        "PLAINTEXT:/127.0.0.1:9092",
        "127.0.0.1:9092",
        "PLAINTEXT://127.0.0.1",
        "PLAINTEXT://127.0.0.1:99999",
        "PLAINTEXT://bad host:9092",
        "://127.0.0.1:9092",
    ] {
        let err = refused(&[("listeners", bad)]);
        assert_eq!(err.key, "listeners", "{bad}: {err}");
        assert!(err.to_string().contains("unable to parse"), "{bad}: {err}");
    }
}

#[test]
fn every_listener_name_needs_a_security_protocol() {
    let err = refused(&[("listeners", "INTERNAL://127.0.0.1:9092")]);
    assert_eq!(err.key, "listeners");
    assert!(
        err.message
            .contains("no security protocol defined for listener INTERNAL"),
        "{err}"
    );
    // An explicit map turns off KRaft's implicit PLAINTEXT for controllers.
    let err = refused(&with(
        THREE_NODES,
        &[("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")],
    ));
    assert!(err.message.contains("CONTROLLER"), "{err}");
}

#[test]
fn listener_names_and_ports_are_distinct() {
    let err = refused(&[(
        "listeners",
        "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093",
    )]);
    assert!(err.message.contains("different name"), "{err}");
    let map = (
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
    );
    let err = refused(&[("listeners", "PLAINTEXT://a:9092,OTHER://b:9092"), map]);
    assert!(err.message.contains("different port"), "{err}");
    // One IPv4 and one IPv6 address may share a port; port 0 may repeat.
    assert!(cluster(&[
        ("listeners", "PLAINTEXT://127.0.0.1:9092,OTHER://[::1]:9092"),
        map
    ])
    .is_ok());
    assert!(cluster(&[
        ("listeners", "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0"),
        map
    ])
    .is_ok());
}

#[test]
fn a_controller_needs_its_listener_in_listeners() {
    let err = refused(&with(
        THREE_NODES,
        &[("listeners", "PLAINTEXT://127.0.0.1:19092")],
    ));
    assert_eq!(err.key, "controller.listener.names");
    let err = refused(&with(
        THREE_NODES,
        &[
            ("listeners", "PLAINTEXT://127.0.0.1:19092"),
            ("controller.listener.names", ""),
        ],
    ));
    assert_eq!(err.key, "controller.listener.names");
    assert!(err.message.contains("at least one"), "{err}");
    // Without a controller name, a CONTROLLER listener has no protocol.
    let err = refused(&with(THREE_NODES, &[("controller.listener.names", "")]));
    assert!(err.message.contains("no security protocol"), "{err}");
}

#[test]
fn a_controller_is_one_of_the_voters() {
    let err = refused(&with(THREE_NODES, &[("node.id", "4")]));
    assert_eq!(err.key, "controller.quorum.voters");
    assert!(err.message.contains("node id 4 must be included"), "{err}");
}

#[test]
fn a_broker_only_node_does_not_listen_as_controller() {
    let broker_only = with(
        THREE_NODES,
        &[
            ("process.roles", "broker"),
            ("node.id", "4"),
            ("listeners", "PLAINTEXT://127.0.0.1:49092"),
        ],
    );
    let c = cluster(&broker_only).unwrap();
    assert!(!c.is_controller());
    assert!(matches!(c.quorum(), Quorum::Voters(_)));
    let err = refused(&with(
        &broker_only,
        &[(
            "listeners",
            "PLAINTEXT://127.0.0.1:49092,CONTROLLER://127.0.0.1:49093",
        )],
    ));
    assert!(
        err.message.contains("must not contain a value appearing"),
        "{err}"
    );
    let err = refused(&with(&broker_only, &[("node.id", "2")]));
    assert!(err.message.contains("must not be included"), "{err}");
    let err = refused(&with(&broker_only, &[("controller.listener.names", "")]));
    assert_eq!(err.key, "controller.listener.names");
}

#[test]
fn a_quorum_is_required_unless_tarns_single_node_default() {
    for roles in ["broker", "controller"] {
        let err = refused(&[
            ("process.roles", roles),
            ("controller.listener.names", "CONTROLLER"),
            ("listeners", "CONTROLLER://127.0.0.1:9093"),
        ]);
        assert_eq!(err.key, "controller.quorum.voters", "{roles}: {err}");
    }
}

#[test]
fn a_controller_only_node_listens_only_as_controller() {
    let err = refused(&with(THREE_NODES, &[("process.roles", "controller")]));
    assert_eq!(err.key, "listeners");
    let c = cluster(&with(
        THREE_NODES,
        &[
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://127.0.0.1:19093"),
        ],
    ))
    .unwrap();
    assert!(c.kafka_listener().is_none());
}

#[test]
fn voters_and_bootstrap_servers_parse_as_kafka() {
    let c = cluster(&with(
        THREE_NODES,
        &[(
            "controller.quorum.voters",
            "1@127.0.0.1:19093, 2@[::1]:29093,3@host-3:39093",
        )],
    ))
    .unwrap();
    assert_eq!(c.voters[&2], ("::1".to_owned(), 29093));
    for bad in [
        "1@127.0.0.1",
        "x@127.0.0.1:1",
        "1@2@h:1",
        "1:h:1",
        "1@127.0.0.1:1,1@h:2",
    ] {
        let err = refused(&with(THREE_NODES, &[("controller.quorum.voters", bad)]));
        assert_eq!(err.key, "controller.quorum.voters", "{bad}: {err}");
    }
    let err = refused(&with(
        THREE_NODES,
        &[("controller.quorum.bootstrap.servers", "no-port")],
    ));
    assert_eq!(err.key, "controller.quorum.bootstrap.servers");
}

#[test]
fn inter_broker_listener_must_be_advertised() {
    let map = (
        "listener.security.protocol.map",
        "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    );
    let listeners = (
        "listeners",
        "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9094",
    );
    let err = refused(&[map, listeners]);
    assert_eq!(err.key, "inter.broker.listener.name");
    assert!(err.message.contains("INTERNAL,EXTERNAL"), "{err}");
    let c = cluster(&[map, listeners, ("inter.broker.listener.name", "EXTERNAL")]).unwrap();
    assert_eq!(c.kafka_listener().unwrap().name, "EXTERNAL");
    let err = refused(&[map, listeners, ("inter.broker.listener.name", "NOPE")]);
    assert!(
        err.message
            .contains("not found in listener.security.protocol.map"),
        "{err}"
    );
    let err = refused(&[
        map,
        listeners,
        ("inter.broker.listener.name", "INTERNAL"),
        ("security.inter.broker.protocol", "PLAINTEXT"),
    ]);
    assert!(err.message.contains("only one of"), "{err}");
}

#[test]
fn advertised_listeners_default_and_are_checked() {
    let c = cluster(&[("advertised.listeners", "PLAINTEXT://broker-1.example:19092")]).unwrap();
    let kafka = c.kafka_listener().unwrap();
    assert_eq!(kafka.port, 9092);
    let advertised = c.advertised_listener(kafka).unwrap();
    assert_eq!(
        (advertised.host.as_str(), advertised.port),
        ("broker-1.example", 19092)
    );
    let err = refused(&[("advertised.listeners", "PLAINTEXT://h:1,SSL://h:2")]);
    assert!(err.message.contains("subset"), "{err}");
    let err = refused(&[("listeners", "PLAINTEXT://0.0.0.0:9092")]);
    assert_eq!(err.key, "advertised.listeners");
    assert!(err.message.contains("0.0.0.0"), "{err}");
    assert!(cluster(&[
        ("listeners", "PLAINTEXT://0.0.0.0:9092"),
        ("advertised.listeners", "PLAINTEXT://10.1.2.3:9092"),
    ])
    .is_ok());
}

#[test]
fn only_plaintext_is_servable() {
    let c = cluster(&[
        ("listeners", "SSL://127.0.0.1:9093"),
        ("security.inter.broker.protocol", "SSL"),
    ])
    .unwrap();
    assert_eq!(c.listeners[0].security_protocol, SecurityProtocol::Ssl);
    let err = c.check_servable().unwrap_err();
    assert!(err.message.contains("only PLAINTEXT"), "{err}");
    for protocol in ["SASL_PLAINTEXT", "SASL_SSL"] {
        let listeners = format!("{protocol}://127.0.0.1:9093");
        let config = BrokerConfig::with_overrides([
            ("listeners", listeners.as_str()),
            ("security.inter.broker.protocol", protocol),
        ])
        .unwrap();
        let c = ClusterConfig::from_config(&config).unwrap();
        assert!(c.check_servable().is_err(), "{protocol}");
    }
    let err = refused(&[("listener.security.protocol.map", "PLAINTEXT:TLS")]);
    assert!(err.message.contains("invalid security protocol"), "{err}");
}

#[test]
fn node_id_and_broker_id_agree() {
    assert_eq!(cluster(&[("broker.id", "7")]).unwrap().node_id, 7);
    assert_eq!(
        cluster(&[("broker.id", "7"), ("node.id", "7")])
            .unwrap()
            .node_id,
        7
    );
    let err = refused(&[("broker.id", "7"), ("node.id", "8")]);
    assert_eq!(err.key, "node.id");
    assert_eq!(refused(&[("broker.id", "-1")]).key, "broker.id");
}

#[test]
fn one_data_directory() {
    assert_eq!(
        cluster(&[("log.dir", "/a")]).unwrap().log_dir,
        PathBuf::from("/a")
    );
    assert_eq!(
        cluster(&[("log.dir", "/a"), ("log.dirs", "/b")])
            .unwrap()
            .log_dir,
        PathBuf::from("/b")
    );
    let err = refused(&[("log.dirs", "/a,/b")]);
    assert_eq!(err.key, "log.dirs");
    assert!(err.message.contains("JBOD"), "{err}");
    assert_eq!(refused(&[("log.dirs", " , ")]).key, "log.dirs");
}

#[test]
fn roles_are_broker_or_controller() {
    assert!(BrokerConfig::with_overrides([("process.roles", "broker,zookeeper")]).is_err());
    assert!(BrokerConfig::with_overrides([("process.roles", "")]).is_err());
}

#[test]
fn initial_controllers_parse_as_kafka_storage_takes_them() {
    let parsed = parse_initial_controllers(
        "1@127.0.0.1:19093:J8aAPcfLQt2bqs1JT_rMgQ, 2@[::1]:29093:9Q7YTP2ZRsa7U6jUFZbCLA",
    )
    .expect("two controllers");
    assert_eq!(
        parsed,
        vec![
            InitialController {
                id: 1,
                host: "127.0.0.1".into(),
                port: 19093,
                directory_id: "J8aAPcfLQt2bqs1JT_rMgQ".into(),
            },
            InitialController {
                id: 2,
                host: "::1".into(),
                port: 29093,
                directory_id: "9Q7YTP2ZRsa7U6jUFZbCLA".into(),
            },
        ]
    );
    // What `Display` writes reads back the same.
    let rendered: Vec<String> = parsed.iter().map(ToString::to_string).collect();
    assert_eq!(
        parse_initial_controllers(&rendered.join(",")).expect("round trip"),
        parsed
    );
    for bad in [
        "",
        "1@127.0.0.1:19093",
        "x@127.0.0.1:19093:J8aAPcfLQt2bqs1JT_rMgQ",
        "1@:19093:J8aAPcfLQt2bqs1JT_rMgQ",
        "1@127.0.0.1:19093:",
        "1@h:1:J8aAPcfLQt2bqs1JT_rMgQ,1@h:2:9Q7YTP2ZRsa7U6jUFZbCLA",
    ] {
        assert!(parse_initial_controllers(bad).is_err(), "{bad:?} accepted");
    }
}
