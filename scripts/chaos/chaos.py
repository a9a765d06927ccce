#!/usr/bin/env python3
"""jetraft chaos suite: fault injection into a real three-node cluster (issue 23, item 1).

Run through scripts/chaos/chaos.sh (it creates the network namespaces and runs this script
inside the clients' namespace); see scripts/chaos/README.md and RELIABILITY.md.

Each (server, scenario, run) starts a fresh three-node cluster, one process per network
namespace (10.231.0.1-3, created by netns.sh), creates three R3 streams, runs three workloads
from this process (namespace PREFIX-cl, 10.231.0.100) while the scenario injects its faults,
then heals, measures the time until the cluster is healthy again, drains, reads every node's
copy back and checks it. One JSON line per run goes to --out.

Workloads (all at once, clients pinned to a node each, reconnecting to the others if theirs
goes away; ping interval 2 s, 2 outstanding pings, reconnect wait 0.5 s):
  log    3 publishers (one per node), 1 in flight each, ~PUB_RATE msgs/s each, payload the
         unique value "p<publisher>-<index>" (+ padding to PAYLOAD bytes) on log.p<publisher>,
         Nats-Msg-Id = the value, PubAck awaited (0.5 s), retried with the same id until acked.
         Stream LOG: R3, file, duplicate window 2 min, allow_direct.
  wq     1 producer (~WQ_RATE/s, acked, retried with the same Nats-Msg-Id), 3 consumers (one
         per node) on one durable pull consumer W (explicit ack, ack_wait 4 s), fetch 10/1 s,
         ack_sync each. Stream WQ: R3, work-queue retention.
  kv     3 clients (one per node), 3 keys; loop: get (nats-py KeyValue.get: DIRECT.GET of the
         last message on the key's subject, as every nats client does), then update(last=rev)
         with a fresh unique value (2 s timeout). Stream KV_CAS: a KV bucket's stream with
         unlimited history, so every committed version can be read back for the checker.
Probes: one client per node, pinned to that node only, publishing log.probe.<node>.

Everything is bounded: each phase has a fixed duration, each wait a deadline, each scenario
SCENARIO_LIMIT seconds. Processes are only ever signalled by the PIDs this script started.
"""

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback

import nats
import nats.js.errors as jserr

SUBNET = "10.231.0"
CLIENT_PORT, MON_PORT, CLUSTER_PORT = 4222, 8222, 6222
PUB_RATE = 50.0  # per log publisher
WQ_RATE = 30.0
KV_PAUSE = 0.05
PAYLOAD = 64
PUB_TIMEOUT = 2.0  # work queue and KV requests
LOG_PUB_TIMEOUT = 0.5  # log publishers: short, so the longest gap is measured to ~0.5 s
WARM = 5.0  # workload before the first fault
COOL = 5.0  # workload after the last heal
HEAL_LIMIT = 60.0  # time-to-healthy is reported as ">60" past this
SCENARIO_LIMIT = 300.0
N = 3


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now():
    return time.monotonic()


# ----------------------------------------------------------------------------- network


