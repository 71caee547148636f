"""Tenure's typed errors: the `google.rpc.ErrorInfo` reason of a failed call."""

from __future__ import annotations

import enum
from typing import Mapping, Optional

import grpc
from google.rpc import error_details_pb2, status_pb2

#: The `google.rpc.ErrorInfo` domain of every Tenure error.
DOMAIN = "tenure.v1"

#: The trailer that carries a serialized `google.rpc.Status` with details.
_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class Reason(str, enum.Enum):
    """Why a Tenure call failed: the `ErrorInfo.reason` sent by the server.

    The values are the server's stable UPPER_SNAKE strings, so
    ``Reason("LEASE_HELD") is Reason.LEASE_HELD`` and a reason compares equal
    to its string. :attr:`UNKNOWN` stands for a failure without a Tenure
    ``ErrorInfo`` (the server could not be reached, the call's deadline
    passed, or a reason newer than this client).
    """

    #: Another holder has the lease (FAILED_PRECONDITION); metadata has
    #: ``holder``, ``fencing_token`` and ``ttl_seconds``.
    LEASE_HELD = "LEASE_HELD"
    #: The caller does not hold the lease (any more) (FAILED_PRECONDITION);
    #: metadata has ``state``.
    LEASE_NOT_HELD = "LEASE_NOT_HELD"
    #: Nobody holds the lease (NOT_FOUND).
    LEASE_NOT_FOUND = "LEASE_NOT_FOUND"
    #: The lease name breaks the naming rule (INVALID_ARGUMENT).
    INVALID_NAME = "INVALID_NAME"
    #: The holder is empty, too long or not printable (INVALID_ARGUMENT).
    INVALID_HOLDER = "INVALID_HOLDER"
    #: The TTL is zero, negative or above the server's maximum (INVALID_ARGUMENT).
    INVALID_TTL = "INVALID_TTL"
    #: The lease key is malformed (INVALID_ARGUMENT).
    INVALID_LEASE_KEY = "INVALID_LEASE_KEY"
    #: The expected revision is missing (INVALID_ARGUMENT).
    INVALID_REVISION = "INVALID_REVISION"
    #: The metadata has too many entries or is too large (INVALID_ARGUMENT).
    INVALID_METADATA = "INVALID_METADATA"
    #: The wait is negative or above the server's maximum (INVALID_ARGUMENT).
    INVALID_WAIT = "INVALID_WAIT"
    #: Another argument is malformed (INVALID_ARGUMENT).
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    #: The bucket holds a value under the name that is not a lease (DATA_LOSS).
    RECORD_UNREADABLE = "RECORD_UNREADABLE"
    #: The server cannot reach NATS (UNAVAILABLE); retry shortly.
    NATS_UNAVAILABLE = "NATS_UNAVAILABLE"
    #: The server is shutting down (UNAVAILABLE); retry on another replica.
    SHUTTING_DOWN = "SHUTTING_DOWN"
    #: An unexpected server failure (INTERNAL).
    INTERNAL = "INTERNAL"
    #: No Tenure ErrorInfo came with the status (transport failure, client
    #: deadline, or an unknown reason: see :attr:`TenureError.raw_reason`).
    UNKNOWN = "UNKNOWN"

    def __str__(self) -> str:
        return self.value


# Reasons after which retrying the same call cannot succeed.
_FINAL_REASONS = frozenset(
    {
        Reason.LEASE_NOT_HELD,
        Reason.LEASE_NOT_FOUND,
        Reason.RECORD_UNREADABLE,
        Reason.INVALID_NAME,
        Reason.INVALID_HOLDER,
        Reason.INVALID_TTL,
        Reason.INVALID_LEASE_KEY,
        Reason.INVALID_REVISION,
        Reason.INVALID_METADATA,
        Reason.INVALID_WAIT,
        Reason.INVALID_ARGUMENT,
    }
)

# Status codes (of errors without a Tenure reason) that retrying cannot fix.
_FINAL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.OUT_OF_RANGE,
    }
)


class TenureError(Exception):
    """A failed Tenure call, with its typed :class:`Reason`.

    Attributes:
        reason: the ErrorInfo reason as a :class:`Reason`.
        raw_reason: the reason string exactly as sent ("" when none was).
        code: the gRPC status code, or ``None`` for a failure made locally.
        message: the server's one-line message for a person.
        metadata: the ErrorInfo metadata (for LEASE_HELD: ``holder``,
            ``fencing_token``, ``ttl_seconds``; for LEASE_NOT_HELD: ``state``).
    """

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        code: Optional[grpc.StatusCode] = None,
        metadata: Optional[Mapping[str, str]] = None,
        raw_reason: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.raw_reason = reason.value if raw_reason is None else raw_reason
        self.code = code
        self.message = message
        self.metadata: Mapping[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        code = self.code.name if self.code is not None else "LOCAL"
        return f"{self.reason.value} ({code}): {self.message}"

    def __repr__(self) -> str:
        return (
            f"TenureError(reason={self.reason.value!r}, code={self.code!r}, "
            f"message={self.message!r}, metadata={dict(self.metadata)!r})"
        )

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later (the server or NATS was
        away, the deadline passed); False when it never can (the lease is not
        held, an argument is invalid)."""
        if self.reason in _FINAL_REASONS:
            return False
        if self.reason is Reason.UNKNOWN and self.code in _FINAL_CODES:
            return False
        return True

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> "TenureError":
        """Builds the error from a failed gRPC call, reading the
        ``google.rpc.ErrorInfo`` of domain ``tenure.v1`` from the
        ``grpc-status-details-bin`` trailer."""
        code = err.code() if hasattr(err, "code") else None
        message = err.details() if hasattr(err, "details") else str(err)
        raw, metadata = _error_info(err)
        try:
            reason = Reason(raw) if raw else Reason.UNKNOWN
        except ValueError:
            reason = Reason.UNKNOWN
        return cls(
            reason,
            message or "",
            code=code,
            metadata=metadata,
            raw_reason=raw,
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
