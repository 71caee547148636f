"""Plain Python views of Tenure's messages: :class:`Lease`, :class:`LeaseEvent`,
:class:`EventType` and :class:`LockMode`, plus duration conversion."""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple, Union

from google.protobuf import duration_pb2

from ._gen import lease_pb2

#: A duration given as seconds or as a :class:`datetime.timedelta`.
Seconds = Union[float, int, _dt.timedelta]


def to_seconds(value: Seconds) -> float:
    """Seconds of a float/int or a timedelta."""
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    return float(value)


def to_duration(value: Seconds) -> duration_pb2.Duration:
    """A protobuf Duration of `value` seconds (nanosecond precision)."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(to_seconds(value) * 1_000_000_000))
    return d


class EventType(enum.IntEnum):
    """The kind of a :class:`LeaseEvent`; the values are the proto's."""

    #: A lease held when the watch started (part of the snapshot).
    CURRENT = lease_pb2.EVENT_TYPE_CURRENT
    #: End of the snapshot: every later event is a live change.
    SNAPSHOT_COMPLETE = lease_pb2.EVENT_TYPE_SNAPSHOT_COMPLETE
    #: A new holding (a new fencing token).
    ACQUIRED = lease_pb2.EVENT_TYPE_ACQUIRED
    #: A renewal of the current holding.
    RENEWED = lease_pb2.EVENT_TYPE_RENEWED
    #: A holder ended its holding.
    RELEASED = lease_pb2.EVENT_TYPE_RELEASED
    #: A holding ran out of time.
    EXPIRED = lease_pb2.EVENT_TYPE_EXPIRED
    #: An operator removed the holding.
    REVOKED = lease_pb2.EVENT_TYPE_REVOKED
    #: The stream did not see every change of the name (its server's watcher
    #: fell behind the bucket, which keeps one message per name): changes
    #: after ``missed_after_revision`` and before ``revision`` are gone. The
    #: holding in ``holder``/``fencing_token`` (when known, token != 0) has
    #: ended; other holdings may have come and gone. The events after it are
    #: the name's changes from ``revision`` on. Sent whatever ``event_types``
    #: a watch asks for.
    MISSED = lease_pb2.EVENT_TYPE_MISSED

    def __str__(self) -> str:
        return self.name


