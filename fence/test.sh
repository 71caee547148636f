#!/usr/bin/env bash
# Runs every fence verifier's and kit's tests: the Go, Python, TypeScript and
# Java verifiers and middleware (each against the shared vectors in
# vectors/v1.json and a real HTTP server in its language) and the PostgreSQL
# and Redis kits against real servers. The Rust crate's tests run in the
# workspace's `cargo test`. About 3 minutes on a fresh machine (downloads,
# PostgreSQL and redis-server from Debian packages), under a minute warm.
# Each suite's output is printed with its name; exits non-zero if any failed.
# Arguments name the suites to run (default: all).
set -uo pipefail
cd "$(dirname "$0")"
failed=()
suites=("$@")
[ "${#suites[@]}" -gt 0 ] || suites=(go python typescript java kits)
for suite in "${suites[@]}"; do
  printf '\n==> fence/%s\n' "$suite" >&2
  start=$SECONDS
  if "./$suite/test.sh"; then
    printf '==> fence/%s passed in %ds\n' "$suite" $((SECONDS - start)) >&2
  else
    printf '==> fence/%s FAILED\n' "$suite" >&2
    failed+=("$suite")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fence/test.sh: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fence/test.sh: every fence suite passed" >&2
