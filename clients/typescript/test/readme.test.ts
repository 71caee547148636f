/**
 * The README's example, type-checked against the client's sources and run
 * as written against a real Tenure.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import ts from "typescript";

import { Reason, TenureClient, TenureError } from "../src";
import { clientEntry, TenureServer } from "./harness";

const clientRoot = resolve(__dirname, "..", "..");
const readme = readFileSync(join(clientRoot, "README.md"), "utf8");

/** The fenced code block between the example markers. */
function example(): string {
  const match = /<!-- example:begin[^>]*-->\s*```ts\n([\s\S]*?)```\s*<!-- example:end -->/.exec(readme);
  assert.ok(match, "README.md has an example between the markers");
  return match[1];
}

let server: TenureServer;
let dir: string;

before(async () => {
  server = await TenureServer.start();
  dir = mkdtempSync(join(tmpdir(), "tenure-ts-readme-"));
});

after(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("README example", () => {
  it("is about ten lines and type-checks against the client", () => {
    const code = example();
    const lines = code.trim().split("\n").length;
    assert.ok(lines >= 8 && lines <= 16, `the example has ${lines} lines`);
    const file = join(dir, "example.mts");
    writeFileSync(file, code);
    const program = ts.createProgram([file], {
      target: ts.ScriptTarget.ES2022,
      lib: ["lib.es2022.d.ts", "lib.esnext.disposable.d.ts"],
      module: ts.ModuleKind.ESNext,
      moduleResolution: ts.ModuleResolutionKind.Bundler,
      paths: { "@tenure/client": [join(clientRoot, "src", "index.ts")] },
      typeRoots: [join(clientRoot, "node_modules", "@types")],
      types: ["node"],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    });
    const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    assert.deepEqual(diagnostics, []);
  });

  it("runs as written", async () => {
    const js = ts.transpileModule(example(), {
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
    }).outputText.replace(`"@tenure/client"`, JSON.stringify(pathToFileURL(clientEntry).href));
    const file = join(dir, "example.mjs");
    writeFileSync(file, js);
    const { stdout } = await promisify(execFile)(process.execPath, [file], {
      env: { ...process.env, TENURE_ADDRESS: server.address },
      timeout: 30_000,
    });
    assert.match(stdout, /^wrote report with fencing token [1-9]\d*$/m);
    assert.match(stdout, /^lease ended: RELEASED$/m);
    assert.ok(stdout.indexOf("wrote report") < stdout.indexOf("lease ended"));

    const client = new TenureClient(server.address);
    try {
      await assert.rejects(
        client.getLease("reports.nightly"),
        (err: unknown) => err instanceof TenureError && err.reason === Reason.LEASE_NOT_FOUND,
        "the example released its lease",
      );
    } finally {
      client.close();
    }
  });
});
