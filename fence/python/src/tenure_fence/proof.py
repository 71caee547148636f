"""The fence proof format, version 1: what a proof states and how its bytes
are read (docs/fencing.md, "The proof format, version 1").

Every integer is unsigned big-endian::

    offset  bytes  field
    0       1      version: 1
    1       8      key id: first 8 bytes of SHA-256 of the signer's public key
    9       8      fencing token
    17      4      slot: the semaphore slot; 0 for a lease, group member, term
    21      8      granted at: Unix time of the grant, milliseconds
    29      4      TTL granted, whole seconds
    33      1 + n  bucket: length, then UTF-8 (1 to 255 bytes)
            1 + n  lease name: length, then UTF-8 (1 to 255 bytes)
            2 + n  holder: length, then UTF-8 (0 to 1024 bytes)
    end-64  64     Ed25519 signature over "tenure-fence/v1" + every byte before it

The text form (the ``Tenure-Fence`` HTTP header) is the bytes in base64url
without padding. This module reads the format; checking the signature
against pinned keys is :mod:`tenure_fence.keys`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from . import _b64

#: The format version this package reads.
VERSION = 1
#: Signed before the proof bytes, so that a signature the same key made for
#: anything else can never pass as a proof.
SIGNING_CONTEXT = b"tenure-fence/v1"
#: The longest proof a verifier reads (the longest valid one is 1,635 bytes).
MAX_PROOF_BYTES = 2048
#: Bytes before the variable-length fields.
_FIXED = 33
#: Ed25519 signature length.
SIGNATURE_BYTES = 64
#: The shortest proof: one-byte bucket and name, empty holder.
MIN_PROOF_BYTES = _FIXED + 1 + 1 + 1 + 1 + 2 + SIGNATURE_BYTES
#: The longest text form read; longer text is refused before decoding.
MAX_PROOF_TEXT = -(-MAX_PROOF_BYTES // 3) * 4
#: The longest holder a proof carries.
_MAX_HOLDER = 1024

#: The kinds of refusal, the same in every language and in the test vectors.
FenceErrorKind = Literal["malformed", "unsupported_version", "unknown_key", "bad_signature"]


@dataclass(frozen=True)
class Fence:
    """What a proof states: one grant of one lease name.

    Attributes:
        bucket: the Tenure bucket (deployment) that granted the holding.
        name: the lease name.
        slot: the semaphore slot; 0 for a plain lease, group member or
            election term.
        token: the fencing token, strictly greater for every later holder
            of the name (up to 2^64 - 1: a Python int loses nothing).
        granted_at_ms: when the holding was granted, Unix milliseconds on
            Tenure's clock.
        ttl_s: the TTL granted, whole seconds.
        holder: who the holding was granted to (the holder the client named).
    """

    bucket: str
    name: str
    slot: int
    token: int
    granted_at_ms: int
    ttl_s: int
    holder: str


class FenceError(Exception):
    """A proof was refused.

    Attributes:
        kind: why, as every language's verifier and the test vectors name
            it: ``"malformed"`` (not a proof: bad base64url, wrong lengths,
            bad UTF-8, an empty name), ``"unsupported_version"``,
            ``"unknown_key"`` (signed by a key that is not pinned) or
            ``"bad_signature"`` (altered or forged).
    """

    def __init__(self, kind: FenceErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: FenceErrorKind = kind

    @classmethod
    def malformed(cls, why: str) -> FenceError:
        """A ``malformed`` refusal saying `why`."""
        return cls("malformed", f"malformed fence proof: {why}")


class Parsed(NamedTuple):
    """A proof split into its parts, before its signature is checked."""

    #: The id of the key the proof says signed it.
    key_id: bytes
    #: The statement.
    fence: Fence
    #: The signed bytes (the statement, without the signing context).
    signed: bytes
    #: The 64-byte signature.
    signature: bytes


def from_text(text: str) -> bytes:
    """The bytes of a proof's text form, its length checked before decoding.

    Raises:
        FenceError: ``malformed``.
    """
    if len(text) > MAX_PROOF_TEXT:
        raise FenceError.malformed("longer than any proof")
    try:
        return _b64.decode(text)
    except ValueError as err:
        raise FenceError.malformed(str(err)) from None


def to_text(proof: bytes) -> str:
    """The text form of a proof's bytes: base64url without padding."""
    return _b64.encode(proof)


def parse(proof: bytes) -> Parsed:
    """Splits a proof; checks lengths, version and UTF-8, not the signature.

    Raises:
        FenceError: ``malformed`` or ``unsupported_version``, in the order
            of docs/fencing.md.
    """
    if len(proof) > MAX_PROOF_BYTES:
        raise FenceError.malformed("longer than any proof")
    if len(proof) < MIN_PROOF_BYTES:
        raise FenceError.malformed("shorter than any proof")
    proof = bytes(proof)
    if proof[0] != VERSION:
        raise FenceError(
            "unsupported_version",
            f"fence proof version {proof[0]} is not supported (this verifier reads version 1)",
        )
    signed, signature = proof[:-SIGNATURE_BYTES], proof[-SIGNATURE_BYTES:]
    reader = _Reader(signed)
    key_id = reader.take(8)
    token = reader.integer(8)
    slot = reader.integer(4)
    granted_at_ms = reader.integer(8)
    ttl_s = reader.integer(4)
    bucket = reader.text(reader.integer(1))
    name = reader.text(reader.integer(1))
    holder_len = reader.integer(2)
    if holder_len > _MAX_HOLDER:
        raise FenceError.malformed("holder longer than 1024 bytes")
    holder = reader.text(holder_len)
    if reader.at != len(signed):
        raise FenceError.malformed("bytes after the holder")
    if not bucket or not name:
        raise FenceError.malformed("empty bucket or name")
    fence = Fence(bucket, name, slot, token, granted_at_ms, ttl_s, holder)
    return Parsed(key_id, fence, signed, signature)


class _Reader:
    """A cursor over the statement bytes (after the version byte)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 1

    def take(self, n: int) -> bytes:
        """The next `n` bytes; ``malformed`` when they run past the end."""
        end = self.at + n
        if end > len(self.data):
            raise FenceError.malformed("a field runs past the signature")
        out = self.data[self.at : end]
        self.at = end
        return out

    def integer(self, n: int) -> int:
        """The next `n` bytes as an unsigned big-endian integer."""
        return int.from_bytes(self.take(n), "big")

    def text(self, n: int) -> str:
        """The next `n` bytes as UTF-8; ``malformed`` when they are not."""
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise FenceError.malformed("a text field is not UTF-8") from None
