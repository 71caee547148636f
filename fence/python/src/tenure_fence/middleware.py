"""ASGI middleware that fences an HTTP service (docs/fencing.md, "HTTP
middleware"): a write is admitted only with a genuine proof for the lease
name that guards it and a token not lower than the highest seen.

For each ``http`` request it reads ``Tenure-Fence`` (the proof's text form)
and, if sent, ``Tenure-Fencing-Token`` (a decimal token), then checks in
this order, refusing at the first failure:

1. a proof is present: ``FENCE_MISSING``;
2. it verifies against the keyset: ``FENCE_MALFORMED``,
   ``FENCE_UNSUPPORTED_VERSION``, ``FENCE_UNKNOWN_KEY``,
   ``FENCE_BAD_SIGNATURE``;
3. it is for the lease name ``resource(scope)`` returns: ``FENCE_WRONG_NAME``;
4. a ``Tenure-Fencing-Token`` header, if sent, equals the proof's token:
   ``FENCE_TOKEN_MISMATCH``;
5. the token store admits the token (not lower than the highest for the
   name, which it then becomes): ``FENCE_STALE``.

A refusal is ``409 Conflict``, ``Content-Type: application/json``, body
``{"reason": ..., "message": ...}`` (``FENCE_STALE`` adds ``"token"`` and
``"highest"`` as decimal strings), and the application is not called. An
admitted request reaches the application with the :class:`Verified` fence
in ``scope["state"]["tenure_fence"]`` (``request.state.tenure_fence`` in
Starlette and FastAPI). ``lifespan`` and ``websocket`` scopes pass through
unchecked.

The check is at admission: a request admitted with token 7 that is still
running when one with token 9 is admitted can finish after it. When the
handler's own write must be ordered too, make it conditional in its store
with the verified token.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .keys import Keyset, Verified
from .proof import FenceError
from .store import MemoryTokenStore, TokenStore

#: The header carrying the proof's text form.
FENCE_HEADER = "Tenure-Fence"
#: The header carrying the decimal fencing token (optional beside a proof).
TOKEN_HEADER = "Tenure-Fencing-Token"
#: The key of ``scope["state"]`` an admitted request's :class:`Verified` is in.
STATE_KEY = "tenure_fence"

#: An ASGI connection scope.
Scope = MutableMapping[str, Any]
#: An ASGI receive callable.
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
#: An ASGI send callable.
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
#: An ASGI application.
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: Maps a request to the lease name guarding what it writes.
Resource = Callable[[Scope], str | Awaitable[str]]

_FENCE_KEY = FENCE_HEADER.lower().encode("ascii")
_TOKEN_KEY = TOKEN_HEADER.lower().encode("ascii")
#: A token header value that can be compared at all: 1 to 20 ASCII digits
#: (2^64 - 1 has 20).
_DECIMAL = re.compile(r"[0-9]{1,20}")


class Reason(enum.StrEnum):
    """Why the middleware refused a request: the ``reason`` of the 409
    body, the same in every language's middleware."""

    #: No ``Tenure-Fence`` header.
    FENCE_MISSING = "FENCE_MISSING"
    #: The proof is not a proof (or more than one was sent).
    FENCE_MALFORMED = "FENCE_MALFORMED"
    #: The proof's format version is not one this verifier reads.
    FENCE_UNSUPPORTED_VERSION = "FENCE_UNSUPPORTED_VERSION"
    #: The proof is signed by a key that is not pinned.
    FENCE_UNKNOWN_KEY = "FENCE_UNKNOWN_KEY"
    #: The proof's signature does not verify: altered or forged.
    FENCE_BAD_SIGNATURE = "FENCE_BAD_SIGNATURE"
    #: The proof is for another lease name than the one guarding the write.
    FENCE_WRONG_NAME = "FENCE_WRONG_NAME"
    #: The ``Tenure-Fencing-Token`` header is not the proof's token.
    FENCE_TOKEN_MISMATCH = "FENCE_TOKEN_MISMATCH"
    #: A later holder of the name has been admitted with a higher token.
    FENCE_STALE = "FENCE_STALE"


