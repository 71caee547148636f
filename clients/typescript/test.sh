#!/usr/bin/env bash
# Installs the pinned dependencies (npm ci, skipped when node_modules/ is up
# to date) and builds ../../fence/typescript (@tenure/fence, which the fence
# proof tests verify with), checks that src/gen/ matches proto/, compiles
# with tsc and runs the tests with the Node test runner against real Tenure
# servers (test/fence.test.ts starts one with --fence-signing-key, a key
# made by openssl).
#
# Assumes `cargo build` and `scripts/tools.sh` ran at the repo root, so that
# target/debug/tenure and .tools/bin/nats-server exist (or TENURE_BIN and
# NATS_SERVER point elsewhere). test/group.test.ts runs against
# TENURE_GROUPS_BIN when set (a server with the group RPCs), and skips its
# tests, saying so, when the server answers AcquireGroup with UNIMPLEMENTED
# (in CI, CI=true, that fails instead).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

export TENURE_BIN="${TENURE_BIN:-$root/target/debug/tenure}"
export NATS_SERVER="${NATS_SERVER:-$root/.tools/bin/nats-server}"
for f in "$TENURE_BIN" "$NATS_SERVER"; do
  [ -x "$f" ] || { echo "test.sh: $f is missing: run cargo build and scripts/tools.sh at the repo root" >&2; exit 1; }
done

# test/fence.test.ts verifies proofs with @tenure/fence (a file: dev
# dependency): install its pinned dev dependencies and build it first.
"$root/fence/typescript/scripts/install.sh"
scripts/npm-ci.sh
./gen.sh --check
rm -rf dist
node_modules/.bin/tsc -p tsconfig.json
# One test file at a time: each starts its own Tenure + nats-server.
node --test --test-concurrency=1 dist/test/*.test.js

# The package as users get it: `npm pack` (runs `prepare`, so dist/ is in
# the tarball), installed in a scratch project outside the repository by the
# README's command, then required (CommonJS), imported (ESM) and type-checked.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
npm pack --silent --pack-destination "$scratch" >/dev/null
cd "$scratch"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error ./tenure-client-*.tgz
node -e '
const c = require("@tenure/client");
if (typeof c.TenureClient !== "function" || c.EventType.ACQUIRED !== "EVENT_TYPE_ACQUIRED") throw new Error("bad CommonJS exports");
console.log("install: require(\"@tenure/client\") ok");'
cat > check.mjs <<'JS'
import * as esm from "@tenure/client";
import { createRequire } from "node:module";
const cjs = createRequire(import.meta.url)("@tenure/client");
const missing = Object.keys(cjs).filter((k) => !(k in esm));
if (missing.length > 0) throw new Error(`ESM lacks ${missing}`);
if (esm.TenureClient !== cjs.TenureClient) throw new Error("ESM and CommonJS are two copies");
console.log("install: import from \"@tenure/client\" ok");
JS
node check.mjs
cat > check.mts <<'TS'
import { TenureClient, type Session } from "@tenure/client";
const client: TenureClient = new TenureClient("127.0.0.1:1", { token: () => "t", tls: false });
const pending: Promise<Session> = client.acquire("a.b", "me", { ttlMs: 1000 });
void pending;
client.close();
TS
"$here/node_modules/.bin/tsc" --noEmit --strict --module nodenext --moduleResolution nodenext \
  --target es2022 --skipLibCheck --types node --typeRoots "$here/node_modules/@types" check.mts
echo "install: types ok (nodenext ESM)"
