#!/usr/bin/env bash
# Safety under faults: runs every scenario of the tenure-safety checker and
# prints the results table (see docs/safety.md).
#
#   scripts/safety.sh            the long run: 120 s of load per scenario (~60 min)
#   scripts/safety.sh --quick    the CI variant: 12 s per scenario, 6-10 s for some, 16 s for
#                                the NATS-fault and R3 ones (~8.5 min)
#
# Other flags go to `tenure-safety run` (e.g. --only baseline,r3-sigstop,
# --seconds 300, --margin-ms 0). Installs what it needs: nats-server via
# scripts/tools.sh, PostgreSQL via scripts/postgres.sh and redis-server via
# fence/kits/scripts/redis.sh (Debian packages), each a throwaway server on
# a free loopback port in a temp folder that is removed afterwards
# (histories and logs stay under $TENURE_SAFETY_DIR, default a temp folder,
# when a scenario fails). Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/tools.sh >&2
cargo build --quiet -p tenure-safety -p tenure --bins

work=${TENURE_SAFETY_DIR:-$(mktemp -d /tmp/tenure-safety.XXXXXX)}
mkdir -p "$work"
chmod 755 "$work"  # the postgres user must reach its data folder
pg="$work/postgres"
redis="$work/redis"

cleanup() {
  scripts/postgres.sh stop "$pg" >/dev/null 2>&1 || true
  fence/kits/scripts/redis.sh stop "$redis" >/dev/null 2>&1 || true
  rm -rf "$pg" "$redis"
  if [ "${keep:-0}" = 0 ] && [ -z "${TENURE_SAFETY_DIR:-}" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

export TENURE_SAFETY_PG TENURE_SAFETY_REDIS
TENURE_SAFETY_PG=$(scripts/postgres.sh start "$pg")
# The store of the fenced-redis scenario (the Redis fence kit).
TENURE_SAFETY_REDIS=$(fence/kits/scripts/redis.sh start "$redis")

status=0
"${CARGO_TARGET_DIR:-target}/debug/tenure-safety" run --work-dir "$work/runs" "$@" || status=$?
if [ "$status" != 0 ]; then
  keep=1
  echo "safety: FAILED (exit $status); histories and logs kept in $work/runs" >&2
fi
exit "$status"
