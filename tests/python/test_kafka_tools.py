"""Apache Kafka's own command-line tools pointed at Tarn, each with its output
checked, and the segment format contract both ways: Kafka's kafka-dump-log
reads Tarn's `.log`, `.index` and `.timeindex` files, and Tarn serves a
partition directory that Apache Kafka wrote.

The tools are the classes behind Kafka's bin/*.sh scripts, run from the jars
that scripts/kafka.sh resolves from Maven Central (Kafka 4.4.0); the test
command resolves them before pytest runs."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import confluent_kafka
import pytest

from conftest import REPO, tarn_bin, wait_until
from tarn_clients import Rec, assert_matches, ck_consume, ck_produce, sample_records

KAFKA_SH = REPO / "scripts" / "kafka.sh"
TOOL_TIMEOUT_S = 180


def kafka_tool(name, *args, stdin=None, check=True):
    out = subprocess.run([str(KAFKA_SH), "tool", name, *args], input=stdin, capture_output=True,
                         text=True, timeout=TOOL_TIMEOUT_S)
    if check:
        assert out.returncode == 0, f"{name} {args}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def on(broker):
    return ["--bootstrap-server", broker.bootstrap]


def describe_rows(stdout):
    """The partition lines of kafka-topics --describe, as dicts."""
    rows = []
    for line in stdout.splitlines():
        if not line.startswith("\tTopic:"):
            continue
        fields = line.strip().split("\t")
        rows.append(dict(f.split(": ", 1) if ": " in f else (f.rstrip(":"), "") for f in fields))
    return rows


def test_kafka_topics_creates_lists_describes_alters_and_deletes(broker):
    kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "kt", "--partitions", "3",
               "--replication-factor", "1", "--config", "retention.ms=3600000")
    listed = kafka_tool("kafka-topics", *on(broker), "--list").stdout.split()
    assert "kt" in listed
    out = kafka_tool("kafka-topics", *on(broker), "--describe", "--topic", "kt").stdout
    header = out.splitlines()[0]
    assert "PartitionCount: 3" in header and "ReplicationFactor: 1" in header, out
    assert "retention.ms=3600000" in header, out
    rows = describe_rows(out)
    assert [r["Partition"] for r in rows] == ["0", "1", "2"], out
    assert all(r["Leader"] == "1" and r["Replicas"] == "1" and r["Isr"] == "1" for r in rows), out

    kafka_tool("kafka-topics", *on(broker), "--alter", "--topic", "kt", "--partitions", "5")
    out = kafka_tool("kafka-topics", *on(broker), "--describe", "--topic", "kt").stdout
    assert len(describe_rows(out)) == 5, out

    # Kafka's refusals come back as Kafka's messages, with a failing exit.
    out = kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "kt", "--partitions", "1",
                     check=False)
    assert out.returncode != 0 and "already exists" in (out.stdout + out.stderr), out
    out = kafka_tool("kafka-topics", *on(broker), "--alter", "--topic", "kt", "--partitions", "2",
                     check=False)
    assert out.returncode != 0 and "InvalidPartitionsException" in (out.stdout + out.stderr), out

    kafka_tool("kafka-topics", *on(broker), "--delete", "--topic", "kt")
    wait_until(lambda: "kt" not in kafka_tool("kafka-topics", *on(broker), "--list").stdout.split(),
               30, "kt to be gone")


def by_topic(stdout):
    """kafka-topics output lines in topic-name order: Kafka prints each
    topic's lines together but the topics in its hash map's order, Tarn by
    name. The sort is stable, so each topic keeps its own lines' order."""
    def name(line):
        field = line.split("\t")[1 if line.startswith("\t") else 0]
        return field.split(": ", 1)[1] if field.startswith("Topic: ") else line
    return sorted(stdout.splitlines(), key=name)


