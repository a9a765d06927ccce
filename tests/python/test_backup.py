"""Stream backup and restore through nats-py raw requests, as the ``nats`` CLI (jsm.go) makes
them: ``$JS.API.STREAM.SNAPSHOT`` with the chunks acknowledged on their reply subjects and the
empty end message, then ``$JS.API.STREAM.RESTORE`` with the chunks sent as requests and the
final ``stream_create_response``. The same scenarios as ``tests/tests/js_backup.rs``. Ran
against nats-server 2.15.1 first."""

from __future__ import annotations

import asyncio
import json


async def take_snapshot(nc, stream, **opts):
    """The snapshot response, the backup bytes and the end message's headers."""
    chunks, done = [], asyncio.Event()
    end = {}

    async def on_chunk(msg):
        if not msg.data:
            end["headers"] = msg.headers
            done.set()
            return
        chunks.append(msg.data)
        if msg.reply:
            await nc.publish(msg.reply, b"")

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_chunk)
    req = dict(opts, deliver_subject=inbox)
    resp = await nc.request(f"$JS.API.STREAM.SNAPSHOT.{stream}", json.dumps(req).encode(), timeout=5)
    answer = json.loads(resp.data)
    if "error" not in answer:
        await asyncio.wait_for(done.wait(), 30)
    await sub.unsubscribe()
    return answer, b"".join(chunks), end.get("headers")


async def restore(nc, stream, answer, data, chunk=64 * 1024):
    req = {"config": answer["config"], "state": answer["state"]}
    resp = await nc.request(f"$JS.API.STREAM.RESTORE.{stream}", json.dumps(req).encode(), timeout=5)
    first = json.loads(resp.data)
    if not first.get("deliver_subject"):
        return first, None
    for i in range(0, len(data), chunk):
        ack = await nc.request(first["deliver_subject"], data[i : i + chunk], timeout=5)
        assert ack.data == b"", ack.data
    final = await nc.request(first["deliver_subject"], b"", timeout=30)
    return first, json.loads(final.data)


async def test_backup_restores_messages_and_consumer_into_a_fresh_server(server_factory, connect):
    a, b = server_factory(), server_factory()
    ca, cb = await connect(a), await connect(b)
    js = ca.nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(30):
        await js.publish(f"orders.{i % 3}", f"order {i}".encode() * 10, headers={"N": str(i)})
    await js.delete_msg("ORDERS", 5)
    psub = await js.pull_subscribe("orders.>", durable="WORK", stream="ORDERS")
    msgs = await psub.fetch(8)
    for m in msgs[:3]:
        await m.ack_sync()

    answer, data, end = await take_snapshot(ca.nc, "ORDERS", chunk_size=1024)
    assert answer["type"] == "io.nats.jetstream.api.v1.stream_snapshot_response"
    assert answer["state"]["messages"] == 29
    assert end is not None and end.get("Status") == "204"

    first, final = await restore(cb.nc, "ORDERS", answer, data)
    assert first["type"] == "io.nats.jetstream.api.v1.stream_restore_response"
    assert final["type"] == "io.nats.jetstream.api.v1.stream_create_response", final
    assert final["state"]["messages"] == 29
    assert final["state"]["last_seq"] == 30

    jsb = cb.nc.jetstream()
    for seq in range(1, 31):
        if seq == 5:
            continue
        want = await js.get_msg("ORDERS", seq)
        got = await jsb.get_msg("ORDERS", seq)
        assert (got.subject, got.data, got.headers) == (want.subject, want.data, want.headers)
    ci_a = await js.consumer_info("ORDERS", "WORK")
    ci_b = await jsb.consumer_info("ORDERS", "WORK")
    assert ci_b.delivered.stream_seq == ci_a.delivered.stream_seq
    assert ci_b.ack_floor.stream_seq == ci_a.ack_floor.stream_seq
    assert ci_b.num_ack_pending == ci_a.num_ack_pending == 5
    assert ci_b.num_pending == ci_a.num_pending

    again, none = await restore(cb.nc, "ORDERS", answer, data)
    assert none is None
    assert again["error"]["err_code"] == 10130


async def test_snapshot_of_a_missing_stream_is_not_found(server, connect):
    c = await connect(server)
    answer, _, _ = await take_snapshot(c.nc, "NOPE")
    assert answer["error"]["err_code"] == 10059
    assert answer["error"]["code"] == 404
