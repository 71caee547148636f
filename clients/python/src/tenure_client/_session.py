"""The :class:`Session`: one held lease, kept alive by a background renewal."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import Any, Awaitable, Callable, Optional, Protocol, TypeVar

from ._conn import Connection
from ._errors import Reason, TenureError
from ._gen import lease_pb2
from ._keepalive import KeepAlive, UseUnary
from ._losswatch import LossWatch
from ._types import EventType, Lease, LeaseEvent, LockMode
from .fencing import fence_headers

_log = logging.getLogger("tenure_client")

_T = TypeVar("_T")

#: A watch loss held back while a hand-over is in flight (no event: the
#: name was missing from a reopened watch's snapshot).
_NOTHING = object()

#: First pause before retrying a renewal that failed with a retryable error;
#: it doubles up to the renew interval, and never runs past the safe deadline.
_FIRST_RETRY = 0.05


class SessionHost(Connection, Protocol):
    """What a session uses of its :class:`~tenure_client.TenureClient`: its
    calls, its KeepAlive stream and its loss watch."""

    _keepalive: KeepAlive
    _loss: LossWatch


class LossCause(enum.Enum):
    """Why a :class:`Session` stopped holding its lease."""

    #: :meth:`Session.release` was called (or the ``async with`` block ended).
    RELEASED = "released"
    #: :meth:`Session.transfer` (or a :class:`LeaderElector`'s
    #: ``resign_to``) handed the holding to a waiter: like RELEASED, the
    #: holder's own choice, not a loss.
    TRANSFERRED = "transferred"
    #: A renewal was refused with LEASE_NOT_HELD or LEASE_NOT_FOUND: the lease
    #: expired and may have passed to another holder.
    NOT_HELD = "not_held"
    #: No renewal got through before the safe deadline (server unreachable,
    #: NATS away, renewals paused).
    DEADLINE = "deadline"
    #: A renewal failed with an error that retrying cannot fix (other than
    #: NOT_HELD), e.g. INVALID_* or RECORD_UNREADABLE.
    RENEW_FAILED = "renew_failed"
    #: The :class:`TenureClient` was closed while the session was live.
    CLOSED = "closed"
    #: The client's shared watch showed the holding end before a renewal
    #: did: its token REVOKED, EXPIRED or RELEASED (by someone else), another
    #: token holding the name, or the name missing from a reopened watch's
    #: snapshot. :attr:`Session.lost_event` is the event, if there was one.
    WATCH = "watch"
    #: The client's shared watch said it missed changes of the name (a
    #: MISSED event: its server's watcher fell behind) and named this
    #: holding's fencing token (and slot) as one that ended among them; how
    #: it ended (revoked, expired, taken over) is unknown.
    #: :attr:`Session.lost_event` is the MISSED event. A MISSED naming
    #: another token, or none, does not end the session.
    MISSED = "missed"


class Session:
    """One held lease, renewed in the background until released or lost.

    Get one from :meth:`TenureClient.acquire`. While :meth:`is_held` is True
    the caller may act as holder, passing :attr:`fencing_token` with every
    write to a downstream store. When the lease is lost, :attr:`lost` is set:
    as soon as a renewal is refused (LEASE_NOT_HELD), and no later than
    :attr:`safe_deadline` when renewals cannot get through. :meth:`is_held`
    compares against the clock itself, so it turns False at the safe deadline
    even if the event loop was too busy to run the renewal task.

    Use it as an async context manager to release it at the end of a block::

        async with client.acquire("jobs.nightly", "worker-1", ttl=10) as s:
            ...

    Attributes:
        name: the lease name.
        holder: who holds it (as given to acquire).
        fencing_token: the holding's fencing token (constant across
            renewals; a :meth:`downgrade` replaces it with a greater one).
        fence_proof: the holding's fence proof (see the property).
        slot: the semaphore slot of the holding (1 to the limit, see
            :class:`Semaphore`), or the slot of a read-write lock's holding
            (see :class:`RWLock`); 0 for a plain lease.
        mode: for a read-write lock's holding, :attr:`LockMode.EXCLUSIVE`
            (:meth:`RWLock.write`) or :attr:`LockMode.SHARED`
            (:meth:`RWLock.read`, or after :meth:`downgrade`);
            :attr:`LockMode.UNSPECIFIED` for a plain lease or a semaphore
            slot.
        revision: the revision from the last Acquire or Renew reply (the one
            the next Renew or Release presents).
        lease_key: the ownership secret (the caller's own, or minted).
        ttl: the granted time to live in seconds (whole seconds).
        safe_deadline: the :func:`time.monotonic` time at which the session
            stops believing it holds the lease: the send time of the last
            successful Acquire/Renew + ``ttl`` - ``safety_margin``.
        lease: the last :class:`Lease` the server returned.
        renew_fraction: renewals are sent every ``ttl * renew_fraction``.
        safety_margin: seconds subtracted from the TTL for the safe deadline.
        lost: an :class:`asyncio.Event` set once the session no longer holds
            the lease (lost or released); never cleared.
        lost_cause: the :class:`LossCause` once :attr:`lost` is set.
        lost_error: the :class:`TenureError` behind the loss, if any (for
            DEADLINE: the last failed renewal's error, if one failed).
        lost_at: the :func:`time.monotonic` time the loss was marked.
        lost_event: for cause WATCH or MISSED, the :class:`LeaseEvent` that
            showed it.
    """

    def __init__(
        self,
        client: SessionHost,
        lease: Lease,
        lease_key: str,
        sent: float,
        *,
        renew_fraction: float,
        safety_margin: Optional[float],
    ) -> None:
        self._client = client
        self.name = lease.name
        self.holder = lease.holder
        self.fencing_token = lease.fencing_token
        #: The acquiring reply's proof: renewal replies carry none.
        self._fence_proof = lease.fence_proof
        self.slot = lease.slot
        self.mode: LockMode = lease.mode
        self.lease_key = lease_key
        self.renew_fraction = renew_fraction
        self._margin_given = safety_margin
        self.lost = asyncio.Event()
        self.lost_cause: Optional[LossCause] = None
        self.lost_error: Optional[TenureError] = None
        self.lost_at: Optional[float] = None
        self.lost_event: Optional[LeaseEvent] = None
        #: Revision of the acquiring reply: older watch events are ignored.
        self._acquired = lease.revision
        self._last_error: Optional[TenureError] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._renewing = asyncio.Event()
        self._renewing.set()
        #: Serialises renewals with a hand-over, so the hand-over presents
        #: the latest revision and no renewal crosses it.
        self._rpc_lock = asyncio.Lock()
        #: A hand-over is in flight: a watch's loss waits for its reply.
        self._handing = False
        self._held_back: Any = None
        #: A downgrade is in flight: the watch's events of the name wait for
        #: its reply (the holding's token changes), then are judged again.
        self._downgrading = False
        self._during_downgrade: list[Optional[LeaseEvent]] = []
        # Set by _update: revision, ttl, lease, safety_margin, safe_deadline.
        self.revision = 0
        self.ttl = 0.0
        self.safety_margin = 0.0
        self.safe_deadline = 0.0
        self._next_renew_at = 0.0
        self.lease = lease
        self._update(lease, sent)

    def __repr__(self) -> str:
        state = "held" if self.is_held() else f"lost:{self.lost_cause}"
        return (
            f"Session(name={self.name!r}, holder={self.holder!r}, "
            f"fencing_token={self.fencing_token}, revision={self.revision}, {state})"
        )

    # ---- the holder's view -------------------------------------------------

    def is_held(self) -> bool:
        """Whether the caller may still act as holder: the lease was neither
        lost nor released, and the safe deadline has not passed."""
        return not self.lost.is_set() and time.monotonic() < self.safe_deadline

    def remaining(self) -> float:
        """Seconds left until the safe deadline (0 once lost or past it)."""
        if self.lost.is_set():
            return 0.0
        return max(0.0, self.safe_deadline - time.monotonic())

    @property
    def fence_proof(self) -> bytes:
        """The holding's fence proof: an Ed25519-signed statement of (bucket,
        name, slot, fencing token, holder, grant time, TTL) that a downstream
        store verifies offline before trusting the token (docs/fencing.md).
        Constant across renewals; empty when the server has no fence signing
        key (``--fence-signing-key``)."""
        return self._fence_proof

    def fence_headers(self) -> dict[str, str]:
        """The HTTP headers to send with each write to a fenced store:
        ``{"Tenure-Fence": <the proof, base64url without padding>,
        "Tenure-Fencing-Token": "<fencing_token>"}``; only the
        ``Tenure-Fencing-Token`` header when the server signs no proofs (no
        ``--fence-signing-key``): a store that verifies proofs then refuses
        the write (``FENCE_MISSING``)."""
        return fence_headers(self.fencing_token, self._fence_proof)

    async def renew(self, *, timeout: float = 5.0) -> Lease:
        """Renews now, besides the background renewals (e.g. before a long
        step), and returns the renewed :class:`Lease`. On success the safe
        deadline moves forward from this call's send time.

        Raises:
            TenureError: the renewal failed; with reason LEASE_NOT_HELD the
                session is marked lost (cause NOT_HELD). Also raised with
                reason LEASE_NOT_HELD and no code if the session was already
                lost or released.
        """
        if self.lost.is_set():
            raise TenureError(
                Reason.LEASE_NOT_HELD,
                f"the session no longer holds lease {self.name!r} ({self.lost_cause.value})",
                metadata={"state": "LOST"},
            )
        try:
            async with self._rpc_lock:
                return await self._renew_once(timeout=timeout)
        except TenureError as err:
            if not err.retryable:
                self._lose(_cause_of(err), err)
            raise

    async def transfer(self, to: Optional[str] = None, *, timeout: float = 5.0) -> Lease:
        """Hands the holding to a waiting acquire of another holder, with no
        moment in which the lease is free (``LeaseService.Transfer``): to the
        earliest waiting acquire of holder `to`, or, with ``to=None``, to the
        head of the queue. Returns the recipient's :class:`Lease`, whose
        fencing token is greater than this session's.

        On success the session ends exactly as after a successful
        :meth:`release`: renewals stop, :meth:`is_held` is False,
        :attr:`lost` is set with cause TRANSFERRED (not a loss), and a later
        :meth:`release` returns False. The lease key stops working at the
        transfer's write, so stop acting as holder before calling it.

        Raises:
            TenureError: NO_WAITER when nobody (or not `to`) waits: the
                session is unchanged and still held (release it, or transfer
                once the recipient waits). LEASE_NOT_HELD when the holding
                has ended (the session is then lost), also without a call when
                the session was already lost, released or past its safe
                deadline. Any other failure leaves the session as it was.
            ValueError: a semaphore slot or a read-write lock holding (only a
                plain lease is handed over).
        """
        if self.slot:
            kind = "read-write lock holding" if self.mode else "semaphore slot"
            raise ValueError(
                f"lease {self.name!r} slot {self.slot} is a {kind}: "
                "only a plain lease can be handed over"
            )

        async def send() -> Lease:
            request = lease_pb2.TransferRequest(
                name=self.name,
                expected_revision=self.revision,
                lease_key=self.lease_key,
                to_holder=to or "",
            )
            reply = await self._client._unary("Transfer", request, timeout)
            return Lease.from_proto(reply.lease)

        return await self._hand_over(send)

    async def downgrade(self, *, timeout: float = 5.0) -> Lease:
        """Turns this exclusive read-write lock holding (:meth:`RWLock.write`)
        into a shared one with no gap (``LeaseService.Downgrade``): the
        session holds the lock throughout, from now on beside any shared
        holders, whose waiting :meth:`RWLock.read` calls may get in at once.
        Returns the shared :class:`Lease`.

        The session goes on as the shared holding: same slot and lease key,
        :attr:`mode` SHARED, a new and greater :attr:`fencing_token` (the
        exclusive one is superseded: a store that fences by token refuses
        writes made with it from now on), the reply's :attr:`revision`,
        which the background renewals present from now on, and the reply's
        :attr:`fence_proof`. One call at a time with the renewals. The safe
        deadline is left as it was (the next renewal moves it).

        Raises:
            TenureError: MODE_MISMATCH (FAILED_PRECONDITION, permanent) when
                the holding is not an exclusive read-write lock holding (a
                shared one, a plain lease, a semaphore slot): the session is
                unchanged. LEASE_NOT_HELD when the holding has ended (the
                session is then lost), also without a call when the session
                was already lost, released or past its safe deadline. Any
                other failure leaves the session as it was, unless the
                client's watch saw the holding end meanwhile.
        """
        self._raise_unless_held()
        async with self._rpc_lock:
            self._raise_unless_held()
            request = lease_pb2.DowngradeRequest(
                name=self.name,
                expected_revision=self.revision,
                lease_key=self.lease_key,
                slot=self.slot,
            )
            self._downgrading = True
            try:
                reply = await self._client._unary("Downgrade", request, timeout)
            except BaseException as err:
                # The holding as it was judges what the watch saw meanwhile.
                self._judge_downgrade_events()
                if isinstance(err, TenureError) and err.reason in (
                    Reason.LEASE_NOT_HELD,
                    Reason.LEASE_NOT_FOUND,
                ):
                    self._lose(LossCause.NOT_HELD, err)
                raise
            lease = Lease.from_proto(reply.lease)
            # The shared holding replaces the exclusive one: renewals present
            # its revision and expect its token; watch events older than it
            # are the exclusive holding's.
            self.fencing_token = lease.fencing_token
            self._fence_proof = lease.fence_proof
            self.mode = lease.mode
            self._acquired = lease.revision
            self.lease = lease
            self.revision = lease.revision
            self._judge_downgrade_events()
            return lease

    def _judge_downgrade_events(self) -> None:
        """Ends the hold-back of a downgrade: the watch's events of the name
        meanwhile are judged by the holding as it is now (see
        :func:`lost_by`). A reopened watch's snapshot that lacked the
        holding (``None``) ends it, unless the snapshot showed it with the
        current token (it was told apart by the old one)."""
        self._downgrading = False
        held, self._during_downgrade = self._during_downgrade, []
        shown = any(
            event is not None
            and event.type is EventType.CURRENT
            and self._holds(event)
            for event in held
        )
        for event in held:
            if (
                not shown
                if event is None
                else lost_by(event, self._acquired, self.slot, self.fencing_token)
            ):
                self._lose_on_watch(event)
                return

    # ---- ending ------------------------------------------------------------

    async def release(self, *, timeout: float = 5.0) -> bool:
        """Stops renewing and releases the lease on the server, presenting
        the current revision, so the next holder can take it at once.

        :attr:`lost` is set (cause RELEASED) before the call is sent, so the
        holder stops acting first. Returns True when this call ended the
        holding, False when there was nothing to release (already released,
        or lost to LEASE_NOT_HELD). Calling it again is harmless.

        Raises:
            TenureError: the server could not be reached or refused for
                another reason; the lease then ends at its TTL by itself.
        """
        cause = self.lost_cause
        await self._stop_renewing()
        if cause in (
            LossCause.RELEASED,
            LossCause.TRANSFERRED,
            LossCause.NOT_HELD,
            LossCause.WATCH,
            LossCause.MISSED,
        ):
            return False
        self._lose(LossCause.RELEASED)
        if self._downgrading:
            # Present the revision the downgrade leaves: wait for its reply.
            async with self._rpc_lock:
                pass
        request = lease_pb2.ReleaseRequest(
            name=self.name,
            expected_revision=self.revision,
            lease_key=self.lease_key,
            slot=self.slot,
        )
        try:
            await self._client._unary("Release", request, timeout)
        except TenureError as err:
            if err.reason in (Reason.LEASE_NOT_HELD, Reason.LEASE_NOT_FOUND):
                return False
            raise
        return True

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        """Releases the lease. A retryable failure (server away) is logged,
        not raised: the lease then ends at its TTL by itself."""
        try:
            await self.release()
        except TenureError as err:
            if not err.retryable:
                raise
            _log.warning("tenure: could not release %r (%s); it will expire", self.name, err)

    # ---- testing hooks -----------------------------------------------------

    def pause_renewals(self) -> None:
        """Stops sending renewals, as a stalled process would (for tests and
        drills). The safe deadline still applies: :attr:`lost` is set with
        cause DEADLINE when it passes."""
        self._renewing.clear()

    def resume_renewals(self) -> None:
        """Undoes :meth:`pause_renewals` (a due renewal is sent at once)."""
        self._renewing.set()

    # ---- internals ---------------------------------------------------------

    def _update(self, lease: Lease, sent: float) -> None:
        """Takes a successful Acquire/Renew reply for a request sent at `sent`
        (monotonic) and moves the safe deadline and the next renewal."""
        self.lease = lease
        self.revision = lease.revision
        self.ttl = lease.ttl
        self.safety_margin = (
            self._margin_given if self._margin_given is not None else lease.ttl / 10
        )
        self.safe_deadline = sent + lease.ttl - self.safety_margin
        self._next_renew_at = _aligned(sent + lease.ttl * self.renew_fraction, sent)

    def _start(self) -> None:
        """Starts the background renewal task."""
        self._task = asyncio.create_task(self._run(), name=f"tenure-renew:{self.name}")

    async def _renew_once(self, timeout: float) -> Lease:
        """Renews once with the last revision, over the client's KeepAlive
        stream (a unary Renew where the server has none), and takes the
        reply."""
        entry = lease_pb2.KeepAliveEntry(
            name=self.name,
            expected_revision=self.revision,
            lease_key=self.lease_key,
            slot=self.slot,
        )
        sent = time.monotonic()
        try:
            lease = await self._client._keepalive.renew(entry, timeout)
        except UseUnary:
            request = lease_pb2.RenewRequest(
                name=self.name,
                expected_revision=self.revision,
                lease_key=self.lease_key,
                slot=self.slot,
            )
            sent = time.monotonic()
            reply = await self._client._unary("Renew", request, timeout)
            lease = Lease.from_proto(reply.lease)
        if lease.fencing_token != self.fencing_token:
            # The server promises a constant token; never trust a reply that
            # says otherwise.
            raise TenureError(
                Reason.LEASE_NOT_HELD,
                f"renewal returned fencing token {lease.fencing_token}, "
                f"expected {self.fencing_token}",
            )
        # Replies can cross (a manual renew() beside the background loop):
        # only a newer revision moves the session forward.
        if not self.lost.is_set() and lease.revision > self.revision:
            self._update(lease, sent)
        return lease

    async def _run(self) -> None:
        """The renewal loop: renew every ``ttl * renew_fraction``, retry
        retryable failures with backoff, give up at the safe deadline."""
        retry = _FIRST_RETRY
        while True:
            now = time.monotonic()
            if now >= self.safe_deadline:
                self._lose(LossCause.DEADLINE, self._last_error)
                return
            if not self._renewing.is_set():
                try:
                    await asyncio.wait_for(self._renewing.wait(), self.safe_deadline - now)
                except asyncio.TimeoutError:
                    pass
                continue
            if now < self._next_renew_at:
                await asyncio.sleep(min(self._next_renew_at, self.safe_deadline) - now)
                continue
            try:
                async with self._rpc_lock:
                    if self.lost.is_set():  # handed over meanwhile
                        return
                    # A renewal still in flight at the safe deadline is useless.
                    await self._renew_once(timeout=max(0.001, self.safe_deadline - time.monotonic()))
                self._last_error = None
                retry = _FIRST_RETRY
            except TenureError as err:
                if not err.retryable:
                    self._lose(_cause_of(err), err)
                    return
                _log.debug("tenure: renewal of %r failed, retrying: %s", self.name, err)
                self._last_error = err
                self._next_renew_at = time.monotonic() + retry
                retry = min(retry * 2, max(self.ttl * self.renew_fraction, _FIRST_RETRY))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # e.g. the channel was closed under us
                _log.debug("tenure: renewal of %r raised %r, retrying", self.name, exc)
                self._next_renew_at = time.monotonic() + retry
                retry = min(retry * 2, max(self.ttl * self.renew_fraction, _FIRST_RETRY))

    def _lose(self, cause: LossCause, error: Optional[TenureError] = None) -> None:
        """Marks the session lost (once) and sets :attr:`lost`."""
        if self.lost.is_set():
            return
        self.lost_cause = cause
        self.lost_error = error
        self.lost_at = time.monotonic()
        self.lost.set()
        self._client._loss.remove(self)
        if cause not in (LossCause.RELEASED, LossCause.TRANSFERRED):
            _log.info("tenure: lost lease %r (%s)", self.name, cause.value)

    def _watch_names(self) -> tuple[str, ...]:
        """The names the shared watch follows for this session."""
        return (self.name,)

    def _holds(self, event: LeaseEvent) -> bool:
        """Whether a CURRENT snapshot event is this session's holding."""
        return (
            event.name == self.name
            and event.slot == self.slot
            and event.fencing_token == self.fencing_token
        )

    def _observe(self, event: LeaseEvent) -> None:
        """Ends the session when a watch event shows its holding gone (see
        :func:`lost_by`)."""
        if self._downgrading and event.name == self.name:
            # The downgrade changes the token: judge the event by its reply.
            self._during_downgrade.append(event)
            return
        if event.name == self.name and lost_by(
            event, self._acquired, self.slot, self.fencing_token
        ):
            self._lose_on_watch(event)

    def _lose_on_watch(self, event: Optional[LeaseEvent]) -> None:
        """Marks the session lost by the shared watch (cause WATCH, or
        MISSED for a MISSED event)."""
        if self.lost.is_set():
            return
        if self._downgrading:
            self._during_downgrade.append(event)
            return
        if self._handing:
            # Most likely the hand-over's own RELEASED: its reply decides.
            if self._held_back is None:
                self._held_back = _NOTHING if event is None else event
            return
        self.lost_event = event
        missed = event is not None and event.type is EventType.MISSED
        self._lose(LossCause.MISSED if missed else LossCause.WATCH)
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()  # no more renewals of a holding that is gone

    async def _hand_over(self, send: Callable[[], Awaitable[_T]]) -> _T:
        """Sends a hand-over (a Transfer, or a Resign to a successor) with
        `send`, one call at a time with the renewals. On success the session
        ends as after a release, with cause TRANSFERRED; on failure it is
        unchanged, unless the server says the holding ended (LEASE_NOT_HELD,
        LEASE_NOT_FOUND) or the watch saw it end meanwhile."""
        self._raise_unless_held()
        async with self._rpc_lock:
            self._raise_unless_held()
            self._handing = True
            try:
                reply = await send()
            except BaseException as err:
                self._handing = False
                held_back, self._held_back = self._held_back, None
                if held_back is not None:
                    self._lose_on_watch(None if held_back is _NOTHING else held_back)
                elif isinstance(err, TenureError) and err.reason in (
                    Reason.LEASE_NOT_HELD,
                    Reason.LEASE_NOT_FOUND,
                ):
                    self._lose(LossCause.NOT_HELD, err)
                raise
            self._handing = False
            self._held_back = None
            self._lose(LossCause.TRANSFERRED)
        await self._stop_renewing()
        return reply

    def _raise_unless_held(self) -> None:
        if not self.is_held():
            cause = self.lost_cause.value if self.lost_cause else "past its safe deadline"
            raise TenureError(
                Reason.LEASE_NOT_HELD,
                f"the session no longer holds lease {self.name!r} ({cause})",
                metadata={"state": "LOST"},
            )

    async def _stop_renewing(self) -> None:
        """Cancels the renewal task and waits for it to end."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        if task is asyncio.current_task():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Our own cancellation must still propagate.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _abandon(self) -> None:
        """Stops renewing without releasing (the client is closing)."""
        await self._stop_renewing()
        self._lose(LossCause.CLOSED)


#: Renewal times are moved earlier onto this grid (of the monotonic clock),
#: so the renewals of sessions acquired close together come due at the same
#: moment and share one KeepAlive request; not for intervals under
#: _GRID_MIN.
_GRID = 0.05
_GRID_MIN = 4 * _GRID


def _aligned(renew_at: float, sent: float) -> float:
    """`renew_at`, moved earlier onto the grid when it is more than
    _GRID_MIN after `sent`."""
    if renew_at - sent <= _GRID_MIN:
        return renew_at
    return renew_at - renew_at % _GRID


def lost_by(event: LeaseEvent, acquired: int, slot: int, token: int) -> bool:
    """Whether `event` shows the holding (`slot`, `token`), acquired at
    revision `acquired`, gone: its token REVOKED, EXPIRED or RELEASED,
    another token holding the name, or a MISSED naming its token (a MISSED
    of another token, or of none, says nothing of this holding). Events
    older than the acquisition are
    ignored, and so are events of another slot: a semaphore's holders come
    and go without touching each other (a plain lease is slot 0)."""
    if event.revision < acquired or event.slot != slot:
        return False
    if event.type in (EventType.REVOKED, EventType.EXPIRED, EventType.RELEASED):
        return event.fencing_token in (0, token)
    if event.type in (EventType.ACQUIRED, EventType.CURRENT, EventType.RENEWED):
        return event.fencing_token != token
    if event.type is EventType.MISSED:
        return token != 0 and event.fencing_token == token
    return False


def _cause_of(err: TenureError) -> LossCause:
    """The loss cause of a renewal refused with a final error."""
    if err.reason in (Reason.LEASE_NOT_HELD, Reason.LEASE_NOT_FOUND):
        return LossCause.NOT_HELD
    return LossCause.RENEW_FAILED
