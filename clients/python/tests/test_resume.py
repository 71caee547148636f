"""The watch reconnect-and-resume state machine against a scripted server
(test_restart.py restarts a real Tenure)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, List, Optional, Tuple

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from tenure_client import EventType, Reason, TenureClient, TenureError
from tenure_client import lease_pb2, lease_pb2_grpc

from conftest import WAIT

# ---- a scripted server ------------------------------------------------------

#: One WatchLease answer: (event type, name, revision) triples, then how the
#: stream ends: None (cleanly), or (code, reason or "", message).
Reply = Tuple[List[Tuple[int, str, int]], Optional[Tuple[grpc.StatusCode, str, str]]]

T = lease_pb2


def _trailer(reason: str, code: grpc.StatusCode, message: str) -> tuple:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(domain="tenure.v1", reason=reason))
    status = status_pb2.Status(code=code.value[0], message=message, details=[detail])
    return (("grpc-status-details-bin", status.SerializeToString()),)


class Scripted(lease_pb2_grpc.LeaseServiceServicer):
    """Answers the i-th WatchLease with script[i] and records start revisions."""

    def __init__(self, script: List[Reply]) -> None:
        self.script = script
        self.starts: List[int] = []

    async def WatchLease(self, request: Any, context: Any) -> AsyncIterator[Any]:
        i = len(self.starts)
        self.starts.append(request.start_revision)
        if i >= len(self.script):
            await asyncio.Event().wait()  # stay open until cancelled
        events, end = self.script[i]
        for typ, name, rev in events:
            yield T.WatchLeaseResponse(
                event=T.LeaseEvent(type=typ, name=name, revision=rev, fencing_token=rev)
            )
        if end is not None:
            code, reason, message = end
            if reason:
                context.set_trailing_metadata(_trailer(reason, code, message))
            await context.abort(code, message)


async def _serve(servicer: Scripted) -> Tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    lease_pb2_grpc.add_LeaseServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


SNAP = T.EVENT_TYPE_SNAPSHOT_COMPLETE


async def test_watch_resume_state_machine() -> None:
    """A broken stream resumes after the last delivered revision (a replayed
    duplicate and the resume's "caught up" marker are not passed on), a
    clean end resumes too, WATCH_HISTORY_COMPACTED falls back to a fresh
    snapshot marked resync, and PERMISSION_DENIED ends the watch."""
    scripted = Scripted(
        [
            (
                [(T.EVENT_TYPE_CURRENT, "a", 5), (SNAP, "", 0), (T.EVENT_TYPE_ACQUIRED, "b", 7)],
                (grpc.StatusCode.UNAVAILABLE, "", "restarting"),
            ),
            (
                [
                    (T.EVENT_TYPE_RENEWED, "b", 7),
                    (T.EVENT_TYPE_ACQUIRED, "c", 8),
                    (SNAP, "", 0),
                    (T.EVENT_TYPE_RELEASED, "a", 9),
                ],
                None,
            ),
            ([], (grpc.StatusCode.OUT_OF_RANGE, "WATCH_HISTORY_COMPACTED", "history gone")),
            (
                [(T.EVENT_TYPE_CURRENT, "x", 10), (SNAP, "", 0), (T.EVENT_TYPE_ACQUIRED, "y", 11)],
                (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", "no watch grant"),
            ),
        ]
    )
    server, target = await _serve(scripted)
    try:
        async with TenureClient(target) as client:
            got = []
            with pytest.raises(TenureError) as raised:
                async with client.watch(">") as watch:
                    async for e in watch:
                        got.append((e.type.name, e.name, e.revision, e.resync))
            assert raised.value.reason is Reason.PERMISSION_DENIED
            assert got == [
                ("CURRENT", "a", 5, False),
                ("SNAPSHOT_COMPLETE", "", 0, False),
                ("ACQUIRED", "b", 7, False),
                ("ACQUIRED", "c", 8, False),
                ("RELEASED", "a", 9, False),
                ("CURRENT", "x", 10, True),
                ("SNAPSHOT_COMPLETE", "", 0, True),
                ("ACQUIRED", "y", 11, False),
            ]
            # Resumed after 7 (the last delivered), after 9 (the clean end),
            # then fresh after the compaction.
            assert scripted.starts == [0, 7, 9, 0]
    finally:
        await server.stop(None)


async def test_start_revision_compacted_falls_back_to_snapshot() -> None:
    scripted = Scripted(
        [
            ([], (grpc.StatusCode.OUT_OF_RANGE, "WATCH_HISTORY_COMPACTED", "history gone")),
            ([(T.EVENT_TYPE_CURRENT, "a", 3), (SNAP, "", 0)], None),
        ]
    )
    server, target = await _serve(scripted)
    try:
        async with TenureClient(target) as client:
            async with client.watch(">", start_revision=2) as watch:
                first = await asyncio.wait_for(watch.__anext__(), WAIT)
            assert (first.type, first.resync) == (EventType.CURRENT, True)
            assert scripted.starts[:2] == [2, 0]
    finally:
        await server.stop(None)
