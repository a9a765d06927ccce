"""Key-Value buckets through nats-py (2.16): bucket create/bind/delete and status, put, get
(latest and by revision), create (fails when present, succeeds over delete/purge markers),
update with revision (CAS), delete, purge, history, keys, watch (latest values, with history,
headers only), per-key TTL with limit markers; the same with direct gets; and an R3 bucket on
three nodes. The same scenarios as ``tests/tests/js_kv.rs`` (async-nats). Every test ran
against nats-server 2.15.1 first."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.js import api
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)

from conftest import free_port


async def wait_for(what, check, timeout=10.0, interval=0.05):
    """Await ``check()`` until it returns a truthy value (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def drain(watcher, n, timeout=5.0):
    """The next ``n`` entries of a watcher (``None`` = end of initial values)."""
    return [await watcher.updates(timeout=timeout) for _ in range(n)]


def summary(entries):
    return [None if e is None else (e.key, e.revision, e.operation, e.value) for e in entries]


async def test_bucket_lifecycle_and_status(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="LIFE", history=5, description="life", max_value_size=1024)
    si = await js.stream_info("KV_LIFE")
    assert si.config.subjects == ["$KV.LIFE.>"]
    assert si.config.max_msgs_per_subject == 5
    assert si.config.discard == api.DiscardPolicy.NEW
    assert si.config.allow_rollup_hdrs is True
    assert si.config.deny_delete is True
    assert si.config.allow_msg_ttl is True
    assert si.config.max_msg_size == 1024

    assert await kv.put("a", b"1") == 1
    assert await kv.put("b", b"2") == 2
    st = await kv.status()
    assert st.bucket == "LIFE"
    assert st.values == 2
    assert st.history == 5

    bound = await js.key_value("LIFE")
    assert (await bound.get("a")).value == b"1"

    with pytest.raises(BadRequestError):
        await kv.put("big", b"x" * 2000)

    assert await js.delete_key_value("LIFE")
    with pytest.raises(BucketNotFoundError):
        await js.key_value("LIFE")


@pytest.mark.parametrize("direct", [False, True])
async def test_put_and_get_latest_and_by_revision(server, connect, direct):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="PG", history=3, direct=direct)
    si = await js.stream_info("KV_PG")
    assert si.config.allow_direct is direct
    assert await kv.put("a", b"1") == 1
    assert await kv.put("b.c", b"2") == 2
    assert await kv.put("a", b"3") == 3

    e = await kv.get("a")
    assert (e.key, e.value, e.revision) == ("a", b"3", 3)
    assert (await kv.get("b.c")).value == b"2"
    assert (await kv.get("a", revision=1)).value == b"1"
    with pytest.raises(KeyNotFoundError):
        await kv.get("a", revision=2)  # revision 2 is key b.c
    with pytest.raises(KeyNotFoundError):
        await kv.get("nope")


async def test_create_and_update_are_compare_and_set(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="CAS", history=5)
    assert await kv.create("k", b"v1") == 1
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("k", b"v2")
    assert await kv.update("k", b"v2", last=1) == 2
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("k", b"v3", last=1)

    await kv.delete("k")
    assert await kv.create("k", b"v4") == 4
    await kv.purge("k")
    assert await kv.create("k", b"v5") == 6
    assert (await kv.get("k")).value == b"v5"

    # nats-py does not map a stale delete to KeyWrongLastSequenceError.
    with pytest.raises(BadRequestError) as err:
        await kv.delete("k", last=1)
    assert err.value.err_code == 10071
    assert await kv.delete("k", last=6)


