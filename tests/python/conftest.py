"""Fixtures for the Python client suite: each test gets its own `tarn serve`.

The broker runs on 127.0.0.1:0 (its HTTP listener too) with a temporary data
directory; the harness waits for its ready line on stdout
(``tarn: listening on 127.0.0.1:PORT, data in DIR``) and the HTTP line after
it (``tarn: http on 127.0.0.1:PORT``), and keeps its stderr in
a log file that is printed when a test fails. The binary comes from
``$TARN_BIN`` (relative paths are taken from the repository root when they do
not exist from the current directory), default ``<repo>/target/debug/tarn``.
"""

import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 20
CLI_TIMEOUT_S = 30
READY_PREFIX = "tarn: listening on "
READY_DATA_SEP = ", data in "
HTTP_PREFIX = "tarn: http on "
# What Rust's panic hook writes to stderr: a test whose broker logged it
# fails, whatever the client saw.
PANIC_MARKER = "panicked at "


def tarn_bin() -> Path:
    env = os.environ.get("TARN_BIN")
    if env:
        path = Path(env)
        if not path.is_absolute() and not path.exists():
            path = REPO / path
    else:
        path = REPO / "target" / "debug" / "tarn"
    if not path.is_file():
        pytest.fail(f"tarn binary not found at {path}: run `cargo build -p tarn-cli` or set TARN_BIN")
    return path.resolve()


def parse_ready_line(line: str):
    """Returns (host:port, data dir) from the ready line, or None."""
    line = line.rstrip("\n")
    if not line.startswith(READY_PREFIX) or READY_DATA_SEP not in line:
        return None
    addr, data_dir = line[len(READY_PREFIX):].split(READY_DATA_SEP, 1)
    port = addr.rsplit(":", 1)[-1]
    if not port.isdigit() or int(port) == 0:
        return None
    return addr, data_dir


class TarnBroker:
    """One `tarn serve` process that can be stopped, killed and restarted."""

    def __init__(self, scratch: Path, settings=(), listeners=None):
        self.scratch = scratch
        # The `listeners` key (a cluster node's fixed ports) instead of
        # `--listen 127.0.0.1:0`.
        self.listeners = listeners
        self.data_dir = scratch / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.settings = list(settings)
        self.proc = None
        self.bootstrap = None
        self.http = None  # host:port of /metrics, /health and the console
        self.starts = 0

    def log_path(self, start: int) -> Path:
        return self.scratch / f"broker-{start}.stderr.log"

    def logs(self, lines: int = 200) -> str:
        out = []
        for start in range(1, self.starts + 1):
            path = self.log_path(start)
            text = path.read_text(errors="replace") if path.exists() else ""
            tail = text.splitlines()[-lines:]
            out.append(f"----- tarn stderr, start #{start} (last {len(tail)} lines) -----")
            out.extend(tail)
        return "\n".join(out)

    def start(self):
        assert self.proc is None, "broker already running"
        self.starts += 1
        args = [str(tarn_bin()), "serve", "--data-dir", str(self.data_dir), "--http-listen", "127.0.0.1:0"]
        if self.listeners is None:
            args += ["--listen", "127.0.0.1:0"]
        else:
            args += ["--set", f"listeners={self.listeners}"]
        for key, value in self.settings:
            args += ["--set", f"{key}={value}"]
        with open(self.log_path(self.starts), "wb") as log:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True
            )
        lines = queue.Queue()

        def pump(stdout):
            # Hand over the ready line and the HTTP line, then keep draining
            # so the broker never blocks on a full pipe.
            for _ in range(2):
                lines.put(stdout.readline())
            for _ in stdout:
                pass

        threading.Thread(target=pump, args=(self.proc.stdout,), daemon=True).start()
        try:
            line = lines.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            line = None
        parsed = parse_ready_line(line) if line else None
        if parsed is None:
            status = self.proc.poll()
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            pytest.fail(
                f"tarn serve gave no ready line within {READY_TIMEOUT_S}s "
                f"(got {line!r}, exit status {status})\n{self.logs()}"
            )
        self.bootstrap = parsed[0]
        try:
            http_line = lines.get(timeout=READY_TIMEOUT_S)
        except queue.Empty:
            http_line = ""
        if not http_line.startswith(HTTP_PREFIX):
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            pytest.fail(f"tarn serve printed no HTTP line after the ready line (got {http_line!r})\n{self.logs()}")
        self.http = http_line[len(HTTP_PREFIX):].strip()

    def panics(self):
        """Lines of any start's stderr that report a Rust panic."""
        found = []
        for start in range(1, self.starts + 1):
            path = self.log_path(start)
            text = path.read_text(errors="replace") if path.exists() else ""
            found.extend(line for line in text.splitlines() if PANIC_MARKER in line)
        return found

    def assert_no_panic(self):
        panics = self.panics()
        assert not panics, f"the broker panicked: {panics}\n{self.logs()}"

    def assert_alive(self):
        assert self.proc is not None, "broker was stopped"
        status = self.proc.poll()
        if status is not None:
            self.proc = None
            pytest.fail(f"broker exited unexpectedly with status {status}\n{self.logs()}")

    def stop(self):
        """SIGTERM, wait, and require a clean exit (status 0)."""
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"broker did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.logs()}")
        assert status == 0, f"broker exited with {status} after SIGTERM\n{self.logs()}"

    def kill9(self):
        proc, self.proc = self.proc, None
        proc.kill()
        proc.wait()

    def restart(self):
        self.stop()
        self.start()

    def cli(self, *args) -> subprocess.CompletedProcess:
        """Runs `tarn <args>`; returns the result whatever the exit code."""
        return subprocess.run(
            [str(tarn_bin()), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )

    def topics(self, command: str, *args) -> subprocess.CompletedProcess:
        return self.cli("topics", command, "--bootstrap-server", self.bootstrap, *args)

    def create_topic(self, topic: str, partitions: int = 1):
        out = self.topics(
            "create", "--topic", topic, "--partitions", str(partitions), "--replication-factor", "1"
        )
        assert out.returncode == 0, f"create {topic}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"

    def list_topics(self):
        out = self.topics("list")
        assert out.returncode == 0, f"list: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def broker_factory(tmp_path):
    """Starts brokers with given `--set` settings; all are stopped cleanly
    (exit 0 required) at teardown, and their logs printed (shown on failure)."""
    brokers = []

    def start(settings=()):
        broker = TarnBroker(tmp_path / f"broker-{len(brokers)}", settings)
        brokers.append(broker)
        broker.start()
        return broker

    yield start
    for broker in brokers:
        print(broker.logs())
        if broker.proc is not None:
            broker.assert_alive()
            broker.stop()
    for broker in brokers:
        broker.assert_no_panic()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
