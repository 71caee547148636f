/**
 * A session whose server goes away signals loss by its safe deadline. This
 * file has a server of its own, since the test stops it.
 */
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { describe, it } from "node:test";

import { LeaseLostError, TenureClient, TenureError } from "../src";
import { aborted, TenureServer, uniqueName, within, serverPerFile } from "./harness";

let server: TenureServer;
let client: TenureClient;

serverPerFile((s, c) => {
  server = s;
  client = c;
});

describe("unreachable server", () => {
  it("signals loss by the safe deadline when renewals cannot get through", async () => {
    const session = await client.acquire(uniqueName("unreachable"), "orphaned", { ttlMs: 2000 });
    assert.equal(session.isHeld(), true);
    let lostAt = 0;
    session.signal.addEventListener("abort", () => (lostAt = performance.now()), { once: true });

    await server.stop(); // SIGTERM; it stops its nats-server too

    const reason = await within(10_000, "the loss signal", aborted(session.signal));
    assert.ok(reason instanceof LeaseLostError);
    assert.equal(reason.reason, "SAFE_DEADLINE_PASSED");
    assert.ok(lostAt >= session.safeDeadline, "not lost before the deadline");
    assert.ok(reason.cause instanceof TenureError, "the last renewal failure is the cause");
    assert.equal(session.isHeld(), false);
    assert.equal(session.remainingMs(), 0);
    // Releasing a session already lost is a best effort and does not throw.
    await session.release();
  });
});
