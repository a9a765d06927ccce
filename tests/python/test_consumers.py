"""JetStream consumers through nats-py's JetStream API (single node): pull subscriptions with
fetch/ack/nak/term/ack_sync, durable push subscriptions, ordered push consumers, KV watchers
and history, consumer info and the errors clients key on. Every test ran against
nats-server 2.15.1 first."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import api
from nats.js.errors import NotFoundError


async def test_pull_subscribe_fetch_ack_and_info(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="PULL", subjects=["pull.*"])
    for i in range(10):
        await js.publish("pull.a", f"m{i}".encode())
    psub = await js.pull_subscribe("pull.a", durable="w")
    msgs = await psub.fetch(4, timeout=2)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4]
    assert msgs[0].metadata.num_pending == 9
    for m in msgs:
        await m.ack_sync()
    info = await js.consumer_info("PULL", "w")
    assert info.ack_floor.stream_seq == 4
    assert info.num_ack_pending == 0
    assert info.num_pending == 6
    assert info.config.ack_policy == api.AckPolicy.EXPLICIT

    rest = await psub.fetch(10, timeout=1)
    assert len(rest) == 6
    # NAK brings a message back first; TERM stops it.
    await rest[0].nak()
    again = await psub.fetch(1, timeout=2)
    assert again[0].metadata.sequence.stream == 5
    assert again[0].metadata.num_delivered == 2
    await again[0].term()
    for m in rest[1:]:
        await m.ack_sync()
    info = await js.consumer_info("PULL", "w")
    assert info.num_ack_pending == 0
    assert info.ack_floor.stream_seq == 10


async def test_fetch_on_an_empty_consumer_times_out_cleanly(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="EMPTY", subjects=["empty"])
    psub = await js.pull_subscribe("empty", durable="e")
    with pytest.raises(asyncio.TimeoutError):
        await psub.fetch(3, timeout=0.5)
    with pytest.raises(asyncio.TimeoutError):
        await psub.fetch(1, timeout=0.5)


async def test_durable_push_subscription_delivers_and_acks(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="PUSH", subjects=["push.>"])
    for i in range(5):
        await js.publish("push.x", f"p{i}".encode())
    sub = await js.subscribe("push.x", durable="pd", manual_ack=True)
    got = []
    for _ in range(5):
        m = await sub.next_msg(timeout=2)
        got.append(m.data)
        await m.ack()
    assert got == [b"p0", b"p1", b"p2", b"p3", b"p4"]
    info = await js.consumer_info("PUSH", "pd")
    assert info.config.deliver_subject
    await asyncio.sleep(0.2)
    info = await js.consumer_info("PUSH", "pd")
    assert info.num_ack_pending == 0
    assert info.delivered.stream_seq == 5


async def test_ordered_push_consumer_reads_everything(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="ORD", subjects=["ord"])
    for i in range(20):
        await js.publish("ord", f"o{i}".encode())
    sub = await js.subscribe("ord", ordered_consumer=True)
    seen = []
    for _ in range(20):
        m = await sub.next_msg(timeout=2)
        seen.append(m.metadata.sequence.stream)
    assert seen == list(range(1, 21))


async def test_key_value_watch_keys_and_history(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="app", history=5)
    await kv.put("a", b"1")
    await kv.put("b", b"2")
    await kv.put("a", b"3")
    assert (await kv.get("a")).value == b"3"
    assert sorted(await kv.keys()) == ["a", "b"]
    hist = await kv.history("a")
    assert [e.value for e in hist] == [b"1", b"3"]
    watcher = await kv.watchall()
    initial = []
    while True:
        e = await watcher.updates(timeout=2)
        if e is None:
            break
        initial.append((e.key, e.value))
    assert sorted(initial) == [("a", b"3"), ("b", b"2")]
    await kv.put("c", b"4")
    e = await watcher.updates(timeout=2)
    assert (e.key, e.value) == ("c", b"4")
    await watcher.stop()


async def test_consumer_errors(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="ERR", subjects=["err"])
    with pytest.raises(NotFoundError) as e:
        await js.consumer_info("ERR", "missing")
    assert e.value.err_code == 10014
    with pytest.raises(NotFoundError) as e:
        await js.consumer_info("NOPE", "x")
    assert e.value.err_code == 10059
    await js.add_consumer("ERR", durable_name="d", ack_policy=api.AckPolicy.EXPLICIT)
    names = [ci.name for ci in await js.consumers_info("ERR")]
    assert names == ["d"]
    assert await js.delete_consumer("ERR", "d")
    with pytest.raises(NotFoundError):
        await js.delete_consumer("ERR", "d")
