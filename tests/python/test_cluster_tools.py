"""Apache Kafka's own reassignment tools (4.4.0) against a three-node Tarn
cluster: kafka-reassign-partitions drains a broker (--generate, --execute,
--verify) that is then stopped and removed with kafka-cluster unregister,
lists and cancels a reassignment held in progress, and
kafka-leader-election moves a leader to the replica a reassignment made
preferred; kafka-topics --describe is the witness of each end state, and
records produced before a move are read back after it. kafka-metadata-quorum
describes the quorum (leader, epoch, high watermark, voters) through any
broker, before and after its leader is killed, and grows a dynamic quorum
(add-controller) and shrinks it (remove-controller); with
--bootstrap-controller the tools talk to the controllers themselves
(KIP-919).

A reassignment is held in progress by pausing (SIGSTOP) one of its new
replicas, as tests/tests/reassignment.rs does, so "in progress" is observed
for certain, not raced. Kafka's tool refuses a target naming a broker that
describeCluster does not list, and Tarn, like Kafka, leaves a fenced broker
out; the paused broker's session is therefore made longer than the test, so
it stays registered and unfenced while paused. The tools' admin clients may
still pick the paused broker for a request: a short request timeout (the
command config) makes them give up on it and retry another broker.

Waits poll what the tools or the brokers report, with generous deadlines;
times are never asserted.
"""

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import confluent_kafka
import pytest

import subprocess

from conftest import TarnBroker, tarn_bin, wait_until
from tarn_clients import Rec, assert_matches, ck_consume, ck_produce
from test_cluster import TarnCluster, free_port, view_or_none, wait_for
from test_kafka_tools import assert_tarn_topics_says_what_kafka_topics_says, describe_rows, kafka_tool

# A reassignment of a few hundred small records; a slow machine's JVMs.
SETTLED_TIMEOUT_S = 90
# Longer than any test runs, so a paused broker is never fenced (see above).
LONG_SESSION = [("broker.session.timeout.ms", "600000")]
# Requests a paused broker will never answer are retried elsewhere after
# this; the tools' calls themselves keep their default 60 s budget.
COMMAND_CONFIG = "request.timeout.ms=8000\n"


def start_cluster(tmp_path, settings):
    """A formed three-node cluster with `settings` on every node."""
    cluster = TarnCluster(tmp_path)
    for node in cluster.nodes.values():
        node.settings += settings
    try:
        for node in cluster.nodes.values():
            node.start()
        cluster.wait_formed()
    except BaseException:
        print(cluster.logs())
        cluster.kill_all()
        raise
    return cluster


def stop_cluster(cluster):
    """As test_cluster's fixture: SIGTERM each node (exit 0 required), the
    active controller last, and no panic in any node's stderr."""
    print(cluster.logs())
    try:
        for i in cluster.running():
            cluster.nodes[i].assert_alive()
        for i in cluster.stop_order():
            cluster.nodes[i].stop()
    finally:
        cluster.kill_all()
    for node in cluster.nodes.values():
        node.assert_no_panic()


@pytest.fixture
def cluster_with(tmp_path):
    """Starts one cluster with extra settings; stops it at teardown."""
    started = []

    def start(settings=()):
        assert not started, "one cluster per test"
        started.append(start_cluster(tmp_path, list(settings)))
        return started[0]

    yield start
    for cluster in started:
        stop_cluster(cluster)


@contextlib.contextmanager
def paused(node):
    """SIGSTOP `node` for the block; SIGCONT whatever happens, so the
    teardown's SIGTERM is handled."""
    pid = node.proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def reassign(bootstrap, *args, check=True):
    return kafka_tool("kafka-reassign-partitions", "--bootstrap-server", bootstrap, *args, check=check)


def describe(bootstrap, topic, *extra):
    """kafka-topics --describe: (header line, partition rows by partition id, stdout)."""
    out = kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, *extra, "--describe", "--topic", topic).stdout
    headers = [line for line in out.splitlines() if line.startswith("Topic:")]
    assert len(headers) == 1, out
    rows = {int(r["Partition"]): r for r in describe_rows(out)}
    return headers[0], rows, out


def ids(field: str):
    """A describe field such as "2,3" as a list of broker ids."""
    return [int(x) for x in field.split(",") if x]


def partition_metadata(bootstrap, topic):
    """{partition: (leader, replicas, isr)} from a Metadata request, or None."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "tarn-py-unused-group"})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
    except confluent_kafka.KafkaException:
        return None
    finally:
        consumer.close()
    entry = metadata.topics.get(topic)
    if entry is None or entry.error is not None:
        return None
    return {p: (m.leader, list(m.replicas), sorted(m.isrs)) for p, m in entry.partitions.items()}


def wait_metadata(bootstrap, topic, predicate, what):
    def check():
        found = partition_metadata(bootstrap, topic)
        return found if found is not None and predicate(found) else None
    return wait_until(check, SETTLED_TIMEOUT_S, what, 0.2)


def reassignment_json(moves):
    """Kafka's reassignment file for {(topic, partition): replicas}."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": replicas} for (t, p), replicas in sorted(moves.items())
    ]})


