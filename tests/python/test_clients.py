"""Round trips through confluent-kafka and kafka-python, across clients, and
across a SIGKILL of the broker."""

import pytest

from tarn_clients import (
    assert_matches,
    ck_consume,
    ck_partitions,
    ck_produce,
    kp_consume,
    kp_produce,
    sample_records,
)


@pytest.mark.parametrize("acks", ["all", "1"])
def test_confluent_round_trip(broker, acks):
    topic = f"ck-round-trip-{acks}"
    broker.create_topic(topic, 3)
    assert ck_partitions(broker.bootstrap, topic) == [0, 1, 2]
    recs = sample_records(200, "ck")
    delivered = ck_produce(broker.bootstrap, topic, recs, acks=acks)
    assert_matches(topic, recs, delivered, ck_consume(broker.bootstrap, topic, len(recs)))


def test_kafka_python_round_trip(broker):
    topic = "kp-round-trip"
    broker.create_topic(topic, 3)
    recs = sample_records(200, "kp", null_header_values=False)
    delivered = kp_produce(broker.bootstrap, topic, recs)
    assert_matches(topic, recs, delivered, kp_consume(broker.bootstrap, topic, len(recs)))


def test_kafka_python_to_confluent(broker):
    topic = "kp-to-ck"
    broker.create_topic(topic, 2)
    recs = sample_records(100, "kp2ck", null_header_values=False)
    delivered = kp_produce(broker.bootstrap, topic, recs)
    assert_matches(topic, recs, delivered, ck_consume(broker.bootstrap, topic, len(recs)))


def test_confluent_to_kafka_python(broker):
    topic = "ck-to-kp"
    broker.create_topic(topic, 2)
    recs = sample_records(100, "ck2kp")
    delivered = ck_produce(broker.bootstrap, topic, recs)
    assert_matches(topic, recs, delivered, kp_consume(broker.bootstrap, topic, len(recs)))


def test_idempotent_confluent_producer(broker):
    topic = "ck-idempotent"
    broker.create_topic(topic, 1)
    recs = sample_records(2000, "idem")
    delivered = ck_produce(broker.bootstrap, topic, recs, **{"enable.idempotence": True})
    # One partition, idempotent: acknowledged in send order, no gaps.
    assert delivered == [(0, i) for i in range(len(recs))]
    assert_matches(topic, recs, delivered, ck_consume(broker.bootstrap, topic, len(recs)))


def test_kill9_restart_keeps_acknowledged_records(broker):
    topic = "kill9"
    broker.create_topic(topic, 3)
    recs = sample_records(150, "before")
    delivered = ck_produce(broker.bootstrap, topic, recs)
    more = sample_records(150, "before-kp", null_header_values=False)
    delivered += kp_produce(broker.bootstrap, topic, more, acks=1)
    recs += more

    broker.kill9()
    broker.start()
    assert topic in broker.list_topics()
    got = ck_consume(broker.bootstrap, topic, len(recs))
    got.sort(key=lambda g: (g.partition, g.offset))
    assert_matches(topic, recs, delivered, got)

    # The recovered log keeps appending where it left off.
    after = sample_records(30, "after")
    delivered += ck_produce(broker.bootstrap, topic, after)
    recs += after
    broker.restart()
    got = kp_consume(broker.bootstrap, topic, len(recs))
    got.sort(key=lambda g: (g.partition, g.offset))
    assert_matches(topic, recs, delivered, got)
