"""The session helper against a real Tenure: acquire/renew/release, races,
fencing tokens, loss signals."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from conftest import WAIT, next_event
from tenure_client import (
    EventType,
    FencingGuard,
    LossCause,
    Reason,
    Session,
    TenureClient,
    TenureError,
    lease_pb2,
)


async def test_acquire_renew_release_round_trip(client: TenureClient, name: str) -> None:
    async with client.watch(name) as watch:
        await next_event(watch, EventType.SNAPSHOT_COMPLETE)
        session = await client.acquire(name, "worker-1", ttl=1, metadata={"job": "a"})
        try:
            assert session.is_held()
            assert (session.name, session.holder) == (name, "worker-1")
            assert session.ttl == 1.0
            assert session.fencing_token > 0
            assert session.revision == session.fencing_token  # the acquiring write
            assert len(session.lease_key) >= 16
            assert session.lease.metadata == {"job": "a"}
            first_revision, first_deadline = session.revision, session.safe_deadline

            # A manual renewal moves revision and safe deadline forward.
            renewed = await session.renew()
            assert renewed.revision > first_revision
            assert session.revision == renewed.revision
            assert session.safe_deadline > first_deadline
            assert renewed.fencing_token == session.fencing_token

            # The background loop renews by itself (every ttl/3).
            for _ in range(2):
                event = await next_event(watch, EventType.RENEWED)
                assert event.fencing_token == session.fencing_token
            current = await client.get(name)
            assert current.holder == "worker-1"
            assert current.fencing_token == session.fencing_token
            assert current.revision > renewed.revision
        finally:
            released = await session.release()
        assert released is True
        assert session.lost.is_set() and not session.is_held()
        assert session.lost_cause is LossCause.RELEASED
        event = await next_event(watch, EventType.RELEASED)
        assert (event.holder, event.fencing_token) == ("worker-1", session.fencing_token)
    with pytest.raises(TenureError) as err:
        await client.get(name)
    assert err.value.reason is Reason.LEASE_NOT_FOUND
    assert err.value.code is grpc.StatusCode.NOT_FOUND
    # Releasing again, or renewing after release, says so without a call.
    assert await session.release() is False
    with pytest.raises(TenureError) as err:
        await session.renew()
    assert err.value.reason is Reason.LEASE_NOT_HELD


async def test_async_with_releases_at_block_end(client: TenureClient, name: str) -> None:
    async with client.acquire(name, "scoped", ttl=2) as session:
        assert isinstance(session, Session) and session.is_held()
        assert (await client.get(name)).holder == "scoped"
    assert session.lost_cause is LossCause.RELEASED
    with pytest.raises(TenureError) as err:
        await client.get(name)
    assert err.value.reason is Reason.LEASE_NOT_FOUND


async def test_racing_acquires_one_wins(client: TenureClient, name: str) -> None:
    holders = [f"racer-{i}" for i in range(5)]
    results = await asyncio.gather(
        *(client.acquire(name, h, ttl=5) for h in holders), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, Session)]
    losers = [r for r in results if not isinstance(r, Session)]
    assert len(winners) == 1, results
    winner = winners[0]
    try:
        assert len(losers) == 4
        for err in losers:
            assert isinstance(err, TenureError), err
            assert err.reason is Reason.LEASE_HELD
            assert err.code is grpc.StatusCode.FAILED_PRECONDITION
            assert err.metadata["holder"] == winner.holder
            assert int(err.metadata["fencing_token"]) == winner.fencing_token
            assert err.metadata["ttl_seconds"] == "5"
        assert (await client.get(name)).holder == winner.holder
    finally:
        await winner.release()


async def test_fencing_token_stable_across_renewals_and_greater_for_next_holder(
    client: TenureClient, name: str
) -> None:
    first = await client.acquire(name, "first", ttl=1)
    tokens = {first.fencing_token}
    revisions = [first.revision]
    for _ in range(3):
        lease = await first.renew()
        tokens.add(lease.fencing_token)
        revisions.append(lease.revision)
    assert tokens == {first.fencing_token}
    assert revisions == sorted(set(revisions))  # strictly increasing
    assert await first.release()

    second = await client.acquire(name, "second", ttl=1)
    try:
        assert second.fencing_token > first.fencing_token
        assert second.fencing_token > max(revisions)
        # Downstream, the old holder's token is now refused.
        guard = FencingGuard()
        assert guard.accept(name, first.fencing_token)
        assert guard.accept(name, second.fencing_token)
        assert not guard.accept(name, first.fencing_token)
        assert guard.highest(name) == second.fencing_token
    finally:
        await second.release()


async def test_stalled_holder_loses_before_takeover(client: TenureClient, name: str) -> None:
    stalled = await client.acquire(name, "stalled", ttl=1)
    stalled.pause_renewals()
    # Loss comes from the safe deadline, before the server lets it go ...
    await asyncio.wait_for(stalled.lost.wait(), WAIT)
    assert stalled.lost_cause is LossCause.DEADLINE
    assert not stalled.is_held()
    # ... and the next holder gets it once the server expires it.
    async with client.acquire(name, "next", ttl=2, wait=WAIT) as successor:
        assert successor.fencing_token > stalled.fencing_token
        assert not stalled.is_held()
        # The stalled holder waking up cannot disturb the new holding.
        stalled.resume_renewals()
        assert await stalled.release() is False
        current = await client.get(name)
        assert (current.holder, current.fencing_token) == ("next", successor.fencing_token)
        assert successor.is_held()


async def test_takeover_signals_loss_on_the_shared_watch(client: TenureClient, name: str) -> None:
    # Renewals only at 27 s: the loss must come from the client's shared
    # watch. (The renewal path, LEASE_NOT_HELD, is tested where the watch is
    # refused: test_credentials.py.)
    victim = await client.acquire(name, "victim", ttl=30, renew_fraction=0.9, safety_margin=1)
    # The holding ends behind the session's back (here: a Release with its
    # key, as an operator or a crashed twin could send), and another holder
    # takes the name.
    await client.stub.Release(
        lease_pb2.ReleaseRequest(
            name=name, expected_revision=victim.revision, lease_key=victim.lease_key
        )
    )
    async with client.acquire(name, "thief", ttl=3) as thief:
        await asyncio.wait_for(victim.lost.wait(), WAIT)
        assert victim.lost_cause is LossCause.WATCH
        # The RELEASED event, or (when the release beat the watch's opening)
        # the name missing from the watch's snapshot.
        if victim.lost_event is not None:
            assert victim.lost_event.type is EventType.RELEASED
            assert victim.lost_event.fencing_token == victim.fencing_token
        assert not victim.is_held()
        assert await victim.release() is False  # not held: no error
        assert thief.fencing_token > victim.fencing_token
        assert (await client.get(name)).holder == "thief"


async def test_acquire_with_wait_gets_the_lease_on_release(client: TenureClient, name: str) -> None:
    holder = await client.acquire(name, "holder", ttl=30)
    async with client.watch(name, event_types=[EventType.ACQUIRED]) as watch:
        await next_event(watch, EventType.SNAPSHOT_COMPLETE)
        waiting = asyncio.create_task(client.acquire(name, "waiter", ttl=2, wait=WAIT))
        await holder.release()
        waiter = await asyncio.wait_for(waiting, WAIT)
        event = await next_event(watch, EventType.ACQUIRED)
    async with waiter:
        assert event.holder == "waiter" and event.fencing_token == waiter.fencing_token
        assert waiter.is_held()
        assert waiter.fencing_token > holder.fencing_token


async def test_errors_carry_typed_reasons(client: TenureClient, name: str) -> None:
    with pytest.raises(TenureError) as err:
        await client.acquire("bad..name", "h", ttl=1)
    assert err.value.reason is Reason.INVALID_NAME
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert not err.value.retryable

    with pytest.raises(TenureError) as err:
        await client.acquire(name, "h", ttl=1, lease_key="short")
    assert err.value.reason is Reason.INVALID_LEASE_KEY

    with pytest.raises(TenureError) as err:
        await client.get(name)
    assert err.value.reason == "LEASE_NOT_FOUND"  # a Reason is also its string

    with pytest.raises(ValueError):
        client.acquire(name, "h", ttl=1, renew_fraction=1.5)
    with pytest.raises(ValueError):
        client.acquire(name, "h", ttl=1, renew_fraction=0.95)  # after the deadline


async def test_retried_acquire_with_same_key_returns_same_holding(
    client: TenureClient, name: str
) -> None:
    key = "retry-key-0123456789abcdef"
    first = await client.acquire(name, "retrier", ttl=2, lease_key=key)
    first.pause_renewals()
    again = await client.acquire(name, "retrier", ttl=2, lease_key=key)
    try:
        assert again.fencing_token == first.fencing_token
        assert again.revision > first.revision
        assert again.lease_key == key
    finally:
        await again.release()
        await first.release()


async def test_is_held_reads_the_clock_even_when_the_loop_is_stalled(
    client: TenureClient, name: str
) -> None:
    session = await client.acquire(name, "busy", ttl=1)
    # Block the event loop itself (a long synchronous step, a GC pause) until
    # the safe deadline has passed: the renewal task cannot run meanwhile.
    while time.monotonic() <= session.safe_deadline:
        time.sleep(session.safe_deadline - time.monotonic() + 0.001)
    assert not session.lost.is_set()  # the loop had no chance to say so ...
    assert not session.is_held()  # ... but is_held() already does
    assert session.remaining() == 0.0
    await asyncio.wait_for(session.lost.wait(), WAIT)
    assert session.lost_cause is LossCause.DEADLINE
    await session.release()


async def test_long_wait_renews_before_returning(client: TenureClient, name: str) -> None:
    holder = await client.acquire(name, "gone", ttl=1)
    holder.pause_renewals()  # it will expire on the server in about 1 s
    waiter = await client.acquire(name, "waiter", ttl=1, wait=WAIT)
    # The wait outlasted a renew interval, so acquire renewed once before
    # returning: the safe deadline counts from that renewal, not from the
    # Acquire sent a second earlier.
    assert waiter.revision > waiter.fencing_token
    assert waiter.is_held()
    assert waiter.fencing_token > holder.fencing_token
    await waiter.release()


async def test_closing_the_client_stops_its_sessions(server, name: str) -> None:
    client = TenureClient(server.target)
    session = await client.acquire(name, "closing", ttl=5)
    await client.close()
    assert session.lost.is_set() and not session.is_held()
    assert session.lost_cause is LossCause.CLOSED
    async with TenureClient(server.target) as other:
        assert (await other.get(name)).holder == "closing"  # not released


async def test_no_fence_proof_without_a_signing_key(client: TenureClient, name: str) -> None:
    # This module's server has no --fence-signing-key (tests/test_fence.py
    # has one): grants carry no proof, and the headers are the token's
    # alone (as in every client).
    assert await client.fence_keyset() == ""
    async with client.acquire(name, "worker-1", ttl=10) as session:
        assert session.fence_proof == b""
        assert session.fence_headers() == {
            "Tenure-Fencing-Token": str(session.fencing_token)
        }