class Net:
    """Partitions between the server namespaces: blackhole routes on both ends (traffic
    between servers only; the client namespace still reaches every server), or a server's
    bridge port down (cut from everyone, clients included)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.routes = set()  # (ns index, peer index)
        self.ports_down = set()

    def ns(self, i):
        return f"{self.prefix}-n{i + 1}"

    @staticmethod
    def ip(i):
        return f"{SUBNET}.{i + 1}"

    def _ip(self, *args):
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    def cut(self, a, b):
        for x, y in ((a, b), (b, a)):
            if (x, y) not in self.routes:
                self._ip("-n", self.ns(x), "route", "add", "blackhole", f"{self.ip(y)}/32")
                self.routes.add((x, y))

    def isolate(self, i):
        for j in range(N):
            if j != i:
                self.cut(i, j)

    def port_down(self, i):
        self._ip("-n", f"{self.prefix}-br", "link", "set", f"bn{i + 1}", "down")
        self.ports_down.add(i)

    def heal(self):
        for x, y in sorted(self.routes):
            try:
                self._ip("-n", self.ns(x), "route", "del", "blackhole", f"{self.ip(y)}/32")
            except subprocess.CalledProcessError as e:
                log(f"warning: route del {x}->{y}: {e.stderr}")
        self.routes.clear()
        for i in sorted(self.ports_down):
            self._ip("-n", f"{self.prefix}-br", "link", "set", f"bn{i + 1}", "up")
        self.ports_down.clear()


# ----------------------------------------------------------------------------- processes


class Node:
    def __init__(self, i, kind, binary, work, prefix, pidfile):
        self.i = i
        self.name = f"n{i + 1}"
        self.ip = Net.ip(i)
        self.url = f"nats://{self.ip}:{CLIENT_PORT}"
        self.ns = f"{prefix}-n{i + 1}"
        self.store = os.path.join(work, f"{self.name}-store")
        self.log_path = os.path.join(work, f"{self.name}.log")
        self.pidfile = pidfile
        routes = ",".join(f"nats://{Net.ip(j)}:{CLUSTER_PORT}" for j in range(N))
        self.argv = [binary, "-a", self.ip, "-p", str(CLIENT_PORT), "-m", str(MON_PORT),
                     "-sd", self.store, "-n", self.name, "-js", "--cluster_name", "chaos",
                     "--cluster", f"nats://{self.ip}:{CLUSTER_PORT}", "--routes", routes]
        if kind == "nats-sync":
            conf = os.path.join(work, "sync.conf")
            with open(conf, "w") as f:
                f.write("jetstream { sync_interval: always }\n")
            self.argv += ["-c", conf]
        self.proc = None
        self.stopped = False  # SIGSTOPped

    def start(self, note="", extra=()):
        os.makedirs(self.store, exist_ok=True)
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== chaos: start {note} at {time.time():.3f} =====\n".encode())
            # `ip netns exec` execs the server: the PID is the server's.
            self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, *self.argv, *extra],
                                         stdout=f, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        with open(self.pidfile, "a") as f:
            f.write(f"{self.proc.pid}\n")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill9(self):
        if self.stopped:
            self.cont()
        self.signal(signal.SIGKILL)
        if self.proc:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"warning: {self.name} did not exit after SIGKILL")

    async def term(self, grace=15.0):
        """SIGTERM, SIGKILL after grace seconds; returns the seconds it took to exit. Polls
        (never blocks the event loop: the workloads keep running while a node shuts down)."""
        if self.stopped:
            self.cont()
        t0 = now()
        self.signal(signal.SIGTERM)
        while self.proc and self.proc.poll() is None:
            if now() - t0 > grace:
                log(f"{self.name}: still running {grace}s after SIGTERM, SIGKILL")
                self.kill9()
                break
            await asyncio.sleep(0.02)
        return now() - t0

    def stop(self):
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def cont(self):
        self.signal(signal.SIGCONT)
        self.stopped = False

    def wipe(self):
        shutil.rmtree(self.store, ignore_errors=True)

    def log_bytes(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0


async def quiet(*_a, **_k):
    pass


async def connect(urls, pinned=False):
    return await nats.connect(
        servers=urls, dont_randomize=True, connect_timeout=1.0, allow_reconnect=True,
        max_reconnect_attempts=-1, reconnect_time_wait=0.5, ping_interval=2,
        max_outstanding_pings=2, error_cb=quiet, disconnected_cb=quiet, closed_cb=quiet,
        reconnected_cb=quiet)


async def close_quietly(nc):
    try:
        await asyncio.wait_for(nc.close(), 3)
    except Exception:
        pass


async def http_status(ip, path, timeout=1.0):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(ip, MON_PORT), timeout)
        try:
            w.write(f"GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n".encode())
            await w.drain()
            line = await asyncio.wait_for(r.readline(), timeout)
            return int(line.split()[1])
        finally:
            w.close()
    except Exception:
        return None


class Cluster:
    def __init__(self, kind, binary, work, prefix, pidfile):
        self.kind = kind
        self.nodes = [Node(i, kind, binary, work, prefix, pidfile) for i in range(N)]
        self.by_name = {n.name: n for n in self.nodes}
        self.urls = [n.url for n in self.nodes]
        self.admin = None  # client connected to every node
        self.probes = []

    def urls_from(self, i):
        return [self.urls[(i + k) % N] for k in range(N)]

    def start(self):
        for n in self.nodes:
            n.start("initial")

    def stop_all(self):
        for n in self.nodes:
            if n.alive():
                n.kill9()

    async def api(self, subject, body=None, timeout=2.0):
        m = await self.admin.request(subject, json.dumps(body or {}).encode(), timeout=timeout)
        return json.loads(m.data)

    async def leader(self, stream="LOG", timeout=10.0):
        """The stream leader's Node (STREAM.INFO), waiting up to timeout for one."""
        deadline = now() + timeout
        while now() < deadline:
            try:
                info = await self.api(f"$JS.API.STREAM.INFO.{stream}", timeout=1.0)
                name = (info.get("cluster") or {}).get("leader")
                if name in self.by_name:
                    return self.by_name[name]
            except Exception:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"no leader for {stream} within {timeout}s")

    async def probe(self, i, seqno):
        nc = self.probes[i]
        try:
            ack = await nc.jetstream(timeout=1.0).publish(
                f"log.probe.n{i + 1}", f"probe-{i}-{seqno}".encode(), timeout=1.0,
                headers={"Nats-Msg-Id": f"probe-{i}-{seqno}"})
            return ack.seq > 0
        except Exception:
            return False

    async def healthy_once(self, seqno):
        codes = await asyncio.gather(*(http_status(n.ip, "/healthz") for n in self.nodes))
        if any(c != 200 for c in codes):
            return False, codes
        ok = await asyncio.gather(*(self.probe(i, seqno) for i in range(N)))
        return all(ok), ok

    async def wait_healthy(self, limit=HEAL_LIMIT, since=None):
        """Seconds from `since` (default: now) until every /healthz answers 200 and a
        publish through every node is acked; None past limit."""
        t0 = since if since is not None else now()
        k = 0
        last = None
        states = []  # (seconds, what failed) at every change, for the log
        while now() - t0 < limit:
            k += 1
            ok, last = await self.healthy_once(f"{int(time.time() * 1000)}-{k}")
            if ok:
                if len(states) > 1 or (states and now() - t0 > 2):
                    log("    waited for: " + ", ".join(f"{t:.1f}s {w}" for t, w in states))
                return now() - t0
            what = (("healthz " + "/".join(str(c) for c in last)) if not
                    all(isinstance(c, bool) for c in last) else
                    "publish failed via " + ",".join(f"n{i + 1}" for i, c in enumerate(last)
                                                     if not c))
            if not states or states[-1][1] != what:
                states.append((now() - t0, what))
            await asyncio.sleep(0.1)
        log(f"not healthy after {limit}s: {last}")
        return None

    async def setup(self):
        self.start()
        deadline = now() + 60
        while now() < deadline:
            codes = await asyncio.gather(*(http_status(n.ip, "/healthz") for n in self.nodes))
            if all(c == 200 for c in codes):
                break
            await asyncio.sleep(0.2)
        else:
            raise RuntimeError(f"cluster not healthy at start: {codes}")
        self.admin = await connect(self.urls)
        base = {"num_replicas": 3, "storage": "file", "duplicate_window": 120_000_000_000}
        specs = [
            {"name": "LOG", "subjects": ["log.>"], "allow_direct": True},
            {"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"},
            {"name": "KV_CAS", "subjects": ["$KV.CAS.>"], "allow_direct": True,
             "allow_rollup_hdrs": True, "deny_delete": True, "discard": "new",
             "max_msgs_per_subject": 1_000_000},
        ]
        for spec in specs:
            deadline = now() + 30
            while True:
                try:
                    r = await self.api(f"$JS.API.STREAM.CREATE.{spec['name']}", {**base, **spec},
                                       timeout=5.0)
                    if "error" not in r:
                        break
                    err = r["error"]
                except Exception as e:
                    err = repr(e)
                if now() > deadline:
                    raise RuntimeError(f"create {spec['name']}: {err}")
                await asyncio.sleep(0.5)
        deadline = now() + 30
        while True:
            try:
                r = await self.api("$JS.API.CONSUMER.DURABLE.CREATE.WQ.W", {
                    "stream_name": "WQ", "config": {
                        "durable_name": "W", "ack_policy": "explicit",
                        "ack_wait": 4_000_000_000, "max_ack_pending": 1000}}, timeout=5.0)
                if "error" not in r:
                    break
                err = r["error"]
            except Exception as e:
                err = repr(e)
            if now() > deadline:
                raise RuntimeError(f"create consumer W: {err}")
            await asyncio.sleep(0.5)
        for i in range(N):
            self.probes.append(await connect([self.urls[i]]))
        for s in ("LOG", "WQ", "KV_CAS"):
            await self.leader(s, timeout=30)
        t = await self.wait_healthy(limit=30)
        if t is None:
            raise RuntimeError("cluster not healthy after creating the streams")

    async def prefill(self, count, size):
        """Publishes count messages of size bytes (incompressible) to LOG on log.fill before
        the workloads start, one at a time, each PubAck awaited (retried with the same id)."""
        js = self.admin.jetstream(timeout=10.0)
        block = base64.b64encode(os.urandom(size))[:size - 16]
        t0 = now()
        for k in range(count):
            for attempt in range(20):
                try:
                    await js.publish("log.fill", f"{k:015d}|".encode() + block, timeout=10.0,
                                     headers={"Nats-Msg-Id": f"fill-{k}"})
                    break
                except Exception:
                    if attempt == 19:
                        raise RuntimeError(f"pre-fill message {k} not acked")
                    await asyncio.sleep(0.5)
        log(f"  pre-filled LOG with {count} x {size} B in {now() - t0:.1f}s")

    async def close(self):
        for nc in [self.admin, *self.probes]:
            if nc is not None:
                await close_quietly(nc)


