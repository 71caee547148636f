"""Handing a lease over against a real Tenure: Session.transfer to a waiting
acquire of another client, NO_WAITER, and LeaderElector.resign_to."""

from __future__ import annotations

import asyncio

import pytest

from conftest import WAIT
from tenure_client import LeaderElector, LossCause, Reason, TenureClient, TenureError, leader


async def wait_for_waiters(client: TenureClient, name: str, n: int = 1) -> None:
    """Polls GetLease until `n` acquires wait for `name` (nothing signals
    that a waiter is queued); fails after WAIT seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        info = await client.inspect(name)
        if info.waiting >= n:
            return
        assert loop.time() < deadline, f"{info.waiting} waiting for {name!r}, want {n}"
        await asyncio.sleep(0.02)  # poll interval


async def test_transfer_to_a_waiting_acquire(server, client: TenureClient, name: str) -> None:
    giver = await client.acquire(name, "giver", ttl=30)
    # Nobody waits: NO_WAITER (permanent), and the session is unchanged.
    with pytest.raises(TenureError) as info:
        await giver.transfer()
    assert info.value.reason is Reason.NO_WAITER and not info.value.retryable
    assert giver.is_held() and not giver.lost.is_set()

    async with TenureClient(server.target) as other:
        waiting = asyncio.create_task(other.acquire(name, "waiter", ttl=10, wait=30))
        await wait_for_waiters(client, name)
        # A waiter, but not the one named: NO_WAITER; still held and renewing.
        with pytest.raises(TenureError) as info:
            await giver.transfer(to="someone-else")
        assert info.value.reason is Reason.NO_WAITER
        assert giver.is_held()
        await giver.renew()

        lease = await giver.transfer(to="waiter")
        assert lease.holder == "waiter" and lease.fencing_token > giver.fencing_token
        waiter = await asyncio.wait_for(waiting, WAIT)
        assert waiter.fencing_token == lease.fencing_token > giver.fencing_token
        assert waiter.is_held()

        # The giver's session ended as a release, not a loss.
        assert not giver.is_held() and giver.lost.is_set()
        assert giver.lost_cause is LossCause.TRANSFERRED
        assert giver.lost_error is None and giver.lost_event is None
        assert await giver.release() is False
        with pytest.raises(TenureError) as info:
            await giver.transfer()
        assert info.value.reason is Reason.LEASE_NOT_HELD

        # The recipient renews; it hands over to the head of the queue.
        await waiter.renew()
        third_waiting = asyncio.create_task(client.acquire(name, "third", ttl=10, wait=30))
        await wait_for_waiters(client, name)
        lease3 = await waiter.transfer()
        third = await asyncio.wait_for(third_waiting, WAIT)
        assert lease3.holder == "third" == third.holder
        assert third.fencing_token == lease3.fencing_token > waiter.fencing_token
        assert waiter.lost_cause is LossCause.TRANSFERRED
        assert (await client.inspect(name)).lease.holder == "third"
        assert await third.release() is True


class Candidate:
    """A LeaderElector whose callbacks write to a log shared by all."""

    def __init__(self, client: TenureClient, name: str, identity: str, log: list) -> None:
        self.identity = identity
        self.log = log
        self.started: asyncio.Queue[int] = asyncio.Queue()
        self.elector = LeaderElector(
            client,
            name,
            identity,
            value=f"{identity}:5432",
            ttl=10,
            on_started_leading=self.lead,
            on_stopped_leading=lambda: log.append(f"{identity} stopped"),
        )
        self.task = asyncio.create_task(self.elector.run())

    async def lead(self, term) -> None:
        self.log.append(f"{self.identity} started {term.fencing_token}")
        self.started.put_nowait(term.fencing_token)
        try:
            await asyncio.Event().wait()  # lead until cancelled
        finally:
            self.log.append(f"{self.identity} work ended")

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_elector_resign_to(server, name: str) -> None:
    log: list[str] = []
    async with TenureClient(server.target) as ca, TenureClient(server.target) as cb:
        a = Candidate(ca, name, "node-a", log)
        b = None
        try:
            token_a = await asyncio.wait_for(a.started.get(), WAIT)
            b = Candidate(cb, name, "node-b", log)
            await wait_for_waiters(ca, name)
            with pytest.raises(TenureError) as info:
                await b.elector.resign_to("node-a")  # it does not lead
            assert info.value.reason is Reason.LEASE_NOT_HELD

            term_a = a.elector.term
            successor = await asyncio.wait_for(a.elector.resign_to("node-b"), WAIT)
            assert successor.identity == "node-b" and successor.value == "node-b:5432"
            assert successor.fencing_token > token_a
            # node-a had stopped when resign_to returned.
            assert log[:3] == [f"node-a started {token_a}", "node-a work ended", "node-a stopped"]
            assert term_a.lost_cause is LossCause.TRANSFERRED
            token_b = await asyncio.wait_for(b.started.get(), WAIT)
            assert token_b == successor.fencing_token
            assert log[:4] == [
                f"node-a started {token_a}",
                "node-a work ended",
                "node-a stopped",
                f"node-b started {token_b}",
            ]

            # node-a campaigns again; a successor that does not wait gets
            # NO_WAITER and node-b leads the same term again.
            await wait_for_waiters(cb, name)
            with pytest.raises(TenureError) as info:
                await asyncio.wait_for(b.elector.resign_to("node-c"), WAIT)
            assert info.value.reason is Reason.NO_WAITER
            assert await asyncio.wait_for(b.started.get(), WAIT) == token_b
            now = await leader(cb, name)
            assert (now.identity, now.fencing_token) == ("node-b", token_b)

            # To the next candidate: node-a, with a greater token.
            successor = await asyncio.wait_for(b.elector.resign_to(), WAIT)
            token_a2 = await asyncio.wait_for(a.started.get(), WAIT)
            assert successor.identity == "node-a" and successor.fencing_token == token_a2 > token_b
            assert log[3:] == [
                f"node-b started {token_b}",
                "node-b work ended",
                "node-b stopped",
                f"node-b started {token_b}",
                "node-b work ended",
                "node-b stopped",
                f"node-a started {token_a2}",
            ]
        finally:
            await a.stop()
            if b is not None:
                await b.stop()


def test_sync_transfer(server) -> None:
    """The blocking Session.transfer: NO_WAITER keeps it held; a hand-over
    to a waiter (another thread's blocking acquire) ends it as TRANSFERRED."""
    import concurrent.futures
    import time
    import uuid

    from tenure_client.sync import TenureClient as SyncClient

    name = f"py.sync-transfer.{uuid.uuid4().hex[:8]}"
    with SyncClient(server.target) as client, SyncClient(server.target) as other:
        giver = client.acquire(name, "giver", ttl=30)
        with pytest.raises(TenureError) as info:
            giver.transfer()
        assert info.value.reason is Reason.NO_WAITER and giver.is_held()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(other.acquire, name, "waiter", ttl=10, wait=30)
            deadline = time.monotonic() + WAIT
            # Nothing signals the queueing; the blocking client has no
            # inspect(), so ask through its asyncio client.
            while client._run(client._client.inspect(name)).waiting < 1:
                assert time.monotonic() < deadline, "the waiter never queued"
                time.sleep(0.02)  # poll interval
            lease = giver.transfer("waiter")
            waiter = waiting.result(WAIT)
        assert waiter.fencing_token == lease.fencing_token > giver.fencing_token
        assert giver.lost.is_set() and giver.lost_cause is LossCause.TRANSFERRED
        assert giver.release() is False
        assert waiter.release() is True
