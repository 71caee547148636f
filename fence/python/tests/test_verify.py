"""Verification beyond the shared vectors: strict Ed25519 where OpenSSL
alone is lenient, strict base64url where Python's decoder is lenient, the
length bounds and field checks in docs/fencing.md's order, and keyset
parsing."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

import pytest
import vectors
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tenure_fence import FenceError, Keyset, _edwards
from tenure_fence.proof import MAX_PROOF_TEXT

#: The order of the Ed25519 base point.
L = 2**252 + 27742317777372353535851937790883648493
#: The identity point's encoding (order 1).
IDENTITY = bytes([1]) + bytes(31)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def plain() -> dict:
    return vectors.valid("a plain lease")


def refused(keyset: Keyset, proof: bytes | str) -> FenceError:
    """The FenceError verifying `proof` raises (fails if it verifies)."""
    with pytest.raises(FenceError) as err:
        if isinstance(proof, str):
            keyset.verify_text(proof)
        else:
            keyset.verify(proof)
    return err.value


# ---- strict Ed25519 ---------------------------------------------------------


def test_small_order_key_verifies_nothing() -> None:
    # With the identity as public key, R = identity and S = 0 satisfy the
    # equation for any message: OpenSSL accepts it, a strict verifier not.
    keyset = Keyset.parse(b64(IDENTITY))
    statement = vectors.TestSigner.named("active").sign(vectors.fence_of(plain()))[:-64]
    statement = statement[:1] + hashlib.sha256(IDENTITY).digest()[:8] + statement[9:]
    forged_sig = IDENTITY + bytes(32)
    Ed25519PublicKey.from_public_bytes(IDENTITY).verify(
        forged_sig, b"tenure-fence/v1" + statement
    )  # OpenSSL alone: accepted
    assert refused(keyset, statement + forged_sig).kind == "bad_signature"


def test_small_order_r_is_refused() -> None:
    # The holder of a real key can make R the identity: S = k * a. OpenSSL
    # accepts it; ed25519-dalek's verify_strict (the reference) does not.
    key = next(k for k in vectors.load()["keys"] if k["name"] == "active")
    seed = bytes.fromhex(key["seed_hex"])
    public = base64.urlsafe_b64decode(key["public_key"] + "=")
    h = bytearray(hashlib.sha512(seed).digest()[:32])
    h[0] &= 248
    h[31] &= 127
    h[31] |= 64
    a = int.from_bytes(h, "little")
    statement = bytes.fromhex(plain()["proof_hex"])[:-64]
    message = b"tenure-fence/v1" + statement
    k = int.from_bytes(hashlib.sha512(IDENTITY + public + message).digest(), "little") % L
    signature = IDENTITY + (k * a % L).to_bytes(32, "little")
    Ed25519PublicKey.from_public_bytes(public).verify(signature, message)  # OpenSSL: accepted
    assert refused(vectors.keyset(), statement + signature).kind == "bad_signature"


def test_non_canonical_s_is_refused() -> None:
    raw = bytes.fromhex(plain()["proof_hex"])
    s = int.from_bytes(raw[-32:], "little") + L
    assert s < 2**256
    assert refused(vectors.keyset(), raw[:-32] + s.to_bytes(32, "little")).kind == "bad_signature"


def test_point_checks() -> None:
    small = [
        IDENTITY,  # order 1
        bytes.fromhex("ec" + "ff" * 30 + "7f"),  # y = -1, order 2
        bytes(32),  # y = 0, order 4
        bytes(31) + b"\x80",  # y = 0, the other x
        bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
        bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"),
        bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"),
    ]
    for encoded in small:
        point = _edwards.decompress(encoded)
        assert point is not None and _edwards.is_small_order(point), encoded.hex()
    for key in vectors.load()["keys"]:
        point = _edwards.decompress(base64.urlsafe_b64decode(key["public_key"] + "="))
        assert point is not None and not _edwards.is_small_order(point), key["name"]
    # y = 2: (y^2 - 1) / (d y^2 + 1) is not a square, so no point has it.
    assert _edwards.decompress((2).to_bytes(32, "little")) is None


# ---- the text form ----------------------------------------------------------


def test_non_canonical_last_character_is_malformed() -> None:
    text = plain()["proof_text"]
    assert text.endswith("w")  # 121 bytes: the last character's low 4 bits are unused
    loose = text[:-1] + "x"
    # Python's own decoder takes both spellings to the same bytes...
    assert base64.urlsafe_b64decode(loose + "==") == bytes.fromhex(plain()["proof_hex"])
    # ...the verifier accepts only the one the format writes.
    assert refused(vectors.keyset(), loose).kind == "malformed"


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t[:40] + "\n" + t[40:],
        lambda t: " " + t,
        lambda t: t[:40] + "." + t[40:],
        lambda t: t[:-2],  # 160 characters: 120 bytes, one short
        lambda t: t[:-1],  # 161 characters: a length no base64 text has
        lambda t: t + "==",
    ],
    ids=["newline", "space", "dot", "one byte short", "impossible length", "padding"],
)
def test_damaged_text_is_malformed(damage) -> None:
    assert refused(vectors.keyset(), damage(plain()["proof_text"])).kind == "malformed"


def test_length_bounds_come_first() -> None:
    keyset = vectors.keyset()
    too_long = refused(keyset, "A" * (MAX_PROOF_TEXT + 1))
    assert (too_long.kind, str(too_long)) == (
        "malformed",
        "malformed fence proof: longer than any proof",
    )
    assert refused(keyset, "A" * MAX_PROOF_TEXT).kind == "malformed"  # 2,049 bytes
    assert refused(keyset, bytes([1]) * 2049).kind == "malformed"
    # Shorter than any proof is malformed whatever its version byte says.
    assert refused(keyset, bytes([2]) + bytes(101)).kind == "malformed"
    assert refused(keyset, bytes([2]) + bytes(102)).kind == "unsupported_version"


def test_field_checks() -> None:
    signer = vectors.TestSigner.named("active")
    fence = vectors.fence_of(plain())
    long_holder = refused(
        vectors.keyset(), signer.sign(dataclasses.replace(fence, holder="h" * 1025))
    )
    assert long_holder.kind == "malformed" and "1024" in str(long_holder)
    not_utf8 = refused(vectors.keyset(), signer.sign(fence, holder_raw=b"\xed\xa0\x80"))
    assert not_utf8.kind == "malformed" and "UTF-8" in str(not_utf8)
    empty_bucket = refused(vectors.keyset(), signer.sign(dataclasses.replace(fence, bucket="")))
    assert empty_bucket.kind == "malformed"
    # The longest holder is fine.
    longest = dataclasses.replace(fence, holder="h" * 1024)
    assert vectors.keyset().verify(signer.sign(longest)).fence == longest


def test_unknown_key_names_the_key() -> None:
    err = refused(
        vectors.keyset(), vectors.invalid("signed by a key that is not pinned")["proof_text"]
    )
    assert err.kind == "unknown_key" and "b62e867fa2f33afe" in str(err)


def test_is_for() -> None:
    verified = vectors.keyset().verify_text(plain()["proof_text"])
    assert verified.is_for("orders") and not verified.is_for("orders.eu")


# ---- keysets ----------------------------------------------------------------


def test_keyset_text_form() -> None:
    keys = {k["name"]: k for k in vectors.load()["keys"]}
    text = (
        "# a comment line\r\n"
        f"  {keys['older']['public_key']}  # older\r\n"
        "\n"
        f"{keys['active']['public_key']}#no space before the comment\n"
        f"{keys['active']['public_key']}\n"  # a repeat is one key
    )
    keyset = Keyset.parse(text)
    assert keyset.key_ids == [keys["older"]["key_id"], keys["active"]["key_id"]]
    assert keyset.verify_text(plain()["proof_text"]).key_id == keys["active"]["key_id"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the keyset has no key"),
        ("# only a comment\n\n", "the keyset has no key"),
        ("# keys\nnot-base64url!\n", "keyset line 2: not base64url without padding"),
        (b64(bytes(31)), "keyset line 1: an Ed25519 public key is 32 bytes"),
        (b64(bytes(32)) + "=", "keyset line 1: not base64url without padding"),
        (b64((2).to_bytes(32, "little")), "keyset line 1: not a valid Ed25519 public key"),
    ],
)
def test_bad_keysets_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        Keyset.parse(text)
    assert str(err.value) == message
