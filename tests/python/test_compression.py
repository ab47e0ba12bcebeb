"""Compressed batches from kafka-python and kcat with every codec they
support: stored as sent when the topic's compression.type is `producer`,
converted to the topic's codec when it names another, and read back
byte-identical by kafka-python and kcat; compacted batches keep their codec
and read back with kafka-python and confluent-kafka. The stored codec is
read from the batch attributes in the segment file."""

import shutil
import socket
import struct
import subprocess
import time

import pytest

from tarn_clients import Rec, assert_matches, ck_consume, kp_consume, kp_produce, sample_records

CODECS = ["gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
FIND_COORDINATOR = 10


def stored_codecs(broker, topic):
    """Codec id of every batch in partition 0's first segment."""
    data = (broker.data_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    codecs, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        codecs.append(attributes & 7)
        pos += 12 + length
    assert pos == len(data), f"{topic}: partial batch at the end of the segment"
    return codecs


def serves_find_coordinator(broker):
    """Whether ApiVersions (v0) lists FindCoordinator: librdkafka uses lz4
    only with brokers that serve it (its "Kafka >= 0.10" feature probe)."""
    host, port = broker.bootstrap.rsplit(":", 1)
    request = struct.pack(">hhih", 18, 0, 1, -1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        body = recv_exact(sock, size)
    _correlation_id, error, count = struct.unpack_from(">ihi", body, 0)
    assert error == 0, f"ApiVersions error {error}"
    keys = [struct.unpack_from(">h", body, 10 + 6 * i)[0] for i in range(count)]
    return FIND_COORDINATOR in keys


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed early"
        buf += chunk
    return buf


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_codec_stored_as_sent(broker, codec):
    topic = f"kp-{codec}"
    broker.create_topic(topic, 1)
    recs = sample_records(120, codec, null_header_values=False)
    # kafka-python sends a batch uncompressed when compressing it does not
    # make it smaller (a record alone, say): a long linger keeps the 120
    # records in one batch, which every codec shrinks.
    delivered = kp_produce(broker.bootstrap, topic, recs, compression_type=codec, batch_size=1 << 20,
                           linger_ms=1000)
    assert_matches(topic, recs, delivered, kp_consume(broker.bootstrap, topic, len(recs)))
    assert set(stored_codecs(broker, topic)) == {CODEC_IDS[codec]}


@pytest.mark.parametrize("topic_codec,producer_codec", [
    ("uncompressed", "zstd"), ("gzip", "snappy"), ("snappy", "lz4"), ("lz4", "gzip"), ("zstd", None),
])
def test_kafka_python_topic_codec_differs(broker, topic_codec, producer_codec):
    topic = f"kp-topic-{topic_codec}"
    out = broker.topics("create", "--topic", topic, "--partitions", "1",
                        "--config", f"compression.type={topic_codec}")
    assert out.returncode == 0, out.stderr
    recs = sample_records(120, topic_codec, null_header_values=False)
    delivered = kp_produce(broker.bootstrap, topic, recs, compression_type=producer_codec)
    assert_matches(topic, recs, delivered, kp_consume(broker.bootstrap, topic, len(recs)))
    assert set(stored_codecs(broker, topic)) == {CODEC_IDS[topic_codec]}


KCAT = shutil.which("kcat")


def kcat(*args, stdin=None):
    if KCAT is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs it)")
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_codec_round_trip(broker, codec):
    topic = f"kcat-{codec}"
    broker.create_topic(topic, 1)
    lines = [f"key-{i}:{codec}-value-{i}-" + "x" * (i % 50) for i in range(200)]
    # librdkafka sends a batch uncompressed when compressing does not make
    # it smaller: with its 5 ms linger a slow reader of stdin can leave the
    # last line alone in a batch. A long linger keeps the 200 in one.
    out = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", codec, "-X", "linger.ms=1000",
               stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%k:%s\\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == lines
    expected = CODEC_IDS[codec]
    if codec == "lz4" and not serves_find_coordinator(broker):
        # Debian's librdkafka sends lz4 batches uncompressed to brokers
        # without FindCoordinator (its "Kafka >= 0.10" feature probe).
        expected = 0
    assert set(stored_codecs(broker, topic)) == {expected}


def test_kcat_reads_topic_recompressed_from_another_codec(broker):
    topic = "kcat-converted"
    out = broker.topics("create", "--topic", topic, "--partitions", "1", "--config", "compression.type=lz4")
    assert out.returncode == 0, out.stderr
    lines = [f"v-{i}-" + "y" * (i % 30) for i in range(100)]
    out = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-z", "gzip", stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-f", "%s\\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == lines
    assert set(stored_codecs(broker, topic)) == {CODEC_IDS["lz4"]}


def segment_batches(broker, topic):
    """(codec id, records count, offsets spanned) of every batch of
    partition 0, all segments in offset order."""
    batches = []
    for path in sorted((broker.data_dir / f"{topic}-0").glob("*.log")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            (attributes,) = struct.unpack_from(">h", data, pos + 21)
            (last_offset_delta,) = struct.unpack_from(">i", data, pos + 23)
            (count,) = struct.unpack_from(">i", data, pos + 57)
            batches.append((attributes & 7, count, last_offset_delta + 1))
            pos += 12 + length
        assert pos == len(data), f"{path.name}: partial batch at the end"
    return batches


def wait_for_cleaner(broker, topic, timeout_s=30):
    """Until the cleaner checkpoint reaches the active segment."""
    part = broker.data_dir / f"{topic}-0"
    deadline = time.monotonic() + timeout_s
    while True:
        active = max(int(p.name[:-4]) for p in part.glob("*.log"))
        checkpoint = part / "cleaner-offset-checkpoint"
        if checkpoint.exists() and checkpoint.read_text().strip() == str(active):
            return
        assert time.monotonic() < deadline, f"{topic}: the cleaner did not reach offset {active}"
        time.sleep(0.1)


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_batches_keep_their_codec_and_read_back(broker_factory, codec):
    broker = broker_factory([("log.cleaner.backoff.ms", "200"), ("log.segment.delete.delay.ms", "0")])
    topic = f"compacted-{codec}"
    out = broker.topics("create", "--topic", topic, "--partitions", "1",
                        "--config", "cleanup.policy=compact", "--config", "segment.bytes=1200",
                        "--config", "min.cleanable.dirty.ratio=0.01")
    assert out.returncode == 0, out.stderr
    recs, latest = [], {}
    for round_ in range(20):
        for k in range(30):
            keys = [f"key-{k:02}"] + ([f"once-{round_:02}-{k:02}"] if k % 7 == 0 else [])
            for key in keys:
                # Padded so that even a batch of one record is smaller
                # compressed: kafka-python sends a batch uncompressed when
                # compressing it saves nothing (its `_maybe_compress`),
                # which a short last batch hit.
                value = f"{codec}-value-{round_:02}-{k:02}-" + "v" * 100
                rec = Rec(key.encode(), value.encode(), [])
                recs.append(rec)
                latest[rec.key] = rec.value
    kp_produce(broker.bootstrap, topic, recs, compression_type=codec, batch_size=1000)
    wait_for_cleaner(broker, topic)
    batches = segment_batches(broker, topic)
    assert {b[0] for b in batches} == {CODEC_IDS[codec]}, batches
    assert any(count < spanned for _, count, spanned in batches), "no batch was rewritten"
    surviving = sum(count for _, count, _ in batches)
    assert surviving < len(recs)
    for consume in (kp_consume, ck_consume):
        got = consume(broker.bootstrap, topic, surviving)
        assert len(got) == surviving, consume.__name__
        offsets = [g.offset for g in got]
        assert offsets == sorted(set(offsets)), f"{consume.__name__}: offsets out of order"
        assert {g.rec.key: g.rec.value for g in got} == latest, consume.__name__


@pytest.mark.parametrize("codec", CODECS)
def test_list_offsets_finds_records_inside_a_compressed_batch(broker, codec):
    """ListOffsets by timestamp and for the max timestamp answers the record's
    own offset and timestamp, as Kafka does, even inside one compressed batch
    (Tarn once answered the batch's base offset and max timestamp)."""
    import kafka
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = f"ts-{codec}"
    broker.create_topic(topic, 1)
    base = 1_700_000_000_000
    # Records 7 and 12 share the largest timestamp: Kafka answers the first,
    # and 7 is the first record at or after any timestamp past base + 6.
    timestamps = [base + 1000 if i in (7, 12) else base + i for i in range(20)]
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                                   linger_ms=500, batch_size=1 << 20, acks="all")
    try:
        # Compressible values: kafka-python sends a batch uncompressed when
        # compression would not make it smaller.
        futures = [producer.send(topic, value=f"v{i}-".encode() + b"x" * 200, timestamp_ms=ts)
                   for i, ts in enumerate(timestamps)]
        producer.flush(timeout=30)
        assert [f.get(timeout=30).offset for f in futures] == list(range(20))
    finally:
        producer.close(timeout=10)
    assert stored_codecs(broker, topic) == [CODEC_IDS[codec]], "expected one compressed batch"

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0)
    cases = {
        "max": (OffsetSpec.max_timestamp(), 7, base + 1000),
        "at 5": (OffsetSpec.for_timestamp(base + 5), 5, base + 5),
        "after 8": (OffsetSpec.for_timestamp(base + 8), 7, base + 1000),
        "past the last": (OffsetSpec.for_timestamp(base + 2000), -1, -1),
    }
    for name, (spec, offset, timestamp) in cases.items():
        result = admin.list_offsets({tp: spec}, request_timeout=30)[tp].result(timeout=30)
        assert (result.offset, result.timestamp) == (offset, timestamp), (
            f"{codec} {name}: offset {result.offset}, timestamp {result.timestamp}")
