"""The one KeepAlive stream per :class:`TenureClient` that renews every live
:class:`Session` (leases and semaphore slots).

Renewals queued within a millisecond of each other go out in one request
message (sessions align their due times on a 50 ms grid, so those acquired
together come due together). Each entry's result is the renewed holding or
the :class:`TenureError` a unary Renew would have raised. The stream opens
with the first renewal and reopens after a break; the entries pending on a
broken stream fail with its error and their sessions retry as after a
failed unary Renew (the safe-deadline rule is unchanged). A server without
KeepAlive (UNIMPLEMENTED) turns the client to unary Renew calls for good; a
stream refused for another reason (credentials, stream limits, the idle
timeout) sends its pending renewals as unary Renew calls.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Deque, List, Optional, Tuple

import grpc
import grpc.aio

from ._conn import Connection
from ._errors import Reason, TenureError, parse_reason
from ._gen import lease_pb2
from ._types import Lease

_log = logging.getLogger("tenure_client")

#: How long the writer gathers renewals due at the same moment.
_LINGER = 0.001
#: The most entries in one request (the server's default limit is 1000).
_MAX_BATCH = 500

_CODES = {c.value[0]: c for c in grpc.StatusCode}


class UseUnary(Exception):
    """Renew with a unary call: the server has no KeepAlive, or refused the
    stream for a reason a unary Renew answers on its own."""


_Call = Tuple[lease_pb2.KeepAliveEntry, "asyncio.Future[Lease]"]


class _Stream:
    """One open KeepAlive call and its requests awaiting answers."""

    def __init__(self, owner: "KeepAlive") -> None:
        self.owner = owner
        client = owner._client
        self.call = client.stub.KeepAlive(metadata=client._call_metadata())
        self.pending: Deque[List[_Call]] = collections.deque()
        self.failed = False
        self.reader = asyncio.create_task(self._read(), name="tenure-keepalive-read")

    async def write(self, batch: List[_Call]) -> None:
        """Writes one request; a failed write ends the stream."""
        if self.failed:
            self.owner._deliver(batch, None)
            return
        self.pending.append(batch)
        try:
            await self.call.write(lease_pb2.KeepAliveRequest(entries=[e for e, _ in batch]))
            self.owner.requests += 1
            self.owner.entries += len(batch)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError) as err:
            _log.debug("tenure: KeepAlive write failed: %r", err)
            self.call.cancel()  # the reader fails what is pending

    async def _read(self) -> None:
        """Matches each response to the oldest pending request until the
        stream ends, then fails whatever is still pending."""
        target = self.owner._client.target
        error: Optional[TenureError] = None
        try:
            while True:
                message = await self.call.read()
                if message is grpc.aio.EOF:
                    break
                if not self.pending:
                    break
                batch = self.pending.popleft()
                results = list(message.results)
                for i, (entry, fut) in enumerate(batch):
                    if fut.done():
                        continue
                    if i >= len(results) or results[i].id != entry.id:
                        fut.set_exception(
                            TenureError(
                                Reason.ERROR_REASON_UNSPECIFIED,
                                "KeepAlive answered with results that do not match the request",
                                code=grpc.StatusCode.INTERNAL,
                                target=target,
                                rpc="KeepAlive",
                            )
                        )
                    elif results[i].HasField("error"):
                        e = results[i].error
                        fut.set_exception(
                            TenureError(
                                parse_reason(e.reason),
                                e.message,
                                code=_CODES.get(e.code, grpc.StatusCode.UNKNOWN),
                                metadata=dict(e.metadata),
                                raw_reason=e.reason,
                                target=target,
                                rpc="KeepAlive",
                            )
                        )
                    else:
                        fut.set_result(Lease.from_proto(results[i].lease))
        except grpc.aio.AioRpcError as err:
            error = TenureError.from_rpc_error(err, target=target, rpc="KeepAlive")
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.owner.unsupported = True
        except asyncio.CancelledError:
            error = TenureError(
                Reason.ERROR_REASON_UNSPECIFIED,
                "the KeepAlive stream was closed",
                code=grpc.StatusCode.CANCELLED,
                target=target,
                rpc="KeepAlive",
            )
        finally:
            self.failed = True
            self.call.cancel()
            while self.pending:
                self.owner._deliver(self.pending.popleft(), error)


class KeepAlive:
    """The shared renewal stream of one client (see the module doc).

    Attributes:
        unsupported: the server answered UNIMPLEMENTED: unary renewals only.
        streams, requests, entries: how many streams were opened, and how
            many request messages and entries were written (tests, logs).
    """

    def __init__(self, client: Connection) -> None:
        self._client = client
        self._queue: List[_Call] = []
        self._writer: Optional[asyncio.Task[None]] = None
        self._stream: Optional[_Stream] = None
        self._next_id = 0
        self._closed = False
        self.unsupported = False
        self.streams = 0
        self.requests = 0
        self.entries = 0

    async def renew(self, entry: lease_pb2.KeepAliveEntry, timeout: float) -> Lease:
        """Renews `entry` over the stream.

        Raises:
            TenureError: the entry's own error, or the stream's (retryable).
            UseUnary: renew this one with a unary Renew.
        """
        if self.unsupported or self._closed:
            raise UseUnary()
        self._next_id += 1
        entry.id = self._next_id
        fut: "asyncio.Future[Lease]" = asyncio.get_running_loop().create_future()
        self._queue.append((entry, fut))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="tenure-keepalive-write")
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a
        # cancellation that arrives as the result does, and a cancelled
        # renewal task must end (Session.release waits for it).
        try:
            async with asyncio.timeout(timeout):
                return await fut
        except TimeoutError:
            raise TenureError(
                Reason.ERROR_REASON_UNSPECIFIED,
                f"no KeepAlive result within {timeout:.3f} s",
                code=grpc.StatusCode.DEADLINE_EXCEEDED,
                target=self._client.target,
                rpc="KeepAlive",
            ) from None

    async def _write(self) -> None:
        """Writes the queued renewals, a batch per message, until none is
        left."""
        while self._queue:
            await asyncio.sleep(_LINGER)  # gather the renewals due now
            batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
            batch = [(e, f) for e, f in batch if not f.done()]
            if not batch:
                continue
            if self._stream is None or self._stream.failed:
                if self.unsupported or self._closed:
                    self._deliver(batch, None)
                    continue
                self._stream = _Stream(self)
                self.streams += 1
            await self._stream.write(batch)

    def _deliver(self, batch: List[_Call], error: Optional[TenureError]) -> None:
        """Ends each renewal of `batch` after its stream failed with
        `error`: retryable errors go back to the sessions, anything else
        (UNIMPLEMENTED, a refused stream, a clean end) means a unary Renew."""
        exc: Exception = error if error is not None and error.retryable else UseUnary()
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(exc)

    async def close(self) -> None:
        """Ends the stream for good (the client is closing)."""
        self._closed = True
        for task in (self._writer, self._stream.reader if self._stream else None):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
        self._deliver(self._queue, None)
        self._queue = []
