"""Round trips through confluent-kafka and kafka-python, across clients, and
across a SIGKILL of the broker."""

import confluent_kafka
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


def test_transactional_producers_are_refused_at_once_with_the_reason(broker):
    """Tarn has no transaction coordinator yet. A transactional producer
    must fail at its first step with an error that says so, fatal in the
    client, rather than retry a coordinator lookup until its timeout:
    librdkafka's init_transactions is given far longer than the refusal
    takes, and must raise the authorization error, not a timeout."""
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": "tarn-txn"})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        producer.init_transactions(120)
    error = refused.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal(), error
    # The idempotent producer beside it is unaffected.
    topic = "ck-beside-txn"
    broker.create_topic(topic, 1)
    recs = sample_records(10, "beside")
    delivered = ck_produce(broker.bootstrap, topic, recs, **{"enable.idempotence": True})
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
