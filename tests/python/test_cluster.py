"""Real clients against a three-node cluster: kafka-python and confluent-kafka
create a topic whose partitions are led by all three brokers, produce keyed
records to it and read every one back in a consumer group; a SIGKILLed
broker disappears from the survivors' metadata; and both keep producing
(acks=all, replication factor 3) through a partition leader's SIGKILL, with
every acknowledged record read back (aiokafka and kafkajs too).

Each node is a broker and a controller (a voter of the metadata quorum) on
fixed loopback ports, with its data dir under tmp_path; the fixture stops
every node still running with SIGTERM (exit 0 required) and fails the test
on any panic in any node's stderr. Waits are generous bounds on
"eventually"; times are never asserted (bench/cluster.sh measures them).
"""

import asyncio
import itertools
import json
import os
import socket
import time
import uuid
from collections import Counter

import confluent_kafka
from aiokafka import AIOKafkaProducer
import kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic as CkNewTopic
from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic
from kafka.conn import BrokerConnection
from kafka.protocol.metadata import MetadataRequest

from conftest import TarnBroker, wait_until
from tarn_clients import Got, Rec, assert_matches, ck_consume, ck_produce, kp_consume, kp_produce
from test_kafkajs import run_node

NODES = 3
# Long enough for elections, broker sessions (9 s) and a slow machine.
FORMED_TIMEOUT_S = 60
CONSUME_TIMEOUT_S = 60
PARTITIONS = 6
RECORDS = 120


# Ports are handed out below Linux's ephemeral range (32768 on), so no
# outgoing connection takes one while its node is down; each test process
# starts at its own offset, and a port is checked free by binding it.
PORT_FIRST = 20_000
PORT_SPAN = 12_000
_handed_out = itertools.count()


def free_port() -> int:
    offset = (os.getpid() * 7) % PORT_SPAN
    while True:
        n = next(_handed_out)
        assert n < PORT_SPAN, "ran out of ports to hand out"
        port = PORT_FIRST + (offset + n) % PORT_SPAN
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def view(address: str):
    """What the broker at `address` itself says (not whichever broker a
    client's bootstrap picks): (broker ids, controller id, {topic: leaders})."""
    host, port = address.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), socket.AF_INET, request_timeout_ms=5000)
    try:
        if not conn.connect_blocking(timeout=5):
            raise ConnectionError(f"connect to {address}")
        future = conn.send(MetadataRequest[1](topics=None))
        deadline = time.monotonic() + 5
        while not future.is_done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Metadata from {address}")
            # The connection hands back (response, future) pairs; resolving
            # them is the caller's job (KafkaClient's, elsewhere).
            for response, done in conn.recv():
                done.success(response)
            time.sleep(0.01)
        if future.failed():
            raise future.exception
        response = future.value
    finally:
        conn.close()
    brokers = sorted(b[0] for b in response.brokers)
    topics = {}
    for error, name, _internal, partitions in response.topics:
        if error == 0:
            topics[name] = [leader for _, _, leader, _, _ in sorted(partitions, key=lambda p: p[1])]
    return brokers, response.controller_id, topics


# The last failure of view_or_none per address, for the message of a wait that times out.
LAST_ERROR = {}


def view_or_none(address: str):
    """view(), or None while the node cannot answer (starting, electing)."""
    try:
        return view(address)
    except (OSError, TimeoutError, kafka.errors.KafkaError) as e:
        LAST_ERROR[address] = repr(e)
        return None


def wait_for(predicate, what: str):
    try:
        return wait_until(predicate, FORMED_TIMEOUT_S, what, 0.2)
    except AssertionError as e:
        raise AssertionError(f"{e}; last errors by address: {LAST_ERROR}") from None


