"""The Kubernetes deployment of ``deploy/k8s``, simulated with local processes (issue 8).

``statefulset_sim`` starts three servers with exactly the arguments and config the manifests
give the pods. Two scenarios:

* rolling restart, one pod at a time as ``kubectl rollout restart`` does it (preStop lame duck ->
  SIGTERM -> exit -> start -> startup and readiness probes -> next pod), while a client publishes
  with acks to an R3 stream: no acknowledged message is lost, none is stored twice, and
  publishing never stops for long (the longest gap is printed and, with ``JETRAFT_SIM_REPORT``,
  appended to that file for ``make bench-rolling``);
* lost volume: one pod comes back on an empty data directory; the cluster ends healthy, with the
  data intact on the rebuilt pod (checked by then stopping another pod: the stream must still
  have every message, so the rebuilt replica holds them).

* scale 3 -> 5 -> 3 without restarting any pod, under acknowledged publish load: two pods
  added by ``kubectl scale`` join through the ConfigMap's three routes (route gossip) and are
  admitted to the meta group, new R3 streams are placed on them; then each is removed from the
  cluster with ``$JS.API.SERVER.REMOVE`` (what ``nats server raft peer-remove`` sends) while it
  still runs, its replicas move to the three pods left, and only then is it scaled away (its
  volume deleted, ``whenScaled: Delete``). At the end: a meta group of three, every stream on
  three current replicas among the pods left, no acknowledged message lost or stored twice,
  and everything still works with one of the three down.

Run against the reference with ``JETRAFT_TEST_SERVER=nats-server`` (the scaling scenario is
jetraft only: nats-server answers SERVER.REMOVE only to its system account, which the manifests
do not configure).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from conftest import SERVER_BINARY
from statefulset_sim import StatefulSetSim

pytestmark = pytest.mark.skipif(SERVER_BINARY.path is None, reason=str(SERVER_BINARY.problem))

STREAM = "SIM"
# Liveness bound for the publisher, not a performance figure: a gap this long means publishing
# stopped (the measured gap is reported separately).
STALL_BOUND_S = 20.0


@pytest.fixture
def sim(tmp_path: Path, request: pytest.FixtureRequest):
    # Room for the scale-up to five pods.
    s = StatefulSetSim(str(SERVER_BINARY.path), tmp_path, max_replicas=5)
    # conftest attaches these logs to a failed test's report.
    request.node._jetraft_servers = s.pods
    try:
        yield s
    finally:
        s.kill_all()


async def _connect(sim: StatefulSetSim, pods=None) -> nats.NATS:
    servers = [sim.client_url(p) for p in (pods or sim.pods)]
    return await nats.connect(
        servers=servers, max_reconnect_attempts=-1, connect_timeout=2, allow_reconnect=True
    )


async def _start_cluster(sim: StatefulSetSim) -> None:
    sim.start_all()
    await asyncio.gather(*(asyncio.to_thread(sim.wait_ready, p, 60.0) for p in sim.pods))


async def _create_stream(nc: nats.NATS) -> None:
    js = nc.jetstream(timeout=5)
    deadline = time.monotonic() + 30
    while True:
        try:
            await js.add_stream(
                StreamConfig(name=STREAM, subjects=["sim.>"], num_replicas=3, storage=StorageType.FILE)
            )
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


class Publisher:
    """Publishes ``sim.<i>`` with acks, one at a time, retrying each message (same
    ``Nats-Msg-Id``, so the stream stores it once) until it is acknowledged."""

    def __init__(self, nc: nats.NATS) -> None:
        self.js = nc.jetstream(timeout=2)
        self.acked: dict[int, int] = {}  # message index -> stream sequence
        self.ack_times: list[float] = []
        self.stop = asyncio.Event()
        self.errors = 0

    async def run(self, limit: int = 100_000, seconds: float = 240.0) -> None:
        deadline = time.monotonic() + seconds
        i = 0
        while i < limit and not self.stop.is_set() and time.monotonic() < deadline:
            try:
                ack = await self.js.publish(
                    f"sim.{i % 16}", str(i).encode(), headers={"Nats-Msg-Id": f"m-{i}"}
                )
            except Exception:
                self.errors += 1
                await asyncio.sleep(0.05)
                continue
            self.acked[i] = ack.seq
            self.ack_times.append(time.monotonic())
            i += 1

    def longest_gap(self, since: float) -> float:
        times = [since] + [t for t in self.ack_times if t >= since]
        return max((b - a for a, b in zip(times, times[1:])), default=float("inf"))


async def _stream_payloads(nc: nats.NATS, expected: int) -> list[int]:
    """Every stored message's payload, read through an ephemeral pull consumer."""
    js = nc.jetstream(timeout=5)
    sub = await js.pull_subscribe("sim.>", durable=None, stream=STREAM)
    out: list[int] = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        try:
            msgs = await sub.fetch(min(500, expected - len(out)), timeout=2)
        except nats.errors.TimeoutError:
            continue
        for m in msgs:
            out.append(int(m.data))
            await m.ack()
    await sub.unsubscribe()
    return out


