#!/usr/bin/env bash
# Runs Tenure with a managed local nats-server (store under ./tenure-data),
# listening on 127.0.0.1:7419. Extra arguments go to `tenure serve`.
#
# TENURE_SERVE_PROFILE=dev runs the debug build instead of the release one
# (scripts/check-serve.sh does, so CI checks this script without a release
# build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/tools.sh
# `-p tenure --bin tenure`: the workspace's default members have more than
# one binary (the safety checker), so a bare `cargo run` cannot choose.
case "${TENURE_SERVE_PROFILE:-release}" in
  release)
    echo "serve: building Tenure (release, whole-program optimized; the first build takes about 5 minutes on 2 cores)" >&2
    exec cargo run --release --quiet -p tenure --bin tenure -- serve "$@"
    ;;
  dev)
    echo "serve: building Tenure (debug)" >&2
    exec cargo run --quiet -p tenure --bin tenure -- serve "$@"
    ;;
  *)
    echo "serve: TENURE_SERVE_PROFILE must be release or dev" >&2
    exit 2
    ;;
esac
