#!/usr/bin/env python3
"""bench/cluster.py: the measurements behind bench/cluster.sh.

Runs `tarn serve` nodes (one alone, or three forming a metadata quorum on
loopback) and times them with a tiny Kafka client written here against the
wire protocol (Metadata v1, CreateTopics v2), so that every request goes to
the broker chosen, one at a time or several in flight, with no client-side
retries, caching or controller routing in the way.

    cluster.py TARN_BIN WORK SECTION...    sections: commits fencing failover startup leaders idle kafka
    cluster.py --report RAW OUT.md HEADER.md   RESULT lines of RAW into OUT.md

Each figure is printed as one `RESULT section=... key=value ...` line on
stdout (cluster.sh turns them into bench/RESULTS-cluster.md); progress goes
to stderr. Any failed step raises, so the run exits non-zero.

env: COMMITS_N=1000 (topics per commit-rate run) INFLIGHT=8 (connections with
one CreateTopics each in flight) FENCE_REPS=3 FAILOVER_REPS=5 STARTUP_REPS=3
STARTUP_TOPICS=100 STARTUP_PARTS=100 COMMITS_REPS=3 ATTEMPT_TIMEOUT_S=1.0
LEADER_COUNTS=1,1000,10000 LEADER_DETECTIONS=session,disconnect LOG_LEVEL=warn
IDLE_COUNTS=1000,10000 IDLE_REPS=2 IDLE_SETTLE_S=5 IDLE_S=10 IDLE_COMPARE=(another tarn binary)
"""

import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

READY_PREFIX = "tarn: listening on "
READY_TIMEOUT_S = 30
# A broker closing 10,000 partitions that each hold unflushed records
# fsyncs each (about 20 s on a slow disk) after a controlled shutdown of
# up to 5 s.
STOP_TIMEOUT_S = 60
FORMED_TIMEOUT_S = 60
# A dead broker must be gone well before this; a failing run reports it.
FENCE_TIMEOUT_S = 60
FAILOVER_TIMEOUT_S = 60
# How long one CreateTopics attempt may take during failover before the
# connection is dropped and another attempt made.
ATTEMPT_TIMEOUT_S = float(os.environ.get("ATTEMPT_TIMEOUT_S", "1.0"))
POLL_INTERVAL_S = 0.02
PANIC_MARKER = "panicked at "
LOG_LEVEL = os.environ.get("LOG_LEVEL", "warn")

PRODUCE = 0
METADATA = 3
CREATE_TOPICS = 19
# Kafka error codes the failover loop expects while a controller is elected.
ERRORS = {0: "NONE", 7: "REQUEST_TIMED_OUT", 36: "TOPIC_ALREADY_EXISTS", 41: "NOT_CONTROLLER"}


def log(msg):
    print(f"cluster.py: {msg}", file=sys.stderr, flush=True)


def result(section, **fields):
    print("RESULT section=" + section + "".join(f" {k}={v}" for k, v in fields.items()), flush=True)


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """User + system CPU seconds of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- wire format

class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def i8(self):
        return self.take(">b")

    def i16(self):
        return self.take(">h")

    def i32(self):
        return self.take(">i")

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def array(self, item):
        n = self.i32()
        return [] if n < 0 else [item() for _ in range(n)]


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def varint(n):
    """Kafka's zigzag varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def record_batch(value):
    """A RecordBatch v2 holding one record with `value` and no key."""
    now_ms = int(time.time() * 1000)
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    record = varint(len(body)) + body
    after_crc = (struct.pack(">hiqqqhi", 0, 0, now_ms, now_ms, -1, -1, -1)
                 + struct.pack(">i", 1) + record)
    after_length = struct.pack(">ibI", -1, 2, crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


class Conn:
    """One connection; requests are answered in order (Kafka's contract)."""

    def __init__(self, addr, timeout_s=10.0):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def close(self):
        self.sock.close()

    def send(self, api_key, version, body):
        self.correlation += 1
        header = struct.pack(">hhi", api_key, version, self.correlation) + string("tarn-bench")
        frame = header + body
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        return self.correlation

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def recv(self, correlation):
        (size,) = struct.unpack(">i", self.recv_exact(4))
        payload = self.recv_exact(size)
        (got,) = struct.unpack_from(">i", payload)
        if got != correlation:
            raise RuntimeError(f"correlation id {got}, expected {correlation}")
        return Reader(payload[4:])

    def metadata(self, all_topics, topics=()):
        """Metadata v1 for every topic, none, or `topics`: (brokers {id: host:port}, controller id,
        topics {name: [leader by partition]})."""
        if all_topics:
            body = struct.pack(">i", -1)
        else:
            body = struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics)
        r = self.recv(self.send(METADATA, 1, body))
        brokers = {}
        for node_id, host, port, _rack in r.array(lambda: (r.i32(), r.string(), r.i32(), r.string())):
            brokers[node_id] = f"{host}:{port}"
        controller = r.i32()
        topics = {}

        def partition():
            r.i16()
            index, leader = r.i32(), r.i32()
            r.array(r.i32)
            r.array(r.i32)
            return index, leader

        for error, name, _internal, parts in r.array(lambda: (r.i16(), r.string(), r.i8(), r.array(partition))):
            if error == 0:
                topics[name] = [leader for _, leader in sorted(parts)]
        return brokers, controller, topics

    def produce(self, topic, partition, value, acks=-1, timeout_ms=1000):
        """Produce v3 of one record to one partition; its error code."""
        return self.produce_to(topic, [partition], value, acks, timeout_ms)[partition]

    def produce_to(self, topic, partitions, value, acks, timeout_ms):
        """Produce v3 of one record to each of `partitions`, in one request; the error code
        answered for each partition."""
        records = record_batch(value)
        partitions = list(partitions)
        body = (struct.pack(">hhi", -1, acks, timeout_ms) + struct.pack(">i", 1) + string(topic)
                + struct.pack(">i", len(partitions))
                + b"".join(struct.pack(">ii", p, len(records)) + records for p in partitions))
        r = self.recv(self.send(PRODUCE, 3, body))
        answers = r.array(lambda: (r.string(), r.array(lambda: (r.i32(), r.i16(), r.take(">q"), r.take(">q")))))
        return {index: error for _, parts in answers for index, error, _, _ in parts}

    def send_create(self, name, partitions, replication=1, timeout_ms=30000):
        body = (struct.pack(">i", 1) + string(name) + struct.pack(">ihii", partitions, replication, 0, 0)
                + struct.pack(">ib", timeout_ms, 0))
        return self.send(CREATE_TOPICS, 2, body)

    def recv_create(self, correlation):
        """(error code, message) of the one topic of a CreateTopics v2 answer."""
        r = self.recv(correlation)
        r.i32()  # throttle_time_ms
        topics = r.array(lambda: (r.string(), r.i16(), r.string()))
        if len(topics) != 1:
            raise RuntimeError(f"CreateTopics answered {len(topics)} topics, asked 1")
        return topics[0][1], topics[0][2]

    def create(self, name, partitions, replication=1):
        return self.recv_create(self.send_create(name, partitions, replication))

    def create_assigned(self, name, assignment, timeout_ms=120000):
        """CreateTopics v2 with explicit replicas per partition (the first leads)."""
        body = struct.pack(">i", 1) + string(name) + struct.pack(">ih", -1, -1) + struct.pack(">i", len(assignment))
        for index, replicas in enumerate(assignment):
            body += struct.pack(">ii", index, len(replicas)) + b"".join(struct.pack(">i", r) for r in replicas)
        body += struct.pack(">i", 0) + struct.pack(">ib", timeout_ms, 0)
        return self.recv_create(self.send(CREATE_TOPICS, 2, body))


