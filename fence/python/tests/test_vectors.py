"""Every vector of fence/vectors/v1.json: the valid proofs verify and state
what the file says; the invalid texts are refused with exactly its error
kind."""

from __future__ import annotations

import base64

import pytest
import vectors

from tenure_fence import FenceError

DATA = vectors.load()


def test_the_file_has_vectors() -> None:
    # Guards the parametrizations below against an empty or renamed list.
    assert len(DATA["valid"]) >= 5 and len(DATA["invalid"]) >= 14
    assert vectors.keyset().key_ids == [k["key_id"] for k in DATA["keys"] if k["pinned"]]


@pytest.mark.parametrize("vector", DATA["valid"], ids=lambda v: v["about"])
def test_valid_text_verifies(vector: dict) -> None:
    verified = vectors.keyset().verify_text(vector["proof_text"])
    assert verified.fence == vectors.fence_of(vector)
    assert verified.key_id == vector["key_id"]


@pytest.mark.parametrize("vector", DATA["valid"], ids=lambda v: v["about"])
def test_valid_bytes_verify(vector: dict) -> None:
    raw = bytes.fromhex(vector["proof_hex"])
    assert base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == vector["proof_text"]
    assert vectors.keyset().verify(raw).fence == vectors.fence_of(vector)


@pytest.mark.parametrize("vector", DATA["valid"], ids=lambda v: v["about"])
def test_test_signer_reproduces_the_vector(vector: dict) -> None:
    # The tests' own signer (used for proofs the file lacks) writes the
    # format byte for byte as the Rust reference does.
    signer = vectors.TestSigner.named(
        next(k["name"] for k in DATA["keys"] if k["key_id"] == vector["key_id"])
    )
    assert signer.sign(vectors.fence_of(vector)).hex() == vector["proof_hex"]


@pytest.mark.parametrize("vector", DATA["invalid"], ids=lambda v: v["about"])
def test_invalid_text_is_refused_with_its_kind(vector: dict) -> None:
    with pytest.raises(FenceError) as refused:
        vectors.keyset().verify_text(vector["proof_text"])
    assert refused.value.kind == vector["error"]
    assert str(refused.value)  # a message a person can act on
