"""Server-free checks: fencing guard, error decoding, generated-code
freshness, the elector's use of Observe's preferred candidate."""

from __future__ import annotations

import asyncio
import filecmp
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from tenure_client import FencingGuard, Leader, LeaderElector, Reason, StaleTokenError, TenureError
from tenure_client._gen import election_pb2
from tenure_client.fencing import fence_headers

CLIENT_DIR = Path(__file__).resolve().parents[1]


def test_fence_headers_without_a_proof_are_the_token_alone() -> None:
    # As in every client: a server without a signing key gives no proof, and
    # the headers are then the token's alone (a verifying store refuses).
    assert fence_headers(7, b"") == {"Tenure-Fencing-Token": "7"}
    assert fence_headers(7, b"\xff\x00") == {
        "Tenure-Fence": "_wA",
        "Tenure-Fencing-Token": "7",
    }


def test_fencing_guard_accepts_equal_or_higher_tokens_only() -> None:
    guard = FencingGuard()
    assert guard.highest("orders") is None
    assert guard.accept("orders", 5)
    assert guard.accept("orders", 5)  # the same holder writes again
    assert guard.accept("orders", 9)
    assert not guard.accept("orders", 5)
    assert guard.accept("invoices", 1)  # resources are independent
    with pytest.raises(StaleTokenError) as err:
        guard.check("orders", 8)
    assert (err.value.resource, err.value.token, err.value.highest) == ("orders", 8, 9)
    guard.check("orders", 10)
    assert guard.highest("orders") == 10


def test_fencing_guard_is_thread_safe() -> None:
    guard = FencingGuard()
    accepted: list[int] = []

    def write(token: int) -> None:
        if guard.accept("r", token):
            accepted.append(token)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(1, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert guard.highest("r") == 199
    # Whatever the interleaving, the tokens accepted came in increasing order.
    assert accepted == sorted(accepted)


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailers) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return self._trailers


def _status_trailer(domain: str, reason: str, metadata: dict[str, str]) -> tuple:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(domain=domain, reason=reason, metadata=metadata))
    status = status_pb2.Status(code=9, message="m", details=[detail])
    return (("grpc-status-details-bin", status.SerializeToString()),)


def test_error_info_is_decoded_from_the_status_trailer() -> None:
    err = TenureError.from_rpc_error(
        _FakeRpcError(
            grpc.StatusCode.FAILED_PRECONDITION,
            "held by x",
            _status_trailer("tenure.v1", "LEASE_HELD", {"holder": "x"}),
        )
    )
    assert err.reason is Reason.LEASE_HELD
    assert err.metadata == {"holder": "x"}
    assert err.code is grpc.StatusCode.FAILED_PRECONDITION
    # Permanent: the answer stands until the holding ends (Acquire with a wait).
    assert not err.retryable


def test_request_too_large_is_permanent() -> None:
    err = TenureError.from_rpc_error(
        _FakeRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "too large",
            _status_trailer("tenure.v1", "REQUEST_TOO_LARGE", {}),
        )
    )
    assert err.reason is Reason.REQUEST_TOO_LARGE and not err.retryable
    busy = TenureError.from_rpc_error(
        _FakeRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "busy",
            _status_trailer("tenure.v1", "TOO_MANY_REQUESTS", {}),
        )
    )
    assert busy.reason is Reason.TOO_MANY_REQUESTS and busy.retryable