# ----------------------------------------------------------------------------- workloads


class Workloads:
    def __init__(self, cluster):
        self.c = cluster
        self.stop = asyncio.Event()
        self.hard_stop = asyncio.Event()
        self.tasks = []
        self.conns = []
        # log
        self.attempted = {}  # value -> publisher
        self.acked = {}  # value -> (seq, t)
        self.ack_times = []
        self.pub_errors = 0
        self.ack_seq_dupes = 0
        # wq
        self.wq_acked = set()
        self.wq_seen = {}  # value -> deliveries
        self.wq_ack_fail = 0
        # kv
        self.kv_ops = []  # dicts
        self.kv_keys = ["k0", "k1", "k2"]

    async def start(self):
        pad = "x" * PAYLOAD
        for i in range(N):
            nc = await connect(self.c.urls_from(i))
            self.conns.append(nc)
            self.tasks.append(asyncio.create_task(self.publisher(i, nc, pad)))
        nc = await connect(self.c.urls_from(0))
        self.conns.append(nc)
        self.tasks.append(asyncio.create_task(self.wq_producer(nc)))
        for i in range(N):
            nc = await connect(self.c.urls_from(i))
            self.conns.append(nc)
            self.tasks.append(asyncio.create_task(self.wq_consumer(i, nc)))
        nc = self.conns[0]
        kv = await nc.jetstream(timeout=PUB_TIMEOUT).key_value("CAS")
        for k in self.kv_keys:
            t0 = now()
            for _ in range(20):
                try:
                    rev = await kv.put(k, f"init-{k}".encode())
                    self.kv_ops.append(dict(c=-1, key=k, op="w", inv=t0, comp=now(), res="ok",
                                            rev=rev, val=f"init-{k}", exp=None))
                    break
                except Exception:
                    await asyncio.sleep(0.5)
        for i in range(N):
            nc = await connect(self.c.urls_from(i))
            self.conns.append(nc)
            self.tasks.append(asyncio.create_task(self.kv_client(i, nc)))

    async def publisher(self, p, nc, pad):
        js = nc.jetstream(timeout=PUB_TIMEOUT)
        k = 0
        while not self.stop.is_set():
            v = f"p{p}-{k}"
            k += 1
            self.attempted[v] = p
            body = f"{v}|{pad}".encode()
            while not self.hard_stop.is_set():
                try:
                    ack = await js.publish(f"log.p{p}", body, timeout=LOG_PUB_TIMEOUT,
                                           headers={"Nats-Msg-Id": v})
                    if ack.duplicate:
                        self.ack_seq_dupes += 1
                    self.acked[v] = (ack.seq, now())
                    self.ack_times.append(now())
                    break
                except Exception:
                    self.pub_errors += 1
                    if self.stop.is_set():
                        break  # left in doubt
                    await asyncio.sleep(0.05)
            await asyncio.sleep(1.0 / PUB_RATE)

    async def wq_producer(self, nc):
        js = nc.jetstream(timeout=PUB_TIMEOUT)
        k = 0
        while not self.stop.is_set():
            v = f"t-{k}"
            k += 1
            while not self.stop.is_set():
                try:
                    await js.publish("wq.task", v.encode(), timeout=PUB_TIMEOUT,
                                     headers={"Nats-Msg-Id": v})
                    self.wq_acked.add(v)
                    break
                except Exception:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(1.0 / WQ_RATE)

    async def wq_consumer(self, i, nc):
        js = nc.jetstream(timeout=PUB_TIMEOUT)
        psub = None
        while not self.hard_stop.is_set():
            try:
                if psub is None:
                    psub = await js.pull_subscribe_bind("W", stream="WQ")
                msgs = await psub.fetch(10, timeout=1.0)
            except Exception:
                await asyncio.sleep(0.1)
                continue
            for m in msgs:
                v = m.data.decode(errors="replace")
                self.wq_seen[v] = self.wq_seen.get(v, 0) + 1
                try:
                    await m.ack_sync(timeout=2.0)
                except Exception:
                    self.wq_ack_fail += 1

    async def kv_client(self, i, nc):
        js = nc.jetstream(timeout=PUB_TIMEOUT)
        kv = None
        rnd = random.Random(i)
        k = 0
        while not self.stop.is_set():
            try:
                if kv is None:
                    kv = await js.key_value("CAS")
            except Exception:
                await asyncio.sleep(0.2)
                continue
            key = rnd.choice(self.kv_keys)
            t0 = now()
            try:
                e = await kv.get(key)
                self.kv_ops.append(dict(c=i, key=key, op="r", inv=t0, comp=now(), res="ok",
                                        rev=e.revision, val=e.value.decode()))
            except Exception as ex:
                self.kv_ops.append(dict(c=i, key=key, op="r", inv=t0, comp=now(),
                                        res="err", err=type(ex).__name__))
                await asyncio.sleep(0.1)
                continue
            v = f"c{i}-{k}"
            k += 1
            t1 = now()
            op = dict(c=i, key=key, op="w", inv=t1, val=v, exp=e.revision)
            try:
                rev = await kv.update(key, v.encode(), last=e.revision)
                op.update(comp=now(), res="ok", rev=rev)
            except jserr.KeyWrongLastSequenceError:
                op.update(comp=now(), res="fail")
            except Exception as ex:
                op.update(comp=None, res="unknown", err=type(ex).__name__)
            self.kv_ops.append(op)
            await asyncio.sleep(KV_PAUSE)

    async def finish(self):
        """Stops the producers, lets the consumers drain (bounded), stops everything."""
        self.stop.set()
        await asyncio.sleep(PUB_TIMEOUT + 0.5)
        deadline = now() + 30
        while now() < deadline and not self.wq_acked <= set(self.wq_seen):
            await asyncio.sleep(0.5)
        self.hard_stop.set()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for nc in self.conns:
            await close_quietly(nc)


