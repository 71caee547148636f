#!/usr/bin/env bash
# two_workers.sh WORKDIR WORKER_CMD...: runs the example worker twice
# against one fresh Tenure and checks the fenced store's log: the first
# worker takes the lease and writes, the second waits; the first is
# SIGKILLed, the second takes over with a larger token, writes, and on
# SIGTERM stops and releases. In the log tokens never decrease, each token
# has one holder, and the last holder is the second worker.
# WORKER_CMD gets --addr, --name, --holder and --store appended.
# TENURE_BIN and NATS_SERVER must be absolute paths.
set -euo pipefail
work=$1
shift
mkdir -p "$work/store" "$work/data"
store=$work/store
port=$((20000 + RANDOM % 20000))
addr=127.0.0.1:$port
"$TENURE_BIN" serve --listen "$addr" --data-dir "$work/data" --nats-server "$NATS_SERVER" >"$work/tenure.log" 2>&1 &
tenure_pid=$!
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	kill -TERM "$tenure_pid" 2>/dev/null || true
	wait "$tenure_pid" 2>/dev/null || true
}
trap cleanup EXIT

# wait_for PATTERN FILE SECONDS: poll a file the workers append to.
wait_for() {
	local deadline=$((SECONDS + $3))
	until grep -q -- "$1" "$2" 2>/dev/null; do
		if ((SECONDS > deadline)); then
			echo "two_workers: no '$1' in $2 after $3 s" >&2
			tail -n 20 "$work"/*.log >&2 || true
			exit 1
		fi
		sleep 0.1
	done
}

"$@" --addr "$addr" --name examples.worker --holder first --store "$store" >"$work/first.log" 2>&1 &
first=$!
pids+=("$first")
wait_for " first " "$store/log" 60
"$@" --addr "$addr" --name examples.worker --holder second --store "$store" >"$work/second.log" 2>&1 &
second=$!
pids+=("$second")
kill -KILL "$first"
wait "$first" 2>/dev/null || true
wait_for " second " "$store/log" 60
kill -TERM "$second"
if ! wait "$second"; then
	echo "two_workers: the second worker failed after SIGTERM" >&2
	cat "$work/second.log" >&2
	exit 1
fi
if ! grep -q "released=true" "$work/second.log"; then
	echo "two_workers: the second worker did not release on SIGTERM" >&2
	cat "$work/second.log" >&2
	exit 1
fi
awk '
	$1 + 0 < last { printf "token went down at line %d: %s after %d\n", NR, $1, last; bad = 1 }
	{ last = $1 + 0 }
	($1 in holder) && holder[$1] != $2 { printf "token %s has two holders: %s, %s\n", $1, holder[$1], $2; bad = 1 }
	{ holder[$1] = $2; if ($2 == "first") f = $1 + 0; if ($2 == "second") s = $1 + 0; lastholder = $2 }
	END {
		if (lastholder != "second") { print "the last writer is not the second worker"; bad = 1 }
		if (!(s > f)) { printf "second token %d not above first %d\n", s, f; bad = 1 }
		if (!bad) printf "two_workers: ok: %d writes, first token %d, second token %d\n", NR, f, s
		exit bad
	}' "$store/log"
