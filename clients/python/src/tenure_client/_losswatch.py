"""The one shared watch per :class:`TenureClient` that signals loss at once.

A session learns from its renewals that it lost its lease, but only at the
next renewal. This watch follows the names of all live sessions of a client
with one WatchLease stream (the narrowest name or subtree covering them:
"jobs.a", "jobs.>", ">"), so a revoke, an expiry, a release by someone else
or another holder's token ends the session the moment the server reports
it. It reopens wider when a new session's name is not covered, reconnects
with backoff resuming after the last revision it saw (so a revoke while a
Tenure restarts is still seen; a fresh snapshot when the server cannot
resume), and closes with the last session. When the server refuses it (no ``watch``
grant, unauthenticated), it gives up for good and sessions fall back to
learning of a loss at their next renewal.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Dict, Iterable, List, Optional, Protocol, Set

import grpc
import grpc.aio

from ._conn import Connection
from ._errors import Reason, TenureError
from ._gen import lease_pb2
from ._resume import Backoff, ResumePoint
from ._types import EventType, LeaseEvent

_log = logging.getLogger("tenure_client")

#: Codes after which the watch is not retried: the server will not let this
#: caller watch, so sessions rely on their renewals.
_REFUSED = {
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INVALID_ARGUMENT,
}


def covers(cover: str, name: str) -> bool:
    """Whether watching `cover` (a name, "p.>" or ">") includes `name`."""
    if cover == ">":
        return True
    if cover.endswith(".>"):
        return name.startswith(cover[:-1])
    return cover == name


def cover_of(names: Iterable[str]) -> str:
    """The narrowest watch covering every name: the name when all are one,
    else the subtree of their longest common token prefix shorter than each
    name, else ">"."""
    names = list(names)
    if not names:
        return ">"
    if all(n == names[0] for n in names):
        return names[0]
    common = names[0].split(".")
    for n in names:
        parts = n.split(".")
        k = 0
        while k < len(common) and k < len(parts) and common[k] == parts[k]:
            k += 1
        common = common[: min(k, len(parts) - 1)]
    return ".".join(common) + ".>" if common else ">"


class Followed(Protocol):
    """What the watch follows: a :class:`~tenure_client.Session` (one
    holding) or a :class:`~tenure_client.GroupSession` (every member's)."""

    def _watch_names(self) -> tuple[str, ...]:
        """The names of its holdings."""
        ...

    def _holds(self, event: LeaseEvent) -> bool:
        """Whether a CURRENT snapshot event is one of its holdings."""
        ...

    def _observe(self, event: LeaseEvent) -> None:
        """Ends it when `event` shows one of its holdings gone."""
        ...

    def _lose_on_watch(self, event: Optional[LeaseEvent]) -> None:
        """Ends it: the watch saw a holding end (`event`, or its absence)."""
        ...


class LossWatch:
    """The shared watch of one client (see the module doc)."""

    def __init__(self, client: Connection) -> None:
        self._client = client
        self._sessions: Set[Followed] = set()
        self._cover = ""
        self._task: Optional[asyncio.Task[None]] = None
        #: Why the server refused the watch, once it did.
        self.refused: Optional[TenureError] = None
        self._closed = False
        #: Set once the current stream has delivered its snapshot (tests
        #: await it); cleared when the watch reopens.
        self.synced = asyncio.Event()

    def add(self, session: Followed) -> None:
        """Follows `session`, widening the watch if its name is not covered."""
        if self._closed or self.refused is not None:
            return
        self._sessions.add(session)
        if self._task is not None and all(
            covers(self._cover, n) for n in session._watch_names()
        ):
            return
        if self._task is not None:
            self._task.cancel()
        self._cover = cover_of(n for s in self._sessions for n in s._watch_names())
        self.synced = asyncio.Event()
        self._task = asyncio.create_task(self._run(self._cover), name="tenure-loss-watch")

    def remove(self, session: Followed) -> None:
        """Stops following `session`; the watch closes with the last one."""
        self._sessions.discard(session)
        if not self._sessions and self._task is not None:
            self._task.cancel()
            self._task, self._cover = None, ""

    async def close(self) -> None:
        """Stops the watch for good (the client is closing)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise

    def _covered(self, cover: str) -> List[Followed]:
        return [
            s for s in self._sessions if all(covers(cover, n) for n in s._watch_names())
        ]

    async def _run(self, cover: str) -> None:
        """Keeps one watch of `cover` open. After a failure it reconnects
        with backoff and resumes after the last revision it saw, so a loss
        while disconnected (e.g. across a Tenure restart) still arrives as an
        event. When the server cannot resume (WATCH_HISTORY_COMPACTED, or
        INVALID_ARGUMENT for a revision the bucket never had) it starts over
        with a fresh snapshot, in which every session alive when the stream
        opened must show up with its own token (else it ended unseen)."""
        backoff = Backoff()
        point = ResumePoint()
        while True:
            start = point.start()
            before: List[Followed] = []
            if start == 0:
                point = ResumePoint()
                before = self._covered(cover)
            call = self._client.stub.WatchLease(
                lease_pb2.WatchLeaseRequest(name=cover, start_revision=start),
                metadata=self._client._call_metadata(),
            )
            # The names of each session seen held in the snapshot.
            seen: Dict[Followed, Set[str]] = {}
            try:
                async for message in call:
                    backoff.reset()
                    proto = message.event
                    old = start > 0 and proto.revision <= point.revision
                    point.see(proto)
                    try:
                        event = LeaseEvent.from_proto(proto)
                    except ValueError:
                        continue  # an event type newer than this client
                    if event.type is EventType.SNAPSHOT_COMPLETE:
                        if cover == self._cover:
                            self.synced.set()
                        for s in before:
                            if seen.get(s, set()) != set(s._watch_names()):
                                s._lose_on_watch(None)
                        before = []
                        continue
                    if old:
                        continue
                    for s in [s for s in self._sessions if event.name in s._watch_names()]:
                        if event.type is EventType.CURRENT and s._holds(event):
                            seen.setdefault(s, set()).add(event.name)
                        s._observe(event)
                err: Optional[TenureError] = None
            except grpc.aio.AioRpcError as rpc_err:
                err = TenureError.from_rpc_error(
                    rpc_err, target=self._client.target, rpc="WatchLease"
                )
                if start > 0 and (
                    err.reason is Reason.WATCH_HISTORY_COMPACTED
                    or rpc_err.code() == grpc.StatusCode.INVALID_ARGUMENT
                ):
                    point = ResumePoint()  # cannot resume: a fresh snapshot next
                    continue
                if rpc_err.code() in _REFUSED:
                    _log.info("tenure: loss watch refused, renewals only: %s", err)
                    self.refused = err
                    return
            finally:
                call.cancel()
            _log.debug("tenure: loss watch of %r ended (%s); resuming", cover, err)
            await backoff.wait()
