"""Atomic batch publish (ADR-50) through nats-py 2.16, which knows the batch headers and reads
``batch``/``count`` from the commit's PubAck but has no batch publisher of its own: the
messages are published with the headers, the commit through ``js.publish``. The same scenario
as ``tests/tests/js_batch.rs`` (async-nats). Ran against nats-server 2.15.1 first."""

from __future__ import annotations

import pytest
from nats.js import api
from nats.js.errors import APIError


def batch_headers(batch_id: str, seq: int, **extra: str) -> dict:
    return {
        api.Header.BATCH_ID: batch_id,
        api.Header.BATCH_SEQUENCE: str(seq),
        **extra,
    }


async def test_atomic_batch_commit_returns_batch_and_count(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="B", subjects=["b.>"], allow_atomic=True)
    first = await c.nc.request("b.a", b"1", headers=batch_headers("py", 1), timeout=5)
    assert first.data == b""
    await c.nc.publish("b.b", b"2", headers=batch_headers("py", 2))
    ack = await js.publish(
        "b.a", b"3", headers=batch_headers("py", 3, **{api.Header.BATCH_COMMIT: "1"})
    )
    assert (ack.stream, ack.seq, ack.batch_id, ack.batch_size) == ("B", 3, "py", 3)
    assert (await js.stream_info("B")).config.allow_atomic is True


async def test_a_refused_batch_stores_nothing(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="B", subjects=["b.>"], allow_atomic=True)
    await c.nc.publish("b.a", b"1", headers=batch_headers("dup", 1, **{"Nats-Msg-Id": "m"}))
    with pytest.raises(APIError) as err:
        await js.publish(
            "b.a",
            b"2",
            headers=batch_headers(
                "dup", 2, **{"Nats-Msg-Id": "m", api.Header.BATCH_COMMIT: "1"}
            ),
        )
    assert err.value.err_code == 10201
    assert (await js.stream_info("B")).state.messages == 0