# ----------------------------------------------------------------------------- read back


def digest(data):
    """A message body as read back: the text of a workload message, a hash of a big one (the
    pre-fill's), so several copies of a big stream fit in memory."""
    if len(data) <= 4096:
        return data.decode(errors="replace")
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


async def read_copy(nc, stream, last, direct):
    """seq -> (subject, data) for 1..last through nc: DIRECT.GET (answered by the node nc is
    connected to, as far as the server routes it locally) or STREAM.MSG.GET (the leader).
    Returns (copy, errors)."""
    out, errors = {}, [0]
    sem = asyncio.Semaphore(64)

    async def one(seq):
        async with sem:
            for attempt in range(3):
                try:
                    if direct:
                        m = await nc.request(f"$JS.API.DIRECT.GET.{stream}",
                                             json.dumps({"seq": seq}).encode(), timeout=2.0)
                        h = m.headers or {}
                        if h.get("Status"):
                            if h["Status"] == "404":
                                return
                            raise RuntimeError(h["Status"])
                        out[seq] = (h.get("Nats-Subject"), digest(m.data))
                    else:
                        m = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}",
                                             json.dumps({"seq": seq}).encode(), timeout=2.0)
                        r = json.loads(m.data)
                        if "error" in r:
                            if r["error"].get("code") == 404:
                                return
                            raise RuntimeError(r["error"])
                        msg = r["message"]
                        out[seq] = (msg["subject"], digest(base64.b64decode(msg.get("data") or "")))
                    return
                except Exception:
                    await asyncio.sleep(0.2)
            errors[0] += 1

    for lo in range(1, last + 1, 2000):
        await asyncio.gather(*(one(s) for s in range(lo, min(last, lo + 1999) + 1)))
    return out, errors[0]


async def stream_last(cluster, stream):
    for _ in range(20):
        try:
            info = await cluster.api(f"$JS.API.STREAM.INFO.{stream}", timeout=2.0)
            return info["state"]["last_seq"]
        except Exception:
            await asyncio.sleep(0.5)
    raise RuntimeError(f"STREAM.INFO {stream} failed")


async def read_all(cluster, stream):
    """The leader's copy and every node's copy (DIRECT.GET through that node); nodes that
    differ from the leader's copy are read again once after 5 s (catch-up lag is not
    divergence). Returns (leader copy, {node: differing seqs}, read errors)."""
    last = await stream_last(cluster, stream) + 5
    ref, errs = await read_copy(cluster.admin, stream, last, direct=False)
    diverge = {}
    for i, nc in enumerate(cluster.probes):
        copy, e = await read_copy(nc, stream, last, direct=True)
        errs += e
        bad = {s for s in set(ref) | set(copy) if ref.get(s) != copy.get(s)}
        if bad:
            await asyncio.sleep(5)
            copy, e = await read_copy(nc, stream, last, direct=True)
            bad = {s for s in set(ref) | set(copy) if ref.get(s) != copy.get(s)}
        if bad:
            diverge[f"n{i + 1}"] = sorted(bad)
    return ref, diverge, errs


