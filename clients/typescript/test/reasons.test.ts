/**
 * The error reasons: every value of the generated ErrorReason is classified
 * as retryable or permanent exactly as the "Error reasons" table of
 * clients/README.md says (parsed here at test time), and the table names no
 * reason the enum lacks.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { status as GrpcStatus } from "@grpc/grpc-js";

import { ErrorReason, errorReasonToJSON, isRetryable, parseReason, RETRYABLE_REASONS, TenureError } from "../src";

const HEADER = "| reason | gRPC code | retryable | what to do |";

/** clients/README.md: the folder above this client's (the one with package.json). */
function readmePath(): string {
  let dir = __dirname;
  while (!existsSync(join(dir, "package.json"))) {
    const up = dirname(dir);
    assert.notEqual(up, dir, `no package.json above ${__dirname}`);
    dir = up;
  }
  return join(dir, "..", "README.md");
}

/** The README table as reason → { code, retryable }. */
function reasonTable(): Map<string, { code: string; retryable: boolean }> {
  const path = readmePath();
  const lines = readFileSync(path, "utf8").split("\n").map((l) => l.trim());
  const start = lines.indexOf(HEADER);
  assert.ok(start >= 0, `${path} has no error reason table`);
  const rows = new Map<string, { code: string; retryable: boolean }>();
  for (const line of lines.slice(start + 1)) {
    if (!line.startsWith("|")) break;
    const cells = line.replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
    if (cells[0].startsWith("---")) continue;
    assert.equal(cells.length, 4, `${path}: table row ${line} has ${cells.length} cells`);
    const [name, code, retryable] = [cells[0].replace(/`/g, ""), cells[1], cells[2]];
    assert.ok(!rows.has(name), `${path}: ${name} is in the table twice`);
    assert.ok(retryable === "yes" || retryable === "no", `${path}: ${name}: retryable is ${retryable}`);
    assert.equal(typeof (GrpcStatus as unknown as Record<string, unknown>)[code], "number", `${path}: ${name}: ${code} is no gRPC code`);
    rows.set(name, { code, retryable: retryable === "yes" });
  }
  return rows;
}

/** Every value of the generated enum but UNSPECIFIED (never sent) and ts-proto's UNRECOGNIZED. */
const generated: ErrorReason[] = Object.values(ErrorReason).filter(
  (v): v is ErrorReason => typeof v === "string" && v !== ErrorReason.UNSPECIFIED && v !== ErrorReason.UNRECOGNIZED,
);

describe("error reasons", () => {
  const table = reasonTable();

  it("has the proto's reasons", () => {
    assert.ok(generated.length >= 22, `only ${generated.length} generated reasons`);
  });

  for (const reason of generated) {
    const name = errorReasonToJSON(reason);
    it(`classifies ${name} as the README table says`, () => {
      const row = table.get(name);
      assert.ok(row, `${name} is missing from the table in clients/README.md`);
      assert.equal(parseReason(name), reason);
      assert.equal(isRetryable(reason), row.retryable, `${name}: the table says retryable=${row.retryable}`);
    });
  }

  it("names no reason the enum lacks, and RETRYABLE_REASONS is the table's yes rows", () => {
    const names = new Set(generated.map(errorReasonToJSON));
    assert.deepEqual([...table.keys()].filter((n) => !names.has(n)), []);
    const yes = [...table].filter(([, row]) => row.retryable).map(([n]) => n).sort();
    assert.deepEqual([...RETRYABLE_REASONS].map(errorReasonToJSON).sort(), yes);
  });

  it("parses unknown and missing reasons as UNSPECIFIED, which is not retryable", () => {
    assert.equal(parseReason("SOMETHING_NEW"), ErrorReason.UNSPECIFIED);
    assert.equal(parseReason(""), ErrorReason.UNSPECIFIED);
    assert.equal(parseReason(undefined), ErrorReason.UNSPECIFIED);
    assert.equal(parseReason("UNRECOGNIZED"), ErrorReason.UNSPECIFIED);
    assert.equal(isRetryable(ErrorReason.UNSPECIFIED), false);
  });
});

describe("ATOMIC_BATCH_UNSUPPORTED", () => {
  it("is a permanent FAILED_PRECONDITION whose metadata names the nats-server version", () => {
    const err = new TenureError(GrpcStatus.FAILED_PRECONDITION, "ATOMIC_BATCH_UNSUPPORTED", "bucket cannot take atomic batch writes", {
      required_nats_server: "2.12",
      bucket: "tenure",
      stream: "KV_tenure",
    });
    assert.equal(err.reason, ErrorReason.ATOMIC_BATCH_UNSUPPORTED);
    assert.equal(err.retryable, false);
    assert.equal(err.metadata.required_nats_server, "2.12");
  });
});
