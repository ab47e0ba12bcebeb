//! State-machine tests: a manual clock and an in-memory store, so every
//! timeout is exercised by moving time, never by sleeping.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use tarn_protocol::consumer_protocol::Subscription;
use tarn_protocol::error;

use super::*;
use crate::clock::ManualClock;
use crate::store::memory::MemoryStore;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;
const DELAY_MS: i64 = 3_000;

struct Harness {
    clock: Arc<ManualClock>,
    gc: GroupCoordinator<MemoryStore>,
}

impl Harness {
    fn new() -> Self {
        Harness::with(|_| {})
    }

    fn with(adjust: impl FnOnce(&mut GroupConfig)) -> Self {
        let mut config = GroupConfig {
            initial_rebalance_delay_ms: DELAY_MS,
            min_session_timeout_ms: 1_000,
            ..GroupConfig::default()
        };
        adjust(&mut config);
        let clock = Arc::new(ManualClock::new(1_000_000));
        let gc = GroupCoordinator::new(config, clock.clone(), MemoryStore::new(50));
        Harness { clock, gc }
    }

    fn advance(&self, ms: i64) {
        self.clock.advance(ms);
        self.gc.poll_due(self.clock.now_ms());
    }

    fn state(&self, group: &str) -> GroupState {
        self.gc.describe(group).unwrap().state
    }

    /// A member joins and, after KIP-394 and the initial delay, returns
    /// its JoinGroup result.
    fn join_alone(&self, group: &str, client: &str) -> JoinResult {
        let id = self.member_id(group, client);
        let mut rx = self.gc.join(join(group, &id, &["range"]));
        assert!(ready(&mut rx).is_none(), "waits for the initial delay");
        self.advance(DELAY_MS);
        ready(&mut rx).expect("joined after the delay")
    }

    /// KIP-394: the first join hands out a member id.
    fn member_id(&self, group: &str, client: &str) -> String {
        let mut request = join(group, "", &["range"]);
        request.client_id = client.into();
        let result = ready(&mut self.gc.join(request)).unwrap();
        assert_eq!(result.error, error::MEMBER_ID_REQUIRED);
        assert!(result.member_id.starts_with(&format!("{client}-")));
        result.member_id
    }

    fn sync(
        &self,
        group: &str,
        generation: i32,
        member: &str,
        assignments: &[(&str, &str)],
    ) -> oneshot::Receiver<SyncResult> {
        self.gc.sync(SyncRequest {
            group_id: group.into(),
            generation_id: generation,
            member_id: member.into(),
            group_instance_id: None,
            protocol_type: None,
            protocol_name: None,
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::copy_from_slice(a.as_bytes())))
                .collect(),
        })
    }

    /// One member forms a stable group on its own.
    fn stable_single(&self, group: &str, client: &str) -> (String, i32) {
        let joined = self.join_alone(group, client);
        assert_eq!(joined.error, error::NONE);
        let mut rx = self.sync(
            group,
            joined.generation_id,
            &joined.member_id,
            &[(&joined.member_id, "a")],
        );
        assert_eq!(ready(&mut rx).unwrap().error, error::NONE);
        assert_eq!(self.state(group), GroupState::Stable);
        (joined.member_id, joined.generation_id)
    }

    /// `leader` (stable alone) and a second member form generation+1.
    fn stable_pair(&self, group: &str) -> (String, String, i32) {
        let (a, generation) = self.stable_single(group, "a");
        let b = self.member_id(group, "b");
        let mut b_rx = self.gc.join(join(group, &b, &["range"]));
        assert_eq!(self.state(group), GroupState::PreparingRebalance);
        assert_eq!(
            self.gc.heartbeat(group, &a, None, generation),
            error::REBALANCE_IN_PROGRESS
        );
        let a_result = ready(&mut self.gc.join(join(group, &a, &["range"]))).expect("all joined");
        let b_result = ready(&mut b_rx).expect("all joined");
        assert_eq!(a_result.generation_id, generation + 1);
        assert_eq!(a_result.leader_id, a);
        assert_eq!(a_result.members.len(), 2, "the leader sees every member");
        assert!(b_result.members.is_empty());
        let mut b_sync = self.sync(group, generation + 1, &b, &[]);
        assert!(
            ready(&mut b_sync).is_none(),
            "the follower waits for the leader"
        );
        let mut a_sync = self.sync(group, generation + 1, &a, &[(&a, "pa"), (&b, "pb")]);
        assert_eq!(
            ready(&mut a_sync).unwrap().assignment,
            Bytes::from_static(b"pa")
        );
        assert_eq!(
            ready(&mut b_sync).unwrap().assignment,
            Bytes::from_static(b"pb")
        );
        assert_eq!(self.state(group), GroupState::Stable);
        (a, b, generation + 1)
    }
}

