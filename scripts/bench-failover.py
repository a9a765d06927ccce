#!/usr/bin/env python3
"""JetStream failover time after kill -9 of a stream leader (issue 4 benchmark).

Starts a 3-node cluster of BIN on loopback (free ports, fresh store dirs), creates the R3 stream
F on subject f, then KILLS times: finds the stream leader (STREAM.INFO cluster.leader), SIGKILLs
that process, and publishes to f with a reply from a client on a surviving node until the first
PubAck with a seq arrives. Failover time = kill -> first ack. The killed node is then restarted
with the same flags and store dir, and the next round waits for a leader, 3 current replicas and
a successful publish. Prints every round, then p50/p90/p99 (nearest rank) and max.

Needs nats-py (the repo venv has it):
  .venv/bin/python scripts/bench-failover.py --bin target/release/jetraft
  .venv/bin/python scripts/bench-failover.py --bin .venv/bin/nats-server --nats-server

Resolution: attempts run back to back with a 250 ms request timeout, so a server that answers
no-responders while leaderless (nats-server) is measured to a few ms, one that lets the request
time out (jetraft at the time of writing) only to ~250 ms.

Every wait is bounded. Child processes are only ever killed by the PIDs this script started.
Logs and store dirs live in a temp dir that is kept (and printed) when a round fails.
"""

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

