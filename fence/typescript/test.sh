#!/usr/bin/env bash
# Installs the pinned dev dependencies (npm ci, skipped when node_modules/
# is up to date), compiles with tsc, runs the tests with the Node test
# runner (the shared vectors in ../vectors/v1.json, real HTTP servers on
# 127.0.0.1), then packs the package and imports it from a scratch project
# as users would.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

scripts/install.sh
rm -rf dist/test
node_modules/.bin/tsc -p tsconfig.json
node --test dist/test/*.test.js

# The package as users get it: `npm pack` (runs `prepack`, so dist/src is in
# the tarball), installed in a scratch project outside the repository, then
# imported and type-checked.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
npm pack --silent --pack-destination "$scratch" >/dev/null
cd "$scratch"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error ./tenure-fence-*.tgz
cat > check.mjs <<'JS'
import { Keyset, fenced, expressFence, MemoryTokenStore, FenceError } from "@tenure/fence";
for (const [name, value] of Object.entries({ Keyset, fenced, expressFence, MemoryTokenStore, FenceError })) {
  if (typeof value !== "function") throw new Error(`@tenure/fence lacks ${name}`);
}
const keyset = Keyset.parse("iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\n");
try {
  keyset.verifyText("bm90IGEgcHJvb2Y");
  throw new Error("a non-proof verified");
} catch (err) {
  if (!(err instanceof FenceError) || err.kind !== "malformed") throw err;
}
console.log("install: import from \"@tenure/fence\" ok");
JS
node check.mjs
cat > check.mts <<'TS'
import { Keyset, fenced, type Verified } from "@tenure/fence";
const keyset: Keyset = Keyset.parse("iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\n");
const handler: (request: Request) => Promise<Response> = fenced(
  (_request: Request, verified: Verified) => new Response(String(verified.fence.token)),
  { keyset, resource: () => "orders" },
);
void handler;
TS
"$here/node_modules/.bin/tsc" --noEmit --strict --module nodenext --moduleResolution nodenext \
  --target es2022 --skipLibCheck --types node --typeRoots "$here/node_modules/@types" check.mts
echo "install: types ok (nodenext ESM)"