fn subscription(topics: &[&str]) -> Bytes {
    Subscription {
        topics: topics.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
    .encode_prefixed(0)
}

fn join(group: &str, member: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        group_id: group.into(),
        member_id: member.into(),
        group_instance_id: None,
        require_known_member_id: true,
        supports_skip_assignment: false,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        rebalance_timeout_ms: REBALANCE_MS,
        session_timeout_ms: SESSION_MS,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), subscription(&["t"])))
            .collect(),
        reason: None,
    }
}

fn ready<T>(rx: &mut oneshot::Receiver<T>) -> Option<T> {
    rx.try_recv().ok()
}

fn offset(value: i64) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset: value,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 0,
        expire_timestamp_ms: None,
    }
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    (topic.to_owned(), partition)
}

#[test]
fn first_member_waits_for_the_initial_delay_then_leads() {
    let h = Harness::new();
    let joined = h.join_alone("g", "c1");
    assert_eq!(joined.error, error::NONE);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.leader_id, joined.member_id);
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state("g"), GroupState::CompletingRebalance);
    let mut rx = h.sync("g", 1, &joined.member_id, &[(&joined.member_id, "x")]);
    let synced = ready(&mut rx).unwrap();
    assert_eq!(synced.assignment, Bytes::from_static(b"x"));
    assert_eq!(synced.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(h.state("g"), GroupState::Stable);
    // The generation was persisted with the assignment.
    let records = h.gc.store().records();
    let stored = records
        .iter()
        .find_map(|r| match r {
            CoordinatorRecord::Group { value: Some(v), .. } => Some(v.clone()),
            _ => None,
        })
        .expect("group metadata written");
    assert_eq!(stored.generation, 1);
    assert_eq!(stored.members[0].assignment, Bytes::from_static(b"x"));
}

#[test]
fn members_joining_during_the_initial_delay_extend_it() {
    let h = Harness::new();
    let a = h.member_id("g", "a");
    let mut a_rx = h.gc.join(join("g", &a, &["range"]));
    h.advance(DELAY_MS - 1);
    let b = h.member_id("g", "b");
    let mut b_rx = h.gc.join(join("g", &b, &["range"]));
    h.advance(1);
    assert!(
        ready(&mut a_rx).is_none(),
        "a new member extended the delay"
    );
    h.advance(DELAY_MS);
    let (ra, rb) = (ready(&mut a_rx).unwrap(), ready(&mut b_rx).unwrap());
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader_id, rb.leader_id);
}

#[test]
fn zero_initial_delay_answers_at_once_and_v3_needs_no_member_id() {
    let h = Harness::with(|c| c.initial_rebalance_delay_ms = 0);
    let mut request = join("g", "", &["range"]);
    request.require_known_member_id = false;
    let result = ready(&mut h.gc.join(request)).expect("no delay");
    assert_eq!(result.error, error::NONE);
    assert!(!result.member_id.is_empty());
    assert_eq!(result.generation_id, 1);
}

