from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    INVALID_NAME: _ClassVar[ErrorReason]
    INVALID_HOLDER: _ClassVar[ErrorReason]
    INVALID_TTL: _ClassVar[ErrorReason]
    INVALID_LEASE_KEY: _ClassVar[ErrorReason]
    INVALID_REVISION: _ClassVar[ErrorReason]
    INVALID_METADATA: _ClassVar[ErrorReason]
    INVALID_WAIT: _ClassVar[ErrorReason]
    INVALID_ARGUMENT: _ClassVar[ErrorReason]
    LEASE_HELD: _ClassVar[ErrorReason]
    LEASE_NOT_HELD: _ClassVar[ErrorReason]
    LEASE_NOT_FOUND: _ClassVar[ErrorReason]
    RECORD_UNREADABLE: _ClassVar[ErrorReason]
    NATS_UNAVAILABLE: _ClassVar[ErrorReason]
    WATCH_LAGGED: _ClassVar[ErrorReason]
    SHUTTING_DOWN: _ClassVar[ErrorReason]
    UNAUTHENTICATED: _ClassVar[ErrorReason]
    PERMISSION_DENIED: _ClassVar[ErrorReason]
    TOO_MANY_REQUESTS: _ClassVar[ErrorReason]
    TOO_MANY_WATCHES: _ClassVar[ErrorReason]
    REQUEST_TOO_LARGE: _ClassVar[ErrorReason]
    METADATA_TOO_LARGE: _ClassVar[ErrorReason]
    INTERNAL: _ClassVar[ErrorReason]
    TOO_MANY_WAITERS: _ClassVar[ErrorReason]
    LIMIT_MISMATCH: _ClassVar[ErrorReason]
    WATCH_HISTORY_COMPACTED: _ClassVar[ErrorReason]
    ATOMIC_BATCH_UNSUPPORTED: _ClassVar[ErrorReason]
    GROUP_MEMBER: _ClassVar[ErrorReason]
    BUCKET_FULL: _ClassVar[ErrorReason]
    HISTORY_OFF: _ClassVar[ErrorReason]
    NO_WAITER: _ClassVar[ErrorReason]
    TOO_MANY_SHARED_HOLDERS: _ClassVar[ErrorReason]
    MODE_MISMATCH: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
INVALID_NAME: ErrorReason
INVALID_HOLDER: ErrorReason
INVALID_TTL: ErrorReason
INVALID_LEASE_KEY: ErrorReason
INVALID_REVISION: ErrorReason
INVALID_METADATA: ErrorReason
INVALID_WAIT: ErrorReason
INVALID_ARGUMENT: ErrorReason
LEASE_HELD: ErrorReason
LEASE_NOT_HELD: ErrorReason
LEASE_NOT_FOUND: ErrorReason
RECORD_UNREADABLE: ErrorReason
NATS_UNAVAILABLE: ErrorReason
WATCH_LAGGED: ErrorReason
SHUTTING_DOWN: ErrorReason
UNAUTHENTICATED: ErrorReason
PERMISSION_DENIED: ErrorReason
TOO_MANY_REQUESTS: ErrorReason
TOO_MANY_WATCHES: ErrorReason
REQUEST_TOO_LARGE: ErrorReason
METADATA_TOO_LARGE: ErrorReason
INTERNAL: ErrorReason
TOO_MANY_WAITERS: ErrorReason
LIMIT_MISMATCH: ErrorReason
WATCH_HISTORY_COMPACTED: ErrorReason
ATOMIC_BATCH_UNSUPPORTED: ErrorReason
GROUP_MEMBER: ErrorReason
BUCKET_FULL: ErrorReason
HISTORY_OFF: ErrorReason
NO_WAITER: ErrorReason
TOO_MANY_SHARED_HOLDERS: ErrorReason
MODE_MISMATCH: ErrorReason
