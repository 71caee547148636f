"""The :class:`TenureClient`: a grpc.aio channel to Tenure with lease helpers."""

from __future__ import annotations

import time
import weakref
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

import grpc
import grpc.aio

from ._errors import TenureError
from ._gen import lease_pb2, lease_pb2_grpc
from ._session import Session
from ._types import EventType, Lease, LeaseEvent, Seconds, to_duration, to_seconds

#: Deadline of a unary call, on top of an Acquire's wait.
DEFAULT_CALL_TIMEOUT = 10.0
#: Default fraction of the TTL after which a session renews.
DEFAULT_RENEW_FRACTION = 1 / 3


class TenureClient:
    """A connection to a Tenure server, over a :mod:`grpc.aio` channel.

    Create it inside a running event loop (grpc.aio channels belong to one
    loop), and close it with :meth:`close` or ``async with``::

        async with TenureClient("127.0.0.1:7419") as client:
            async with client.acquire("jobs.nightly", "worker-1", ttl=10) as s:
                ...

    Args:
        target: the server address ("host:port"), for a channel of its own.
        channel: an existing ``grpc.aio.Channel`` to use instead (the client
            then does not close it).
        credentials: TLS credentials for `target`; plaintext when absent.
        options: extra channel options for `target`.

    Attributes:
        stub: the generated ``LeaseServiceStub`` for raw calls.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Sequence[Tuple[str, Any]] = (),
    ) -> None:
        if (target is None) == (channel is None):
            raise ValueError("give exactly one of target and channel")
        self._owns_channel = channel is None
        if channel is None:
            assert target is not None
            if credentials is not None:
                channel = grpc.aio.secure_channel(target, credentials, options=options)
            else:
                channel = grpc.aio.insecure_channel(target, options=options)
        self._channel = channel
        self.stub = lease_pb2_grpc.LeaseServiceStub(channel)
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()

    async def __aenter__(self) -> "TenureClient":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.close()

    async def close(self) -> None:
        """Stops the renewals of every session still live (they are marked
        lost with cause CLOSED and expire on the server at their TTL; release
        them first to end them at once), then closes the channel if this
        client opened it."""
        for session in list(self._sessions):
            await session._abandon()
        if self._owns_channel:
            await self._channel.close()

    # ---- leases ------------------------------------------------------------

    def acquire(
        self,
        name: str,
        holder: str,
        ttl: Seconds = 10.0,
        *,
        wait: Optional[Seconds] = None,
        lease_key: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        safety_margin: Optional[Seconds] = None,
        timeout: Optional[float] = None,
    ) -> "AcquireContext":
        """Takes the lease `name` for `holder` and starts renewing it.

        Await the result for a :class:`Session`, or use it directly with
        ``async with`` to release the lease when the block ends.

        Args:
            name: the lease name ("." separates levels, e.g. "jobs.nightly").
            holder: who is taking it (free text, e.g. host and pid).
            ttl: requested time to live, seconds or timedelta; the server
                rounds it up to whole seconds and to its minimum.
            wait: how long the server may wait for a held lease to become
                free; absent: fail at once with LEASE_HELD.
            lease_key: the ownership secret (16-256 printable ASCII); absent:
                the server mints one (see :attr:`Session.lease_key`). Reusing
                a key makes a retried acquire return the same holding.
            metadata: small key/value map stored with the lease.
            renew_fraction: renew every ``ttl * renew_fraction`` (default 1/3).
            safety_margin: seconds taken off the granted TTL for the safe
                deadline; default: a tenth of the granted TTL.
            timeout: deadline of the Acquire call in seconds; default
                ``wait + 10``.

        Raises:
            TenureError: with reason LEASE_HELD when another holder has it
                (``metadata`` names the holder), INVALID_* for bad arguments,
                UNKNOWN/UNAVAILABLE codes when the server cannot be reached.
            ValueError: renew_fraction not in (0, 1), or safety_margin
                negative or too large to renew before the safe deadline.
        """
        ttl_s = to_seconds(ttl)
        margin = None if safety_margin is None else to_seconds(safety_margin)
        if not 0 < renew_fraction < 1:
            raise ValueError("renew_fraction must be between 0 and 1")
        effective_margin = ttl_s / 10 if margin is None else margin
        if not 0 <= effective_margin < ttl_s * (1 - renew_fraction):
            raise ValueError(
                "renewals must come before the safe deadline: "
                "need 0 <= safety_margin < ttl * (1 - renew_fraction)"
            )

        return AcquireContext(
            self._acquire(
                name, holder, ttl_s, wait, lease_key, metadata, renew_fraction, margin, timeout
            )
        )

    async def _acquire(
        self,
        name: str,
        holder: str,
        ttl_s: float,
        wait: Optional[Seconds],
        lease_key: Optional[str],
        metadata: Optional[Mapping[str, str]],
        renew_fraction: float,
        margin: Optional[float],
        timeout: Optional[float],
    ) -> Session:
        request = lease_pb2.AcquireRequest(
            name=name,
            holder=holder,
            ttl=to_duration(ttl_s),
            lease_key=lease_key or "",
            metadata=dict(metadata or {}),
        )
        wait_s = 0.0
        if wait is not None:
            wait_s = to_seconds(wait)
            request.wait.CopyFrom(to_duration(wait_s))
        if timeout is None:
            timeout = wait_s + DEFAULT_CALL_TIMEOUT
        sent = time.monotonic()
        reply = await self._unary(self.stub.Acquire, request, timeout)
        session = Session(
            self,
            Lease.from_proto(reply.lease),
            reply.lease_key,
            sent,
            renew_fraction=renew_fraction,
            safety_margin=margin,
        )
        if time.monotonic() >= session._next_renew_at:
            # After a long wait, the server's TTL started well after `sent`
            # but the safe deadline counts from `sent`: renew once now to
            # count it from a recent send time.
            try:
                await session._renew_once(timeout=DEFAULT_CALL_TIMEOUT)
            except TenureError as err:
                if not err.retryable or not session.is_held():
                    raise
        self._sessions.add(session)
        session._start()
        return session

    async def get(self, name: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> Lease:
        """The current holding of `name`.

        Raises:
            TenureError: reason LEASE_NOT_FOUND when nobody holds it.
        """
        reply = await self._unary(
            self.stub.GetLease, lease_pb2.GetLeaseRequest(name=name), timeout
        )
        return Lease.from_proto(reply.lease)

    def watch(self, name: str, *, event_types: Iterable[EventType] = ()) -> "LeaseWatch":
        """Watches one lease name, or a subtree ("jobs.>"; ">" for all).

        Returns an async iterator of :class:`LeaseEvent`: first a CURRENT
        event per lease held now, then one SNAPSHOT_COMPLETE, then every
        change (ACQUIRED, RENEWED, RELEASED, EXPIRED, REVOKED). Close it with
        ``async with`` or :meth:`LeaseWatch.aclose`::

            async with client.watch("jobs.>") as events:
                async for event in events:
                    ...

        Args:
            event_types: keep only these kinds (SNAPSHOT_COMPLETE always comes).

        Raises (while iterating):
            TenureError: the stream failed (e.g. SHUTTING_DOWN).
        """
        request = lease_pb2.WatchLeaseRequest(
            name=name, event_types=[int(t) for t in event_types]
        )
        return LeaseWatch(self.stub.WatchLease(request))

    # ---- internals ---------------------------------------------------------

    @staticmethod
    async def _unary(method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        """Calls a unary method, turning gRPC failures into TenureError."""
        try:
            return await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as err:
            raise TenureError.from_rpc_error(err) from err


class AcquireContext(Coroutine[Any, Any, Session]):
    """What :meth:`TenureClient.acquire` returns: a coroutine giving a
    :class:`Session` (await it, or pass it to :func:`asyncio.create_task` or
    :func:`asyncio.gather`), which can also be entered with ``async with`` to
    get the session and release it when the block ends."""

    def __init__(self, coro: Coroutine[Any, Any, Session]) -> None:
        self._coro = coro
        self._session: Optional[Session] = None

    def send(self, value: Any) -> Any:
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Session]:
        return self._coro.__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._coro
        return self._session

    async def __aexit__(self, exc_type, exc, tb) -> None:
        assert self._session is not None
        await self._session.__aexit__(exc_type, exc, tb)


class LeaseWatch:
    """An async iterator of :class:`LeaseEvent` over one WatchLease stream.

    Iteration ends when the server ends the stream cleanly; a failed stream
    raises :class:`TenureError`. :meth:`aclose` (or leaving ``async with``)
    cancels the stream.
    """

    def __init__(self, call: grpc.aio.UnaryStreamCall) -> None:
        self._call = call

    def __aiter__(self) -> AsyncIterator[LeaseEvent]:
        return self

    async def __anext__(self) -> LeaseEvent:
        while True:
            try:
                message = await self._call.read()
            except grpc.aio.AioRpcError as err:
                raise TenureError.from_rpc_error(err) from err
            if message is grpc.aio.EOF:
                raise StopAsyncIteration
            try:
                return LeaseEvent.from_proto(message.event)
            except ValueError:
                continue  # an event type newer than this client: skip it

    async def aclose(self) -> None:
        """Cancels the stream."""
        self._call.cancel()

    async def __aenter__(self) -> "LeaseWatch":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.aclose()