class LockMode(enum.IntEnum):
    """How a holding holds a read-write lock (:meth:`TenureClient.rwlock`);
    the values are the proto's ``tenure.v1.LockMode``."""

    #: Not a read-write lock's holding: a plain lease or a semaphore slot.
    UNSPECIFIED = lease_pb2.LOCK_MODE_UNSPECIFIED
    #: The lock's only holder: nobody else, shared or exclusive, holds it.
    EXCLUSIVE = lease_pb2.LOCK_MODE_EXCLUSIVE
    #: One of the shared holders, while nobody holds it exclusively.
    SHARED = lease_pb2.LOCK_MODE_SHARED

    def __str__(self) -> str:
        return self.name

    @classmethod
    def of(cls, value: int) -> "LockMode":
        """The mode of a proto value; one newer than this client is
        UNSPECIFIED."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNSPECIFIED


def _time(ts, present: bool) -> Optional[_dt.datetime]:
    return ts.ToDatetime(tzinfo=_dt.timezone.utc) if present else None


@dataclass(frozen=True)
class Lease:
    """One holding of a name, as the server stores it.

    Attributes:
        name: the lease name.
        holder: who holds it.
        fencing_token: constant across renewals, strictly greater for every
            later holder of the name; pass it to downstream stores.
        revision: the revision of the latest write of this holding.
        ttl: the granted time to live, seconds (whole seconds).
        metadata: the key/value map given at acquire.
        acquire_time: when it was acquired (server clock, UTC).
        renew_time: when it was last written (server clock, UTC).
        lock_delay: the holding's lock delay in seconds (``None`` when none):
            after it expires or is revoked the name stays refused this long.
        slot: the semaphore slot of the holding (1 to the limit), or the
            read-write lock slot of a lock's holding (every holder of a
            read-write lock has its own); 0 for a plain lease.
        group: every name of the group this holding was acquired with
            (:meth:`TenureClient.acquire_group`), in request order; empty for
            a holding acquired alone.
        fence_proof: the holding's fence proof, an Ed25519-signed statement
            of the grant a downstream store verifies offline (docs/fencing.md);
            set in the replies that grant a holding when the server has a
            fence signing key, empty otherwise (renewal replies too).
        mode: for a read-write lock's holding, :attr:`LockMode.EXCLUSIVE`
            or :attr:`LockMode.SHARED`; :attr:`LockMode.UNSPECIFIED` for a
            plain lease or a semaphore slot.
    """

    name: str
    holder: str
    fencing_token: int
    revision: int
    ttl: float
    metadata: Mapping[str, str] = field(default_factory=dict)
    acquire_time: Optional[_dt.datetime] = None
    renew_time: Optional[_dt.datetime] = None
    lock_delay: Optional[float] = None
    slot: int = 0
    group: Tuple[str, ...] = ()
    fence_proof: bytes = b""
    mode: LockMode = LockMode.UNSPECIFIED

    @classmethod
    def from_proto(cls, msg: lease_pb2.Lease) -> "Lease":
        """The view of a `tenure.v1.Lease` message."""
        return cls(
            name=msg.name,
            holder=msg.holder,
            fencing_token=msg.fencing_token,
            revision=msg.revision,
            ttl=msg.ttl.ToNanoseconds() / 1e9,
            metadata=dict(msg.metadata),
            acquire_time=_time(msg.acquire_time, msg.HasField("acquire_time")),
            renew_time=_time(msg.renew_time, msg.HasField("renew_time")),
            lock_delay=(
                msg.lock_delay.ToNanoseconds() / 1e9 if msg.HasField("lock_delay") else None
            ),
            slot=msg.slot,
            group=tuple(msg.group),
            fence_proof=msg.fence_proof,
            mode=LockMode.of(msg.mode),
        )


@dataclass(frozen=True)
class LeaseEvent:
    """One change of a lease, or one entry of a watch's initial snapshot.

    Attributes:
        type: what happened.
        name: the lease it happened to ("" for SNAPSHOT_COMPLETE).
        revision: the revision of the change.
        holder: the holder concerned ("" when the watch never saw it).
        fencing_token: the token of the holding concerned (0 when unknown).
        lease: the full holding for CURRENT, ACQUIRED and RENEWED.
        time: when the change was written (server clock, UTC), if known.
        resync: True on the CURRENT events and the SNAPSHOT_COMPLETE of a
            snapshot sent again after a reconnect that could not resume (the
            server no longer had the history: WATCH_HISTORY_COMPACTED; the
            stream broke before its first snapshot was complete; or it had
            seen no revision yet: an empty snapshot and no change). Changes
            made while disconnected may be missing from the events: replace
            what you built from earlier events with this snapshot.
        slot: the semaphore slot concerned (1 to the limit); 0 for a plain
            lease. A semaphore's holders are told apart by it.
        missed_after_revision: for MISSED, the last revision of the name the
            stream saw (0: none): its changes after that one and before
            :attr:`revision` were not all seen. 0 for every other type.
    """

    type: EventType
    name: str
    revision: int
    holder: str
    fencing_token: int
    lease: Optional[Lease] = None
    time: Optional[_dt.datetime] = None
    resync: bool = False
    slot: int = 0
    missed_after_revision: int = 0

    @classmethod
    def from_proto(cls, msg: lease_pb2.LeaseEvent) -> "LeaseEvent":
        """The view of a `tenure.v1.LeaseEvent` message."""
        return cls(
            type=EventType(msg.type),
            name=msg.name,
            revision=msg.revision,
            holder=msg.holder,
            fencing_token=msg.fencing_token,
            lease=Lease.from_proto(msg.lease) if msg.HasField("lease") else None,
            time=_time(msg.time, msg.HasField("time")),
            slot=msg.slot,
            missed_after_revision=msg.missed_after_revision,
        )


@dataclass(frozen=True)
class LeaseInfo:
    """What :meth:`TenureClient.inspect` returns (a GetLease reply).

    Attributes:
        lease: the current holding (for a semaphore: the holder with the
            lowest fencing token).
        waiting: how many Acquires with a wait are queued for the name, in
            every replica.
        holders: a semaphore's live holders, by slot; empty for a lease.
        limit: a semaphore's limit in force; 0 for a lease.
        free_slots: how many more holders a semaphore admits now.
    """

    lease: Lease
    waiting: int = 0
    holders: Tuple[Lease, ...] = ()
    limit: int = 0
    free_slots: int = 0

    @classmethod
    def from_proto(cls, msg: lease_pb2.GetLeaseResponse) -> "LeaseInfo":
        """The view of a `tenure.v1.GetLeaseResponse` message."""
        return cls(
            lease=Lease.from_proto(msg.lease),
            waiting=msg.waiting,
            holders=tuple(Lease.from_proto(h) for h in msg.holders),
            limit=msg.limit,
            free_slots=msg.free_slots,
        )
