"""Credentials against a Tenure with TLS, optional mTLS, bearer tokens and
grants: static and refreshed tokens, a CA, a client certificate, per-call
metadata, typed UNAUTHENTICATED / PERMISSION_DENIED, and the fallback to
renewals when the shared loss watch is refused. Also the revoke-to-loss
measurement on a plain server."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import WAIT
from tenure_client import LossCause, Reason, TenureClient, TenureError
from tenure_server import TenureServer

WORKER_TOKEN = "worker-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789ab"
GRANTS = """
[[grant]]
identity = "worker"
prefixes = [""]
actions = ["acquire", "renew", "release"]

[[grant]]
identity = "admin"
prefixes = [""]
actions = ["*"]

[[grant]]
identity = "mtls-client"
prefixes = [""]
actions = ["*"]
"""


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _pki(d: Path) -> dict[str, Path]:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client
    certificate with CN mtls-client (openssl, EC P-256)."""
    p = {k: d / f"{k}.pem" for k in ("ca", "ca_key", "server", "server_key", "client", "client_key")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(p["ca_key"]), "-out", str(p["ca"]),
             "-days", "1", "-subj", "/CN=tenure test CA")
    for leaf, cn, ext in (
        ("server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
        ("client", "mtls-client", "subjectAltName=DNS:mtls-client\nextendedKeyUsage=clientAuth"),
    ):
        csr, extfile = d / f"{leaf}.csr", d / f"{leaf}.ext"
        extfile.write_text(ext + "\n")
        _openssl("req", "-new", *ec, "-keyout", str(p[f"{leaf}_key"]), "-out", str(csr), "-subj", f"/CN={cn}")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(p["ca"]), "-CAkey", str(p["ca_key"]),
                 "-CAcreateserial", "-out", str(p[leaf]), "-days", "1", "-extfile", str(extfile))
    return p


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TenureServer, dict[str, Path]]]:
    d = tmp_path_factory.mktemp("pki")
    p = _pki(d)
    tokens = d / "tokens"
    tokens.write_text(f"worker {WORKER_TOKEN}\nadmin {ADMIN_TOKEN}\n")
    config = d / "tenure.toml"
    config.write_text(GRANTS)
    srv = TenureServer(
        extra_args=(
            "--config", str(config), "--auth-tokens", str(tokens),
            "--tls-cert", str(p["server"]), "--tls-key", str(p["server_key"]),
            "--tls-client-ca", str(p["ca"]), "--tls-client-cert-optional",
        ),
        ca=p["ca"].read_bytes(),
    ).start()
    try:
        yield srv, p
    finally:
        srv.cleanup()


async def test_no_or_wrong_token_is_unauthenticated(secured) -> None:
    srv, p = secured
    async with TenureClient(srv.target, ca=str(p["ca"])) as client:
        with pytest.raises(TenureError) as info:
            await client.acquire("secure.none", "nobody", ttl=2)
        err = info.value
        assert err.reason is Reason.UNAUTHENTICATED and not err.retryable
        assert str(err).startswith(f"tenure at {srv.target}: Acquire: UNAUTHENTICATED (UNAUTHENTICATED): ")
    async with TenureClient(srv.target, ca=p["ca"].read_bytes(), token="not-a-valid-token-at-all") as client:
        with pytest.raises(TenureError) as info:
            await client.get("secure.x")
        assert info.value.reason is Reason.UNAUTHENTICATED


async def test_token_without_grant_is_permission_denied(secured) -> None:
    srv, p = secured
    async with TenureClient(srv.target, ca=str(p["ca"]), token=WORKER_TOKEN) as client:
        with pytest.raises(TenureError) as info:
            await client.list_leases()
        assert info.value.reason is Reason.PERMISSION_DENIED
        assert "ListLeases: PERMISSION_DENIED" in str(info.value)


async def test_token_callback_metadata_and_admin_helpers(secured) -> None:
    srv, p = secured
    calls = []

    def fresh() -> str:
        calls.append(1)
        return ADMIN_TOKEN

    async with TenureClient(srv.target, ca=str(p["ca"]), token=fresh, metadata={"x-tenant": "blue"}) as client:
        session = await client.acquire("secure.admin", "admin-1", ttl=5)
        leases = await client.list_leases("secure.")
        assert [lease.fencing_token for lease in leases] == [session.fencing_token]
        assert (await client.get_lease("secure.admin")).holder == "admin-1"
        assert await session.release() is True
        assert len(calls) >= 4  # once per call


async def test_mtls_client_certificate(secured) -> None:
    srv, p = secured
    async with TenureClient(
        srv.target, ca=str(p["ca"]), client_cert=str(p["client"]), client_key=str(p["client_key"])
    ) as client:
        session = await client.acquire("secure.mtls", "mtls-1", ttl=5)
        assert await session.release() is True


async def test_watch_refused_falls_back_to_renewals(secured) -> None:
    srv, p = secured
    async with TenureClient(srv.target, ca=str(p["ca"]), token=WORKER_TOKEN) as worker, \
            TenureClient(srv.target, ca=str(p["ca"]), token=ADMIN_TOKEN) as admin:
        session = await worker.acquire("secure.fallback", "worker-1", ttl=3)
        await admin.revoke_lease("secure.fallback", "test", fencing_token=session.fencing_token)
        await asyncio.wait_for(session.lost.wait(), WAIT)
        assert session.lost_cause is LossCause.NOT_HELD
        assert session.lost_error is not None and session.lost_error.reason is Reason.LEASE_NOT_HELD
        assert worker._loss.refused is not None
        assert worker._loss.refused.reason is Reason.PERMISSION_DENIED
        assert await session.release() is False


async def test_loss_on_revoke_through_the_shared_watch(client: TenureClient, name: str) -> None:
    # Renewals only at 27 s: the loss must come from the shared watch.
    session = await client.acquire(name, "holder", ttl=30, renew_fraction=0.9, safety_margin=1)
    other = await client.acquire(name + "-b", "holder", ttl=30, renew_fraction=0.9, safety_margin=1)
    await asyncio.wait_for(client._loss.synced.wait(), WAIT)
    start = time.monotonic()
    await client.revoke_lease(name, "test revoke", fencing_token=session.fencing_token)
    await asyncio.wait_for(session.lost.wait(), WAIT)
    print(f"revoke-to-loss: {(session.lost_at - start) * 1000:.1f} ms (from sending the RevokeLease)")
    assert session.lost_cause is LossCause.WATCH
    assert session.lost_event is not None and str(session.lost_event.type) == "REVOKED"
    assert other.is_held()
    assert await session.release() is False
    assert await other.release() is True
    with pytest.raises(TenureError) as info:
        await client.revoke_lease(name, "again")
    assert info.value.reason is Reason.LEASE_NOT_FOUND