class _Refused(Exception):
    """A refusal on its way to becoming the 409 response."""

    def __init__(self, reason: Reason, message: str, **extra: str) -> None:
        super().__init__(message)
        self.body: dict[str, str] = {"reason": reason.value, "message": message, **extra}


class FenceMiddleware:
    """Admits an HTTP request to `app` only with a verified fence proof for
    its resource's lease name and a current token (see the module doc).

    Args:
        app: the ASGI application to protect.
        keyset: the pinned Tenure public keys (:meth:`Keyset.parse` of
            ``tenure fence-keys`` or of the ``GetFenceKeys`` reply).
        resource: a function of the request's ASGI scope returning the
            lease name that guards what the request writes (or an awaitable
            of it), e.g. ``lambda scope: "orders"``.
        store: where the highest token per lease name is kept; by default
            a new :class:`MemoryTokenStore` (one process).

    With Starlette or FastAPI: ``app.add_middleware(FenceMiddleware,
    keyset=keyset, resource=...)``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        keyset: Keyset,
        resource: Resource,
        store: TokenStore | None = None,
    ) -> None:
        self.app = app
        self.keyset = keyset
        self.resource = resource
        self.store: TokenStore = store if store is not None else MemoryTokenStore()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            verified = await self._admit(scope)
        except _Refused as refused:
            await _send_refusal(send, refused.body)
            return
        scope.setdefault("state", {})[STATE_KEY] = verified
        await self.app(scope, receive, send)

    async def _admit(self, scope: Scope) -> Verified:
        """The verified fence of an admissible request; raises _Refused."""
        proofs = _header_values(scope, _FENCE_KEY)
        if not proofs:
            raise _Refused(
                Reason.FENCE_MISSING,
                f"no {FENCE_HEADER} header: send your lease's fence proof with every write",
            )
        if len(proofs) > 1:
            # A proxy could keep either: neither is trusted.
            raise _Refused(
                Reason.FENCE_MALFORMED,
                str(FenceError.malformed(f"more than one {FENCE_HEADER} header")),
            )
        try:
            verified = self.keyset.verify_text(proofs[0])
        except FenceError as err:
            raise _Refused(Reason("FENCE_" + err.kind.upper()), str(err)) from None
        fence = verified.fence

        name = self.resource(scope)
        if inspect.isawaitable(name):
            name = await name
        if not verified.is_for(name):
            raise _Refused(
                Reason.FENCE_WRONG_NAME,
                f'the fence proof is for lease "{fence.name}", '
                f'not "{name}", which guards this resource',
            )

        tokens = _header_values(scope, _TOKEN_KEY)
        if len(tokens) > 1:
            raise _Refused(Reason.FENCE_TOKEN_MISMATCH, f"more than one {TOKEN_HEADER} header")
        if tokens and (_DECIMAL.fullmatch(tokens[0]) is None or int(tokens[0]) != fence.token):
            sent = tokens[0] if _DECIMAL.fullmatch(tokens[0]) else "(not a decimal token)"
            raise _Refused(
                Reason.FENCE_TOKEN_MISMATCH,
                f"the {TOKEN_HEADER} header {sent} is not the proof's token {fence.token}",
            )

        result = self.store.advance(name, fence.token)
        if inspect.isawaitable(result):
            result = await result
        admitted, highest = result
        if not admitted:
            raise _Refused(
                Reason.FENCE_STALE,
                f'fencing token {fence.token} for lease "{name}" is stale: a later holder '
                f"wrote with token {highest}; stop acting as holder",
                token=str(fence.token),
                highest=str(highest),
            )
        return verified


def _header_values(scope: Scope, key: bytes) -> list[str]:
    """Every value of the request header `key` (lower-case), as text."""
    return [
        value.decode("latin-1") for name, value in scope.get("headers", ()) if name.lower() == key
    ]


async def _send_refusal(send: Send, body: dict[str, str]) -> None:
    """Sends a 409 with the JSON refusal body."""
    payload = json.dumps(body).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 409,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
