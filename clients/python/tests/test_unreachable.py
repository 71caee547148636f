"""With the server gone, a session signals loss by its safe deadline.

This module stops its own server, so it has a server of its own.
"""

from __future__ import annotations

import asyncio
import signal

from tenure_client import LossCause, TenureClient
from tenure_server import TenureServer

#: Scheduling slack allowed past the safe deadline.
SLACK = 2.0


async def test_loss_signalled_by_safe_deadline_when_server_stops(
    server: TenureServer, client: TenureClient, name: str
) -> None:
    session = await client.acquire(name, "orphan", ttl=2)
    assert session.is_held()
    await session.renew()  # the channel is up and renewals get through

    # Stop Tenure (it takes its nats-server down with it) and wait for it.
    code = await asyncio.to_thread(server.stop, signal.SIGTERM)
    assert code is not None

    # The loss comes by the safe deadline; the bound on the wait leaves room
    # for a busy machine to schedule the event loop.
    await asyncio.wait_for(session.lost.wait(), session.remaining() + SLACK)
    assert session.lost_cause is LossCause.DEADLINE
    assert not session.is_held()
    # It was not given up early: the loss was marked at the safe deadline
    # that the last successful renewal set, not before ...
    assert session.lost_at is not None and session.lost_at >= session.safe_deadline
    # ... and the failures seen were retryable ones (server unreachable).
    if session.lost_error is not None:
        assert session.lost_error.retryable


async def test_connection_refused_names_target_rpc_and_cause() -> None:
    import socket

    import pytest

    from tenure_client import Reason, TenureError

    with socket.socket() as s:  # a port nobody listens on (free a moment ago)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = f"127.0.0.1:{port}"
    async with TenureClient(target) as client:
        with pytest.raises(TenureError) as info:
            await client.acquire("x", "h", ttl=1, timeout=2)
    err = info.value
    assert str(err).startswith(f"tenure at {target}: Acquire: UNAVAILABLE: "), str(err)
    assert "refused" in str(err).lower()
    assert err.reason is Reason.ERROR_REASON_UNSPECIFIED and err.retryable