def json_after(lines, title):
    """The JSON document printed on the first non-empty line after `title`."""
    assert title in lines, f"no {title!r} in {lines}"
    rest = [line for line in lines[lines.index(title) + 1:] if line.strip()]
    return json.loads(rest[0])


def assignment(document):
    """{(topic, partition): replicas} of a reassignment JSON document."""
    return {(p["topic"], p["partition"]): p["replicas"] for p in document["partitions"]}


def verify_lines(bootstrap, file, *extra):
    """The per-partition lines of --verify, and its whole stdout."""
    out = reassign(bootstrap, "--verify", "--reassignment-json-file", str(file), *extra).stdout
    lines = out.splitlines()
    assert lines and lines[0] == "Status of partition reassignment:", out
    return [line for line in lines if line.startswith(("Reassignment of partition", "There is no active"))], out


def wait_verified(bootstrap, file, partitions, *extra):
    """Runs --verify until it says every one of `partitions` "is completed.".

    With --preserve-throttles, so that the polling is about completion
    alone; clearing the throttles once it is complete, as a plain --verify
    does, is checked by verify_clears_throttles."""
    want = sorted(f"Reassignment of partition {tp} is completed." for tp in partitions)
    last = {}

    def completed():
        lines, out = verify_lines(bootstrap, file, "--preserve-throttles", *extra)
        last["out"] = out
        return out if sorted(lines) == want else None

    try:
        return wait_until(completed, SETTLED_TIMEOUT_S, f"--verify to complete {partitions}", 1.0)
    except AssertionError as e:
        raise AssertionError(f"{e}; last --verify:\n{last.get('out')}") from None


def verify_clears_throttles(bootstrap, file, topic, brokers):
    """A plain --verify of a completed reassignment clears the replication
    throttles: it deletes the throttle rates of every broker (an
    IncrementalAlterConfigs per broker, which Kafka's admin client sends to
    that broker) and the throttled replicas of the topic."""
    lines, out = verify_lines(bootstrap, file)
    assert all(line.endswith("is completed.") for line in lines), out
    assert f"Clearing broker-level throttles on brokers {','.join(map(str, sorted(brokers)))}" in out, out
    assert f"Clearing topic-level throttles on topic {topic}" in out, out


def listed_brokers(bootstrap):
    """The broker ids kafka-cluster list-endpoints names, fenced included."""
    out = kafka_tool("kafka-cluster", "list-endpoints", "--bootstrap-server", bootstrap,
                     "--include-fenced-brokers").stdout
    return {int(line.split()[0]) for line in out.splitlines() if line.split() and line.split()[0].isdigit()}


def records(tag, count):
    return [Rec(f"{tag}-key-{i % 20}".encode(), f"{tag}-value-{i}".encode(), []) for i in range(count)]


def partition_dirs(node, topic):
    """The partition directories of `topic` that a node holds."""
    return sorted(d.name for d in Path(node.data_dir).iterdir()
                  if d.name.startswith(topic + "-") and d.name[len(topic) + 1:].isdigit())


