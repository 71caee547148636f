"""What a watch needs to survive a server restart: the reconnect backoff,
where the watch stands (the revision to resume after), and which stream
failures resume, start over or end the watch. Used by
:class:`~tenure_client.LeaseWatch` and the shared loss watch."""

from __future__ import annotations

import asyncio
import random

from ._errors import Reason, TenureError
from ._gen import lease_pb2

#: Reconnect backoff of a watch: capped exponential with jitter, from the
#: bottom again once a stream delivers an event.
WATCH_BACKOFF_MIN = 0.05
WATCH_BACKOFF_MAX = 5.0


class Backoff:
    """A capped exponential delay with jitter (a random time in [d/2, d])."""

    def __init__(self) -> None:
        self._next = WATCH_BACKOFF_MIN

    async def wait(self) -> None:
        delay = random.uniform(self._next / 2, self._next)
        self._next = min(self._next * 2, WATCH_BACKOFF_MAX)
        await asyncio.sleep(delay)  # reconnect backoff

    def reset(self) -> None:
        self._next = WATCH_BACKOFF_MIN


class ResumePoint:
    """Where a watch stands: the highest revision it saw, and whether that
    is a valid resume point (a snapshot was complete, or the stream itself
    was a resume)."""

    def __init__(self, revision: int = 0) -> None:
        self.revision = revision
        self.live = revision > 0

    def start(self) -> int:
        """The start_revision of the next stream (0: a fresh snapshot)."""
        return self.revision if self.live and self.revision > 0 else 0

    def see(self, event: lease_pb2.LeaseEvent) -> None:
        self.revision = max(self.revision, event.revision)
        if event.type == lease_pb2.EVENT_TYPE_SNAPSHOT_COMPLETE:
            self.live = True


def watch_step(err: TenureError) -> str:
    """What to do after a failed watch stream: "fresh" (reconnect at once
    with a snapshot) on WATCH_HISTORY_COMPACTED, "retry" (resume after a
    backoff) on a retryable error, else "stop" (permanent)."""
    if err.reason is Reason.WATCH_HISTORY_COMPACTED:
        return "fresh"
    return "retry" if err.retryable else "stop"