def assert_tarn_says_what_kafka_says(bootstrap, tool, kafka_args, tarn_args, tarn_view, kafka_view):
    """`tarn TARN_ARGS` and Kafka's `tool` with `kafka_args` against the
    same broker: both succeed or both fail, and when they succeed their
    standard output, seen through `tarn_view` and `kafka_view` (which put
    what Kafka prints in hash order into Tarn's order), is the same."""
    kafka = kafka_tool(tool, "--bootstrap-server", bootstrap, *kafka_args, check=False)
    tarn = subprocess.run([str(tarn_bin()), *tarn_args, "--bootstrap-server", bootstrap],
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    assert (tarn.returncode == 0) == (kafka.returncode == 0), (kafka_args, kafka, tarn)
    if kafka.returncode == 0:
        assert tarn_view(tarn.stdout) == kafka_view(kafka.stdout), \
            f"{kafka_args}\n{tool}:\n{kafka.stdout}\ntarn:\n{tarn.stdout}"
    return kafka


def assert_tarn_topics_says_what_kafka_topics_says(bootstrap, kafka_args, tarn_args):
    """`tarn topics` and kafka-topics.sh: the same lines, topics in name
    order."""
    return assert_tarn_says_what_kafka_says(bootstrap, "kafka-topics", kafka_args, ["topics", *tarn_args],
                                            str.splitlines, by_topic)


def commit_offset(bootstrap, group, topic, partition, offset):
    """Commits `offset` for `group` without joining it (as a consumer that
    assigns itself partitions does)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_tarn_topics_lists_and_describes_as_kafka_topics_does(broker):
    """Each of kafka-topics.sh's list and describe forms, and `tarn topics`
    with the same flags, against one broker: topic lines with the configs
    set away from their defaults, partition lines with "Elr" and
    "LastKnownElr", the report filters, topic expressions and
    --exclude-internal (a group's commit creates __consumer_offsets)."""
    kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "td-three", "--partitions", "3",
               "--replication-factor", "1")
    kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "td-set", "--partitions", "1",
               "--replication-factor", "1", "--config", "retention.ms=3600000",
               "--config", "cleanup.policy=compact")
    kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "other.topic", "--partitions", "2",
               "--replication-factor", "1", "--config", "min.insync.replicas=2")
    commit_offset(broker.bootstrap, "td-group", "td-three", 0, 0)
    wait_until(lambda: "__consumer_offsets" in kafka_tool("kafka-topics", *on(broker), "--list").stdout.split(),
               30, "__consumer_offsets to exist")
    forms = [
        ["--list"],
        ["--list", "--exclude-internal"],
        ["--list", "--topic", "td-.*"],
        ["--list", "--topic", "td-set, other.topic"],
        ["--describe", "--exclude-internal"],
        ["--describe", "--topic", "td-three"],
        ["--describe", "--topic", "td-.*"],
        ["--describe", "--topic", "other.topic"],
        ["--describe", "--topics-with-overrides", "--exclude-internal"],
        ["--describe", "--under-min-isr-partitions", "--exclude-internal"],
        ["--describe", "--at-min-isr-partitions", "--exclude-internal"],
        ["--describe", "--under-replicated-partitions"],
        ["--describe", "--unavailable-partitions"],
        ["--describe", "--topic", "no-such-topic", "--if-exists"],
    ]
    for form in forms:
        tarn_form = [form[0].removeprefix("--"), *form[1:]]
        assert_tarn_topics_says_what_kafka_topics_says(broker.bootstrap, form, tarn_form)
    out = assert_tarn_topics_says_what_kafka_topics_says(
        broker.bootstrap, ["--describe", "--topic", "no-such-topic"], ["describe", "--topic", "no-such-topic"])
    assert "Topic 'no-such-topic' does not exist as expected" in out.stdout, out