def create_ok(conn, name, partitions, replication=1):
    error, message = conn.create(name, partitions, replication)
    if error != 0:
        raise RuntimeError(f"create {name}: error {error} ({ERRORS.get(error, '?')}): {message}")


def metadata_of(addr, all_topics=False, timeout_s=2.0, topics=()):
    conn = Conn(addr, timeout_s)
    try:
        return conn.metadata(all_topics, topics)
    finally:
        conn.close()


# ---------------------------------------------------------------- processes

# Every node started, so that a failed run kills what it left running.
NODES = []


class Node:
    """One `tarn serve` process with a fixed data dir and fixed ports."""

    def __init__(self, tarn, work, node_id, kafka_port, controller_port=None, voters=None, settings=()):
        self.tarn, self.node_id = tarn, node_id
        self.settings = list(settings)
        self.dir = Path(work) / f"node{node_id}"
        self.data = self.dir / "data"
        self.kafka_port, self.controller_port, self.voters = kafka_port, controller_port, voters
        self.addr = f"127.0.0.1:{kafka_port}"
        self.proc = None
        self.starts = 0
        self.ready_s = None  # process start to ready line, of the last start
        NODES.append(self)

    def args(self):
        args = [self.tarn, "serve", "--data-dir", str(self.data), "--http-listen", "off", "--log-level", LOG_LEVEL]
        if self.voters is None:
            return args + ["--listen", self.addr]
        return args + [
            "--set", f"listeners=PLAINTEXT://{self.addr},CONTROLLER://127.0.0.1:{self.controller_port}",
            "--set", "controller.listener.names=CONTROLLER",
            "--set", f"controller.quorum.voters={self.voters}",
            "--set", f"node.id={self.node_id}",
            "--set", "process.roles=broker,controller",
        ] + [a for kv in self.settings for a in ("--set", kv)]

    def log_path(self, start):
        return self.dir / f"stderr-{start}.log"

    def start(self, wait_ready=True):
        assert self.proc is None
        self.dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.ready = threading.Event()
        self.ready_s = None
        with open(self.log_path(self.starts), "wb") as err:
            self.t0 = time.monotonic()
            self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=err, text=True)
        threading.Thread(target=self.pump, args=(self.proc, self.t0), daemon=True).start()
        if wait_ready:
            self.wait_ready()

    def pump(self, proc, t0):
        for line in proc.stdout:
            if line.startswith(READY_PREFIX) and self.ready_s is None:
                self.ready_s = time.monotonic() - t0
                self.ready.set()

    def wait_ready(self):
        if not self.ready.wait(READY_TIMEOUT_S):
            raise RuntimeError(f"node {self.node_id}: no ready line within {READY_TIMEOUT_S}s\n{self.tail()}")

    def tail(self, lines=40):
        text = self.log_path(self.starts).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def stop(self):
        """SIGTERM; a clean exit (status 0) is required."""
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"node {self.node_id} did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.tail()}")
        if status != 0:
            raise RuntimeError(f"node {self.node_id} exited {status} after SIGTERM\n{self.tail()}")

    def check_alive(self):
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode}\n{self.tail()}")

    def panics(self):
        found = []
        for start in range(1, self.starts + 1):
            path = self.log_path(start)
            if path.exists():
                found += [l for l in path.read_text(errors="replace").splitlines() if PANIC_MARKER in l]
        return found


