"""The shared test vectors (fence/vectors/v1.json) and a test signer made
from their seeds, for proofs the vectors do not have (another token, another
lease name). The seeds are test keys: never use them for anything else."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tenure_fence import Fence, Keyset

#: The file every language's tests read. Missing is a failure, not a skip.
PATH = Path(__file__).resolve().parents[2] / "vectors" / "v1.json"


@cache
def load() -> dict[str, Any]:
    """The parsed vectors file; raises with its path when it is missing."""
    if not PATH.is_file():
        raise FileNotFoundError(f"{PATH} is missing: the fence test vectors are required")
    return json.loads(PATH.read_text(encoding="utf-8"))


def keyset() -> Keyset:
    """The vectors' pinned keyset (keys "active" and "older")."""
    return Keyset.parse(load()["keyset"])


def valid(about: str) -> dict[str, Any]:
    """The valid vector whose "about" is `about`."""
    return next(v for v in load()["valid"] if v["about"] == about)


def invalid(about: str) -> dict[str, Any]:
    """The invalid vector whose "about" is `about`."""
    return next(v for v in load()["invalid"] if v["about"] == about)


def fence_of(vector: dict[str, Any]) -> Fence:
    """The :class:`Fence` a valid vector states (its decimal strings as ints)."""
    f = vector["fence"]
    return Fence(
        bucket=f["bucket"],
        name=f["name"],
        slot=int(f["slot"]),
        token=int(f["token"]),
        granted_at_ms=int(f["granted_at_ms"]),
        ttl_s=int(f["ttl_s"]),
        holder=f["holder"],
    )


@dataclass(frozen=True)
class TestSigner:
    """Signs proofs in format version 1 with one of the vectors' seeds,
    independently of the package (which only verifies)."""

    key: Ed25519PrivateKey
    key_id: bytes

    __test__ = False  # not a pytest test class

    @classmethod
    def named(cls, name: str) -> TestSigner:
        """The signer of the vectors' key `name` ("active", "older",
        "stranger")."""
        entry = next(k for k in load()["keys"] if k["name"] == name)
        return cls(
            Ed25519PrivateKey.from_private_bytes(bytes.fromhex(entry["seed_hex"])),
            bytes.fromhex(entry["key_id"]),
        )

    def sign(self, fence: Fence, *, holder_raw: bytes | None = None) -> bytes:
        """The proof of `fence`: statement bytes, then the signature over
        ``tenure-fence/v1`` + statement. `holder_raw` replaces the holder's
        bytes (e.g. with bytes that are not UTF-8)."""

        def text(s: str | bytes, width: int) -> bytes:
            raw = s.encode("utf-8") if isinstance(s, str) else s
            return len(raw).to_bytes(width, "big") + raw

        statement = b"".join(
            [
                b"\x01",
                self.key_id,
                fence.token.to_bytes(8, "big"),
                fence.slot.to_bytes(4, "big"),
                fence.granted_at_ms.to_bytes(8, "big"),
                fence.ttl_s.to_bytes(4, "big"),
                text(fence.bucket, 1),
                text(fence.name, 1),
                text(fence.holder if holder_raw is None else holder_raw, 2),
            ]
        )
        return statement + self.key.sign(b"tenure-fence/v1" + statement)