class TarnCluster:
    """Three `tarn serve` nodes forming one metadata quorum."""

    def __init__(self, scratch):
        kafka_ports = [free_port() for _ in range(NODES)]
        controller_ports = [free_port() for _ in range(NODES)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{controller_ports[i]}" for i in range(NODES))
        self.addresses = {i + 1: f"127.0.0.1:{kafka_ports[i]}" for i in range(NODES)}
        self.controller_addresses = {i + 1: f"127.0.0.1:{controller_ports[i]}" for i in range(NODES)}
        self.nodes = {
            i + 1: TarnBroker(
                scratch / f"node{i + 1}",
                settings=[
                    ("node.id", str(i + 1)),
                    ("process.roles", "broker,controller"),
                    ("controller.listener.names", "CONTROLLER"),
                    ("controller.quorum.voters", voters),
                ],
                listeners=f"PLAINTEXT://127.0.0.1:{kafka_ports[i]},CONTROLLER://127.0.0.1:{controller_ports[i]}",
            )
            for i in range(NODES)
        }

    def running(self):
        return [i for i, node in self.nodes.items() if node.proc is not None]

    def bootstrap(self) -> str:
        return ",".join(self.addresses[i] for i in self.running())

    def wait_formed(self) -> int:
        """Until every running node lists exactly the running brokers and
        one controller among them; returns that controller."""
        want = self.running()

        def formed():
            views = [view_or_none(self.addresses[i]) for i in want]
            if any(v is None or v[0] != want for v in views):
                return None
            controllers = {v[1] for v in views}
            return controllers.pop() if len(controllers) == 1 and controllers <= set(want) else None

        return wait_for(formed, f"nodes {want} to form one cluster")

    def wait_for_topic(self, topic: str, partitions: int):
        """Until every running node sees every partition of `topic` led; the leaders."""
        leaders = None
        for i in self.running():
            def seen():
                v = view_or_none(self.addresses[i])
                found = v and v[2].get(topic)
                return found if found and len(found) == partitions and min(found) > 0 else None
            found = wait_for(seen, f"node {i} to see {topic}")
            assert leaders is None or found == leaders, f"node {i} sees leaders {found}, another {leaders}"
            leaders = found
        return leaders

    def kill_all(self):
        """SIGKILL whatever still runs (after a failure: nothing may outlive the test)."""
        for node in self.nodes.values():
            if node.proc is not None:
                node.kill9()

    def stop_order(self):
        """The running nodes, the active controller last."""
        controller = self.wait_formed()
        return [i for i in self.running() if i != controller] + [controller]

    def logs(self) -> str:
        return "\n".join(f"===== node {i} =====\n{node.logs()}" for i, node in self.nodes.items())


@pytest.fixture
def cluster(tmp_path):
    c = TarnCluster(tmp_path)
    try:
        for node in c.nodes.values():
            node.start()
        c.wait_formed()
    except BaseException:
        print(c.logs())
        c.kill_all()
        raise
    yield c
    print(c.logs())
    try:
        for i in c.running():
            c.nodes[i].assert_alive()
        # The active controller last: a node that outlives its quorum waits
        # out its controlled shutdown and an unanswered heartbeat (up to
        # 40 s) before it exits, which the harness's stop counts as a hang.
        for i in c.stop_order():
            c.nodes[i].stop()
    finally:
        c.kill_all()
    for node in c.nodes.values():
        node.assert_no_panic()


def keyed_records(count: int, tag: str):
    return [Rec(f"{tag}-key-{i % 40}".encode(), f"{tag}-value-{i}".encode(), []) for i in range(count)]


def assert_keys_stay_put(topic, recs, delivered):
    """Records with one key all went to one partition, and every partition got some."""
    partition_of = {}
    for rec, (partition, _) in zip(recs, delivered):
        assert partition_of.setdefault(rec.key, partition) == partition, f"{topic}: key {rec.key} split"
    used = Counter(p for p, _ in delivered)
    assert sorted(used) == list(range(PARTITIONS)), f"{topic}: records by partition {dict(used)}"


def test_kafka_python_across_three_leaders(cluster):
    topic = "kp-cluster"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    try:
        admin.create_topics([KpNewTopic(topic, PARTITIONS, 1)], timeout_ms=30000)
    finally:
        admin.close()
    leaders = cluster.wait_for_topic(topic, PARTITIONS)
    assert sorted(set(leaders)) == [1, 2, 3], f"{topic} leaders {leaders}"

    recs = keyed_records(RECORDS, "kp")
    delivered = kp_produce(cluster.bootstrap(), topic, recs)
    assert_keys_stay_put(topic, recs, delivered)

    group = f"kp-cluster-group-{uuid.uuid4().hex[:8]}"
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap(), group_id=group,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    got = []
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < len(recs):
            assert time.monotonic() < deadline, f"consumed {len(got)} of {len(recs)} from {topic}"
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset, Rec(r.key, r.value, [])) for r in records]
        consumer.commit()
    finally:
        consumer.close()
    assert_matches(topic, recs, delivered, [Got(*g) for g in sorted(got, key=lambda g: g[:2])])

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    try:
        committed = admin.list_consumer_group_offsets(group)
    finally:
        admin.close()
    ends = Counter(p for p, _ in delivered)
    assert {tp.partition: om.offset for tp, om in committed.items()} == dict(ends), committed


