"""Topic and broker configs, partition growth and record deletion through
kafka-python's KafkaAdminClient, read back through the `tarn configs` CLI
and across a restart."""

import pytest
from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions
from kafka.errors import InvalidPartitionsError

from tarn_clients import ck_consume, ck_partitions, ck_produce, sample_records

DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
DEFAULT_CONFIG = 5


def admin_for(broker):
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)


@pytest.fixture
def admin(broker):
    client = admin_for(broker)
    yield client
    client.close()


def topic_configs(admin, topic):
    """{name: (value, source, [(synonym, value, source)])} of a topic."""
    [response] = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True
    )
    [(error_code, error_message, _, name, entries)] = response.resources
    assert error_code == 0, error_message
    assert name == topic
    return {e[0]: (e[1], e[3], [tuple(s) for s in e[5]]) for e in entries}


def alter(admin, resource_type, name, configs):
    response = admin.alter_configs([ConfigResource(resource_type, name, configs=configs)])
    [(error_code, error_message, _, _)] = response.resources
    return error_code, error_message


def test_alter_describe_and_restart(broker, admin):
    broker.create_topic("py-cfg")
    before = topic_configs(admin, "py-cfg")
    assert before["retention.ms"][:2] == ("604800000", DEFAULT_CONFIG)
    # As Kafka: log.retention.ms has no default of its own (Kafka derives it
    # from log.retention.hours), so no default synonym is listed for it,
    # while segment.bytes lists log.segment.bytes's.
    assert before["retention.ms"][2] == []
    assert ("log.segment.bytes", "1073741824", DEFAULT_CONFIG) in before["segment.bytes"][2]

    assert alter(admin, ConfigResourceType.TOPIC, "py-cfg",
                 {"retention.ms": "1234", "cleanup.policy": "compact,delete"}) == (0, None)
    assert alter(admin, ConfigResourceType.BROKER, "", {"log.segment.bytes": "2097152"}) == (0, None)

    def check(admin):
        configs = topic_configs(admin, "py-cfg")
        assert configs["retention.ms"][:2] == ("1234", DYNAMIC_TOPIC_CONFIG)
        assert configs["retention.ms"][2][0] == ("retention.ms", "1234", DYNAMIC_TOPIC_CONFIG)
        assert configs["cleanup.policy"][:2] == ("compact,delete", DYNAMIC_TOPIC_CONFIG)
        assert configs["segment.bytes"][:2] == ("2097152", DYNAMIC_DEFAULT_BROKER_CONFIG)
        out = broker.cli("configs", "--bootstrap-server", broker.bootstrap, "--describe",
                         "--entity-type", "topics", "--entity-name", "py-cfg")
        assert out.returncode == 0, out.stderr
        assert "retention.ms=1234 sensitive=false" in out.stdout, out.stdout

    check(admin)
    admin.close()
    broker.restart()
    admin = admin_for(broker)
    try:
        check(admin)
    finally:
        admin.close()


def test_bad_config_changes_nothing(broker, admin):
    broker.create_topic("py-strict")
    code, message = alter(admin, ConfigResourceType.TOPIC, "py-strict",
                          {"retention.ms": "5", "retention.msx": "5"})
    assert code == 40 and "retention.msx" in message, (code, message)
    code, message = alter(admin, ConfigResourceType.TOPIC, "py-strict",
                          {"retention.ms": "5", "max.message.bytes": "-3"})
    assert code == 40 and "max.message.bytes" in message, (code, message)
    code, message = alter(admin, ConfigResourceType.BROKER, "", {"num.partitions": "4"})
    assert code == 42 and "num.partitions" in message, (code, message)
    configs = topic_configs(admin, "py-strict")
    assert configs["retention.ms"][:2] == ("604800000", DEFAULT_CONFIG)
    assert configs["max.message.bytes"][:2] == ("1048588", DEFAULT_CONFIG)


def test_create_partitions_and_delete_records(broker, admin):
    broker.create_topic("py-grow", 1)
    admin.create_partitions({"py-grow": NewPartitions(3)})
    assert ck_partitions(broker.bootstrap, "py-grow") == [0, 1, 2]
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"py-grow": NewPartitions(2)})
    assert ck_partitions(broker.bootstrap, "py-grow") == [0, 1, 2]

    broker.create_topic("py-trim", 1)
    recs = sample_records(10, "trim")
    ck_produce(broker.bootstrap, "py-trim", recs)
    result = admin.delete_records({TopicPartition("py-trim", 0): 6})
    assert result[TopicPartition("py-trim", 0)]["low_watermark"] == 6
    remaining = ck_consume(broker.bootstrap, "py-trim", 4)
    assert [g.offset for g in remaining] == [6, 7, 8, 9]
    assert remaining[0].rec == recs[6]
