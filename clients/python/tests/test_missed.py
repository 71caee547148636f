"""MISSED events (a watch that did not see every change of a name) against a
scripted server: the shared loss watch ends a session, a semaphore slot or a
group whose own token a MISSED names (cause MISSED), and only then; a watch
passes MISSED on with its ``missed_after_revision``; the election observer
reports a MISSED change and the elector's term ends with it."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, List, Tuple

import grpc
import grpc.aio
import pytest

from tenure_client import EventType, Leader, LeaderElector, LossCause, TenureClient
from tenure_client import lease_pb2, lease_pb2_grpc
from tenure_client._gen import election_pb2, election_pb2_grpc

from conftest import WAIT

T = lease_pb2


def _missed(name: str, token: int, rev: int, slot: int = 0) -> Any:
    """A MISSED of `name` for `token` (0: unknown) at `rev`, after the
    stream last saw the name at revision 10."""
    return T.LeaseEvent(
        type=T.EVENT_TYPE_MISSED,
        name=name,
        slot=slot,
        fencing_token=token,
        revision=rev,
        missed_after_revision=10,
    )


def _revoked(name: str, token: int, rev: int, slot: int = 0) -> Any:
    return T.LeaseEvent(
        type=T.EVENT_TYPE_REVOKED, name=name, slot=slot, fencing_token=token, revision=rev
    )


class Fake(lease_pb2_grpc.LeaseServiceServicer, election_pb2_grpc.ElectionServiceServicer):
    """Grants the first Acquire (token 10 at revision 10; slot 2 for a
    semaphore) or AcquireGroup ("g.a" token 10, "g.b" token 11); its loss
    watch sends their snapshot, SNAPSHOT_COMPLETE, then `live`, and stays
    open. Later Acquires wait (a held election). Observe sends `changes`."""

    def __init__(self, live: List[Any], changes: Tuple[Any, ...] = ()) -> None:
        self.live = live
        self.changes = changes
        self.snapshot: List[Any] = []
        self.acquires = 0

    def _lease(self, name: str, holder: str, token: int, slot: int = 0) -> Any:
        lease = T.Lease(name=name, holder=holder, fencing_token=token, revision=token, slot=slot)
        lease.ttl.FromSeconds(30)
        return lease

    async def Acquire(self, request: Any, context: Any) -> Any:
        self.acquires += 1
        if self.acquires > 1:
            await asyncio.Event().wait()  # the election is held: wait to be cancelled
        slot = 2 if request.limit else 0
        lease = self._lease(request.name, request.holder, 10, slot)
        self.snapshot = [T.LeaseEvent(type=T.EVENT_TYPE_CURRENT, name=request.name,
                                      revision=10, fencing_token=10, slot=slot, lease=lease)]
        return T.AcquireResponse(lease=lease, lease_key="k" * 16)

    async def AcquireGroup(self, request: Any, context: Any) -> Any:
        leases = [self._lease("g.a", request.holder, 10), self._lease("g.b", request.holder, 11)]
        self.snapshot = [
            T.LeaseEvent(type=T.EVENT_TYPE_CURRENT, name=lease.name, revision=lease.revision,
                         fencing_token=lease.fencing_token, lease=lease)
            for lease in leases
        ]
        return T.AcquireGroupResponse(leases=leases, lease_key="k" * 16)

    async def Release(self, request: Any, context: Any) -> Any:
        return T.ReleaseResponse(revision=30)

    async def WatchLease(self, request: Any, context: Any) -> AsyncIterator[Any]:
        snap = T.LeaseEvent(type=T.EVENT_TYPE_SNAPSHOT_COMPLETE, revision=11)
        for event in [*self.snapshot, snap, *self.live]:
            yield T.WatchLeaseResponse(event=event)
        await asyncio.Event().wait()  # stay open until cancelled

    async def Observe(self, request: Any, context: Any) -> AsyncIterator[Any]:
        for change in self.changes:
            yield change
        await asyncio.Event().wait()


async def _serve(fake: Fake) -> Tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    lease_pb2_grpc.add_LeaseServiceServicer_to_server(fake, server)
    election_pb2_grpc.add_ElectionServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


# Each case: the live events after the snapshot, whether the session is a
# semaphore slot, and the cause it is lost with. A MISSED that does not name
# the session's holding leaves the REVOKED after it to end the session (a
# loss is final: the first cause is the one kept).
CASES = [
    ("own token", [_missed("jobs.m", 10, 14), _revoked("jobs.m", 10, 20)], False, LossCause.MISSED),
    ("another token", [_missed("jobs.m", 9, 14), _revoked("jobs.m", 10, 20)], False, LossCause.WATCH),
    ("no token", [_missed("jobs.m", 0, 14), _revoked("jobs.m", 10, 20)], False, LossCause.WATCH),
    ("another name", [_missed("jobs.x", 10, 14), _revoked("jobs.m", 10, 20)], False, LossCause.WATCH),
    ("own slot", [_missed("jobs.m", 10, 14, 2), _revoked("jobs.m", 10, 20, 2)], True, LossCause.MISSED),
    ("another slot", [_missed("jobs.m", 10, 14, 1), _revoked("jobs.m", 10, 20, 2)], True, LossCause.WATCH),
]


@pytest.mark.parametrize("live,semaphore,cause", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_loss_watch_missed(live: List[Any], semaphore: bool, cause: LossCause) -> None:
    server, target = await _serve(Fake(live))
    try:
        async with TenureClient(target) as client:
            if semaphore:
                session = await client.semaphore("jobs.m", 3).acquire("me", ttl=30, renew_fraction=0.8)
            else:
                session = await client.acquire("jobs.m", "me", ttl=30, renew_fraction=0.8)
            await asyncio.wait_for(session.lost.wait(), WAIT)
            assert session.lost_cause is cause
            assert not session.is_held()
            expected = EventType.MISSED if cause is LossCause.MISSED else EventType.REVOKED
            assert session.lost_event is not None and session.lost_event.type is expected
            if cause is LossCause.MISSED:
                assert session.lost_event.missed_after_revision == 10
                assert await session.release() is False  # lost: nothing to release
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    "live,cause",
    [
        ([_missed("g.b", 11, 14), _revoked("g.a", 10, 20)], LossCause.MISSED),
        ([_missed("g.b", 10, 14), _revoked("g.a", 10, 20)], LossCause.WATCH),
    ],
    ids=["member token", "another token"],
)
async def test_group_loss_watch_missed(live: List[Any], cause: LossCause) -> None:
    server, target = await _serve(Fake(live))
    try:
        async with TenureClient(target) as client:
            group = await client.acquire_group(["g.a", "g.b"], "me", ttl=30, renew_fraction=0.8)
            await asyncio.wait_for(group.lost.wait(), WAIT)
            assert group.lost_cause is cause
    finally:
        await server.stop(None)


async def test_watch_delivers_missed() -> None:
    """MISSED is passed on (whatever event_types asked for) with its
    missed_after_revision; other events carry 0."""
    fake = Fake(
        [
            T.LeaseEvent(type=T.EVENT_TYPE_MISSED, name="a", holder="h", fencing_token=5,
                         revision=9, missed_after_revision=5),
            T.LeaseEvent(type=T.EVENT_TYPE_ACQUIRED, name="a", fencing_token=9, revision=9),
        ]
    )
    server, target = await _serve(fake)
    try:
        async with TenureClient(target) as client:
            async with client.watch("a", event_types=[EventType.ACQUIRED]) as watch:
                first = await asyncio.wait_for(watch.__anext__(), WAIT)
                assert first.type is EventType.SNAPSHOT_COMPLETE
                missed = await asyncio.wait_for(watch.__anext__(), WAIT)
                acquired = await asyncio.wait_for(watch.__anext__(), WAIT)
        assert (missed.type, str(missed.type), missed.name, missed.holder) == (
            EventType.MISSED, "MISSED", "a", "h",
        )
        assert (missed.fencing_token, missed.revision, missed.missed_after_revision) == (5, 9, 5)
        assert (acquired.type, acquired.missed_after_revision) == (EventType.ACQUIRED, 0)
    finally:
        await server.stop(None)


def test_event_types_match_the_proto() -> None:
    """Every proto EventType (but UNSPECIFIED) is an EventType member of the
    same name and value, and there is no other: a type added to the proto
    without one fails here."""
    proto = {
        name.removeprefix("EVENT_TYPE_"): number
        for name, number in T.EventType.items()
        if number != T.EVENT_TYPE_UNSPECIFIED
    }
    assert {t.name: int(t) for t in EventType} == proto
    assert str(EventType.MISSED) == "MISSED"


async def test_elector_stops_on_missed() -> None:
    """A leader whose term a MISSED (its token) ends stops leading: its
    on_started_leading task is cancelled and on_stopped_leading runs. The
    observer gets the MISSED change as a Leader with ``missed`` set."""
    leadership = election_pb2.Leadership(name="jobs.m", holder="node-a", value="v",
                                         fencing_token=10, revision=10)
    changes = (
        election_pb2.ObserveResponse(type=election_pb2.CHANGE_TYPE_CURRENT, leader=leadership,
                                     revision=10),
        election_pb2.ObserveResponse(type=election_pb2.CHANGE_TYPE_MISSED, ended_holder="node-a",
                                     ended_fencing_token=10, revision=14),
    )
    server, target = await _serve(Fake([_missed("jobs.m", 10, 14)], changes))
    started: asyncio.Queue[Any] = asyncio.Queue()
    stopped: asyncio.Queue[None] = asyncio.Queue()
    leaders: asyncio.Queue[Leader] = asyncio.Queue()

    async def lead(term: Any) -> None:
        await started.put(term)
        await asyncio.Event().wait()  # until cancelled

    try:
        async with TenureClient(target) as client:
            elector = LeaderElector(
                client, "jobs.m", "node-a", value="v", ttl=30, renew_fraction=0.8,
                on_started_leading=lead,
                on_stopped_leading=lambda: stopped.put_nowait(None),
                on_new_leader=leaders.put_nowait,
            )
            task = asyncio.create_task(elector.run())
            term = await asyncio.wait_for(started.get(), WAIT)
            await asyncio.wait_for(stopped.get(), WAIT)
            assert term.lost_cause is LossCause.MISSED
            assert await asyncio.wait_for(leaders.get(), WAIT) == Leader("node-a", "v", 10)
            missed = await asyncio.wait_for(leaders.get(), WAIT)
            assert missed == Leader(missed=True, ended_identity="node-a", ended_fencing_token=10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        await server.stop(None)