def check_log(w, ref):
    where = {}  # value -> [seq]
    for seq, (subj, data) in ref.items():
        if subj and subj.startswith(("log.probe.", "log.fill")):
            continue
        v = data.split("|", 1)[0]
        where.setdefault(v, []).append(seq)
    lost = [v for v in w.acked if v not in where]
    dups = {v: s for v, s in where.items() if len(s) > 1}
    unexpected = [v for v in where if v not in w.attempted]
    seq_mismatch = [v for v, (s, _) in w.acked.items() if v in where and s not in where[v]]
    reordered = 0
    by_pub = {}
    for v, seqs in where.items():
        if v in w.attempted:
            p, k = v[1:].split("-")
            by_pub.setdefault(p, []).append((int(k), min(seqs)))
    for lst in by_pub.values():
        lst.sort()
        reordered += sum(1 for a, b in zip(lst, lst[1:]) if b[1] < a[1])
    in_doubt = [v for v in w.attempted if v not in w.acked and v in where]
    return dict(acked=len(w.acked), attempted=len(w.attempted), lost=len(lost),
                lost_sample=lost[:10], duplicates=len(dups), dup_sample=list(dups.items())[:5],
                unexpected=len(unexpected) + len(seq_mismatch), reordered=reordered,
                in_doubt_stored=len(in_doubt), pub_errors=w.pub_errors)


def check_kv(w, ref):
    """Linearizability of each key as a compare-and-set register. The KV revision (stream
    sequence) totally orders the versions of a key, and values are unique, so the WGL search
    collapses to linear checks (Gibbons-Korach with a known write order): (1) every committed
    write's expected revision is the version right before it (no lost update), no failed CAS
    committed; (2) every read returns a committed (revision, value); (3) cluster order: no op
    of version k is invoked after an op of a later version completed, and no read of k
    completes before k's write was invoked. Stale reads (the issue's definition): a read
    returning a revision older than one the same client already saw for the key, or than one
    acked before the read began."""
    hist = {}  # key -> [(rev, val)]
    for seq, (subj, data) in sorted(ref.items()):
        if subj and subj.startswith("$KV.CAS."):
            hist.setdefault(subj[len("$KV.CAS."):], []).append((seq, data))
    violations = []
    stale = 0
    lost = 0
    writes_by_val = {}
    for op in w.kv_ops:
        if op["op"] == "w":
            writes_by_val[op["val"]] = op
    for key, versions in hist.items():
        ops = [o for o in w.kv_ops if o["key"] == key]
        pos = {rev: k for k, (rev, _) in enumerate(versions)}
        val_at = dict(versions)
        clusters = [[] for _ in versions]
        for k, (rev, val) in enumerate(versions):
            wop = writes_by_val.get(val)
            if wop is None:
                violations.append(f"{key}@{rev}: committed value {val!r} nobody wrote")
                continue
            if wop["res"] == "fail":
                violations.append(f"{key}@{rev}: CAS reported failed but committed")
            if wop["res"] == "ok" and wop["rev"] != rev:
                violations.append(f"{key}@{rev}: acked with revision {wop['rev']}")
            exp = wop.get("exp")
            prev = versions[k - 1][0] if k else None
            if exp is not None and exp != prev:
                violations.append(f"{key}@{rev}: CAS expected {exp}, previous version {prev}")
            clusters[k].append((wop["inv"], wop["comp"] if wop["comp"] is not None else 1e18, "w"))
        for o in ops:
            if o["op"] == "w" and o["res"] == "ok" and o["val"] not in {v for _, v in versions}:
                lost += 1
                violations.append(f"{key}: acked write {o['val']}@{o['rev']} missing")
            if o["op"] == "r" and o["res"] == "ok":
                if val_at.get(o["rev"]) != o["val"]:
                    violations.append(f"{key}: read ({o['rev']},{o['val']}) never committed")
                    continue
                clusters[pos[o["rev"]]].append((o["inv"], o["comp"], "r"))
        # (3) cluster order
        suf = 1e18
        for k in range(len(clusters) - 1, -1, -1):
            for inv, comp, kind in clusters[k]:
                if inv > suf:
                    violations.append(f"{key}: {kind} of version {k} invoked after a later "
                                      f"version was seen ({inv - suf:.3f}s)")
            winv = [inv for inv, _, kind in clusters[k] if kind == "w"]
            if winv:
                for inv, comp, kind in clusters[k]:
                    if kind == "r" and comp < winv[0]:
                        violations.append(f"{key}: read of version {k} before its write")
            if clusters[k]:
                suf = min(suf, min(c for _, c, _ in clusters[k]))
        # stale reads
        acked_w = sorted((o["comp"], o["rev"]) for o in ops
                         if o["op"] == "w" and o["res"] == "ok")
        seen = {}  # client -> max rev observed
        for o in sorted(ops, key=lambda o: o["inv"]):
            if o["res"] != "ok":
                continue
            if o["op"] == "r":
                before = max((r for c, r in acked_w if c < o["inv"]), default=0)
                if o["rev"] < max(before, seen.get(o["c"], 0)):
                    stale += 1
            seen[o["c"]] = max(seen.get(o["c"], 0), o["rev"])
    return dict(kv_ops=sum(1 for o in w.kv_ops if o.get("res") == "ok"),
                kv_reads=sum(1 for o in w.kv_ops if o["op"] == "r" and o["res"] == "ok"),
                kv_cas_ok=sum(1 for o in w.kv_ops if o["op"] == "w" and o["res"] == "ok"),
                kv_unknown=sum(1 for o in w.kv_ops if o["res"] == "unknown"),
                kv_lost=lost, lin_violations=len(violations), lin_sample=violations[:10],
                stale_reads=stale)


def max_gap(times, t_from, t_to):
    ts = sorted(t for t in times if t_from <= t <= t_to)
    pts = [t_from] + ts + [t_to]
    return max(b - a for a, b in zip(pts, pts[1:]))


# ----------------------------------------------------------------------------- scenarios


