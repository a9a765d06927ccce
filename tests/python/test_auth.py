"""Authentication (user/password, token, bcrypt) and subject permissions, seen through nats-py."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.errors import Error as NatsError

from support import RawClient, settle, wait_until

BCRYPT_PASSWORD = "bcrypt-pass-123"
# Known hashes of BCRYPT_PASSWORD (cost 10), checked against nats-server 2.15.1. The `$2a$` form is
# what `nats server passwd` produces; `$2b$` is what current bcrypt libraries produce.
BCRYPT_HASH_2A = "$2a$10$4tj1pYPOvJ2HSBcprOq8bOLYR2YzoZOglvnv.pSkQ9D8u5Ds.TomW"
BCRYPT_HASH_2B = "$2b$10$5IbQoOhllXNcIQIePmwwSuNxqA3z68apnt6g5WoNqVX9FvQHHya6a"


def fresh_bcrypt_hash(password: str) -> str:
    """A freshly salted hash from the ``bcrypt`` package if installed, else the known `$2b$` one."""
    try:
        import bcrypt
    except ImportError:
        return BCRYPT_HASH_2B
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()


async def assert_connect_rejected(connect, srv, **kwargs) -> None:
    """Connecting must fail with an authorization error (reported either way nats-py does)."""
    errors: list[Exception] = []

    async def error_cb(exc: Exception) -> None:
        errors.append(exc)

    with pytest.raises((NatsError, OSError, asyncio.TimeoutError)) as info:
        await connect(srv, error_cb=error_cb, **kwargs)
    seen = [info.value, *errors]
    assert any(
        isinstance(e, nats.errors.AuthorizationError) or "authorization" in str(e).lower()
        for e in seen
    ), f"expected an authorization error, got {seen!r}"


async def assert_pub_sub_works(conn) -> None:
    sub = await conn.nc.subscribe("auth.check")
    await settle(conn.nc)
    await conn.nc.publish("auth.check", b"ok")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"ok"


async def assert_info_requires_auth(srv) -> None:
    """The INFO a server sends on connect advertises ``auth_required``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    try:
        line = await asyncio.wait_for(reader.readline(), 5)
        assert line.startswith(b"INFO ")
        assert json.loads(line[5:]).get("auth_required") is True
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------
# user / password


async def test_user_password_success(server_factory, connect):
    srv = server_factory(["--user", "alice", "--pass", "s3cret"])
    await assert_info_requires_auth(srv)
    c = await connect(srv, user="alice", password="s3cret")
    await assert_pub_sub_works(c)
    # Credentials embedded in the URL work the same.
    c2 = await connect(srv, servers=[f"nats://alice:s3cret@127.0.0.1:{srv.port}"])
    await assert_pub_sub_works(c2)


async def test_user_password_failure(server_factory, connect):
    srv = server_factory(["--user", "alice", "--pass", "s3cret"])
    await assert_connect_rejected(connect, srv, user="alice", password="wrong")
    await assert_connect_rejected(connect, srv, user="mallory", password="s3cret")
    await assert_connect_rejected(connect, srv)  # no credentials at all


async def test_user_password_failure_raw_protocol(server_factory):
    """The server answers a bad CONNECT with -ERR 'Authorization Violation' and closes."""
    srv = server_factory(["--user", "alice", "--pass", "s3cret"])
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    try:
        assert (await reader.readline()).startswith(b"INFO ")
        writer.write(b'CONNECT {"verbose":false,"user":"alice","pass":"nope"}\r\nPING\r\n')
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 5)
        assert line.startswith(b"-ERR ") and b"authorization violation" in line.lower(), line
        assert await asyncio.wait_for(reader.read(), 5) == b""
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------
# token


async def test_token_success(server_factory, connect):
    srv = server_factory(["--auth", "t0ken-abc"])
    await assert_info_requires_auth(srv)
    c = await connect(srv, token="t0ken-abc")
    await assert_pub_sub_works(c)


async def test_token_failure(server_factory, connect):
    srv = server_factory(["--auth", "t0ken-abc"])
    await assert_connect_rejected(connect, srv, token="t0ken-abd")
    await assert_connect_rejected(connect, srv)


# ---------------------------------------------------------------------------------------------
# bcrypt


@pytest.mark.parametrize(
    "hash_kind", ["known-2a", "fresh"], ids=["known_2a_hash", "fresh_hash"]
)
async def test_bcrypt_password(server_factory, connect, hash_kind):
    hashed = BCRYPT_HASH_2A if hash_kind == "known-2a" else fresh_bcrypt_hash(BCRYPT_PASSWORD)
    conf = f'authorization {{\n  user: bob\n  password: "{hashed}"\n}}\n'
    srv = server_factory(config=conf)
    c = await connect(srv, user="bob", password=BCRYPT_PASSWORD)
    await assert_pub_sub_works(c)
    await assert_connect_rejected(connect, srv, user="bob", password=BCRYPT_PASSWORD + "x")
    # The hash itself is not a password.
    await assert_connect_rejected(connect, srv, user="bob", password=hashed)


