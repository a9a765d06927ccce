#!/usr/bin/env python3
"""Rebuild time of a node whose table files were damaged (issue 23 item 3 measurement).

Starts a 3-node jetraft cluster on loopback (free ports, fresh store dirs), creates the R3 file
stream R on subject r, publishes COUNT messages of SIZE random bytes (async, at most 256
unacknowledged publishes, every PubAck checked), then per round: stops node n3 with SIGTERM,
flips 16 bytes in the middle of every table file (*.sst) of its store, starts it again and
measures from the start to
  - check: the store check at start done (the "store is damaged" log line),
  - healthy: n3's /healthz (full check: meta current and every assigned replica current) is 200,
  - current: STREAM.INFO lists n3 as a current replica.
Before that, n2 is restarted undamaged once, to time the store check of a sound store (it
reads the whole store back). Prints the store size, the figures and MB/s of the rebuild.

  .venv/bin/python scripts/bench-repair.py --bin target/debug/jetraft --count 1000 --size 1024

Every wait is bounded. Child processes are only ever killed by the PIDs this script started.
The temp dir is removed at the end (kept and printed with --keep).
"""

import argparse
import asyncio
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

import nats


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, binary, root, i, routes, cport):
        self.name = f"n{i + 1}"
        self.port, self.http = free_port(), free_port()
        self.store = os.path.join(root, self.name)
        os.makedirs(self.store, exist_ok=True)
        self.log_path = os.path.join(root, f"{self.name}.log")
        self.args = [binary, "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http),
                     "-sd", self.store, "-n", self.name, "-js", "--cluster_name", "bench",
                     "--cluster", f"nats://127.0.0.1:{cport}", "--routes", routes]
        self.proc = None

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=log)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def healthz(self):
        try:
            url = f"http://127.0.0.1:{self.http}/healthz"
            return urllib.request.urlopen(url, timeout=1).status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return None

    def log_count(self, text):
        with open(self.log_path, errors="replace") as f:
            return f.read().count(text)


def store_bytes(path):
    total = 0
    for root, _, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(root, n))
    return total


def damage_tables(store):
    db = os.path.join(store, "jetraft")
    done = 0
    for n in os.listdir(db):
        if n.endswith(".sst"):
            p = os.path.join(db, n)
            size = os.path.getsize(p)
            with open(p, "r+b") as f:
                f.seek(size // 2)
                chunk = f.read(16)
                f.seek(size // 2)
                f.write(bytes(b ^ 0xFF for b in chunk))
            done += 1
    return done


async def wait(what, limit, check):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        r = await check()
        if r:
            return r
        await asyncio.sleep(0.05)
    raise SystemExit(f"timed out after {limit}s waiting for {what}")


async def info(nc):
    try:
        m = await nc.request("$JS.API.STREAM.INFO.R", b"", timeout=2)
        return json.loads(m.data)
    except Exception:  # noqa: BLE001 - any failure is "not yet"
        return None


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="jetraft-bench-repair-")
    cports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in cports)
    nodes = [Node(a.bin, root, i, routes, cports[i]) for i in range(3)]
    try:
        for n in nodes:
            n.start()
        nc = await nats.connect(f"nats://127.0.0.1:{nodes[0].port}")
        js = nc.jetstream()

        async def create():
            try:
                await js.add_stream(name="R", subjects=["r"], num_replicas=3)
                return True
            except Exception:  # noqa: BLE001
                return False
        await wait("stream created", 30, create)
        payload = os.urandom(a.size)
        t0 = time.monotonic()
        pending = set()
        for _ in range(a.count):
            pending.add(asyncio.ensure_future(js.publish("r", payload, timeout=30)))
            if len(pending) >= 256:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for d in done:
                    d.result()
        for d in await asyncio.gather(*pending):
            assert d.seq
        i = await info(nc)
        assert i and i["state"]["messages"] == a.count, i
        fill = time.monotonic() - t0
        mb = a.count * a.size / 1e6
        print(f"filled {a.count} x {a.size} B = {mb:.1f} MB in {fill:.1f}s")
        victim = nodes[2]
        # The store check of a sound store reads all of it: restart n2 once, undamaged.
        sound = nodes[1]
        sound.stop()
        sound.start()

        async def checked_sound():
            with open(sound.log_path, errors="replace") as f:
                lines = [ln for ln in f.read().splitlines() if "store checked took_ms=" in ln]
            return len(lines) >= 1 and lines[-1].split("took_ms=")[1].split()[0]
        took = await wait("sound store checked", 600, checked_sound)
        size = store_bytes(os.path.join(sound.store, "jetraft"))
        print(f"store check of a sound store of {size / 1e6:.1f} MB: {took} ms")

        async def healthy_sound():
            return sound.healthz() == 200
        await wait("n2 healthy", 600, healthy_sound)
        for rnd in range(a.rounds):
            victim.stop()
            size = store_bytes(os.path.join(victim.store, "jetraft"))
            n = damage_tables(victim.store)
            marker = "damaged store moved aside"
            seen = victim.log_count(marker)
            start = time.monotonic()
            victim.start()

            async def checked():
                return victim.log_count(marker) > seen and time.monotonic()
            t_check = await wait("store check", 600, checked)

            async def healthy():
                return victim.healthz() == 200 and time.monotonic()
            t_healthy = await wait("healthy", 1200, healthy)

            async def current():
                i = await info(nc)
                reps = (i or {}).get("cluster", {}).get("replicas", [])
                ok = any(r.get("name") == victim.name and r.get("current") for r in reps) or \
                    (i or {}).get("cluster", {}).get("leader") == victim.name
                return ok and time.monotonic()
            t_current = await wait("current", 1200, current)
            print(f"round {rnd + 1}: store {size / 1e6:.1f} MB, {n} table files damaged; "
                  f"check {t_check - start:.2f}s, healthy {t_healthy - start:.2f}s, "
                  f"current {t_current - start:.2f}s "
                  f"({mb / max(t_healthy - start, 1e-3):.1f} MB/s of messages)")
            # The next round damages the new store again.
            shutil.rmtree(next(os.path.join(victim.store, d) for d in os.listdir(victim.store)
                               if d.startswith("damaged-")))
        await nc.close()
    finally:
        for n in nodes:
            n.stop()
        if a.keep:
            print("kept", root)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