def test_tarn_groups_and_configs_say_what_kafka_tools_say(broker):
    """`tarn groups` against kafka-consumer-groups.sh (the group list, with
    and without state and type columns and filters; the offsets, members
    and state views of an empty group, of one whose live member owns two
    partitions and committed an offset with its leader epoch, and of one
    with a static and a dynamic member over two topics, plain and
    verbose; the offsets a reset to the current offsets, by a shift or by
    a duration would set) and `tarn configs` against kafka-configs.sh (a topic's, all
    topics', a broker's and the cluster default's configs), the same
    broker answering both: the same standard output, and both succeed or
    both fail. (Of a group that does not exist kafka-consumer-groups.sh
    prints an exception and exits 0; `tarn groups` says so and exits 1, as
    a failed command should.)"""
    kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "gc-two", "--partitions", "2",
               "--replication-factor", "1", "--config", "retention.ms=3600000")
    kafka_tool("kafka-topics", *on(broker), "--create", "--topic", "gc-one", "--partitions", "1",
               "--replication-factor", "1")
    ck_produce(broker.bootstrap, "gc-two", sample_records(6, "gc"))
    commit_offset(broker.bootstrap, "gc-empty", "gc-two", 1, 1)

    def member(group, client_id, **extra):
        return confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                         "client.id": client_id, "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False, **extra})
    live = member("gc-live", "gc-member")
    pair = [member("gc-pair", "gc-static", **{"group.instance.id": "gc-static-a"}),
            member("gc-pair", "gc-dynamic")]
    try:
        live.subscribe(["gc-two"])
        for m in pair:
            m.subscribe(["gc-two", "gc-one"])
        read = []

        def settled():
            message = live.poll(0.2)
            if message is not None and message.error() is None:
                read.append(message)
            owned = [len(m.assignment()) for m in pair]
            for m in pair:
                m.poll(0.1)
            return (len(read) >= 2 and len(live.assignment()) == 2 and sum(owned) == 3
                    and min(owned) > 0)
        wait_until(settled, 60, "the live member to own both partitions and read, and the pair to share three")
        live.commit(message=read[0], asynchronous=False)
        groups = ["kafka-consumer-groups"]
        for tool, kafka_args, tarn_args, view in [
            (*groups, ["--list"], ["groups", "--list"], sorted_lines),
            (*groups, ["--list", "--state"], ["groups", "--list", "--state"], header_and_sorted_lines),
            (*groups, ["--list", "--state", "stable,EMPTY", "--type"],
             ["groups", "--list", "--state", "stable,EMPTY", "--type"], header_and_sorted_lines),
            (*groups, ["--list", "--state", "Empty"], ["groups", "--list", "--state", "Empty"],
             header_and_sorted_lines),
            (*groups, ["--list", "--type", "consumer"], ["groups", "--list", "--type", "consumer"],
             header_and_sorted_lines),
            (*groups, ["--list", "--state", "Unheard"], ["groups", "--list", "--state", "Unheard"],
             header_and_sorted_lines),
            (*groups, ["--describe", "--group", "gc-empty"], ["groups", "--describe", "--group", "gc-empty"],
             entity_blocks),
            (*groups, ["--describe", "--all-groups"], ["groups", "--describe", "--all-groups"], entity_blocks),
            (*groups, ["--describe", "--all-groups", "--verbose"],
             ["groups", "--describe", "--all-groups", "--verbose"], entity_blocks),
            (*groups, ["--describe", "--all-groups", "--members"],
             ["groups", "--describe", "--all-groups", "--members"], entity_blocks),
            (*groups, ["--describe", "--all-groups", "--members", "--verbose"],
             ["groups", "--describe", "--all-groups", "--members", "--verbose"], entity_blocks),
            (*groups, ["--describe", "--all-groups", "--state"],
             ["groups", "--describe", "--all-groups", "--state"], entity_blocks),
            (*groups, ["--describe", "--group", "gc-pair", "--group", "gc-live", "--state", "--verbose"],
             ["groups", "--describe", "--group", "gc-pair", "--group", "gc-live", "--state", "--verbose"],
             entity_blocks),
            (*groups, ["--describe", "--group", "gc-live", "--members", "--state"],
             ["groups", "--describe", "--group", "gc-live", "--members", "--state"], entity_blocks),
            *[(*groups, ["--reset-offsets", "--group", "gc-empty", "--topic", topic, *spec, "--dry-run"],
               ["groups", "--reset-offsets", "--group", "gc-empty", "--topic", topic, *spec, "--dry-run"],
               sorted_lines)
              for topic, spec in [("gc-two", ["--to-current"]), ("gc-two:1", ["--shift-by", "-5"]),
                                  ("gc-two:1", ["--shift-by", "1"]), ("gc-two", ["--by-duration", "P1D"]),
                                  ("gc-two", ["--by-duration", "PT0S"])]],
            ("kafka-configs", ["--describe", "--entity-type", "topics", "--entity-name", "gc-two"],
             ["configs", "--describe", "--entity-type", "topics", "--entity-name", "gc-two"], entity_blocks),
            ("kafka-configs", ["--describe", "--entity-type", "topics"],
             ["configs", "--describe", "--entity-type", "topics"], entity_blocks),
            ("kafka-configs", ["--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"],
             ["configs", "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"],
             entity_blocks),
            ("kafka-configs", ["--describe", "--entity-type", "brokers", "--entity-default"],
             ["configs", "--describe", "--entity-type", "brokers", "--entity-default"], entity_blocks),
        ]:
            assert_tarn_says_what_kafka_says(broker.bootstrap, tool, kafka_args, tarn_args, view, view)
    finally:
        for m in [live, *pair]:
            m.close()


def sorted_lines(stdout):
    """Lines in name order: Kafka lists groups in the order of its maps."""
    return sorted(stdout.splitlines())


