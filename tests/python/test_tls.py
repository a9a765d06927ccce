"""Client TLS through nats-py: a TLS server with and without client certificates (``verify``).

Certificates are made at test time with the ``openssl`` command line (an EC P-256 CA, a server
certificate for 127.0.0.1 and a client certificate).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from support import settle

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _issue(dirpath: Path, name: str, ca: Path, ca_key: Path, subject: str, ext: str) -> tuple[Path, Path]:
    key, csr, cert = dirpath / f"{name}.key", dirpath / f"{name}.csr", dirpath / f"{name}.pem"
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(key), "-out", str(csr), "-subj", subject)
    extfile = dirpath / f"{name}.ext"
    extfile.write_text(ext)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(extfile))
    return cert, key


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    d = tmp_path / "certs"
    d.mkdir()
    ca, ca_key = d / "ca.pem", d / "ca.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=pytier test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    server, server_key = _issue(d, "server", ca, ca_key, "/CN=localhost",
                                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                "extendedKeyUsage=serverAuth\n")
    client, client_key = _issue(d, "client", ca, ca_key, "/CN=pyclient",
                                "extendedKeyUsage=clientAuth\n")
    return {"ca": ca, "server": server, "server_key": server_key,
            "client": client, "client_key": client_key}


def _tls_config(certs: dict[str, Path], extra: str = "") -> str:
    return f'tls {{\n  cert_file: "{certs["server"]}"\n  key_file: "{certs["server_key"]}"\n  {extra}\n}}\n'


def _context(certs: dict[str, Path], with_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs["ca"]))
    if with_client_cert:
        ctx.load_cert_chain(str(certs["client"]), str(certs["client_key"]))
    return ctx


async def _round_trip(nc, subject: str) -> None:
    sub = await nc.subscribe(subject)
    await settle(nc)
    await nc.publish(subject, b"over tls")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"over tls"


async def test_tls_without_client_certificates(server_factory, connect, certs):
    srv = server_factory(config=_tls_config(certs))
    conn = await connect(srv, servers=[f"tls://127.0.0.1:{srv.port}"],
                         tls=_context(certs, with_client_cert=False))
    await _round_trip(conn.nc, "py.tls")
    # A plaintext client cannot use a TLS-only server.
    with pytest.raises(Exception):
        await connect(srv, connect_timeout=2)


async def test_verify_needs_a_client_certificate_from_the_ca(server_factory, connect, certs):
    srv = server_factory(config=_tls_config(certs, f'ca_file: "{certs["ca"]}", verify: true'))
    conn = await connect(srv, servers=[f"tls://127.0.0.1:{srv.port}"],
                         tls=_context(certs, with_client_cert=True))
    await _round_trip(conn.nc, "py.verified")
    with pytest.raises(Exception):
        await connect(srv, servers=[f"tls://127.0.0.1:{srv.port}"],
                      tls=_context(certs, with_client_cert=False), connect_timeout=2)
