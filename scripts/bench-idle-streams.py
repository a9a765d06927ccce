#!/usr/bin/env python3
"""Idle CPU of a three-node cluster holding N replicated streams, jetraft vs nats-server.

For each server (jetraft first, then nats-server 2.x with JetStream), start a three-node
cluster on loopback ports, create N R3 file streams (one message each, so every group has
written something), wait for the cluster to settle, then read each process's CPU time
(utime + stime from /proc/<pid>/stat) over a window and print it as % of one core. Every
process is started here and stopped by its PID at the end.

Usage: scripts/bench-idle-streams.py --bin target/release/jetraft [--nats-server PATH]
       [--streams 100] [--secs 20] [--settle 10]
"""

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import nats


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based) of the whole line; after the command
    # name's closing parenthesis they are the 12th and 13th.
    return int(fields[11]) + int(fields[12])


class Cluster:
    """Three server processes of one kind, started on free loopback ports."""

    def __init__(self, name, binary, work, jetraft):
        self.procs = []
        self.ports = []
        cps = [free_port() for _ in range(3)]
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in cps)
        for i in range(3):
            port = free_port()
            self.ports.append(port)
            sd = os.path.join(work, f"{name}-{i}")
            os.makedirs(sd)
            args = [binary, "-a", "127.0.0.1", "-p", str(port), "-sd", sd,
                    "-n", f"{name}-n{i + 1}", "--cluster_name", name,
                    "--cluster", f"nats://127.0.0.1:{cps[i]}", "--routes", routes]
            args.append("-js")
            log = open(os.path.join(work, f"{name}-{i}.log"), "w")
            self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def create_streams(port, count, deadline_s=180):
    """Creates `count` R3 streams through the first node and stores one message in each."""
    deadline = time.monotonic() + deadline_s

    async def quiet(_err):
        pass

    nc = None
    while nc is None:
        try:
            nc = await nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=2,
                                    allow_reconnect=False, error_cb=quiet)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    js = nc.jetstream(timeout=10)
    for i in range(count):
        while True:
            try:
                await js.add_stream(name=f"IDLE{i}", subjects=[f"idle.{i}"], num_replicas=3)
                await js.publish(f"idle.{i}", b"x" * 128)
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"stream {i}: {e}") from e
                await asyncio.sleep(0.5)
    await nc.close()


def measure(cluster, secs):
    hz = os.sysconf("SC_CLK_TCK")
    before = [cpu_ticks(p.pid) for p in cluster.procs]
    time.sleep(secs)
    after = [cpu_ticks(p.pid) for p in cluster.procs]
    return [100.0 * (a - b) / hz / secs for a, b in zip(after, before)]


def run(name, binary, jetraft, args, work):
    cluster = Cluster(name, binary, work, jetraft)
    try:
        asyncio.run(create_streams(cluster.ports[0], args.streams))
        time.sleep(args.settle)
        for p in cluster.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name}: a server exited early")
        return measure(cluster, args.secs)
    finally:
        cluster.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="jetraft binary")
    ap.add_argument("--nats-server", default=os.path.join(sys.prefix, "bin", "nats-server"))
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--secs", type=float, default=20)
    ap.add_argument("--settle", type=float, default=10)
    ap.add_argument("--only", choices=["jetraft", "nats"], help="run one server only")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="jetraft-idle-")
    try:
        load = open("/proc/loadavg").read().split()[:3]
        print(f"idle streams: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
              f"{os.cpu_count()} cores, load {' '.join(load)}, {args.streams} R3 streams, "
              f"CPU over {args.secs:g} s after {args.settle:g} s settle")
        servers = [("jetraft", args.bin, True), ("nats", args.nats_server, False)]
        for name, binary, jetraft in servers:
            if args.only and args.only != name:
                continue
            pct = run(name, binary, jetraft, args, work)
            cells = " | ".join(f"{p:.1f}%" for p in pct)
            print(f"| {name} | {cells} | {sum(pct):.1f}% |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
