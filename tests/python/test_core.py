"""Core client protocol behaviour, seen through nats-py (and raw protocol where nats-py hides it)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from nats.errors import MaxPayloadError, NoRespondersError

from support import RawClient, settle, wait_until

DEFAULT_MAX_PAYLOAD = 1024 * 1024


async def drain_sync(sub, expected: int, timeout: float = 5.0) -> list:
    """Read exactly ``expected`` messages from a callback-less subscription."""
    return [await sub.next_msg(timeout=timeout) for _ in range(expected)]


async def test_pub_sub_delivers_in_order_with_reply_subject(server, connect):
    sub_c = await connect(server)
    pub_c = await connect(server)
    sub = await sub_c.nc.subscribe("greet.one")
    await settle(sub_c.nc)

    for i in range(20):
        reply = "answer.here" if i == 7 else ""
        await pub_c.nc.publish("greet.one", f"hello {i}".encode(), reply=reply)
    await settle(pub_c.nc)

    msgs = await drain_sync(sub, 20)
    assert [m.data for m in msgs] == [f"hello {i}".encode() for i in range(20)]
    assert all(m.subject == "greet.one" for m in msgs)
    assert msgs[7].reply == "answer.here"
    assert all(m.reply == "" for i, m in enumerate(msgs) if i != 7)

    # Nothing beyond what was published.
    await settle(sub_c.nc)
    assert sub.pending_msgs == 0
    assert not sub_c.errors and not pub_c.errors


async def test_wildcard_subscriptions(server, connect):
    c = await connect(server)
    nc = c.nc
    subs = {
        "foo": await nc.subscribe("foo"),
        "foo.*": await nc.subscribe("foo.*"),
        "foo.>": await nc.subscribe("foo.>"),
        "*.bar": await nc.subscribe("*.bar"),
        "foo.*.baz": await nc.subscribe("foo.*.baz"),
        ">": await nc.subscribe(">"),
    }
    published = ["foo", "foo.bar", "foo.bar.baz", "baz.bar", "foo.qux.baz", "other"]
    for subject in published:
        await nc.publish(subject, subject.encode())
    await settle(nc)

    expected = {
        "foo": ["foo"],
        "foo.*": ["foo.bar"],
        "foo.>": ["foo.bar", "foo.bar.baz", "foo.qux.baz"],
        "*.bar": ["foo.bar", "baz.bar"],
        "foo.*.baz": ["foo.bar.baz", "foo.qux.baz"],
        ">": published,
    }
    for pattern, want in expected.items():
        got = await drain_sync(subs[pattern], len(want))
        assert [m.subject for m in got] == want, pattern
        assert [m.data for m in got] == [s.encode() for s in want], pattern
        assert subs[pattern].pending_msgs == 0, f"{pattern}: extra messages"


async def test_queue_group_delivers_each_message_to_exactly_one_member(server, connect):
    total = 300
    members = [await connect(server) for _ in range(3)]
    received: list[list[int]] = [[] for _ in members]

    def collector(idx: int):
        async def cb(msg):
            received[idx].append(int(msg.data))

        return cb

    for idx, m in enumerate(members):
        await m.nc.subscribe("jobs", queue="workers", cb=collector(idx))
        await settle(m.nc)

    # A plain subscriber on the same subject still sees every message.
    watcher = await connect(server)
    plain: list[int] = []

    async def plain_cb(msg):
        plain.append(int(msg.data))

    await watcher.nc.subscribe("jobs", cb=plain_cb)
    await settle(watcher.nc)

    pub = await connect(server)
    for i in range(total):
        await pub.nc.publish("jobs", str(i).encode())
    await settle(pub.nc)

    await wait_until(lambda: sum(len(r) for r in received) >= total, what="queue deliveries")
    await wait_until(lambda: len(plain) >= total, what="plain subscriber deliveries")
    for m in members:
        await settle(m.nc)
    await asyncio.sleep(0.1)  # would expose duplicate deliveries still in flight

    everything = [n for r in received for n in r]
    assert len(everything) == total, "each message delivered exactly once across the group"
    assert sorted(everything) == list(range(total))
    assert all(len(r) > 0 for r in received), f"distribution {[len(r) for r in received]}"
    assert sorted(plain) == list(range(total))


async def test_request_reply(server, connect):
    svc = await connect(server)
    seen_replies: list[str] = []

    async def handler(msg):
        seen_replies.append(msg.reply)
        await msg.respond(b"echo:" + msg.data)

    await svc.nc.subscribe("svc.echo", cb=handler)
    await settle(svc.nc)

    client = await connect(server)
    for i in range(10):
        resp = await client.nc.request("svc.echo", f"req{i}".encode(), timeout=2)
        assert resp.data == f"echo:req{i}".encode()
    assert len(seen_replies) == 10
    assert all(r.startswith("_INBOX.") for r in seen_replies)


async def test_headers_round_trip(server, connect):
    sub_c = await connect(server)
    pub_c = await connect(server)
    sub = await sub_c.nc.subscribe("hdr.test")
    await settle(sub_c.nc)

    headers = {"X-Trace-Id": "abc-123", "Content-Type": "text/plain", "X-Spaces": "a b  c"}
    await pub_c.nc.publish("hdr.test", b"with headers", headers=headers)
    await pub_c.nc.publish("hdr.test", b"", headers={"Only-Header": "yes"})
    await settle(pub_c.nc)

    first, second = await drain_sync(sub, 2)
    assert first.data == b"with headers"
    assert first.headers == headers
    assert second.data == b""
    assert second.headers == {"Only-Header": "yes"}


async def test_multi_value_header_forwarded_verbatim(server):
    """A header name repeated with several values reaches the subscriber byte-for-byte."""
    sub = await RawClient.connect("127.0.0.1", server.port)
    pub = await RawClient.connect("127.0.0.1", server.port)
    try:
        await sub.send(b"SUB hdr.multi 9\r\n")
        await sub.ping()
        hdr = b"NATS/1.0\r\nX-Multi: one\r\nX-Multi: two\r\nX-Single: s\r\n\r\n"
        payload = b"payload"
        cmd = f"HPUB hdr.multi {len(hdr)} {len(hdr) + len(payload)}\r\n".encode()
        await pub.send(cmd + hdr + payload + b"\r\n")
        await pub.ping()
        msgs, other = await sub.read_until_pong()
        assert other == []
        assert len(msgs) == 1
        assert msgs[0].subject == "hdr.multi" and msgs[0].sid == "9"
        assert msgs[0].headers == hdr
        assert msgs[0].payload == payload
    finally:
        await sub.close()
        await pub.close()


async def test_multi_value_header_to_nats_py(server, connect):
    """nats-py (dict headers) still parses a message carrying a repeated header name."""
    c = await connect(server)
    sub = await c.nc.subscribe("hdr.multi")
    await settle(c.nc)
    pub = await RawClient.connect("127.0.0.1", server.port)
    try:
        hdr = b"NATS/1.0\r\nX-Multi: one\r\nX-Multi: two\r\nX-Single: s\r\n\r\n"
        await pub.send(f"HPUB hdr.multi {len(hdr)} {len(hdr) + 2}\r\n".encode() + hdr + b"ok\r\n")
        await pub.ping()
    finally:
        await pub.close()
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"ok"
    assert msg.headers is not None
    assert msg.headers["X-Single"] == "s"
    assert msg.headers["X-Multi"] in ("one", "two")


async def test_no_responders(server, connect):
    c = await connect(server)
    start = time.monotonic()
    with pytest.raises(NoRespondersError):
        await c.nc.request("nobody.listens", b"anyone?", timeout=3)
    # The server answers with a 503 status right away instead of letting the request time out.
    assert time.monotonic() - start < 2


async def test_unsubscribe_with_max_msgs_nats_py(server, connect):
    sub_c = await connect(server)
    pub_c = await connect(server)
    got: list[bytes] = []

    async def cb(msg):
        got.append(msg.data)

    sub = await sub_c.nc.subscribe("limited", cb=cb)
    await sub.unsubscribe(limit=3)
    await settle(sub_c.nc)
    for i in range(10):
        await pub_c.nc.publish("limited", str(i).encode())
    await settle(pub_c.nc)
    await settle(sub_c.nc)
    await wait_until(lambda: len(got) >= 3, what="3 messages")
    await asyncio.sleep(0.05)
    assert got == [b"0", b"1", b"2"]


async def test_unsubscribe_with_max_msgs_enforced_by_server(server):
    """``UNSUB <sid> <max>``: the server itself stops delivering after ``max`` messages."""
    sub = await RawClient.connect("127.0.0.1", server.port)
    try:
        await sub.send(b"SUB auto 1\r\nSUB auto 2\r\nUNSUB 1 3\r\n")
        await sub.ping()
        await sub.send(b"".join(f"PUB auto {len(str(i))}\r\n{i}\r\n".encode() for i in range(10)))
        msgs, other = await sub.read_until_pong()
        assert other == []
        by_sid = {"1": [], "2": []}
        for m in msgs:
            by_sid[m.sid].append(m.payload)
        assert by_sid["1"] == [b"0", b"1", b"2"]
        assert by_sid["2"] == [str(i).encode() for i in range(10)]

        # The subscription is gone for good, not just paused.
        await sub.send(b"PUB auto 4\r\nmore\r\n")
        msgs, _ = await sub.read_until_pong()
        assert [(m.sid, m.payload) for m in msgs] == [("2", b"more")]
    finally:
        await sub.close()


async def test_flush(server, connect):
    """flush() round-trips a PING; after both sides flushed, every message has arrived."""
    sub_c = await connect(server)
    pub_c = await connect(server)
    sub = await sub_c.nc.subscribe("flush.test")
    await settle(sub_c.nc)

    n = 1000
    for i in range(n):
        await pub_c.nc.publish("flush.test", str(i).encode())
    started = time.monotonic()
    await settle(pub_c.nc)
    await settle(sub_c.nc)
    assert time.monotonic() - started < 5

    # No waiting: the server sends the PONG after the messages, so they are already queued.
    assert sub.pending_msgs == n
    msgs = await drain_sync(sub, n, timeout=1)
    assert [int(m.data) for m in msgs] == list(range(n))
    assert pub_c.nc.stats["out_msgs"] == n


async def test_pong_follows_earlier_messages(server):
    """Raw protocol: a PONG is written after every message routed to that client before it."""
    sub = await RawClient.connect("127.0.0.1", server.port)
    pub = await RawClient.connect("127.0.0.1", server.port)
    try:
        await sub.send(b"SUB order.> 1\r\n")
        await sub.ping()
        n = 500
        await pub.send(
            b"".join(f"PUB order.{i} {len(str(i))}\r\n{i}\r\n".encode() for i in range(n))
        )
        await pub.ping()  # all PUBs processed
        msgs, other = await sub.read_until_pong()
        assert other == []
        assert [(m.subject, m.payload) for m in msgs] == [
            (f"order.{i}", str(i).encode()) for i in range(n)
        ]
    finally:
        await sub.close()
        await pub.close()


async def test_large_payload_and_client_side_limit(server, connect):
    sub_c = await connect(server)
    pub_c = await connect(server)
    max_payload = pub_c.nc.max_payload
    assert max_payload == DEFAULT_MAX_PAYLOAD

    sub = await sub_c.nc.subscribe("big")
    await settle(sub_c.nc)

    near_max = os.urandom(max_payload - 64)
    exactly_max = os.urandom(max_payload)
    await pub_c.nc.publish("big", near_max)
    await pub_c.nc.publish("big", exactly_max)
    await settle(pub_c.nc)
    first, second = await drain_sync(sub, 2)
    assert first.data == near_max
    assert second.data == exactly_max

    with pytest.raises(MaxPayloadError):
        await pub_c.nc.publish("big", b"x" * (max_payload + 1))
    # The client rejected it locally: the connection is still healthy.
    await settle(pub_c.nc)
    assert pub_c.nc.is_connected
    assert sub.pending_msgs == 0
    assert not pub_c.errors


async def test_server_rejects_oversized_publish(server):
    raw = await RawClient.connect("127.0.0.1", server.port)
    try:
        max_payload = raw.info["max_payload"]
        assert max_payload == DEFAULT_MAX_PAYLOAD
        await raw.send(f"PUB too.big {max_payload + 1}\r\n".encode())
        line = await raw.read_line()
        assert line.startswith(b"-ERR ") and b"maximum payload violation" in line.lower()
        # The server closes the connection after the violation.
        assert await asyncio.wait_for(raw.reader.read(), 5) == b""
    finally:
        await raw.close()


async def test_varz_reports_connections(server, connect):
    def varz() -> dict:
        return server.http_get_json("/varz")

    async def wait_connections(n: int) -> dict:
        # Closing a connection is asynchronous on the server side (this includes the fixture's
        # readiness probe), so poll briefly instead of asserting on the first sample.
        deadline = time.monotonic() + 5
        while (v := await asyncio.to_thread(varz))["connections"] != n:
            assert time.monotonic() < deadline, f"connections stayed {v['connections']}, want {n}"
            await asyncio.sleep(0.05)
        return v

    base = await wait_connections(0)
    assert base["server_name"] == server.name
    assert base["port"] == server.port
    assert base["max_payload"] == DEFAULT_MAX_PAYLOAD

    a = await connect(server)
    b = await connect(server)
    await settle(a.nc)
    await settle(b.nc)
    # Both CONNECTs were processed (each got its PONG), so they must be counted already.
    assert (await asyncio.to_thread(varz))["connections"] == 2

    await b.nc.close()
    await wait_connections(1)
