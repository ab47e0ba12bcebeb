//! Three nodes over real TCP on 127.0.0.1, on the real file system:
//! started in reverse order, they elect a leader and commit; once the
//! leader is shut down, the other two elect a new one that commits.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tarn_quorum::tcp::{self, ClusterId, TcpTransport};
use tarn_quorum::{
    ApplyError, Committed, NodeId, Quorum, QuorumConfig, RpcKind, StateMachine, Transport,
};
use tarn_storage::{FileSystem, OsFileSystem};
use tokio::net::TcpListener;
use tokio::time::{sleep, timeout, Instant};

#[derive(Default, Clone)]
struct Applied(Arc<Mutex<Vec<Bytes>>>);

impl StateMachine for Applied {
    fn apply(&mut self, _committed: Committed, entry: &Bytes) -> Result<(), ApplyError> {
        self.0.lock().unwrap().push(entry.clone());
        Ok(())
    }
    fn snapshot(&self) -> Bytes {
        let entries: Vec<Vec<u8>> = self.0.lock().unwrap().iter().map(|b| b.to_vec()).collect();
        Bytes::from(serde_json::to_vec(&entries).unwrap())
    }
    fn install_snapshot(&mut self, _last: Committed, image: &Bytes) -> Result<(), ApplyError> {
        let entries: Vec<Vec<u8>> = serde_json::from_slice(image)?;
        *self.0.lock().unwrap() = entries.into_iter().map(Bytes::from).collect();
        Ok(())
    }
}

/// Proposes through whichever node leads, until one commits.
async fn propose(nodes: &BTreeMap<NodeId, Quorum>, entry: &'static str) -> Committed {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        for quorum in nodes.values() {
            if !quorum.status().borrow().is_leader {
                continue;
            }
            let proposal = quorum.propose(Bytes::from_static(entry.as_bytes()));
            if let Ok(Ok(committed)) = timeout(Duration::from_secs(2), proposal).await {
                return committed;
            }
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("{entry:?} was not committed within 20 s");
}

/// Waits until every node of `nodes` applied up to `index`, then checks
/// each applied exactly `entries`.
async fn applied_everywhere(
    nodes: &BTreeMap<NodeId, Quorum>,
    machines: &BTreeMap<NodeId, Applied>,
    index: u64,
    entries: &[&'static str],
) {
    let expected: Vec<Bytes> = entries
        .iter()
        .map(|e| Bytes::from_static(e.as_bytes()))
        .collect();
    for (id, quorum) in nodes {
        let mut status = quorum.status();
        let applied = status.wait_for(|s| s.applied_index >= Some(index));
        timeout(Duration::from_secs(10), applied)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*machines[id].0.lock().unwrap(), expected, "node {id}");
    }
}

