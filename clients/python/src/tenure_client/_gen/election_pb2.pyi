import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChangeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_TYPE_UNSPECIFIED: _ClassVar[ChangeType]
    CHANGE_TYPE_CURRENT: _ClassVar[ChangeType]
    CHANGE_TYPE_ELECTED: _ClassVar[ChangeType]
    CHANGE_TYPE_PROCLAIMED: _ClassVar[ChangeType]
    CHANGE_TYPE_RESIGNED: _ClassVar[ChangeType]
    CHANGE_TYPE_EXPIRED: _ClassVar[ChangeType]
    CHANGE_TYPE_REVOKED: _ClassVar[ChangeType]
    CHANGE_TYPE_MISSED: _ClassVar[ChangeType]
    CHANGE_TYPE_PREFERRED: _ClassVar[ChangeType]
CHANGE_TYPE_UNSPECIFIED: ChangeType
CHANGE_TYPE_CURRENT: ChangeType
CHANGE_TYPE_ELECTED: ChangeType
CHANGE_TYPE_PROCLAIMED: ChangeType
CHANGE_TYPE_RESIGNED: ChangeType
CHANGE_TYPE_EXPIRED: ChangeType
CHANGE_TYPE_REVOKED: ChangeType
CHANGE_TYPE_MISSED: ChangeType
CHANGE_TYPE_PREFERRED: ChangeType

class Leadership(_message.Message):
    __slots__ = ("name", "holder", "value", "fencing_token", "revision", "ttl", "elected_time", "renew_time", "ttl_left", "fence_proof")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    ELECTED_TIME_FIELD_NUMBER: _ClassVar[int]
    RENEW_TIME_FIELD_NUMBER: _ClassVar[int]
    TTL_LEFT_FIELD_NUMBER: _ClassVar[int]
    FENCE_PROOF_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    value: str
    fencing_token: int
    revision: int
    ttl: _duration_pb2.Duration
    elected_time: _timestamp_pb2.Timestamp
    renew_time: _timestamp_pb2.Timestamp
    ttl_left: _duration_pb2.Duration
    fence_proof: bytes
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., value: _Optional[str] = ..., fencing_token: _Optional[int] = ..., revision: _Optional[int] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., elected_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., renew_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ttl_left: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fence_proof: _Optional[bytes] = ...) -> None: ...

class CampaignRequest(_message.Message):
    __slots__ = ("name", "holder", "value", "ttl", "lease_key", "wait", "preference")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    value: str
    ttl: _duration_pb2.Duration
    lease_key: str
    wait: _duration_pb2.Duration
    preference: int
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., value: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lease_key: _Optional[str] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., preference: _Optional[int] = ...) -> None: ...

class CampaignResponse(_message.Message):
    __slots__ = ("leadership", "lease_key")
    LEADERSHIP_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    leadership: Leadership
    lease_key: str
    def __init__(self, leadership: _Optional[_Union[Leadership, _Mapping]] = ..., lease_key: _Optional[str] = ...) -> None: ...

class ProclaimRequest(_message.Message):
    __slots__ = ("name", "expected_revision", "lease_key", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    lease_key: str
    value: str
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ProclaimResponse(_message.Message):
    __slots__ = ("leadership",)
    LEADERSHIP_FIELD_NUMBER: _ClassVar[int]
    leadership: Leadership
    def __init__(self, leadership: _Optional[_Union[Leadership, _Mapping]] = ...) -> None: ...

class ResignRequest(_message.Message):
    __slots__ = ("name", "expected_revision", "lease_key", "successor", "to_next_candidate")
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASE_KEY_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_FIELD_NUMBER: _ClassVar[int]
    TO_NEXT_CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    expected_revision: int
    lease_key: str
    successor: str
    to_next_candidate: bool
    def __init__(self, name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., lease_key: _Optional[str] = ..., successor: _Optional[str] = ..., to_next_candidate: _Optional[bool] = ...) -> None: ...

class ResignResponse(_message.Message):
    __slots__ = ("revision", "successor")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_FIELD_NUMBER: _ClassVar[int]
    revision: int
    successor: Leadership
    def __init__(self, revision: _Optional[int] = ..., successor: _Optional[_Union[Leadership, _Mapping]] = ...) -> None: ...

class LeaderRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class LeaderResponse(_message.Message):
    __slots__ = ("leadership",)
    LEADERSHIP_FIELD_NUMBER: _ClassVar[int]
    leadership: Leadership
    def __init__(self, leadership: _Optional[_Union[Leadership, _Mapping]] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("type", "leader", "ended_holder", "ended_fencing_token", "revision", "preferred")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ENDED_HOLDER_FIELD_NUMBER: _ClassVar[int]
    ENDED_FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_FIELD_NUMBER: _ClassVar[int]
    type: ChangeType
    leader: Leadership
    ended_holder: str
    ended_fencing_token: int
    revision: int
    preferred: Candidate
    def __init__(self, type: _Optional[_Union[ChangeType, str]] = ..., leader: _Optional[_Union[Leadership, _Mapping]] = ..., ended_holder: _Optional[str] = ..., ended_fencing_token: _Optional[int] = ..., revision: _Optional[int] = ..., preferred: _Optional[_Union[Candidate, _Mapping]] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("holder", "preference")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    holder: str
    preference: int
    def __init__(self, holder: _Optional[str] = ..., preference: _Optional[int] = ...) -> None: ...
