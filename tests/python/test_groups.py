"""Consumer groups with the Python clients: kafka-python and
confluent-kafka members in the same group and in separate groups, a
killed consumer process whose partitions move to the survivor,
cooperative-sticky rebalancing, kcat's balanced consumer, and committed
offsets across a restart and a crash."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import confluent_kafka
import kafka
import pytest
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from conftest import wait_until
from tarn_clients import Rec, ck_produce

SESSION_TIMEOUT_MS = 3000
# The broker allows short sessions and starts a group's first rebalance at
# once, so that these tests run in seconds.
GROUP_SETTINGS = [
    ("group.initial.rebalance.delay.ms", "0"),
    ("group.min.session.timeout.ms", "1000"),
]
REBALANCE_WAIT_S = 20
CK_GROUP_CONFIG = {
    "session.timeout.ms": SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": 300,
    "max.poll.interval.ms": 10000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
}


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory(GROUP_SETTINGS)


def produce_values(bootstrap, topic, tag, count):
    """Keyed by their values, so the records spread over every partition
    (unkeyed, librdkafka's sticky partitioner may put them all in one, and
    a partition nobody reads from has no committed offset to show)."""
    values = [f"{tag}-{i}".encode() for i in range(count)]
    ck_produce(bootstrap, topic, [Rec(v, v, []) for v in values])
    return set(values)


class Member(threading.Thread):
    """Polls one group consumer on its own thread, committing after it
    has processed each batch, until stopped; then closes it (LeaveGroup)."""

    def __init__(self, kind, bootstrap, group, topic, **config):
        super().__init__(daemon=True)
        self.kind, self.topic = kind, topic
        self.values, self.errors = [], []
        self._assignment = None
        self._halt = threading.Event()
        if kind == "ck":
            conf = {"bootstrap.servers": bootstrap, "group.id": group, **CK_GROUP_CONFIG}
            conf.update(config)
            self.consumer = confluent_kafka.Consumer(conf)
            self.consumer.subscribe([topic])
        else:
            conf = dict(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                        heartbeat_interval_ms=300, max_poll_interval_ms=10000)
            conf.update(config)
            self.consumer = kafka.KafkaConsumer(topic, **conf)
        self.start()

    def assignment(self):
        return self._assignment

    def run(self):
        try:
            while not self._halt.is_set():
                if self.kind == "ck":
                    self._poll_ck()
                else:
                    self._poll_kp()
        except Exception as e:  # reported by the test through self.errors
            self.errors.append(repr(e))
        finally:
            self.consumer.close()

    def _poll_ck(self):
        msg = self.consumer.poll(0.1)
        # The assignment is published before the values read under it, so
        # that a test which sees every value also sees the assignment.
        self._assignment = {tp.partition for tp in self.consumer.assignment()}
        if msg is not None:
            if msg.error() is not None:
                self.errors.append(str(msg.error()))
            else:
                self.values.append(msg.value())
                self.consumer.commit(message=msg, asynchronous=False)

    def _poll_kp(self):
        batches = self.consumer.poll(timeout_ms=100)
        self._assignment = {tp.partition for tp in self.consumer.assignment()}
        for records in batches.values():
            self.values.extend(r.value for r in records)
        if batches:
            self.consumer.commit()

    def stop(self):
        self._halt.set()
        self.join(timeout=30)
        assert not self.is_alive(), f"{self.kind} member did not stop"
        assert not self.errors, f"{self.kind} member errors: {self.errors[:10]}"


def balanced(members, partitions, sizes):
    assignments = [m.assignment() for m in members]
    if any(a is None for a in assignments):
        return False
    union = set().union(*assignments)
    disjoint = sum(len(a) for a in assignments) == len(union)
    return disjoint and union == set(range(partitions)) and sorted(map(len, assignments)) == sorted(sizes)


def describe(broker, group):
    out = broker.cli("groups", "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    rows, in_table = [], False
    for line in out.stdout.splitlines():
        cols = line.split()
        if cols[:1] == ["GROUP"]:
            in_table = True
        elif in_table and len(cols) == 9:
            rows.append(dict(zip(["group", "topic", "partition", "current", "end", "lag",
                                  "consumer", "host", "client"], cols)))
    return rows


def test_kafka_python_and_confluent_share_a_group(gbroker):
    topic = "mixed"
    gbroker.create_topic(topic, 4)
    expected = produce_values(gbroker.bootstrap, topic, "m", 200)
    ck = Member("ck", gbroker.bootstrap, "mixed-g", topic)
    kp = Member("kp", gbroker.bootstrap, "mixed-g", topic)
    try:
        wait_until(lambda: balanced([ck, kp], 4, [2, 2]), REBALANCE_WAIT_S, "2 partitions each")
        wait_until(lambda: expected <= set(ck.values) | set(kp.values), REBALANCE_WAIT_S,
                   "every record consumed")
        last = []

        def caught_up():
            last[:] = describe(gbroker, "mixed-g")
            return all(r["lag"] == "0" for r in last)

        try:
            wait_until(caught_up, REBALANCE_WAIT_S, "commits up to the log end")
        except AssertionError as e:
            raise AssertionError(f"{e}: {last}; ck {sorted(ck.assignment() or [])} "
                                 f"{len(ck.values)} read {ck.errors}; kp {sorted(kp.assignment() or [])} "
                                 f"{len(kp.values)} read {kp.errors}") from None
        rows = describe(gbroker, "mixed-g")
        assert len(rows) == 4, rows
        assert all(int(r["end"]) > 0 for r in rows), f"a partition got no records: {rows}"
        assert len({r["consumer"] for r in rows}) == 2, rows
        assert {int(r["current"]) for r in rows} == {int(r["end"]) for r in rows}
    finally:
        ck.stop()
        kp.stop()


def test_separate_groups_each_read_everything(gbroker):
    topic = "separate"
    gbroker.create_topic(topic, 3)
    expected = produce_values(gbroker.bootstrap, topic, "s", 120)
    ck = Member("ck", gbroker.bootstrap, "sep-ck", topic)
    kp = Member("kp", gbroker.bootstrap, "sep-kp", topic)
    try:
        wait_until(lambda: set(ck.values) == expected and set(kp.values) == expected,
                   REBALANCE_WAIT_S, "both groups to read every record")
        assert ck.assignment() == {0, 1, 2} and kp.assignment() == {0, 1, 2}
    finally:
        ck.stop()
        kp.stop()
    assert len(ck.values) == len(kp.values) == 120, "no duplicates within a group"


VICTIM = """
import sys, confluent_kafka
bootstrap, group, topic = sys.argv[1:4]
c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
    "session.timeout.ms": %d, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 10000,
    "auto.offset.reset": "earliest"})
