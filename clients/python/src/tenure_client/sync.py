"""A synchronous API over the asyncio client, for code without an event loop.

:class:`TenureClient` here runs the asyncio :class:`tenure_client.TenureClient`
on an event loop in a background thread of its own, and every method blocks
until its call is done. Sessions renew, and the shared loss watch runs, on
that thread; :attr:`Session.lost` is a :class:`threading.Event`::

    from tenure_client.sync import TenureClient

    with TenureClient("127.0.0.1:7419") as client:
        with client.acquire("jobs.nightly", "worker-1", ttl=10) as lease:
            while lease.is_held():
                do_step(lease.fencing_token)
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Coroutine, Iterable, Iterator, Optional, TypeVar

from . import _client
from ._errors import TenureError
from ._session import Session as _AsyncSession
from ._types import EventType, Lease, LeaseEvent, Seconds

T = TypeVar("T")

_END = object()


class TenureClient:
    """A blocking client: the same arguments and methods as the asyncio
    :class:`tenure_client.TenureClient` (except ``channel``), without
    ``await``. Close it with :meth:`close` or ``with``."""

    def __init__(self, target: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tenure-client", daemon=True
        )
        self._thread.start()

        async def make() -> _client.TenureClient:
            return _client.TenureClient(target, **kwargs)

        self._client = self._run(make())
        self.target = self._client.target

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> "TenureClient":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        """Closes the asyncio client (live sessions stop renewing and expire)
        and stops the loop thread. Idempotent."""
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def acquire(self, name: str, holder: str, ttl: Seconds = 10.0, **kwargs: Any) -> "Session":
        """Takes the lease (see the asyncio ``acquire`` for the options,
        e.g. ``wait``) and returns a :class:`Session`; use it with ``with``
        to release it when the block ends.

        Raises:
            TenureError: e.g. LEASE_HELD when another holder has it.
        """

        async def go() -> tuple[_AsyncSession, threading.Event]:
            session = await self._client.acquire(name, holder, ttl, **kwargs)
            lost = threading.Event()

            async def mirror() -> None:
                await session.lost.wait()
                lost.set()

            session._mirror = asyncio.create_task(mirror())  # type: ignore[attr-defined]
            return session, lost

        session, lost = self._run(go())
        return Session(self, session, lost)

    def get(self, name: str, **kwargs: Any) -> Lease:
        """The current holding of `name` (LEASE_NOT_FOUND when free)."""
        return self._run(self._client.get(name, **kwargs))

    get_lease = get

    def list_leases(self, prefix: str = "", **kwargs: Any) -> list[Lease]:
        """Every held lease under `prefix` (the admin grant)."""
        return self._run(self._client.list_leases(prefix, **kwargs))

    def fence_keyset(self, **kwargs: Any) -> str:
        """The server's fence public keys in keyset text form (empty when it
        signs no proofs)."""
        return self._run(self._client.fence_keyset(**kwargs))

    def revoke_lease(self, name: str, reason: str, **kwargs: Any) -> int:
        """Ends the holding of `name` (the admin grant); returns the revision."""
        return self._run(self._client.revoke_lease(name, reason, **kwargs))

    def watch(
        self, name: str, *, event_types: Iterable[EventType] = (), start_revision: int = 0
    ) -> "Watch":
        """Watches a name or subtree: an iterator of :class:`LeaseEvent`
        (close it, or use ``with``). It reconnects and resumes like the
        asyncio ``watch``."""
        events: "queue.Queue[Any]" = queue.Queue()

        async def pump() -> None:
            watch = self._client.watch(
                name, event_types=event_types, start_revision=start_revision
            )
            try:
                async for event in watch:
                    events.put(event)
                events.put(_END)
            except asyncio.CancelledError:
                events.put(_END)
                raise
            except TenureError as err:
                events.put(err)
            finally:
                await watch.aclose()

        return Watch(events, asyncio.run_coroutine_threadsafe(pump(), self._loop))


class Watch:
    """A blocking iterator of :class:`LeaseEvent` (see :meth:`TenureClient.watch`)."""

    def __init__(self, events: "queue.Queue[Any]", future: Any) -> None:
        self._events = events
        self._future = future

    def __iter__(self) -> Iterator[LeaseEvent]:
        return self

    def __next__(self) -> LeaseEvent:
        item = self._events.get()
        if item is _END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Cancels the stream."""
        self._future.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


class Session:
    """A held lease (blocking view of the asyncio :class:`tenure_client.Session`).

    Attributes:
        lost: a :class:`threading.Event` set once the lease is lost or
            released (never cleared).
    """

    def __init__(self, client: TenureClient, session: _AsyncSession, lost: threading.Event) -> None:
        self._client = client
        self._session = session
        self.lost = lost

    def __getattr__(self, attr: str) -> Any:
        # name, holder, fencing_token, fence_proof, fence_headers(),
        # revision, lease_key, ttl, safe_deadline, lease, lost_cause,
        # lost_error, lost_event, lost_at
        return getattr(self._session, attr)

    def __repr__(self) -> str:
        return repr(self._session)

    def is_held(self) -> bool:
        """True until the lease is lost or released and while before the
        safe deadline (reads the clock itself)."""
        return self._session.is_held()

    def remaining(self) -> float:
        """Seconds until the safe deadline (0 once lost)."""
        return self._session.remaining()

    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the lease is lost or released (or `timeout`)."""
        return self.lost.wait(timeout)

    def renew(self, **kwargs: Any) -> Lease:
        """Renews now, besides the background renewals."""
        return self._client._run(self._session.renew(**kwargs))

    def release(self, **kwargs: Any) -> bool:
        """Releases the lease: True if this ended the holding, False when it
        was no longer held (lost, taken over, released), which is no error."""
        return self._client._run(self._session.release(**kwargs))

    def transfer(self, to: Optional[str] = None, **kwargs: Any) -> Lease:
        """Hands the holding to a waiting acquire (of holder `to`, or the
        first in line) and returns the recipient's lease; the session then
        ends as released (cause TRANSFERRED). NO_WAITER leaves it held."""
        return self._client._run(self._session.transfer(to, **kwargs))

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._client._run(self._session.__aexit__(exc_type, exc, tb))
