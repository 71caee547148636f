"""Leader election over Tenure, in the shape of client-go's leaderelection.

An election is the lease of the same name (``tenure.v1.ElectionService``), so
a term is a :class:`Session`: its fencing token is the term's token, it is
renewed in the background, and it is lost at its safe deadline or as soon as
the server or the shared watch says so. :class:`LeaderElector` campaigns,
runs ``on_started_leading`` as a task that is cancelled when the term ends,
calls ``on_stopped_leading`` once per term, reports every new leader through
``on_new_leader`` (from ``Observe``), hands over to a waiting candidate of a
higher ``preference`` than its own, and resigns when it is stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Optional, Union

import grpc

from ._errors import Reason, TenureError
from ._gen import election_pb2, election_pb2_grpc
from ._session import Session, _cause_of
from ._types import Seconds, to_seconds

if TYPE_CHECKING:
    from ._client import TenureClient

_log = logging.getLogger("tenure_client")

#: The lease metadata key that holds a leader's value.
VALUE_KEY = "value"


@dataclass(frozen=True)
class Leader:
    """Who leads an election.

    Attributes:
        identity: the leader's holder name; "" when nobody leads.
        value: what the leader published (e.g. its address).
        fencing_token: the term's token; 0 when nobody leads.
        missed: True for an Observe change of type MISSED: the stream did
            not see every change of the election (its server's watcher fell
            behind), so who leads is unknown until the next change; the
            leader in ``ended_identity``/``ended_fencing_token`` (when known,
            token != 0) no longer leads, and other terms may have come and
            gone. ``identity``, ``value`` and ``fencing_token`` are empty.
        ended_identity: when ``missed``, the leader known to have ended
            ("" when unknown).
        ended_fencing_token: when ``missed``, that term's token (0 when
            unknown).
    """

    identity: str = ""
    value: str = ""
    fencing_token: int = 0
    missed: bool = False
    ended_identity: str = ""
    ended_fencing_token: int = 0

    @staticmethod
    def from_proto(msg: Optional[election_pb2.Leadership]) -> "Leader":
        if msg is None:
            return Leader()
        return Leader(msg.holder, msg.value, msg.fencing_token)

    @staticmethod
    def from_change(msg: election_pb2.ObserveResponse) -> "Leader":
        """Who leads after an Observe change (a MISSED one: unknown)."""
        if msg.type == election_pb2.CHANGE_TYPE_MISSED:
            return Leader(
                missed=True,
                ended_identity=msg.ended_holder,
                ended_fencing_token=msg.ended_fencing_token,
            )
        return Leader.from_proto(msg.leader if msg.HasField("leader") else None)


def _stub(client: "TenureClient") -> election_pb2_grpc.ElectionServiceStub:
    stub = getattr(client, "_election_stub", None)
    if stub is None:
        stub = election_pb2_grpc.ElectionServiceStub(client._channel)
        client._election_stub = stub  # type: ignore[attr-defined]
    return stub


async def _call(client: "TenureClient", rpc: str, request: Any, timeout: float) -> Any:
    try:
        return await getattr(_stub(client), rpc)(
            request, timeout=timeout, metadata=client._call_metadata()
        )
    except grpc.aio.AioRpcError as err:
        raise TenureError.from_rpc_error(err, target=client.target, rpc=rpc) from err


async def elect(
    client: "TenureClient",
    name: str,
    identity: str,
    value: str = "",
    *,
    ttl: Seconds = 10.0,
    wait: Optional[Seconds] = None,
    **acquire_options: Any,
) -> "Session":
    """Campaigns once: waits up to `wait` for `name` to have no leader, then
    makes `identity` its leader publishing `value`. Returns the term as a
    :class:`Session` (``release()`` resigns). Raises TenureError LEASE_HELD
    when the wait ran out with another leader."""
    return await client.acquire(
        name, identity, ttl, wait=wait, metadata={VALUE_KEY: value}, **acquire_options
    )


async def proclaim(term: "Session", value: str, *, timeout: float = 5.0) -> None:
    """Replaces the value the term's leader publishes, without a new term.

    Raises:
        TenureError: LEASE_NOT_HELD when the term has ended (the session is
            then marked lost).
    """
    if term.lost.is_set():
        raise TenureError(
            Reason.LEASE_NOT_HELD,
            f"the term of {term.name!r} has ended ({term.lost_cause.value})",
        )
    request = election_pb2.ProclaimRequest(
        name=term.name,
        expected_revision=term.revision,
        lease_key=term.lease_key,
        value=value,
    )
    sent = time.monotonic()
    try:
        reply = await _call(term._client, "Proclaim", request, timeout)
    except TenureError as err:
        if not err.retryable:
            term._lose(_cause_of(err), err)
        raise
    leadership = reply.leadership
    if not term.lost.is_set() and leadership.revision > term.revision:
        lease = term.lease
        metadata = dict(lease.metadata)
        metadata[VALUE_KEY] = value
        ttl = leadership.ttl.seconds + leadership.ttl.nanos / 1e9 or lease.ttl
        updated = dataclasses.replace(
            lease, revision=leadership.revision, metadata=metadata, ttl=ttl
        )
        term._update(updated, sent)


async def leader(client: "TenureClient", name: str, *, timeout: float = 5.0) -> Leader:
    """Who leads `name` now (an empty :class:`Leader` when nobody does)."""
    try:
        reply = await _call(client, "Leader", election_pb2.LeaderRequest(name=name), timeout)
    except TenureError as err:
        if err.reason == Reason.LEASE_NOT_FOUND:
            return Leader()
        raise
    return Leader.from_proto(reply.leadership if reply.HasField("leadership") else None)


Callback = Callable[..., Union[None, Awaitable[None]]]


class LeaderElector:
    """Takes part in an election until :meth:`run` is cancelled.

    ``on_started_leading(term)`` is an async function run as a task while
    this participant leads; it is cancelled when the term ends (its safe
    deadline, a revoke or expiry seen by the server or the watch, or
    :meth:`run` being cancelled). The rule: **stop acting as leader when it is
    cancelled, and pass ``term.fencing_token`` with every downstream write.**
    :meth:`resign_to` hands the leadership to a waiting candidate.
    ``on_stopped_leading()`` is called once per term after that task ended
    (once per ``on_started_leading`` call: a failed :meth:`resign_to` leads
    the same term again);
    ``on_new_leader(leader)`` with every change of leader (a :class:`Leader`,
    empty for "nobody", with ``missed`` set when the Observe stream missed
    changes and who leads is unknown until the next call). A term the
    client's watch says was missed (a MISSED naming its token) ends: the
    term is a :class:`Session`, lost with cause MISSED. Callbacks other than ``on_started_leading`` may be
    plain or async functions; an exception from ``on_new_leader`` is logged
    (logger ``tenure_client``) and the elector keeps following Observe.

    **Preference.** The elector campaigns with ``preference`` (0 to
    2**32 - 1; default 0) and always follows ``Observe`` (with or without
    ``on_new_leader``), remembering the preferred candidate it names: the
    waiting candidate of the highest preference above 0, the earliest of
    equals. While it leads, including the moment it starts leading with one
    already named, a preferred candidate whose preference is greater than
    the elector's own gets the leadership through :meth:`resign_to`: the
    ``on_started_leading`` task is cancelled and awaited and
    ``on_stopped_leading`` has run before the successor can start leading,
    the successor leads from the write that ends this term (no moment
    without a leader) with a greater fencing token, and this elector
    campaigns again. If that hand-over fails (NO_WAITER: the candidate
    left), the elector leads the same term again and tries again only when
    Observe names a candidate anew, never in a loop. A change of the
    preferred candidate alone does not call ``on_new_leader``. For a
    rolling update, campaign with the deployment's generation as the
    preference: the first candidate of the new version takes over once,
    and candidates of equal preference never displace each other.

    Example::

        elector = LeaderElector(client, "db.primary", "node-1", value="10.0.0.1:5432",
                                on_started_leading=lead, on_stopped_leading=stopped)
        task = asyncio.create_task(elector.run())
        ...
        task.cancel()   # resigns: the next participant leads at once
    """

    def __init__(
        self,
        client: "TenureClient",
        name: str,
        identity: str,
        *,
        on_started_leading: Callable[["Session"], Awaitable[None]],
        on_stopped_leading: Callback,
        on_new_leader: Optional[Callback] = None,
        value: str = "",
        ttl: Seconds = 10.0,
        campaign_wait: Seconds = 30.0,
        preference: int = 0,
        **acquire_options: Any,
    ) -> None:
        if not name or not identity:
            raise ValueError("LeaderElector needs a name and an identity")
        if not 0 <= preference <= 0xFFFFFFFF:
            raise ValueError("preference must be between 0 and 2**32 - 1")
        self.client = client
        self.name = name
        self.identity = identity
        self.value = value
        self.ttl = to_seconds(ttl)
        self.campaign_wait = to_seconds(campaign_wait)
        #: The preference this elector campaigns with (see the class doc).
        self.preference = preference
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._acquire_options = acquire_options
        #: The current term while leading, else None.
        self.term: Optional["Session"] = None
        # resign_to requests for the period of leading under way (None when
        # not leading), and the event that wakes _lead_once for them.
        self._requests: Optional[list[_Handover]] = None
        self._asked = asyncio.Event()
        # The preferred candidate Observe named last (None: none waits), how
        # many Observe messages named one, and the naming last handed over
        # to: one try per naming, so a failed hand-over is not repeated
        # until Observe names a candidate again.
        self._preferred: Optional[_Candidate] = None
        self._namings = 0
        self._tried = 0

    async def run(self) -> None:
        """Campaigns, leads, and campaigns again after each term, until
        cancelled (then resigns a term it holds and re-raises
        CancelledError). Returns early only by raising a permanent
        TenureError (arguments, credentials, grants)."""
        observer = asyncio.create_task(self._observe(), name=f"tenure-observe:{self.name}")
        backoff = 0.1
        try:
            while True:
                try:
                    term = await elect(
                        self.client,
                        self.name,
                        self.identity,
                        self.value,
                        ttl=self.ttl,
                        wait=self.campaign_wait,
                        preference=self.preference,
                        **self._acquire_options,
                    )
                except TenureError as err:
                    if err.reason == Reason.LEASE_HELD:
                        continue
                    if not err.retryable:
                        raise
                    await asyncio.sleep(backoff * (1 + random.random() / 2))
                    backoff = min(backoff * 2, 5.0)
                    continue
                backoff = 0.1
                await self._lead(term)
        finally:
            observer.cancel()
            await asyncio.gather(observer, return_exceptions=True)

    async def resign_to(self, successor: Optional[str] = None, *, timeout: float = 5.0) -> Leader:
        """Hands the leadership to a waiting candidate, with no moment without
        a leader (``ElectionService.Resign`` with a successor): to the
        candidate whose identity is `successor`, or, with ``None``, to the
        earliest waiting one. Returns the successor, whose fencing token is
        greater.

        Before the hand-over is sent this leader stops: the
        ``on_started_leading`` task is cancelled and awaited, then
        ``on_stopped_leading`` runs; so the successor cannot start leading
        before this leader stopped, and ``on_stopped_leading`` has run when
        this returns. The term then ends as handed over (its session's
        ``lost_cause`` is TRANSFERRED) and the elector campaigns again
        (cancel :meth:`run` to leave the election instead).

        Raises:
            TenureError: NO_WAITER when the successor does not wait: the
                leader keeps the term and leads it again
                (``on_started_leading`` is called anew with it); the same for
                any other failure while the term is still held.
                LEASE_NOT_HELD, without a call, when this elector does not
                lead.
        """
        requests = self._requests
        if requests is None:
            raise TenureError(
                Reason.LEASE_NOT_HELD,
                f"{self.identity!r} does not lead {self.name!r}",
            )
        request = _Handover(successor, timeout, asyncio.get_running_loop().create_future())
        requests.append(request)
        self._asked.set()
        return await request.future

    async def _lead(self, term: "Session") -> None:
        self.term = term
        try:
            while True:
                request = await self._lead_once(term)
                if request is None:
                    return
                # The leader has stopped (its task ended, on_stopped ran):
                # hand the term over.
                try:
                    successor = await self._hand_over(term, request)
                except BaseException as err:
                    if not request.future.done():
                        if isinstance(err, asyncio.CancelledError):
                            request.future.cancel()
                        else:
                            request.future.set_exception(err)
                    if term.is_held() and not isinstance(err, asyncio.CancelledError):
                        continue  # NO_WAITER (or a failed call): lead the term again
                    await asyncio.shield(self._resign(term))
                    if isinstance(err, asyncio.CancelledError):
                        raise
                    return
                if not request.future.done():
                    request.future.set_result(successor)
                return
        finally:
            self.term = None

    async def _lead_once(self, term: "Session") -> Optional["_Handover"]:
        """One period of leading `term`: runs ``on_started_leading`` until the
        term ends, :meth:`run` is cancelled, the callback returns, or
        :meth:`resign_to` asks for a hand-over; then ends the callback,
        resigns a term still held (not for a hand-over) and calls
        ``on_stopped_leading``. Returns the hand-over asked for, if any."""
        requests: list[_Handover] = []
        self._asked.clear()
        self._requests = requests
        self._defer_to_preferred()  # one named before this term (or period) began
        task = asyncio.create_task(self._on_started(term), name=f"tenure-lead:{self.name}")
        lost = asyncio.create_task(term.lost.wait())
        asked = asyncio.create_task(self._asked.wait())
        taken: Optional[_Handover] = None
        cancelled = False
        try:
            await asyncio.wait({task, lost, asked}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # Cancelled (run() stopped), lost, the callback returned, or a
            # hand-over asked: end the callback, resign if still held (unless
            # handing over), then say so.
            self._requests = None
            if requests and not cancelled and not lost.done() and not task.done():
                taken = requests.pop(0)
            for other in requests:
                if not other.future.done():
                    other.future.set_exception(
                        TenureError(
                            Reason.LEASE_NOT_HELD,
                            f"{self.identity!r} no longer leads {self.name!r}",
                        )
                    )
            lost.cancel()
            asked.cancel()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if taken is None:
                await asyncio.shield(self._resign(term))
            await _maybe_await(self._on_stopped())
        return taken

    async def _hand_over(self, term: "Session", request: "_Handover") -> Leader:
        """Resigns `term` to the successor `request` names (or the next
        candidate); the term ends as handed over on success."""

        async def send() -> Leader:
            reply = await _call(
                self.client,
                "Resign",
                election_pb2.ResignRequest(
                    name=term.name,
                    expected_revision=term.revision,
                    lease_key=term.lease_key,
                    successor=request.successor or "",
                    to_next_candidate=not request.successor,
                ),
                request.timeout,
            )
            return Leader.from_proto(reply.successor if reply.HasField("successor") else None)

        return await term._hand_over(send)

    def _defer_to_preferred(self) -> None:
        """While leading, asks for a hand-over to the preferred candidate
        Observe named when its preference is greater than this elector's,
        once per naming."""
        candidate = self._preferred
        requests = self._requests
        if (
            requests is None
            or candidate is None
            or self._tried == self._namings
            or candidate.preference <= self.preference
            or candidate.identity == self.identity
        ):
            return
        self._tried = self._namings
        future: asyncio.Future[Leader] = asyncio.get_running_loop().create_future()
        # Nobody awaits it: take its outcome so a failure is not logged as
        # never retrieved (the elector leads on, as after a failed resign_to).
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        requests.append(_Handover(candidate.identity, _HANDOVER_TIMEOUT, future))
        self._asked.set()

    def _note_preferred(self, msg: election_pb2.ObserveResponse) -> None:
        """Remembers the preferred candidate of an Observe message (every
        message carries it) and defers to it if it should lead."""
        if msg.HasField("preferred") and msg.preferred.holder:
            self._preferred = _Candidate(msg.preferred.holder, msg.preferred.preference)
            self._namings += 1
            self._defer_to_preferred()
        else:
            self._preferred = None

    @staticmethod
    async def _resign(term: "Session") -> None:
        if term.is_held():
            try:
                await term.release()
            except TenureError:
                pass  # the term expires at its TTL

    async def _observe(self) -> None:
        """Follows Observe: remembers the preferred candidate and reports
        each change of leader, reopening Observe after errors (it starts
        with the current state, so nothing is missed for good)."""
        last: Optional[Leader] = None
        backoff = 0.1
        while True:
            call = _stub(self.client).Observe(
                election_pb2.ObserveRequest(name=self.name),
                metadata=self.client._call_metadata(),
            )
            try:
                async for msg in call:
                    backoff = 0.1
                    self._note_preferred(msg)
                    if msg.type == election_pb2.CHANGE_TYPE_PREFERRED:
                        continue  # the same leader: only the candidate changed
                    now = Leader.from_change(msg)
                    if now != last:
                        last = now
                        if self._on_new_leader is not None:
                            try:
                                await _maybe_await(self._on_new_leader(now))
                            except Exception:
                                # Keep following Observe: the hand-over to a
                                # preferred candidate depends on it.
                                _log.exception("on_new_leader of %r raised", self.name)
            except grpc.aio.AioRpcError as rpc_err:
                # Permanent refusals end the observer; anything else (the
                # server restarting, the network) is retried.
                if rpc_err.code() in (
                    grpc.StatusCode.PERMISSION_DENIED,
                    grpc.StatusCode.UNAUTHENTICATED,
                    grpc.StatusCode.INVALID_ARGUMENT,
                ):
                    return
            finally:
                call.cancel()
            await asyncio.sleep(backoff * (1 + random.random() / 2))
            backoff = min(backoff * 2, 5.0)


#: The deadline of the Resign call of a hand-over to a preferred candidate.
_HANDOVER_TIMEOUT = 5.0


@dataclass(frozen=True)
class _Candidate:
    """A waiting candidate Observe names as preferred."""

    identity: str
    preference: int


@dataclass
class _Handover:
    """One :meth:`LeaderElector.resign_to` request and where its answer goes."""

    successor: Optional[str]
    timeout: float
    future: "asyncio.Future[Leader]"


async def _maybe_await(result: Union[None, Awaitable[None]]) -> None:
    if inspect.isawaitable(result):
        await result
