"""The web console in a real browser: headless Chromium (Debian's
`chromium`) loads every page from the broker's HTTP listener, runs the
console's JavaScript, and the rendered DOM must show a topic this test
created and its record count. Chromium is required: without it the test
fails rather than skips (scripts/test.sh installs it).

Screenshots of each page are taken too; with TARN_SCREENSHOT_DIR set they
are kept there (that is how docs/console-*.png are made)."""

import html
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tarn_clients import Rec, ck_consume, ck_produce

CHROMIUM_TIMEOUT_S = 90
# Virtual time the page may run for: enough for every fetch and a refresh.
VIRTUAL_TIME_MS = 4000


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("chromium is not installed (apt-get install chromium); scripts/test.sh installs it")


def run_chromium(profile: Path, url: str, *mode: str) -> subprocess.CompletedProcess:
    args = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
        f"--user-data-dir={profile}", "--window-size=1280,1000",
        f"--virtual-time-budget={VIRTUAL_TIME_MS}", *mode, url,
    ]
    result = subprocess.run(args, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"chromium exited {result.returncode}\n{result.stderr[-3000:]}"
    return result


def dom(tmp_path: Path, url: str) -> str:
    profile = tmp_path / f"profile-dom-{abs(hash(url))}"
    return run_chromium(profile, url, "--dump-dom").stdout


def screenshot(tmp_path: Path, url: str, name: str) -> Path:
    target = tmp_path / f"console-{name}.png"
    run_chromium(tmp_path / f"profile-shot-{name}", url, f"--screenshot={target}")
    data = target.read_bytes()
    assert data.startswith(b"\x89PNG"), f"{target} is not a PNG"
    assert len(data) > 10_000, f"{target} looks blank ({len(data)} bytes)"
    keep = os.environ.get("TARN_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(target, Path(keep) / target.name)
    return target


def text_of(markup: str) -> str:
    """The visible text of a DOM dump, tags removed, whitespace collapsed."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", markup)))


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=20) as response:
        assert response.status == 200
        return response.read()


def test_console_pages_show_topics_records_and_groups(broker, tmp_path):
    topic = "console-orders"
    broker.create_topic(topic, 2)
    broker.create_topic("console-empty", 1)
    recs = [Rec(f"order-{i}".encode(), f'{{"id": {i}, "item": "widget-{i}"}}'.encode(), [("source", b"test")])
            for i in range(137)]
    delivered = ck_produce(broker.bootstrap, topic, recs)
    assert len(ck_consume(broker.bootstrap, topic, len(recs))) == len(recs)
    base = f"http://{broker.http}/"
    assert get(base + "health") == b"ok\n"

    overview = dom(tmp_path, base + "#/")
    assert 'data-loaded="overview"' in overview, overview[-2000:]
    text = text_of(overview)
    assert "Tarn 0.1.0" in text
    # The consumer's group.id made the broker create __consumer_offsets
    # (50 partitions by default) on its first FindCoordinator, as Kafka does.
    assert re.search(r"Topics\s+3\s+53 partitions", text), text
    assert re.search(r"Records\s+137\b", text), text
    assert 'id="chart-records"' in overview and "<svg" in overview
    # The single node is its own controller; it leads and holds all 53.
    row = re.search(r'<tr data-broker="1">(.*?)</tr>', overview, re.S)
    assert row, overview
    assert re.search(r"serving\s*controller\s*53\s*53", text_of(row.group(1))), row.group(1)

    topics = dom(tmp_path, base + "#/topics")
    assert 'data-loaded="topics"' in topics, topics[-2000:]
    row = re.search(rf'<tr data-topic="{topic}">(.*?)</tr>', topics, re.S)
    assert row, topics
    assert 'data-records="137"' in row.group(1), row.group(1)
    assert 'data-topic="console-empty"' in topics

    page = dom(tmp_path, base + f"#/topic/{topic}")
    assert 'data-loaded="topic"' in page, page[-2000:]
    assert f'<span id="topic-name">{topic}</span>' in page
    assert re.search(r'id="card-topic-records".*?>137<', page, re.S), page
    # The latest records of partition 0 are shown, with keys and values.
    last_p0 = max(offset for p, offset in delivered if p == 0)
    index = next(i for i, (p, offset) in enumerate(delivered) if p == 0 and offset == last_p0)
    assert f'data-offset="{last_p0}"' in page, page
    assert f"order-{index}" in text_of(page)
    assert "widget-" in page and "source=test" in page
    assert 'id="configs-table"' in page and "cleanup.policy" in page

    groups = dom(tmp_path, base + "#/groups")
    assert 'data-loaded="groups"' in groups, groups[-2000:]
    assert "Consumer groups" in groups and 'id="chart-lag"' in groups

    for name, fragment in [("overview", "#/"), ("topics", "#/topics"), ("topic", f"#/topic/{topic}"),
                           ("groups", "#/groups")]:
        screenshot(tmp_path, base + fragment, name)


def test_console_is_served_from_the_binary_alone(broker):
    base = f"http://{broker.http}/"
    page = get(base).decode()
    # Every script and stylesheet is local: no CDN.
    for ref in re.findall(r'(?:src|href)="([^"#]+)"', page):
        assert ref.startswith("/"), f"external reference {ref}"
    for asset in ("console.js", "console.css"):
        assert len(get(base + asset)) > 1000


def test_console_group_lag_changes_after_a_commit(broker, tmp_path):
    import json
    import time

    from conftest import wait_until
    from tarn_clients import ck_consumer

    topic, group = "lagged", "console-group"
    broker.create_topic(topic, 1)
    ck_produce(broker.bootstrap, topic, [Rec(f"k{i}".encode(), b"v", []) for i in range(50)])
    consumer = ck_consumer(broker.bootstrap, **{"group.id": group})
    consumer.subscribe([topic])

    def read_and_commit(count):
        got, deadline = 0, time.monotonic() + 15
        while got < count:
            assert time.monotonic() < deadline, f"read {got} of {count} as group {group}"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
                if got == count:
                    consumer.commit(message=msg, asynchronous=False)

    def lag():
        page = json.loads(get(f"http://{broker.http}/api/groups"))
        return {g["group_id"]: g["total_lag"] for g in page["groups"]}.get(group)

    try:
        read_and_commit(20)
        wait_until(lambda: lag() == 30, 10, "lag 30 after committing offset 20")
        page = dom(tmp_path, f"http://{broker.http}/#/groups")
        assert f'data-group="{group}"' in page and 'data-total-lag="30"' in page, page
        read_and_commit(30)
        wait_until(lambda: lag() == 0, 10, "lag 0 after committing offset 50")
        page = dom(tmp_path, f"http://{broker.http}/#/groups")
        assert 'data-total-lag="0"' in page, page
        screenshot(tmp_path, f"http://{broker.http}/#/groups", "groups")
    finally:
        consumer.close()
