"""Leader election helpers against a real Tenure: hand-over on resignation,
a revoked leader stops and campaigns again, proclaim, leader, and a leader
handing over to a candidate of a higher preference."""

from __future__ import annotations

import asyncio

import pytest

from conftest import WAIT
from tenure_client import (
    Leader,
    LeaderElector,
    Reason,
    TenureClient,
    TenureError,
    elect,
    leader,
    proclaim,
)


class Participant:
    """One LeaderElector and what its callbacks saw."""

    def __init__(self, client: TenureClient, name: str, identity: str, leading: set) -> None:
        self.identity = identity
        self.started: asyncio.Queue[int] = asyncio.Queue()
        self.stopped: asyncio.Queue[str] = asyncio.Queue()
        self.leaders: asyncio.Queue[Leader] = asyncio.Queue()
        self.leading = leading
        self.max_leading = 0
        self.elector = LeaderElector(
            client,
            name,
            identity,
            value=f"{identity}:5432",
            ttl=10,
            on_started_leading=self.lead,
            on_stopped_leading=lambda: self.stopped.put_nowait(identity),
            on_new_leader=self.leaders.put_nowait,
        )
        self.task = asyncio.create_task(self.elector.run())

    async def lead(self, term) -> None:
        self.leading.add(self.identity)
        self.max_leading = max(self.max_leading, len(self.leading))
        self.started.put_nowait(term.fencing_token)
        try:
            await asyncio.Event().wait()  # lead until cancelled
        finally:
            self.leading.discard(self.identity)

    async def leader_is(self, identity: str) -> Leader:
        while True:
            seen = await asyncio.wait_for(self.leaders.get(), WAIT)
            if seen.identity == identity:
                return seen

    async def stop(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


async def test_hand_over_on_resign(server, name) -> None:
    leading: set = set()
    async with TenureClient(server.target) as ca, TenureClient(server.target) as cb:
        a = Participant(ca, name, "node-a", leading)
        token_a = await asyncio.wait_for(a.started.get(), WAIT)
        await a.leader_is("node-a")
        b = Participant(cb, name, "node-b", leading)
        seen = await b.leader_is("node-a")
        assert (seen.value, seen.fencing_token) == ("node-a:5432", token_a)
        assert (await leader(cb, name)).identity == "node-a"

        await a.stop()
        assert await asyncio.wait_for(a.stopped.get(), WAIT) == "node-a"
        token_b = await asyncio.wait_for(b.started.get(), WAIT)
        assert token_b > token_a
        await b.leader_is("node-b")
        await b.stop()
        assert await asyncio.wait_for(b.stopped.get(), WAIT) == "node-b"
        assert max(a.max_leading, b.max_leading) == 1
        assert await leader(ca, name) == Leader()


async def test_revoked_leader_stops_and_campaigns_again(server, client, name) -> None:
    p = Participant(client, name, "node-a", set())
    first = await asyncio.wait_for(p.started.get(), WAIT)
    async with TenureClient(server.target) as admin:
        await admin.revoke_lease(name, reason="test", fencing_token=first)
    assert await asyncio.wait_for(p.stopped.get(), WAIT) == "node-a"
    second = await asyncio.wait_for(p.started.get(), WAIT)
    assert second > first
    await p.stop()
    await asyncio.wait_for(p.stopped.get(), WAIT)


async def test_proclaim(server, client, name) -> None:
    term = await elect(client, name, "node-a", "10.0.0.1:5432", ttl=10)
    await proclaim(term, "10.0.0.1:6432")
    now = await leader(client, name)
    assert now == Leader("node-a", "10.0.0.1:6432", term.fencing_token)
    await term.renew()  # renews from the proclaimed revision
    async with TenureClient(server.target) as admin:
        await admin.revoke_lease(name, reason="test")
    await asyncio.wait_for(term.lost.wait(), WAIT)
    with pytest.raises(TenureError) as err:
        await proclaim(term, "x")
    assert err.value.reason == Reason.LEASE_NOT_HELD


async def test_leader_hands_over_to_a_candidate_of_higher_preference(server, name) -> None:
    """node-a (preference 1) leads; node-b (preference 2) campaigns and leads
    at once: node-a's term (TTL 30 s, longer than any wait here, so a
    takeover at expiry would fail the test) is handed over, node-a stopped
    before node-b started, and node-b's token is greater. Neither elector
    has an on_new_leader callback: the elector follows Observe anyway."""
    log: list[tuple] = []
    started: dict[str, asyncio.Queue[int]] = {"node-a": asyncio.Queue(), "node-b": asyncio.Queue()}

    def elector(client: TenureClient, identity: str, preference: int) -> LeaderElector:
        async def lead(term) -> None:
            log.append((identity, "started", term.fencing_token))
            started[identity].put_nowait(term.fencing_token)
            await asyncio.Event().wait()  # lead until cancelled

        return LeaderElector(
            client,
            name,
            identity,
            ttl=30,
            preference=preference,
            on_started_leading=lead,
            on_stopped_leading=lambda: log.append((identity, "stopped")),
        )

    async with TenureClient(server.target) as ca, TenureClient(server.target) as cb:
        task_a = asyncio.create_task(elector(ca, "node-a", 1).run())
        task_b = None
        try:
            token_a = await asyncio.wait_for(started["node-a"].get(), WAIT)
            task_b = asyncio.create_task(elector(cb, "node-b", 2).run())
            token_b = await asyncio.wait_for(started["node-b"].get(), WAIT)
            assert log[:3] == [
                ("node-a", "started", token_a),
                ("node-a", "stopped"),
                ("node-b", "started", token_b),
            ]
            assert token_b > token_a
            now = await leader(ca, name)
            assert (now.identity, now.fencing_token) == ("node-b", token_b)
        finally:
            for task in (task_b, task_a):
                if task is not None:
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
