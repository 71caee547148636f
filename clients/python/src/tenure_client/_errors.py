"""Tenure's typed errors: the `google.rpc.ErrorInfo` reason of a failed call."""

from __future__ import annotations

import enum
from typing import Mapping, Optional

import grpc
from google.rpc import error_details_pb2, status_pb2

from ._gen import error_reason_pb2

#: The `google.rpc.ErrorInfo` domain of every Tenure error.
DOMAIN = "tenure.v1"

#: The trailer that carries a serialized `google.rpc.Status` with details.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class _ReasonBase(str, enum.Enum):
    """The behaviour of :class:`Reason`, whose members come from the proto."""

    def __str__(self) -> str:
        return self.value

    @property
    def number(self) -> int:
        """The reason's number in the proto enum ``tenure.v1.ErrorReason``."""
        return error_reason_pb2.ErrorReason.Value(self.value)

    @property
    def retryable(self) -> bool:
        """Whether sending the same request again may succeed after this
        reason (it is in :data:`RETRYABLE_REASONS`). False for every other
        reason, :attr:`~Reason.ERROR_REASON_UNSPECIFIED` included."""
        return self in RETRYABLE_REASONS


# The members are made from the generated enum, so this client knows every
# reason the proto has; `Reason.__doc__` below says what they are.
Reason = _ReasonBase(  # type: ignore[call-overload]
    "Reason",
    [(name, name) for name in error_reason_pb2.ErrorReason.keys()],
    module=__name__,
    qualname="Reason",
)
Reason.__doc__ = """Why a Tenure call failed: the ``ErrorInfo.reason`` sent by the server.

The members are the values of the generated enum ``tenure.v1.ErrorReason``
(:mod:`tenure_client._gen.error_reason_pb2`, from
``proto/tenure/v1/error_reason.proto``), named and valued by the reason
strings themselves, so ``Reason("LEASE_HELD") is Reason.LEASE_HELD`` and a
reason compares equal to its string. ``ERROR_REASON_UNSPECIFIED`` stands for
a failure without a Tenure ``ErrorInfo`` (the server could not be reached,
the call's deadline passed) or with a reason newer than this client (see
:attr:`TenureError.raw_reason`). :attr:`retryable` tells whether sending the
same request again may help (:data:`RETRYABLE_REASONS`).
"""

#: The one classification of the reasons (the "Error reasons" table of
#: clients/README.md): sending the same request again may succeed after these;
#: every other reason is permanent. The renew loop decides with it.
RETRYABLE_REASONS: frozenset[_ReasonBase] = frozenset(
    {
        Reason.NATS_UNAVAILABLE,
        Reason.WATCH_LAGGED,
        Reason.SHUTTING_DOWN,
        Reason.TOO_MANY_REQUESTS,
        Reason.TOO_MANY_WATCHES,
        Reason.TOO_MANY_WAITERS,
        Reason.TOO_MANY_SHARED_HOLDERS,
    }
)

# Status codes after which a failure without a Tenure reason may pass.
_RETRYABLE_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
    }
)


def parse_reason(raw: str) -> Reason:
    """The :class:`Reason` of an ``ErrorInfo.reason`` string; an unknown or
    empty one is :attr:`Reason.ERROR_REASON_UNSPECIFIED`."""
    try:
        return Reason(raw)
    except ValueError:
        return Reason.ERROR_REASON_UNSPECIFIED


class TenureError(Exception):
    """A failed Tenure call, with its typed :class:`Reason`.

    Attributes:
        reason: the ErrorInfo reason as a :class:`Reason`.
        raw_reason: the reason string exactly as sent ("" when none was).
        code: the gRPC status code, or ``None`` for a failure made locally.
        message: the server's one-line message for a person.
        metadata: the ErrorInfo metadata (for LEASE_HELD: ``holder``,
            ``fencing_token``, ``ttl_seconds``; for LEASE_NOT_HELD: ``state``).
        target: the server address the call went to ("" when unknown).
        rpc: the call that failed, e.g. "Acquire" ("" when unknown).

    ``str(err)`` names all of it: ``tenure at 127.0.0.1:7001: Acquire:
    LEASE_HELD (FAILED_PRECONDITION): ...``, or without a reason ``tenure at
    127.0.0.1:7001: Acquire: UNAVAILABLE: ... Connection refused``.
    """

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        metadata: Optional[Mapping[str, str]] = None,
        raw_reason: Optional[str] = None,
        target: str = "",
        rpc: str = "",
    ) -> None:
        super().__init__(message)
        self.target = target
        self.rpc = rpc
        self.reason = reason
        self.raw_reason = reason.value if raw_reason is None else raw_reason
        self.code = code
        self.message = message
        self.metadata: Mapping[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        code = self.code.name if self.code is not None else "LOCAL"
        where = f"tenure at {self.target}: " if self.target else "tenure: "
        if self.rpc:
            where += f"{self.rpc}: "
        if not self.raw_reason:
            return f"{where}{code}: {self.message}"
        return f"{where}{self.raw_reason} ({code}): {self.message}"

    def __repr__(self) -> str:
        return (
            f"TenureError(reason={self.reason.value!r}, code={self.code!r}, "
            f"message={self.message!r}, metadata={dict(self.metadata)!r})"
        )

    @property
    def limit_in_force(self) -> Optional[int]:
        """For LIMIT_MISMATCH, the limit of the semaphore's live holders
        (from the ``limit`` metadata); ``None`` for any other error."""
        if self.reason is not Reason.LIMIT_MISMATCH:
            return None
        try:
            return int(self.metadata["limit"])
        except (KeyError, ValueError):
            return None

    @property
    def required_nats_server(self) -> Optional[str]:
        """For ATOMIC_BATCH_UNSUPPORTED (the server's NATS has no atomic
        batches, which lock-delay, semaphores and groups need), the
        nats-server version needed (from the ``required_nats_server``
        metadata); ``None`` for any other error."""
        if self.reason is not Reason.ATOMIC_BATCH_UNSUPPORTED:
            return None
        return self.metadata.get("required_nats_server") or None

    @property
    def retryable(self) -> bool:
        """Whether sending the same call again may succeed. With a reason
        this client knows, that is :attr:`Reason.retryable` (the table of
        clients/README.md: NATS or the server away, too many requests, ...);
        without one (the server could not be reached, the deadline passed, a
        newer server's reason) it goes by the gRPC code: UNAVAILABLE,
        DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNKNOWN and
        CANCELLED are retryable."""
        if self.reason is not Reason.ERROR_REASON_UNSPECIFIED:
            return self.reason.retryable
        return self.code in _RETRYABLE_CODES

    @classmethod
    def from_rpc_error(
        cls, err: grpc.RpcError, *, target: str = "", rpc: str = ""
    ) -> "TenureError":
        """Builds the error from a failed gRPC call, reading the
        ``google.rpc.ErrorInfo`` of domain ``tenure.v1`` from the
        ``grpc-status-details-bin`` trailer."""
        code = err.code() if hasattr(err, "code") else None
        message = err.details() if hasattr(err, "details") else str(err)
        raw, metadata = _error_info(err)
        reason = parse_reason(raw)
        return cls(
            reason,
            message or "",
            code=code,
            metadata=metadata,
            raw_reason=raw,
            target=target,
            rpc=rpc,
        )


def _error_info(err: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The Tenure ErrorInfo reason and metadata of a failed call, if any."""
    trailers = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailers or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a malformed trailer: no details then
            return "", {}
        for detail in status.details:
            if not detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                continue
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == DOMAIN:
                return info.reason, dict(info.metadata)
    return "", {}