try:
    import nats
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeoutError
except ImportError:  # run via ./scripts/bench-failover.py with a python3 lacking nats-py
    _venv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".venv", "bin", "python")
    if os.path.exists(_venv) and os.path.realpath(sys.executable) != os.path.realpath(_venv):
        os.execv(_venv, [_venv, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("bench-failover.py: needs nats-py (the repo .venv has it: make setup)")

STREAM = "F"
SUBJECT = "f"
CREATE_BODY = json.dumps({"name": STREAM, "subjects": [SUBJECT], "num_replicas": 3}).encode()
PUB_TIMEOUT = 0.25  # per publish attempt
API_TIMEOUT = 1.0  # per JS API request


def log(msg):
    print(msg, file=sys.stderr, flush=True)


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


class Node:
    def __init__(self, idx, bin_path, is_nats_server, port, mport, cport, routes, work):
        self.name = f"n{idx + 1}"
        self.port = port
        self.url = f"nats://127.0.0.1:{port}"
        self.store = os.path.join(work, f"{self.name}-store")
        self.log_path = os.path.join(work, f"{self.name}.log")
        os.makedirs(self.store, exist_ok=True)
        self.argv = [bin_path, "-a", "127.0.0.1", "-p", str(port), "-m", str(mport),
                     "-sd", self.store, "-n", self.name]
        self.argv.append("-js")
        self.argv += ["--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{cport}",
                      "--routes", routes]
        self.proc = None

    def start(self, note):
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== bench-failover: {note} at {time.time():.3f} =====\n".encode())
        logf = open(self.log_path, "ab")
        try:
            # Own session: a Ctrl-C in the terminal reaches only us; we kill children by PID.
            self.proc = subprocess.Popen(self.argv, stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            logf.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def hang(self):
        """SIGSTOP this node's process (our own PID only): it keeps its sockets open but
        answers nothing, as a hung process or a silently cut-off node would."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        """SIGCONT after hang()."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill9(self):
        """SIGKILL this node's process (our own PID only) and reap it."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"warning: {self.name} pid {self.proc.pid} did not exit after SIGKILL")


async def connect(url, timeout=2.0):
    async def quiet(*_args):
        pass

    return await nats.connect(servers=[url], connect_timeout=timeout, allow_reconnect=False,
                              max_reconnect_attempts=0, error_cb=quiet, disconnected_cb=quiet,
                              closed_cb=quiet)


async def close_quietly(nc):
    if nc is None:
        return
    try:
        await asyncio.wait_for(nc.close(), 2)
    except Exception:
        pass


class Cluster:
    def __init__(self, bin_path, is_nats_server, work):
        ports = free_ports(9)
        cports = ports[6:9]
        routes = ",".join(f"nats://127.0.0.1:{cp}" for cp in cports)
        self.nodes = [Node(i, bin_path, is_nats_server, ports[i], ports[3 + i], cports[i],
                           routes, work) for i in range(3)]
        self.by_name = {n.name: n for n in self.nodes}
        self.last_api_error = None

    def start(self):
        for n in self.nodes:
            n.start("start")
            log(f"started {n.name} pid {n.proc.pid} client port {n.port}")

    def kill_all(self):
        for n in self.nodes:
            n.kill9()

    def live(self):
        return [n for n in self.nodes if n.alive()]

    async def api(self, subject, body=b"", nodes=None):
        """JS API request via the first live node that answers; returns the decoded JSON or
        None. Tries each node once with short timeouts."""
        for n in nodes or self.live():
            nc = None
            try:
                nc = await connect(n.url, 1.0)
                msg = await nc.request(subject, body, timeout=API_TIMEOUT)
                return json.loads(msg.data)
            except Exception as e:
                self.last_api_error = f"{n.name}: {type(e).__name__} {e}".strip()
                continue
            finally:
                await close_quietly(nc)
        return None


def pub_ack_seq(msg):
    """The seq of a successful PubAck, or None (error reply or garbage)."""
    try:
        d = json.loads(msg.data)
    except ValueError:
        return None
    if isinstance(d, dict) and "error" not in d and isinstance(d.get("seq"), int):
        return d["seq"]
    return None


async def publish_once(nc, tag):
    """One publish attempt with a unique Nats-Msg-Id; returns (seq or None, short reason)."""
    hdr = {"Nats-Msg-Id": f"{tag}-{uuid.uuid4().hex}"}
    try:
        msg = await nc.request(SUBJECT, b"x", timeout=PUB_TIMEOUT, headers=hdr)
    except NatsTimeoutError:
        return None, "timeout"
    except NoRespondersError:
        return None, "no-responders"
    except Exception as e:  # connection trouble
        return None, type(e).__name__
    seq = pub_ack_seq(msg)
    if seq is None:
        return None, "err:" + msg.data.decode(errors="replace")[:120]
    return seq, "ok"


async def publish_until_ack(nc, deadline, tag):
    """Publish until the first PubAck with a seq or until deadline (monotonic).
    Returns (seq or None, attempts, {reason: count})."""
    attempts, reasons = 0, {}
    while time.monotonic() < deadline:
        attempts += 1
        t = time.monotonic()
        seq, why = await publish_once(nc, tag)
        if seq is not None:
            return seq, attempts, reasons
        reasons[why] = reasons.get(why, 0) + 1
        if not nc.is_connected:
            return None, attempts, reasons
        if time.monotonic() - t < 0.005:  # immediate error: do not spin
            await asyncio.sleep(0.005)
    return None, attempts, reasons


async def create_stream(cl, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if len(cl.live()) < 3:
            raise RuntimeError("a node exited during startup: "
                               + ", ".join(f"{n.name} rc={n.proc.poll()}" for n in cl.nodes))
        r = await cl.api(f"$JS.API.STREAM.CREATE.{STREAM}", CREATE_BODY)
        if r is not None and "error" not in r and r.get("config", {}).get("name") == STREAM:
            return
        last = r
        await asyncio.sleep(0.5)
    raise RuntimeError(f"STREAM.CREATE did not succeed within {timeout}s; last reply {last}, "
                       f"last request error {cl.last_api_error}")


def healthy(info, names):
    """STREAM.INFO shows a leader plus 2 current, online replicas covering all of names."""
    c = (info or {}).get("cluster") or {}
    leader, reps = c.get("leader"), c.get("replicas") or []
    if not leader or len(reps) != 2:
        return False
    if not all(r.get("current") and not r.get("offline") for r in reps):
        return False
    return {leader} | {r.get("name") for r in reps} == set(names)


async def wait_healthy(cl, timeout):
    """Wait until STREAM.INFO shows a healthy R3 group and a publish acks. Returns the info
    or None on timeout."""
    deadline = time.monotonic() + timeout
    names = [n.name for n in cl.nodes]
    while time.monotonic() < deadline:
        info = await cl.api(f"$JS.API.STREAM.INFO.{STREAM}")
        if healthy(info, names):
            leader = cl.by_name[info["cluster"]["leader"]]
            probe = [n for n in cl.live() if n is not leader] or cl.live()
            nc = None
            try:
                nc = await connect(probe[0].url)
                seq, _ = await publish_once(nc, "probe")
            except Exception:
                seq = None
            finally:
                await close_quietly(nc)
            if seq is not None:
                info2 = await cl.api(f"$JS.API.STREAM.INFO.{STREAM}")
                if healthy(info2, names):
                    return info2
        await asyncio.sleep(0.2)
    return None


def tail(path, n=25):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError as e:
        return [f"<cannot read {path}: {e}>"]
    return lines[-n:]


def dump_logs(cl, why):
    log(f"--- {why}; server logs:")
    for n in cl.nodes:
        log(f"--- {n.log_path} (last lines)")
        for line in tail(n.log_path):
            log("    " + line)


def nearest_rank(sorted_vals, p):
    k = max(1, math.ceil(p / 100 * len(sorted_vals)))
    return sorted_vals[k - 1]


async def run(args, cl):
    cl.start()
    await create_stream(cl, args.startup_timeout)
    if await wait_healthy(cl, args.startup_timeout) is None:
        dump_logs(cl, "cluster never became healthy after STREAM.CREATE")
        return [], 1
    times, failures = [], 0
    for rnd in range(1, args.kills + 1):
        info = await cl.api(f"$JS.API.STREAM.INFO.{STREAM}")
        leader_name = ((info or {}).get("cluster") or {}).get("leader")
        if leader_name not in cl.by_name:
            log(f"round {rnd}: no stream leader in STREAM.INFO: {info}")
            dump_logs(cl, f"round {rnd}: no leader")
            failures += 1
            break
        victim = cl.by_name[leader_name]
        survivor = next(n for n in cl.nodes if n is not victim)
        nc = await connect(survivor.url)  # connected before the kill: not part of the time
        try:
            seq, _ = await publish_once(nc, f"pre{rnd}")
            if seq is None:
                log(f"round {rnd}: warning: pre-kill publish via {survivor.name} got no ack")
            if args.idle > 0:
                # Idle streams go quiet (no Raft heartbeats); this measures their failover.
                await asyncio.sleep(args.idle)
            t0 = time.monotonic()
            if args.hang:
                victim.hang()
            else:
                victim.kill9()
            seq, attempts, reasons = await publish_until_ack(nc, t0 + args.timeout, f"r{rnd}")
            dt = time.monotonic() - t0
        finally:
            await close_quietly(nc)
        if seq is not None:
            times.append(dt)
            extra = f" ({', '.join(f'{k} x{v}' for k, v in reasons.items())})" if reasons else ""
            print(f"round {rnd:2d}: killed {victim.name} (leader), first ack via {survivor.name} "
                  f"after {dt * 1000:8.1f} ms, {attempts} attempts, seq {seq}{extra}", flush=True)
        else:
            failures += 1
            print(f"round {rnd:2d}: killed {victim.name} (leader), NO ack via {survivor.name} "
                  f"within {dt:.1f} s: {attempts} attempts {reasons}", flush=True)
            info = await cl.api(f"$JS.API.STREAM.INFO.{STREAM}")
            log(f"round {rnd}: STREAM.INFO now: {json.dumps(info)[:600]}")
            dump_logs(cl, f"round {rnd}: failover did not complete within {args.timeout}s")
        if args.hang:
            victim.resume()
        else:
            victim.start(f"restart after round {rnd}")
        if await wait_healthy(cl, args.timeout) is None:
            failures += 1
            info = await cl.api(f"$JS.API.STREAM.INFO.{STREAM}")
            print(f"round {rnd:2d}: cluster did not recover after restarting {victim.name} "
                  f"within {args.timeout}s; stopping", flush=True)
            log(f"round {rnd}: STREAM.INFO now: {json.dumps(info)[:600]}")
            dump_logs(cl, f"round {rnd}: no recovery")
            break
    return times, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="server binary (jetraft or nats-server)")
    ap.add_argument("--kills", type=int, default=20, help="rounds (default 20)")
    ap.add_argument("--nats-server", action="store_true", help="BIN is nats-server: add -js")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds a round may take to fail over, and to recover (default 30)")
    ap.add_argument("--startup-timeout", type=float, default=60.0,
                    help="seconds to wait for the first STREAM.CREATE (default 60)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir even on success")
    ap.add_argument("--hang", action="store_true",
                    help="SIGSTOP the leader instead of SIGKILL (its sockets stay open), and "
                         "SIGCONT it after the round")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds the stream stays idle before each kill (jetraft quiesces idle "
                         "groups after 2 s)")
    args = ap.parse_args()
    if not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        sys.exit(f"bench-failover.py: not an executable: {args.bin}")
    args.bin = os.path.abspath(args.bin)
    if args.kills < 1:
        sys.exit("bench-failover.py: --kills must be >= 1")

    work = tempfile.mkdtemp(prefix="bench-failover-")
    cl = Cluster(args.bin, args.nats_server, work)

    def on_term(_sig, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    times, failures, keep = [], 0, args.keep
    try:
        times, failures = asyncio.run(run(args, cl))
    except KeyboardInterrupt:
        log("interrupted")
        keep, failures = True, failures + 1
    except Exception as e:
        log(f"error: {type(e).__name__}: {e}")
        dump_logs(cl, "error")
        keep, failures = True, failures + 1
    finally:
        cl.kill_all()
    if failures:
        keep = True

    server = "nats-server" if args.nats_server else os.path.basename(args.bin)
    if times:
        s = sorted(times)
        ms = [f"{nearest_rank(s, p) * 1000:.1f}" for p in (50, 90, 99)] + [f"{s[-1] * 1000:.1f}"]
        print("\n| server | kills | ok | p50 ms | p90 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|---|")
        print(f"| {server} | {args.kills} | {len(times)} | " + " | ".join(ms) + " |")
    else:
        print(f"\n{server}: no successful failover rounds")
    if keep:
        print(f"logs and store dirs kept in {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
