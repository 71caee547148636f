"""Fencing: the headers a holder sends with each write, and a downstream
check that rejects writes from a holder whose lease has passed on.

A holder sends its fencing token and, from a Tenure server started with
``--fence-signing-key``, its fence proof (an Ed25519-signed statement of the
grant) with every write; :func:`fence_headers` makes the two HTTP headers of
docs/fencing.md from them (``Session.fence_headers()`` does it for a
session). A store verifies the proof before trusting the token, so a forged
or foreign token cannot poison it: with the ``tenure-fence`` package
(``fence/python``) or another language's verifier.

A holder can be paused (GC, swap, a stalled VM) past its lease and then
write, believing it still holds. The fencing token stops that: Tenure gives
every new holder of a name a strictly greater token, so a store that
remembers the highest token it has seen for a resource, and refuses smaller
ones, never accepts a write from an old holder after a newer holder has
written.

:class:`FencingGuard` does this in memory, for a single process that fronts
a resource. A real store must do the check and the write atomically; in SQL,
keep the token in the row and make the write conditional on it::

    -- once: ALTER TABLE jobs ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
    UPDATE jobs
       SET state = :state, fencing_token = :token
     WHERE id = :id AND fencing_token <= :token;
    -- 0 rows updated: a newer holder has written; stop acting as holder.

(For an insert, use ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE
jobs.fencing_token <= EXCLUDED.fencing_token``.)
"""

from __future__ import annotations

import base64
import threading
from typing import Dict, Optional

#: The HTTP header carrying a fence proof's text form.
FENCE_HEADER = "Tenure-Fence"
#: The HTTP header carrying the decimal fencing token.
TOKEN_HEADER = "Tenure-Fencing-Token"


def proof_text(proof: bytes) -> str:
    """The text form of a fence proof (the ``Tenure-Fence`` header value):
    base64url without padding."""
    return base64.urlsafe_b64encode(proof).rstrip(b"=").decode("ascii")


def fence_headers(token: int, proof: bytes) -> Dict[str, str]:
    """The headers a holder sends with a write to a fenced HTTP service:
    ``{"Tenure-Fence": <proof text>, "Tenure-Fencing-Token": "<token>"}``.

    Without a proof (`proof` empty: a Tenure server started without
    ``--fence-signing-key`` signs none) only ``{"Tenure-Fencing-Token":
    "<token>"}``, as in the other clients; a store that verifies proofs
    then refuses the write (``FENCE_MISSING``).
    """
    if not proof:
        return {TOKEN_HEADER: str(token)}
    return {FENCE_HEADER: proof_text(proof), TOKEN_HEADER: str(token)}


class StaleTokenError(Exception):
    """A write carried a fencing token below the highest seen for its
    resource.

    Attributes:
        resource: the resource written to.
        token: the token the write carried.
        highest: the highest token seen for the resource.
    """

    def __init__(self, resource: str, token: int, highest: int) -> None:
        super().__init__(
            f"fencing token {token} for {resource!r} is stale (highest seen: {highest})"
        )
        self.resource = resource
        self.token = token
        self.highest = highest


class FencingGuard:
    """Remembers, per resource, the highest fencing token seen, and accepts a
    token only if it is at least that high. Thread-safe.

    Example::

        guard = FencingGuard()
        guard.check("orders", session.fencing_token)  # raises if stale
        store.write(...)
    """

    def __init__(self) -> None:
        self._highest: Dict[str, int] = {}
        self._lock = threading.Lock()

    def accept(self, resource: str, token: int) -> bool:
        """True (and remembers `token`) if `token` is at least the highest
        seen for `resource`; False if it is stale."""
        with self._lock:
            if token < self._highest.get(resource, 0):
                return False
            self._highest[resource] = token
            return True

    def check(self, resource: str, token: int) -> None:
        """Like :meth:`accept`, but raises :class:`StaleTokenError` instead
        of returning False."""
        with self._lock:
            highest = self._highest.get(resource, 0)
            if token < highest:
                raise StaleTokenError(resource, token, highest)
            self._highest[resource] = token

    def highest(self, resource: str) -> Optional[int]:
        """The highest token seen for `resource`, or None."""
        with self._lock:
            return self._highest.get(resource)