async def test_delete_and_purge_leave_markers(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="DP", history=10)
    await kv.put("k", b"1")
    await kv.put("k", b"2")
    await kv.put("other", b"o")
    await kv.delete("k")
    with pytest.raises(KeyNotFoundError) as err:
        await kv.get("k")
    assert err.value.op == "DEL"
    with pytest.raises(KeyDeletedError):
        await kv._get("k")
    hist = await kv.history("k")
    assert [(e.revision, e.operation, e.value) for e in hist] == [
        (1, None, b"1"),
        (2, None, b"2"),
        (4, "DEL", b""),
    ]
    raw = await js.get_last_msg("KV_DP", "$KV.DP.k")
    assert raw.seq == 4
    assert raw.headers == {"KV-Operation": "DEL"}
    assert not raw.data  # omitted when empty

    await kv.purge("k")
    hist = await kv.history("k")
    assert [(e.revision, e.operation) for e in hist] == [(5, "PURGE")]
    raw = await js.get_last_msg("KV_DP", "$KV.DP.k")
    assert raw.headers["KV-Operation"] == "PURGE"
    assert raw.headers["Nats-Rollup"] == "sub"
    si = await js.stream_info("KV_DP")
    assert (si.state.messages, si.state.last_seq) == (2, 5)


async def test_history_is_bounded_and_keys_skip_deleted(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="HK", history=3)
    with pytest.raises(NoKeysError):
        await kv.keys()
    for i in range(1, 6):
        await kv.put("k", f"v{i}".encode())
    await kv.put("x.y", b"1")
    await kv.put("z", b"1")
    hist = await kv.history("k")
    assert [(e.revision, e.value) for e in hist] == [(3, b"v3"), (4, b"v4"), (5, b"v5")]
    assert sorted(await kv.keys()) == ["k", "x.y", "z"]
    await kv.delete("z")
    await kv.purge("x.y")
    assert await kv.keys() == ["k"]
    with pytest.raises(NoKeysError):
        await kv.history("none")


async def test_watch_latest_values_history_and_updates(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="W", history=5)
    await kv.put("a", b"1")
    await kv.put("b", b"1")
    await kv.put("a", b"2")

    # Latest value per key, then the end-of-initial-values marker, then updates.
    latest = await kv.watchall()
    assert summary(await drain(latest, 3)) == [
        ("b", 2, None, b"1"),
        ("a", 3, None, b"2"),
        None,
    ]
    hist = await kv.watch("a", include_history=True)
    assert summary(await drain(hist, 3)) == [
        ("a", 1, None, b"1"),
        ("a", 3, None, b"2"),
        None,
    ]
    meta = await kv.watchall(meta_only=True)
    got = await drain(meta, 3)
    assert [(e.key, e.value) for e in got[:2]] == [("b", b""), ("a", b"")]
    assert got[2] is None
    empty = await kv.watch("nothing.here")
    assert await empty.updates(timeout=5) is None

    await kv.put("b", b"2")
    await kv.delete("a")
    await kv.put("c", b"1")
    assert summary(await drain(latest, 3)) == [
        ("b", 4, None, b"2"),
        ("a", 5, "DEL", b""),
        ("c", 6, None, b"1"),
    ]
    assert summary(await drain(hist, 1)) == [("a", 5, "DEL", b"")]
    for w in (latest, hist, meta, empty):
        await w.stop()


async def test_per_key_ttl_and_limit_markers(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="TTL", history=3, limit_marker_ttl=1)
    si = await js.stream_info("KV_TTL")
    assert si.config.allow_msg_ttl is True
    assert si.config.subject_delete_marker_ttl == 1

    watcher = await kv.watchall()
    assert await watcher.updates(timeout=5) is None
    assert await kv.create("k", b"v", msg_ttl=1) == 1
    await kv.put("keep", b"v")
    raw = await js.get_msg("KV_TTL", seq=1)
    assert raw.headers["Nats-TTL"] == "1"
    assert summary(await drain(watcher, 2)) == [("k", 1, None, b"v"), ("keep", 2, None, b"v")]

    # Expiry leaves a MaxAge marker, which the watcher reports as a purge ...
    assert summary(await drain(watcher, 1, timeout=10)) == [("k", 3, "PURGE", b"")]
    raw = await js.get_msg("KV_TTL", seq=3)
    assert raw.headers["Nats-Marker-Reason"] == "MaxAge"
    assert raw.headers["Nats-TTL"] == "1s"
    assert raw.headers["Nats-Rollup"] == "sub"

    # ... which expires in turn, leaving only the kept key.
    async def only_keep():
        return (await js.stream_info("KV_TTL")).state.messages == 1

    await wait_for("marker expired", only_keep)
    assert await kv.keys() == ["keep"]

    # A purge marker with a TTL expires without a successor marker.
    await kv.put("p", b"v")
    await kv.purge("p", msg_ttl=1)
    await wait_for("purge marker expired", only_keep)
    assert (await js.stream_info("KV_TTL")).state.last_seq == 5
    await watcher.stop()


