#!/usr/bin/env bash
# Runs the store kits' tests against real servers: the PostgreSQL kit
# (postgres/tenure_fence.sql) and the Redis kit (redis/tenure_fence.lua).
#
# Installs what is missing (PostgreSQL and redis-server from Debian packages,
# as root; the pinned Python packages of requirements.txt into .venv,
# git-ignored), starts a throwaway PostgreSQL (scripts/postgres.sh at the
# repo root) and redis-server (scripts/redis.sh here) on free 127.0.0.1
# ports, runs pytest, and stops both servers whatever happens. Extra
# arguments go to pytest. About 10 s on a warm machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# Python packages: reinstalled only when requirements.txt changes.
venv="$here/.venv"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "kits: installing pinned packages into $venv" >&2
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$here/requirements.txt"
  echo "$want" >"$stamp"
fi

work=$(mktemp -d)
chmod 755 "$work" # the postgres user must reach its data folder
cleanup() {
  "$root/scripts/postgres.sh" stop "$work/postgres" >/dev/null 2>&1 || true
  "$here/scripts/redis.sh" stop "$work/redis" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

TENURE_KITS_PG=$("$root/scripts/postgres.sh" start "$work/postgres")
TENURE_KITS_REDIS=$("$here/scripts/redis.sh" start "$work/redis")
export TENURE_KITS_PG TENURE_KITS_REDIS

cd "$here"
"$venv/bin/python" -m pytest "$@"