def test_kafka_reassign_partitions_drains_a_broker(cluster_with, tmp_path):
    """--generate without one broker, --execute what it proposes, --verify
    until every partition is completed: kafka-topics --describe names the
    drained broker nowhere, and every record is still there."""
    cluster = cluster_with()
    controller = cluster.wait_formed()
    bootstrap = cluster.bootstrap()
    topic = "drained"
    kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
               "--partitions", "3", "--replication-factor", "2")
    wait_metadata(bootstrap, topic, lambda m: len(m) == 3 and all(len(isr) == 2 for _, _, isr in m.values()),
                  f"{topic}: three partitions with two in-sync replicas each")
    recs = records("kept", 300)
    delivered = ck_produce(bootstrap, topic, recs)

    # The controller keeps its replicas, so the quorum keeps committing
    # through the drain.
    drained = max(i for i in cluster.nodes if i != controller)
    keep = [i for i in sorted(cluster.nodes) if i != drained]
    _, before, out = describe(bootstrap, topic)
    assert any(drained in ids(r["Replicas"]) for r in before.values()), f"nothing on broker {drained} to drain:\n{out}"

    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    out = reassign(bootstrap, "--generate", "--topics-to-move-json-file", str(topics_file),
                   "--broker-list", ",".join(map(str, keep))).stdout
    lines = out.splitlines()
    current = assignment(json_after(lines, "Current partition replica assignment"))
    assert current == {(topic, p): ids(r["Replicas"]) for p, r in before.items()}, out
    proposal_doc = json_after(lines, "Proposed partition reassignment configuration")
    proposal = assignment(proposal_doc)
    assert sorted(proposal) == [(topic, p) for p in range(3)], out
    for replicas in proposal.values():
        assert len(replicas) == 2 and len(set(replicas)) == 2, f"replication factor not kept: {out}"
        assert set(replicas) <= set(keep), f"proposal names broker {drained} or an unknown one: {out}"

    plan = tmp_path / "drain.json"
    plan.write_text(json.dumps(proposal_doc))
    out = reassign(bootstrap, "--execute", "--reassignment-json-file", str(plan)).stdout
    lines = out.splitlines()
    assert assignment(json_after(lines, "Current partition replica assignment")) == current, out
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1,{topic}-2" in lines, out

    wait_verified(bootstrap, plan, [f"{topic}-{p}" for p in range(3)])
    # Completed means the controller committed the final replicas; every
    # node's metadata then follows.
    header, after, out = describe(bootstrap, topic)
    assert "ReplicationFactor: 2" in header, out
    for p, row in after.items():
        assert ids(row["Replicas"]) == proposal[(topic, p)], out
        assert sorted(ids(row["Isr"])) == sorted(proposal[(topic, p)]), out
        assert int(row["Leader"]) in proposal[(topic, p)], out
        assert "Adding Replicas" not in row and "Removing Replicas" not in row, out
    assert reassign(bootstrap, "--list").stdout.strip() == "No partition reassignments found."
    wait_until(lambda: not partition_dirs(cluster.nodes[drained], topic), SETTLED_TIMEOUT_S,
               f"broker {drained} to delete its replicas of {topic}")

    got = ck_consume(bootstrap, topic, len(recs))
    assert_matches(topic, recs, delivered, sorted(got, key=lambda g: (g.partition, g.offset)))
    verify_clears_throttles(bootstrap, plan, topic, cluster.nodes)

    # The drained broker goes for good: stopped, it stays registered (and
    # fenced) until kafka-cluster unregister removes it.
    cluster.nodes[drained].stop()
    cluster.wait_formed()
    assert drained in listed_brokers(cluster.bootstrap()), "a stopped broker is still registered"
    kafka_tool("kafka-cluster", "unregister", "--bootstrap-server", cluster.bootstrap(), "--id", str(drained))
    wait_until(lambda: drained not in listed_brokers(cluster.bootstrap()), SETTLED_TIMEOUT_S,
               f"broker {drained} to be unregistered")
    again = kafka_tool("kafka-cluster", "unregister", "--bootstrap-server", cluster.bootstrap(),
                       "--id", str(drained), check=False)
    assert again.returncode != 0, f"unregistered twice:\n{again.stdout}\n{again.stderr}"
    assert "is not currently registered" in again.stdout + again.stderr, again


