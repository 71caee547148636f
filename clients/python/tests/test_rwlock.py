"""The RWLock helper against a real Tenure: shared holders together and an
exclusive Acquire refused meanwhile, one arrival-order queue for both modes,
and Session.downgrade keeping the holding (and its renewals) going as a
shared one. The server admits at most 3 shared holders (TOO_MANY_SHARED_HOLDERS
for a fourth). Last, without a server: the watch events a downgrade holds back
while its call is in flight are judged by its outcome."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Iterator, Optional

import pytest

from conftest import WAIT, next_event
from tenure_client import (
    EventType,
    Lease,
    LeaseEvent,
    LeaseWatch,
    LockMode,
    LossCause,
    Reason,
    Session,
    TenureClient,
    TenureError,
    lease_pb2,
)
from tenure_client._types import to_duration
from tenure_server import TenureServer

MAX_SHARED = 3


@pytest.fixture(scope="module")
def server() -> Iterator[TenureServer]:
    """A Tenure admitting at most MAX_SHARED shared holders of a lock."""
    srv = TenureServer(("--max-shared-holders", str(MAX_SHARED))).start()
    try:
        yield srv
    finally:
        srv.cleanup()


async def wait_for_waiters(client: TenureClient, name: str, n: int) -> None:
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


async def next_renewal(watch: LeaseWatch, token: int, after: int) -> LeaseEvent:
    """The next RENEWED event of the holding with fencing token `token` at a
    revision after `after`; fails after WAIT seconds."""

    async def find() -> LeaseEvent:
        async for event in watch:
            if (
                event.type is EventType.RENEWED
                and event.fencing_token == token
                and event.revision > after
            ):
                return event
        raise AssertionError("the watch ended")

    return await asyncio.wait_for(find(), WAIT)


async def test_shared_holders_hold_together_and_refuse_a_writer(
    client: TenureClient, name: str
) -> None:
    lock = client.rwlock(name)
    r1 = await lock.read("reader-1", ttl=10)
    r2 = await lock.read("reader-2", ttl=10)
    try:
        assert r1.is_held() and r2.is_held()
        assert r1.mode is LockMode.SHARED and r2.mode is LockMode.SHARED
        assert r1.lease.mode is LockMode.SHARED
        assert 0 not in (r1.slot, r2.slot) and r1.slot != r2.slot
        assert r2.fencing_token > r1.fencing_token > 0

        # Exclusive without a wait: refused while shared holders hold.
        with pytest.raises(TenureError) as info:
            await lock.write("writer", ttl=10)
        assert info.value.reason is Reason.LEASE_HELD, info.value

        # A third shared holder joins; a fourth is over the server's
        # --max-shared-holders.
        async with lock.read("reader-3", ttl=10) as r3:
            assert r3.mode is LockMode.SHARED and r3.slot not in (r1.slot, r2.slot)
            with pytest.raises(TenureError) as info:
                await lock.read("reader-4", ttl=10)
            assert info.value.reason is Reason.TOO_MANY_SHARED_HOLDERS, info.value
            assert info.value.retryable
            assert info.value.metadata.get("max_shared_holders") == str(MAX_SHARED)

        # The name is a read-write lock's: not a semaphore's.
        with pytest.raises(TenureError) as info:
            await client.semaphore(name, 2).acquire("counter", ttl=10)
        assert info.value.reason is Reason.MODE_MISMATCH, info.value
        assert not info.value.retryable

        # Both still hold, and renew.
        assert (await r1.renew()).mode is LockMode.SHARED
        await r2.renew()
        assert r1.is_held() and r2.is_held()
    finally:
        assert await r1.release() is True
        assert await r2.release() is True
    assert r1.lost_cause is LossCause.RELEASED


async def test_writer_queued_behind_readers_goes_before_a_later_reader(
    server: TenureServer, client: TenureClient, name: str
) -> None:
    lock = client.rwlock(name)
    r1 = await lock.read("reader-1", ttl=30)
    r2 = await lock.read("reader-2", ttl=30)
    async with TenureClient(server.target) as other:
        writing = asyncio.create_task(other.rwlock(name).write("writer", ttl=30, wait=3 * WAIT))
        reading = None
        try:
            await wait_for_waiters(client, name, 1)
            # A shared Acquire without a wait does not pass the queued writer.
            with pytest.raises(TenureError) as info:
                await other.rwlock(name).read("reader-3", ttl=30)
            assert info.value.reason is Reason.LEASE_HELD, info.value
            assert info.value.metadata.get("state") == "QUEUED", info.value.metadata
            # A shared Acquire with a wait queues behind the writer.
            reading = asyncio.create_task(
                other.rwlock(name).read("reader-3", ttl=30, wait=3 * WAIT)
            )
            await wait_for_waiters(client, name, 2)

            # One shared holder left: the writer still waits, and the later
            # reader behind it.
            assert await r1.release() is True
            assert (await client.inspect(name)).waiting == 2
            assert not writing.done() and not reading.done()

            # The last shared holder leaves: the writer gets the lock.
            assert await r2.release() is True
            writer = await asyncio.wait_for(writing, WAIT)
            assert writer.mode is LockMode.EXCLUSIVE and writer.is_held()
            assert writer.fencing_token > r2.fencing_token > r1.fencing_token

            # The reader that came after it waits until it releases.
            info2 = await client.inspect(name)
            assert info2.waiting == 1 and info2.lease.holder == "writer", info2
            assert not reading.done()
            assert await writer.release() is True
            reader = await asyncio.wait_for(reading, WAIT)
            assert reader.mode is LockMode.SHARED and reader.is_held()
            assert reader.fencing_token > writer.fencing_token
            assert await reader.release() is True
        finally:
            for task in (writing, reading):
                if task is not None and not task.done():
                    task.cancel()
            await r1.release()
            await r2.release()


async def test_downgrade_lets_readers_in_and_keeps_renewing(
    server: TenureServer, client: TenureClient, name: str
) -> None:
    # Renewals every second (ttl 3): the background loop must present the
    # downgrade's revision. A plain lease beside it is the barrier of the
    # client's loss watch (it delivers in revision order).
    marker = await client.acquire(name + "-marker", "writer", ttl=30)
    async with TenureClient(server.target) as other, client.watch(name) as watch:
        await next_event(watch, EventType.SNAPSHOT_COMPLETE)
        writer = await client.rwlock(name).write("writer", ttl=3)
        await asyncio.wait_for(client._loss.synced.wait(), WAIT)
        exclusive_token, slot, key = writer.fencing_token, writer.slot, writer.lease_key
        assert writer.mode is LockMode.EXCLUSIVE and slot > 0
        reading = asyncio.create_task(other.rwlock(name).read("reader", ttl=30, wait=3 * WAIT))
        try:
            await wait_for_waiters(client, name, 1)
            assert not reading.done()

            lease = await writer.downgrade()
            assert lease.mode is LockMode.SHARED and lease.slot == slot
            assert lease.fencing_token > exclusive_token
            assert writer.mode is LockMode.SHARED
            assert writer.fencing_token == lease.fencing_token
            assert writer.revision == lease.revision
            assert (writer.slot, writer.lease_key) == (slot, key)
            assert writer.is_held()

            # The waiting reader gets in beside the downgraded holder.
            reader = await asyncio.wait_for(reading, WAIT)
            assert reader.mode is LockMode.SHARED
            assert reader.fencing_token > writer.fencing_token
            assert writer.is_held() and reader.is_held()

            # Renewals go on with the new revision: one now, and the
            # background loop's after it.
            renewed = await writer.renew()
            assert renewed.fencing_token == writer.fencing_token
            assert renewed.mode is LockMode.SHARED
            assert renewed.revision > lease.revision
            await next_renewal(watch, writer.fencing_token, renewed.revision)

            # Only an exclusive holding downgrades: MODE_MISMATCH, and the
            # session is unchanged.
            with pytest.raises(TenureError) as info:
                await writer.downgrade()
            assert info.value.reason is Reason.MODE_MISMATCH, info.value
            assert not info.value.retryable

            # The client's loss watch saw the downgrade (and the reader)
            # before the marker's revoke: it left the session alone.
            await other.revoke_lease(marker.name, "barrier", fencing_token=marker.fencing_token)
            await asyncio.wait_for(marker.lost.wait(), WAIT)
            assert marker.lost_cause is LossCause.WATCH
            assert writer.is_held(), writer.lost_cause
            assert writer.fencing_token == lease.fencing_token

            assert await reader.release() is True
            assert await writer.release() is True
        finally:
            if not reading.done():
                reading.cancel()
            await writer.release()
    await marker.release()


# ---- the downgrade's hold-back of watch events, without a server -----------


class _NoLossWatch:
    def remove(self, session: object) -> None:
        pass


class _DowngradeHost:
    """The client of a Session that is never started: its Downgrade runs
    `answer` (which may feed the session watch events first, as the shared
    watch would while the call is in flight)."""

    target = "fake"

    def __init__(self, answer: Callable[[Session], Awaitable[lease_pb2.DowngradeResponse]]) -> None:
        self._answer = answer
        self._loss = _NoLossWatch()
        self.session: Optional[Session] = None

    async def _unary(self, rpc: str, request: Any, timeout: Optional[float]) -> Any:
        assert rpc == "Downgrade" and self.session is not None
        assert (request.expected_revision, request.slot) == (3, 1)
        return await self._answer(self.session)


def _exclusive(answer: Callable[[Session], Awaitable[lease_pb2.DowngradeResponse]]) -> Session:
    """An exclusive holding (slot 1, token and revision 3) downgrading with `answer`."""
    host = _DowngradeHost(answer)
    lease = Lease(name="lock", holder="w", fencing_token=3, revision=3, ttl=30.0, slot=1, mode=LockMode.EXCLUSIVE)
    session = Session(host, lease, "k" * 16, time.monotonic(), renew_fraction=1 / 3, safety_margin=None)  # type: ignore[arg-type]
    host.session = session
    return session


def _event(kind: EventType, revision: int, token: int) -> LeaseEvent:
    return LeaseEvent(kind, "lock", revision, "w", token, slot=1)


def _shared_reply() -> lease_pb2.DowngradeResponse:
    """The downgrade's reply: token and revision 5, SHARED."""
    return lease_pb2.DowngradeResponse(
        lease=lease_pb2.Lease(
            name="lock",
            holder="w",
            fencing_token=5,
            revision=5,
            ttl=to_duration(30),
            slot=1,
            mode=lease_pb2.LOCK_MODE_SHARED,
        )
    )


