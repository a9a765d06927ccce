"""nats-server 2.12 stream config features through nats-py 2.16, as nats.py's own suite
(``nats/tests/test_js.py``: ``test_stream_allow_msg_schedules``, ``test_stream_allow_atomic``,
``test_stream_mirror_removal``, ``test_stream_persist_mode``) checks them; those tests skip
themselves on a server older than 2.12. Ran against nats-server 2.15.1 first."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.js import api


async def test_server_reports_2_12(server, connect):
    c = await connect(server)
    v = c.nc.connected_server_version
    assert (v.major, v.minor) >= (2, 12)


@pytest.mark.parametrize("flag", ["allow_msg_schedules", "allow_atomic"])
async def test_flag_is_stored_and_defaults_off(server, connect, flag):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="ON", subjects=["on"], **{flag: True})
    assert getattr((await js.stream_info("ON")).config, flag) is True
    await js.add_stream(name="OFF", subjects=["off"], **{flag: False})
    assert getattr((await js.stream_info("OFF")).config, flag) is not True
    await js.add_stream(name="UNSET", subjects=["unset"])
    assert getattr((await js.stream_info("UNSET")).config, flag) is not True


async def test_mirror_removal_promotes_the_mirror(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(name="SOURCE", subjects=["source.>"])
    for i in range(5):
        await js.publish(f"source.{i}", f"message-{i}".encode())
    await js.add_stream(name="MIRROR", mirror=api.StreamSource(name="SOURCE"))
    deadline = time.monotonic() + 10
    while (sinfo := await js.stream_info("MIRROR")).state.messages < 5:
        assert time.monotonic() < deadline, "mirror did not copy"
        await asyncio.sleep(0.05)
    assert sinfo.config.mirror.name == "SOURCE"
    sinfo = await js.update_stream(config=sinfo.config.evolve(mirror=None))
    assert sinfo.config.mirror is None
    assert sinfo.state.messages == 5


async def test_persist_mode(server, connect):
    c = await connect(server)
    js = c.nc.jetstream()
    await js.add_stream(
        name="ASYNC", subjects=["a"], num_replicas=1, persist_mode=api.PersistMode.ASYNC
    )
    assert (await js.stream_info("ASYNC")).config.persist_mode == api.PersistMode.ASYNC
    await js.add_stream(
        name="DEF", subjects=["d"], num_replicas=1, persist_mode=api.PersistMode.DEFAULT
    )
    assert (await js.stream_info("DEF")).config.persist_mode in [None, api.PersistMode.DEFAULT]