def header_and_sorted_lines(stdout):
    """A table's header, then its rows in name order."""
    lines = stdout.splitlines()
    return lines[:1] + sorted(lines[1:])


def entity_blocks(stdout):
    """kafka-configs output as its per-entity blocks, sorted: for every
    topic Kafka prints them in its hash set's order, Tarn by name."""
    blocks = []
    for line in stdout.splitlines():
        if line.startswith("Dynamic configs for") or line.startswith("All configs for") or not blocks:
            blocks.append([])
        blocks[-1].append(line)
    return sorted(blocks)


def test_kafka_configs_alters_describes_and_deletes_topic_configs(broker):
    broker.create_topic("kc", 1)
    topic = ["--entity-type", "topics", "--entity-name", "kc"]
    kafka_tool("kafka-configs", *on(broker), "--alter", *topic,
               "--add-config", "retention.ms=1000,cleanup.policy=compact")
    out = kafka_tool("kafka-configs", *on(broker), "--describe", *topic).stdout
    assert "retention.ms=1000" in out and "cleanup.policy=compact" in out, out
    kafka_tool("kafka-configs", *on(broker), "--alter", *topic, "--delete-config", "retention.ms")
    out = kafka_tool("kafka-configs", *on(broker), "--describe", *topic).stdout
    assert "retention.ms=1000" not in out and "cleanup.policy=compact" in out, out
    out = kafka_tool("kafka-configs", *on(broker), "--alter", *topic,
                     "--add-config", "retention.ms=soon", check=False)
    assert out.returncode != 0, out


def test_kafka_configs_sets_and_unsets_a_broker_logger(broker):
    # KIP-412 log levels: Tarn's loggers are its crates and `root`.
    loggers = ["--entity-type", "broker-loggers", "--entity-name", "1"]
    out = kafka_tool("kafka-configs", *on(broker), "--describe", *loggers).stdout
    assert "root=" in out and "tarn_server=" in out, out
    kafka_tool("kafka-configs", *on(broker), "--alter", *loggers,
               "--add-config", "tarn_storage=DEBUG")
    out = kafka_tool("kafka-configs", *on(broker), "--describe", *loggers).stdout
    assert "tarn_storage=DEBUG" in out, out
    kafka_tool("kafka-configs", *on(broker), "--alter", *loggers,
               "--delete-config", "tarn_storage")
    out = kafka_tool("kafka-configs", *on(broker), "--describe", *loggers).stdout
    assert "tarn_storage=DEBUG" not in out and "tarn_storage=" in out, out
    out = kafka_tool("kafka-configs", *on(broker), "--alter", *loggers,
                     "--add-config", "kafka.server.ReplicaManager=DEBUG", check=False)
    assert out.returncode != 0 and "Invalid broker logger" in out.stdout + out.stderr, out


def test_console_producer_and_consumer_with_keys(broker):
    broker.create_topic("console", 1)
    lines = "k1:one\nk2:two\nk1:three\n"
    kafka_tool("kafka-console-producer", *on(broker), "--topic", "console",
               "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
               stdin=lines)
    out = kafka_tool("kafka-console-consumer", *on(broker), "--topic", "console",
                     "--from-beginning", "--max-messages", "3",
                     "--formatter-property", "print.key=true",
                     "--formatter-property", "key.separator=:",
                     "--formatter-property", "print.offset=true")
    got = [line for line in out.stdout.splitlines() if line.startswith("Offset:")]
    assert got == ["Offset:0:k1:one", "Offset:1:k2:two", "Offset:2:k1:three"], out


def test_consumer_groups_describe_and_reset_offsets(broker):
    broker.create_topic("cg", 2)
    recs = [Rec(f"k{i}".encode(), f"v{i}".encode(), []) for i in range(20)]
    ck_produce(broker.bootstrap, "cg", recs)
    kafka_tool("kafka-console-consumer", *on(broker), "--topic", "cg", "--group", "cg-g",
               "--from-beginning", "--max-messages", "20")
    listed = kafka_tool("kafka-consumer-groups", *on(broker), "--list").stdout.split()
    assert "cg-g" in listed

    def offsets():
        out = kafka_tool("kafka-consumer-groups", *on(broker), "--describe", "--group", "cg-g").stdout
        rows = [line.split() for line in out.splitlines() if line.startswith("cg-g ")]
        return {int(r[2]): (r[3], r[4], r[5]) for r in rows}

    described = offsets()
    assert sorted(described) == [0, 1]
    assert sum(int(current) for current, _, _ in described.values()) == 20, described
    assert all(lag == "0" for _, _, lag in described.values()), described

    out = kafka_tool("kafka-consumer-groups", *on(broker), "--reset-offsets", "--group", "cg-g",
                     "--topic", "cg", "--to-earliest", "--execute").stdout
    assert "cg-g" in out, out
    described = offsets()
    assert all(current == "0" for current, _, _ in described.values()), described
    assert sum(int(lag) for _, _, lag in described.values()) == 20, described

    kafka_tool("kafka-consumer-groups", *on(broker), "--delete", "--group", "cg-g")
    assert "cg-g" not in kafka_tool("kafka-consumer-groups", *on(broker), "--list").stdout.split()


