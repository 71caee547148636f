"""Verify Tenure fence proofs offline, and fence an HTTP service with them.

Every grant from a Tenure server started with ``--fence-signing-key``
carries a *fence proof*: an Ed25519-signed statement of (bucket, lease
name, slot, fencing token, holder, grant time, TTL). A store that verifies
it against Tenure's public keys, checks it is for the lease name it guards,
and only then compares tokens can never be poisoned by a forged, huge or
foreign token (docs/fencing.md).

- :class:`Keyset` — the pinned public keys: :meth:`Keyset.parse` the text
  of ``tenure fence-keys``, then :meth:`~Keyset.verify` (bytes) or
  :meth:`~Keyset.verify_text` (the ``Tenure-Fence`` header) a proof.
- :class:`Verified` — what verification returns: the :class:`Fence` the
  proof states and the id of the key that signed it.
- :class:`FenceError` — a refused proof; :attr:`FenceError.kind` is
  ``malformed``, ``unsupported_version``, ``unknown_key`` or
  ``bad_signature``, as in every language.
- :class:`FenceMiddleware` — ASGI middleware admitting a write only with a
  verified proof for its resource and a current token, over a
  :class:`TokenStore` (:class:`MemoryTokenStore` by default).

Layout: ``_b64`` and ``_edwards`` (strict decoding helpers) → ``proof`` (the
format) → ``keys`` (verification) → ``store`` → ``middleware``.
"""

from .keys import Keyset, Verified
from .middleware import FENCE_HEADER, STATE_KEY, TOKEN_HEADER, FenceMiddleware, Reason
from .proof import Fence, FenceError, FenceErrorKind
from .store import MemoryTokenStore, TokenStore

__all__ = [
    "FENCE_HEADER",
    "Fence",
    "FenceError",
    "FenceErrorKind",
    "FenceMiddleware",
    "Keyset",
    "MemoryTokenStore",
    "Reason",
    "STATE_KEY",
    "TOKEN_HEADER",
    "TokenStore",
    "Verified",
]

__version__ = "0.1.0"
