"""Bearer tokens, over plaintext (insecure_token) and TLS."""

from __future__ import annotations

import shutil
import subprocess

import pytest

import coordinator
from conftest import skip_unless_ci


def test_token_required(start_server, make_client, name: str) -> None:
    srv = start_server(env={"COORDINATOR_AUTH_TOKEN": "secret"})
    with pytest.raises(coordinator.Unauthenticated) as ei:
        make_client(srv.address).lock(name, wait=0)
    assert ei.value.code.name == "UNAUTHENTICATED"
    with pytest.raises(coordinator.Unauthenticated):
        make_client(srv.address, token="wrong", insecure_token=True).lock(name, wait=0)
    c = make_client(srv.address, token="secret", insecure_token=True)
    with c.lock(name, wait=0) as lease:
        # Renewals (operation stream or KeepAlive) carry the token too.
        first = lease.last_renewed
        from conftest import wait_until

        wait_until(lambda: lease.last_renewed > first, timeout=10, what="a renewal")
        assert not lease.lost.is_set()


def test_plaintext_token_needs_consent() -> None:
    with pytest.raises(ValueError):
        coordinator.Client("127.0.0.1:1", token="secret")


@pytest.fixture
def self_signed(tmp_path):
    if shutil.which("openssl") is None:
        skip_unless_ci("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    p = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        capture_output=True, text=True,
    )
    if p.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {p.stderr}")
    return cert, key


def test_tls_with_token(start_server, make_client, self_signed, name: str) -> None:
    cert, key = self_signed
    srv = start_server(env={"COORDINATOR_TLS_CERT": str(cert), "COORDINATOR_TLS_KEY": str(key),
                            "COORDINATOR_AUTH_TOKEN": "secret"}, tls_cert=cert)
    c = make_client(srv.address, token="secret", root_certificates=cert)
    with c.lock(name, wait=0) as lease:
        first = lease.last_renewed
        from conftest import wait_until

        wait_until(lambda: lease.last_renewed > first, timeout=10, what="a renewal over TLS")
        assert c.describe(name).lease.token == lease.token
    # By host name too, with the certificate's name.
    c2 = make_client(f"localhost:{srv.port}", token="secret", root_certificates=cert.read_bytes())
    assert not c2.describe(name).held
    with pytest.raises(coordinator.Unauthenticated):
        make_client(srv.address, root_certificates=cert).describe(name)
    with pytest.raises(coordinator.Unavailable):
        make_client(srv.address, timeout=3).describe(name)  # plaintext to a TLS port
