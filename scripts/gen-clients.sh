#!/usr/bin/env bash
# Regenerates every client's stubs from proto/ (each clients/<lang>/gen.sh).
# With --check, fails when the checked-in generated code differs from what
# the proto produces (run in scripts/test.sh, so CI catches a stale client).
set -euo pipefail
cd "$(dirname "$0")/.."
check=${1:-}

for gen in clients/*/gen.sh; do
  echo "gen-clients: $gen" >&2
  "$gen" >&2
done

if [ "$check" = "--check" ]; then
  changes=$(git status --porcelain -- clients)
  if [ -n "$changes" ]; then
    echo "gen-clients: generated client code is out of date with proto/; run scripts/gen-clients.sh and commit:" >&2
    echo "$changes" >&2
    git --no-pager diff --stat -- clients >&2
    exit 1
  fi
  echo "gen-clients: generated code matches proto/" >&2
fi