def test_kafka_reassign_partitions_lists_and_cancels_a_reassignment_in_progress(cluster_with, tmp_path):
    """A move held in progress by a paused new replica: --list and
    kafka-topics --describe show its adding and removing replicas, --verify
    says it is in progress, a second --execute is refused, and --cancel
    returns the partition to its original replica, which kept every record."""
    cluster = cluster_with(LONG_SESSION)
    controller = cluster.wait_formed()
    topic = "held"
    kafka_tool("kafka-topics", "--bootstrap-server", cluster.bootstrap(), "--create", "--topic", topic,
               "--partitions", "1", "--replication-factor", "1")
    meta = wait_metadata(cluster.bootstrap(), topic, lambda m: m.get(0, (-1,))[0] > 0, f"{topic} led")
    old = meta[0][0]
    recs = records("held", 200)
    delivered = ck_produce(cluster.bootstrap(), topic, recs)

    # The new replicas: one paused so the move stays in progress (never the
    # active controller, which must keep committing), one that catches up.
    others = [i for i in sorted(cluster.nodes) if i != old]
    paused_id = next(i for i in others if i != controller)
    other = next(i for i in others if i != paused_id)
    live = ",".join(cluster.addresses[i] for i in sorted(cluster.nodes) if i != paused_id)
    command_config = tmp_path / "admin.properties"
    command_config.write_text(COMMAND_CONFIG)
    cc = ["--command-config", str(command_config)]
    plan = tmp_path / "move.json"
    plan.write_text(reassignment_json({(topic, 0): [paused_id, other]}))

    with paused(cluster.nodes[paused_id]):
        out = reassign(live, "--execute", "--reassignment-json-file", str(plan), *cc).stdout
        lines = out.splitlines()
        assert assignment(json_after(lines, "Current partition replica assignment")) == {(topic, 0): [old]}, out
        assert f"Successfully started partition reassignment for {topic}-0" in lines, out

        # The live new replica catches up and joins the ISR; the paused one
        # cannot, so the move waits.
        wait_metadata(live, topic, lambda m: other in m[0][2], f"broker {other} in the ISR of {topic}-0")
        out = reassign(live, "--list", *cc).stdout
        assert out.splitlines() == [
            "Current partition reassignments:",
            f"{topic}-0: replicas: {paused_id},{other},{old}. adding: {paused_id},{other}. removing: {old}.",
        ], out

        header, rows, out = describe(live, topic, *cc)
        for report in ([], ["--under-replicated-partitions"]):
            assert_tarn_topics_says_what_kafka_topics_says(
                live, [*cc, "--describe", "--topic", topic, *report], ["describe", "--topic", topic, *report])
        row = rows[0]
        assert ids(row["Replicas"]) == [paused_id, other, old], out
        assert ids(row["Adding Replicas"]) == [paused_id, other], out
        assert ids(row["Removing Replicas"]) == [old], out
        assert int(row["Leader"]) == old, out
        assert sorted(ids(row["Isr"])) == sorted([old, other]), out

        lines, out = verify_lines(live, plan, *cc)
        assert lines == [f"Reassignment of partition {topic}-0 is still in progress."], out

        out = reassign(live, "--execute", "--reassignment-json-file", str(plan), *cc, check=False)
        assert out.returncode != 0, f"a second --execute without --additional:\n{out.stdout}\n{out.stderr}"
        assert "Cannot execute because there is an existing partition assignment." in out.stdout, out.stdout

        # Kept throttles: clearing them would ask the paused broker too.
        out = reassign(live, "--cancel", "--reassignment-json-file", str(plan), "--preserve-throttles", *cc).stdout
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in out.splitlines(), out
        assert reassign(live, "--list", *cc).stdout.strip() == "No partition reassignments found."
        _, rows, out = describe(live, topic, *cc)
        row = rows[0]
        assert (ids(row["Replicas"]), ids(row["Isr"]), int(row["Leader"])) == ([old], [old], old), out
        assert "Adding Replicas" not in row and "Removing Replicas" not in row, out

    # Resumed, the paused broker learns it is no replica and deletes its
    # copy, as the one that had caught up does.
    for i in (paused_id, other):
        wait_until(lambda: not partition_dirs(cluster.nodes[i], topic), SETTLED_TIMEOUT_S,
                   f"broker {i} to delete its replica of {topic}-0")
    got = ck_consume(cluster.bootstrap(), topic, len(recs))
    assert_matches(topic, recs, delivered, sorted(got, key=lambda g: (g.partition, g.offset)))
    # No reassignment is active any more, so a plain --verify clears the throttles.
    lines, out = verify_lines(cluster.bootstrap(), plan)
    assert lines == [f"There is no active reassignment of partition {topic}-0, "
                     f"but replica set is {old} rather than {paused_id},{other}."], out
    assert "Clearing broker-level throttles on brokers 1,2,3" in out, out
    assert f"Clearing topic-level throttles on topic {topic}" in out, out


def test_tarn_topics_describes_a_stopped_broker_as_kafka_topics_does(cluster_with):
    """A broker stops (not the active controller): its partitions' leaders,
    ISRs and eligible leader replicas (KIP-966) as kafka-topics.sh prints
    them and as `tarn topics` does, line for line, with each report
    filter: a partition it alone held is unavailable and keeps it as
    eligible, one whose ISR fell below min.insync.replicas is listed
    under min ISR, one left at it at min ISR."""
    cluster = cluster_with()
    controller = cluster.wait_formed()
    gone = next(i for i in sorted(cluster.nodes) if i != controller)
    up = [i for i in sorted(cluster.nodes) if i != gone]
    bootstrap = ",".join(cluster.addresses[i] for i in up)
    everyone = ":".join(str(i) for i in [gone, *up])
    for name, assignment, configs in [
        ("sd-alone", str(gone), []),
        ("sd-strict", everyone, ["--config", "min.insync.replicas=3"]),
        ("sd-two", everyone, ["--config", "min.insync.replicas=2"]),
        ("sd-spread", f"{gone}:{up[0]},{up[0]}:{up[1]}", []),
    ]:
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
                   "--replica-assignment", assignment, *configs)
    for name in ["sd-alone", "sd-strict", "sd-two", "sd-spread"]:
        wait_metadata(bootstrap, name, lambda m: all(leader >= 0 and sorted(isr) == sorted(replicas)
                                                     for leader, replicas, isr in m.values()),
                      f"every replica of {name} in sync")
    cluster.nodes[gone].stop()
    for name in ["sd-strict", "sd-two", "sd-spread"]:
        wait_metadata(bootstrap, name, lambda m: all(gone not in isr and leader != gone
                                                     for leader, _, isr in m.values()),
                      f"broker {gone} out of {name}'s ISRs")
    reports = [[], ["--under-replicated-partitions"], ["--unavailable-partitions"],
               ["--under-min-isr-partitions"], ["--at-min-isr-partitions"]]
    for report in reports:
        assert_tarn_topics_says_what_kafka_topics_says(
            bootstrap, ["--describe", "--topic", "sd-.*", *report], ["describe", "--topic", "sd-.*", *report])
    _, rows, out = describe(bootstrap, "sd-alone")
    assert (rows[0]["Leader"], rows[0]["Isr"], rows[0]["Elr"]) == ("none", "", str(gone)), out
    _, rows, out = describe(bootstrap, "sd-strict")
    assert rows[0]["Elr"] == str(gone), out
    cluster.nodes[gone].start()
    cluster.wait_formed()


