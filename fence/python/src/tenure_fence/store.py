"""Where the highest fencing token per lease name is kept.

The HTTP middleware admits a request only when its (verified) token is not
lower than the highest seen for its lease name, and then records it; a
:class:`TokenStore` is that record. :class:`MemoryTokenStore` keeps it in the
process, which is right for one process fronting the resource. Several
processes fronting the same resource need one shared record: implement
:class:`TokenStore` over your database (a conditional update, e.g. the
PostgreSQL kit's function, or Redis's script), synchronously or with an
``async def advance``.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from typing import Protocol, runtime_checkable

#: What :meth:`TokenStore.advance` returns: whether the token was admitted,
#: and the highest token for the name after the call.
Advance = tuple[bool, int]


@runtime_checkable
class TokenStore(Protocol):
    """The highest fencing token per lease name."""

    def advance(self, name: str, token: int) -> Advance | Awaitable[Advance]:
        """Admits `token` for `name` when it is not lower than the highest
        recorded for `name` (or none is), and makes it the highest, in one
        atomic step. Returns ``(True, token)`` when admitted, ``(False,
        highest)`` when not. May be a coroutine function (the middleware
        awaits the result when it is awaitable). Tokens go up to 2^64 - 1:
        store them as unsigned 64-bit or NUMERIC, not a signed BIGINT."""
        ...


class MemoryTokenStore:
    """A :class:`TokenStore` in this process's memory (thread-safe). It
    keeps one entry per lease name it admitted a token for; since the
    middleware only records verified proofs for the names its resources
    map to, that is bounded by your resources, not by what clients send."""

    def __init__(self) -> None:
        self._highest: dict[str, int] = {}
        self._lock = threading.Lock()

    def advance(self, name: str, token: int) -> Advance:
        """See :meth:`TokenStore.advance`."""
        with self._lock:
            highest = self._highest.get(name)
            if highest is not None and token < highest:
                return False, highest
            self._highest[name] = token
            return True, token

    def highest(self, name: str) -> int | None:
        """The highest token admitted for `name`, or None."""
        with self._lock:
            return self._highest.get(name)