class Cluster:
    def __init__(self, tarn, work, n, settings=()):
        shutil.rmtree(work, ignore_errors=True)
        kafka = [free_port() for _ in range(n)]
        ctrl = [free_port() for _ in range(n)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{ctrl[i]}" for i in range(n))
        self.nodes = {i + 1: Node(tarn, work, i + 1, kafka[i], ctrl[i], voters, settings) for i in range(n)}

    def start(self):
        for node in self.nodes.values():
            node.start(wait_ready=False)
        for node in self.nodes.values():
            node.wait_ready()
        return self.wait_formed()

    def running(self):
        return [i for i, n in self.nodes.items() if n.proc is not None]

    def wait_formed(self):
        """Until every running node lists every running broker and one controller; the controller."""
        want = set(self.running())
        deadline = time.monotonic() + FORMED_TIMEOUT_S
        last = None
        while time.monotonic() < deadline:
            for n in self.nodes.values():
                n.check_alive()
            try:
                views = [metadata_of(self.nodes[i].addr) for i in want]
                controllers = {v[1] for v in views}
                if all(set(v[0]) == want for v in views) and len(controllers) == 1 and controllers <= want:
                    return controllers.pop()
                last = views
            except (OSError, ConnectionError) as e:
                last = e
            time.sleep(0.1)
        raise RuntimeError(f"cluster of {sorted(want)} not formed within {FORMED_TIMEOUT_S}s: {last}")

    def controller(self):
        return self.wait_formed()

    def shutdown(self):
        """SIGTERM every running node, the active controller last: a node
        that outlives its quorum waits out its controlled shutdown and an
        unanswered heartbeat (up to 40 s) before it exits."""
        controller = self.wait_formed()
        order = [i for i in self.running() if i != controller] + [controller]
        for i in order:
            self.nodes[i].stop()
        panics = [(i, p) for i, n in self.nodes.items() for p in n.panics()]
        if panics:
            raise RuntimeError(f"panics: {panics}")


def single(tarn, work):
    shutil.rmtree(work, ignore_errors=True)
    node = Node(tarn, work, 1, free_port())
    node.start()
    return node


def stop_single(node):
    node.stop()
    if node.panics():
        raise RuntimeError(f"single node panicked: {node.panics()}")


# ---------------------------------------------------------------- sections

def sequential_creates(addr, prefix, n):
    conn = Conn(addr)
    t0 = time.monotonic()
    for i in range(n):
        create_ok(conn, f"{prefix}-{i}", 1)
    secs = time.monotonic() - t0
    conn.close()
    return n / secs


def parallel_creates(addr, prefix, n, inflight):
    """n creates over `inflight` connections, one request in flight on each."""
    errors = []

    def worker(w):
        try:
            conn = Conn(addr)
            for i in range(w, n, inflight):
                create_ok(conn, f"{prefix}-{i}", 1)
            conn.close()
        except Exception as e:  # reported below: the run fails
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(inflight)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    if errors:
        raise errors[0]
    return n / secs


class CommitRuns:
    """The commit-rate runs of one section (COMMITS_N topics each, one at a
    time or INFLIGHT at a time, COMMITS_REPS of each kind): every run's
    rate, and the CPU its brokers spent on it per 1000 topics, by run key."""

    def __init__(self):
        self.n = int(os.environ.get("COMMITS_N", "1000"))
        self.inflight = int(os.environ.get("INFLIGHT", "8"))
        self.reps = int(os.environ.get("COMMITS_REPS", "3"))
        self.rates, self.cpu = {}, {}

    def measure(self, key, pids, mode, addr, prefix):
        """One run against addr ("seq" or "par"), charged to the processes `pids`."""
        c0 = sum(cpu_s(pid) for pid in pids)
        if mode == "seq":
            rate = sequential_creates(addr, prefix, self.n)
        else:
            rate = parallel_creates(addr, prefix, self.n, self.inflight)
        self.cpu.setdefault(key, []).append((sum(cpu_s(pid) for pid in pids) - c0) * 1000 / self.n)
        self.rates.setdefault(key, []).append(rate)

    def summary(self, section):
        """Prints a `{section}_run` line per key with every run; returns the
        median rate per key, and the medians as RESULT fields (rates, and
        CPU as cpu_KEY)."""
        for key, values in self.rates.items():
            result(f"{section}_run", run=key, rates="/".join(f"{v:.0f}" for v in values),
                   cpu_s_per_1000="/".join(f"{v:.2f}" for v in self.cpu[key]))
        rates = {k: statistics.median(v) for k, v in self.rates.items()}
        fields = {k: f"{v:.1f}" for k, v in rates.items()}
        fields.update({f"cpu_{k}": f"{statistics.median(v):.2f}" for k, v in self.cpu.items()})
        return rates, fields


def commits(tarn, work):
    """Each run on a fresh node or cluster in a directory of its own, so
    that no run pays for the topics an earlier one left behind, nor for
    their removal: on ext4 without a journal, creating a file or directory
    skips (reading each) inodes deleted in the last minutes, which doubled
    the cost of a partition's files right after a run's were removed."""
    runs = CommitRuns()
    # Repetitions interleave single node and cluster, so that a change in
    # the machine's load falls on both.
    for rep in range(1, runs.reps + 1):
        for mode in ("seq", "par"):
            node = single(tarn, f"{work}/commits-single-{mode}-{rep}")
            runs.measure(f"single_{mode}", [node.proc.pid], mode, node.addr, "s")
            stop_single(node)
            # The same node as the sole voter of a Raft quorum: what the
            # quorum's machinery costs before any network or follower.
            sole = Cluster(tarn, f"{work}/commits-sole-{mode}-{rep}", 1)
            sole.start()
            runs.measure(f"sole_{mode}", [sole.nodes[1].proc.pid], mode, sole.nodes[1].addr, "q")
            sole.shutdown()
            for target in ("controller", "forwarded"):
                cluster = Cluster(tarn, f"{work}/commits-cluster-{mode}-{target}-{rep}", 3)
                controller = cluster.start()
                via = controller if target == "controller" else min(i for i in cluster.nodes if i != controller)
                runs.measure(f"cluster_{mode}_{target}", [x.proc.pid for x in cluster.nodes.values()], mode,
                             cluster.nodes[via].addr, "c")
                if cluster.controller() != controller:
                    raise RuntimeError("the controller changed during a commit-rate run")
                cluster.shutdown()
        log(f"rep {rep}: {runs.rates}")
    rates, fields = runs.summary("commits")
    ratios = {f"ratio_{mode}_{target}": f"{rates[f'{group}_{mode}{suffix}'] / rates[f'single_{mode}']:.2f}"
              for mode in ("seq", "par")
              for target, group, suffix in (("controller", "cluster", "_controller"),
                                            ("forwarded", "cluster", "_forwarded"),
                                            ("sole", "sole", ""))}
    result("commits", n=runs.n, inflight=runs.inflight, reps=runs.reps, **fields, **ratios)


KAFKA_SH = str(Path(__file__).resolve().parent.parent / "scripts" / "kafka.sh")


class KafkaNode:
    """One Apache Kafka node (broker and controller in one JVM, as
    scripts/kafka.sh runs it), for the same measurements as a Tarn node."""

    def __init__(self, work, node_id, port, controller_port, voters, cluster_id):
        self.dir = f"{work}/kafka{node_id}"
        self.addr = f"127.0.0.1:{port}"
        self.port = port
        self.env = dict(os.environ, KAFKA_NODE_ID=str(node_id), KAFKA_CONTROLLER_PORT=str(controller_port),
                        KAFKA_VOTERS=voters, KAFKA_CLUSTER_ID=cluster_id)
        self.pid = None

    def start(self):
        # stdout is kafka.sh's one "listening" line; failures go to stderr and raise.
        subprocess.run([KAFKA_SH, "start", self.dir, str(self.port)], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        self.pid = int(Path(self.dir, "kafka.pid").read_text())

    def kill(self):
        """SIGKILL, once its run is measured: the data is thrown away, and a
        quorum's SIGTERMed nodes can wait out kafka.sh's 60 s (a broker
        whose controlled shutdown lost its quorum), even stopped together."""
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while Path(f"/proc/{self.pid}").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka pid {self.pid} still there {STOP_TIMEOUT_S}s after SIGKILL")
            time.sleep(0.05)
        Path(self.dir, "kafka.pid").unlink()


def kafka_nodes(work, n):
    """n Kafka nodes forming one KRaft quorum, started at once; the nodes
    in node id order."""
    shutil.rmtree(work, ignore_errors=True)
    ports = [free_port() for _ in range(2 * n)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[n + i]}" for i in range(n))
    cluster_id = subprocess.run([KAFKA_SH, "tool", "kafka-storage", "random-uuid"], check=True, text=True,
                                stdout=subprocess.PIPE).stdout.strip()
    nodes = [KafkaNode(work, i + 1, ports[i], ports[n + i], voters, cluster_id) for i in range(n)]
    try:
        on_each(nodes, KafkaNode.start)
    except Exception:
        # A start that timed out leaves its JVM running: kill it too.
        for node in nodes:
            if Path(node.dir, "kafka.pid").exists():
                node.pid = int(Path(node.dir, "kafka.pid").read_text())
                if Path(f"/proc/{node.pid}").exists():
                    node.kill()
        raise
    return nodes


def on_each(nodes, action):
    """action(node) for every node at once, on threads; raises the first
    failure once all have finished. A Kafka quorum's nodes start together:
    each start waits for a quorum."""
    errors = []

    def run(node):
        try:
            action(node)
        except Exception as e:  # reported below: the run fails
            errors.append(e)

    threads = [threading.Thread(target=run, args=(node,)) for node in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def kafka_commits(tarn, work):
    """The commits section's single node and three-node quorum, for Tarn and
    for Apache Kafka in one run, interleaved: Kafka's own ratio is the
    reference for Tarn's. Every Kafka node is broker and controller (as
    each Tarn node is); Kafka's creates go to node 1, whose broker forwards
    them to the active controller (in one process or another), as Kafka's
    brokers always do. Tarn's go to its active controller."""
    runs = CommitRuns()
    for rep in range(1, runs.reps + 1):
        for mode in ("seq", "par"):
            node = single(tarn, f"{work}/kc-tarn-single-{mode}-{rep}")
            runs.measure(f"tarn_single_{mode}", [node.proc.pid], mode, node.addr, "s")
            stop_single(node)
            cluster = Cluster(tarn, f"{work}/kc-tarn-cluster-{mode}-{rep}", 3)
            controller = cluster.start()
            runs.measure(f"tarn_cluster_{mode}", [x.proc.pid for x in cluster.nodes.values()], mode,
                         cluster.nodes[controller].addr, "c")
            cluster.shutdown()
            for size in (1, 3):
                nodes = kafka_nodes(f"{work}/kc-kafka-{size}-{mode}-{rep}", size)
                try:
                    runs.measure(f"kafka_{'single' if size == 1 else 'cluster'}_{mode}", [k.pid for k in nodes],
                                 mode, nodes[0].addr, "k")
                finally:
                    for k in nodes:
                        k.kill()
        log(f"rep {rep}: {runs.rates}")
    rates, fields = runs.summary("kafka_commits")
    fields.update({f"ratio_{b}_{mode}": f"{rates[f'{b}_cluster_{mode}'] / rates[f'{b}_single_{mode}']:.2f}"
                   for b in ("tarn", "kafka") for mode in ("seq", "par")})
    result("kafka_commits", n=runs.n, inflight=runs.inflight, reps=runs.reps, **fields)


def wait_absent(addr, dead, t_kill, out, key):
    """Polls Metadata on addr until broker `dead` is absent; seconds since t_kill into out[key]."""
    deadline = t_kill + FENCE_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        try:
            brokers, _, _ = metadata_of(addr)
            if dead not in brokers:
                out[key] = time.monotonic() - t_kill
                return
            last = brokers
        except (OSError, ConnectionError) as e:
            last = e
        time.sleep(POLL_INTERVAL_S)
    out[key] = None
    log(f"{addr}: broker {dead} still listed {FENCE_TIMEOUT_S}s after the kill: {last}")


def fencing(tarn, work):
    reps = int(os.environ.get("FENCE_REPS", "3"))
    cluster = Cluster(tarn, f"{work}/fencing", 3)
    controller = cluster.start()
    for rep in range(1, reps + 1):
        controller = cluster.controller()
        victim = max(i for i in cluster.nodes if i != controller)
        survivors = [i for i in cluster.nodes if i != victim]
        out = {}
        t_kill = time.monotonic()
        cluster.nodes[victim].kill()
        threads = [threading.Thread(target=wait_absent, args=(cluster.nodes[s].addr, victim, t_kill, out, s))
                   for s in survivors]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if any(out[s] is None for s in survivors):
            raise RuntimeError(f"rep {rep}: broker {victim} not fenced on every survivor: {out}")
        result("fencing", rep=rep, killed=victim, controller=controller,
               **{f"absent_on_{s}_s": f"{out[s]:.2f}" for s in survivors})
        cluster.nodes[victim].start()
        cluster.wait_formed()
    cluster.shutdown()


def failover(tarn, work):
    """SIGKILL the active controller FAILOVER_REPS times, then as many times
    SIGTERM it (a controlled stop, which hands the leadership over first)."""
    reps = int(os.environ.get("FAILOVER_REPS", "5"))
    cluster = Cluster(tarn, f"{work}/failover", 3)
    cluster.start()
    for how, rep in [(how, rep) for how in ("kill", "term") for rep in range(1, reps + 1)]:
        controller = cluster.controller()
        via = min(i for i in cluster.nodes if i != controller)
        addr = cluster.nodes[via].addr
        # Warm: one create through `via` before the kill, so its connection
        # to the old controller exists as it would in a running cluster.
        warm = Conn(addr)
        create_ok(warm, f"warm-{how}-{rep}", 1)
        warm.close()
        # Beside the creates: when `via` first names a new controller.
        known = {}

        def watch_controller():
            while time.monotonic() - t_kill < FAILOVER_TIMEOUT_S:
                try:
                    now = metadata_of(addr)[1]
                    if now not in (controller, -1):
                        known["s"] = time.monotonic() - t_kill
                        return
                except (OSError, ConnectionError):
                    pass
                time.sleep(POLL_INTERVAL_S)

        watcher = threading.Thread(target=watch_controller)
        stopped = {}

        def stop_controller():
            try:
                cluster.nodes[controller].stop()
            except RuntimeError as e:
                stopped["error"] = e

        stopper = threading.Thread(target=stop_controller)
        t_kill = time.monotonic()
        if how == "kill":
            cluster.nodes[controller].kill()
        else:
            stopper.start()
        watcher.start()
        attempts, outcomes = 0, {}
        conn = None
        while True:
            elapsed = time.monotonic() - t_kill
            if elapsed > FAILOVER_TIMEOUT_S:
                raise RuntimeError(f"rep {rep}: no CreateTopics succeeded on node {via} within "
                                   f"{FAILOVER_TIMEOUT_S}s of killing controller {controller}: {outcomes}")
            attempts += 1
            try:
                if conn is None:
                    conn = Conn(addr, ATTEMPT_TIMEOUT_S)
                error, message = conn.create(f"after-{how}-{rep}-{attempts}", 1)
            except (OSError, ConnectionError) as e:
                outcome = type(e).__name__
                if conn is not None:
                    conn.close()
                conn = None
            else:
                if error == 0:
                    break
                outcome = ERRORS.get(error, str(error))
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            time.sleep(POLL_INTERVAL_S)
        took = time.monotonic() - t_kill
        conn.close()
        watcher.join()
        if how == "term":
            stopper.join()
            if "error" in stopped:
                raise stopped["error"]
        new = metadata_of(addr)[1]
        result("failover", how=how, rep=rep, killed=controller, via=via, new_controller=new,
               secs=f"{took:.2f}", controller_named_s=f"{known['s']:.2f}" if "s" in known else "never",
               attempts=attempts,
               failures="+".join(f"{k}:{v}" for k, v in sorted(outcomes.items())) or "none")
        cluster.nodes[controller].start()
        cluster.wait_formed()
    cluster.shutdown()


def first_ack(cluster, survivor, victim, topic, t_kill, acked, stop):
    """Until an acks=all Produce to partition 0 of `topic` is answered NONE by
    its leader (as a survivor's Metadata names it): acked["s"] is then the
    seconds since the kill, acked["attempts"] the produces sent, and
    acked["refused"] the refusals and connection failures by kind."""
    attempts, refused = 0, {}
    while not stop.is_set():
        try:
            _, _, topics = metadata_of(survivor, False, 2.0, [topic])
            leader = topics.get(topic, [-1])[0]
            if leader not in (victim, -1):
                attempts += 1
                conn = Conn(cluster.nodes[leader].addr, 2.0)
                try:
                    error = conn.produce(topic, 0, b"first-ack probe")
                finally:
                    conn.close()
                if error == 0:
                    acked.update(s=time.monotonic() - t_kill, attempts=attempts, refused=refused)
                    return
                refused[f"error_{error}"] = refused.get(f"error_{error}", 0) + 1
        except (OSError, ConnectionError) as e:
            # Expected while leadership moves; counted, and reported with the result.
            refused[type(e).__name__] = refused.get(type(e).__name__, 0) + 1
        time.sleep(POLL_INTERVAL_S)


def leaders(tarn, work):
    """SIGKILL a broker that leads P partitions (replication factor 3, the
    victim first in every replica list); poll Metadata on a survivor until
    the victim is absent (the controller fenced it) and until every one of
    the P partitions has a new leader, while a prober sends acks=all
    Produce requests to one of them until one is acknowledged. Twice: with
    detection by session timeout alone (broker.session.fence.on.disconnect
    off), and by the lost heartbeat connection (on, Tarn's default)."""
    counts = [int(x) for x in os.environ.get("LEADER_COUNTS", "1,1000,10000").split(",")]
    detections = os.environ.get("LEADER_DETECTIONS", "session,disconnect").split(",")
    per_topic = 1000
    with_data = os.environ.get("LEADER_DATA", "0") == "1"
    for detection in detections:
        if detection not in ("session", "disconnect"):
            raise RuntimeError(f"unknown detection {detection}: session or disconnect")
        on = "true" if detection == "disconnect" else "false"
        settings = [f"broker.session.fence.on.disconnect={on}"]
        for count in counts:
            cluster = Cluster(tarn, f"{work}/leaders-{detection}-{count}", 3, settings)
            controller = cluster.start()
            victim = max(i for i in cluster.nodes if i != controller)
            others = [i for i in cluster.nodes if i != victim]
            conn = Conn(cluster.nodes[controller].addr, 120.0)
            names = []
            for t in range((count + per_topic - 1) // per_topic):
                n = min(per_topic, count - t * per_topic)
                name = f"led-{count}-{t}"
                error, message = conn.create_assigned(name, [[victim] + others] * n)
                if error != 0:
                    raise RuntimeError(f"create {name}: error {error}: {message}")
                names.append(name)
            conn.close()
            survivor = cluster.nodes[controller].addr
            deadline = time.monotonic() + FORMED_TIMEOUT_S
            while True:
                _, _, topics = metadata_of(survivor, True, 10.0)
                if all(n in topics and all(l == victim for l in topics[n]) for n in names):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{count} partitions not all led by {victim}")
                time.sleep(0.1)
            if with_data:
                # A record in every partition: a new leader of a partition
                # with records writes its leader-epoch checkpoint.
                conn = Conn(cluster.nodes[victim].addr, 120.0)
                for t, name in enumerate(names):
                    parts = range(min(per_topic, count - t * per_topic))
                    answers = conn.produce_to(name, parts, b"before the kill", 1, 30000)
                    failed = {p: e for p, e in answers.items() if e != 0}
                    if failed:
                        raise RuntimeError(f"produce to {name}: errors by partition {failed}")
                conn.close()
            time.sleep(2)  # let the followers fetch once
            acked, stop = {}, threading.Event()
            t_kill = time.monotonic()
            cluster.nodes[victim].kill()
            prober = threading.Thread(target=first_ack,
                                      args=(cluster, survivor, victim, names[-1], t_kill, acked, stop))
            prober.start()
            fenced = led = None
            try:
                while led is None:
                    now = time.monotonic() - t_kill
                    if now > FENCE_TIMEOUT_S:
                        raise RuntimeError(f"{count} partitions: no new leaders {FENCE_TIMEOUT_S}s after the kill")
                    try:
                        brokers, _, topics = metadata_of(survivor, True, 10.0)
                    except (OSError, ConnectionError):
                        time.sleep(POLL_INTERVAL_S)
                        continue
                    if fenced is None and victim not in brokers:
                        fenced = now
                    if all(n in topics and all(l not in (victim, -1) for l in topics[n]) for n in names):
                        led = now
                    time.sleep(POLL_INTERVAL_S)
                prober.join(FENCE_TIMEOUT_S)
            finally:
                stop.set()
                prober.join()
            if "s" not in acked:
                raise RuntimeError(f"{count} partitions: no acknowledged produce {FENCE_TIMEOUT_S}s after the kill")
            refused = "+".join(f"{k}:{v}" for k, v in sorted(acked["refused"].items())) or "none"
            result("leaders", detection=detection, partitions=count, data=int(with_data), killed=victim,
                   fenced_s=f"{fenced:.2f}",
                   led_s=f"{led:.2f}", after_fence_s=f"{led - fenced:.2f}", first_ack_s=f"{acked['s']:.2f}",
                   attempts=acked["attempts"], refused=refused)
            cluster.shutdown()


def idle(tarn, work):
    """The CPU an idle three-node cluster spends per second on P partitions
    of replication factor 3 (no records: what followers' fetches and the
    leaders' answers cost while nothing moves). Topics of 1000 partitions;
    after creation the cluster settles for IDLE_SETTLE_S, then the three
    nodes' CPU is summed over IDLE_S. With IDLE_COMPARE=/other/tarn each
    count runs with that binary too, interleaved, as an A/B in one run."""
    counts = [int(x) for x in os.environ.get("IDLE_COUNTS", "1000,10000").split(",")]
    settle_s = float(os.environ.get("IDLE_SETTLE_S", "5"))
    idle_s = float(os.environ.get("IDLE_S", "10"))
    reps = int(os.environ.get("IDLE_REPS", "2"))
    binaries = [("tarn", tarn)]
    if os.environ.get("IDLE_COMPARE"):
        binaries.append(("compare", os.environ["IDLE_COMPARE"]))
    per_topic = 1000
    for rep in range(1, reps + 1):
        for count in counts:
            for label, binary in binaries:
                cluster = Cluster(binary, f"{work}/idle-{label}-{count}", 3)
                controller = cluster.start()
                conn = Conn(cluster.nodes[controller].addr, 120.0)
                for t in range((count + per_topic - 1) // per_topic):
                    create_ok(conn, f"idle-{t}", min(per_topic, count - t * per_topic), 3)
                conn.close()
                time.sleep(settle_s)
                nodes = list(cluster.nodes.values())
                c0 = sum(cpu_s(n.proc.pid) for n in nodes)
                t0 = time.monotonic()
                time.sleep(idle_s)
                used = sum(cpu_s(n.proc.pid) for n in nodes) - c0
                elapsed = time.monotonic() - t0
                result("idle", rep=rep, binary=label, path=binary, partitions=count,
                       cpu_per_s=f"{used / elapsed:.3f}")
                cluster.shutdown()


def time_to_full_metadata(node, topics, partitions):
    """Seconds from the node's process start to a Metadata answer listing every topic in full."""
    deadline = node.t0 + READY_TIMEOUT_S * 2
    last = None
    while time.monotonic() < deadline:
        node.check_alive()
        try:
            _, _, seen = metadata_of(node.addr, all_topics=True, timeout_s=5.0)
            mine = {k: v for k, v in seen.items() if k.startswith("big-")}
            if len(mine) == topics and all(len(v) == partitions and min(v) >= 0 for v in mine.values()):
                return time.monotonic() - node.t0
            last = f"{len(mine)} topics, {sum(len(v) for v in mine.values())} partitions"
        except (OSError, ConnectionError) as e:
            last = e
        time.sleep(POLL_INTERVAL_S)
    raise RuntimeError(f"node {node.node_id}: metadata never complete: {last}\n{node.tail()}")


def create_big(addr, topics, partitions):
    conn = Conn(addr, 60.0)
    t0 = time.monotonic()
    for i in range(topics):
        create_ok(conn, f"big-{i}", partitions)
    conn.close()
    return time.monotonic() - t0


def put_a_record_in_each(addr, topics, parts):
    """One record into every partition of create_big's topics (acks=all):
    unflushed, so that the next clean stop must flush them all."""
    conn = Conn(addr, 60.0)
    for t in range(topics):
        errors = conn.produce_to(f"big-{t}", range(parts), b"x" * 100, -1, 30000)
        refused = {p: e for p, e in errors.items() if e != 0}
        if refused:
            raise RuntimeError(f"big-{t}: produce refused: {refused}")
    conn.close()


def startup(tarn, work):
    reps = int(os.environ.get("STARTUP_REPS", "3"))
    topics = int(os.environ.get("STARTUP_TOPICS", "100"))
    parts = int(os.environ.get("STARTUP_PARTS", "100"))
    with_data = os.environ.get("STARTUP_DATA", "0") == "1"
    node = single(tarn, f"{work}/startup-single")
    made = create_big(node.addr, topics, parts)
    log(f"single: {topics} x {parts} partitions created in {made:.1f}s")
    for rep in range(1, reps + 1):
        if with_data:
            put_a_record_in_each(node.addr, topics, parts)
        t_stop = time.monotonic()
        node.stop()
        stopped = time.monotonic() - t_stop
        node.start(wait_ready=False)
        full = time_to_full_metadata(node, topics, parts)
        node.wait_ready()
        result("startup", kind="single", rep=rep, partitions=topics * parts,
               stop_s=f"{stopped:.2f}", ready_s=f"{node.ready_s:.2f}", metadata_s=f"{full:.2f}")
    stop_single(node)

    cluster = Cluster(tarn, f"{work}/startup-cluster", 3)
    controller = cluster.start()
    made = create_big(cluster.nodes[controller].addr, topics, parts)
    log(f"cluster: {topics} x {parts} partitions created in {made:.1f}s")
    for rep in range(1, reps + 1):
        controller = cluster.controller()
        target = max(i for i in cluster.nodes if i != controller)
        node = cluster.nodes[target]
        node.stop()
        node.start(wait_ready=False)
        full = time_to_full_metadata(node, topics, parts)
        node.wait_ready()
        cluster.wait_formed()
        registered = time.monotonic() - node.t0
        result("startup", kind="cluster-node", rep=rep, node=target, partitions=topics * parts,
               ready_s=f"{node.ready_s:.2f}", metadata_s=f"{full:.2f}", listed_by_all_s=f"{registered:.2f}")
    cluster.shutdown()


# ---------------------------------------------------------------- report

def parse(raw):
    rows = []
    for line in Path(raw).read_text().splitlines():
        if line.startswith("RESULT "):
            rows.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
    return rows


def verdict(ok):
    return "pass" if ok else "**FAIL**"


def report(raw, out, header):
    rows = parse(raw)
    by = {}
    for r in rows:
        by.setdefault(r["section"], []).append(r)
    md = [Path(header).read_text().rstrip(), ""]
    if "commits" in by:
        c = by["commits"][0]
        md += ["## Metadata commits per second (one-partition topics, CreateTopics v2, one topic per request)", "",
               f"{c['n']} topics per run, each run on a fresh node or cluster, median of {c['reps']} runs "
               "(single node and cluster interleaved; every run in bench/results-cluster.txt); "
               f"\"in flight\" is {c['inflight']} "
               "connections with one request each. "
               "\"controller\" sends to the active controller, \"forwarded\" to another broker, "
               "which forwards to it.", "",
               "CPU is user + system seconds per 1000 topics, summed over the nodes (one, or all three).", "",
               "\"quorum of one\" is the single node run as the sole voter of a Raft quorum (a broker "
               "and controller whose quorum keys name only itself): the quorum's own cost, with no "
               "network and no follower; it has no target.", "",
               "| run | single node /s | quorum /s | ratio | target | | single node CPU | quorum CPU |",
               "|---|---:|---:|---:|---|---|---:|---:|"]
        for label, single_key, cluster_key, ratio_key in [
                ("sequential, to the controller", "single_seq", "cluster_seq_controller", "ratio_seq_controller"),
                ("sequential, forwarded", "single_seq", "cluster_seq_forwarded", "ratio_seq_forwarded"),
                ("in flight, to the controller", "single_par", "cluster_par_controller", "ratio_par_controller"),
                ("in flight, forwarded", "single_par", "cluster_par_forwarded", "ratio_par_forwarded"),
                ("sequential, quorum of one", "single_seq", "sole_seq", "ratio_seq_sole"),
                ("in flight, quorum of one", "single_par", "sole_par", "ratio_par_sole")]:
            if cluster_key not in c:
                continue  # a run from before quorums of one were measured
            ratio = float(c[ratio_key])
            target = ("| (none) | " if cluster_key.startswith("sole")
                      else f"| >= 0.5 | {verdict(ratio >= 0.5)} ")
            md.append(f"| {label} | {c[single_key]} | {c[cluster_key]} | {ratio:.2f} {target}"
                      f"| {c['cpu_' + single_key]} s | {c['cpu_' + cluster_key]} s |")
        md.append("")
    if "kafka_commits" in by:
        c = by["kafka_commits"][0]
        md += ["## Metadata commits per second beside Apache Kafka (one-partition topics, CreateTopics v2)", "",
               f"{c['n']} topics per run, each run on fresh nodes, median of {c['reps']} runs, Tarn and "
               f"Kafka {os.environ.get('KAFKA_VERSION', '4.4.0')} interleaved (every run in the raw file). "
               "Every node is broker and controller. Tarn's creates go to its active controller; Kafka's "
               "to node 1, whose broker forwards them to the active controller as Kafka's brokers always "
               f"do. \"in flight\" is {c['inflight']} connections with one request each. CPU is user + "
               "system seconds per 1000 topics, summed over the nodes.", "",
               "| run | broker | single node /s | 3-node /s | ratio | single node CPU | 3-node CPU |",
               "|---|---|---:|---:|---:|---:|---:|"]
        for mode, label in (("seq", "sequential"), ("par", "in flight")):
            for b, name in (("tarn", "Tarn"), ("kafka", "Kafka")):
                md.append(f"| {label} | {name} | {c[f'{b}_single_{mode}']} | {c[f'{b}_cluster_{mode}']} "
                          f"| {c[f'ratio_{b}_{mode}']} | {c[f'cpu_{b}_single_{mode}']} s "
                          f"| {c[f'cpu_{b}_cluster_{mode}']} s |")
        md.append("")
    if "fencing" in by:
        md += ["## Fencing: SIGKILL a (non-controller) broker, poll Metadata on each survivor until it is absent", "",
               "Target: <= broker.session.timeout.ms + 2 s = 11 s (defaults: heartbeat 2000 ms, session 9000 ms).", "",
               "| rep | killed | controller | kill to absent, per survivor | |", "|---|---|---|---|---|"]
        for r in by["fencing"]:
            times = {k[len("absent_on_"):-2]: float(v) for k, v in r.items() if k.startswith("absent_on_")}
            shown = ", ".join(f"node {k}: {v:.2f} s" for k, v in sorted(times.items()))
            md.append(f"| {r['rep']} | {r['killed']} | {r['controller']} | {shown} | {verdict(max(times.values()) <= 11)} |")
        md.append("")
    if "failover" in by:
        killed = [r for r in by["failover"] if r.get("how", "kill") == "kill"]
        termed = [r for r in by["failover"] if r.get("how") == "term"]
        md += ["## Controller failover: SIGKILL the active controller, CreateTopics on a survivor until one succeeds", "",
               f"Target: <= 3 s. Each attempt waits at most {ATTEMPT_TIMEOUT_S:.0f} s for its answer "
               "before the connection is dropped and another made. Then the same with SIGTERM: the "
               "controller's controlled shutdown (its broker fenced), and its hand-over of the leadership "
               "(no target; the time a rolling restart loses per controller).", ""]
        for title, rows, target in [("SIGKILL", killed, True), ("SIGTERM", termed, False)]:
            if not rows:
                continue
            secs = [float(r["secs"]) for r in rows]
            md += [f"{title}:", "",
                   "| rep | stopped | via | new controller | signal to new controller named by via | signal to created | attempts | failed attempts |",
                   "|---|---|---|---|---:|---:|---:|---|"]
            for r in rows:
                md.append(f"| {r['rep']} | {r['killed']} | {r['via']} | {r['new_controller']} | {r['controller_named_s']} s | {r['secs']} s "
                          f"| {r['attempts']} | {r['failures']} |")
            summary = f"min {min(secs):.2f} s, median {statistics.median(secs):.2f} s, max {max(secs):.2f} s"
            if target:
                summary += f": median {verdict(statistics.median(secs) <= 3)}, max {verdict(max(secs) <= 3)}"
            md += ["", summary, ""]
    if "leaders" in by:
        md += ["## Leader failover: SIGKILL a broker leading P partitions (replication factor 3)", "",
               "From the kill until a survivor's Metadata no longer lists the broker (fenced), until all P "
               "partitions have a new leader, and until the first acks=all Produce to one of them is "
               "acknowledged by its new leader (a prober polling every 20 ms). Detection by session: "
               "broker.session.timeout.ms (9000) alone; by disconnect: the controller also fences a broker "
               "whose heartbeat connection closed and whose listener refuses connections "
               "(broker.session.fence.on.disconnect, Tarn's default). Target: new leaders within 1 s of "
               "the fence.", "",
               "\"with records\": every partition held a record before the kill (LEADER_DATA=1), so each new "
               "leader writes its leader-epoch checkpoint.", "",
               "| detection | partitions | with records | kill to fenced | kill to all led | fenced to all led "
               "| kill to first acked produce | produce attempts (refused) | |",
               "|---|---:|---|---:|---:|---:|---:|---|---|"]
        for r in by["leaders"]:
            data = "yes" if r.get("data") == "1" else "no"
            md.append(f"| {r.get('detection', 'session')} | {r['partitions']} | {data} | {r['fenced_s']} s | {r['led_s']} s "
                      f"| {r['after_fence_s']} s | {r.get('first_ack_s', '-')} s "
                      f"| {r.get('attempts', '-')} ({r.get('refused', '-')}) "
                      f"| {verdict(float(r['after_fence_s']) <= 1)} |")
        md.append("")
    if "idle" in by:
        md += ["## Idle replication: three nodes' CPU per second for P partitions of replication factor 3", "",
               "No records move; what remains is the followers' fetches and the leaders' answers. "
               "\"compare\" is another binary run in the same script (IDLE_COMPARE), interleaved.", "",
               "| rep | binary | partitions | CPU s per s, three nodes summed |", "|---|---|---:|---:|"]
        for r in by["idle"]:
            md.append(f"| {r['rep']} | {r['binary']} (`{r['path']}`) | {r['partitions']} | {r['cpu_per_s']} |")
        md.append("")
    if "startup" in by:
        md += ["## Start-up with 10,000 partitions in the metadata", "",
               "From process start to the ready line, and to the first Metadata answer listing every topic "
               "with every partition led. Target: < 2 s. \"cluster-node\" restarts one non-controller node "
               "(SIGTERM, start) of a running three-node cluster; \"listed by all\" is until every node "
               "lists it again. \"stop\" is the single node's clean exit before it (SIGTERM to exit; "
               "with STARTUP_DATA=1 every partition holds an unflushed record then).", "",
               "| kind | rep | partitions | stop | to ready line | to full Metadata | listed by all | |",
               "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in by["startup"]:
            ok = float(r["ready_s"]) < 2 and float(r["metadata_s"]) < 2
            stop = f"{r['stop_s']} s" if "stop_s" in r else "-"
            md.append(f"| {r['kind']} | {r['rep']} | {r['partitions']} | {stop} | {r['ready_s']} s | {r['metadata_s']} s "
                      f"| {r.get('listed_by_all_s', '-')}{' s' if 'listed_by_all_s' in r else ''} | {verdict(ok)} |")
        md.append("")
    Path(out).write_text("\n".join(md) + "\n")


SECTIONS = {"commits": commits, "fencing": fencing, "failover": failover, "startup": startup,
            "leaders": leaders, "idle": idle, "kafka": kafka_commits}


def main():
    if sys.argv[1] == "--report":
        report(*sys.argv[2:5])
        return
    tarn, work, sections = sys.argv[1], sys.argv[2], sys.argv[3:]
    for s in sections:
        if s not in SECTIONS:
            sys.exit(f"cluster.py: unknown section {s} (know {' '.join(SECTIONS)})")
    try:
        for s in sections:
            log(f"== {s}")
            SECTIONS[s](tarn, work)
    finally:
        for node in NODES:
            if node.proc is not None:
                log(f"killing node {node.node_id} of {node.dir} (left running by a failed step)")
                node.kill()


if __name__ == "__main__":
    main()