def test_errors_without_tenure_error_info() -> None:
    foreign = TenureError.from_rpc_error(
        _FakeRpcError(grpc.StatusCode.NOT_FOUND, "x", _status_trailer("other", "LEASE_HELD", {}))
    )
    assert foreign.reason is Reason.ERROR_REASON_UNSPECIFIED and not foreign.retryable
    newer = TenureError.from_rpc_error(
        _FakeRpcError(grpc.StatusCode.UNAVAILABLE, "x", _status_trailer("tenure.v1", "NEW_ONE", {}))
    )
    assert newer.reason is Reason.ERROR_REASON_UNSPECIFIED
    assert newer.raw_reason == "NEW_ONE" and newer.retryable and "NEW_ONE" in str(newer)
    newer_refusal = TenureError.from_rpc_error(
        _FakeRpcError(
            grpc.StatusCode.FAILED_PRECONDITION, "x", _status_trailer("tenure.v1", "NEW_ONE", {})
        )
    )
    assert newer_refusal.reason is Reason.ERROR_REASON_UNSPECIFIED
    assert not newer_refusal.retryable
    bare = TenureError.from_rpc_error(_FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down", ()))
    assert bare.reason is Reason.ERROR_REASON_UNSPECIFIED and bare.retryable
    assert str(bare) == "tenure: UNAVAILABLE: down"
    named = TenureError.from_rpc_error(
        _FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused", ()),
        target="127.0.0.1:7001",
        rpc="Acquire",
    )
    assert str(named) == "tenure at 127.0.0.1:7001: Acquire: UNAVAILABLE: connection refused"


def test_checked_in_stubs_match_the_proto(tmp_path: Path) -> None:
    subprocess.run([str(CLIENT_DIR / "gen.sh"), str(tmp_path)], check=True)
    checked_in = CLIENT_DIR / "src" / "tenure_client" / "_gen"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(p.name for p in checked_in.iterdir() if p.is_file())
    match, mismatch, errors = filecmp.cmpfiles(tmp_path, checked_in, names, shallow=False)
    assert not mismatch and not errors, f"stale generated stubs {mismatch + errors}: run gen.sh"


def _change(kind: int, leader: str = "", token: int = 0, preferred: tuple = (), **fields):
    """An ObserveResponse of type `kind` (leader `leader` with `token` when
    given; the preferred candidate (holder, preference) when given)."""
    msg = election_pb2.ObserveResponse(type=kind, **fields)
    if leader:
        msg.leader.CopyFrom(election_pb2.Leadership(holder=leader, fencing_token=token))
    if preferred:
        msg.preferred.CopyFrom(election_pb2.Candidate(holder=preferred[0], preference=preferred[1]))
    return msg


class _FakeObserve:
    """An Observe stream that yields `messages`, sets `done`, then stays open."""

    def __init__(self, messages: list, done: asyncio.Event) -> None:
        self.messages, self.done = messages, done

    def __aiter__(self):
        return self._stream()

    async def _stream(self):
        for msg in self.messages:
            yield msg
        self.done.set()
        await asyncio.Event().wait()

    def cancel(self) -> None:
        pass


class _FakeClient:
    """Just what LeaderElector._observe uses of a client: an election stub."""

    def __init__(self, messages: list, done: asyncio.Event) -> None:
        stream = _FakeObserve(messages, done)
        self._election_stub = type("Stub", (), {"Observe": lambda _self, req, metadata: stream})()

    def _call_metadata(self) -> tuple:
        return ()


def _elector(client, preference: int, **callbacks) -> LeaderElector:
    async def lead(term) -> None:
        pass

    return LeaderElector(
        client,
        "e",
        "node-a",
        preference=preference,
        on_started_leading=lead,
        on_stopped_leading=lambda: None,
        **callbacks,
    )


async def test_elector_defers_to_a_higher_preference_once_per_naming() -> None:
    elector = _elector(None, 1)
    elector._note_preferred(_change(election_pb2.CHANGE_TYPE_CURRENT, preferred=("v2", 2)))
    assert elector._requests is None  # not leading: only remembered

    def lead_period() -> list:
        """What a period of leading asks for at its start (as _lead_once)."""
        elector._requests = []
        elector._defer_to_preferred()
        return [r.successor for r in elector._requests]

    assert lead_period() == ["v2"]  # named before the term began
    # The hand-over failed (NO_WAITER): the same term is led again, with no
    # new try until Observe names a candidate again.
    elector._requests[0].future.set_exception(TenureError(Reason.NO_WAITER, "gone"))
    assert lead_period() == []
    assert lead_period() == []
    elector._note_preferred(_change(election_pb2.CHANGE_TYPE_PREFERRED, "node-a", 5, ("v2", 2)))
    assert [r.successor for r in elector._requests] == ["v2"]  # named again while leading
    assert elector._asked.is_set()

    # Equal or lower preferences, and itself, never displace the leader.
    for preferred in (("v1", 1), ("v0", 0), ("node-a", 9)):
        elector._note_preferred(_change(election_pb2.CHANGE_TYPE_PREFERRED, "node-a", 5, preferred))
        assert lead_period() == [], preferred
    elector._note_preferred(_change(election_pb2.CHANGE_TYPE_PREFERRED, "node-a", 5))
    assert elector._preferred is None and lead_period() == []

    with pytest.raises(ValueError):
        _elector(None, -1)
    with pytest.raises(ValueError):
        _elector(None, 1 << 32)


async def test_elector_reports_leaders_not_preferred_changes() -> None:
    """A PREFERRED change never calls on_new_leader, also after a MISSED
    (whose "unknown" a PREFERRED without leader must not turn to "nobody")."""
    messages = [
        _change(election_pb2.CHANGE_TYPE_CURRENT, "node-a", 5),
        _change(election_pb2.CHANGE_TYPE_PREFERRED, "node-a", 5, ("v2", 2)),
        _change(election_pb2.CHANGE_TYPE_MISSED, preferred=("v2", 2), ended_holder="node-a", ended_fencing_token=5),
        _change(election_pb2.CHANGE_TYPE_PREFERRED),
        _change(election_pb2.CHANGE_TYPE_ELECTED, "v2", 9),
        _change(election_pb2.CHANGE_TYPE_PREFERRED, "v2", 9, ("v3", 3)),
    ]
    done = asyncio.Event()
    seen: list[Leader] = []
    elector = _elector(_FakeClient(messages, done), 1, on_new_leader=seen.append)
    observer = asyncio.create_task(elector._observe())
    try:
        await asyncio.wait_for(done.wait(), 5)
    finally:
        observer.cancel()
        await asyncio.gather(observer, return_exceptions=True)
    assert seen == [
        Leader("node-a", "", 5),
        Leader(missed=True, ended_identity="node-a", ended_fencing_token=5),
        Leader("v2", "", 9),
    ]
    assert (elector._preferred.identity, elector._preferred.preference) == ("v3", 3)
