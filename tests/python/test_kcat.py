"""kcat (Debian's build, librdkafka 2.0.x) produces and consumes."""

import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat")


def kcat(*args, stdin=None):
    if KCAT is None:
        pytest.fail("kcat is not installed (scripts/test.sh installs it)")
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_kcat_round_trip(broker):
    topic = "kcat"
    broker.create_topic(topic, 1)
    lines = [f"key-{i}:value-{i}" for i in range(50)] + ["no-value-key:"]
    out = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K:", stdin="\n".join(lines) + "\n")
    assert out.returncode == 0, out.stderr

    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning",
               "-f", "%p %o %k:%s\\n")
    assert out.returncode == 0, out.stderr
    got = out.stdout.splitlines()
    assert got == [f"0 {i} {line}" for i, line in enumerate(lines)], out.stderr


def test_kcat_metadata_lists_topic(broker):
    broker.create_topic("kcat-meta", 3)
    out = kcat("-b", broker.bootstrap, "-L", "-t", "kcat-meta")
    assert out.returncode == 0, out.stderr
    assert 'topic "kcat-meta" with 3 partitions' in out.stdout, out.stdout


def test_kcat_produce_auto_creates_topic(broker):
    out = kcat("-b", broker.bootstrap, "-P", "-t", "kcat-auto", stdin="one\ntwo\nthree\n")
    assert out.returncode == 0, out.stderr
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-auto", "-e", "-o", "beginning", "-f", "%s\\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["one", "two", "three"]
