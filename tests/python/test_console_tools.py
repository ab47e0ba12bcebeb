"""`tarn produce` and `tarn consume` (Kafka's console producer and consumer)
against the Python clients: kcat and confluent-kafka read what `tarn produce`
wrote, keys and headers included; `tarn consume` prints what confluent-kafka
wrote in Kafka's console format."""

import shutil
import subprocess

import pytest

from conftest import CLI_TIMEOUT_S, tarn_bin
from tarn_clients import Rec, ck_consume, ck_produce

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