def test_get_offsets_delete_records_and_log_dirs(broker, tmp_path):
    broker.create_topic("off", 2)
    recs = [Rec(None, f"v{i}".encode(), []) for i in range(10)]
    ck_produce(broker.bootstrap, "off", recs, partitioner="random")
    delivered_per_partition = {}
    for p, _ in ck_consume_positions(broker, "off", 10):
        delivered_per_partition[p] = delivered_per_partition.get(p, 0) + 1

    def get_offsets(time):
        out = kafka_tool("kafka-get-offsets", *on(broker), "--topic", "off", "--time", time).stdout
        return {int(p): int(o) for _, p, o in (line.split(":") for line in out.split())}

    assert get_offsets("-1") == {p: delivered_per_partition.get(p, 0) for p in (0, 1)}
    assert get_offsets("-2") == {0: 0, 1: 0}

    partition = max(delivered_per_partition, key=delivered_per_partition.get)
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "off", "partition": partition, "offset": 2}]}))
    out = kafka_tool("kafka-delete-records", *on(broker), "--offset-json-file", str(spec)).stdout
    assert f"partition: off-{partition}\tlow_watermark: 2" in out, out
    assert get_offsets("-2")[partition] == 2

    out = kafka_tool("kafka-log-dirs", *on(broker), "--describe", "--topic-list", "off").stdout
    report = json.loads(out.strip().splitlines()[-1])
    [entry] = report["brokers"]
    assert entry["broker"] == 1
    [log_dir] = entry["logDirs"]
    assert log_dir["error"] is None, log_dir
    names = sorted(p["partition"] for p in log_dir["partitions"])
    assert names == ["off-0", "off-1"], log_dir
    assert all(p["size"] >= 0 for p in log_dir["partitions"]), log_dir


def test_kafka_transactions_describes_producers_and_refuses_transactional_ids(broker):
    """kafka-transactions.sh: describe-producers lists an idempotent
    producer's state (DescribeProducers), find-hanging finds nothing to
    report, list finds no transaction (ListTransactions), and a
    transactional id is refused at once, as no transaction
    coordinator exists yet (the authorization failure FindCoordinator
    answers, rather than a lookup retried for the tool's whole timeout)."""
    broker.create_topic("txn-tools", 1)
    ck_produce(broker.bootstrap, "txn-tools", [Rec(None, b"v", [])] * 3, **{"enable.idempotence": True})
    out = kafka_tool("kafka-transactions", *on(broker), "describe-producers", "--topic", "txn-tools",
                     "--partition", "0").stdout
    [header, row] = out.strip().splitlines()
    assert header.split()[:3] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch"], out
    assert row.split()[3] == "2", out  # LastSequence: three records, sequences 0 to 2
    out = kafka_tool("kafka-transactions", *on(broker), "find-hanging", "--broker-id", "1").stdout
    assert out.strip().splitlines() == [out.strip().splitlines()[0]], out
    out = kafka_tool("kafka-transactions", *on(broker), "list").stdout
    assert out.split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], out
    refused = kafka_tool("kafka-transactions", *on(broker), "describe", "--transactional-id", "t1",
                         check=False)
    assert refused.returncode != 0, refused.stdout
    assert "failed due to authorization failure" in refused.stdout + refused.stderr, refused


def ck_consume_positions(broker, topic, count):
    return [(g.partition, g.offset) for g in ck_consume(broker.bootstrap, topic, count)]