def test_kafka_leader_election_follows_a_reordered_preferred_replica(cluster_with, tmp_path):
    """Reversing a partition's replicas completes at once and leaves its
    leader where it was; kafka-leader-election (PREFERRED, all partitions)
    then moves it to the new first replica."""
    # The periodic balancer would make the same election on its own; off,
    # the leader moves only when the tool asks.
    cluster = cluster_with([("auto.leader.rebalance.enable", "false")])
    cluster.wait_formed()
    bootstrap = cluster.bootstrap()
    topic = "preferred"
    kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
               "--partitions", "1", "--replication-factor", "2")
    wait_metadata(bootstrap, topic, lambda m: len(m.get(0, (0, [], []))[2]) == 2,
                  f"{topic}-0 with two in-sync replicas")
    _, rows, out = describe(bootstrap, topic)
    first, second = ids(rows[0]["Replicas"])
    assert int(rows[0]["Leader"]) == first, f"a new partition is led by its first replica:\n{out}"
    recs = records("pref", 100)
    delivered = ck_produce(bootstrap, topic, recs)

    plan = tmp_path / "reverse.json"
    plan.write_text(reassignment_json({(topic, 0): [second, first]}))
    out = reassign(bootstrap, "--execute", "--reassignment-json-file", str(plan)).stdout
    assert f"Successfully started partition reassignment for {topic}-0" in out.splitlines(), out
    wait_verified(bootstrap, plan, [f"{topic}-0"])
    _, rows, out = describe(bootstrap, topic)
    row = rows[0]
    assert ids(row["Replicas"]) == [second, first], out
    assert int(row["Leader"]) == first, f"a reorder alone moves no leader:\n{out}"
    assert sorted(ids(row["Isr"])) == sorted([first, second]), out

    out = kafka_tool("kafka-leader-election", "--bootstrap-server", bootstrap,
                     "--election-type", "PREFERRED", "--all-topic-partitions").stdout
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out.splitlines(), out
    _, rows, out = describe(bootstrap, topic)
    assert int(rows[0]["Leader"]) == second, out
    # Once more, nothing is left to elect.
    out = kafka_tool("kafka-leader-election", "--bootstrap-server", bootstrap,
                     "--election-type", "PREFERRED", "--topic", topic, "--partition", "0").stdout
    assert out.splitlines() == [f"Valid replica already elected for partitions {topic}-0"], out

    got = ck_consume(bootstrap, topic, len(recs))
    assert_matches(topic, recs, delivered, sorted(got, key=lambda g: (g.partition, g.offset)))
    verify_clears_throttles(bootstrap, plan, topic, cluster.nodes)


def test_kafka_reassign_partitions_rolls_back_with_the_file_execute_printed(cluster_with, tmp_path):
    """--execute prints the current assignment "to use as the
    --reassignment-json-file option during rollback", log directories
    included (from DescribeLogDirs); executing that file moves the
    partition back, its log-directory part a no-op on a broker's only
    directory."""
    cluster = cluster_with([("auto.leader.rebalance.enable", "false")])
    bootstrap = cluster.bootstrap()
    topic = "rolled-back"
    kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
               "--partitions", "1", "--replication-factor", "1")
    meta = wait_metadata(bootstrap, topic, lambda m: m.get(0, (-1,))[0] > 0, f"{topic} led")
    old = meta[0][0]
    target = min(i for i in cluster.nodes if i != old)
    recs = records("rb", 100)
    delivered = ck_produce(bootstrap, topic, recs)

    plan = tmp_path / "move.json"
    plan.write_text(reassignment_json({(topic, 0): [target]}))
    out = reassign(bootstrap, "--execute", "--reassignment-json-file", str(plan)).stdout
    rollback_doc = json_after(out.splitlines(), "Current partition replica assignment")
    assert assignment(rollback_doc) == {(topic, 0): [old]}, out
    wait_verified(bootstrap, plan, [f"{topic}-0"])
    wait_metadata(bootstrap, topic, lambda m: m[0][1] == [target] and m[0][0] == target,
                  f"{topic}-0 moved to broker {target}")

    rollback = tmp_path / "rollback.json"
    rollback.write_text(json.dumps(rollback_doc))
    out = reassign(bootstrap, "--execute", "--reassignment-json-file", str(rollback)).stdout
    assert f"Successfully started partition reassignment for {topic}-0" in out.splitlines(), out
    wait_verified(bootstrap, rollback, [f"{topic}-0"])
    _, rows, out = describe(bootstrap, topic)
    assert (ids(rows[0]["Replicas"]), ids(rows[0]["Isr"]), int(rows[0]["Leader"])) == ([old], [old], old), out
    got = ck_consume(bootstrap, topic, len(recs))
    assert_matches(topic, recs, delivered, sorted(got, key=lambda g: (g.partition, g.offset)))


