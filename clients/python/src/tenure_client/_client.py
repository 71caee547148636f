"""The :class:`TenureClient`: a grpc.aio channel to Tenure with lease helpers."""

from __future__ import annotations

import dataclasses
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
    TypeVar,
    Union,
)

import grpc
import grpc.aio

from ._errors import Reason, TenureError
from ._gen import lease_pb2, lease_pb2_grpc
from ._keepalive import KeepAlive
from ._losswatch import LossWatch
from ._resume import Backoff, ResumePoint, watch_step
from ._group import GroupSession
from ._session import Session
from ._types import (
    EventType,
    Lease,
    LeaseEvent,
    LeaseInfo,
    LockMode,
    Seconds,
    to_duration,
    to_seconds,
)

#: A Session or a GroupSession.
S = TypeVar("S", bound=Session)

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
        credentials: TLS credentials for `target` (``grpc.ssl_channel_credentials``);
            plaintext when absent and no `ca`/`client_cert` is given.
        options: extra channel options for `target`.
        token: a bearer token sent as ``authorization: Bearer <token>`` with
            every call (the server's ``--auth-tokens``), or a callable
            returning one, called before every call (to refresh it).
        ca: the CA (PEM bytes, or a file path) the server's certificate must
            chain to: TLS. ``ca=True``: TLS with the system roots.
        client_cert, client_key: the client certificate chain and key (PEM
            bytes or file paths) for mTLS (``--tls-client-ca``).
        server_name: the name to verify in the server's certificate, when it
            differs from the target's host.
        metadata: extra gRPC metadata (lower-case keys) sent with every call.

    Attributes:
        stub: the generated ``LeaseServiceStub`` for raw calls.
        target: the server address ("" for a given channel), named in errors.
    """

    def __init__(
        self,
        target: Optional[str] = None,
        *,
        channel: Optional[grpc.aio.Channel] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        options: Sequence[Tuple[str, Any]] = (),
        token: Union[None, str, Callable[[], str]] = None,
        ca: Union[None, bool, bytes, str] = None,
        client_cert: Union[None, bytes, str] = None,
        client_key: Union[None, bytes, str] = None,
        server_name: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> None:
        if (target is None) == (channel is None):
            raise ValueError("give exactly one of target and channel")
        if (client_cert is None) != (client_key is None):
            raise ValueError("mTLS needs both client_cert and client_key")
        self.target = target or ""
        self._token = token
        self._metadata = [(k.lower(), v) for k, v in (metadata or {}).items()]
        self._owns_channel = channel is None
        if channel is None:
            assert target is not None
            if credentials is None and (ca is not None or client_cert is not None):
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=None if ca in (None, True) else _pem(ca),
                    private_key=None if client_key is None else _pem(client_key),
                    certificate_chain=None if client_cert is None else _pem(client_cert),
                )
            if server_name is not None:
                options = [*options, ("grpc.ssl_target_name_override", server_name)]
            if credentials is not None:
                channel = grpc.aio.secure_channel(target, credentials, options=options)
            else:
                channel = grpc.aio.insecure_channel(target, options=options)
        self._channel = channel
        self.stub = lease_pb2_grpc.LeaseServiceStub(channel)
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()
        self._loss = LossWatch(self)
        self._keepalive = KeepAlive(self)

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
        await self._loss.close()
        await self._keepalive.close()
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
        lock_delay: Optional[Seconds] = None,
        preference: int = 0,
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
            lock_delay: after this holding expires or is revoked (never
                after a release), nobody may acquire the name for this long
                (rounded up to whole seconds, at most the server's
                ``--max-lock-delay``): protects downstream systems that
                cannot check fencing tokens from a paused holder's late
                writes. Refused for a semaphore.
            preference: an election candidate's preference (0 to 2**32 - 1;
                0, the default, asks for nothing), kept with its place while
                it waits (with `wait`): Observe names the waiting candidate
                of the highest preference (the earliest of equals), and a
                :class:`LeaderElector` leading with a lower preference hands
                over to it. :class:`LeaderElector` sets it from its own
                ``preference``.

        Raises:
            TenureError: with reason LEASE_HELD when another holder has it
                (``metadata`` names the holder; ``state`` LOCK_DELAY and
                ``free_at_unix_ms`` while a lock delay runs), INVALID_* for
                bad arguments, UNKNOWN/UNAVAILABLE codes when the server
                cannot be reached.
            ValueError: renew_fraction not in (0, 1), safety_margin
                negative or too large to renew before the safe deadline, or
                preference outside 0 to 2**32 - 1.
        """
        if not 0 <= preference <= 0xFFFFFFFF:
            raise ValueError("preference must be between 0 and 2**32 - 1")
        return self._acquire_context(
            name,
            holder,
            ttl,
            wait=wait,
            lease_key=lease_key,
            metadata=metadata,
            renew_fraction=renew_fraction,
            safety_margin=safety_margin,
            timeout=timeout,
            lock_delay=lock_delay,
            limit=0,
            preference=preference,
        )

    def acquire_group(
        self,
        names: Sequence[str],
        holder: str,
        ttl: Seconds = 10.0,
        *,
        wait: Optional[Seconds] = None,
        lease_key: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        safety_margin: Optional[Seconds] = None,
        timeout: Optional[float] = None,
        lock_delay: Optional[Seconds] = None,
    ) -> "AcquireContext":
        """Takes the plain leases `names` (2 to the server's
        ``--max-group-size``, default 16) for `holder`, all or none, and
        renews them together: await it for a :class:`GroupSession`, or use
        ``async with`` to release the group when the block ends.

        With `wait` it waits until every name is free at once (never holding
        some while waiting for others, so groups cannot deadlock whatever
        the order of the names). The other arguments are :meth:`acquire`'s,
        applied to every member.

        Raises:
            TenureError: LEASE_HELD (``metadata["name"]``: a held member);
                UNIMPLEMENTED code from a server without groups;
                FAILED_PRECONDITION on nats-server older than 2.12.
        """
        ttl_s, margin = self._check_timing(ttl, renew_fraction, safety_margin)
        return AcquireContext(
            self._acquire_group(
                list(names),
                holder,
                ttl_s,
                wait,
                lease_key,
                metadata,
                renew_fraction,
                margin,
                timeout,
                lock_delay,
            )
        )

    async def _acquire_group(
        self,
        names: list[str],
        holder: str,
        ttl_s: float,
        wait: Optional[Seconds],
        lease_key: Optional[str],
        metadata: Optional[Mapping[str, str]],
        renew_fraction: float,
        margin: Optional[float],
        timeout: Optional[float],
        lock_delay: Optional[Seconds],
    ) -> GroupSession:
        request = lease_pb2.AcquireGroupRequest(
            names=names,
            holder=holder,
            ttl=to_duration(ttl_s),
            lease_key=lease_key or "",
            metadata=dict(metadata or {}),
        )
        if lock_delay is not None and to_seconds(lock_delay) > 0:
            request.lock_delay.CopyFrom(to_duration(lock_delay))
        wait_s = 0.0
        if wait is not None:
            wait_s = to_seconds(wait)
            request.wait.CopyFrom(to_duration(wait_s))
        if timeout is None:
            timeout = wait_s + DEFAULT_CALL_TIMEOUT
        sent = time.monotonic()
        reply = await self._unary("AcquireGroup", request, timeout)
        group = GroupSession(
            self,
            [Lease.from_proto(lease) for lease in reply.leases],
            reply.lease_key,
            sent,
            renew_fraction=renew_fraction,
            safety_margin=margin,
        )
        return await self._start_session(group)

    def semaphore(self, name: str, limit: int) -> "Semaphore":
        """The counting semaphore `name` admitting `limit` holders at once
        (see :class:`Semaphore`). Makes no call: acquire does."""
        return Semaphore(self, name, limit)

    def rwlock(self, name: str) -> "RWLock":
        """The read-write lock `name`: one exclusive holder
        (:meth:`RWLock.write`) or any number of shared ones
        (:meth:`RWLock.read`) at once (see :class:`RWLock`). Makes no call:
        acquiring does."""
        return RWLock(self, name)

    def _acquire_context(
        self,
        name: str,
        holder: str,
        ttl: Seconds,
        *,
        wait: Optional[Seconds],
        lease_key: Optional[str],
        metadata: Optional[Mapping[str, str]],
        renew_fraction: float,
        safety_margin: Optional[Seconds],
        timeout: Optional[float],
        lock_delay: Optional[Seconds],
        limit: int,
        preference: int = 0,
        mode: LockMode = LockMode.UNSPECIFIED,
    ) -> "AcquireContext":
        """Checks the arguments of an acquire and returns its context."""
        ttl_s, margin = self._check_timing(ttl, renew_fraction, safety_margin)

        return AcquireContext(
            self._acquire(
                name,
                holder,
                ttl_s,
                wait,
                lease_key,
                metadata,
                renew_fraction,
                margin,
                timeout,
                lock_delay,
                limit,
                preference,
                mode,
            )
        )

    @staticmethod
    def _check_timing(
        ttl: Seconds, renew_fraction: float, safety_margin: Optional[Seconds]
    ) -> Tuple[float, Optional[float]]:
        """The TTL and the margin in seconds, checked: renewals must come
        before the safe deadline."""
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
        return ttl_s, margin

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
        lock_delay: Optional[Seconds],
        limit: int,
        preference: int,
        mode: LockMode,
    ) -> Session:
        request = lease_pb2.AcquireRequest(
            name=name,
            holder=holder,
            ttl=to_duration(ttl_s),
            lease_key=lease_key or "",
            metadata=dict(metadata or {}),
            limit=limit,
            preference=preference,
            mode=lease_pb2.LockMode.Name(mode),
        )
        if lock_delay is not None and to_seconds(lock_delay) > 0:
            request.lock_delay.CopyFrom(to_duration(lock_delay))
        wait_s = 0.0
        if wait is not None:
            wait_s = to_seconds(wait)
            request.wait.CopyFrom(to_duration(wait_s))
        if timeout is None:
            timeout = wait_s + DEFAULT_CALL_TIMEOUT
        sent = time.monotonic()
        reply = await self._unary("Acquire", request, timeout)
        session = Session(
            self,
            Lease.from_proto(reply.lease),
            reply.lease_key,
            sent,
            renew_fraction=renew_fraction,
            safety_margin=margin,
        )
        return await self._start_session(session)

    async def _start_session(self, session: S) -> S:
        """Renews once after a long wait, then registers the session with
        the shared watch and starts its renewals."""
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
        self._loss.add(session)
        session._start()
        return session

    async def inspect(self, name: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> LeaseInfo:
        """All GetLease knows about `name`: the holding, how many Acquires
        with a wait are queued for it (granted in arrival order, across
        replicas), and for a semaphore every holder, the limit and the free
        slots.

        Raises:
            TenureError: reason LEASE_NOT_FOUND when nobody holds it.
        """
        reply = await self._unary("GetLease", lease_pb2.GetLeaseRequest(name=name), timeout)
        return LeaseInfo.from_proto(reply)

    async def get(self, name: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> Lease:
        """The current holding of `name`.

        Raises:
            TenureError: reason LEASE_NOT_FOUND when nobody holds it.
        """
        reply = await self._unary("GetLease", lease_pb2.GetLeaseRequest(name=name), timeout)
        return Lease.from_proto(reply.lease)

    get_lease = get

    async def list_leases(
        self, prefix: str = "", *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[Lease]:
        """Every held lease whose name starts with `prefix` ("" for all),
        following the server's pages. Needs the admin grant."""
        leases: list[Lease] = []
        page = ""
        while True:
            reply = await self._unary(
                "ListLeases", lease_pb2.ListLeasesRequest(prefix=prefix, page_token=page), timeout
            )
            leases.extend(Lease.from_proto(lease) for lease in reply.leases)
            page = reply.next_page_token
            if not page:
                return leases

    async def fence_keyset(self, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> str:
        """The public keys the server signs fence proofs with, in the keyset
        text form a store pins and every verifier reads (``GetFenceKeys``;
        e.g. ``tenure_fence.Keyset.parse(await client.fence_keyset())``):
        the active key first, then older keys still accepted during a
        rotation. Empty when the server signs no proofs."""
        reply = await self._unary("GetFenceKeys", lease_pb2.GetFenceKeysRequest(), timeout)
        return reply.keyset

    async def revoke_lease(
        self,
        name: str,
        reason: str,
        *,
        fencing_token: int = 0,
        slot: int = 0,
        timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> int:
        """Ends the holding of `name` whoever holds it (the admin grant),
        logging `reason`; with `fencing_token` only that holding; with
        `slot` the holder of that slot of the semaphore `name`. Returns the
        revision of the revoke.

        Raises:
            TenureError: LEASE_NOT_FOUND when nobody holds `name` (or the
                holding with `fencing_token` has already ended).
        """
        reply = await self._unary(
            "RevokeLease",
            lease_pb2.RevokeLeaseRequest(
                name=name, reason=reason, fencing_token=fencing_token, slot=slot
            ),
            timeout,
        )
        return int(reply.revision)

    def watch(
        self,
        name: str,
        *,
        event_types: Iterable[EventType] = (),
        start_revision: int = 0,
    ) -> "LeaseWatch":
        """Watches one lease name, or a subtree ("jobs.>"; ">" for all).

        Returns an async iterator of :class:`LeaseEvent`: first a CURRENT
        event per lease held now, then one SNAPSHOT_COMPLETE, then every
        change (ACQUIRED, RENEWED, RELEASED, EXPIRED, REVOKED), in revision
        order. Close it with ``async with`` or :meth:`LeaseWatch.aclose`::

            async with client.watch("jobs.>") as events:
                async for event in events:
                    ...

        The watch survives server restarts: after the stream fails
        (UNAVAILABLE, SHUTTING_DOWN, a clean end of stream, a transport
        error) it reconnects with capped exponential backoff and jitter and
        resumes after the last revision it delivered, so no change comes
        twice or goes missing (the resumed stream's "caught up"
        SNAPSHOT_COMPLETE is not passed on). When the server cannot resume
        (WATCH_HISTORY_COMPACTED) it starts over with a fresh snapshot whose
        events have ``resync=True``.

        Args:
            event_types: keep only these kinds (SNAPSHOT_COMPLETE and MISSED
                always come).
            start_revision: resume after this revision (the revision of the
                last event you processed) instead of starting with a snapshot.

        Raises (while iterating):
            TenureError: a permanent failure (PERMISSION_DENIED,
                UNAUTHENTICATED, INVALID_ARGUMENT such as INVALID_NAME), or
                any failure before the first event (e.g. the server is not
                reachable).
        """
        request = lease_pb2.WatchLeaseRequest(
            name=name, event_types=[int(t) for t in event_types], start_revision=start_revision
        )
        return LeaseWatch(self, request)

    # ---- internals ---------------------------------------------------------

    def _call_metadata(self) -> list[Tuple[str, str]]:
        """The metadata of one call: the extra entries and the bearer token."""
        md = list(self._metadata)
        if self._token is not None:
            token = self._token() if callable(self._token) else self._token
            md.append(("authorization", f"Bearer {token}"))
        return md

    async def _unary(self, rpc: str, request: Any, timeout: Optional[float]) -> Any:
        """Calls the unary method `rpc`, turning gRPC failures into
        TenureError naming the target and the RPC."""
        try:
            return await getattr(self.stub, rpc)(
                request, timeout=timeout, metadata=self._call_metadata()
            )
        except grpc.aio.AioRpcError as err:
            raise TenureError.from_rpc_error(err, target=self.target, rpc=rpc) from err


class Semaphore:
    """A counting semaphore on the server: up to :attr:`limit` holders of one
    name at once, each with its own slot (:attr:`Session.slot`), lease key
    and fencing token (tokens increase across all holders of the name, in
    grant order). The limit is enforced by the server's conditional writes,
    never by clients. Get one from :meth:`TenureClient.semaphore`::

        sem = client.semaphore("jobs.encoders", 4)
        async with sem.acquire("worker-1", ttl=10, wait=60) as slot:
            await encode(slot.fencing_token)

    A slot is a :class:`Session` like a lease's: renewed in the background,
    :attr:`Session.lost` set the moment the slot is lost (its own slot
    revoked, expired or taken over; other holders coming and going never
    end it), never held past its safe deadline. Stop before the safe
    deadline and pass the fencing token downstream with every write.

    The first holder's limit defines the semaphore while it has holders:
    an acquire with another limit raises :class:`TenureError` with reason
    LIMIT_MISMATCH (:attr:`TenureError.limit_in_force` is the limit in force).

    Attributes:
        name: the semaphore's name.
        limit: how many holders it admits.
    """

    def __init__(self, client: TenureClient, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError("a semaphore's limit must be at least 1")
        self._client = client
        self.name = name
        self.limit = limit

    def __repr__(self) -> str:
        return f"Semaphore(name={self.name!r}, limit={self.limit})"

    def acquire(
        self,
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
        """Takes a slot for `holder`, as :meth:`TenureClient.acquire` takes
        a lease (same arguments; `wait` waits for a free slot, in arrival
        order). Await it for the :class:`Session`, or use ``async with``.

        Raises:
            TenureError: LEASE_HELD when every slot is taken (without a
                wait), LIMIT_MISMATCH when the live holders use another
                limit, and as for a lease.
        """
        return self._client._acquire_context(
            self.name,
            holder,
            ttl,
            wait=wait,
            lease_key=lease_key,
            metadata=metadata,
            renew_fraction=renew_fraction,
            safety_margin=safety_margin,
            timeout=timeout,
            lock_delay=None,
            limit=self.limit,
        )


class RWLock:
    """A read-write lock on the server: either one exclusive holder
    (:meth:`write`) or any number of shared holders (:meth:`read`, up to the
    server's ``--max-shared-holders``, 64 by default) at once. Every holder
    has its own slot (:attr:`Session.slot`), lease key and fencing token
    (tokens increase across all holders of the name, shared and exclusive,
    in grant order). Get one from :meth:`TenureClient.rwlock`::

        lock = client.rwlock("catalog")
        async with lock.read("reader-1", ttl=10, wait=30) as r:
            await read_catalog(r.fencing_token)
        async with lock.write("writer-1", ttl=10, wait=30) as w:
            await rebuild_catalog(w.fencing_token)
            await w.downgrade()  # keep reading, let readers in
            await verify_catalog(w.fencing_token)

    Each holding is a :class:`Session` like a lease's: renewed in the
    background, :attr:`Session.lost` set the moment it is lost (only its
    own slot counts: other holders coming and going never end it), never
    held past its safe deadline; :attr:`Session.mode` says EXCLUSIVE or
    SHARED, and :meth:`Session.downgrade` turns an exclusive holding shared
    without a gap.

    Waiters of both modes queue in one arrival-order queue across replicas:
    a :meth:`read` arriving after a queued :meth:`write` waits behind it, so
    writers are never starved by a stream of readers. Without a wait an
    acquire is refused LEASE_HELD when the lock is held incompatibly or
    anyone is queued (``metadata["state"]`` QUEUED). There is no upgrade:
    a :meth:`write` by a shared holder's holder and key is refused
    MODE_MISMATCH. A semaphore's name is refused MODE_MISMATCH, and the
    other way round (a plain lease of the same name is kept apart from the
    lock).

    Attributes:
        name: the lock's name.
    """

    def __init__(self, client: TenureClient, name: str) -> None:
        self._client = client
        self.name = name

    def __repr__(self) -> str:
        return f"RWLock(name={self.name!r})"

    def write(
        self,
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
        """Takes the lock exclusively for `holder` (mode EXCLUSIVE), as
        :meth:`TenureClient.acquire` takes a lease (same arguments; `wait`
        waits in the lock's queue). Await it for the :class:`Session`, or
        use ``async with``.

        Raises:
            TenureError: LEASE_HELD when anyone holds the lock or waits for
                it (without a wait); MODE_MISMATCH when the name is a
                semaphore's, or `holder` with this key holds it shared (no
                upgrade); and as for a lease.
        """
        return self._acquire(
            LockMode.EXCLUSIVE,
            holder,
            ttl,
            wait,
            lease_key,
            metadata,
            renew_fraction,
            safety_margin,
            timeout,
        )

    def read(
        self,
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
        """Takes the lock shared for `holder` (mode SHARED), beside other
        shared holders; arguments as for :meth:`write`.

        Raises:
            TenureError: LEASE_HELD when the lock is held exclusively or
                anyone waits for it (without a wait);
                TOO_MANY_SHARED_HOLDERS (retryable) when the server's
                ``--max-shared-holders`` hold it shared (without a wait;
                with one it waits for a holder to leave); MODE_MISMATCH
                when the name is a semaphore's, or `holder` with this key
                holds it exclusively; and as for a lease.
        """
        return self._acquire(
            LockMode.SHARED,
            holder,
            ttl,
            wait,
            lease_key,
            metadata,
            renew_fraction,
            safety_margin,
            timeout,
        )

    def _acquire(
        self,
        mode: LockMode,
        holder: str,
        ttl: Seconds,
        wait: Optional[Seconds],
        lease_key: Optional[str],
        metadata: Optional[Mapping[str, str]],
        renew_fraction: float,
        safety_margin: Optional[Seconds],
        timeout: Optional[float],
    ) -> "AcquireContext":
        return self._client._acquire_context(
            self.name,
            holder,
            ttl,
            wait=wait,
            lease_key=lease_key,
            metadata=metadata,
            renew_fraction=renew_fraction,
            safety_margin=safety_margin,
            timeout=timeout,
            lock_delay=None,
            limit=0,
            mode=mode,
        )


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
    """An async iterator of :class:`LeaseEvent` that reconnects and resumes
    (see :meth:`TenureClient.watch`).

    A permanent failure raises :class:`TenureError` and ends the iteration.
    :meth:`aclose` (or leaving ``async with``) cancels the stream.
    """

    def __init__(self, client: "TenureClient", request: lease_pb2.WatchLeaseRequest) -> None:
        self._client = client
        self._request = request
        self._point = ResumePoint(request.start_revision)
        self._call: Optional[grpc.aio.UnaryStreamCall] = None
        self._backoff = Backoff()
        self._started = False  # a stream delivered an event
        self._resync = False  # the current stream's snapshot replaces a view
        self._closed = False

    def __aiter__(self) -> AsyncIterator[LeaseEvent]:
        return self

    def _open(self) -> None:
        start = self._point.start()
        if start == 0:
            self._point = ResumePoint()
        self._request.start_revision = start
        self._call = self._client.stub.WatchLease(
            self._request, metadata=self._client._call_metadata()
        )

    async def _failed(self, err: TenureError) -> None:
        """Handles a failed stream: raises when permanent, else prepares the
        next one (after the backoff when retrying)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
        step = watch_step(err)
        if step == "stop" or (step == "retry" and not self._started):
            self._closed = True
            raise err
        if step == "fresh":
            self._point = ResumePoint()
        else:
            await self._backoff.wait()
        if self._point.start() == 0:
            self._resync = True

    async def __anext__(self) -> LeaseEvent:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if self._call is None:
                self._open()
            assert self._call is not None
            resumed = self._request.start_revision > 0
            try:
                message = await self._call.read()
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.CANCELLED and self._closed:
                    raise StopAsyncIteration from None
                await self._failed(
                    TenureError.from_rpc_error(err, target=self._client.target, rpc="WatchLease")
                )
                continue
            if message is grpc.aio.EOF:
                # The server ended the stream cleanly (e.g. it is stopping).
                await self._failed(
                    TenureError(
                        Reason.ERROR_REASON_UNSPECIFIED,
                        "the server ended the stream",
                        code=grpc.StatusCode.UNAVAILABLE,
                        target=self._client.target,
                        rpc="WatchLease",
                    )
                )
                continue
            self._started = True
            self._backoff.reset()
            proto = message.event
            old = resumed and proto.revision <= self._point.revision
            self._point.see(proto)
            complete = proto.type == lease_pb2.EVENT_TYPE_SNAPSHOT_COMPLETE
            if resumed and (old or complete):
                continue  # replayed again, or the "caught up" marker
            resync = self._resync
            if complete:
                self._resync = False
            try:
                event = LeaseEvent.from_proto(message.event)
            except ValueError:
                continue  # an event type newer than this client: skip it
            return dataclasses.replace(event, resync=True) if resync else event

    async def aclose(self) -> None:
        """Cancels the stream; iteration then ends."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    async def __aenter__(self) -> "LeaseWatch":
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.aclose()


def _pem(value: Union[bytes, str]) -> bytes:
    """PEM bytes as given, or read from the file a str names."""
    if isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()
