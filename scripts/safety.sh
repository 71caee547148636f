#!/usr/bin/env bash
# Safety under faults: runs every scenario of the tenure-safety checker and
# prints the results table (see docs/safety.md).
#
#   scripts/safety.sh            the long run: 120 s of load per scenario (~60 min)
#   scripts/safety.sh --quick    the CI variant: 12 s per scenario, 6-10 s for some, 16 s for
#                                the NATS-fault and R3 ones (~8.5 min in one lane)
#   scripts/safety.sh --lanes 2 --quick
#                                the scenarios in two processes at once, each taking every
#                                second scenario of `tenure-safety list` (CI: one lane keeps
#                                about 0.8 of a core busy, its clients mostly waiting); each
#                                lane's report follows when both are done
#
# Other flags go to `tenure-safety run` (e.g. --only baseline,r3-sigstop,
# --seconds 300, --margin-ms 0); --only runs in one lane. Installs what it needs: nats-server via
# scripts/tools.sh, PostgreSQL via scripts/postgres.sh and redis-server via
# fence/kits/scripts/redis.sh (Debian packages), each a throwaway server on
# a free loopback port in a temp folder that is removed afterwards
# (histories and logs stay under $TENURE_SAFETY_DIR, default a temp folder,
# when a scenario fails). Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

lanes=1
if [ "${1:-}" = --lanes ]; then
  lanes=${2:?--lanes needs a number}
  shift 2
  case "$lanes" in [1-9]) ;; *) echo "safety: --lanes takes 1 to 9" >&2; exit 2 ;; esac
fi
for arg in "$@"; do
  case "$arg" in --only | --only=*) lanes=1 ;; esac
done

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

safety="${CARGO_TARGET_DIR:-target}/debug/tenure-safety"
status=0
if [ "$lanes" = 1 ]; then
  "$safety" run --work-dir "$work/runs" "$@" || status=$?
else
  # Lane i runs scenarios i, i + lanes, ... of the list (the R3 ones, the
  # longest, are neighbours in it, so they spread over the lanes). Every
  # scenario starts its own servers on free ports in its own folder; the
  # PostgreSQL and Redis stores above serve both lanes (one scenario each).
  mapfile -t all < <("$safety" list)
  pids=()
  for ((lane = 0; lane < lanes; lane++)); do
    only=()
    for ((i = lane; i < ${#all[@]}; i += lanes)); do only+=("${all[i]}"); done
    list=$(IFS=,; echo "${only[*]}")
    echo "safety: lane $((lane + 1)) of $lanes: $list" >&2
    "$safety" run --work-dir "$work/runs/lane$((lane + 1))" --only "$list" "$@" >"$work/lane$((lane + 1)).log" 2>&1 &
    pids+=($!)
  done
  for ((lane = 0; lane < lanes; lane++)); do
    lane_status=0
    wait "${pids[lane]}" || lane_status=$?
    printf '\n==> safety lane %d of %d (exit %d)\n' $((lane + 1)) "$lanes" "$lane_status"
    cat "$work/lane$((lane + 1)).log"
    [ "$lane_status" = 0 ] || status=$lane_status
  done
fi
if [ "$status" != 0 ]; then
  keep=1
  # CI shows the tail of the output: name what failed there, whichever lane.
  if [ "$lanes" != 1 ]; then
    grep -h -A8 -E '^== .*FAILED' "$work"/lane*.log >&2 || echo "safety: no scenario reported FAILED; see the lane logs above" >&2
  fi
  echo "safety: FAILED (exit $status); histories and logs kept in $work/runs" >&2
fi
exit "$status"
