import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOCK_MODE_UNSPECIFIED: _ClassVar[LockMode]
    LOCK_MODE_EXCLUSIVE: _ClassVar[LockMode]
    LOCK_MODE_SHARED: _ClassVar[LockMode]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_CURRENT: _ClassVar[EventType]
    EVENT_TYPE_SNAPSHOT_COMPLETE: _ClassVar[EventType]
    EVENT_TYPE_ACQUIRED: _ClassVar[EventType]
    EVENT_TYPE_RENEWED: _ClassVar[EventType]
    EVENT_TYPE_RELEASED: _ClassVar[EventType]
    EVENT_TYPE_EXPIRED: _ClassVar[EventType]
    EVENT_TYPE_REVOKED: _ClassVar[EventType]
    EVENT_TYPE_MISSED: _ClassVar[EventType]

class HoldingEnding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOLDING_ENDING_UNSPECIFIED: _ClassVar[HoldingEnding]
    HOLDING_ENDING_HELD: _ClassVar[HoldingEnding]
    HOLDING_ENDING_RELEASED: _ClassVar[HoldingEnding]
    HOLDING_ENDING_EXPIRED: _ClassVar[HoldingEnding]
    HOLDING_ENDING_REVOKED: _ClassVar[HoldingEnding]
    HOLDING_ENDING_UNKNOWN: _ClassVar[HoldingEnding]
LOCK_MODE_UNSPECIFIED: LockMode
LOCK_MODE_EXCLUSIVE: LockMode
LOCK_MODE_SHARED: LockMode
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_CURRENT: EventType
EVENT_TYPE_SNAPSHOT_COMPLETE: EventType
EVENT_TYPE_ACQUIRED: EventType
EVENT_TYPE_RENEWED: EventType
EVENT_TYPE_RELEASED: EventType
EVENT_TYPE_EXPIRED: EventType
EVENT_TYPE_REVOKED: EventType
EVENT_TYPE_MISSED: EventType
HOLDING_ENDING_UNSPECIFIED: HoldingEnding
HOLDING_ENDING_HELD: HoldingEnding
HOLDING_ENDING_RELEASED: HoldingEnding
HOLDING_ENDING_EXPIRED: HoldingEnding
HOLDING_ENDING_REVOKED: HoldingEnding
HOLDING_ENDING_UNKNOWN: HoldingEnding

class Lease(_message.Message):
    __slots__ = ("name", "holder", "fencing_token", "revision", "ttl", "metadata", "acquire_time", "renew_time", "lock_delay", "slot", "group", "fence_proof", "mode")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    RENEW_TIME_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    FENCE_PROOF_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    fencing_token: int
    revision: int
    ttl: _duration_pb2.Duration
    metadata: _containers.ScalarMap[str, str]
    acquire_time: _timestamp_pb2.Timestamp
    renew_time: _timestamp_pb2.Timestamp
    lock_delay: _duration_pb2.Duration
    slot: int
    group: _containers.RepeatedScalarFieldContainer[str]
    fence_proof: bytes
    mode: LockMode
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., fencing_token: _Optional[int] = ..., revision: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., acquire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., renew_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., slot: _Optional[int] = ..., group: _Optional[_Iterable[str]] = ..., fence_proof: _Optional[bytes] = ..., mode: _Optional[_Union[LockMode, str]] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("name", "holder", "ttl", "lease_key", "wait", "metadata", "lock_delay", "limit", "preference", "mode")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    ttl: _duration_pb2.Duration
    lease_key: str
    wait: _duration_pb2.Duration
    metadata: _containers.ScalarMap[str, str]
    lock_delay: _duration_pb2.Duration
    limit: int
    preference: int
    mode: LockMode
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_key: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., limit: _Optional[int] = ..., preference: _Optional[int] = ..., mode: _Optional[_Union[LockMode, str]] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ("lease", "lease_key")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    lease_key: str
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., lease_key: _Optional[str] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("name", "expected_revision", "lease_key", "ttl", "slot")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    lease_key: str
    ttl: _duration_pb2.Duration
    slot: int
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., slot: _Optional[int] = ...) -> None: ...

class RenewResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("name", "expected_revision", "lease_key", "slot")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    lease_key: str
    slot: int
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., slot: _Optional[int] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class GetLeaseRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetLeaseResponse(_message.Message):
    __slots__ = ("lease", "waiting", "holders", "limit", "free_slots")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    waiting: int
    holders: _containers.RepeatedCompositeFieldContainer[Lease]
    limit: int
    free_slots: int
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., waiting: _Optional[int] = ..., holders: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., limit: _Optional[int] = ..., free_slots: _Optional[int] = ...) -> None: ...

