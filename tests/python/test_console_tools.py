"""`tarn produce` and `tarn consume` (Kafka's console producer and consumer)
against the Python clients: kcat and confluent-kafka read what `tarn produce`
wrote, keys and headers included; `tarn consume` prints what confluent-kafka
wrote in Kafka's console format; and `tarn consume --group` shares a
consumer group with a confluent-kafka member that leads it."""

import shutil
import signal
import subprocess
import threading

import pytest

from conftest import CLI_TIMEOUT_S, tarn_bin, wait_until
from tarn_clients import Rec, ck_consume, ck_produce
from test_groups import GROUP_SETTINGS, REBALANCE_WAIT_S, Member, describe, produce_values

KCAT = shutil.which("kcat")


def tarn(*args, stdin=None):
    return subprocess.run([str(tarn_bin()), *args], input=stdin, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


def test_kcat_and_confluent_kafka_read_what_tarn_produce_wrote(broker):
    if KCAT is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs it)")
    topic = "console-keys"
    broker.create_topic(topic, 1)
    lines = ["trace:t1,user:ann\tk1\tfirst", "trace:t2\tk2\tsecond", "trace:t3\tk1\tthird"]
    out = tarn("produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--property", "parse.key=true", "--property", "parse.headers=true",
               "--compression-codec", "lz4", stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and out.stderr == ""

    out = subprocess.run([KCAT, "-b", broker.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning",
                          "-f", "%o %k=%s %h\\n"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "0 k1=first trace=t1,user=ann",
        "1 k2=second trace=t2",
        "2 k1=third trace=t3",
    ], out.stderr

    got = ck_consume(broker.bootstrap, topic, 3)
    assert [g.rec for g in got] == [
        Rec(b"k1", b"first", [("trace", b"t1"), ("user", b"ann")]),
        Rec(b"k2", b"second", [("trace", b"t2")]),
        Rec(b"k1", b"third", [("trace", b"t3")]),
    ]


def test_tarn_consume_prints_confluent_kafka_records_as_kafka_does(broker):
    topic = "console-print"
    broker.create_topic(topic, 1)
    ck_produce(broker.bootstrap, topic, [
        Rec(b"k", b"v", [("h", b"x"), ("n", None)]),
        Rec(None, b"unkeyed", []),
        Rec(b"tombstone", None, []),
    ])
    out = tarn("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--from-beginning", "--max-messages", "3",
               "--property", "print.key=true", "--property", "print.headers=true",
               "--property", "print.offset=true")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "Offset:0\th:x,n:null\tk\tv",
        "Offset:1\tNO_HEADERS\tnull\tunkeyed",
        "Offset:2\tNO_HEADERS\ttombstone\tnull",
    ]
    assert out.stderr == "Processed a total of 3 messages\n"


class Lines(threading.Thread):
    """Collects the lines a process prints on one pipe."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.lines = pipe, []
        self.start()

    def run(self):
        for line in self.pipe:
            self.lines.append(line.rstrip("\n"))


def test_tarn_consume_and_confluent_kafka_share_a_group(broker_factory):
    broker = broker_factory(GROUP_SETTINGS)
    topic, group = "console-shared", "console-shared-g"
    broker.create_topic(topic, 4)
    # confluent-kafka joins first and leads: it assigns for tarn too.
    ck = Member("ck", broker.bootstrap, group, topic)
    tarn_proc = None
    try:
        wait_until(lambda: ck.assignment() == {0, 1, 2, 3}, REBALANCE_WAIT_S,
                   "confluent-kafka to own every partition")
        tarn_proc = subprocess.Popen(
            [str(tarn_bin()), "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
             "--group", group, "--from-beginning", "--property", "print.partition=true"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = Lines(tarn_proc.stdout), Lines(tarn_proc.stderr)

        def shared():
            rows = describe(broker, group)
            owners = {r["consumer"] for r in rows}
            return len(ck.assignment() or ()) == 2 and len(rows) == 4 and len(owners) == 2
        wait_until(shared, REBALANCE_WAIT_S, "tarn and confluent-kafka to own two partitions each")
        ck_partitions = set(ck.assignment())

        first = produce_values(broker.bootstrap, topic, "first", 200)
        by_tarn = {}

        def read_everything():
            for line in out.lines:
                partition, value = line.split("\t", 1)
                by_tarn.setdefault(value.encode(), []).append(int(partition.removeprefix("Partition:")))
            return first <= set(ck.values) | set(by_tarn)
        wait_until(read_everything, REBALANCE_WAIT_S, "the two members to read every record")
        tarn_partitions = {p for ps in by_tarn.values() for p in ps}
        assert tarn_partitions and tarn_partitions.isdisjoint(ck_partitions), (tarn_partitions, ck_partitions)

        # Ctrl-C: tarn commits what it printed and leaves; confluent-kafka
        # takes its partitions over from tarn's commits.
        tarn_proc.send_signal(signal.SIGTERM)
        assert tarn_proc.wait(timeout=CLI_TIMEOUT_S) == 128 + signal.SIGTERM, err.lines
        out.join(timeout=CLI_TIMEOUT_S)
        err.join(timeout=CLI_TIMEOUT_S)
        assert err.lines == [f"Processed a total of {len(out.lines)} messages"], err.lines
        assert len(out.lines) == len(by_tarn), "tarn printed a record twice"
        wait_until(lambda: ck.assignment() == {0, 1, 2, 3}, REBALANCE_WAIT_S,
                   "confluent-kafka to take tarn's partitions over")
        second = produce_values(broker.bootstrap, topic, "second", 100)
        wait_until(lambda: second <= set(ck.values), REBALANCE_WAIT_S,
                   "confluent-kafka to read the new records")
    finally:
        if tarn_proc is not None and tarn_proc.poll() is None:
            tarn_proc.kill()
            tarn_proc.wait()
        ck.stop()
    assert not set(by_tarn) & set(ck.values), "records read by both members"
    assert sorted(ck.values + list(by_tarn)) == sorted(first | second), "a record was read twice or lost"
    rows = describe(broker, group)
    assert len(rows) == 4 and all(r["lag"] == "0" for r in rows), rows