async def _assert_nothing_lost(nc: nats.NATS, pub: Publisher) -> None:
    seqs = list(pub.acked.values())
    assert len(set(seqs)) == len(seqs), "two acknowledged messages got the same sequence"
    js = nc.jetstream(timeout=5)
    info = await js.stream_info(STREAM)
    assert info.state.messages == len(pub.acked), (
        f"stream holds {info.state.messages} messages, {len(pub.acked)} were acknowledged"
    )
    payloads = await _stream_payloads(nc, len(pub.acked))
    assert sorted(payloads) == sorted(pub.acked), "stored messages differ from acknowledged ones"


def _report(line: str) -> None:
    print(line)
    path = os.environ.get("JETRAFT_SIM_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@pytest.mark.timeout_s(420)
async def test_rolling_restart_loses_no_acknowledged_message(sim: StatefulSetSim) -> None:
    await _start_cluster(sim)
    nc = await _connect(sim)
    try:
        await _create_stream(nc)
        pub = Publisher(nc)
        task = asyncio.create_task(pub.run())
        await asyncio.sleep(2)
        assert pub.acked, f"no publish acknowledged before the rollout ({pub.errors} errors)"
        rollout_start = time.monotonic()
        steps = []
        # StatefulSet rolling updates go from the highest ordinal down.
        for pod in reversed(sim.pods):
            drained = await asyncio.to_thread(sim.stop, pod)
            sim.start(pod)
            ready = await asyncio.to_thread(sim.wait_ready, pod, 90.0)
            steps.append(f"{pod.name}: drained {drained:.1f}s, ready {ready:.1f}s")
        await asyncio.sleep(2)
        pub.stop.set()
        await task
        gap = pub.longest_gap(rollout_start)
        _report(
            json.dumps(
                {
                    "scenario": "rolling_restart",
                    "server": SERVER_BINARY.kind,
                    "acked": len(pub.acked),
                    "publish_errors_retried": pub.errors,
                    "longest_publish_gap_s": round(gap, 3),
                    "rollout_s": round(time.monotonic() - rollout_start, 1),
                    "steps": steps,
                }
            )
        )
        assert gap < STALL_BOUND_S, f"publishing stopped for {gap:.1f}s during the rollout"
        await _assert_nothing_lost(nc, pub)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)


@pytest.mark.timeout_s(300)
async def test_lost_volume_rejoins_and_keeps_the_data(sim: StatefulSetSim) -> None:
    await _start_cluster(sim)
    nc = await _connect(sim)
    try:
        await _create_stream(nc)
        pub = Publisher(nc)
        await pub.run(limit=500, seconds=60)
        assert len(pub.acked) == 500, f"only {len(pub.acked)} of 500 publishes acknowledged"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)

    lost = sim.pods[1]
    await asyncio.to_thread(sim.stop, lost)
    sim.wipe_data(lost)
    sim.start(lost)
    # The startup probe is the full /healthz: it passes only once the rebuilt pod's replicas
    # caught up with their leaders.
    await asyncio.to_thread(sim.wait_ready, lost, 120.0)
    for pod in sim.pods:
        assert sim.probe(pod, "startupProbe"), f"{pod.name} unhealthy after the rebuild"

    # The rebuilt pod must hold the data: stop another pod; the stream (quorum: the rebuilt
    # pod and the third one) must still have every message and take new ones.
    other = sim.pods[0]
    await asyncio.to_thread(sim.stop, other)
    survivors = [p for p in sim.pods if p is not other]
    nc = await _connect(sim, survivors)
    try:
        js = nc.jetstream(timeout=5)
        deadline = time.monotonic() + 30
        while True:
            try:
                info = await js.stream_info(STREAM)
                if info.cluster and info.cluster.leader:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "no stream leader among the rebuilt and third pod"
            await asyncio.sleep(0.5)
        assert info.state.messages == 500, f"{info.state.messages} messages after the rebuild"
        payloads = await _stream_payloads(nc, 500)
        assert sorted(payloads) == list(range(500))
        ack = await js.publish("sim.after", b"after", timeout=10)
        assert ack.seq == 501
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)
    sim.start(other)
    await asyncio.to_thread(sim.wait_ready, other, 90.0)


async def _api(nc: nats.NATS, subject: str, body: dict) -> dict:
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=5)
    return json.loads(msg.data)


def _jsz(sim: StatefulSetSim, pod) -> dict:
    import urllib.request

    with urllib.request.urlopen(sim.monitor_url(pod, "/jsz"), timeout=2) as resp:
        return json.loads(resp.read())


async def _eventually(what: str, check, limit: float = 60.0):
    """Polls ``check`` (an async callable returning a truthy value when done) every 0.2 s for at
    most ``limit`` seconds; fails with the last value it returned."""
    deadline = time.monotonic() + limit
    last = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except Exception as e:  # noqa: BLE001 - reported below
            last = e
        if last and not isinstance(last, Exception):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not reached within {limit}s: {last!r}")


