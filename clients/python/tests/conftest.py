"""Shared fixtures: one real Tenure server per test module, one client per test."""

from __future__ import annotations

import asyncio
import uuid
from typing import AsyncIterator, Iterator

import pytest

from tenure_client import EventType, LeaseEvent, LeaseWatch, TenureClient
from tenure_server import TenureServer

#: Upper bound on any single wait in the tests.
WAIT = 10.0


@pytest.fixture(scope="module")
def server() -> Iterator[TenureServer]:
    """A Tenure server (and its nats-server) for the module's tests."""
    srv = TenureServer().start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
async def client(server: TenureServer) -> AsyncIterator[TenureClient]:
    """A client of the module's server, closed after the test."""
    async with TenureClient(server.target) as c:
        yield c


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lease name of the test's own."""
    return f"py.{request.node.name.replace('[', '-').rstrip(']')}.{uuid.uuid4().hex[:8]}"


async def next_event(watch: LeaseWatch, *types: EventType) -> LeaseEvent:
    """The next event of `watch` of one of `types` (any when none given),
    skipping others; fails after WAIT seconds."""

    async def find() -> LeaseEvent:
        async for event in watch:
            if not types or event.type in types:
                return event
        raise AssertionError("the watch ended")

    return await asyncio.wait_for(find(), WAIT)