#[test]
fn a_second_member_rebalances_the_group() {
    let h = Harness::new();
    let (a, b, generation) = h.stable_pair("g");
    assert_eq!(generation, 2);
    assert_eq!(h.gc.heartbeat("g", &a, None, 2), error::NONE);
    assert_eq!(h.gc.heartbeat("g", &b, None, 2), error::NONE);
    let summary = h.gc.describe("g").unwrap();
    assert_eq!(summary.members.len(), 2);
    assert_eq!(summary.protocol, "range");
}

#[test]
fn describe_shows_the_last_synced_assignment_while_a_rebalance_runs() {
    let h = Harness::new();
    let (a, _) = h.stable_single("g", "a");
    let b = h.member_id("g", "b");
    let _b_join = h.gc.join(join("g", &b, &["range"]));
    assert_eq!(h.state("g"), GroupState::PreparingRebalance);
    let summary = h.gc.describe("g").unwrap();
    let described = |id: &str| {
        let member = summary.members.iter().find(|m| m.member_id == id).unwrap();
        (member.metadata.clone(), member.assignment.clone())
    };
    // Metadata only for a Stable group; the assignment until replaced.
    assert_eq!(described(&a), (Bytes::new(), Bytes::from_static(b"a")));
    assert_eq!(described(&b), (Bytes::new(), Bytes::new()));
    assert!(summary.protocol.is_empty());
}

#[test]
fn a_member_that_stops_heartbeating_is_expired_and_its_partitions_move() {
    let h = Harness::new();
    let (a, b, generation) = h.stable_pair("g");
    // a keeps heartbeating, b goes silent.
    for _ in 0..3 {
        h.advance(i64::from(SESSION_MS) / 4);
        assert_eq!(h.gc.heartbeat("g", &a, None, generation), error::NONE);
    }
    assert_eq!(h.state("g"), GroupState::Stable);
    h.advance(i64::from(SESSION_MS) / 4 + 1);
    assert_eq!(h.state("g"), GroupState::PreparingRebalance);
    assert_eq!(
        h.gc.heartbeat("g", &b, None, generation),
        error::UNKNOWN_MEMBER_ID
    );
    let rejoined = ready(&mut h.gc.join(join("g", &a, &["range"]))).expect("a is all that is left");
    assert_eq!(rejoined.generation_id, generation + 1);
    assert_eq!(rejoined.members.len(), 1);
}

