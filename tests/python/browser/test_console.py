"""The console in a real browser: the walkthrough people do, auth, and the console switch.

Run alone: ``JETRAFT_BIN=<target>/debug/jetraft .venv/bin/python -m pytest -q tests/python/browser``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import nats
import pytest
from playwright.async_api import expect

pytestmark = pytest.mark.timeout_s(150)


def cell(page, consumer: str, field: str):
    return page.locator(f'[data-consumer="{consumer}"] [data-field="{field}"]')


async def publish_from_page(page, subject: str, payload: str, headers: str = "") -> None:
    await page.fill('[data-testid="pub-subject"]', subject)
    await page.fill('[data-testid="pub-headers"]', headers)
    await page.fill('[data-testid="pub-payload"]', payload)
    await page.click('[data-testid="pub-send"]')


async def create_consumer(page, name: str, kind: str, ack: str, deliver: str = "") -> None:
    await page.click('[data-testid="new-consumer"]')
    form = page.locator('[data-testid="consumer-form"]')
    await form.locator('[name="name"]').fill(name)
    await form.locator('[name="kind"]').select_option(kind)
    await form.locator('[name="deliver_subject"]').fill(deliver)
    await form.locator('[name="ack_policy"]').select_option(ack)
    await page.click('[data-testid="consumer-create"]')
    await expect(page.locator(f'[data-consumer="{name}"]')).to_be_visible()
    await page.click('[data-testid="new-consumer"]')  # fold the form away again


async def test_walkthrough_orders_two_consumers_diverge_live(server, connect, new_page):
    p = await new_page()
    page = p.page
    base = server.monitor_url
    await page.goto(base + "/")
    await expect(page.locator('[data-testid="server-name"]')).to_contain_text(server.name)
    await expect(page.locator('[data-testid="connections"]')).to_be_visible()
    await p.shot("overview")

    # Create ORDERS on orders.> from the page.
    await page.click('nav a[data-page="streams"]')
    await page.click('[data-testid="new-stream"]')
    form = page.locator('[data-testid="stream-form"]')
    await form.locator('[name="name"]').fill("ORDERS")
    await form.locator('[name="subjects"]').fill("orders.>")
    await page.click('[data-testid="stream-create"]')
    await page.wait_for_url("**/#/stream/ORDERS")
    await expect(page.locator('[data-testid="raft"]')).to_be_visible()
    # Edit: a limit set from the page lands in the stream's configuration.
    await page.click('[data-testid="edit-stream"]')
    await page.locator('[data-testid="stream-form"] [name="max_msgs"]').fill("100000")
    await page.click('[data-testid="stream-save"]')
    await expect(page.locator("main")).to_contain_text("100000")

    # The API's own error text and code are shown: the same name with other subjects.
    await page.click('nav a[data-page="streams"]')
    await page.click('[data-testid="new-stream"]')
    await form.locator('[name="name"]').fill("ORDERS")
    await form.locator('[name="subjects"]').fill("other.>")
    await page.click('[data-testid="stream-create"]')
    await expect(page.locator('[data-testid="error"]')).to_contain_text("err_code 10058")
    await expect(page.locator('[data-stream="ORDERS"]')).to_be_visible()
    await p.shot("streams")

    # Publish 3 from the page: captured by ORDERS, PubAck shown.
    await page.click('nav a[data-page="pubsub"]')
    for i in range(1, 4):
        await publish_from_page(page, "orders.page", json.dumps({"n": i}), "X-Source: console")
        await expect(page.locator('[data-testid="captured"]')).to_contain_text("ORDERS")
        await expect(page.locator('[data-testid="reply"]')).to_contain_text(f'"seq": {i}')
    # A subject no stream captures is core-only.
    await publish_from_page(page, "nobody.listens", "x")
    await expect(page.locator('[data-testid="core-only"]')).to_be_visible()
    # Watch a wildcard subscription live while a real client publishes 100.
    await page.fill('[data-testid="sub-subject"]', "orders.client.*")
    await page.click('[data-testid="sub-start"]')
    await page.wait_for_timeout(300)
    c = await connect(server)
    js = c.nc.jetstream()
    for i in range(100):
        await js.publish(f"orders.client.{i % 5}", f"client {i}".encode())
    await expect(page.locator('[data-testid="sub-msg"]').first).to_contain_text("orders.client.")
    # Every message is either shown or counted as skipped by the rate bound (100 per second).
    await page.wait_for_function(
        "() => { const s = document.querySelector('[data-testid=\"sub-state\"]');"
        " return s && Number(s.dataset.shown) + Number(s.dataset.skipped) === 100; }",
        timeout=15_000,
    )
    shown = int(await page.get_attribute('[data-testid="sub-state"]', "data-shown"))
    assert 1 <= shown <= 100
    assert await page.locator('[data-testid="sub-msg"]').count() == shown
    await p.shot("pubsub")

    # A push consumer (someone listens on its deliver subject) and a pull consumer, from the page.
    delivered = []

    async def on_push(msg):
        delivered.append(msg)

    await c.nc.subscribe("deliver.orders", cb=on_push)
    await c.nc.flush()
    await page.goto(base + "/#/consumers/ORDERS")
    await create_consumer(page, "PUSH", "push", "none", "deliver.orders")
    await create_consumer(page, "PULL", "pull", "explicit")

    # Ack 40 of the pull consumer from the client.
    psub = await js.pull_subscribe_bind("PULL", stream="ORDERS")
    acked = 0
    while acked < 40:
        for m in await psub.fetch(40 - acked, timeout=5):
            await m.ack()
            acked += 1
    await c.nc.flush()

    # The page shows the positions diverge, without a reload.
    await expect(cell(page, "PUSH", "delivered_stream")).to_have_text("103", timeout=15_000)
    await expect(cell(page, "PUSH", "num_pending")).to_have_text("0")
    await expect(cell(page, "PULL", "delivered_stream")).to_have_text("40")
    await expect(cell(page, "PULL", "ack_floor_stream")).to_have_text("40", timeout=15_000)
    await expect(cell(page, "PULL", "num_pending")).to_have_text("63")
    await expect(cell(page, "PULL", "num_ack_pending")).to_have_text("0")
    await expect(page.locator('[data-testid="mark-PUSH"]')).to_have_attribute("data-seq", "103")
    await expect(page.locator('[data-testid="mark-PULL"]')).to_have_attribute("data-seq", "40")
    await p.shot("consumers")

    # Publish more: both update.
    for i in range(20):
        await js.publish("orders.more", f"more {i}".encode())
    await expect(cell(page, "PUSH", "delivered_stream")).to_have_text("123", timeout=15_000)
    await expect(cell(page, "PULL", "num_pending")).to_have_text("83", timeout=15_000)
    await expect(cell(page, "PULL", "ack_floor_stream")).to_have_text("40")
    await expect(page.locator('[data-testid="mark-PUSH"]')).to_have_attribute("data-seq", "123")
    await p.shot("consumers-after-more")

    # The overview counts the client's connection and the stream, and charts the traffic.
    await page.click('nav a[data-page="overview"]')
    await expect(page.locator('[data-testid="connections"]')).to_contain_text("1")
    await expect(page.locator('[data-testid="js-streams"]')).to_contain_text("1")
    await expect(page.locator("svg.chart polyline.in")).to_have_count(1)
    await p.shot("overview-busy")

    # Browse the messages: the page's three first, with their header; paging forward.
    await page.goto(base + "/#/messages/ORDERS")
    first = page.locator('[data-testid="messages"] [data-seq="1"]')
    await expect(first).to_contain_text("orders.page")
    await expect(first).to_contain_text("X-Source: console")
    await expect(page.locator('[data-testid="messages"] .card')).to_have_count(20)
    await page.click('[data-testid="msg-next"]')
    await expect(page.locator('[data-testid="messages"] [data-seq="21"]')).to_be_visible()
    await page.fill('[data-testid="msg-subject"]', "orders.more")
    await page.fill('[data-testid="msg-start"]', "1")
    await page.click('[data-testid="msg-go"]')
    await expect(page.locator('[data-testid="messages"] [data-seq="104"]')).to_be_visible()
    await page.select_option('[data-testid="msg-mode"]', "hex")
    await p.shot("messages")
    # Live tail: a new message shows up on its own.
    await page.fill('[data-testid="msg-subject"]', "")
    await page.check('[data-testid="msg-follow"]')
    await js.publish("orders.tail", b"tail")
    await expect(page.locator('[data-testid="messages"] [data-seq="124"]')).to_be_visible(timeout=10_000)

    # Advisories: a message naked on a consumer with max_deliver 1 is dead-lettered; the feed
    # shows the server's advisories live.
    await page.click('nav a[data-page="advisories"]')
    await js.add_consumer("ORDERS", durable_name="DLQ", ack_policy="explicit", max_deliver=1)
    dlq = await js.pull_subscribe_bind("DLQ", stream="ORDERS")
    (m,) = await dlq.fetch(1, timeout=5)
    await m.nak()
    await expect(page.locator('[data-testid="advisories"]')).to_contain_text(
        "$JS.EVENT.ADVISORY.CONSUMER.", timeout=10_000)
    await expect(page.locator('[data-testid="advisories"]')).to_contain_text("DLQ")
    await js.delete_consumer("ORDERS", "DLQ")
    await p.shot("advisories")

    # Object store: an object put by the client is listed with its size and digest.
    obj = await js.create_object_store("files")
    await obj.put("hello.txt", b"hello world")
    await page.goto(base + "/#/objects/files")
    await expect(page.locator('[data-testid="objects"]')).to_contain_text("hello.txt")
    await expect(page.locator('[data-testid="objects"]')).to_contain_text("SHA-256=")
    await p.shot("objects")
    await js.delete_object_store("files")

    # Key/value: a bucket made by the client shows its key, revision and value.
    kv = await js.create_key_value(bucket="cfg")
    await kv.put("color", b"blue")
    await kv.put("color", b"green")
    await page.goto(base + "/#/kv/cfg")
    await expect(page.locator('[data-testid="kv-keys"]')).to_contain_text("green")
    await kv.put("size", b"XL")  # watched: shows up without a reload
    await expect(page.locator('[data-testid="kv-keys"]')).to_contain_text("XL", timeout=10_000)
    await p.shot("kv")
    await js.delete_key_value("cfg")

    # Pause and resume the pull consumer.
    await page.goto(base + "/#/consumers/ORDERS")
    await page.click('[data-testid="pause-PULL"]')
    await expect(page.locator('[data-consumer="PULL"]')).to_contain_text("paused", timeout=10_000)
    await page.click('[data-testid="pause-PULL"]')
    await expect(page.locator('[data-consumer="PULL"]')).to_contain_text("active", timeout=10_000)

    # Delete the pull consumer, then the stream, each after a confirmation.
    await page.click('[data-testid="delete-PULL"]')
    await page.click('[data-testid="confirm-yes"]')
    await expect(page.locator('[data-consumer="PULL"]')).to_have_count(0, timeout=10_000)
    await page.goto(base + "/#/stream/ORDERS")
    await page.click('[data-testid="delete-stream"]')
    await page.click('[data-testid="confirm-yes"]')
    await page.wait_for_url("**/#/streams")
    await expect(page.locator('[data-stream="ORDERS"]')).to_have_count(0, timeout=10_000)
    streams = await js.streams_info()
    assert [st.config.name for st in streams] == []
    p.assert_no_errors()


async def test_many_tabs_share_one_sampler(server):
    """Ten open live streams cost the server one sample a second, not ten."""
    import asyncio

    base = server.monitor_url

    def api_total() -> int:
        return server.http_get_json("/jsz")["api"]["total"]

    async def listen(stop: asyncio.Event) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"GET /console/api/events HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        events = 0
        while not stop.is_set():
            try:
                line = await asyncio.wait_for(reader.readline(), 0.2)
            except asyncio.TimeoutError:
                continue
            if line.startswith(b"event: snapshot"):
                events += 1
        writer.close()
        return events

    stop = asyncio.Event()
    tabs = [asyncio.ensure_future(listen(stop)) for _ in range(10)]
    await asyncio.sleep(1.5)
    before = await asyncio.to_thread(api_total)
    await asyncio.sleep(4)
    after = await asyncio.to_thread(api_total)
    stop.set()
    events = await asyncio.gather(*tabs)
    # One STREAM.LIST per sample (no streams): about 4 in 4 s, where one sampler per tab would
    # make 40; every tab still got its updates, at most about one per second.
    assert after - before <= 8, (before, after)
    assert all(2 <= e <= 8 for e in events), events
    assert base


def _post(url: str, body: dict, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    for k, v in headers.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


AUTH_CONFIG = """
authorization {
  users = [
    {user: admin, password: secret}
    {user: app, password: apppw, permissions: {publish: {allow: ["orders.>"]}, subscribe: {allow: ["orders.>", "_INBOX.>"]}}}
  ]
}
"""


async def test_auth_login_required_and_permissions_apply(server_factory, new_page):
    srv = server_factory(config=AUTH_CONFIG)
    base = srv.monitor_url
    # No data without logging in; state-changing calls need the CSRF header.
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/console/api/events", timeout=5)
    assert err.value.code == 401
    status, body = _post(base + "/console/api/js", {"api": "STREAM.LIST"}, {})
    assert status == 403 and "cross-site" in body["error"]["description"]
    status, _ = _post(base + "/console/api/js", {"api": "STREAM.LIST"}, {"X-Jetraft-Console": "1"})
    assert status == 401
    status, _ = _post(base + "/console/api/login", {"user": "admin", "password": "secret"},
                      {"X-Jetraft-Console": "1", "Origin": "http://evil.example"})
    assert status == 403

    p = await new_page("app")
    page = p.page
    await page.goto(base + "/")
    await expect(page.locator('[data-testid="login"]')).to_be_visible()
    await page.fill('[name="user"]', "app")
    await page.fill('[name="password"]', "wrong")
    await page.click('[data-testid="login"] button')
    await expect(page.locator('[data-testid="error"]')).to_contain_text("Authorization Violation")
    await page.fill('[name="password"]', "apppw")
    await page.click('[data-testid="login"] button')
    await expect(page.locator('[data-testid="logout"]')).to_be_visible()
    # A user without $JS.API rights sees permission errors, not data.
    await expect(page.locator("main")).to_contain_text("may not use the JetStream API")
    await page.click('nav a[data-page="streams"]')
    await page.click('[data-testid="new-stream"]')
    await page.locator('[data-testid="stream-form"] [name="name"]').fill("X")
    await page.click('[data-testid="stream-create"]')
    await expect(page.locator('[data-testid="error"]')).to_contain_text(
        'Permissions Violation for Publish to "$JS.API.STREAM.CREATE.X"')
    # Core publishes follow the same permissions.
    await page.click('nav a[data-page="pubsub"]')
    await publish_from_page(page, "secret.x", "no")
    await expect(page.locator('[data-testid="error"]')).to_contain_text(
        'Permissions Violation for Publish to "secret.x"')
    await publish_from_page(page, "orders.1", "yes")
    await expect(page.locator('[data-testid="pub-result"]')).to_contain_text("Delivered to 0 subscriber(s)")
    await p.shot("denied")
    p.assert_no_errors(allow=("status of 401", "status of 403"))

    # The admin sees everything.
    a = await new_page("admin")
    await a.page.goto(base + "/")
    await a.page.fill('[name="user"]', "admin")
    await a.page.fill('[name="password"]', "secret")
    await a.page.click('[data-testid="login"] button')
    await expect(a.page.locator('[data-testid="js-streams"]')).to_be_visible()
    a.assert_no_errors()


async def test_console_can_be_turned_off(server_factory):
    srv = server_factory(extra_args=("--no_console",))
    with urllib.request.urlopen(srv.monitor_url + "/", timeout=5) as resp:
        assert b"/varz" in resp.read()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(srv.monitor_url + "/console/api/session", timeout=5)
    assert err.value.code == 404
    with urllib.request.urlopen(srv.monitor_url + "/monitor", timeout=5) as resp:
        assert b"/varz" in resp.read()


DENY_CONFIG = """
authorization {
  users = [
    {user: admin, password: secret}
    {user: watcher, password: w, permissions: {subscribe: {allow: ["orders.>"], deny: ["orders.secret"]}}}
  ]
}
"""


def _sse_subjects(url: str, cookie: str, want: int, timeout: float) -> list[str]:
    """Reads the subscribe event stream until `want` messages arrived (or `timeout`)."""
    import http.client
    import time
    from urllib.parse import urlparse

    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("GET", u.path + "?" + u.query, headers={"Cookie": cookie})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    subjects: list[str] = []
    deadline = time.monotonic() + timeout
    while len(subjects) < want and time.monotonic() < deadline:
        line = resp.fp.readline().decode()
        if line.startswith("data:"):
            subjects += [m["subject"] for m in json.loads(line[5:])["msgs"]]
    conn.close()
    return subjects


async def test_a_subject_denied_inside_an_allowed_wildcard_is_not_shown(server_factory):
    srv = server_factory(config=DENY_CONFIG)
    base = srv.monitor_url
    req = urllib.request.Request(base + "/console/api/login",
                                 data=json.dumps({"user": "watcher", "password": "w"}).encode(),
                                 method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("X-Jetraft-Console", "1")
    with urllib.request.urlopen(req, timeout=5) as resp:
        cookie = resp.headers["Set-Cookie"].split(";")[0]
    import asyncio
    import threading

    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(
        _sse_subjects(base + "/console/api/subscribe?subject=orders.%3E", cookie, 2, 10)))
    reader.start()
    await asyncio.sleep(1.0)
    nc = await nats.connect(srv.url, user="admin", password="secret")
    for subject in ("orders.secret", "orders.a", "orders.secret", "orders.b"):
        await nc.publish(subject, b"x")
    await nc.flush()
    await asyncio.get_running_loop().run_in_executor(None, reader.join)
    await nc.close()
    assert got == ["orders.a", "orders.b"], got
