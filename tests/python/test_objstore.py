"""Object store buckets through nats-py (2.16): bucket create/bind/delete and status, put and
get of a 10 MiB object in 80 chunks (bytes and ``SHA-256=`` digest checked), info, overwrite
(old chunks purged), list, delete (meta tombstone, chunks purged), links (nats-py has no API to
create them, so link metas are published as async-nats and nats.go write them; ``get`` follows
them), watch (puts and deletes), seal; and an R3 store on three nodes. The same scenarios as
``tests/tests/js_objstore.rs`` (async-nats). Every test ran against nats-server 2.15.1 first."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import time

import pytest
from nats.js import api
from nats.js.errors import (
    BucketNotFoundError,
    LinkIsABucketError,
    NotFoundError,
    ObjectNotFoundError,
)

from conftest import free_port

CHUNK = 128 * 1024
BIG = 10 * 1024 * 1024


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


def data(n: int, seed: int) -> bytes:
    """``n`` reproducible, incompressible bytes."""
    return random.Random(seed).randbytes(n)


def digest(b: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).decode()


def meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


async def publish_link(js, bucket: str, name: str, to_bucket: str, to_name: str | None):
    """A link meta as async-nats ``add_link``/``add_bucket_link`` writes it."""
    link = {"bucket": to_bucket}
    if to_name is not None:
        link["name"] = to_name
    info = {
        "name": name,
        "bucket": bucket,
        "nuid": f"link{random.Random(name).randrange(10**9)}",
        "size": 0,
        "chunks": 0,
        "options": {"link": link},
    }
    await js.publish(
        meta_subject(bucket, name),
        json.dumps(info).encode(),
        headers={"Nats-Rollup": "sub"},
    )


async def names(obs) -> list[str]:
    return sorted(i.name for i in await obs.list(ignore_deletes=True))


async def test_put_get_multi_chunk_object_info_overwrite_and_delete(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    obs = await js.create_object_store(bucket="FILES", description="files")
    si = await js.stream_info("OBJ_FILES")
    assert si.config.subjects == ["$O.FILES.C.>", "$O.FILES.M.>"]
    assert si.config.discard == api.DiscardPolicy.NEW
    assert si.config.allow_rollup_hdrs is True
    assert si.config.allow_direct is True
    assert si.config.description == "files"

    big = data(BIG, 1)
    info = await obs.put("dir/big.bin", big)
    assert (info.size, info.chunks) == (BIG, BIG // CHUNK)
    assert info.digest == digest(big)
    si = await js.stream_info("OBJ_FILES")
    assert si.state.messages == BIG // CHUNK + 1

    res = await obs.get("dir/big.bin")
    assert len(res.data) == BIG
    assert res.data == big
    assert res.info.digest == digest(big)
    meta = await obs.get_info("dir/big.bin")
    assert (meta.name, meta.bucket, meta.size, meta.chunks) == ("dir/big.bin", "FILES", BIG, 80)
    assert meta.nuid == info.nuid
    assert meta.options.max_chunk_size == CHUNK
    raw = await js.get_last_msg("OBJ_FILES", meta_subject("FILES", "dir/big.bin"))
    assert json.loads(raw.data)["digest"] == digest(big)

    odd = data(3 * CHUNK + 17, 2)
    assert (await obs.put("odd", odd)).chunks == 4
    assert (await obs.get("odd")).data == odd
    empty = await obs.put("empty", b"")
    assert (empty.size, empty.chunks) == (0, 0)
    assert (await obs.get("empty")).data == b""

    small = data(1000, 3)
    over = await obs.put("dir/big.bin", small)
    assert over.nuid != info.nuid
    assert (await obs.get("dir/big.bin")).data == small
    si = await js.stream_info("OBJ_FILES")
    assert si.state.messages == 8  # big: 1 chunk + meta; odd: 4 + meta; empty: meta
    assert await names(obs) == ["dir/big.bin", "empty", "odd"]

    await obs.delete("odd")
    with pytest.raises(ObjectNotFoundError):
        await obs.get_info("odd")
    gone = await obs.get_info("odd", show_deleted=True)
    assert gone.deleted is True
    assert (gone.size, gone.chunks) == (0, 0)
    with pytest.raises(ObjectNotFoundError):
        await obs.get("odd")
    with pytest.raises(ObjectNotFoundError):
        await obs.get("never")
    si = await js.stream_info("OBJ_FILES")
    assert si.state.messages == 4
    assert await names(obs) == ["dir/big.bin", "empty"]

    bound = await js.object_store("FILES")
    assert (await bound.get("dir/big.bin")).data == small
    assert await js.delete_object_store("FILES")
    with pytest.raises(BucketNotFoundError):
        await js.object_store("FILES")


async def test_links_to_objects_and_buckets(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    a = await js.create_object_store(bucket="LA")
    b = await js.create_object_store(bucket="LB")
    body = data(2 * CHUNK + 5, 4)
    await a.put("target", body)

    await publish_link(js, "LA", "alias", "LA", "target")
    assert (await a.get("alias")).data == body
    link = await a.get_info("alias")
    assert link.is_link()
    assert (link.options.link.bucket, link.options.link.name) == ("LA", "target")

    await publish_link(js, "LB", "from-a", "LA", "target")
    assert (await b.get("from-a")).data == body

    await publish_link(js, "LB", "to-a", "LA", None)
    with pytest.raises(LinkIsABucketError):
        await b.get("to-a")
    assert await names(b) == ["from-a", "to-a"]


async def test_watch_sees_puts_and_deletes(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    obs = await js.create_object_store(bucket="W")
    await obs.put("old", b"old")

    w = await obs.watch()
    first = await w.updates(timeout=5)
    assert (first.name, first.deleted, first.size) == ("old", False, 3)
    assert await w.updates(timeout=5) is None  # end of initial values
    await obs.put("x", data(CHUNK + 1, 5))
    u = await w.updates(timeout=5)
    assert (u.name, u.deleted, u.size) == ("x", False, CHUNK + 1)
    await obs.delete("x")
    u = await w.updates(timeout=5)
    assert (u.name, u.deleted, u.size) == ("x", True, 0)
    await obs.put("x", b"again")
    u = await w.updates(timeout=5)
    assert (u.name, u.deleted, u.size) == ("x", False, 5)
    await w.stop()

    updates = await obs.watch(updates_only=True)
    await obs.delete("old")
    u = await updates.updates(timeout=5)
    assert (u.name, u.deleted) == ("old", True)
    await updates.stop()

    # An empty bucket: list raises, watch ends its initial values at once.
    empty = await js.create_object_store(bucket="EMPTY")
    with pytest.raises(NotFoundError):
        await empty.list()
    ew = await empty.watch()
    assert await ew.updates(timeout=5) is None
    await ew.stop()


async def test_seal_and_status(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    obs = await js.create_object_store(bucket="SEAL", description="sealed")
    body = data(CHUNK + 9, 6)
    await obs.put("kept", body)
    st = await obs.status()
    assert st.bucket == "SEAL"
    assert st.description == "sealed"
    assert st.sealed is False
    assert st.replicas == 1
    assert st.size == (await js.stream_info("OBJ_SEAL")).state.bytes > len(body)

    await obs.seal()
    st = await obs.status()
    assert st.sealed is True
    assert (await obs.get("kept")).data == body
    with pytest.raises(Exception):
        await obs.put("new", b"nope")
    with pytest.raises(Exception):
        await obs.delete("kept")
    assert (await obs.get("kept")).data == body
    assert (await js.stream_info("OBJ_SEAL")).state.messages == 3


async def test_r3_store_across_nodes(server_factory, connect):
    cluster_ports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in cluster_ports)
    nodes = [
        server_factory(
            extra_args=(
                "--cluster_name",
                "obj",
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

    async def created():
        try:
            return await js[0].create_object_store(bucket="R3", replicas=3)
        except Exception:
            await asyncio.sleep(0.2)
            return None

    o0 = await wait_for("R3 store", created, timeout=30)

    async def leader():
        try:
            si = await js[1].stream_info("OBJ_R3")
        except Exception:
            return None
        return si if si.cluster and si.cluster.leader else None

    si = await wait_for("stream leader", leader, timeout=30)
    assert si.config.num_replicas == 3
    o1 = await js[1].object_store("R3")
    o2 = await js[2].object_store("R3")

    w = await o2.watch()
    assert await w.updates(timeout=5) is None
    big = data(BIG, 7)
    info = await o0.put("big", big)
    assert info.chunks == 80
    u = await w.updates(timeout=10)
    assert (u.name, u.size) == ("big", BIG)
    for o in (o1, o2):
        assert (await o.get("big")).data == big
    await o1.put("small", data(700, 8))
    u = await w.updates(timeout=5)
    assert (u.name, u.size) == ("small", 700)
    await o2.delete("big")
    u = await w.updates(timeout=5)
    assert (u.name, u.deleted) == ("big", True)
    with pytest.raises(ObjectNotFoundError):
        await o1.get("big")
    assert await names(o0) == ["small"]
    assert (await js[2].stream_info("OBJ_R3")).state.messages == 3
    assert (await o1.status()).replicas == 3
    await w.stop()
