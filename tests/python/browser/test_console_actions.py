"""The console's actions beyond the walkthrough, in a real browser: a request with its reply, an
ephemeral consumer, deleting a message, KV put/delete/purge with history, downloading an object,
and the consumers of a stream past the ones the shared sample lists.

Run alone: ``JETRAFT_BIN=<target>/debug/jetraft .venv/bin/python -m pytest -q tests/python/browser``.
"""

from __future__ import annotations

import hashlib

import nats.js.errors
import pytest
from playwright.async_api import expect

pytestmark = pytest.mark.timeout_s(150)


async def test_request_reply_shows_the_responders_answer(server, connect, new_page):
    c = await connect(server)

    async def respond(msg):
        await msg.respond(b"pong:" + msg.data + b":" + (msg.headers or {}).get("X-Id", "").encode())

    await c.nc.subscribe("svc.echo", cb=respond)
    await c.nc.flush()
    p = await new_page()
    page = p.page
    await page.goto(server.monitor_url + "/#/pubsub")
    await page.fill('[data-testid="pub-subject"]', "svc.echo")
    await page.fill('[data-testid="pub-headers"]', "X-Id: 42")
    await page.fill('[data-testid="pub-payload"]', "ping")
    await page.check('[data-testid="pub-request"]')
    await page.click('[data-testid="pub-send"]')
    await expect(page.locator('[data-testid="reply"]')).to_have_text("pong:ping:42")
    await expect(page.locator('[data-testid="core-only"]')).to_be_visible()
    # Nobody answers: the page says so instead of showing a reply.
    await page.fill('[data-testid="pub-subject"]', "svc.nobody")
    await page.click('[data-testid="pub-send"]')
    await expect(page.locator('[data-testid="pub-result"] .error')).to_be_visible()
    await expect(page.locator('[data-testid="reply"]')).to_have_count(0)
    await p.shot("request")
    p.assert_no_errors()


async def test_ephemeral_consumer_and_message_delete(server, connect, new_page):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="EVENTS", subjects=["events.>"])
    for i in range(1, 11):
        await js.publish(f"events.{i}", f"event {i}".encode())
    p = await new_page()
    page = p.page

    # An ephemeral pull consumer (blank name) starting at sequence 4.
    await page.goto(server.monitor_url + "/#/consumers/EVENTS")
    await page.click('[data-testid="new-consumer"]')
    form = page.locator('[data-testid="consumer-form"]')
    await form.locator('[name="deliver_policy"]').select_option("by_start_sequence")
    await form.locator('[name="opt_start_seq"]').fill("4")
    await page.click('[data-testid="consumer-create"]')
    row = page.locator('[data-testid="consumers"] tr[data-consumer]')
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("ephemeral")
    await expect(row.locator('[data-field="num_pending"]')).to_have_text("7")
    (info,) = await js.consumers_info("EVENTS")
    assert info.config.durable_name is None
    assert info.config.opt_start_seq == 4
    assert info.num_pending == 7
    await p.shot("ephemeral")

    # Delete message 5 from the messages page: gone from the stream, the others kept.
    await page.goto(server.monitor_url + "/#/messages/EVENTS")
    await expect(page.locator('[data-testid="messages"] [data-seq="5"]')).to_be_visible()
    await page.click('[data-testid="msg-delete-5"]')
    await page.click('[data-testid="confirm-yes"]')
    await expect(page.locator('[data-testid="messages"] [data-seq="5"]')).to_have_count(0)
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.get_msg("EVENTS", 5)
    assert (await js.get_msg("EVENTS", 6)).data == b"event 6"
    state = (await js.stream_info("EVENTS")).state
    assert (state.messages, state.first_seq, state.last_seq) == (9, 1, 10)
    # The ephemeral consumer no longer counts the deleted message.
    await page.goto(server.monitor_url + "/#/consumers/EVENTS")
    await expect(page.locator('[data-testid="consumers"] [data-field="num_pending"]')).to_have_text("6")
    p.assert_no_errors()


