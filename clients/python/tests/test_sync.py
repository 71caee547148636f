"""The synchronous API: acquire, loss signalled as a threading.Event, release
after loss reporting False, admin helpers and a blocking watch."""

from __future__ import annotations

import uuid

import pytest

from tenure_client import EventType, LossCause, Reason, TenureError
from tenure_client.sync import TenureClient
from tenure_server import TenureServer

WAIT = 10.0


def test_sync_session_watch_and_admin(server: TenureServer) -> None:
    name = f"py.sync.{uuid.uuid4().hex[:8]}"
    with TenureClient(server.target) as client, TenureClient(server.target) as admin:
        with client.watch(name) as watch:
            assert next(iter(watch)).type is EventType.SNAPSHOT_COMPLETE
            session = client.acquire(name, "sync-1", ttl=30, renew_fraction=0.9, safety_margin=1)
            assert session.is_held() and session.fencing_token > 0
            event = next(watch)
            assert event.type is EventType.ACQUIRED and event.fencing_token == session.fencing_token
        with pytest.raises(TenureError) as info:
            client.acquire(name, "sync-2", ttl=2)
        assert info.value.reason is Reason.LEASE_HELD
        assert [lease.holder for lease in admin.list_leases(name)] == ["sync-1"]
        admin.revoke_lease(name, "test", fencing_token=session.fencing_token)
        assert session.wait_lost(WAIT)
        assert session.lost_cause is LossCause.WATCH and not session.is_held()
        assert session.release() is False
        with client.acquire(name, "sync-3", ttl=5) as again:
            assert again.fencing_token > session.fencing_token
        assert again.lost.is_set() and again.lost_cause is LossCause.RELEASED
        with pytest.raises(TenureError) as info:
            client.get_lease(name)
        assert info.value.reason is Reason.LEASE_NOT_FOUND