class WatchLeaseRequest(_message.Message):
    __slots__ = ("name", "event_types", "start_revision", "shard_revisions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    START_REVISION_FIELD_NUMBER: _ClassVar[int]
    SHARD_REVISIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    event_types: _containers.RepeatedScalarFieldContainer[EventType]
    start_revision: int
    shard_revisions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., event_types: _Optional[_Iterable[_Union[EventType, str]]] = ..., start_revision: _Optional[int] = ..., shard_revisions: _Optional[_Iterable[int]] = ...) -> None: ...

class WatchLeaseResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: LeaseEvent
    def __init__(self, event: _Optional[_Union[LeaseEvent, _Mapping]] = ...) -> None: ...

class LeaseEvent(_message.Message):
    __slots__ = ("type", "name", "revision", "holder", "fencing_token", "lease", "time", "slot", "shard", "shard_revisions", "missed_after_revision")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    SHARD_REVISIONS_FIELD_NUMBER: _ClassVar[int]
    MISSED_AFTER_REVISION_FIELD_NUMBER: _ClassVar[int]
    type: EventType
    name: str
    revision: int
    holder: str
    fencing_token: int
    lease: Lease
    time: _timestamp_pb2.Timestamp
    slot: int
    shard: int
    shard_revisions: _containers.RepeatedScalarFieldContainer[int]
    missed_after_revision: int
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., name: _Optional[str] = ..., revision: _Optional[int] = ..., holder: _Optional[str] = ..., fencing_token: _Optional[int] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., slot: _Optional[int] = ..., shard: _Optional[int] = ..., shard_revisions: _Optional[_Iterable[int]] = ..., missed_after_revision: _Optional[int] = ...) -> None: ...

class ListLeasesRequest(_message.Message):
    __slots__ = ("prefix", "page_size", "page_token")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    page_size: int
    page_token: str
    def __init__(self, prefix: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListLeasesResponse(_message.Message):
    __slots__ = ("leases", "next_page_token")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    next_page_token: str
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RevokeLeaseRequest(_message.Message):
    __slots__ = ("name", "reason", "fencing_token", "slot")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    fencing_token: int
    slot: int
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ..., fencing_token: _Optional[int] = ..., slot: _Optional[int] = ...) -> None: ...

class RevokeLeaseResponse(_message.Message):
    __slots__ = ("revision", "revoked")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revision: int
    revoked: Lease
    def __init__(self, revision: _Optional[int] = ..., revoked: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[KeepAliveEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[KeepAliveEntry, _Mapping]]] = ...) -> None: ...

class KeepAliveEntry(_message.Message):
    __slots__ = ("id", "name", "expected_revision", "lease_key", "ttl", "slot")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    expected_revision: int
    lease_key: str
    ttl: _duration_pb2.Duration
    slot: int
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., slot: _Optional[int] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[KeepAliveResult]
    def __init__(self, results: _Optional[_Iterable[_Union[KeepAliveResult, _Mapping]]] = ...) -> None: ...

class KeepAliveResult(_message.Message):
    __slots__ = ("id", "lease", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    lease: Lease
    error: KeepAliveError
    def __init__(self, id: _Optional[int] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., error: _Optional[_Union[KeepAliveError, _Mapping]] = ...) -> None: ...

class KeepAliveError(_message.Message):
    __slots__ = ("code", "reason", "message", "metadata", "retry_delay", "same_as")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    SAME_AS_FIELD_NUMBER: _ClassVar[int]
    code: int
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    retry_delay: _duration_pb2.Duration
    same_as: int
    def __init__(self, code: _Optional[int] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., same_as: _Optional[int] = ...) -> None: ...

class AcquireGroupRequest(_message.Message):
    __slots__ = ("names", "holder", "ttl", "lease_key", "wait", "metadata", "lock_delay")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMES_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    holder: str
    ttl: _duration_pb2.Duration
    lease_key: str
    wait: _duration_pb2.Duration
    metadata: _containers.ScalarMap[str, str]
    lock_delay: _duration_pb2.Duration
    def __init__(self, names: _Optional[_Iterable[str]] = ..., holder: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_key: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., lock_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AcquireGroupResponse(_message.Message):
    __slots__ = ("leases", "lease_key")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    lease_key: str
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., lease_key: _Optional[str] = ...) -> None: ...

class GroupMember(_message.Message):
    __slots__ = ("name", "expected_revision")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ...) -> None: ...

