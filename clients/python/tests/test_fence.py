"""Fence proofs against a real Tenure started with --fence-signing-key (a
key made with openssl): every grant's proof (a lease, semaphore slots, a
group's members, an election term, the sync API) verifies with the keyset
of the GetFenceKeys RPC, using the tenure_fence verifier (fence/python),
and states the grant; the headers are the proof's text form and the token."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tenure_fence import Fence, Keyset, Verified

from tenure_client import Session, TenureClient, elect, lease_pb2, sync
from tenure_server import TenureServer


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh Ed25519 private key, PKCS#8 PEM, as the docs make it."""
    path = tmp_path_factory.mktemp("fence") / "fence.pem"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)],
        check=True,
        capture_output=True,
    )
    return path


@pytest.fixture(scope="module")
def server(signing_key: Path) -> Iterator[TenureServer]:
    """This module's Tenure, signing fence proofs with `signing_key`."""
    srv = TenureServer(extra_args=("--fence-signing-key", str(signing_key))).start()
    try:
        yield srv
    finally:
        srv.cleanup()


def public_key(signing_key: Path) -> bytes:
    """The raw 32-byte public key of the PEM private key."""
    private = serialization.load_pem_private_key(signing_key.read_bytes(), password=None)
    assert isinstance(private, Ed25519PrivateKey)
    return private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


async def server_keyset(client: TenureClient) -> Keyset:
    return Keyset.parse(await client.fence_keyset())


def verify_session(keyset: Keyset, session: Session) -> Verified:
    """Verifies the session's proof and checks its headers carry the same."""
    verified = keyset.verify(session.fence_proof)
    headers = session.fence_headers()
    assert set(headers) == {"Tenure-Fence", "Tenure-Fencing-Token"}
    assert headers["Tenure-Fencing-Token"] == str(session.fencing_token)
    assert keyset.verify_text(headers["Tenure-Fence"]) == verified
    return verified


async def test_fence_keys_are_the_signing_key(client: TenureClient, signing_key: Path) -> None:
    reply = await client.stub.GetFenceKeys(lease_pb2.GetFenceKeysRequest())
    assert [(k.public_key, k.active) for k in reply.keys] == [(public_key(signing_key), True)]
    keyset = await server_keyset(client)
    assert keyset.key_ids == [reply.keys[0].key_id]


async def test_lease_proof_states_the_grant(client: TenureClient, name: str) -> None:
    keyset = await server_keyset(client)
    session = await client.acquire(name, "worker-1", ttl=10)
    verified = verify_session(keyset, session)
    assert verified.key_id == keyset.key_ids[0]
    granted_at = session.lease.acquire_time
    assert verified.fence == Fence(
        bucket="tenure",
        name=name,
        slot=0,
        token=session.fencing_token,
        granted_at_ms=round(granted_at.timestamp() * 1000),
        ttl_s=10,
        holder="worker-1",
    )
    proof = session.fence_proof
    await session.renew()
    assert session.fence_proof == proof  # a renewal does not change it
    await session.release()

    again = await client.acquire(name, "worker-2", ttl=10)
    later = verify_session(keyset, again)
    assert later.fence.token > verified.fence.token and later.fence.holder == "worker-2"
    await again.release()


async def test_semaphore_slots_have_their_own_proofs(client: TenureClient, name: str) -> None:
    keyset = await server_keyset(client)
    sem = client.semaphore(name, 2)
    async with sem.acquire("enc-1", ttl=10) as first, sem.acquire("enc-2", ttl=10) as second:
        for slot in (first, second):
            fence = verify_session(keyset, slot).fence
            assert (fence.name, fence.slot, fence.token, fence.holder) == (
                name, slot.slot, slot.fencing_token, slot.holder,
            )
        assert {first.slot, second.slot} == {1, 2}


async def test_group_members_have_their_own_proofs(client: TenureClient, name: str) -> None:
    keyset = await server_keyset(client)
    names = [f"{name}.a", f"{name}.b"]
    async with client.acquire_group(names, "mover", ttl=10) as group:
        for member in names:
            fence = keyset.verify(group.fence_proof_of(member)).fence
            token = group.fencing_token_of(member)
            assert (fence.name, fence.token, fence.slot) == (member, token, 0)
            headers = group.fence_headers(member)
            assert keyset.verify_text(headers["Tenure-Fence"]).fence == fence
            assert headers["Tenure-Fencing-Token"] == str(fence.token)
        assert group.fence_headers() == group.fence_headers(names[0])
        with pytest.raises(KeyError):
            group.fence_proof_of(f"{name}.c")


async def test_election_term_has_a_proof(client: TenureClient, name: str) -> None:
    keyset = await server_keyset(client)
    term = await elect(client, name, "node-a", "10.0.0.1:5432", ttl=10)
    fence = verify_session(keyset, term).fence
    assert (fence.name, fence.token, fence.holder) == (name, term.fencing_token, "node-a")
    await term.release()


def test_sync_session_has_the_proof(server: TenureServer, name: str) -> None:
    with sync.TenureClient(server.target) as client:
        keyset = Keyset.parse(client.fence_keyset())
        with client.acquire(name, "sync-1", ttl=10) as session:
            fence = keyset.verify_text(session.fence_headers()["Tenure-Fence"]).fence
            assert (fence.name, fence.token) == (name, session.fencing_token)
            assert keyset.verify(session.fence_proof).fence == fence