c.subscribe([topic])
last = None
while True:
    c.poll(0.1)
    now = sorted(tp.partition for tp in c.assignment())
    if now != last:
        print("ASSIGNED", ",".join(map(str, now)), flush=True)
        last = now
""" % SESSION_TIMEOUT_MS


def test_a_killed_consumer_process_hands_its_partitions_over(gbroker):
    topic = "victim"
    gbroker.create_topic(topic, 4)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, gbroker.bootstrap, "victim-g", topic],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(victim.stdout), daemon=True).start()
    survivor = Member("ck", gbroker.bootstrap, "victim-g", topic)
    try:
        wait_until(lambda: survivor.assignment() is not None and len(survivor.assignment()) == 2
                   and any(l.strip() not in ("ASSIGNED", "") for l in lines[-1:]),
                   REBALANCE_WAIT_S, "the group to split 2/2")
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed_at = time.monotonic()
        wait_until(lambda: survivor.assignment() == {0, 1, 2, 3}, REBALANCE_WAIT_S,
                   "the survivor to own every partition")
        took = time.monotonic() - killed_at
        assert took < SESSION_TIMEOUT_MS / 1000 + 6, f"took {took:.1f}s after the kill"
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
        survivor.stop()


def test_cooperative_sticky_with_confluent(gbroker):
    topic = "coop-py"
    gbroker.create_topic(topic, 6)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    a = Member("ck", gbroker.bootstrap, "coop-py-g", topic, **coop)
    b = Member("ck", gbroker.bootstrap, "coop-py-g", topic, **coop)
    c = None
    try:
        wait_until(lambda: balanced([a, b], 6, [3, 3]), REBALANCE_WAIT_S, "3 partitions each")
        kept = a.assignment()
        c = Member("ck", gbroker.bootstrap, "coop-py-g", topic, **coop)
        wait_until(lambda: balanced([a, b, c], 6, [2, 2, 2]), REBALANCE_WAIT_S, "2 partitions each")
        assert a.assignment() <= kept, "cooperative-sticky moves only what it must"
    finally:
        for m in (a, b, c):
            if m is not None:
                m.stop()


def test_kcat_balanced_consumer_commits_its_offsets(gbroker):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs it)")
    topic = "kcat-group"
    gbroker.create_topic(topic, 3)
    expected = produce_values(gbroker.bootstrap, topic, "k", 60)
    out = subprocess.run([kcat, "-b", gbroker.bootstrap, "-G", "kcat-g", "-o", "beginning", "-e",
                          "-f", "%s\\n", topic], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert {v.encode() for v in out.stdout.split()} == expected, out.stderr
    rows = describe(gbroker, "kcat-g")
    assert [(r["partition"], r["lag"]) for r in rows] == [("0", "0"), ("1", "0"), ("2", "0")], rows
    assert sum(int(r["current"]) for r in rows) == 60


def test_committed_offsets_survive_restart_and_kill9(gbroker):
    topic = "kp-durable"
    gbroker.create_topic(topic, 2)
    produce_values(gbroker.bootstrap, topic, "d", 20)
    tps = [KpTopicPartition(topic, p) for p in (0, 1)]

    def committed():
        consumer = kafka.KafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id="kp-durable-g",
                                       enable_auto_commit=False)
        try:
            return [consumer.committed(tp) for tp in tps]
        finally:
            consumer.close()

    consumer = kafka.KafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id="kp-durable-g",
                                   enable_auto_commit=False)
    try:
        consumer.assign(tps)
        consumer.commit({tps[0]: OffsetAndMetadata(4, "", -1), tps[1]: OffsetAndMetadata(9, "", -1)})
    finally:
        consumer.close()
    assert committed() == [4, 9]
    gbroker.restart()
    assert committed() == [4, 9], "after a clean restart"
    gbroker.kill9()
    gbroker.start()
    assert committed() == [4, 9], "after kill -9"


def test_admin_clients_see_and_manage_groups(gbroker):
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    topic = "admin-groups"
    gbroker.create_topic(topic, 2)
    produce_values(gbroker.bootstrap, topic, "x", 20)
    member = Member("ck", gbroker.bootstrap, "admin-active", topic)
    try:
        wait_until(lambda: member.assignment() == {0, 1}, REBALANCE_WAIT_S, "the member to join")
        wait_until(lambda: len(member.values) == 20, REBALANCE_WAIT_S, "the member to consume")
        ck_admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        # Offsets for a group without members (AlterConsumerGroupOffsets).
        req = confluent_kafka.ConsumerGroupTopicPartitions(
            "admin-idle", [confluent_kafka.TopicPartition(topic, 0, 7)])
        result = ck_admin.alter_consumer_group_offsets([req])["admin-idle"].result(timeout=20)
        assert [(tp.partition, tp.offset, tp.error) for tp in result.topic_partitions] == [(0, 7, None)]

        listed = ck_admin.list_consumer_groups(request_timeout=20).result(timeout=20)
        assert {g.group_id for g in listed.valid} == {"admin-active", "admin-idle"}
        stable = ck_admin.list_consumer_groups(
            request_timeout=20,
            states={confluent_kafka.ConsumerGroupState.STABLE}).result(timeout=20)
        assert [g.group_id for g in stable.valid] == ["admin-active"]
        described = ck_admin.describe_consumer_groups(["admin-active"])["admin-active"].result(timeout=20)
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        assert described.partition_assignor == "range"
        assigned = {tp.partition for m in described.members for tp in m.assignment.topic_partitions}
        assert assigned == {0, 1}
        offsets = ck_admin.list_consumer_group_offsets(
            [confluent_kafka.ConsumerGroupTopicPartitions("admin-active")])["admin-active"].result(timeout=20)
        assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == sorted(
            (int(r["partition"]), int(r["end"])) for r in describe(gbroker, "admin-active"))

        kp_admin = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap, request_timeout_ms=20000)
        try:
            assert {g[0] for g in kp_admin.list_consumer_groups()} == {"admin-active", "admin-idle"}
            (desc,) = kp_admin.describe_consumer_groups(["admin-active"])
            assert desc.state == "Stable" and len(desc.members) == 1
            kp_offsets = kp_admin.list_consumer_group_offsets("admin-idle")
            assert {tp.partition: o.offset for tp, o in kp_offsets.items()} == {0: 7}
            deleted = dict(kp_admin.delete_consumer_groups(["admin-idle", "admin-active"]))
            assert deleted["admin-idle"] is None or deleted["admin-idle"].errno == 0, deleted
            assert deleted["admin-active"].errno == 68, deleted  # NON_EMPTY_GROUP
        finally:
            kp_admin.close()
        remaining = ck_admin.list_consumer_groups(request_timeout=20).result(timeout=20)
        assert {g.group_id for g in remaining.valid} == {"admin-active"}
    finally:
        member.stop()
