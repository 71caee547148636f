"""The keyset a store pins, and verification of proofs against it.

A keyset's text form is what ``tenure fence-keys`` prints and what the
``GetFenceKeys`` RPC returns as ``keyset``: one Ed25519 public key per line,
its 32 bytes in base64url without padding, ``#`` starting a comment. A key's
id is derived from it (the first 8 bytes of SHA-256 of the 32 bytes), never
configured, so a keyset cannot name a key wrongly.

Verification follows docs/fencing.md step by step and stops at the first
failure: the text form, the version, the fields, a pinned key, then a
strict Ed25519 signature (no small-order key or ``R``, no non-canonical
``S``: what ed25519-dalek's ``verify_strict`` accepts).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import _b64, _edwards
from .proof import SIGNING_CONTEXT, Fence, FenceError, from_text, parse


@dataclass(frozen=True)
class Verified:
    """A proof whose signature verified against a pinned key.

    Attributes:
        fence: what the proof states.
        key_id: the id of the key that signed it, 16 hex digits.
    """

    fence: Fence
    key_id: str

    def is_for(self, name: str) -> bool:
        """Whether the proof was signed for lease name `name`. A store
        guarding a resource under one lease name must refuse every proof
        for another: a genuine token of another name must not move this
        resource's highest token."""
        return self.fence.name == name


class _Key(NamedTuple):
    """One pinned public key, ready to verify with."""

    #: The OpenSSL-backed key that checks the signature equation.
    public: Ed25519PublicKey
    #: Whether the key has small order: every signature then fails, as in
    #: a strict verifier (with OpenSSL alone, anything would verify).
    weak: bool


class Keyset:
    """The public keys a store accepts proofs from. Build it with
    :meth:`parse`; it does not change afterwards and may be shared between
    threads and tasks."""

    def __init__(self, keys: dict[bytes, _Key]) -> None:
        """Use :meth:`parse`."""
        self._keys = keys

    @classmethod
    def parse(cls, text: str) -> Keyset:
        """A keyset from its text form (see the module doc).

        Raises:
            ValueError: a line that is not a base64url Ed25519 public key
                (the message names the line), or no key at all.
        """
        keys: dict[bytes, _Key] = {}
        for number, line in enumerate(text.split("\n"), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                raw = _b64.decode(line)
            except ValueError:
                raise ValueError(f"keyset line {number}: not base64url without padding") from None
            if len(raw) != 32:
                raise ValueError(f"keyset line {number}: an Ed25519 public key is 32 bytes")
            point = _edwards.decompress(raw)
            if point is None:
                raise ValueError(f"keyset line {number}: not a valid Ed25519 public key")
            keys.setdefault(
                hashlib.sha256(raw).digest()[:8],
                _Key(Ed25519PublicKey.from_public_bytes(raw), _edwards.is_small_order(point)),
            )
        if not keys:
            raise ValueError("the keyset has no key")
        return cls(keys)

    @property
    def key_ids(self) -> list[str]:
        """The ids of the pinned keys, 16 hex digits each, in keyset order."""
        return [kid.hex() for kid in self._keys]

    def __repr__(self) -> str:
        return f"Keyset({', '.join(self.key_ids)})"

    def verify(self, proof: bytes) -> Verified:
        """Verifies a proof's bytes: its format, that a pinned key signed
        it, and the signature.

        Raises:
            FenceError: with the kind of the first failed step.
        """
        parsed = parse(proof)
        key = self._keys.get(parsed.key_id)
        if key is None:
            raise FenceError(
                "unknown_key",
                f"fence proof signed by unknown key {parsed.key_id.hex()}: "
                "refresh the pinned keys from `tenure fence-keys`",
            )
        if key.weak or _small_order_r(parsed.signature):
            raise _bad_signature()
        try:
            key.public.verify(parsed.signature, SIGNING_CONTEXT + parsed.signed)
        except InvalidSignature:
            raise _bad_signature() from None
        return Verified(parsed.fence, parsed.key_id.hex())

    def verify_text(self, text: str) -> Verified:
        """Verifies a proof's text form (the ``Tenure-Fence`` header value).

        Raises:
            FenceError: with the kind of the first failed step; longer
                text than any proof is ``malformed`` before it is decoded.
        """
        return self.verify(from_text(text))


def _small_order_r(signature: bytes) -> bool:
    """Whether the signature's ``R`` is not a point or has small order
    (refused by a strict verifier whatever the equation says)."""
    point = _edwards.decompress(signature[:32])
    return point is None or _edwards.is_small_order(point)


def _bad_signature() -> FenceError:
    return FenceError(
        "bad_signature", "fence proof signature does not verify: the proof was altered or forged"
    )
