"""Mirrors and sources through nats-py (2.16): a mirror keeps the origin's sequences and shows
``mirror`` in stream info; a source with a subject transform copies into a stream with its own
subjects. The same scenarios as ``tests/tests/js_mirrors.rs`` (async-nats). Every test ran
against nats-server 2.15.1 first."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.js import api


async def wait_for(what, check, timeout=15.0, interval=0.05):
    """Await ``check()`` until it returns a truthy value (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def test_mirror_keeps_origin_sequences(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="ORIG", subjects=["orig.>"])
    for s in ["orig.a", "orig.b", "orig.c"]:
        await js.publish(s, s.encode())
    await js.delete_msg("ORIG", 2)
    await js.add_stream(name="M", mirror=api.StreamSource(name="ORIG"))

    async def copied():
        si = await js.stream_info("M")
        return si if si.state.last_seq == 3 else None

    si = await wait_for("mirror copied", copied)
    assert si.state.messages == 2
    assert si.mirror is not None and si.mirror.name == "ORIG"
    assert si.mirror.lag == 0
    m = await js.get_msg("M", 3)
    o = await js.get_msg("ORIG", 3)
    assert (m.subject, m.data, m.time) == (o.subject, o.data, o.time)


async def test_source_with_subject_transform(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="ORIG", subjects=["orig.>"])
    await js.publish("orig.a", b"a")
    await js.publish("orig.b", b"b")
    src = api.StreamSource(
        name="ORIG",
        subject_transforms=[api.SubjectTransform(src="orig.b", dest="tr.b")],
    )
    await js.add_stream(name="S", subjects=["s.>"], sources=[src])

    async def copied():
        si = await js.stream_info("S")
        return si if si.state.messages == 1 else None

    si = await wait_for("source copied", copied)
    assert [s.name for s in si.sources] == ["ORIG"]
    m = await js.get_msg("S", 1)
    assert m.subject == "tr.b"
    assert m.data == b"b"
    assert m.headers["Nats-Stream-Source"].startswith("ORIG 2 ")
    ack = await js.publish("s.own", b"own")
    assert (ack.stream, ack.seq) == ("S", 2)