# ---------------------------------------------------------------------------------------------
# permissions

PERMISSIONS_CONF = """
authorization {
  users: [
    { user: admin, password: adminpw }
    {
      user: alice
      password: alicepw
      permissions: {
        publish: { allow: ["public.>", "_INBOX.>"], deny: ["public.secret"] }
        subscribe: { allow: [">"], deny: ["secret.>"] }
      }
    }
  ]
}
"""


def permission_errors(conn) -> list[str]:
    return [str(e).lower() for e in conn.errors if "permissions violation" in str(e).lower()]


async def test_publish_permission_denied(server_factory, connect):
    srv = server_factory(config=PERMISSIONS_CONF)
    admin = await connect(srv, user="admin", password="adminpw")
    alice = await connect(srv, user="alice", password="alicepw")
    watch = await admin.nc.subscribe(">")
    await settle(admin.nc)

    await alice.nc.publish("forbidden.x", b"no")
    await wait_until(lambda: len(permission_errors(alice)) >= 1, what="publish violation")
    assert 'publish to "forbidden.x"' in permission_errors(alice)[0]

    await alice.nc.publish("public.secret", b"no")  # denied inside an allowed wildcard
    await wait_until(lambda: len(permission_errors(alice)) >= 2, what="second violation")
    assert 'publish to "public.secret"' in permission_errors(alice)[1]

    # The connection survives the violations and allowed subjects still work.
    await alice.nc.publish("public.ok", b"yes")
    await settle(alice.nc)
    await settle(admin.nc)
    assert alice.nc.is_connected
    msg = await watch.next_msg(timeout=2)
    assert (msg.subject, msg.data) == ("public.ok", b"yes")
    assert watch.pending_msgs == 0, "a denied publish was delivered"


async def test_subscribe_permission_denied(server_factory, connect):
    srv = server_factory(config=PERMISSIONS_CONF)
    admin = await connect(srv, user="admin", password="adminpw")
    alice = await connect(srv, user="alice", password="alicepw")

    denied = await alice.nc.subscribe("secret.plans")
    await wait_until(lambda: len(permission_errors(alice)) >= 1, what="subscribe violation")
    assert 'subscription to "secret.plans"' in permission_errors(alice)[0]

    allowed = await alice.nc.subscribe("public.feed")
    await settle(alice.nc)
    await admin.nc.publish("secret.plans", b"classified")
    await admin.nc.publish("public.feed", b"news")
    await settle(admin.nc)
    await settle(alice.nc)

    assert (await allowed.next_msg(timeout=2)).data == b"news"
    assert denied.pending_msgs == 0, "message delivered on a denied subscription"
    assert alice.nc.is_connected


async def test_wildcard_subscription_filters_denied_subjects(server_factory, connect):
    """A permitted wildcard that overlaps a subscribe deny does not deliver denied subjects."""
    srv = server_factory(config=PERMISSIONS_CONF)
    admin = await connect(srv, user="admin", password="adminpw")
    alice = await connect(srv, user="alice", password="alicepw")
    everything = await alice.nc.subscribe(">")
    await settle(alice.nc)

    await admin.nc.publish("secret.x", b"hidden")
    await admin.nc.publish("news.y", b"visible")
    await settle(admin.nc)
    await settle(alice.nc)

    msg = await everything.next_msg(timeout=2)
    assert (msg.subject, msg.data) == ("news.y", b"visible")
    assert everything.pending_msgs == 0
    assert not permission_errors(alice)


async def test_permission_violation_wire_format(server_factory):
    """Raw protocol: the exact -ERR lines, and the connection stays open afterwards."""
    srv = server_factory(config=PERMISSIONS_CONF)
    raw = await RawClient.connect("127.0.0.1", srv.port, user="alice", **{"pass": "alicepw"})
    try:
        await raw.send(b"PUB forbidden.x 2\r\nno\r\n")
        assert await raw.read_line() == b"-ERR 'Permissions Violation for Publish to \"forbidden.x\"'"
        await raw.send(b"SUB secret.plans 1\r\n")
        assert (
            await raw.read_line()
            == b"-ERR 'Permissions Violation for Subscription to \"secret.plans\"'"
        )
        await raw.ping()  # still connected
    finally:
        await raw.close()