async def test_kv_put_delete_purge_and_history_from_the_page(server, connect, new_page):
    c = await connect(server)
    js = c.nc.jetstream()
    kv = await js.create_key_value(bucket="settings", history=10)
    await kv.put("theme", b"light")
    p = await new_page()
    page = p.page
    await page.goto(server.monitor_url + "/#/kv/settings")
    await expect(page.locator('[data-testid="kv-keys"] [data-key="theme"]')).to_contain_text("light")

    # Put from the page: the client reads what the page wrote.
    for value in ("dark", "solarized"):
        await page.fill('[data-testid="kv-key"]', "theme")
        await page.fill('[data-testid="kv-value"]', value)
        await page.click('[data-testid="kv-put"]')
        await expect(page.locator('[data-testid="kv-keys"] [data-key="theme"]')).to_contain_text(value)
    assert (await kv.get("theme")).value == b"solarized"
    await page.fill('[data-testid="kv-key"]', "lang")
    await page.fill('[data-testid="kv-value"]', "en")
    await page.click('[data-testid="kv-put"]')
    await expect(page.locator('[data-testid="kv-keys"] [data-key="lang"]')).to_contain_text("en")

    # History of theme: three revisions, oldest first.
    await page.click('[data-testid="kv-history-theme"]')
    hist = page.locator('[data-testid="kv-history"] tbody tr')
    await expect(hist).to_have_count(3)
    await expect(hist.nth(0)).to_contain_text("light")
    await expect(hist.nth(2)).to_contain_text("solarized")

    # Delete lang (a delete marker), purge theme (only the purge marker is left).
    await page.click('[data-testid="kv-delete-lang"]')
    await expect(page.locator('[data-testid="kv-keys"] [data-key="lang"]')).to_contain_text("del")
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get("lang")
    await page.click('[data-testid="kv-purge-theme"]')
    await expect(page.locator('[data-testid="kv-keys"] [data-key="theme"]')).to_contain_text("purge")
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get("theme")
    history = await kv.history("theme")
    assert [e.operation for e in history] == ["PURGE"]
    await p.shot("kv-actions")
    p.assert_no_errors()


async def test_object_download_matches_what_the_client_put(server, connect, new_page, tmp_path):
    c = await connect(server)
    js = c.nc.jetstream()
    obj = await js.create_object_store("assets")
    # Several chunks (nats-py's chunk size is 128 KiB) with a recognisable, non-repeating body.
    body = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(12_000))
    await obj.put("blob.bin", body)
    p = await new_page()
    page = p.page
    await page.goto(server.monitor_url + "/#/objects/assets")
    await expect(page.locator('[data-testid="objects"]')).to_contain_text("blob.bin")
    async with page.expect_download() as dl:
        await page.click('[data-testid="download-blob.bin"]')
    download = await dl.value
    assert download.suggested_filename == "blob.bin"
    path = tmp_path / "blob.bin"
    await download.save_as(str(path))
    got = path.read_bytes()
    assert len(got) == len(body)
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
    p.assert_no_errors()


async def test_consumers_of_a_stream_past_the_sampled_ones_are_shown(server, connect, new_page):
    """The shared sample lists consumers for the first 64 streams by name; the page of a later
    stream asks for its own."""
    c = await connect(server)
    js = c.nc.jetstream()
    for i in range(70):
        await js.add_stream(name=f"S{i:03}", subjects=[f"s.{i}"])
    await js.publish("s.69", b"x")
    await js.add_consumer("S069", durable_name="LATE", ack_policy="explicit")
    p = await new_page()
    page = p.page
    await page.goto(server.monitor_url + "/#/consumers/S069")
    late = page.locator('[data-consumer="LATE"]')
    await expect(late).to_be_visible(timeout=15_000)
    await expect(late.locator('[data-field="num_pending"]')).to_have_text("1")
    # The streams list shows them all.
    await page.goto(server.monitor_url + "/#/streams")
    await expect(page.locator("[data-stream]")).to_have_count(70, timeout=15_000)
    p.assert_no_errors()


async def test_advisories_feed_shows_stream_and_consumer_lifecycle(server, connect, new_page):
    p = await new_page()
    page = p.page
    await page.goto(server.monitor_url + "/#/advisories")
    await expect(page.locator('[data-testid="advisories"]')).to_be_visible()
    await page.wait_for_timeout(1500)  # the sampler subscribes to the advisories when it starts
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="ADV", subjects=["adv.>"])
    await js.add_consumer("ADV", durable_name="WATCHER", ack_policy="explicit")
    await js.delete_consumer("ADV", "WATCHER")
    await js.delete_stream("ADV")
    feed = page.locator('[data-testid="advisories"]')
    for subject in (
        "$JS.EVENT.ADVISORY.STREAM.CREATED.ADV",
        "$JS.EVENT.ADVISORY.CONSUMER.CREATED.ADV.WATCHER",
        "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ADV.WATCHER",
        "$JS.EVENT.ADVISORY.STREAM.DELETED.ADV",
    ):
        await expect(feed).to_contain_text(subject, timeout=10_000)
    await p.shot("advisories-lifecycle")
    p.assert_no_errors()
