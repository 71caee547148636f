/**
 * Credentials against a Tenure with TLS, mTLS and bearer tokens on:
 * a token over TLS (static and from a callback), a client certificate,
 * a token over plaintext for local development, and the typed reasons
 * UNAUTHENTICATED and PERMISSION_DENIED with the server's message. A
 * caller without the `watch` grant still gets working sessions (the loss
 * watch falls back to renewals).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Reason, TenureClient, TenureError } from "../src";
import { TenureServer, uniqueName } from "./harness";

const ADMIN_TOKEN = "admin-token-0123456789abcdef";
const WORKER_TOKEN = "worker-token-0123456789abcdef";

const dir = mkdtempSync(join(tmpdir(), "tenure-ts-auth-"));
const path = (file: string) => join(dir, file);

/** A CA, a server certificate for 127.0.0.1 and a client certificate (CN mtls-client), with openssl. */
function makeCerts(): void {
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
    "-subj", "/CN=tenure test CA", "-keyout", path("ca.key"), "-out", path("ca.pem"),
    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign");
  for (const [name, cn, ext] of [
    ["server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"],
    ["client", "mtls-client", "extendedKeyUsage=clientAuth"],
  ] as const) {
    writeFileSync(path(`${name}.ext`), `basicConstraints=CA:FALSE\n${ext}\n`);
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", `/CN=${cn}`,
      "-keyout", path(`${name}.key`), "-out", path(`${name}.csr`));
    openssl("x509", "-req", "-in", path(`${name}.csr`), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
      "-CAcreateserial", "-days", "2", "-extfile", path(`${name}.ext`), "-out", path(`${name}.pem`));
  }
}

let tls: TenureServer | undefined;
let plain: TenureServer | undefined;

before(async () => {
  makeCerts();
  writeFileSync(path("tokens"), `admin ${ADMIN_TOKEN}\nworker ${WORKER_TOKEN}\n`);
  writeFileSync(path("tenure.toml"), `
[[grant]]
identity = "admin"
prefixes = [""]
actions = ["*"]

[[grant]]
identity = "mtls-client"
prefixes = [""]
actions = ["*"]

[[grant]]
identity = "worker"
prefixes = ["auth."]
actions = ["acquire", "renew", "release"]
`);
  const auth = ["--config", path("tenure.toml"), "--auth-tokens", path("tokens")];
  tls = await TenureServer.start(
    [...auth, "--tls-cert", path("server.pem"), "--tls-key", path("server.key"),
      "--tls-client-ca", path("ca.pem"), "--tls-client-cert-optional"],
    { tls: { ca: path("ca.pem") } },
  );
  plain = await TenureServer.start(auth);
});

after(async () => {
  await tls?.stop();
  await plain?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs `body` with a client, closing it after. */
async function withClient(address: string, options: ConstructorParameters<typeof TenureClient>[1], body: (c: TenureClient) => Promise<void>) {
  const client = new TenureClient(address, options);
  try {
    await body(client);
  } finally {
    client.close();
  }
}

async function rejection(promise: Promise<unknown>): Promise<TenureError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof TenureError, `expected a TenureError, got ${err}`);
    return err;
  }
  assert.fail("expected a rejection");
}

describe("credentials", () => {
  it("sends a static bearer token over TLS", async () => {
    await withClient(tls!.address, { tls: { ca: path("ca.pem") }, token: ADMIN_TOKEN }, async (client) => {
      const session = await client.acquire(uniqueName("auth.tls"), "admin", { ttlMs: 5000 });
      assert.equal((await client.listLeases("auth.")).leases.some((l) => l.name === session.name), true);
      assert.equal(await session.release(), true);
    });
  });

  it("asks a token callback before every call", async () => {
    let calls = 0;
    const token = async () => {
      calls += 1;
      return ADMIN_TOKEN;
    };
    await withClient(tls!.address, { tls: { ca: path("ca.pem") }, token, lossWatch: false }, async (client) => {
      const session = await client.acquire(uniqueName("auth.cb"), "admin", { ttlMs: 5000 });
      assert.equal(await session.release(), true);
      assert.equal(calls, 2, "one token per call (Acquire, Release)");
    });
  });

  it("authenticates with a client certificate (mTLS)", async () => {
    const mtls = { ca: path("ca.pem"), cert: path("client.pem"), key: path("client.key") };
    await withClient(tls!.address, { tls: mtls }, async (client) => {
      const session = await client.acquire(uniqueName("auth.mtls"), "cert", { ttlMs: 5000 });
      assert.equal(await session.release(), true);
    });
  });

  it("sends a token over plaintext (local development)", async () => {
    await withClient(plain!.address, { token: ADMIN_TOKEN }, async (client) => {
      const session = await client.acquire(uniqueName("auth.plain"), "admin", { ttlMs: 5000 });
      assert.equal(await session.release(), true);
    });
  });

  it("reports a missing or wrong token as UNAUTHENTICATED with the server's message", async () => {
    for (const token of [undefined, "wrong-token-0123456789abcdef"]) {
      await withClient(tls!.address, { tls: { ca: path("ca.pem") }, token }, async (client) => {
        const err = await rejection(client.acquire(uniqueName("auth.none"), "x"));
        assert.equal(err.reason, Reason.UNAUTHENTICATED);
        assert.equal(err.retryable, false);
        assert.match(err.message, new RegExp(`^tenure at ${tls!.address}: Acquire: UNAUTHENTICATED: .+`));
      });
    }
  });

  it("reports a missing grant as PERMISSION_DENIED, and sessions work without the watch grant", async () => {
    await withClient(plain!.address, { token: WORKER_TOKEN }, async (client) => {
      const err = await rejection(client.revokeLease("auth.x", "test"));
      assert.equal(err.reason, Reason.PERMISSION_DENIED);
      assert.equal(err.retryable, false);
      assert.match(err.message, /RevokeLease: PERMISSION_DENIED: /);
      // The loss watch is refused (no watch grant): the session still renews and releases.
      const session = await client.acquire(uniqueName("auth.worker"), "worker", { ttlMs: 1000 });
      const renewed = session.revision;
      await new Promise<void>((ok) => {
        const check = setInterval(() => {
          if (session.revision > renewed || !session.isHeld()) {
            clearInterval(check);
            ok();
          }
        }, 20);
      });
      assert.equal(session.isHeld(), true, "a renewal got through");
      assert.equal(await session.release(), true);
    });
  });

  it("fails the TLS handshake without a trusted CA, naming the server", async () => {
    await withClient(tls!.address, { tls: true, token: ADMIN_TOKEN, rpcTimeoutMs: 2000 }, async (client) => {
      const err = await rejection(client.acquire(uniqueName("auth.ca"), "x"));
      assert.equal(err.reason, Reason.UNSPECIFIED);
      assert.match(err.message, new RegExp(`^tenure at ${tls!.address}: Acquire: `));
    });
  });
});
