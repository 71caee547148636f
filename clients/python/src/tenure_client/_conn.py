"""What the helpers under a :class:`~tenure_client.TenureClient` (the shared
KeepAlive stream, the loss watch, the sessions) use of it: its stub, its
target and its calls.

A :class:`typing.Protocol` (the client is one without naming it), so that
those helpers need not import the client module that imports them.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Tuple

from ._gen import lease_pb2_grpc


class Connection(Protocol):
    """A client's channel as its helpers see it."""

    #: The server address ("" for a given channel), named in errors.
    target: str
    #: The generated stub over the client's channel.
    stub: lease_pb2_grpc.LeaseServiceStub

    def _call_metadata(self) -> list[Tuple[str, str]]:
        """The metadata of every call (bearer token, extra metadata)."""
        ...

    async def _unary(self, rpc: str, request: Any, timeout: Optional[float]) -> Any:
        """Makes the unary call `rpc`; raises :class:`TenureError`."""
        ...