async def test_the_downgrades_own_events_before_its_reply_do_not_end_the_session() -> None:
    async def answer(session: Session) -> lease_pb2.DowngradeResponse:
        # The watch shows the exclusive holding released and the shared one
        # acquired (the downgrade's write) before the reply arrives.
        session._observe(_event(EventType.RELEASED, 5, 3))
        session._observe(_event(EventType.ACQUIRED, 5, 5))
        assert not session.lost.is_set()
        return _shared_reply()

    session = _exclusive(answer)
    lease = await session.downgrade()
    assert lease.mode is LockMode.SHARED
    assert session.is_held(), session.lost_cause
    assert (session.fencing_token, session.revision, session.mode) == (5, 5, LockMode.SHARED)
    # The same events after the reply, and the exclusive holding's older
    # renewal, leave it alone; a revoke of the shared holding ends it.
    session._observe(_event(EventType.RENEWED, 4, 3))
    session._observe(_event(EventType.RELEASED, 5, 3))
    session._observe(_event(EventType.ACQUIRED, 5, 5))
    assert session.is_held(), session.lost_cause
    session._observe(_event(EventType.REVOKED, 7, 5))
    assert session.lost_cause is LossCause.WATCH


async def test_a_loss_seen_while_downgrading_ends_the_session_after_the_reply() -> None:
    async def answer(session: Session) -> lease_pb2.DowngradeResponse:
        session._observe(_event(EventType.ACQUIRED, 5, 5))
        session._observe(_event(EventType.REVOKED, 6, 5))  # the shared holding, revoked
        assert not session.lost.is_set()
        return _shared_reply()

    session = _exclusive(answer)
    await session.downgrade()
    assert session.lost_cause is LossCause.WATCH
    assert session.lost_event is not None and session.lost_event.type is EventType.REVOKED


async def test_a_failed_downgrade_judges_its_events_by_the_exclusive_holding() -> None:
    async def refused(session: Session) -> lease_pb2.DowngradeResponse:
        session._observe(_event(EventType.RENEWED, 4, 3))  # its own renewal: no loss
        raise TenureError(Reason.MODE_MISMATCH, "not exclusive")

    session = _exclusive(refused)
    with pytest.raises(TenureError):
        await session.downgrade()
    assert session.is_held() and (session.fencing_token, session.mode) == (3, LockMode.EXCLUSIVE)

    async def gone(session: Session) -> lease_pb2.DowngradeResponse:
        session._observe(_event(EventType.EXPIRED, 4, 3))
        raise TenureError(Reason.LEASE_NOT_HELD, "expired")

    session = _exclusive(gone)
    with pytest.raises(TenureError):
        await session.downgrade()
    assert session.lost_cause is LossCause.WATCH
