#!/usr/bin/env python3
"""Memory per stream, per connection and idle, jetraft against nats-server in the same run.

Workload, each server started fresh on loopback (`-js`, its own store dir), one after the other:
  idle:        RSS 2 s after start (VmRSS of the process).
  streams:     STREAMS memory-storage R1 streams (`M<i>` on subject `m<i>`) created one after
               another by one nats-py client, each create awaited; RSS after 1 s, minus idle,
               divided by STREAMS.
  connections: CONNS nats-py connections, each with one subscription (`x.>`), flushed; RSS after
               1 s, minus the RSS before them, divided by CONNS.
Prints one table (KB) with the ratio jetraft / nats-server (below 1 is better).

Usage: bench-memory.py --bin <jetraft> --nats-bin <nats-server> [--streams 300] [--conns 300]
"""

import argparse
import asyncio
import sys
import shutil
import socket
import subprocess
import tempfile
import time

import nats


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def quiet(_err: Exception) -> None:
    """nats-py logs every refused connect while the server starts; the loop retries."""


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def measure(binary: str, streams: int, conns: int) -> dict:
    store = tempfile.mkdtemp(prefix="bench-memory-")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", store],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"nats://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                nc = await nats.connect(url, allow_reconnect=False, error_cb=quiet)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)
        await nc.close()
        await asyncio.sleep(2)
        idle = rss_kb(proc.pid)
        nc = await nats.connect(url)
        js = nc.jetstream()
        for i in range(streams):
            await js.add_stream(name=f"M{i}", subjects=[f"m{i}"], storage="memory")
        await nc.close()
        await asyncio.sleep(1)
        with_streams = rss_kb(proc.pid)
        clients = []
        for _ in range(conns):
            c = await nats.connect(url)
            await c.subscribe("x.>")
            await c.flush()
            clients.append(c)
        await asyncio.sleep(1)
        with_conns = rss_kb(proc.pid)
        for c in clients:
            await c.close()
        return {
            "idle": idle,
            "stream": (with_streams - idle) / streams,
            "connection": (with_conns - with_streams) / conns,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(store, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--nats-bin", required=True)
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--conns", type=int, default=300)
    args = ap.parse_args()
    results = {}
    for name, binary in (("jetraft", args.bin), ("nats-server", args.nats_bin)):
        results[name] = asyncio.run(measure(binary, args.streams, args.conns))
    j, n = results["jetraft"], results["nats-server"]
    print(f"memory, {args.streams} memory R1 streams, {args.conns} connections with 1 sub each")
    print("| figure | jetraft KB | nats-server KB | ratio |")
    print("|---|---:|---:|---:|")
    for key, label in (
        ("idle", "idle server RSS"),
        ("stream", "RSS per stream"),
        ("connection", "RSS per connection"),
    ):
        ratio = j[key] / n[key] if n[key] else float("inf")
        print(f"| {label} | {j[key]:.0f} | {n[key]:.0f} | {ratio:.2f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
