#!/usr/bin/env bash
# Runs the Python client's tests against a real Tenure + nats-server.
#
# Installs the pinned packages of requirements.txt into .venv (git-ignored;
# skipped when already there), then runs pytest: the tests start their own
# servers from $TENURE_BIN (default: target/debug/tenure) and $NATS_SERVER
# (default: .tools/bin/nats-server), so run `scripts/tools.sh` and
# `cargo build` at the repo root first. Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/scripts/venv.sh"

# Defaults and relative paths are taken from the repo root.
TENURE_BIN=${TENURE_BIN:-target/debug/tenure}
NATS_SERVER=${NATS_SERVER:-.tools/bin/nats-server}
case $TENURE_BIN in /*) ;; *) TENURE_BIN="$root/$TENURE_BIN" ;; esac
case $NATS_SERVER in /*) ;; *) NATS_SERVER="$root/$NATS_SERVER" ;; esac
export TENURE_BIN NATS_SERVER
for bin in "$TENURE_BIN" "$NATS_SERVER"; do
  [ -x "$bin" ] || { echo "test.sh: $bin missing: run scripts/tools.sh and cargo build at the repo root" >&2; exit 1; }
done

cd "$here"
# Byte-compile the package first so a syntax error fails fast and clearly.
"$PY" -m compileall -q src/tenure_client >/dev/null
exec "$PY" -m pytest -p no:cacheprovider -ra "$@"
