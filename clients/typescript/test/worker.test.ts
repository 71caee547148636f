/**
 * The example worker (examples/worker.ts): two instances against one
 * server and one fenced store; the first holder is SIGKILLed once it has
 * written, and the log must show one writer per token, tokens that never
 * go down, and the second instance taking over with a larger token. Then
 * SIGTERM makes a worker release its lease.
 * The second worker waits in its Acquire; its stdout is drained by the test.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, describe, it } from "node:test";

import { Reason, TenureError, type TenureClient } from "../src";
import { serverPerFile, uniqueName, within, type TenureServer } from "./harness";

let server: TenureServer;
let client: TenureClient;
serverPerFile((s, c) => {
  server = s;
  client = c;
});

const worker = resolve(__dirname, "..", "examples", "worker.js");
const dir = mkdtempSync(join(tmpdir(), "tenure-ts-worker-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The log as [token, holder, seq] rows. */
function logRows(store: string): Array<[bigint, string, number]> {
  const path = join(store, "log");
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const [token, holder, seq] = line.split(" ");
      return [BigInt(token as string), holder as string, Number(seq)];
    });
}

/** Resolves once the worker prints a line matching `pattern` (at most 30 s). */
function printed(child: ChildProcess, pattern: RegExp, what: string): Promise<void> {
  return within(30_000, what, new Promise<void>((ok, fail) => {
    let buffered = "";
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString();
      if (buffered.split("\n").some((line) => pattern.test(line))) {
        child.stdout?.off("data", onData);
        ok();
      }
    };
    child.stdout?.on("data", onData);
    child.once("exit", () => fail(new Error(`the worker exited before ${what}; it printed:\n${buffered}`)));
  }));
}

function start(name: string, holder: string, store: string, writes?: number): { child: ChildProcess; exited: Promise<number | string> } {
  const args = [worker, server.address, name, holder, store, ...(writes === undefined ? [] : [String(writes)])];
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise<number | string>((ok) => child.once("exit", (code, signal) => ok(code ?? signal ?? "?")));
  return { child, exited };
}

describe("example worker", () => {
  it("hands over to a second instance with a larger token when the first is killed", async () => {
    const store = mkdtempSync(join(dir, "store-"));
    const name = uniqueName("worker");
    const first = start(name, "first", store);
    await printed(first.child, /^wrote 1 /, "the first worker's write");
    const second = start(name, "second", store, 5);
    first.child.kill("SIGKILL");
    await first.exited;
    assert.equal(await within(30_000, "the second worker's exit", second.exited), 0);

    const rows = logRows(store);
    const holders = new Map<bigint, string>();
    for (let i = 0; i < rows.length; i++) {
      const [token, holder] = rows[i]!;
      if (i > 0) assert.ok(token >= rows[i - 1]![0], `token went down at line ${i + 1}`);
      assert.equal(holders.get(token) ?? holder, holder, `token ${token} has two holders`);
      holders.set(token, holder);
    }
    const firstToken = rows.find(([, h]) => h === "first")![0];
    const secondRows = rows.filter(([, h]) => h === "second");
    assert.equal(secondRows.length, 5);
    assert.ok(secondRows[0]![0] > firstToken, "the second worker took over with a larger token");
    await assert.rejects(
      client.getLease(name),
      (err: unknown) => err instanceof TenureError && err.reason === Reason.LEASE_NOT_FOUND,
      "the second worker released on exit",
    );
  });

  it("releases its lease on SIGTERM", async () => {
    const store = mkdtempSync(join(dir, "store-"));
    const name = uniqueName("worker");
    const w = start(name, "term", store);
    await printed(w.child, /^wrote 1 /, "the worker's write");
    w.child.kill("SIGTERM");
    assert.equal(await within(15_000, "the worker's exit", w.exited), 0);
    await assert.rejects(
      client.getLease(name),
      (err: unknown) => err instanceof TenureError && err.reason === Reason.LEASE_NOT_FOUND,
      "SIGTERM released the lease",
    );
  });
});