/// Starts node `id` of cluster "c" with `voters` as its initial voters
/// (election timeout 300 ms, fetch timeout 600 ms), its log in `dir`, and
/// serves its quorum RPCs on `listener`. With `directory`, the node's
/// directory id is `dir-<id>-<directory>`, and so are the initial voters'
/// (KIP-853).
async fn start_node(
    id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    directory: Option<&str>,
    dir: std::path::PathBuf,
    listener: TcpListener,
    fs: &Arc<dyn FileSystem>,
) -> (Quorum, Applied) {
    let mut config = QuorumConfig::new(id, voters.clone(), dir);
    if let Some(directory) = directory {
        config.directory_id = Some(format!("dir-{id}-{directory}"));
        config.voter_directory_ids = voters
            .keys()
            .map(|v| (*v, format!("dir-{v}-{directory}")))
            .collect();
    }
    config.election_timeout_ms = 300;
    config.fetch_timeout_ms = 600;
    let machine = Applied::default();
    let cluster = ClusterId::new(Some("c".into()));
    let transport = TcpTransport::new(id, voters.clone(), cluster.clone());
    let quorum = Quorum::start(config, fs.clone(), transport, Box::new(machine.clone()))
        .await
        .unwrap();
    tokio::spawn(tcp::serve(listener, quorum.clone(), cluster));
    (quorum, machine)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_over_tcp_survive_the_loss_of_their_leader() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut listeners = BTreeMap::new();
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voters.insert(id, listener.local_addr().unwrap().to_string());
        listeners.insert(id, listener);
    }
    let fs: Arc<dyn FileSystem> = Arc::new(OsFileSystem);
    let mut nodes = BTreeMap::new();
    let mut machines = BTreeMap::new();
    for id in (1..=3u64).rev() {
        let dir = dirs[id as usize - 1].path().join("__cluster_metadata-0");
        let listener = listeners.remove(&id).unwrap();
        let (quorum, machine) = start_node(id, &voters, None, dir, listener, &fs).await;
        nodes.insert(id, quorum);
        machines.insert(id, machine);
        sleep(Duration::from_millis(200)).await;
    }

    let first = propose(&nodes, "first").await;
    let leader = nodes
        .values()
        .find(|q| q.status().borrow().is_leader)
        .map(Quorum::node_id)
        .expect("a leader committed");
    let old_term = nodes[&leader].status().borrow().term;
    nodes.remove(&leader).unwrap().shutdown().await.unwrap();

    let second = propose(&nodes, "second").await;
    assert!(
        second.term > old_term,
        "a new term: {second:?} after {old_term}"
    );
    assert!(second.index > first.index);
    applied_everywhere(&nodes, &machines, second.index, &["first", "second"]).await;
    for quorum in nodes.values() {
        quorum.shutdown().await.unwrap();
    }
}

/// A voter address that leads to a node of another quorum (a typo in
/// `controller.quorum.voters`, or a port another cluster took over) must
/// not let the other quorum's leader reach that node: each RPC names the
/// node it is for, and the receiver refuses those that name another.
/// Without that, B's node 2 below takes A's AppendEntries for its own
/// (A's leader may be a node 2 too) and stops or follows A's leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rpc_for_another_node_is_refused_not_taken_for_this_ones() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let fs: Arc<dyn FileSystem> = Arc::new(OsFileSystem);
    let start = |id: NodeId, voters: &BTreeMap<NodeId, String>, dir: usize| {
        let mut config = QuorumConfig::new(
            id,
            voters.clone(),
            dirs[dir].path().join("__cluster_metadata-0"),
        );
        config.election_timeout_ms = 300;
        config.fetch_timeout_ms = 600;
        Quorum::start(
            config,
            fs.clone(),
            TcpTransport::new(id, voters.clone(), ClusterId::default()),
            Box::new(Applied::default()),
        )
    };

    // Quorum B: node 2, its only voter, leads.
    let listener_b = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address_b = listener_b.local_addr().unwrap().to_string();
    let b = start(2, &BTreeMap::from([(2, address_b.clone())]), 0)
        .await
        .unwrap();
    let cluster_b = ClusterId::new(Some("cluster-b".into()));
    tokio::spawn(tcp::serve(listener_b, b.clone(), cluster_b));
    let mut status = b.status();
    timeout(Duration::from_secs(10), status.wait_for(|s| s.is_leader))
        .await
        .expect("B's node elects itself")
        .unwrap();
    let before = b.status().borrow().clone();

    // Quorum A: nodes 1 and 2, and a node 3 whose address is B's.
    let mut listeners = Vec::new();
    let mut voters_a = BTreeMap::new();
    for id in 1..=2u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voters_a.insert(id, listener.local_addr().unwrap().to_string());
        listeners.push(listener);
    }
    voters_a.insert(3, address_b.clone());
    let mut a = BTreeMap::new();
    for (id, listener) in (1..=2u64).zip(listeners) {
        let quorum = start(id, &voters_a, id as usize).await.unwrap();
        tokio::spawn(tcp::serve(listener, quorum.clone(), ClusterId::default()));
        a.insert(id, quorum);
    }
    // A's leader commits with its two nodes, and keeps sending to "3"
    // for several election timeouts.
    propose(&a, "a").await;
    sleep(Duration::from_millis(1500)).await;

    let after = b.status().borrow().clone();
    assert!(
        after.running && after.is_leader && after.term == before.term,
        "B's node was moved by A's leader: {before:?} -> {after:?}"
    );
    assert_eq!(after.last_log_index, before.last_log_index, "B's log");

    // What B's node answers: another node's RPC, or one of another
    // cluster, is refused naming why; the vote checks come after.
    let failed = tcp::ERROR_FAILED;
    let inconsistent = tcp::ERROR_INCONSISTENT_CLUSTER_ID;
    for (to, cluster, code, expected) in [
        (
            3,
            Some("cluster-b"),
            failed,
            "is for node 3 but reached node 2",
        ),
        (
            2,
            Some("cluster-a"),
            inconsistent,
            "INCONSISTENT_CLUSTER_ID",
        ),
        (2, Some("cluster-b"), failed, "rpc:"),
        (2, None, failed, "rpc:"),
    ] {
        let (got, answer) = raw_vote(&address_b, to, cluster).await;
        assert_eq!(got, code, "to {to} in {cluster:?}: {answer}");
        assert!(
            answer.contains(expected),
            "to {to} in {cluster:?}: {answer}"
        );
    }
    for quorum in a.values() {
        quorum.shutdown().await.unwrap();
    }
    b.shutdown().await.unwrap();
}

