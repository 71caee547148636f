"""Server-free checks: fencing guard, error decoding, generated-code freshness."""

from __future__ import annotations

import filecmp
import subprocess
import threading
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from tenure_client import FencingGuard, Reason, StaleTokenError, TenureError
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
