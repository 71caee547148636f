"""Watches across real Tenure restarts: SIGKILL a Tenure, change leases on
another replica of the same NATS bucket meanwhile, start a new Tenure on the
same port, and check what the watch and the shared loss watch saw."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Iterator, List

import grpc
import grpc.aio
import pytest

from tenure_client import EventType, LeaseEvent, LeaseWatch, Reason, TenureClient, TenureError
from tenure_client import lease_pb2 as T
from tenure_client._session import LossCause
from tenure_server import NatsServer, TenureServer

from conftest import WAIT


@pytest.fixture
def nats() -> Iterator[NatsServer]:
    srv = NatsServer()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def replicas(nats: NatsServer) -> Iterator[List[TenureServer]]:
    """Starts Tenure servers over `nats`; all are cleaned up after the test."""
    started: List[TenureServer] = []
    yield started
    for srv in started:
        srv.cleanup()


def _replica(
    replicas: List[TenureServer], nats: NatsServer, port: int = 0, args: tuple = ()
) -> TenureServer:
    srv = TenureServer(args, nats_url=nats.url, port=port).start()
    replicas.append(srv)
    return srv


async def _raw_acquire(client: TenureClient, name: str) -> Any:
    """Takes `name` with a long TTL through the raw stub (no renewals)."""
    return await client.stub.Acquire(
        T.AcquireRequest(name=name, holder="raw", ttl={"seconds": 60}),
        metadata=client._call_metadata(),
    )


async def _expect(watch: LeaseWatch, typ: EventType, name: str) -> LeaseEvent:
    event = await asyncio.wait_for(watch.__anext__(), 30)
    assert (event.type, event.name) == (typ, name), event
    return event


async def test_watch_resumes_across_tenure_restart(
    nats: NatsServer, replicas: List[TenureServer], name: str
) -> None:
    """Every change exactly once, in order: one before the restart, two on
    another replica while the watched Tenure is down, one after; the final
    release comes right after, so nothing was delivered twice."""
    first = _replica(replicas, nats)
    other = _replica(replicas, nats)
    async with TenureClient(first.target) as client, TenureClient(other.target) as oc:
        async with client.watch(f"{name}.>") as watch:
            await _expect(watch, EventType.SNAPSHOT_COMPLETE, "")
            a = await _raw_acquire(client, f"{name}.a")
            await _expect(watch, EventType.ACQUIRED, f"{name}.a")

            first.stop(signal.SIGKILL)
            b = await _raw_acquire(oc, f"{name}.b")
            await oc.stub.Release(
                T.ReleaseRequest(
                    name=f"{name}.a", expected_revision=a.lease.revision, lease_key=a.lease_key
                )
            )
            _replica(replicas, nats, port=first.port)

            got_b = await _expect(watch, EventType.ACQUIRED, f"{name}.b")
            assert got_b.fencing_token == b.lease.fencing_token and not got_b.resync
            await _expect(watch, EventType.RELEASED, f"{name}.a")
            c = await _raw_acquire(client, f"{name}.c")
            await _expect(watch, EventType.ACQUIRED, f"{name}.c")
            await client.stub.Release(
                T.ReleaseRequest(
                    name=f"{name}.c", expected_revision=c.lease.revision, lease_key=c.lease_key
                )
            )
            await _expect(watch, EventType.RELEASED, f"{name}.c")


async def test_session_revoked_while_tenure_down_is_lost(
    nats: NatsServer, replicas: List[TenureServer], name: str
) -> None:
    """The shared watch resumes after the restart and signals the revoke
    made meanwhile on another replica (renewals are far off); a session of
    the same client whose lease did not end stays held."""
    first = _replica(replicas, nats)
    other = _replica(replicas, nats)
    async with TenureClient(first.target) as client, TenureClient(other.target) as oc:
        revoked = await client.acquire(f"{name}.revoked", "me", ttl=30, renew_fraction=0.8)
        kept = await client.acquire(f"{name}.kept", "me", ttl=30, renew_fraction=0.8)
        await asyncio.wait_for(client._loss.synced.wait(), WAIT)

        first.stop(signal.SIGKILL)
        await oc.revoke_lease(f"{name}.revoked", "test: revoked while its Tenure is down")
        _replica(replicas, nats, port=first.port)

        await asyncio.wait_for(revoked.lost.wait(), 30)
        assert revoked.lost_cause is LossCause.WATCH
        assert revoked.lost_event is not None
        assert revoked.lost_event.type is EventType.REVOKED
        assert kept.is_held()
        await kept.renew()
        assert await kept.release()


async def test_watch_falls_back_to_snapshot_when_history_compacted(
    nats: NatsServer, replicas: List[TenureServer], name: str
) -> None:
    """When the changes made while its Tenure was down can no longer be
    proven complete (markers last only --marker-ttl), the resume is refused
    with WATCH_HISTORY_COMPACTED and the watch starts over with a fresh
    snapshot marked resync: the lease released meanwhile is absent, the one
    acquired meanwhile is CURRENT, and live events follow."""
    short = ("--marker-ttl", "3s", "--max-lock-delay", "1s")
    first = _replica(replicas, nats, args=short)
    other = _replica(replicas, nats, args=short)
    async with TenureClient(first.target) as client, TenureClient(other.target) as oc:
        async with client.watch(f"{name}.>") as watch:
            await _expect(watch, EventType.SNAPSHOT_COMPLETE, "")
            a = await _raw_acquire(client, f"{name}.a")
            await _expect(watch, EventType.ACQUIRED, f"{name}.a")

            first.stop(signal.SIGKILL)
            await oc.stub.Release(
                T.ReleaseRequest(
                    name=f"{name}.a", expected_revision=a.lease.revision, lease_key=a.lease_key
                )
            )
            b = await _raw_acquire(oc, f"{name}.b")
            # Await the history after a's revision no longer being resumable.
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                probe = oc.stub.WatchLease(
                    T.WatchLeaseRequest(name=f"{name}.>", start_revision=a.lease.revision)
                )
                try:
                    await asyncio.wait_for(probe.read(), WAIT)
                except grpc.aio.AioRpcError as err:
                    if TenureError.from_rpc_error(err).reason is Reason.WATCH_HISTORY_COMPACTED:
                        break
                    raise
                finally:
                    probe.cancel()
                assert asyncio.get_running_loop().time() < deadline, "resume still served"
                await asyncio.sleep(0.2)  # markers age by the clock: poll
            _replica(replicas, nats, port=first.port, args=short)

            current = await _expect(watch, EventType.CURRENT, f"{name}.b")
            assert current.resync and current.fencing_token == b.lease.fencing_token
            assert (await _expect(watch, EventType.SNAPSHOT_COMPLETE, "")).resync
            await _raw_acquire(client, f"{name}.c")
            assert not (await _expect(watch, EventType.ACQUIRED, f"{name}.c")).resync
