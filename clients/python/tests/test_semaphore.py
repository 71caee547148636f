"""The Semaphore helper against real Tenure servers: the limit holds under a
race across two replicas, LIMIT_MISMATCH is typed, and a slot's session
ends only for its own slot."""

from __future__ import annotations

import asyncio
from typing import Iterator, List

import pytest

from conftest import WAIT
from tenure_client import LossCause, Reason, Session, TenureClient, TenureError
from tenure_server import NatsServer, TenureServer


@pytest.fixture
def two_replicas() -> Iterator[List[TenureServer]]:
    """Two Tenure servers over one nats-server (one bucket)."""
    nats = NatsServer()
    started: List[TenureServer] = []
    try:
        started.append(TenureServer(nats_url=nats.url).start())
        started.append(TenureServer(nats_url=nats.url).start())
        yield started
    finally:
        for srv in started:
            srv.cleanup()
        nats.cleanup()


async def test_race_for_a_semaphore_never_over_grants(
    two_replicas: List[TenureServer], name: str
) -> None:
    # Six clients, alternating replicas, race for 2 slots with a wait; a
    # shared count of live holders (up after acquire, down before release)
    # never exceeds 2, and every holding has its own token and a slot 1..2.
    limit, count = 2, 6
    live, peak = 0, 0
    tokens: dict[int, str] = {}

    async def worker(i: int) -> None:
        nonlocal live, peak
        async with TenureClient(two_replicas[i % 2].target) as client:
            holder = f"worker-{i}"
            s = await client.semaphore(name, limit).acquire(holder, ttl=5, wait=45)
            live += 1
            peak = max(peak, live)
            assert s.fencing_token not in tokens, (holder, tokens)
            tokens[s.fencing_token] = holder
            assert 1 <= s.slot <= limit
            await asyncio.sleep(0.1)  # the holder's work
            assert s.is_held(), s.lost_cause
            live -= 1
            assert await s.release() is True

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(count))), 60)
    assert 1 <= peak <= limit
    assert len(tokens) == count


async def test_limit_mismatch_is_typed(client: TenureClient, name: str) -> None:
    async with client.semaphore(name, 2).acquire("first", ttl=5):
        with pytest.raises(TenureError) as info:
            await client.semaphore(name, 3).acquire("second", ttl=5)
        assert info.value.reason is Reason.LIMIT_MISMATCH
        assert info.value.limit_in_force == 2
        assert not info.value.retryable
    with pytest.raises(ValueError):
        client.semaphore(name, 0)


async def test_only_the_sessions_own_slot_ends_it(
    server: TenureServer, client: TenureClient, name: str
) -> None:
    # Renewals only at 27 s: losses must come from the shared watch. The
    # client also holds a plain lease under a sibling name, so one watch
    # stream carries both names in order: once the revoke of that lease has
    # ended its session, every earlier event of the other slots was seen.
    sem = client.semaphore(name, 3)
    mine = await sem.acquire("mine", ttl=30, renew_fraction=0.9, safety_margin=1)
    mate = await sem.acquire("mate", ttl=30, renew_fraction=0.9, safety_margin=1)
    assert 0 not in (mine.slot, mate.slot) and mine.slot != mate.slot
    marker = await client.acquire(name + "-marker", "mine", ttl=30, renew_fraction=0.9, safety_margin=1)
    await asyncio.wait_for(client._loss.synced.wait(), WAIT)
    async with TenureClient(server.target) as others:
        for _ in range(2):
            other = await others.semaphore(name, 3).acquire("other", ttl=5)
            assert await other.release() is True
        await others.revoke_lease(marker.name, "barrier", fencing_token=marker.fencing_token)
        await asyncio.wait_for(marker.lost.wait(), WAIT)
        assert marker.lost_cause is LossCause.WATCH
        assert mine.is_held() and mate.is_held(), (mine.lost_cause, mate.lost_cause)

        try:
            await others.revoke_lease(
                name, "test revoke", fencing_token=mine.fencing_token, slot=mine.slot
            )
            ended: Session = mine
        except TenureError as err:
            # A server without slots in RevokeLease: end a slot by expiry
            # instead, once its holder stops renewing.
            assert err.reason is Reason.LEASE_NOT_FOUND, err
            ended = await sem.acquire("short", ttl=1)
            ended.pause_renewals()
        await asyncio.wait_for(ended.lost.wait(), WAIT)
        if ended is mine:
            assert mine.lost_cause is LossCause.WATCH
            assert mine.lost_event is not None and mine.lost_event.slot == mine.slot
            assert await mine.release() is False
        assert mate.is_held(), mate.lost_cause
        assert await mate.release() is True