class Ctx:
    def __init__(self, cluster, net, rng):
        self.c = cluster
        self.net = net
        self.rng = rng
        self.heals = []  # seconds to healthy after each heal
        self.notes = []
        self.shutdowns = []

    async def heal_and_measure(self, what):
        t0 = now()
        self.net.heal()
        for n in self.c.nodes:
            if n.stopped:
                n.cont()
        t = await self.c.wait_healthy(since=t0)
        self.heals.append(t)
        log(f"  {what}: healthy after {t if t is None else round(t, 2)}s")

    async def restart_and_measure(self, node, what, extra=()):
        t0 = now()
        node.start(what, extra)
        t = await self.c.wait_healthy(since=t0)
        self.heals.append(t)
        log(f"  {what} {node.name}: healthy after {t if t is None else round(t, 2)}s")

    async def leader(self):
        n = await self.c.leader("LOG")
        return n


async def sc_kill_leader(x):
    for r in range(3):
        n = await x.leader()
        log(f"  round {r}: kill -9 leader {n.name}")
        n.kill9()
        await asyncio.sleep(5)
        await x.restart_and_measure(n, "restart")
        await asyncio.sleep(3)


async def sc_kill_random(x):
    for r in range(3):
        n = x.rng.choice(x.c.nodes)
        log(f"  round {r}: kill -9 {n.name}")
        n.kill9()
        await asyncio.sleep(5)
        await x.restart_and_measure(n, "restart")
        await asyncio.sleep(3)


async def sc_kill_two(x):
    a, b = x.rng.sample(x.c.nodes, 2)
    log(f"  kill -9 {a.name} and {b.name}")
    a.kill9()
    b.kill9()
    await asyncio.sleep(5)
    t0 = now()
    a.start("restart")
    b.start("restart")
    t = await x.c.wait_healthy(since=t0)
    x.heals.append(t)
    log(f"  healthy after {t}s")


async def sc_stop_leader(x):
    for r in range(2):
        n = await x.leader()
        log(f"  round {r}: SIGSTOP leader {n.name} for 8s")
        n.stop()
        await asyncio.sleep(8)
        await x.heal_and_measure(f"SIGCONT {n.name}")
        await asyncio.sleep(3)


async def sc_isolate_leader(x):
    for r in range(2):
        n = await x.leader()
        log(f"  round {r}: isolate leader {n.name} from its peers for 10s")
        x.net.isolate(n.i)
        await asyncio.sleep(10)
        await x.heal_and_measure("heal")
        await asyncio.sleep(3)


async def sc_isolate_follower(x):
    for r in range(2):
        ld = await x.leader()
        n = x.rng.choice([m for m in x.c.nodes if m is not ld])
        log(f"  round {r}: isolate follower {n.name} from its peers for 10s")
        x.net.isolate(n.i)
        await asyncio.sleep(10)
        await x.heal_and_measure("heal")
        await asyncio.sleep(3)


async def sc_split_churn(x):
    """The minority moves: 5 steps of 6 s, each with a different node cut off from the other
    two (the first is the leader), switched without a heal in between, then healed."""
    first = (await x.leader()).i
    order = [first] + [i for i in range(N) if i != first]
    for step in range(5):
        i = order[step % N] if step < N else x.rng.choice([j for j in range(N) if j != prev])
        prev = i
        log(f"  step {step}: minority n{i + 1}")
        x.net.heal()
        x.net.isolate(i)
        await asyncio.sleep(6)
    await x.heal_and_measure("heal")


async def sc_bridge_leader(x):
    """The leader's bridge port down: cut from its peers and from every client."""
    n = await x.leader()
    log(f"  leader {n.name} bridge port down for 10s")
    x.net.port_down(n.i)
    await asyncio.sleep(10)
    await x.heal_and_measure("heal")


async def sc_lost_volume(x):
    ld = await x.leader()
    n = x.rng.choice([m for m in x.c.nodes if m is not ld])
    log(f"  SIGTERM follower {n.name}, wipe its store, restart")
    x.shutdowns.append(await n.term())
    n.wipe()
    await asyncio.sleep(2)
    await x.restart_and_measure(n, "restart (empty store)")


async def sc_rolling_restart(x):
    for n in x.c.nodes:
        d = await n.term()
        x.shutdowns.append(d)
        log(f"  {n.name}: exited {d:.2f}s after SIGTERM")
        await x.restart_and_measure(n, "restart")
        await asyncio.sleep(2)


# What each corruption scenario damages: jetraft's RocksDB files, and for nats-server the closest
# counterpart (the LOG stream's message blocks, its Raft group's log blocks, its metadata).
DAMAGE = {
    "sst": {"jetraft": lambda p: p.endswith(".sst"),
            "nats": lambda p: "/streams/LOG/msgs/" in p and p.endswith(".blk")},
    "wal": {"jetraft": lambda p: os.path.basename(p).endswith(".log")
            and os.path.basename(p)[:1].isdigit(),
            "nats": lambda p: "/_js_/S-" in p and "/msgs/" in p and p.endswith(".blk")},
    "manifest": {"jetraft": lambda p: os.path.basename(p).startswith("MANIFEST-"),
                 "nats": lambda p: p.endswith("/streams/LOG/meta.inf")},
}