def test_producer_and_consumer_perf_tests(broker):
    broker.create_topic("perf", 2)
    out = kafka_tool("kafka-producer-perf-test", "--topic", "perf", "--num-records", "20000",
                     "--record-size", "100", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={broker.bootstrap}", "compression.type=lz4").stdout
    final = out.strip().splitlines()[-1]
    assert final.startswith("20000 records sent"), out
    out = kafka_tool("kafka-consumer-perf-test", *on(broker), "--topic", "perf",
                     "--messages", "20000", "--timeout", "60000").stdout
    header, row = [line for line in out.splitlines() if line.strip()][-2:]
    assert header.startswith("start.time"), out
    fields = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")]))
    assert int(fields["data.consumed.in.nMsg"]) == 20000, out


def test_kafka_dump_log_reads_tarns_segments_and_indexes(broker_factory):
    broker = broker_factory([("log.segment.bytes", str(MIB))])
    broker.create_topic("dump", 1)
    recs = sample_records(2000, "dump") + bulky_records(3000, "dump")
    delivered = ck_produce(broker.bootstrap, "dump", recs, **{"compression.type": "zstd"})
    broker.stop()
    directory = broker.data_dir / "dump-0"
    logs = sorted(directory.glob("*.log"))
    assert len(logs) > 1, f"expected rolled segments in {directory}"
    # As in Kafka, every segment that holds records has both index files
    # (empty where no entry was due), so the tools find what they expect.
    files = []
    for log in logs:
        files += [log, log.with_suffix(".index"), log.with_suffix(".timeindex")]
    missing = [f.name for f in files if not f.exists()]
    assert not missing, f"segment files missing: {missing}"
    out = kafka_tool("kafka-dump-log", "--files", ",".join(str(f) for f in files),
                     "--deep-iteration", "--index-sanity-check")
    text = out.stdout + out.stderr
    assert "Exception" not in text and "ERROR" not in text, text
    assert "failed sanity check" not in text, text
    records = [line for line in out.stdout.splitlines() if line.startswith("| offset: ")]
    assert len(records) == len(recs), f"dump-log listed {len(records)} of {len(recs)} records"
    assert len(delivered) == len(recs)


MIB = 1 << 20


def bulky_records(count, tag):
    """Records of about 1 KiB that compress about 2:1, so a few thousand
    fill several 1 MiB segments (Kafka 4's smallest segment.bytes)."""
    return [Rec(f"{tag}-{i % 11}".encode(), os.urandom(512).hex().encode(), [("i", str(i).encode())])
            for i in range(count)]


def free_port_pair():
    """A port whose successor is free too (Kafka's controller listener)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    pytest.fail("no free port pair on 127.0.0.1")


@contextlib.contextmanager
def kafka_node(kafka_dir, release_version=None):
    """An Apache Kafka node (scripts/kafka.sh) in `kafka_dir`, formatted at
    `release_version` (a metadata.version) when given; yields its
    bootstrap address and stops it on the way out."""
    port = free_port_pair()
    env = dict(os.environ)
    if release_version:
        env["KAFKA_RELEASE_VERSION"] = release_version
    start = subprocess.run([str(KAFKA_SH), "start", str(kafka_dir), str(port)], capture_output=True,
                           text=True, timeout=TOOL_TIMEOUT_S, env=env)
    assert start.returncode == 0, f"{start.stdout}\n{start.stderr}"
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop = subprocess.run([str(KAFKA_SH), "stop", str(kafka_dir)], capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S)
        assert stop.returncode == 0, f"{stop.stdout}\n{stop.stderr}"


def test_user_credentials_and_config_resources_answer_as_kafka_at_3_3_iv3(broker, tmp_path):
    """kafka-configs.sh on users asks DescribeUserScramCredentials, and a
    SCRAM credential is AlterUserScramCredentials; kafka-configs.sh and
    kafka-client-metrics.sh list client metrics resources with
    ListConfigResources. Tarn runs at metadata.version 3.3-IV3, so it must
    answer them as a Kafka node formatted at that level does (quotas
    described, no credentials, every SCRAM change refused with Kafka's
    reason; no client metrics resources), standard output, exit status
    and the error's message alike. Then `tarn configs` on Tarn against
    kafka-configs.sh on that node, for the quotas of users, clients, both
    and IP addresses: the same output and the same failures."""
    with kafka_node(tmp_path / "kafka", "3.3-IV3") as kafka:
        def run(bootstrap, *args, tool="kafka-configs"):
            out = kafka_tool(tool, "--bootstrap-server", bootstrap, *args, check=False)
            reason = [line for line in out.stderr.splitlines() if line.startswith("Caused by")]
            return out.returncode, out.stdout, reason

        for args in [["--list"], ["--describe"]]:
            tarn = run(broker.bootstrap, *args, tool="kafka-client-metrics")
            apache = run(kafka, *args, tool="kafka-client-metrics")
            assert tarn == apache, f"kafka-client-metrics {args}\ntarn: {tarn}\nkafka: {apache}"
        for args in [
            ["--describe", "--entity-type", "client-metrics"],
            ["--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "producer_byte_rate=1024,consumer_byte_rate=2048"],
            ["--alter", "--entity-type", "users", "--entity-default", "--add-config", "producer_byte_rate=99"],
            ["--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"],
            ["--alter", "--entity-type", "users", "--entity-name", "bob", "--delete-config", "SCRAM-SHA-512"],
            ["--describe", "--entity-type", "users"],
            ["--describe", "--entity-type", "users", "--entity-name", "alice"],
            ["--describe", "--entity-type", "users", "--entity-name", "bob"],
            ["--describe", "--entity-type", "users", "--entity-default"],
        ]:
            tarn, apache = run(broker.bootstrap, *args), run(kafka, *args)
            assert tarn == apache, f"{args}\ntarn: {tarn}\nkafka: {apache}"
        # `tarn configs` on Tarn against kafka-configs.sh on Kafka, for the
        # quotas of users, clients, both and IP addresses.
        for args in [
            "--alter --entity-type clients --entity-name app1 --add-config request_percentage=50.5",
            "--alter --entity-type users --entity-name alice --entity-type clients --entity-name app2 "
            "--add-config producer_byte_rate=10485760",
            "--alter --entity-type clients --entity-name app2 --entity-type users --entity-name bob "
            "--add-config consumer_byte_rate=7",
            "--alter --user carol --client-defaults --add-config controller_mutation_rate=3",
            "--alter --client-defaults --add-config producer_byte_rate=5",
            "--alter --entity-type ips --entity-name 10.0.0.1 --add-config connection_creation_rate=5",
            "--alter --ip-defaults --add-config connection_creation_rate=9",
            "--alter --entity-type ips --entity-name 10.0.0.1 --add-config producer_byte_rate=5",
            "--alter --entity-type clients --entity-name app1 --add-config bogus=1",
            "--alter --entity-type clients --entity-name app1 --add-config request_percentage=abc",
            "--alter --entity-type clients --entity-name app1 --delete-config producer_byte_rate",
            "--alter --entity-type users --entity-name alice --add-config SCRAM-SHA-256=[password=x]",
            "--describe --entity-type users",
            "--describe --entity-type clients",
            "--describe --entity-type ips",
            "--describe --entity-type users --entity-name alice",
            "--describe --entity-type users --entity-default",
            "--describe --entity-type users --entity-type clients",
            "--describe --entity-type users --entity-name alice --entity-type clients",
            "--describe --user carol --client-defaults",
            "--describe --client-defaults",
            "--describe --entity-type clients --entity-name nobody",
            "--alter --entity-type clients --entity-name app1 --delete-config request_percentage",
            "--alter --ip 10.0.0.1 --delete-config connection_creation_rate",
            "--describe --entity-type clients",
            "--describe --entity-type ips",
        ]:
            tarn = subprocess.run([str(tarn_bin()), "configs", *args.split(), "--bootstrap-server",
                                   broker.bootstrap], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
            apache = run(kafka, *args.split())
            assert (tarn.returncode == 0) == (apache[0] == 0), f"{args}\ntarn: {tarn}\nkafka: {apache}"
            assert quota_lines(tarn.stdout) == quota_lines(apache[1]), \
                f"{args}\ntarn:\n{tarn.stdout}\nkafka:\n{apache[1]}"
        refused = run(broker.bootstrap, "--alter", "--entity-type", "users", "--entity-name", "alice",
                      "--add-config", "SCRAM-SHA-512=[password=x]")
        assert refused[0] != 0 and "does not support SCRAM" in refused[2][-1], refused
        described = run(broker.bootstrap, "--describe", "--entity-type", "users", "--entity-name", "alice")
        assert described == (0, "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, "
                                "producer_byte_rate=1024.0\n", []), described


def test_kafka_features_answers_as_kafka_at_3_3_iv3(broker, tmp_path):
    """kafka-features.sh describes and updates features with ApiVersions
    and UpdateFeatures. Tarn runs at metadata.version 3.3-IV3 and
    kraft.version 0 and changes neither, so every update that changes
    nothing must go as on a Kafka node formatted at 3.3-IV3 (same output,
    same exit status), and every other update fail as a level Kafka's own
    controller does not support fails."""
    with kafka_node(tmp_path / "kafka", "3.3-IV3") as kafka:
        def run(bootstrap, *args):
            out = kafka_tool("kafka-features", "--bootstrap-server", bootstrap, *args, check=False)
            return out.returncode, out.stdout

        for args in [
            "upgrade --metadata 3.3-IV3",
            "upgrade --release-version 3.3-IV3",
            "downgrade --metadata 3.3-IV3",
            "upgrade --metadata 3.3-IV3 --dry-run",
            "upgrade --feature metadata.version=7 --feature kraft.version=0",
            "disable --feature group.version",
            "downgrade --feature transaction.version=0",
            "disable --feature kraft.version",
            "upgrade --feature no.such.version=1",
            "disable --feature no.such.version",
            "upgrade --feature group.version=0",
        ]:
            tarn, apache = run(broker.bootstrap, *args.split()), run(kafka, *args.split())
            assert tarn == apache, f"{args}\ntarn: {tarn}\nkafka: {apache}"
        # Kafka 4.4 supports later levels; Tarn refuses them as unsupported.
        for args, reason in [
            ("upgrade --metadata 3.4-IV0", "Local controller 1 only supports versions 7"),
            ("disable --feature metadata.version", "Local controller 1 only supports versions 7"),
            ("upgrade --feature group.version=1", "Local controller 1 does not support this feature."),
            ("upgrade --feature kraft.version=1", "Tarn cannot change kraft.version"),
            ("upgrade --release-version 4.0", "does not support this feature."),
        ]:
            code, stdout = run(broker.bootstrap, *args.split())
            assert code != 0 and reason in stdout, f"{args}: {code}\n{stdout}"
            assert "The update failed for all features" in stdout, stdout
        # The features' lines: metadata.version at 3.3-IV3, kraft.version
        # at 0 and supported up to 1, as on Kafka (whose metadata.version is
        # supported up to its own release's, and whose epoch is its log's).
        def lines(bootstrap):
            code, stdout = run(bootstrap, "describe")
            assert code == 0, stdout
            return {line.split()[1]: line.split() for line in stdout.splitlines() if line.startswith("Feature:")}

        tarn, apache = lines(broker.bootstrap), lines(kafka)
        assert sorted(tarn) == ["kraft.version", "metadata.version"], tarn
        assert tarn["kraft.version"][:-1] == apache["kraft.version"][:-1], (tarn, apache)
        assert tarn["metadata.version"][:4] == apache["metadata.version"][:4], (tarn, apache)
        assert tarn["metadata.version"][4:8] == ["SupportedMaxVersion:", "3.3-IV3", "FinalizedVersionLevel:",
                                                 "3.3-IV3"], tarn
        assert tarn["metadata.version"][6:8] == apache["metadata.version"][6:8], (tarn, apache)


def quota_lines(stdout):
    """kafka-configs.sh's quota lines in a fixed order: Kafka prints the
    entities, and each one's quotas, in its hash maps' order."""
    lines = []
    for line in stdout.splitlines():
        head, sep, values = line.partition(" are ")
        lines.append(head + sep + ", ".join(sorted(values.split(", "))) if sep else line)
    return sorted(lines)


def test_tarn_serves_a_partition_directory_written_by_apache_kafka(broker_factory, tmp_path):
    kafka_dir = tmp_path / "kafka"
    with kafka_node(kafka_dir) as bootstrap:
        kafka_tool("kafka-topics", "--bootstrap-server", bootstrap, "--create", "--topic", "moved",
                   "--partitions", "1", "--config", f"segment.bytes={MIB}")
        recs = sample_records(1000, "moved") + bulky_records(3000, "moved")
        delivered = []
        for codec in ("none", "gzip", "lz4", "zstd"):
            part = recs[len(delivered):len(delivered) + 1000]
            delivered += ck_produce(bootstrap, "moved", part, **{"compression.type": codec})
    source = kafka_dir / "data" / "moved-0"
    assert len(list(source.glob("*.log"))) > 1, "Kafka rolled no segment"

    broker = broker_factory()
    broker.create_topic("moved", 1)
    broker.stop()
    target = broker.data_dir / "moved-0"
    for old in target.iterdir():
        if old.name != "partition.metadata":
            old.unlink()
    for f in source.iterdir():
        # Tarn keeps its own topic id; Kafka's producer snapshots are
        # rebuilt from the batches.
        if f.suffix in (".log", ".index", ".timeindex") or f.name == "leader-epoch-checkpoint":
            shutil.copy(f, target / f.name)
    broker.start()
    got = ck_consume(broker.bootstrap, "moved", len(recs))
    assert_matches("moved", recs, delivered, got)
    assert not broker.panics()
