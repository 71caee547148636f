"""watch() against a real Tenure: snapshot, then ACQUIRED, RENEWED, RELEASED
and EXPIRED."""

from __future__ import annotations

from tenure_client import EventType, TenureClient, TenureError

from conftest import next_event


async def test_watch_yields_lifecycle_events(client: TenureClient, name: str) -> None:
    async with client.watch(name) as watch:
        first = await next_event(watch)
        assert first.type is EventType.SNAPSHOT_COMPLETE  # nothing held yet
        assert first.name == ""

        session = await client.acquire(name, "watched", ttl=1)
        acquired = await next_event(watch)
        assert acquired.type is EventType.ACQUIRED
        assert (acquired.name, acquired.holder) == (name, "watched")
        assert acquired.fencing_token == session.fencing_token
        assert acquired.lease is not None and acquired.lease.ttl == 1.0
        assert acquired.time is not None

        renewed = await next_event(watch)
        assert renewed.type is EventType.RENEWED
        assert renewed.fencing_token == session.fencing_token
        assert renewed.revision > acquired.revision

        await session.release()
        released = await next_event(watch, EventType.RELEASED)
        assert (released.holder, released.fencing_token) == ("watched", session.fencing_token)

        expiring = await client.acquire(name, "expiring", ttl=1)
        expiring.pause_renewals()
        acquired = await next_event(watch, EventType.ACQUIRED)
        assert acquired.fencing_token == expiring.fencing_token > session.fencing_token
        expired = await next_event(watch, EventType.EXPIRED, EventType.RENEWED)
        assert expired.type is EventType.EXPIRED
        assert (expired.name, expired.holder) == (name, "expiring")
        assert expired.fencing_token == expiring.fencing_token
        assert expiring.lost.is_set() and not expiring.is_held()


async def test_watch_snapshot_and_subtree(client: TenureClient, name: str) -> None:
    held = await client.acquire(f"{name}.a", "snap", ttl=5)
    try:
        async with client.watch(f"{name}.>") as watch:
            current = await next_event(watch)
            assert current.type is EventType.CURRENT
            assert (current.name, current.holder) == (f"{name}.a", "snap")
            assert current.lease is not None
            assert current.lease.fencing_token == held.fencing_token
            assert (await next_event(watch)).type is EventType.SNAPSHOT_COMPLETE

            other = await client.acquire(f"{name}.b", "other", ttl=5)
            event = await next_event(watch, EventType.ACQUIRED)
            assert (event.name, event.holder) == (f"{name}.b", "other")
            await other.release()
    finally:
        await held.release()


async def test_watch_filters_event_types(client: TenureClient, name: str) -> None:
    async with client.watch(name, event_types=[EventType.RELEASED]) as watch:
        assert (await next_event(watch)).type is EventType.SNAPSHOT_COMPLETE
        session = await client.acquire(name, "filtered", ttl=1)
        await session.renew()
        await session.release()
        # ACQUIRED and RENEWED were filtered out by the server.
        assert (await next_event(watch)).type is EventType.RELEASED


async def test_watch_rejects_bad_name(client: TenureClient) -> None:
    watch = client.watch("bad..name")
    try:
        await next_event(watch)
    except TenureError as err:
        assert err.reason == "INVALID_NAME"
    else:
        raise AssertionError("expected INVALID_NAME")
    finally:
        await watch.aclose()