#[test]
fn members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() {
    let h = Harness::new();
    let (a, b, generation) = h.stable_pair("g");
    // b rejoins with a new subscription; a only heartbeats.
    let mut changed = join("g", &b, &["range"]);
    changed.protocols = vec![("range".into(), subscription(&["t", "u"]))];
    let mut b_rx = h.gc.join(changed);
    assert!(ready(&mut b_rx).is_none());
    let mut elapsed = 0;
    while elapsed + 2_000 < i64::from(REBALANCE_MS) {
        h.advance(2_000);
        elapsed += 2_000;
        assert_eq!(
            h.gc.heartbeat("g", &a, None, generation),
            error::REBALANCE_IN_PROGRESS
        );
    }
    assert!(ready(&mut b_rx).is_none(), "still waiting for a");
    h.advance(2_000);
    let result = ready(&mut b_rx).expect("the rebalance timeout completes the join");
    assert_eq!(result.generation_id, generation + 1);
    assert_eq!(result.leader_id, b, "a did not rejoin, so b leads");
    assert_eq!(
        h.gc.heartbeat("g", &a, None, generation),
        error::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn a_follower_that_never_syncs_is_removed() {
    let h = Harness::new();
    let (a, _b, generation) = h.stable_pair("g");
    // Rebalance again; only the leader syncs.
    assert_eq!(
        ready(&mut h.gc.join(join("g", &a, &["range"]))).map(|r| r.error),
        None
    );
    let b_id =
        h.gc.describe("g")
            .unwrap()
            .members
            .iter()
            .map(|m| m.member_id.clone())
            .find(|m| *m != a)
            .unwrap();
    let mut b_rx = h.gc.join(join("g", &b_id, &["range"]));
    assert_eq!(ready(&mut b_rx).unwrap().generation_id, generation + 1);
    assert_eq!(
        ready(&mut h.sync("g", generation + 1, &a, &[]))
            .unwrap()
            .error,
        error::NONE
    );
    for _ in 0..REBALANCE_MS / 5_000 - 1 {
        h.advance(5_000);
        // b is alive (it heartbeats) but never sends SyncGroup.
        assert_eq!(h.gc.heartbeat("g", &a, None, generation + 1), error::NONE);
        assert_eq!(
            h.gc.heartbeat("g", &b_id, None, generation + 1),
            error::NONE
        );
    }
    assert_eq!(h.gc.describe("g").unwrap().members.len(), 2);
    h.advance(5_000);
    assert_eq!(
        h.state("g"),
        GroupState::PreparingRebalance,
        "b was dropped for not syncing"
    );
    assert_eq!(h.gc.describe("g").unwrap().members.len(), 1);
}

#[test]
fn fencing_errors_follow_kafka() {
    let h = Harness::new();
    let (a, generation) = h.stable_single("g", "a");
    assert_eq!(
        h.gc.heartbeat("g", &a, None, generation + 1),
        error::ILLEGAL_GENERATION
    );
    assert_eq!(
        h.gc.heartbeat("g", "nobody", None, generation),
        error::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        h.gc.heartbeat("none", &a, None, generation),
        error::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        h.gc.heartbeat("", &a, None, generation),
        error::INVALID_GROUP_ID
    );
    assert_eq!(
        ready(&mut h.sync("g", generation - 1, &a, &[]))
            .unwrap()
            .error,
        error::ILLEGAL_GENERATION
    );
    let commits =
        h.gc.commit_offsets("g", &a, None, generation + 1, vec![(tp("t", 0), offset(1))]);
    assert_eq!(commits[0].1, error::ILLEGAL_GENERATION);
    let commits =
        h.gc.commit_offsets("g", "", None, -1, vec![(tp("t", 0), offset(1))]);
    assert_eq!(
        commits[0].1,
        error::UNKNOWN_MEMBER_ID,
        "only members commit to an active group"
    );

    let mut other_type = join("g", "", &["range"]);
    other_type.protocol_type = "connect".into();
    assert_eq!(
        ready(&mut h.gc.join(other_type)).unwrap().error,
        error::INCONSISTENT_GROUP_PROTOCOL
    );
    assert_eq!(
        ready(&mut h.gc.join(join("g", "", &["roundrobin"])))
            .unwrap()
            .error,
        error::INCONSISTENT_GROUP_PROTOCOL
    );
    let mut bad_session = join("g", "", &["range"]);
    bad_session.session_timeout_ms = 500;
    assert_eq!(
        ready(&mut h.gc.join(bad_session)).unwrap().error,
        error::INVALID_SESSION_TIMEOUT
    );
    let mut bad_session = join("g", "", &["range"]);
    bad_session.session_timeout_ms = 1_800_001;
    assert_eq!(
        ready(&mut h.gc.join(bad_session)).unwrap().error,
        error::INVALID_SESSION_TIMEOUT
    );
    assert_eq!(
        ready(&mut h.gc.join(join("g", "unknown-id", &["range"])))
            .unwrap()
            .error,
        error::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        ready(&mut h.gc.join(join("nogroup", "unknown-id", &["range"])))
            .unwrap()
            .error,
        error::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn group_max_size_refuses_extra_members() {
    let h = Harness::with(|c| c.max_size = 1);
    let (_a, _) = h.stable_single("g", "a");
    let result = ready(&mut h.gc.join(join("g", "", &["range"]))).unwrap();
    assert_eq!(result.error, error::GROUP_MAX_SIZE_REACHED);
    assert_eq!(result.member_id, "");
    assert_eq!(h.state("g"), GroupState::Stable);
}

#[test]
fn protocol_selection_takes_the_most_voted_common_protocol() {
    let h = Harness::with(|c| c.initial_rebalance_delay_ms = 0);
    let mut first = join("g", "", &["cooperative-sticky", "range"]);
    first.require_known_member_id = false;
    let r1 = ready(&mut h.gc.join(first)).unwrap();
    assert_eq!(r1.protocol_name.as_deref(), Some("cooperative-sticky"));
    ready(&mut h.sync("g", 1, &r1.member_id, &[])).unwrap();
    // A member that only speaks range: the common protocol is range.
    let mut second = join("g", "", &["range"]);
    second.require_known_member_id = false;
    let mut r2 = h.gc.join(second);
    let again = ready(
        &mut h
            .gc
            .join(join("g", &r1.member_id, &["cooperative-sticky", "range"])),
    )
    .unwrap();
    assert_eq!(again.protocol_name.as_deref(), Some("range"));
    assert_eq!(
        ready(&mut r2).unwrap().protocol_name.as_deref(),
        Some("range")
    );
}

#[test]
fn a_static_member_rejoins_a_stable_group_without_a_rebalance() {
    let h = Harness::new();
    let mut request = join("g", "", &["range"]);
    request.group_instance_id = Some("i1".into());
    let mut rx = h.gc.join(request.clone());
    h.advance(DELAY_MS);
    let first = ready(&mut rx).unwrap();
    assert!(first.member_id.starts_with("i1-"));
    ready(&mut h.sync("g", 1, &first.member_id, &[(&first.member_id, "mine")])).unwrap();
    let written_before = h.gc.store().records().len();

    // The same instance restarts and joins without its member id.
    let again = ready(&mut h.gc.join(request)).expect("answered at once");
    assert_eq!(again.error, error::NONE);
    assert_ne!(again.member_id, first.member_id);
    assert_eq!(again.generation_id, 1, "no new generation");
    assert_eq!(
        again.leader_id, first.member_id,
        "older clients see the previous leader id"
    );
    assert_eq!(h.state("g"), GroupState::Stable);
    assert_eq!(
        h.gc.store().records().len(),
        written_before + 1,
        "the new member id is persisted"
    );
    let synced = ready(&mut h.sync("g", 1, &again.member_id, &[])).unwrap();
    assert_eq!(
        synced.assignment,
        Bytes::from_static(b"mine"),
        "keeps its assignment"
    );
    // The old incarnation is fenced.
    assert_eq!(
        h.gc.heartbeat("g", &first.member_id, Some("i1"), 1),
        error::FENCED_INSTANCE_ID
    );
    assert_eq!(
        h.gc.heartbeat("g", &again.member_id, Some("i1"), 1),
        error::NONE
    );
}

#[test]
fn a_static_member_that_changes_protocols_triggers_a_rebalance() {
    let h = Harness::new();
    let mut request = join("g", "", &["range"]);
    request.group_instance_id = Some("i1".into());
    let mut rx = h.gc.join(request.clone());
    h.advance(DELAY_MS);
    let first = ready(&mut rx).unwrap();
    ready(&mut h.sync("g", 1, &first.member_id, &[])).unwrap();
    let mut changed = request;
    changed.protocols = vec![
        ("roundrobin".into(), subscription(&["t"])),
        ("range".into(), subscription(&["t"])),
    ];
    let mut rx = h.gc.join(changed);
    let result = ready(&mut rx).expect("single member: completes at once");
    assert_eq!(result.generation_id, 2);
    assert_eq!(result.protocol_name.as_deref(), Some("roundrobin"));
}

#[test]
fn failed_persistence_of_the_assignment_makes_the_group_rebalance() {
    let h = Harness::new();
    let joined = h.join_alone("g", "a");
    *h.gc.store().fail_with.lock() = Some(error::NOT_COORDINATOR);
    let result = ready(&mut h.sync("g", 1, &joined.member_id, &[])).unwrap();
    assert_eq!(result.error, error::NOT_COORDINATOR);
    assert_eq!(h.state("g"), GroupState::PreparingRebalance);
}

#[test]
fn leave_group_removes_members_by_id_and_by_instance() {
    let h = Harness::new();
    let (a, b, _) = h.stable_pair("g");
    let result = h.gc.leave(
        "g",
        vec![
            LeavingMember {
                member_id: b.clone(),
                group_instance_id: None,
                reason: Some("bye".into()),
            },
            LeavingMember {
                member_id: "ghost".into(),
                group_instance_id: None,
                reason: None,
            },
            LeavingMember {
                member_id: String::new(),
                group_instance_id: Some("nope".into()),
                reason: None,
            },
        ],
    );
    assert_eq!(result.error, error::NONE);
    let codes: Vec<ErrorCode> = result.members.iter().map(|m| m.2).collect();
    assert_eq!(
        codes,
        vec![
            error::NONE,
            error::UNKNOWN_MEMBER_ID,
            error::UNKNOWN_MEMBER_ID
        ]
    );
    assert_eq!(h.state("g"), GroupState::PreparingRebalance);
    let left = h.gc.leave(
        "g",
        vec![LeavingMember {
            member_id: a,
            group_instance_id: None,
            reason: None,
        }],
    );
    assert_eq!(left.members[0].2, error::NONE);
    assert_eq!(
        h.state("g"),
        GroupState::Empty,
        "the last member left: the join completes empty"
    );
}

#[test]
fn offsets_commit_fetch_and_limits() {
    let h = Harness::with(|c| c.offset_metadata_max_bytes = 5);
    // No group yet: a standalone commit creates one for offsets only.
    let result = h.gc.commit_offsets(
        "solo",
        "",
        None,
        -1,
        vec![
            (tp("t", 0), offset(5)),
            (
                tp("t", 1),
                OffsetAndMetadata {
                    metadata: "toolong".into(),
                    ..offset(6)
                },
            ),
        ],
    );
    assert_eq!(
        result,
        vec![
            (tp("t", 1), error::OFFSET_METADATA_TOO_LARGE),
            (tp("t", 0), error::NONE)
        ]
    );
    let fetched =
        h.gc.fetch_offsets("solo", Some(vec![tp("t", 0), tp("t", 1)]))
            .unwrap();
    assert_eq!(fetched[0].1.as_ref().map(|o| o.offset), Some(5));
    assert_eq!(fetched[1].1, None);
    assert_eq!(h.gc.fetch_offsets("solo", None).unwrap().len(), 1);
    assert_eq!(
        h.gc.fetch_offsets("unknown", Some(vec![tp("t", 0)]))
            .unwrap()[0]
            .1,
        None
    );
    // A commit with a generation for a group that does not exist.
    let result =
        h.gc.commit_offsets("nogroup", "m", None, 3, vec![(tp("t", 0), offset(1))]);
    assert_eq!(result[0].1, error::ILLEGAL_GENERATION);
    // A failed append changes nothing.
    *h.gc.store().fail_with.lock() = Some(error::INVALID_COMMIT_OFFSET_SIZE);
    let result =
        h.gc.commit_offsets("solo", "", None, -1, vec![(tp("t", 0), offset(9))]);
    assert_eq!(result[0].1, error::INVALID_COMMIT_OFFSET_SIZE);
    assert_eq!(
        h.gc.fetch_offsets("solo", Some(vec![tp("t", 0)])).unwrap()[0]
            .1
            .as_ref()
            .map(|o| o.offset),
        Some(5)
    );
}

#[test]
fn member_commits_are_fenced_during_completing_rebalance() {
    let h = Harness::new();
    let joined = h.join_alone("g", "a");
    let result = h.gc.commit_offsets(
        "g",
        &joined.member_id,
        None,
        1,
        vec![(tp("t", 0), offset(1))],
    );
    assert_eq!(result[0].1, error::REBALANCE_IN_PROGRESS);
    ready(&mut h.sync("g", 1, &joined.member_id, &[])).unwrap();
    let result = h.gc.commit_offsets(
        "g",
        &joined.member_id,
        None,
        1,
        vec![(tp("t", 0), offset(1))],
    );
    assert_eq!(result[0].1, error::NONE);
}

#[test]
fn loading_restores_groups_offsets_and_expires_members_that_do_not_return() {
    let h = Harness::new();
    let (a, generation) = h.stable_single("g", "a");
    h.gc.commit_offsets("g", &a, None, generation, vec![(tp("t", 0), offset(42))]);
    h.gc.commit_offsets("gone", "", None, -1, vec![(tp("t", 0), offset(1))]);
    assert_eq!(h.gc.delete_groups(vec!["gone".into()])[0].1, error::NONE);
    let records = h.gc.store().records();

    let h2 = Harness::new();
    assert_eq!(h2.gc.load(records), 1, "the deleted group stays deleted");
    assert_eq!(h2.state("g"), GroupState::Stable);
    assert_eq!(
        h2.gc.heartbeat("g", &a, None, generation),
        error::NONE,
        "members carry on after a restart"
    );
    let fetched = h2.gc.fetch_offsets("g", Some(vec![tp("t", 0)])).unwrap();
    assert_eq!(fetched[0].1.as_ref().map(|o| o.offset), Some(42));
    h2.advance(i64::from(SESSION_MS) + 1);
    assert_eq!(
        h2.state("g"),
        GroupState::Empty,
        "a member that never came back expired"
    );
    assert_eq!(
        h2.gc.fetch_offsets("g", Some(vec![tp("t", 0)])).unwrap()[0]
            .1
            .as_ref()
            .map(|o| o.offset),
        Some(42)
    );
}

#[test]
fn delete_groups_and_offsets() {
    let h = Harness::new();
    let (a, generation) = h.stable_single("g", "a");
    h.gc.commit_offsets(
        "g",
        &a,
        None,
        generation,
        vec![(tp("t", 0), offset(1)), (tp("other", 0), offset(2))],
    );
    assert_eq!(
        h.gc.delete_groups(vec!["g".into(), "nope".into()]),
        vec![
            ("g".into(), error::NON_EMPTY_GROUP),
            ("nope".into(), error::GROUP_ID_NOT_FOUND)
        ]
    );
    // The consumer subscribes to "t": its offsets stay, "other"'s go.
    let (code, result) = h.gc.delete_offsets("g", vec![tp("t", 0), tp("other", 0)]);
    assert_eq!(code, error::NONE);
    assert_eq!(
        result,
        vec![
            (tp("t", 0), error::GROUP_SUBSCRIBED_TO_TOPIC),
            (tp("other", 0), error::NONE)
        ]
    );
    assert_eq!(h.gc.fetch_offsets("g", None).unwrap().len(), 1);
    assert_eq!(
        h.gc.delete_offsets("nope", vec![]).0,
        error::GROUP_ID_NOT_FOUND
    );
    h.gc.leave(
        "g",
        vec![LeavingMember {
            member_id: a,
            group_instance_id: None,
            reason: None,
        }],
    );
    assert_eq!(h.state("g"), GroupState::Empty);
    assert_eq!(h.gc.delete_groups(vec!["g".into()])[0].1, error::NONE);
    assert_eq!(h.state("g"), GroupState::Dead);
    assert!(h.gc.list(&[]).unwrap().is_empty());
    let tombstones =
        h.gc.store()
            .records()
            .into_iter()
            .filter(|r| matches!(r, CoordinatorRecord::Group { value: None, .. }))
            .count();
    assert_eq!(tombstones, 1);
}

#[test]
fn offsets_of_an_empty_group_expire_after_retention() {
    let h = Harness::with(|c| c.offsets_retention_ms = 60_000);
    h.gc.commit_offsets(
        "solo",
        "",
        None,
        -1,
        vec![(
            tp("t", 0),
            OffsetAndMetadata {
                commit_timestamp_ms: h.clock.now_ms(),
                ..offset(1)
            },
        )],
    );
    assert_eq!(h.gc.expire_offsets(h.clock.now_ms() + 59_999), 0);
    assert_eq!(h.gc.expire_offsets(h.clock.now_ms() + 60_000), 1);
    assert!(
        h.gc.list(&[]).unwrap().is_empty(),
        "the empty group went with its last offset"
    );
    // An active consumer group keeps offsets of subscribed topics.
    let (a, generation) = h.stable_single("g", "a");
    h.gc.commit_offsets(
        "g",
        &a,
        None,
        generation,
        vec![(
            tp("t", 0),
            OffsetAndMetadata {
                commit_timestamp_ms: h.clock.now_ms(),
                ..offset(1)
            },
        )],
    );
    assert_eq!(h.gc.expire_offsets(h.clock.now_ms() + 120_000), 0);
}

#[test]
fn list_filters_by_state_and_describe_shows_members() {
    let h = Harness::new();
    h.stable_single("g1", "a");
    h.gc.commit_offsets("g2", "", None, -1, vec![(tp("t", 0), offset(1))]);
    let all = h.gc.list(&[]).unwrap();
    assert_eq!(
        all.iter().map(|g| g.group_id.as_str()).collect::<Vec<_>>(),
        vec!["g1", "g2"]
    );
    let stable = h.gc.list(&["stable".into()]).unwrap();
    assert_eq!(stable.len(), 1);
    assert_eq!(stable[0].protocol_type, "consumer");
    let empty = h.gc.list(&["Empty".into()]).unwrap();
    assert_eq!(empty[0].group_id, "g2");
    let summary = h.gc.describe("g1").unwrap();
    assert_eq!(summary.members[0].client_host, "/127.0.0.1");
    assert_eq!(summary.members[0].assignment, Bytes::from_static(b"a"));
    assert_eq!(h.gc.describe("missing").unwrap().state, GroupState::Dead);
}

#[test]
fn pending_member_ids_expire() {
    let h = Harness::new();
    let id = h.member_id("g", "a");
    h.advance(i64::from(SESSION_MS));
    let result = ready(&mut h.gc.join(join("g", &id, &["range"]))).unwrap();
    assert_eq!(
        result.error,
        error::UNKNOWN_MEMBER_ID,
        "the id was never used in time"
    );
}

#[test]
fn shutdown_answers_coordinator_not_available() {
    let h = Harness::new();
    h.gc.shutdown();
    assert_eq!(
        ready(&mut h.gc.join(join("g", "", &["range"])))
            .unwrap()
            .error,
        error::COORDINATOR_NOT_AVAILABLE
    );
    assert_eq!(
        h.gc.list(&[]).unwrap_err(),
        error::COORDINATOR_NOT_AVAILABLE
    );
}

#[test]
fn offsets_of_a_deleted_topic_are_removed() {
    let h = Harness::new();
    h.gc.commit_offsets(
        "g",
        "",
        None,
        -1,
        vec![(tp("gone", 0), offset(1)), (tp("kept", 0), offset(2))],
    );
    assert_eq!(h.gc.on_topic_deleted("gone"), 1);
    let left: Vec<TopicPartition> =
        h.gc.fetch_offsets("g", None)
            .unwrap()
            .into_iter()
            .map(|(tp, _)| tp)
            .collect();
    assert_eq!(left, vec![tp("kept", 0)]);
    assert!(h.gc.store().records().iter().any(
        |r| matches!(r, CoordinatorRecord::Offset { topic, value: None, .. } if topic == "gone")
    ));
}

#[test]
fn groups_of_partitions_led_elsewhere_get_not_coordinator() {
    let clock = Arc::new(ManualClock::new(0));
    let gc = GroupCoordinator::new(
        GroupConfig::default(),
        clock,
        MemoryStore {
            local: false,
            ..MemoryStore::new(50)
        },
    );
    assert_eq!(gc.heartbeat("g", "m", None, 1), error::NOT_COORDINATOR);
    assert_eq!(gc.describe("g").unwrap_err(), error::NOT_COORDINATOR);
}
