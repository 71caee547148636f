#!/usr/bin/env bash
# Installs the pinned dependencies (npm ci, skipped when node_modules/ is up
# to date), checks that src/gen/ matches proto/, compiles with tsc and runs
# the tests with the Node test runner against real Tenure servers.
#
# Assumes `cargo build` and `scripts/tools.sh` ran at the repo root, so that
# target/debug/tenure and .tools/bin/nats-server exist (or TENURE_BIN and
# NATS_SERVER point elsewhere).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

export TENURE_BIN="${TENURE_BIN:-$root/target/debug/tenure}"
export NATS_SERVER="${NATS_SERVER:-$root/.tools/bin/nats-server}"
for f in "$TENURE_BIN" "$NATS_SERVER"; do
  [ -x "$f" ] || { echo "test.sh: $f is missing: run cargo build and scripts/tools.sh at the repo root" >&2; exit 1; }
done

scripts/npm-ci.sh
./gen.sh --check
rm -rf dist
node_modules/.bin/tsc -p tsconfig.json
# One test file at a time: each starts its own Tenure + nats-server.
node --test --test-concurrency=1 dist/test/*.test.js
