/**
 * Example worker: takes the lease NAME (waiting for it), then writes to a
 * fenced store with its fencing token until the lease is lost, and
 * releases it on exit and on SIGTERM.
 *
 *   node dist/examples/worker.js ADDRESS NAME HOLDER STORE_DIR [WRITES]
 *
 * The fenced store is a directory: a write takes an exclusive flock on
 * STORE_DIR/lock, reads STORE_DIR/fence (decimal, missing = 0), refuses the
 * write when the token is below it, else sets fence = token and appends
 * "<token> <holder> <seq>" to STORE_DIR/log. Node has no flock of its own,
 * so the write runs under flock(1). Env: TENURE_TOKEN (bearer token).
 */
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { TenureClient } from "@tenure/client";

/** The write, under the flock: exits 3 when the token is below the fence. */
const FENCED_WRITE = `
fence=$(cat "$1/fence" 2>/dev/null || echo 0)
[ "$2" -ge "\${fence:-0}" ] || exit 3
echo "$2" > "$1/fence"
echo "$2 $3 $4" >> "$1/log"
`;

/** Writes one line with `token`; false when a newer holder has written (fenced off). */
function fencedWrite(dir: string, token: bigint, holder: string, seq: number): boolean {
  try {
    execFileSync("flock", [join(dir, "lock"), "sh", "-c", FENCED_WRITE, "write", dir, String(token), holder, String(seq)]);
    return true;
  } catch (err) {
    if ((err as { status?: number }).status === 3) return false;
    throw err;
  }
}

async function main(): Promise<void> {
  const [address, name, holder, dir, writes] = process.argv.slice(2);
  if (!address || !name || !holder || !dir) {
    console.error("usage: worker ADDRESS NAME HOLDER STORE_DIR [WRITES]");
    process.exit(2);
  }
  const maxWrites = writes ? Number(writes) : Infinity;
  const client = new TenureClient(address, { token: process.env.TENURE_TOKEN });
  const stop = new AbortController();
  process.once("SIGTERM", () => stop.abort());
  process.once("SIGINT", () => stop.abort());
  try {
    const session = await client.acquire(name, holder, { ttlMs: 2000, waitMs: 60_000, signal: stop.signal });
    console.log(`acquired ${name} with token ${session.fencingToken}`);
    try {
      for (let seq = 1; seq <= maxWrites && !stop.signal.aborted; seq++) {
        if (!session.isHeld()) {
          console.log(`lost ${name}: ${session.signal.reason.reason}`);
          return;
        }
        if (!fencedWrite(dir, session.fencingToken, holder, seq)) {
          console.log(`fenced off: a newer holder has written`);
          return;
        }
        console.log(`wrote ${seq} with token ${session.fencingToken}`);
        await sleep(100, undefined, { signal: AbortSignal.any([stop.signal, session.signal]) }).catch(() => undefined);
      }
    } finally {
      const released = await session.release();
      console.log(released ? `released ${name}` : `${name} was not held any more`);
    }
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(String(err));
  process.exit(1);
});
