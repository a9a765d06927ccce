"""The console on a 3-node cluster: the stream's Raft group, and a leader's node killed.

Run alone: ``JETRAFT_BIN=<target>/debug/jetraft .venv/bin/python -m pytest -q
tests/python/browser/test_console_cluster.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import nats
import pytest
from nats.js.api import StreamConfig
from playwright.async_api import expect

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]

pytestmark = pytest.mark.timeout_s(150)


async def test_cluster_console_follows_a_leader_kill(server_factory, new_page):
    cports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://{LOOPBACK}:{p}" for p in cports)
    nodes = [
        server_factory(
            name=f"n{i + 1}",
            extra_args=("--cluster_name", "console", "--cluster", f"nats://{LOOPBACK}:{cports[i]}", "--routes", routes),
        )
        for i in range(3)
    ]
    nc = await nats.connect(servers=[n.url for n in nodes], connect_timeout=5)
    try:
        js = nc.jetstream(timeout=5)
        for _ in range(100):
            try:
                await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], num_replicas=3))
                break
            except Exception:  # the cluster is still electing its meta leader
                await asyncio.sleep(0.2)
        for i in range(10):
            await js.publish("orders.x", f"{i}".encode())
        info = await js.stream_info("ORDERS")
        leader = info.cluster.leader
        assert leader
        by_name = {n.name: n for n in nodes}
        watcher = next(n for n in nodes if n.name != leader)

        p = await new_page()
        page = p.page
        await page.goto(watcher.monitor_url + "/")
        await expect(page.locator('[data-testid="nodes"]')).to_contain_text("meta leader")
        await p.shot("overview")
        await page.goto(watcher.monitor_url + "/#/stream/ORDERS")
        raft = page.locator('[data-testid="raft"]')
        await expect(raft).to_have_attribute("data-leader", leader)
        await expect(raft.locator("tbody tr")).to_have_count(3)
        await p.shot("raft-before")

        # Kill the stream leader's node: the surviving node's console shows a new leader and
        # the dead replica offline.
        dead = by_name[leader]
        os.kill(dead.proc.pid, signal.SIGKILL)
        dead.proc.wait(timeout=5)
        await expect(raft).not_to_have_attribute("data-leader", leader, timeout=20_000)
        await expect(raft.locator(f'[data-replica="{leader}"] [data-testid="replica-offline"]')).to_be_visible(timeout=20_000)
        await p.shot("raft-after-kill")
        p.assert_no_errors()
    finally:
        await nc.close()
