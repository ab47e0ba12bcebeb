"""aiokafka against the real broker: its admin client creates and deletes a
3-partition topic, AIOKafkaProducer writes keyed records with headers with
every codec aiokafka has (none and gzip built in; snappy, lz4 and zstd
through cramjam), idempotent and not, and an AIOKafkaConsumer in a group
reads back exactly what was acknowledged, commits, and a second member of
the same group resumes from the committed offsets."""

import asyncio
from typing import Dict, List, Tuple

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.codec import has_lz4, has_snappy, has_zstd

from tarn_clients import Got, Rec, assert_matches, sample_records
from test_compression import CODEC_IDS, stored_codecs

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
RECORDS = 150
RESUME_RECORDS = 40
TIMEOUT_S = 60
# After a member has everything it expects, it keeps polling this long: any
# extra record (a duplicate, or one from before the committed offset) fails.
EXTRA_POLL_S = 1.0


def test_cramjam_provides_every_codec():
    # Without cramjam aiokafka refuses snappy, lz4 and zstd; the codec
    # tests below would then test nothing.
    assert has_snappy() and has_lz4() and has_zstd()


async def create_topic(bootstrap: str, topic: str):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        errors = [(t[0], t[1]) for t in response.topic_errors]
        assert errors == [(topic, 0)], f"create_topics: {response}"
        described = await admin.describe_topics([topic])
        assert len(described) == 1 and described[0]["error_code"] == 0, described
        assert sorted(p["partition"] for p in described[0]["partitions"]) == list(range(PARTITIONS))
        assert topic in await admin.list_topics()
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, topic: str):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.delete_topics([topic])
        assert [(t[0], t[1]) for t in response.topic_error_codes] == [(topic, 0)], response
        assert topic not in await admin.list_topics()
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, recs: List[Rec], codec, idempotent: bool):
    """Sends every record (a few hundred in flight at once, so batches hold
    many records); returns (partition, offset) per record."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", compression_type=codec,
        enable_idempotence=idempotent, linger_ms=5, request_timeout_ms=20000,
    )
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value=rec.value, key=rec.key, headers=rec.headers)
            for rec in recs
        ]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
        return [(m.partition, m.offset) for m in metadata]
    finally:
        await producer.stop()


async def consume_group(bootstrap: str, topic: str, group: str, expected: int) -> List[Got]:
    """One member of `group` reads until it has `expected` records (then polls
    a little longer for extras), commits, and leaves the group."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=1000,
    )
    await consumer.start()
    try:
        got: List[Got] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT_S
        extra_until = None
        while extra_until is None or loop.time() < extra_until:
            assert loop.time() < deadline, f"group {group} read {len(got)} of {expected} from {topic}"
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for r in records:
                    got.append(Got(r.partition, r.offset, Rec(r.key, r.value, list(r.headers))))
            if extra_until is None and len(got) >= expected:
                extra_until = loop.time() + EXTRA_POLL_S
        assert len(got) == expected, f"group {group} read {len(got)} records, expected {expected}"
        await consumer.commit()
        return got
    finally:
        await consumer.stop()


async def committed(bootstrap: str, topic: str, group: str) -> Dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


def end_offsets(delivered: List[Tuple[int, int]]) -> Dict[int, int]:
    ends = {p: 0 for p in range(PARTITIONS)}
    for partition, offset in delivered:
        ends[partition] = max(ends[partition], offset + 1)
    return ends


def assert_same_records(topic: str, recs: List[Rec], delivered, got: List[Got]):
    """Exactly the acknowledged records, each at its acknowledged position,
    in offset order per partition."""
    expected = dict(zip(delivered, recs))
    assert len(expected) == len(recs), f"{topic}: two records acknowledged at one position"
    positions = [(g.partition, g.offset) for g in got]
    assert sorted(positions) == sorted(expected), f"{topic}: read {sorted(positions)}"
    for g in got:
        assert g.rec == expected[(g.partition, g.offset)], f"{topic}: record at {g.partition}/{g.offset}"
    for p in range(PARTITIONS):
        offsets = [g.offset for g in got if g.partition == p]
        assert offsets == sorted(offsets), f"{topic}/{p}: offsets out of order: {offsets}"


async def produce_consume_resume(broker, codec, idempotent: bool):
    bootstrap, name = broker.bootstrap, codec or "none"
    topic, group = f"aiokafka-{name}", f"aiokafka-{name}-group"
    await create_topic(bootstrap, topic)
    recs = sample_records(RECORDS, name)
    delivered = await produce(bootstrap, topic, recs, codec, idempotent)
    assert len({p for p, _ in delivered}) == PARTITIONS, f"keys should spread over partitions: {delivered}"
    first = await consume_group(bootstrap, topic, group, len(recs))
    assert_matches(topic, recs, delivered, first)
    assert await committed(bootstrap, topic, group) == end_offsets(delivered)

    more = sample_records(RESUME_RECORDS, f"{name}-resume")
    more_delivered = await produce(bootstrap, topic, more, codec, idempotent)
    second = await consume_group(bootstrap, topic, group, len(more))
    assert_same_records(topic, more, more_delivered, second)
    assert await committed(bootstrap, topic, group) == end_offsets(delivered + more_delivered)
    # The topic's compression.type is `producer`: batches are stored as sent.
    assert set(stored_codecs(broker, topic)) == {CODEC_IDS[name]}
    await delete_topic(bootstrap, topic)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_codec_group_commit_resume(broker_factory, codec):
    # Each run has two group generations: start them at once rather than
    # after Kafka's default 3 s (the Java and kafkajs tests keep it).
    broker = broker_factory([("group.initial.rebalance.delay.ms", "0")])
    # The idempotent producer for none and zstd, the plain one for the rest.
    idempotent = codec in (None, "zstd")
    asyncio.run(produce_consume_resume(broker, codec, idempotent))
    broker.assert_alive()