/// Sends one version 1 Vote RPC whose body is not a vote, addressed to
/// node `to` of `cluster`, and returns the error code and message it is
/// answered with.
async fn raw_vote(address: &str, to: i32, cluster: Option<&str>) -> (i16, String) {
    use tokio::io::AsyncWriteExt;
    let mut body = to.to_be_bytes().to_vec();
    match cluster {
        Some(id) => {
            body.extend((id.len() as i16).to_be_bytes());
            body.extend(id.as_bytes());
        }
        None => body.extend((-1i16).to_be_bytes()),
    }
    body.extend(b"{}");
    let header = tcp::RequestHeader {
        api_key: RpcKind::Vote.api_key(),
        api_version: 1,
        correlation_id: 9,
        client_id: Some("raw".into()),
    };
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(&tcp::encode_request(&header, &body))
        .await
        .unwrap();
    let frame = tcp::read_frame(&mut stream)
        .await
        .unwrap()
        .expect("an answer");
    assert_eq!(&frame[..4], &9i32.to_be_bytes(), "correlation id");
    let code = i16::from_be_bytes([frame[4], frame[5]]);
    (code, String::from_utf8_lossy(&frame[6..]).into_owned())
}

/// KIP-853's way to grow a quorum: a node started with no initial voters
/// waits; the leader of a one-voter quorum adds it and a third as voters
/// (each caught up first), after which the quorum survives the loss of
/// its first node; a voter removed from it is no longer counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voters_added_to_a_running_quorum_take_over_when_its_first_node_goes() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let fs: Arc<dyn FileSystem> = Arc::new(OsFileSystem);
    let mut nodes = BTreeMap::new();
    let mut machines = BTreeMap::new();
    let mut addresses = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        // Only the first node is an initial voter; the others know nobody.
        let voters = match id {
            1 => BTreeMap::from([(1, address.clone())]),
            _ => BTreeMap::new(),
        };
        let dir = dirs[id as usize - 1].path().join("__cluster_metadata-0");
        let (quorum, machine) = start_node(id, &voters, Some("a"), dir, listener, &fs).await;
        nodes.insert(id, quorum);
        machines.insert(id, machine);
        addresses.insert(id, address);
    }
    let first = propose(&nodes, "first").await;
    assert!(nodes[&1].status().borrow().is_leader);
    assert!(
        !nodes[&2].status().borrow().voters.contains(&2),
        "a node with no initial voters is not one until added"
    );

    let catch_up = Duration::from_secs(10);
    for id in [2, 3] {
        nodes[&1]
            .add_voter(id, &addresses[&id], Some(&format!("dir-{id}-a")), catch_up)
            .await
            .unwrap();
    }
    let err = nodes[&1]
        .add_voter(2, &addresses[&2], None, catch_up)
        .await
        .unwrap_err();
    assert!(
        matches!(err, tarn_quorum::QuorumError::DuplicateVoter(2)),
        "{err}"
    );
    let status = nodes[&1].status().borrow().clone();
    assert_eq!(status.voters, [1, 2, 3].into_iter().collect());
    assert_eq!(status.addresses[&3], addresses[&3]);
    assert_eq!(status.directory_ids[&1], "dir-1-a");
    assert_eq!(status.directory_ids[&3], "dir-3-a");
    let err = nodes[&2]
        .add_voter(4, "127.0.0.1:1", None, catch_up)
        .await
        .unwrap_err();
    assert!(
        matches!(err, tarn_quorum::QuorumError::NotLeader { .. }),
        "{err}"
    );

    nodes.remove(&1).unwrap().shutdown().await.unwrap();
    let second = propose(&nodes, "second").await;
    assert!(second.index > first.index);
    applied_everywhere(&nodes, &machines, second.index, &["first", "second"]).await;

    // The dead first node is removed: the other two are the quorum.
    let leader = nodes
        .values()
        .find(|q| q.status().borrow().is_leader)
        .cloned()
        .expect("a leader committed");
    let err = leader.remove_voter(7, None, false).await.unwrap_err();
    assert!(
        matches!(err, tarn_quorum::QuorumError::VoterNotFound(7)),
        "{err}"
    );
    // A voter is its id and directory.
    let err = leader
        .remove_voter(1, Some("dir-1-b"), false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, tarn_quorum::QuorumError::VoterNotFound(1)),
        "{err}"
    );
    leader
        .remove_voter(1, Some("dir-1-a"), false)
        .await
        .unwrap();
    assert_eq!(
        leader.status().borrow().voters,
        [2, 3].into_iter().collect()
    );
    propose(&nodes, "third").await;
    for quorum in nodes.values() {
        quorum.shutdown().await.unwrap();
    }
}