class RenewGroupRequest(_message.Message):
    __slots__ = ("members", "lease_key", "ttl")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    lease_key: str
    ttl: _duration_pb2.Duration
    def __init__(self, members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., lease_key: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RenewGroupResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    def __init__(self, leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ...) -> None: ...

class ReleaseGroupRequest(_message.Message):
    __slots__ = ("members", "lease_key")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[GroupMember]
    lease_key: str
    def __init__(self, members: _Optional[_Iterable[_Union[GroupMember, _Mapping]]] = ..., lease_key: _Optional[str] = ...) -> None: ...

class ReleaseGroupResponse(_message.Message):
    __slots__ = ("released", "not_held", "revision")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    NOT_HELD_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedScalarFieldContainer[str]
    not_held: _containers.RepeatedScalarFieldContainer[str]
    revision: int
    def __init__(self, released: _Optional[_Iterable[str]] = ..., not_held: _Optional[_Iterable[str]] = ..., revision: _Optional[int] = ...) -> None: ...

class GetFenceKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetFenceKeysResponse(_message.Message):
    __slots__ = ("keys", "keyset")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    KEYSET_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[FenceKey]
    keyset: str
    def __init__(self, keys: _Optional[_Iterable[_Union[FenceKey, _Mapping]]] = ..., keyset: _Optional[str] = ...) -> None: ...

class FenceKey(_message.Message):
    __slots__ = ("key_id", "public_key", "active")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    public_key: bytes
    active: bool
    def __init__(self, key_id: _Optional[str] = ..., public_key: _Optional[bytes] = ..., active: _Optional[bool] = ...) -> None: ...

class LeaseHistoryRequest(_message.Message):
    __slots__ = ("name", "since", "at", "page_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    since: _timestamp_pb2.Timestamp
    at: _timestamp_pb2.Timestamp
    page_size: int
    def __init__(self, name: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ...) -> None: ...

class LeaseHistoryResponse(_message.Message):
    __slots__ = ("holdings", "more_since", "oldest", "retention", "gaps")
    HOLDINGS_FIELD_NUMBER: _ClassVar[int]
    MORE_SINCE_FIELD_NUMBER: _ClassVar[int]
    OLDEST_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    holdings: _containers.RepeatedCompositeFieldContainer[HistoricHolding]
    more_since: _timestamp_pb2.Timestamp
    oldest: _timestamp_pb2.Timestamp
    retention: _duration_pb2.Duration
    gaps: _containers.RepeatedCompositeFieldContainer[HistoryGap]
    def __init__(self, holdings: _Optional[_Iterable[_Union[HistoricHolding, _Mapping]]] = ..., more_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., oldest: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retention: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., gaps: _Optional[_Iterable[_Union[HistoryGap, _Mapping]]] = ...) -> None: ...

class HistoryGap(_message.Message):
    __slots__ = ("name", "slot", "after_revision", "after_time", "before_revision", "before_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    AFTER_REVISION_FIELD_NUMBER: _ClassVar[int]
    AFTER_TIME_FIELD_NUMBER: _ClassVar[int]
    BEFORE_REVISION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    slot: int
    after_revision: int
    after_time: _timestamp_pb2.Timestamp
    before_revision: int
    before_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., slot: _Optional[int] = ..., after_revision: _Optional[int] = ..., after_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., before_revision: _Optional[int] = ..., before_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HistoricHolding(_message.Message):
    __slots__ = ("name", "slot", "holder", "fencing_token", "acquire_time", "renew_time", "ttl", "end_time", "ending", "revoked_by", "revoke_reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    RENEW_TIME_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ENDING_FIELD_NUMBER: _ClassVar[int]
    REVOKED_BY_FIELD_NUMBER: _ClassVar[int]
    REVOKE_REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    slot: int
    holder: str
    fencing_token: int
    acquire_time: _timestamp_pb2.Timestamp
    renew_time: _timestamp_pb2.Timestamp
    ttl: _duration_pb2.Duration
    end_time: _timestamp_pb2.Timestamp
    ending: HoldingEnding
    revoked_by: str
    revoke_reason: str
    def __init__(self, name: _Optional[str] = ..., slot: _Optional[int] = ..., holder: _Optional[str] = ..., fencing_token: _Optional[int] = ..., acquire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., renew_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ending: _Optional[_Union[HoldingEnding, str]] = ..., revoked_by: _Optional[str] = ..., revoke_reason: _Optional[str] = ...) -> None: ...

class DowngradeRequest(_message.Message):
    __slots__ = ("name", "expected_revision", "lease_key", "slot")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    lease_key: str
    slot: int
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., slot: _Optional[int] = ...) -> None: ...

class DowngradeResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...

class TransferRequest(_message.Message):
    __slots__ = ("name", "expected_revision", "lease_key", "to_holder")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    TO_HOLDER_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    lease_key: str
    to_holder: str
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., to_holder: _Optional[str] = ...) -> None: ...

class TransferResponse(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ...) -> None: ...