async def _replicas(nc: nats.NATS, stream: str) -> tuple[set[str], bool]:
    """The names of a stream's replicas (leader included), and whether all are current."""
    info = await _api(nc, f"$JS.API.STREAM.INFO.{stream}", {})
    cluster = info.get("cluster", {})
    names = {cluster["leader"]} if cluster.get("leader") else set()
    current = True
    for r in cluster.get("replicas", []) or []:
        names.add(r["name"])
        current = current and r.get("current", False) and not r.get("offline", False)
    return names, current


async def _meta_size(sim: StatefulSetSim, pods) -> set[int]:
    sizes = set()
    for pod in pods:
        jsz = await asyncio.to_thread(_jsz, sim, pod)
        sizes.add(jsz.get("meta_cluster", {}).get("cluster_size"))
    return sizes


@pytest.mark.timeout_s(420)
async def test_scale_3_to_5_to_3_under_publish_load(sim: StatefulSetSim) -> None:
    if SERVER_BINARY.kind == "nats-server":
        pytest.skip("nats-server answers SERVER.REMOVE only to a system account user")
    await _start_cluster(sim)
    first_three = list(sim.pods)
    nc = await _connect(sim, first_three)
    try:
        await _create_stream(nc)
        pub = Publisher(nc)
        task = asyncio.create_task(pub.run(seconds=300))
        await asyncio.sleep(1)
        assert pub.acked, f"no publish acknowledged before scaling ({pub.errors} errors)"

        # 3 -> 5: the new pods name only the first three in their routes.
        scale_start = time.monotonic()
        added = sim.scale_up(5)
        await asyncio.gather(*(asyncio.to_thread(sim.wait_ready, p, 90.0) for p in added))
        await _eventually(
            "a meta group of five", lambda: _size_is(sim, sim.pods, 5)
        )
        # New R3 streams use the new pods (placement prefers the least loaded nodes).
        js = nc.jetstream(timeout=5)
        extra = [f"X{i}" for i in range(3)]
        for name in extra:
            await js.add_stream(
                StreamConfig(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3)
            )
            await js.publish(f"{name.lower()}.a", b"x", headers={"Nats-Msg-Id": name})
        on_new = set()
        for name in extra:
            names, _ = await _replicas(nc, name)
            on_new |= names & {p.name for p in added}
        assert on_new == {p.name for p in added}, f"new streams on the new pods: {on_new}"

        # 5 -> 3: remove each leaving pod from the cluster while it runs, wait until it holds
        # no replica, then scale it away (highest ordinal first, as the StatefulSet does).
        for pod in reversed(added):

            async def removed(pod=pod):
                # 10202: the previous removal is still leaving the meta group; retried.
                answer = await _api(nc, "$JS.API.SERVER.REMOVE", {"peer": pod.name})
                assert answer.get("error", {}).get("err_code") in (None, 10202), answer
                return answer.get("success") is True

            await _eventually(f"{pod.name} removed from the cluster", removed, 30.0)

            async def drained(pod=pod):
                for name in [STREAM] + extra:
                    names, current = await _replicas(nc, name)
                    if pod.name in names or len(names) != 3 or not current:
                        return False
                return True

            await _eventually(f"{pod.name} drained of stream replicas", drained, 90.0)
            await asyncio.to_thread(sim.scale_down_one)
        await _eventually("a meta group of three", lambda: _size_is(sim, sim.pods, 3))
        for pod in sim.pods:
            await asyncio.to_thread(sim.wait_probe, pod, "startupProbe", 30.0)
        await asyncio.sleep(1)
        pub.stop.set()
        await task
        _report(
            json.dumps(
                {
                    "scenario": "scale_3_5_3",
                    "server": SERVER_BINARY.kind,
                    "acked": len(pub.acked),
                    "publish_errors_retried": pub.errors,
                    "longest_publish_gap_s": round(pub.longest_gap(scale_start), 3),
                }
            )
        )
        assert pub.longest_gap(scale_start) < STALL_BOUND_S, "publishing stopped while scaling"
        await _assert_nothing_lost(nc, pub)
        for name in extra:
            info = await js.stream_info(name)
            assert info.state.messages == 1, f"{name}: {info.state.messages}"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)

    # One of the three left down: meta group and streams keep a quorum.
    down = sim.pods[0]
    await asyncio.to_thread(sim.stop, down)
    survivors = [p for p in sim.pods if p is not down]
    nc = await _connect(sim, survivors)
    try:
        js = nc.jetstream(timeout=5)

        async def publish_after():
            return await js.publish("sim.after", b"after", headers={"Nats-Msg-Id": "after"})

        ack = await _eventually("a publish with one of three down", publish_after)
        assert ack.seq == len(pub.acked) + 1
        for name in extra:
            ack = await _eventually(
                f"{name} with one of three down",
                lambda name=name: js.publish(f"{name.lower()}.b", b"y", headers={"Nats-Msg-Id": name + "b"}),
            )
            assert ack.seq == 2
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)


async def _size_is(sim: StatefulSetSim, pods, size: int) -> bool:
    return await _meta_size(sim, pods) == {size}
