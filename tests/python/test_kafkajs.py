"""kafkajs (tests/node, installed by `npm ci`) against the real broker.

tests/node/kafkajs_check.js does the work and checks every record itself:
admin createTopics / fetchTopicMetadata / fetchTopicOffsets / fetchOffsets /
deleteTopics, producers with the codecs kafkajs has without a plugin (none,
with the idempotent producer, and gzip; snappy, lz4 and zstd need
third-party codec packages), a consumer group that reads back exactly what
was produced and commits, and a second member that resumes from the commit.
It exits non-zero with a MISMATCH or ERROR line on any difference.
"""

import json
import os
import shutil
import subprocess

from conftest import REPO

NODE_DIR = REPO / "tests" / "node"
RUN_TIMEOUT_S = 180


def run_node(script: str, *args: str) -> subprocess.CompletedProcess:
    node = shutil.which("node")
    assert node, "node not found on PATH (scripts/test.sh installs nodejs)"
    assert (NODE_DIR / "node_modules" / "kafkajs").is_dir(), (
        f"kafkajs is not installed: run `npm ci` in {NODE_DIR}"
    )
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    return subprocess.run(
        [node, str(NODE_DIR / script), *args],
        cwd=NODE_DIR, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )


def test_kafkajs_admin_produce_group_consume_resume(broker):
    out = run_node("kafkajs_check.js", broker.bootstrap)
    assert out.returncode == 0, f"kafkajs check failed (exit {out.returncode})\n{out.stderr}\n{out.stdout}"
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary == {
        "ok": True, "produced": 300, "consumed_first": 300, "resumed": 30, "partitions_used": 3,
    }, summary
    broker.assert_alive()
    assert "kafkajs-check" not in broker.list_topics()
