"""JetStream streams through nats-py's JetStream API (single node): stream management,
publish acks, dedup, expected-sequence errors, message get/delete, purge, and the error codes
clients key on. Every test ran against nats-server 2.15.1 first."""

from __future__ import annotations

import pytest
from nats.js import api
from nats.js.errors import APIError, BadRequestError, NotFoundError


async def test_stream_lifecycle_and_publish_acks(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    info = await js.add_stream(name="ORDERS", subjects=["orders.*"])
    assert info.config.name == "ORDERS"
    assert info.config.retention == api.RetentionPolicy.LIMITS
    assert info.config.storage == api.StorageType.FILE
    assert info.state.messages == 0

    acks = [await js.publish(f"orders.{i % 2}", f"m{i}".encode()) for i in range(5)]
    assert [a.seq for a in acks] == [1, 2, 3, 4, 5]
    assert all(a.stream == "ORDERS" for a in acks)

    info = await js.stream_info("ORDERS")
    assert info.state.messages == 5
    assert info.state.first_seq == 1
    assert info.state.last_seq == 5

    names = await js.streams_info()
    assert [s.config.name for s in names] == ["ORDERS"]

    assert await js.delete_stream("ORDERS")
    with pytest.raises(NotFoundError):
        await js.stream_info("ORDERS")


async def test_dedup_and_expected_last_sequence(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="D", subjects=["d"])
    first = await js.publish("d", b"x", headers={"Nats-Msg-Id": "one"})
    again = await js.publish("d", b"x", headers={"Nats-Msg-Id": "one"})
    assert first.seq == 1
    assert again.seq == 1
    assert again.duplicate is True

    with pytest.raises(APIError) as err:
        await js.publish("d", b"y", headers={"Nats-Expected-Last-Sequence": "9"})
    assert err.value.err_code == 10071
    ok = await js.publish("d", b"y", headers={"Nats-Expected-Last-Sequence": "1"})
    assert ok.seq == 2


async def test_message_get_delete_and_purge(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="P", subjects=["p.>"])
    for i in range(6):
        await js.publish(f"p.{'a' if i % 2 == 0 else 'b'}", f"v{i}".encode())

    msg = await js.get_msg("P", seq=2)
    assert msg.subject == "p.b"
    assert msg.data == b"v1"
    last = await js.get_last_msg("P", "p.a")
    assert last.seq == 5

    assert await js.delete_msg("P", 1)
    info = await js.stream_info("P")
    assert info.state.messages == 5

    assert await js.purge_stream("P", subject="p.b")
    info = await js.stream_info("P")
    assert info.state.messages == 2

    with pytest.raises(NotFoundError):
        await js.get_msg("P", seq=2)


async def test_create_conflicts_and_update(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="A", subjects=["a.*"])
    with pytest.raises(BadRequestError) as err:
        await js.add_stream(name="A", subjects=["a.>"])
    assert err.value.err_code == 10058
    with pytest.raises(BadRequestError) as err:
        await js.add_stream(name="B", subjects=["a.x"])
    assert err.value.err_code == 10065

    updated = await js.update_stream(name="A", subjects=["a.*"], max_msgs=3)
    assert updated.config.max_msgs == 3
    for _ in range(5):
        await js.publish("a.x", b"m")
    info = await js.stream_info("A")
    assert info.state.messages == 3


async def test_memory_stream_and_limits(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(
        name="M",
        subjects=["m"],
        storage=api.StorageType.MEMORY,
        max_msgs=2,
        discard=api.DiscardPolicy.NEW,
    )
    await js.publish("m", b"1")
    await js.publish("m", b"2")
    with pytest.raises(APIError) as err:
        await js.publish("m", b"3")
    assert err.value.err_code == 10077
    info = await js.stream_info("M")
    assert info.config.storage == api.StorageType.MEMORY
    assert info.state.messages == 2


async def test_account_info(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="X", subjects=["x"])
    await js.publish("x", b"hello")
    info = await js.account_info()
    assert info.streams == 1
    assert info.consumers == 0
    assert info.storage > 0