def test_confluent_kafka_across_three_leaders(cluster):
    topic = "ck-cluster"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    futures = admin.create_topics([CkNewTopic(topic, PARTITIONS, 1)], request_timeout=30)
    futures[topic].result(timeout=60)
    leaders = cluster.wait_for_topic(topic, PARTITIONS)
    assert sorted(set(leaders)) == [1, 2, 3], f"{topic} leaders {leaders}"

    recs = keyed_records(RECORDS, "ck")
    delivered = ck_produce(cluster.bootstrap(), topic, recs)
    assert_keys_stay_put(topic, recs, delivered)

    group = f"ck-cluster-group-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap(),
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic])
    got, errors = [], []
    try:
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < len(recs):
            assert time.monotonic() < deadline, (
                f"consumed {len(got)} of {len(recs)} from {topic}; errors {errors[:20]}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(str(msg.error()))
                continue
            got.append((msg.partition(), msg.offset(), Rec(msg.key(), msg.value(), [])))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [confluent_kafka.TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    assert_matches(topic, recs, delivered, [Got(*g) for g in sorted(got, key=lambda g: g[:2])])
    ends = Counter(p for p, _ in delivered)
    assert {tp.partition: tp.offset for tp in committed} == dict(ends), committed


def test_killed_broker_leaves_the_survivors_metadata(cluster):
    controller = cluster.wait_formed()
    victim = max(i for i in cluster.nodes if i != controller)
    survivors = [i for i in cluster.nodes if i != victim]
    cluster.nodes[victim].kill9()
    for i in survivors:
        def gone():
            v = view_or_none(cluster.addresses[i])
            return v if v is not None and v[0] == survivors else None
        brokers, seen_controller, _ = wait_for(gone, f"node {i} to stop listing killed broker {victim}")
        assert seen_controller == controller, f"node {i}: controller {seen_controller}, was {controller}"
    # The survivors still take metadata changes.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([CkNewTopic("after-kill", 2, 1)], request_timeout=30)["after-kill"].result(timeout=60)
    leaders = cluster.wait_for_topic("after-kill", 2)
    assert set(leaders) <= set(survivors), f"after-kill placed on the dead broker: {leaders}"


async def aio_produce(bootstrap: str, topic: str, recs):
    """Produces with aiokafka (acks=all, idempotent); (partition, offset) per record."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                request_timeout_ms=40000, retry_backoff_ms=500)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=rec.value, key=rec.key) for rec in recs]
        return [((m := await f).partition, m.offset) for f in futures]
    finally:
        await producer.stop()


def test_clients_produce_and_consume_through_a_leaders_sigkill(cluster):
    """aiokafka, kafkajs, confluent-kafka and kafka-python keep producing (acks=all, to a topic
    of replication factor 3 and min.insync.replicas=2) while the leader of a
    partition is SIGKILLed, see only retriable errors, and every record they
    had acknowledged, before or after the kill, is read back once."""
    topic = "failover"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    new = CkNewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new], request_timeout=30)[topic].result(timeout=60)
    leaders = cluster.wait_for_topic(topic, 3)
    victim = leaders[0]

    before_ck = keyed_records(60, "ck-before")
    before_kp = keyed_records(60, "kp-before")
    delivered = ck_produce(cluster.bootstrap(), topic, before_ck)
    delivered += kp_produce(cluster.bootstrap(), topic, before_kp)

    cluster.nodes[victim].kill9()
    survivors = [i for i in cluster.nodes if i != victim]
    # Both clients produce through the failover: they retry the leader's
    # NOT_LEADER_OR_FOLLOWER and connection errors until the new leader,
    # elected from the ISR once the controller fences the dead broker.
    after_aio = keyed_records(60, "aio-after")
    after_js = keyed_records(60, "js-after")
    after_ck = keyed_records(60, "ck-after")
    after_kp = keyed_records(60, "kp-after")
    delivered += asyncio.run(aio_produce(cluster.bootstrap(), topic, after_aio))
    out = run_node("kafkajs_failover.js", cluster.bootstrap(), topic, "js-after", "60")
    assert out.returncode == 0, f"kafkajs failed (exit {out.returncode})\n{out.stderr}\n{out.stdout}"
    delivered += [tuple(d) for d in json.loads(out.stdout.strip().splitlines()[-1])["delivered"]]
    delivered += ck_produce(cluster.bootstrap(), topic, after_ck, **{"message.timeout.ms": 60000})
    delivered += kp_produce(cluster.bootstrap(), topic, after_kp, retries=30, retry_backoff_ms=500,
                            request_timeout_ms=20000, max_block_ms=60000)
    for i in survivors:
        def moved():
            v = view_or_none(cluster.addresses[i])
            found = v and v[2].get(topic)
            return found if found and victim not in found and min(found) > 0 else None
        wait_for(moved, f"node {i} to see new leaders of {topic}")

    recs = before_ck + before_kp + after_aio + after_js + after_ck + after_kp
    expected = {position: rec for rec, position in zip(recs, delivered)}
    assert len(expected) == len(recs), f"{topic}: two records acknowledged at one position"
    for name, consume in (("confluent-kafka", ck_consume), ("kafka-python", kp_consume)):
        got = consume(cluster.bootstrap(), topic, len(recs))
        by_position = {(g.partition, g.offset): g.rec for g in got}
        assert len(by_position) == len(recs), f"{name}: read {len(by_position)} of {len(recs)}"
        assert by_position == expected, f"{name}: records differ from what was acknowledged"