/// A node that is not running cannot catch up: adding it fails in time,
/// and it is not left in the membership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_cannot_catch_up_is_not_added() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(OsFileSystem);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let voters = BTreeMap::from([(1, listener.local_addr().unwrap().to_string())]);
    let (quorum, _) = start_node(1, &voters, None, dir.path().join("q"), listener, &fs).await;
    let nodes = BTreeMap::from([(1, quorum.clone())]);
    propose(&nodes, "first").await;
    // Nothing listens on a port just freed.
    let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = gone.local_addr().unwrap().to_string();
    drop(gone);
    let err = quorum
        .add_voter(2, &address, None, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        matches!(err, tarn_quorum::QuorumError::NotCaughtUp { id: 2, .. }),
        "{err}"
    );
    let mut status = quorum.status();
    let settled = status.wait_for(|s| !s.addresses.contains_key(&2));
    timeout(Duration::from_secs(10), settled)
        .await
        .expect("the learner is taken out again")
        .unwrap();
    assert_eq!(quorum.status().borrow().voters, [1].into_iter().collect());
    propose(&nodes, "second").await;
    quorum.shutdown().await.unwrap();
}

/// Listens on `address` again, once the node that had it let it go
/// (within 10 s).
async fn rebind(address: &str) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(address).await {
            Ok(listener) => return listener,
            Err(e) if Instant::now() > deadline => panic!("bind {address} again: {e}"),
            Err(_) => sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A voter whose directory was lost and formatted again (a new directory
/// id, an empty log) is not the voter it replaced (KIP-853): it refuses
/// the RPCs meant for that one, so it neither acknowledges entries nor
/// votes with a log it no longer has, until the old voter is removed and
/// it is added in its place; so too when the old one was kept as a
/// learner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_formatted_again_is_refused_until_added_in_its_place() {
    let dirs: Vec<tempfile::TempDir> = (0..5).map(|_| tempfile::tempdir().unwrap()).collect();
    let fs: Arc<dyn FileSystem> = Arc::new(OsFileSystem);
    let mut listeners = BTreeMap::new();
    let mut voters = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        voters.insert(id, listener.local_addr().unwrap().to_string());
        listeners.insert(id, listener);
    }
    let mut nodes = BTreeMap::new();
    let mut machines = BTreeMap::new();
    for (id, listener) in listeners {
        let dir = dirs[id as usize - 1].path().join("__cluster_metadata-0");
        let (quorum, machine) = start_node(id, &voters, Some("a"), dir, listener, &fs).await;
        nodes.insert(id, quorum);
        machines.insert(id, machine);
    }
    propose(&nodes, "first").await;

    // Node 3 loses its directory: formatted again (a new directory id, no
    // initial voters), it starts on the same address.
    nodes.remove(&3).unwrap().shutdown().await.unwrap();
    let listener = rebind(&voters[&3]).await;
    let dir = dirs[3].path().join("__cluster_metadata-0");
    let (wiped, machine) = start_node(3, &BTreeMap::new(), Some("b"), dir, listener, &fs).await;
    let second = propose(&nodes, "second").await;
    // Several heartbeats and appends later, it has accepted none.
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(wiped.status().borrow().last_log_index, None);
    let leader = nodes
        .values()
        .find(|q| q.status().borrow().is_leader)
        .cloned()
        .expect("a leader committed");
    let matched = leader.status().borrow().matched.get(&3).copied().flatten();
    assert!(matched < Some(second.index), "{matched:?}");

    // The old voter out, the new one in: it catches up and counts.
    leader
        .remove_voter(3, Some("dir-3-a"), false)
        .await
        .unwrap();
    leader
        .add_voter(3, &voters[&3], Some("dir-3-b"), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(leader.status().borrow().directory_ids[&3], "dir-3-b");
    nodes.insert(3, wiped);
    machines.insert(3, machine);
    let third = propose(&nodes, "third").await;
    applied_everywhere(
        &nodes,
        &machines,
        third.index,
        &["first", "second", "third"],
    )
    .await;

    // Removed but kept as a learner (a controller that is also a broker),
    // then formatted again: added with its new directory, it catches up
    // and counts, the learner's record replaced.
    leader.remove_voter(3, Some("dir-3-b"), true).await.unwrap();
    assert_eq!(leader.status().borrow().directory_ids[&3], "dir-3-b");
    nodes.remove(&3).unwrap().shutdown().await.unwrap();
    machines.remove(&3);
    let listener = rebind(&voters[&3]).await;
    let dir = dirs[4].path().join("__cluster_metadata-0");
    let (again, machine) = start_node(3, &BTreeMap::new(), Some("c"), dir, listener, &fs).await;
    leader
        .add_voter(3, &voters[&3], Some("dir-3-c"), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(leader.status().borrow().directory_ids[&3], "dir-3-c");
    nodes.insert(3, again);
    machines.insert(3, machine);
    let fourth = propose(&nodes, "fourth").await;
    applied_everywhere(
        &nodes,
        &machines,
        fourth.index,
        &["first", "second", "third", "fourth"],
    )
    .await;
    for quorum in nodes.values() {
        quorum.shutdown().await.unwrap();
    }
}

/// A peer that answers one request per connection and then closes it, as
/// a node does that restarts between two calls: the connection the
/// transport kept from the first call is dead by the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_connection_the_peer_closed_is_made_again_on_a_new_one() {
    use tokio::io::AsyncWriteExt;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(Mutex::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            *accepted.lock().unwrap() += 1;
            let Ok(Some(frame)) = tcp::read_frame(&mut stream).await else {
                continue;
            };
            let (header, _) = tcp::decode_request(&frame).unwrap();
            let answer = tcp::encode_response(header.correlation_id, 0, b"granted");
            stream.write_all(&answer).await.unwrap();
            // Gone before the next call, as a restarted node is.
        }
    });
    let voters = BTreeMap::from([(2, address)]);
    let transport = TcpTransport::new(1, voters, ClusterId::new(Some("c".into())));
    for call in 1..=3 {
        let answer = transport
            .call(2, RpcKind::Vote, Bytes::from_static(b"vote"))
            .await
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
        assert_eq!(&answer[..], b"granted");
    }
    assert_eq!(*connections.lock().unwrap(), 3, "one connection per call");
}