def quorum_status(bootstrap, flag="--bootstrap-server"):
    """kafka-metadata-quorum describe --status, as key -> value; through
    a broker, or a controller with flag="--bootstrap-controller"."""
    out = kafka_tool("kafka-metadata-quorum", flag, bootstrap, "describe", "--status")
    status = {}
    for line in out.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith(" "):
            status[key.strip()] = value.strip()
    return status


def quorum_replication(bootstrap):
    """kafka-metadata-quorum describe --replication: node id -> status."""
    out = kafka_tool("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--replication")
    rows = {}
    for line in out.stdout.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = cells[-1]
    return rows


def test_kafka_metadata_quorum_describes_the_quorum_through_any_broker(cluster_with):
    cluster = cluster_with()
    leader = None
    for node_id in cluster.running():
        status = quorum_status(cluster.addresses[node_id])
        assert status["ClusterId"], status
        assert int(status["HighWatermark"]) > 0, status
        voters = json.loads(status["CurrentVoters"])
        assert sorted(v["id"] for v in voters) == [1, 2, 3], status
        assert leader in (None, int(status["LeaderId"])), status
        leader = int(status["LeaderId"])
    rows = quorum_replication(cluster.bootstrap())
    assert rows[leader] == "Leader", rows
    assert sorted(rows) == [1, 2, 3], rows
    assert sorted(s for n, s in rows.items() if n != leader) == ["Follower", "Follower"], rows
    epoch = int(quorum_status(cluster.bootstrap())["LeaderEpoch"])

    cluster.nodes[leader].kill9()
    survivor = cluster.addresses[cluster.running()[0]]

    def new_leader():
        status = quorum_status(survivor)
        if int(status["LeaderId"]) in (-1, leader):
            return None
        return status

    status = wait_until(new_leader, SETTLED_TIMEOUT_S, "a new quorum leader")
    assert int(status["LeaderEpoch"]) > epoch, status


