"""The error reasons: every value of the generated ErrorReason is a Reason,
and the client's retryable/permanent classification is the table of
clients/README.md ("Error reasons"), read here at test time."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tenure_client import RETRYABLE_REASONS, Reason, TenureError
from tenure_client._errors import parse_reason
from tenure_client._gen import error_reason_pb2

#: clients/README.md, from clients/python/tests.
README = Path(__file__).resolve().parents[2] / "README.md"
HEADER = "| reason | gRPC code | retryable | what to do |"

#: Every value of the generated enum but the zero one, which is never sent.
GENERATED = [
    name
    for name in error_reason_pb2.ErrorReason.keys()
    if error_reason_pb2.ErrorReason.Value(name) != error_reason_pb2.ERROR_REASON_UNSPECIFIED
]


def reason_table() -> dict[str, tuple[str, bool]]:
    """The README table as {reason: (gRPC code, retryable)}."""
    lines = README.read_text(encoding="utf-8").splitlines()
    stripped = [line.strip() for line in lines]
    assert HEADER in stripped, f"{README} has no error reason table"
    rows: dict[str, tuple[str, bool]] = {}
    for line in stripped[stripped.index(HEADER) + 1 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].startswith("---"):
            continue
        assert len(cells) == 4, f"{README}: table row {line!r} has {len(cells)} cells, want 4"
        name, code, retryable = cells[0].strip("`"), cells[1], cells[2]
        assert name not in rows, f"{README}: {name} is in the table twice"
        assert retryable in ("yes", "no"), f"{README}: {name}: retryable is {retryable!r}"
        assert code in grpc.StatusCode.__members__, f"{README}: {name}: {code!r} is no gRPC code"
        rows[name] = (code, retryable == "yes")
    return rows


TABLE = reason_table()


def test_the_enum_has_every_reason() -> None:
    assert len(GENERATED) >= 22
    assert [r.value for r in Reason] == list(error_reason_pb2.ErrorReason.keys())
    for name in GENERATED:
        assert Reason(name).number == error_reason_pb2.ErrorReason.Value(name)


@pytest.mark.parametrize("name", GENERATED)
def test_every_generated_reason_is_classified_as_the_table_says(name: str) -> None:
    assert name in TABLE, f"{name} is missing from the table in {README}"
    reason = parse_reason(name)
    assert reason is Reason[name]
    assert reason.retryable == TABLE[name][1], f"{name}: the table says retryable={TABLE[name][1]}"


def test_the_table_names_no_reason_the_enum_lacks() -> None:
    assert sorted(set(TABLE) - set(GENERATED)) == []
    assert RETRYABLE_REASONS == {Reason[name] for name, (_, yes) in TABLE.items() if yes}


def test_unknown_reasons_are_unspecified() -> None:
    assert parse_reason("SOMETHING_NEW") is Reason.ERROR_REASON_UNSPECIFIED
    assert parse_reason("") is Reason.ERROR_REASON_UNSPECIFIED
    assert not Reason.ERROR_REASON_UNSPECIFIED.retryable


def test_atomic_batch_unsupported_names_the_nats_server_version() -> None:
    err = TenureError(
        Reason.ATOMIC_BATCH_UNSUPPORTED,
        "bucket cannot take atomic batch writes",
        code=grpc.StatusCode.FAILED_PRECONDITION,
        metadata={"required_nats_server": "2.12", "bucket": "tenure", "stream": "KV_tenure"},
    )
    assert err.required_nats_server == "2.12"
    assert not err.retryable
    other = TenureError(Reason.LEASE_HELD, "held", metadata={"required_nats_server": "2.12"})
    assert other.required_nats_server is None
