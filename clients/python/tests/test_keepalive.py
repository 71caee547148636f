"""Session renewals over the client's one KeepAlive stream: batching, typed
per-entry errors, and the unary fallback against a server without it."""

from __future__ import annotations

import asyncio
from typing import Dict, List

import grpc
import grpc.aio
import pytest

from conftest import WAIT
from tenure_client import EventType, Reason, Session, TenureClient, TenureError, lease_pb2
from tenure_client import lease_pb2_grpc
from tenure_client._keepalive import UseUnary


async def test_every_session_renews_over_one_stream(client: TenureClient, name: str) -> None:
    sessions: List[Session] = [
        await client.acquire(f"{name}.{i}", "holder", ttl=2) for i in range(20)
    ]
    sessions.append(await client.semaphore(f"{name}.sem", 2).acquire("holder", ttl=2))
    before = [s.revision for s in sessions]
    await asyncio.gather(*(s.renew() for s in sessions))
    assert all(s.revision > b for s, b in zip(sessions, before))
    ka = client._keepalive
    assert ka.streams == 1 and ka.entries >= len(sessions)
    assert ka.requests < ka.entries  # renewals sent together shared messages
    print(f"explicit renewals: {ka.entries} entries in {ka.requests} requests")

    # Three background renewals of every session (every ~0.67 s), seen on a
    # watch, without a second stream.
    renewed: Dict[tuple, int] = {}
    async with client.watch(f"{name}.>", event_types=[EventType.RENEWED]) as events:

        async def three_each() -> None:
            async for event in events:
                if event.type is EventType.RENEWED:
                    key = (event.name, event.slot)
                    renewed[key] = renewed.get(key, 0) + 1
                    if len(renewed) == len(sessions) and min(renewed.values()) >= 3:
                        return

        await asyncio.wait_for(three_each(), 30)
    assert all(s.is_held() for s in sessions)
    assert ka.streams == 1
    print(f"after background renewals: {ka.entries} entries in {ka.requests} requests")
    for s in sessions:
        assert await s.release() is True


async def test_entry_error_is_typed_like_a_unary_renew(client: TenureClient, name: str) -> None:
    with pytest.raises(TenureError) as info:
        await client._keepalive.renew(
            lease_pb2.KeepAliveEntry(name=name, expected_revision=1, lease_key="0123456789abcdef"),
            WAIT,
        )
    assert info.value.reason is Reason.LEASE_NOT_HELD
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.rpc == "KeepAlive"
    async with client.acquire(name + "-b", "holder", ttl=5) as s:
        await s.renew()  # the stream still works
    assert client._keepalive.streams == 1


class _NoKeepAlive(lease_pb2_grpc.LeaseServiceServicer):
    """Grants Acquire and unary Renew; KeepAlive is UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.renews = 0

    def _lease(self, revision: int) -> lease_pb2.Lease:
        return lease_pb2.Lease(
            name="jobs.a", holder="me", fencing_token=10, revision=revision, ttl={"seconds": 30}
        )

    async def Acquire(self, request, context):
        return lease_pb2.AcquireResponse(lease=self._lease(10), lease_key="k" * 16)

    async def Renew(self, request, context):
        self.renews += 1
        return lease_pb2.RenewResponse(lease=self._lease(request.expected_revision + 1))

    async def Release(self, request, context):
        return lease_pb2.ReleaseResponse()


async def test_unary_renew_where_the_server_has_no_keepalive() -> None:
    fake = _NoKeepAlive()
    server = grpc.aio.server()
    lease_pb2_grpc.add_LeaseServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with TenureClient(f"127.0.0.1:{port}") as client:
            s = await client.acquire("jobs.a", "me", ttl=30, renew_fraction=0.9, safety_margin=1)
            await s.renew()
            await s.renew()
            assert fake.renews == 2 and s.revision == 12
            assert client._keepalive.unsupported
            with pytest.raises(UseUnary):
                await client._keepalive.renew(lease_pb2.KeepAliveEntry(name="jobs.a"), WAIT)
            assert s.is_held()
            await s.release()
    finally:
        await server.stop(None)
