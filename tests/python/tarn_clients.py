"""Thin wrappers over confluent-kafka and kafka-python for the suite.

A record is a ``Rec(key, value, headers)`` with bytes-or-None key and value
and headers as a list of ``(str, bytes-or-None)``. These consumers use
manual assignment: kafka-python runs with ``group_id=None``; confluent-kafka
needs a ``group.id`` to ``assign`` but commits nothing. Group membership is
tested in test_groups.py.
"""

import time
from typing import List, NamedTuple, Optional, Tuple

import confluent_kafka
import kafka
from kafka import TopicPartition as KpTopicPartition

TIMEOUT_S = 30


class Rec(NamedTuple):
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]]


class Got(NamedTuple):
    partition: int
    offset: int
    rec: Rec


def sample_records(count: int, tag: str, null_header_values: bool = True) -> List[Rec]:
    """A mix of keyed/unkeyed, null/empty values and headers. kafka-python
    cannot send a header with a null value: pass null_header_values=False
    for records it produces."""
    out = []
    for i in range(count):
        # kafka-python refuses a record whose key and value are both null.
        key = None if i % 4 == 0 and i % 7 != 0 else f"{tag}-key-{i % 5}".encode()
        if i % 7 == 0:
            value = None
        elif i % 7 == 1:
            value = b""
        else:
            value = f"{tag}-value-{i}".encode() + bytes(range(i % 256))
        headers = []
        if i % 3 == 1:
            headers = [("h1", f"{tag}-{i}".encode()), ("bin", bytes([0, 255, i % 256]))]
        elif i % 3 == 2:
            headers = [("dup", b"a"), ("dup", b"b"), ("null", None if null_header_values else b"")]
        out.append(Rec(key, value, headers))
    return out


# ---------------------------------------------------------------- confluent

def ck_produce(bootstrap: str, topic: str, recs: List[Rec], **config) -> List[Tuple[int, int]]:
    """Produces with confluent-kafka; returns (partition, offset) per record,
    failing if any record was not acknowledged."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 20000}
    conf.update(config)
    producer = confluent_kafka.Producer(conf)
    results = [None] * len(recs)

    def report(index):
        def on_delivery(err, msg):
            results[index] = err if err is not None else (msg.partition(), msg.offset())
        return on_delivery

    for i, rec in enumerate(recs):
        while True:
            try:
                producer.produce(topic, value=rec.value, key=rec.key,
                                 headers=rec.headers or None, on_delivery=report(i))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(TIMEOUT_S)
    assert remaining == 0, f"{remaining} records still queued after flush"
    for i, result in enumerate(results):
        assert isinstance(result, tuple), f"record #{i} to {topic} not delivered: {result}"
    return results


def ck_consumer(bootstrap: str, **config) -> confluent_kafka.Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "tarn-py-unused-group",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
    }
    conf.update(config)
    return confluent_kafka.Consumer(conf)


def ck_partitions(bootstrap: str, topic: str) -> List[int]:
    consumer = ck_consumer(bootstrap)
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        entry = metadata.topics[topic]
        assert entry.error is None, f"metadata error for {topic}: {entry.error}"
        return sorted(entry.partitions)
    finally:
        consumer.close()


def ck_consume(bootstrap: str, topic: str, expected: int) -> List[Got]:
    consumer = ck_consumer(bootstrap)
    try:
        consumer.assign([
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in ck_partitions(bootstrap, topic)
        ])
        got, errors = [], []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < expected:
            assert time.monotonic() < deadline, (
                f"consumed {len(got)} of {expected} from {topic}; errors: {errors[:20]}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(str(msg.error()))
                continue
            got.append(Got(msg.partition(), msg.offset(),
                           Rec(msg.key(), msg.value(), list(msg.headers() or []))))
        return got
    finally:
        consumer.close()


# ------------------------------------------------------------- kafka-python

def kp_produce(bootstrap: str, topic: str, recs: List[Rec], **config) -> List[Tuple[int, int]]:
    conf = {"bootstrap_servers": bootstrap, "acks": "all", "linger_ms": 5,
            "request_timeout_ms": 20000}
    conf.update(config)
    producer = kafka.KafkaProducer(**conf)
    try:
        futures = [producer.send(topic, value=rec.value, key=rec.key, headers=rec.headers or None)
                   for rec in recs]
        producer.flush(timeout=TIMEOUT_S)
        out = []
        for future in futures:
            metadata = future.get(timeout=TIMEOUT_S)
            out.append((metadata.partition, metadata.offset))
        return out
    finally:
        producer.close(timeout=10)


def kp_consume(bootstrap: str, topic: str, expected: int) -> List[Got]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        partitions = kafka_partitions(consumer, topic)
        tps = [KpTopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < expected:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {expected} from {topic}"
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    got.append(Got(r.partition, r.offset,
                                   Rec(r.key, r.value, [(k, v) for k, v in (r.headers or [])])))
        return got
    finally:
        consumer.close()


def kafka_partitions(consumer: kafka.KafkaConsumer, topic: str) -> List[int]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return sorted(partitions)
        assert time.monotonic() < deadline, f"no partitions for {topic}"
        time.sleep(0.1)


# ------------------------------------------------------------------ checks

def assert_matches(topic: str, recs: List[Rec], delivered: List[Tuple[int, int]], got: List[Got]):
    """Everything acknowledged is read back, byte-identical, at the
    acknowledged position, with offsets contiguous from 0 per partition."""
    expected = {}
    for rec, position in zip(recs, delivered):
        assert position not in expected, f"{topic}: two records acknowledged at {position}"
        expected[position] = rec
    assert len(got) == len(recs), f"{topic}: read {len(got)} records, produced {len(recs)}"
    next_offset = {}
    for g in got:
        want_offset = next_offset.get(g.partition, 0)
        assert g.offset == want_offset, f"{topic}/{g.partition}: offset {g.offset}, expected {want_offset}"
        next_offset[g.partition] = want_offset + 1
        assert (g.partition, g.offset) in expected, f"{topic}: unexpected record at {g.partition}/{g.offset}"
        assert g.rec == expected[(g.partition, g.offset)], f"{topic}: record at {g.partition}/{g.offset}"