def test_kafka_tools_reach_the_controllers_with_bootstrap_controller(cluster_with):
    """KIP-919: Kafka's tools talk to the controllers themselves when given
    --bootstrap-controller (the admin client's bootstrap.controllers): the
    quorum described as through a broker, the controllers listed as
    endpoints, the cluster id and features read, and a cluster-wide config
    set and read back through a broker."""
    cluster = cluster_with()
    controllers = ",".join(cluster.controller_addresses.values())
    via = ["--bootstrap-controller", controllers]
    status = quorum_status(controllers, flag="--bootstrap-controller")
    through_a_broker = quorum_status(cluster.bootstrap())
    for key in ("ClusterId", "LeaderId", "LeaderEpoch", "CurrentVoters"):
        assert status[key] == through_a_broker[key], (status, through_a_broker)
    leader = int(status["LeaderId"])
    out = kafka_tool("kafka-metadata-quorum", *via, "describe", "--replication")
    assert "Leader" in out.stdout and out.stdout.count("Follower") == 2, out.stdout

    out = kafka_tool("kafka-cluster", "list-endpoints", *via)
    endpoints = {}
    for line in out.stdout.splitlines()[1:]:
        node_id, host, port, _rack, kind = line.split()
        endpoints[int(node_id)] = (f"{host}:{port}", kind)
    assert endpoints == {i: (a, "controller") for i, a in cluster.controller_addresses.items()}, out.stdout

    cluster_id = kafka_tool("kafka-cluster", "cluster-id", *via).stdout
    assert cluster_id.strip() == f"Cluster ID: {status['ClusterId']}", cluster_id
    features = kafka_tool("kafka-features", *via, "describe").stdout
    assert "Feature: metadata.version" in features and "FinalizedVersionLevel: 3.3-IV3" in features, features
    # Updates reach the active controller, from the controllers and from a
    # broker that is not it (forwarded), whose answer names it.
    follower = next(i for i in cluster.addresses if i != leader)
    for through in (via, ["--bootstrap-server", cluster.addresses[follower]]):
        out = kafka_tool("kafka-features", *through, "upgrade", "--metadata", "3.3-IV3")
        assert "metadata.version was upgraded to 7." in out.stdout, out.stdout
        out = kafka_tool("kafka-features", *through, "upgrade", "--metadata", "3.4-IV0", check=False)
        assert out.returncode != 0, out.stdout
        assert f"Local controller {leader} only supports versions 7" in out.stdout, out.stdout

    kafka_tool("kafka-configs", *via, "--alter", "--entity-type", "brokers", "--entity-default",
               "--add-config", "log.retention.ms=7200000")
    out = kafka_tool("kafka-configs", "--bootstrap-server", cluster.addresses[leader], "--describe",
                     "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms=7200000" in out.stdout, out.stdout


def meta_directory_id(data_dir):
    """The directory.id `tarn storage format` wrote to meta.properties."""
    for line in (data_dir / "meta.properties").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "directory.id":
            return value.strip()
    raise AssertionError(f"no directory.id in {data_dir}/meta.properties")


def test_kafka_metadata_quorum_adds_and_removes_controllers(tmp_path):
    """Kafka 4's documented way to grow a dynamic quorum: the first
    controller formatted --standalone, two more --no-initial-controllers
    and started, then `kafka-metadata-quorum add-controller` with each
    one's own properties (the tool reads its node id, listener and
    meta.properties' directory id from them) through a broker. The three
    are then the quorum: it survives the first one's death, and
    `remove-controller` takes the dead one out, then the active one, which
    goes on as a broker (a learner of the quorum) until it is unregistered."""
    ports = [(free_port(), free_port()) for _ in range(3)]
    bootstrap_controllers = ",".join(f"127.0.0.1:{c}" for _, c in ports)
    cluster_id = subprocess.run([str(tarn_bin()), "storage", "random-uuid"], capture_output=True,
                                text=True, check=True).stdout.strip()
    nodes, configs = {}, {}
    for i, (kafka, controller) in enumerate(ports, start=1):
        scratch = tmp_path / f"node{i}"
        listeners = f"PLAINTEXT://127.0.0.1:{kafka},CONTROLLER://127.0.0.1:{controller}"
        settings = [
            ("node.id", str(i)),
            ("process.roles", "broker,controller"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.bootstrap.servers", bootstrap_controllers),
        ]
        node = TarnBroker(scratch, settings=settings, listeners=listeners)
        config = scratch / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in settings)
                          + f"listeners={listeners}\nlog.dirs={node.data_dir}\n")
        start = ["--standalone"] if i == 1 else ["--no-initial-controllers"]
        subprocess.run([str(tarn_bin()), "storage", "format", "-t", cluster_id, *start,
                        "--config", str(config)], capture_output=True, text=True, check=True)
        nodes[i], configs[i] = node, config
    address = {i: f"127.0.0.1:{ports[i - 1][0]}" for i in nodes}
    controller_address = {i: f"127.0.0.1:{ports[i - 1][1]}" for i in nodes}
    try:
        for node in nodes.values():
            node.start()

        def voters(via):
            return sorted(v["id"] for v in json.loads(quorum_status(via)["CurrentVoters"]))

        assert voters(address[1]) == [1]
        # A dynamic quorum runs at kraft.version 1 (KIP-853), and says so.
        features = kafka_tool("kafka-features", "--bootstrap-server", address[1], "describe").stdout
        kraft = next(line.split() for line in features.splitlines() if "kraft.version" in line)
        assert kraft[1:9] == ["kraft.version", "SupportedMinVersion:", "0", "SupportedMaxVersion:", "1",
                              "FinalizedVersionLevel:", "1", "Epoch:"], features
        # Through a broker, then as Kafka's docs do it, through the
        # controllers themselves (KIP-919).
        for i, via in ((2, ["--bootstrap-server", address[1]]),
                       (3, ["--bootstrap-controller", controller_address[1]])):
            out = kafka_tool("kafka-metadata-quorum", *via, "--command-config", str(configs[i]),
                             "add-controller")
            assert f"Added controller {i}" in out.stdout, out.stdout
            assert meta_directory_id(nodes[i].data_dir) in out.stdout, out.stdout
        again = kafka_tool("kafka-metadata-quorum", "--bootstrap-server", address[1],
                           "--command-config", str(configs[2]), "add-controller", check=False)
        assert again.returncode != 0 and "DuplicateVoterException" in again.stderr, again.stderr
        assert voters(address[2]) == [1, 2, 3]
        # Each voter is its id and the directory it was formatted with.
        out = kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[2],
                         "describe", "--replication")
        for i in nodes:
            assert meta_directory_id(nodes[i].data_dir) in out.stdout, out.stdout

        # Node 3 loses its directory and is formatted again: a new directory
        # id, an empty log. It is not the voter 3 the quorum knows and refuses
        # to act as it (it would vote and acknowledge with a log it lost), so
        # that voter falls behind, until it is removed and the new one added.
        lost = meta_directory_id(nodes[3].data_dir)
        nodes[3].stop()
        shutil.rmtree(nodes[3].data_dir)
        subprocess.run([str(tarn_bin()), "storage", "format", "-t", cluster_id,
                        "--no-initial-controllers", "--config", str(configs[3])],
                       capture_output=True, text=True, check=True)
        nodes[3].start()
        kafka_tool("kafka-topics", "--bootstrap-server", address[1], "--create", "--topic",
                   "after-the-loss", "--partitions", "1", "--replication-factor", "1")

        def voter_3_row():
            out = kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[1],
                             "describe", "--replication")
            return next(line.split() for line in out.stdout.splitlines()
                        if line.split()[:1] == ["3"])

        def behind():
            row = voter_3_row()
            return row if int(row[3]) > 0 else None

        row = wait_until(behind, SETTLED_TIMEOUT_S, "voter 3 behind the high watermark")
        assert row[1] == lost, row
        time.sleep(2)
        assert int(voter_3_row()[3]) > 0, "the node formatted again acted as the lost voter"
        kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[1],
                   "remove-controller", "--controller-id", "3", "--controller-directory-id", lost)
        out = kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[1],
                         "--command-config", str(configs[3]), "add-controller")
        assert meta_directory_id(nodes[3].data_dir) in out.stdout, out.stdout
        assert voters(address[2]) == [1, 2, 3]
        wait_for(lambda: all((view_or_none(address[i]) or [None])[0] == [1, 2, 3] for i in nodes),
                 "every node to list the three brokers")

        nodes[1].kill9()
        kafka_tool("kafka-topics", "--bootstrap-server", address[2], "--create", "--topic", "grown",
                   "--partitions", "2", "--replication-factor", "2")
        status = quorum_status(controller_address[3], flag="--bootstrap-controller")
        assert int(status["LeaderId"]) in (2, 3), status
        # A voter is its id and directory: another directory id names none.
        other = kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[3],
                           "remove-controller", "--controller-id", "1",
                           "--controller-directory-id", meta_directory_id(nodes[2].data_dir),
                           check=False)
        assert other.returncode != 0 and "VoterNotFoundException" in other.stderr, other.stderr
        out = kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[3],
                         "remove-controller",
                         "--controller-id", "1",
                         "--controller-directory-id", meta_directory_id(nodes[1].data_dir))
        assert "Removed KRaft controller 1" in out.stdout, out.stdout
        assert voters(address[3]) == [2, 3]
        assert voters(address[2]) == [2, 3]
        # The active controller itself: it hands over, the other removes it.
        active = int(quorum_status(address[2])["LeaderId"])
        out = kafka_tool("kafka-metadata-quorum", "--bootstrap-server", address[2], "remove-controller",
                         "--controller-id", str(active),
                         "--controller-directory-id", meta_directory_id(nodes[active].data_dir))
        assert f"Removed KRaft controller {active}" in out.stdout, out.stdout
        rest = 5 - active
        assert voters(address[rest]) == [rest]
        # Still running, it goes on as a broker that follows the metadata
        # (an observer of the quorum, as Kafka's removed controller is).
        kafka_tool("kafka-topics", "--bootstrap-server", address[rest], "--create", "--topic",
                   "after-the-removal", "--partitions", "1", "--replication-factor", "1")
        wait_for(lambda: "after-the-removal" in (view_or_none(address[active]) or [None, None, {}])[2],
                 "the removed controller's broker to see a topic created after")
        assert quorum_replication(address[rest]) == {rest: "Leader", active: "Observer"}
        # And it can be a voter again.
        out = kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[rest],
                         "--command-config", str(configs[active]), "add-controller")
        assert f"Added controller {active}" in out.stdout, out.stdout
        assert voters(address[active]) == sorted([rest, active])
        # Removed again, stopped and unregistered: it leaves the quorum's
        # learners as well.
        kafka_tool("kafka-metadata-quorum", "--bootstrap-controller", controller_address[rest],
                   "remove-controller", "--controller-id", str(active),
                   "--controller-directory-id", meta_directory_id(nodes[active].data_dir))
        assert quorum_replication(address[rest]) == {rest: "Leader", active: "Observer"}
        nodes[active].stop()
        kafka_tool("kafka-cluster", "unregister", "--bootstrap-server", address[rest], "--id", str(active))
        assert quorum_replication(address[rest]) == {rest: "Leader"}
    finally:
        for node in nodes.values():
            print(node.logs())
        for i in (2, 3):
            if nodes[i].proc is not None:
                nodes[i].stop()
        for node in nodes.values():
            if node.proc is not None:
                node.kill9()
        for node in nodes.values():
            node.assert_no_panic()
