#!/usr/bin/env bash
# Runs Tenure with a managed local nats-server (store under ./tenure-data),
# listening on 127.0.0.1:7419. Extra arguments go to `tenure serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/tools.sh
echo "serve: building Tenure (release; the first build takes a few minutes)" >&2
exec cargo run --release --quiet -- serve "$@"
