#!/usr/bin/env bash
# Installs node_modules/ exactly as package-lock.json pins it (npm ci), and
# skips the install when node_modules/ already matches the lock file.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
if ! cmp -s package-lock.json node_modules/.tenure-lock.json 2>/dev/null; then
  echo "npm: installing dependencies (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.tenure-lock.json
fi
