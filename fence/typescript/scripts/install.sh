#!/usr/bin/env bash
# Installs node_modules/ exactly as package-lock.json pins it (npm ci),
# skipped when node_modules/ already matches the lock file; then builds
# dist/src/ (the package's entry point). Used by test.sh and by
# clients/typescript/test.sh, whose tests import this package through a
# file: link (npm does not build a linked package, hence `prepack`, not
# `prepare`, in package.json).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
if ! cmp -s package-lock.json node_modules/.tenure-lock.json 2>/dev/null; then
  echo "npm: installing @tenure/fence's dev dependencies (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.tenure-lock.json
fi
node_modules/.bin/tsc -p tsconfig.build.json