async def test_max_age_expires_values(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="AGE", history=1, ttl=1)
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"

    async def gone():
        try:
            await kv.get("k")
        except KeyNotFoundError:
            return True
        return False

    await wait_for("value expired", gone)
    si = await js.stream_info("KV_AGE")
    assert (si.state.messages, si.state.last_seq) == (0, 1)


# Its own bounded waits (cluster forming, bucket creation, leader) add up to more than the
# default 30 s; on CI it timed out twice (session 10 and 12) without saying where.
@pytest.mark.timeout_s(90)
async def test_r3_bucket_across_nodes(server_factory, connect):
    cluster_ports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in cluster_ports)
    nodes = [
        server_factory(
            extra_args=(
                "--cluster_name",
                "kv",
                "--cluster",
                f"nats://127.0.0.1:{p}",
                "--routes",
                routes,
            ),
            name=f"n{i + 1}",
        )
        for i, p in enumerate(cluster_ports)
    ]
    conns = [await connect(n) for n in nodes]
    js = [c.nc.jetstream() for c in conns]

    errors: list[str] = []

    async def created():
        try:
            return await js[0].create_key_value(bucket="R3", history=5, replicas=3)
        except Exception as e:  # the meta group may still be electing: retried, last one kept
            errors.append(f"{type(e).__name__}: {e}")
            await asyncio.sleep(0.2)
            return None

    try:
        kv0 = await wait_for("R3 bucket", created, timeout=30)
    except BaseException:
        # Rare (seen twice in full runs, never alone): say what the create answered and what
        # each node's /jsz says about the meta group, for the next look at it.
        jsz = [n.http_get_json("/jsz") for n in nodes]
        metas = [j.get("meta_cluster") for j in jsz]
        apis = [j.get("api") for j in jsz]
        # Did the requests reach n1 at all (the client connection's counters and subscriptions)?
        conns_n1 = [
            {k: c.get(k) for k in ("cid", "in_msgs", "out_msgs", "pending_bytes", "subscriptions_list")}
            for c in nodes[0].http_get_json("/connz?subs=1").get("connections", [])
        ]
        pytest.fail(
            f"no R3 bucket in 30 s; {len(errors)} failed creates, last {errors[-1:]}; meta: {metas}; "
            f"api per node: {apis}; n1 connections: {conns_n1}"
        )

    async def leader():
        try:
            si = await js[1].stream_info("KV_R3")
        except Exception:
            return None
        return si if si.cluster and si.cluster.leader else None

    si = await wait_for("stream leader", leader, timeout=30)
    assert si.config.num_replicas == 3
    kv1 = await js[1].key_value("R3")
    kv2 = await js[2].key_value("R3")

    watcher = await kv2.watchall()
    assert await watcher.updates(timeout=5) is None
    assert await kv0.put("a", b"1") == 1
    assert await kv0.put("a", b"2") == 2
    assert await kv0.put("b", b"1") == 3
    assert summary(await drain(watcher, 3)) == [
        ("a", 1, None, b"1"),
        ("a", 2, None, b"2"),
        ("b", 3, None, b"1"),
    ]
    assert (await kv1.get("a")).value == b"2"
    assert [e.revision for e in await kv1.history("a")] == [1, 2]
    assert sorted(await kv2.keys()) == ["a", "b"]

    assert await kv1.update("a", b"from-n2", last=2) == 4
    with pytest.raises(KeyWrongLastSequenceError):
        await kv2.update("a", b"from-n3", last=2)
    with pytest.raises(KeyWrongLastSequenceError):
        await kv2.create("a", b"x")
    await kv2.delete("a")
    assert summary(await drain(watcher, 2)) == [
        ("a", 4, None, b"from-n2"),
        ("a", 5, "DEL", b""),
    ]
    assert (await kv1.status()).history == 5
    await watcher.stop()