def damage(store, kind, what, rng):
    """Overwrites 64 bytes in the middle of every matching file (at most 4, the largest);
    returns the damaged paths relative to store."""
    match = DAMAGE[what]["jetraft" if kind == "jetraft" else "nats"]
    files = []
    for root, _, names in os.walk(store):
        for nm in names:
            p = os.path.join(root, nm)
            if match(p) and os.path.getsize(p) > 0:
                files.append(p)
    files.sort(key=os.path.getsize, reverse=True)
    done = []
    for p in files[:4]:
        size = os.path.getsize(p)
        off = max(0, size // 2 - 32)
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(bytes(rng.randrange(256) for _ in range(min(64, size))))
        done.append(f"{os.path.relpath(p, store)}@{off}")
    return done


def last_error(path):
    """The last error-looking line of a log (bounded read of its tail)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 200_000))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "?"
    for keys in (("[ERR]", "[FTL]", "ERROR", "panicked", "Error:"), ("rror",)):
        for line in reversed(lines):
            if any(k in line for k in keys):
                return line.strip()[-200:]
    return (lines[-1].strip()[-200:] if lines else "")


def sc_corrupt(what):
    async def sc(x):
        ld = await x.leader()
        n = x.rng.choice([m for m in x.c.nodes if m is not ld])
        await asyncio.sleep(5)
        if what == "wal":
            # A clean shutdown leaves jetraft's WAL empty (the memtable is flushed): a crash
            # leaves the tail of the log in it.
            log(f"  kill -9 follower {n.name}, damage its {what} files, restart")
            n.kill9()
        else:
            log(f"  SIGTERM follower {n.name}, damage its {what} files, restart")
            x.shutdowns.append(await n.term())
        done = damage(n.store, x.c.kind, what, x.rng)
        if not done:
            # Nothing of that kind on disk yet (jetraft: no SST before the first flush; a
            # restart flushes the recovered memtable). One restart, then try again.
            x.notes.append(f"{n.name}: no {what} file at first, restarted once to get one")
            n.start("restart (to flush)")
            await x.c.wait_healthy(limit=30)
            await asyncio.sleep(3)
            if what == "wal":
                n.kill9()
            else:
                x.shutdowns.append(await n.term())
            done = damage(n.store, x.c.kind, what, x.rng)
        x.notes.append(f"{n.name}: damaged {len(done)} {what} file(s)"
                       + (f" ({', '.join(done)[:150]})" if done else " (none found)"))
        log(f"  damaged: {done}")
        await restart_damaged(x, n)
        await asyncio.sleep(10)
    return sc


async def restart_damaged(x, n):
    """Starts a node whose files were damaged and measures its way back; if it exits, the
    operator's repair: jetraft again with --repair_store, nats-server with its store wiped."""
    await x.restart_and_measure(n, "restart (damaged)")
    await asyncio.sleep(2)
    if not n.alive() and x.c.kind == "jetraft":
        # jetraft repairs damaged table files on its own; a damaged WAL or MANIFEST needs
        # the operator's --repair_store (the store is moved aside, the node rejoins under
        # a new id).
        x.notes.append(f"{n.name} exited after the restart (rc {n.proc.returncode}: "
                       f"{last_error(n.log_path)}); restarted with --repair_store")
        await x.restart_and_measure(n, "restart (--repair_store)",
                                    extra=("--repair_store",))
    elif not n.alive():
        x.notes.append(f"{n.name} exited after the restart (rc {n.proc.returncode}: "
                       f"{last_error(n.log_path)}); store wiped and restarted (operator "
                       "repair)")
        n.wipe()
        await x.restart_and_measure(n, "restart (wiped)")


async def replica_state(x, node):
    """How `node` stands in the LOG stream right now: its /healthz and, from STREAM.INFO, its
    replica entry (current, lag) or 'no replica' (not yet added, or not reported)."""
    code = await http_status(node.ip, "/healthz")
    try:
        info = await x.c.api("$JS.API.STREAM.INFO.LOG", timeout=1.0)
        cl = info.get("cluster") or {}
        if cl.get("leader") == node.name:
            rep = "LOG leader"
        else:
            r = [r for r in cl.get("replicas") or [] if r.get("name") == node.name]
            rep = (f"LOG replica current={r[0].get('current')} lag={r[0].get('lag', 0)}"
                   if r else "no LOG replica")
    except Exception as e:
        rep = f"STREAM.INFO failed ({type(e).__name__})"
    return f"healthz {code}, {rep}"


def sc_corrupt_during_rebuild(delay):
    """Lost volume on one follower, and `delay` seconds after its empty restart (while its
    replicas are still being rebuilt from the leaders: the LOG stream is pre-filled, see
    PREFILL), the other follower's SST files (nats-server: LOG message blocks) damaged while
    it is stopped, then restarted. Only the stream leader holds every message undamaged."""
    async def sc(x):
        ld = await x.leader()
        a, b = [m for m in x.c.nodes if m is not ld]
        if x.rng.random() < 0.5:
            a, b = b, a
        log(f"  SIGTERM follower {a.name}, wipe its store, restart it empty")
        x.shutdowns.append(await a.term())
        a.wipe()
        t_a = now()
        a.start("restart (empty store)")
        await asyncio.sleep(max(0.0, t_a + delay - now()))
        state = await replica_state(x, a)
        x.notes.append(f"{a.name} wiped; {delay:g}s after its restart: {state}")
        log(f"  {a.name} {delay:g}s after its restart: {state}")
        log(f"  SIGTERM the other follower {b.name}, damage its sst files, restart")
        x.shutdowns.append(await b.term())
        done = damage(b.store, x.c.kind, "sst", x.rng)
        x.notes.append(f"{b.name}: damaged {len(done)} sst file(s)"
                       + (f" ({', '.join(done)[:120]})" if done else " (none found)"))
        log(f"  damaged: {done}")
        await restart_damaged(x, b)
        t = await x.c.wait_healthy(since=t_a, limit=2 * HEAL_LIMIT)
        x.notes.append(f"all healthy {t if t is None else round(t, 1)}s after {a.name}'s "
                       "empty restart")
        log(f"  all healthy {t if t is None else round(t, 2)}s after {a.name}'s restart")
        await asyncio.sleep(5)
    return sc


SCENARIOS = {
    "kill-leader": sc_kill_leader,
    "kill-random": sc_kill_random,
    "kill-two": sc_kill_two,
    "stop-leader": sc_stop_leader,
    "isolate-leader": sc_isolate_leader,
    "isolate-follower": sc_isolate_follower,
    "split-churn": sc_split_churn,
    "bridge-leader": sc_bridge_leader,
    "lost-volume": sc_lost_volume,
    "rolling-restart": sc_rolling_restart,
    "corrupt-sst": sc_corrupt("sst"),
    "corrupt-wal": sc_corrupt("wal"),
    "corrupt-manifest": sc_corrupt("manifest"),
    "corrupt-during-rebuild-2s": sc_corrupt_during_rebuild(2.0),
    "corrupt-during-rebuild-6s": sc_corrupt_during_rebuild(6.0),
}

# Scenarios that need a big LOG stream, so that rebuilding a replica takes longer than the
# scenario's delay: (messages, bytes each) published on log.fill before the workloads start,
# one at a time, so that every message is a Raft entry of its own (published concurrently,
# the leader batches them): a group log more than openraft's replication lag threshold (5,000
# entries) ahead of a new replica is what makes the replica wait for its snapshot before it
# counts as caught up.
PREFILL = {"corrupt-during-rebuild-2s": (10_000, 32 * 1024),
           "corrupt-during-rebuild-6s": (10_000, 64 * 1024)}


def shrink_log(path, keep=20_000_000):
    """A kept log larger than 2*keep bytes keeps its first and last keep bytes (a down peer
    can make a jetraft leader log ~1 GB a minute)."""
    try:
        size = os.path.getsize(path)
        if size <= 2 * keep:
            return
        with open(path, "rb") as f:
            head = f.read(keep)
            f.seek(size - keep)
            tail = f.read()
        with open(path, "wb") as f:
            f.write(head + f"\n===== chaos: {size - 2 * keep} bytes cut =====\n".encode() + tail)
    except OSError:
        pass


async def run_one(kind, binary, scenario, run, args):
    work = os.path.join(args.work, f"{kind}-{scenario}-{run}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    net = Net(args.prefix)
    cluster = Cluster(kind, binary, work, args.prefix, args.pidfile)
    res = dict(server=kind, scenario=scenario, run=run, date=time.strftime("%Y-%m-%d %H:%M"),
               ok=False)
    t_start = now()
    w = None
    try:
        await cluster.setup()
        if scenario in PREFILL:
            await cluster.prefill(*PREFILL[scenario])
        w = Workloads(cluster)
        await w.start()
        await asyncio.sleep(WARM)
        x = Ctx(cluster, net, random.Random(f"{scenario}-{run}"))
        t_fault = now()
        await asyncio.wait_for(SCENARIOS[scenario](x), SCENARIO_LIMIT)
        net.heal()
        for n in cluster.nodes:
            if n.stopped:
                n.cont()
            if not n.alive():
                n.start("end of scenario")
        await asyncio.sleep(COOL)
        t_end = now()
        await w.finish()
        res["gap"] = max_gap(w.ack_times, t_fault, t_end)
        res["heals"] = x.heals
        res["shutdowns"] = x.shutdowns
        res["notes"] = x.notes
        t = await cluster.wait_healthy(limit=30)
        res["healthy_at_end"] = t is not None
        ref, div, errs = await read_all(cluster, "LOG")
        res.update(check_log(w, ref))
        res["divergent"] = {k: len(v) for k, v in div.items()}
        res["divergent_sample"] = {k: v[:5] for k, v in div.items()}
        kref, kdiv, kerrs = await read_all(cluster, "KV_CAS")
        res.update(check_kv(w, kref))
        res["kv_divergent"] = {k: len(v) for k, v in kdiv.items()}
        res["read_errors"] = errs + kerrs
        res["wq_acked"] = len(w.wq_acked)
        res["wq_lost"] = len(w.wq_acked - set(w.wq_seen))
        res["wq_redelivered"] = sum(c - 1 for c in w.wq_seen.values())
        res["wq_unexpected"] = len(set(w.wq_seen) - w.wq_acked)
        res["ok"] = True
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
        log(traceback.format_exc())
        if w is not None:
            w.stop.set()
            w.hard_stop.set()
            for t in w.tasks:
                t.cancel()
    finally:
        try:
            net.heal()
        except Exception:
            pass
        res["log_mb"] = round(sum(n.log_bytes() for n in cluster.nodes) / 1e6, 2)
        await cluster.close()
        cluster.stop_all()
        res["seconds"] = round(now() - t_start, 1)
    if res["ok"] and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        res["work"] = work
        for n in cluster.nodes:
            shrink_log(n.log_path)
    return res


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--pidfile", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--servers", default="jetraft,nats")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--jetraft-bin", required=True)
    ap.add_argument("--nats-bin", required=True)
    ap.add_argument("--keep", action="store_true", help="keep logs and stores of every run")
    args = ap.parse_args()
    bins = {"jetraft": args.jetraft_bin, "nats": args.nats_bin, "nats-sync": args.nats_bin}
    scenarios = [s for s in args.scenarios.split(",") if s] or list(SCENARIOS)
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"unknown scenario {s}; known: {', '.join(SCENARIOS)}")
    for run in range(args.runs):
        for scenario in scenarios:
            for kind in args.servers.split(","):
                log(f"== {kind} {scenario} run {run + 1}/{args.runs}")
                res = await run_one(kind, bins[kind], scenario, run, args)
                summary = {k: res.get(k) for k in ("acked", "lost", "duplicates", "divergent",
                                                    "gap", "heals", "stale_reads",
                                                    "lin_violations", "wq_lost", "log_mb",
                                                    "seconds", "error")}
                log(f"   {json.dumps(summary, default=str)}")
                with open(args.out, "a") as f:
                    f.write(json.dumps(res, default=str) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
