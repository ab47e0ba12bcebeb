"""Topic administration through kafka-python's KafkaAdminClient and the
`tarn topics` CLI, checked against each other."""

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

from conftest import wait_until
from tarn_clients import ck_consume, ck_partitions, ck_produce, sample_records


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    yield client
    client.close()


def test_create_and_delete_topics(broker, admin):
    admin.create_topics([
        NewTopic("admin-a", num_partitions=4, replication_factor=1),
        NewTopic("admin-b", num_partitions=1, replication_factor=1),
    ])
    wait_until(lambda: {"admin-a", "admin-b"} <= set(admin.list_topics()), 10, "topics in metadata")
    assert {"admin-a", "admin-b"} <= set(broker.list_topics())
    assert ck_partitions(broker.bootstrap, "admin-a") == [0, 1, 2, 3]

    recs = sample_records(20, "admin")
    ck_produce(broker.bootstrap, "admin-a", recs)
    assert len(ck_consume(broker.bootstrap, "admin-a", len(recs))) == len(recs)

    admin.delete_topics(["admin-a"])
    wait_until(lambda: "admin-a" not in admin.list_topics(), 10, "admin-a to disappear")
    listed = broker.list_topics()
    assert "admin-a" not in listed and "admin-b" in listed

    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["admin-a"])


def test_duplicate_topic_is_rejected(broker, admin):
    admin.create_topics([NewTopic("dup", num_partitions=2, replication_factor=1)])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("dup", num_partitions=5, replication_factor=1)])
    assert ck_partitions(broker.bootstrap, "dup") == [0, 1]

    out = broker.topics("create", "--topic", "dup", "--partitions", "1")
    assert out.returncode != 0, f"CLI created an existing topic: {out.stdout}"
    assert out.stderr.strip(), "CLI failed without saying why"


def test_invalid_topic_names_are_rejected(broker, admin):
    for name in ["bad/name", "..", "x" * 250]:
        with pytest.raises(InvalidTopicError):
            admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
        out = broker.topics("create", "--topic", name, "--partitions", "1")
        assert out.returncode != 0, f"CLI accepted invalid topic name {name!r}"
    listed = broker.list_topics()
    assert not any("/" in t or t == ".." for t in listed), listed


def test_describe_log_dirs_reports_partition_sizes(broker, admin):
    """DescribeLogDirs (kafka-log-dirs.sh): one data directory, every hosted
    partition with the bytes of its segment files, no lag, nothing else."""
    admin.create_topics([NewTopic("sized", num_partitions=2, replication_factor=1),
                         NewTopic("other", num_partitions=1, replication_factor=1)])
    wait_until(lambda: {"sized", "other"} <= set(admin.list_topics()), 10, "topics in metadata")
    ck_produce(broker.bootstrap, "sized", sample_records(50, "sized"), **{"partitioner": "murmur2"})

    response = admin.describe_log_dirs()
    assert len(response.log_dirs) == 1
    error_code, log_dir, topics = response.log_dirs[0]
    assert error_code == 0
    assert log_dir == str(broker.data_dir)
    sizes = {(name, p[0]): (p[1], p[2], p[3]) for name, parts in topics for p in parts}
    for partition in (0, 1):
        on_disk = sum(f.stat().st_size for f in (broker.data_dir / f"sized-{partition}").glob("*.log"))
        assert sizes[("sized", partition)] == (on_disk, 0, False), (partition, sizes)
    assert sum(sizes[("sized", p)][0] for p in (0, 1)) > 50 * 10, "records were stored"
    assert sizes[("other", 0)] == (0, 0, False)


def test_acl_requests_say_security_is_disabled(broker, admin):
    """No authorizer yet: DescribeAcls, CreateAcls and DeleteAcls answer
    SECURITY_DISABLED, as Kafka does without one."""
    from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ResourcePattern, ResourcePatternFilter, ResourceType
    from kafka.errors import SecurityDisabledError
    from kafka.admin.acl_resource import ACLResourcePatternType

    topic_filter = ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY)
    any_acl = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY, resource_pattern=topic_filter)
    with pytest.raises(SecurityDisabledError):
        admin.describe_acls(any_acl)
    acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
              permission_type=ACLPermissionType.ALLOW,
              resource_pattern=ResourcePattern(ResourceType.TOPIC, "t", ACLResourcePatternType.LITERAL))
    created = admin.create_acls([acl])
    assert created["succeeded"] == [] and len(created["failed"]) == 1, created
    assert created["failed"][0][1] is SecurityDisabledError, created
    deleted = admin.delete_acls([any_acl])
    assert len(deleted) == 1 and deleted[0][2] is SecurityDisabledError, deleted
