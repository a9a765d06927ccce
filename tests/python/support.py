"""Test helpers: ``wait_until`` and a minimal raw NATS protocol client (``RawClient``).

The raw client asserts server behaviour byte-for-byte.

nats-py hides some server behaviour (it also enforces auto-unsubscribe limits client-side and
its header API is a ``dict``, so repeated header names cannot be expressed). These tests speak
the wire protocol directly for those cases.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Callable, Optional

import pytest


@dataclass
class RawMsg:
    """One ``MSG``/``HMSG`` delivery."""

    subject: str
    sid: str
    reply: Optional[str]
    headers: Optional[bytes]  # the raw header block, including ``NATS/1.0`` and the final CRLF
    payload: bytes


class RawClient:
    """A line-oriented client: send raw protocol text, read control lines and messages."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, info: dict):
        self.reader = reader
        self.writer = writer
        self.info = info

    @classmethod
    async def connect(cls, host: str, port: int, **connect_opts) -> "RawClient":
        """Open a connection, read INFO, send CONNECT (+ PING) and wait for the PONG."""
        reader, writer = await asyncio.open_connection(host, port)
        line = await reader.readline()
        if not line.startswith(b"INFO "):
            raise AssertionError(f"expected INFO, got {line!r}")
        info = json.loads(line[5:])
        opts = {
            "verbose": False,
            "pedantic": False,
            "headers": True,
            "no_responders": True,
            "protocol": 1,
            "lang": "python-raw",
            "version": "0",
        }
        opts.update(connect_opts)
        client = cls(reader, writer, info)
        await client.send(f"CONNECT {json.dumps(opts)}\r\n".encode())
        await client.ping()
        return client

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_line(self) -> bytes:
        """The next control line without its CRLF.

        Server PINGs are answered and asynchronous INFO updates (which servers may send at any
        time, e.g. right after CONNECT) are recorded in ``self.info``; neither is returned.
        """
        while True:
            line = await self.reader.readline()
            if not line:
                raise ConnectionError("server closed the connection")
            if not line.endswith(b"\r\n"):
                raise AssertionError(f"control line without CRLF: {line!r}")
            line = line[:-2]
            if line == b"PING":
                await self.send(b"PONG\r\n")
                continue
            if line.startswith(b"INFO "):
                self.info = json.loads(line[5:])
                continue
            return line

    async def ping(self) -> None:
        """PING and wait for the PONG; fails on anything else in between."""
        await self.send(b"PING\r\n")
        line = await self.read_line()
        if line != b"PONG":
            raise AssertionError(f"expected PONG, got {line!r}")

    async def read_until_pong(self) -> tuple[list[RawMsg], list[bytes]]:
        """Send PING; collect messages and other control lines until the PONG."""
        await self.send(b"PING\r\n")
        msgs: list[RawMsg] = []
        other: list[bytes] = []
        while True:
            line = await self.read_line()
            if line == b"PONG":
                return msgs, other
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                msgs.append(await self._read_msg(line))
            else:
                other.append(line)

    async def _read_msg(self, line: bytes) -> RawMsg:
        parts = line.decode().split(" ")
        if parts[0] == "MSG":
            # MSG <subject> <sid> [reply] <size>
            subject, sid = parts[1], parts[2]
            reply = parts[3] if len(parts) == 5 else None
            hdr_len, total = 0, int(parts[-1])
        else:
            # HMSG <subject> <sid> [reply] <hdr size> <total size>
            subject, sid = parts[1], parts[2]
            reply = parts[3] if len(parts) == 6 else None
            hdr_len, total = int(parts[-2]), int(parts[-1])
        body = await self.reader.readexactly(total + 2)
        if body[-2:] != b"\r\n":
            raise AssertionError(f"message body not followed by CRLF: {body[-8:]!r}")
        body = body[:-2]
        headers = body[:hdr_len] if parts[0] == "HMSG" else None
        return RawMsg(subject, sid, reply, headers, body[hdr_len:])

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    """Poll ``predicate`` on the event loop until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what or predicate}")
        await asyncio.sleep(0.01)


async def settle(nc) -> None:
    """Flush a nats-py connection so that everything it sent before has reached the server.

    nats-py 2.16 writes the flush PING straight to the socket, ahead of commands still in its
    own pending buffer (SUB, PUB, ...), so one ``flush()`` does not order those. The buffer is
    written while the first PONG is awaited; the second PING therefore follows them, and the
    server answers it only after processing them.
    """
    await nc.flush(timeout=5)
    await nc.flush(timeout=5)
