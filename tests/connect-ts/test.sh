#!/usr/bin/env bash
# The README walkthrough through clients nobody here wrote: the Connect
# TypeScript client (@connectrpc/connect with @connectrpc/connect-node,
# stubs from @bufbuild/protoc-gen-es run by buf), over the Connect protocol
# (JSON, and binary protobuf) and over gRPC-Web, on HTTP/1.1 to Tenure's
# one port, with bearer-token auth on.
#
# Installs the pinned packages (npm ci, skipped when node_modules/ matches
# package-lock.json), generates the stubs from proto/ into gen/, compiles
# with tsc, starts a nats-server and a `tenure serve` on free loopback
# ports with temporary folders, runs walkthrough.test.ts with the Node test
# runner, and stops both servers by PID. Nothing is skipped: whatever
# cannot run fails the script.
#
# Assumes `cargo build` and `scripts/tools.sh` ran at the repository root
# (target/debug/tenure and .tools/bin/nats-server; TENURE_BIN and
# NATS_SERVER point elsewhere).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

TENURE_BIN="${TENURE_BIN:-$root/target/debug/tenure}"
NATS_SERVER="${NATS_SERVER:-$root/.tools/bin/nats-server}"
for f in "$TENURE_BIN" "$NATS_SERVER"; do
  [ -x "$f" ] || { echo "connect-ts: $f is missing: run cargo build and scripts/tools.sh at the repo root" >&2; exit 1; }
done
for tool in node npm curl; do
  command -v "$tool" >/dev/null || { echo "connect-ts: $tool is not installed" >&2; exit 1; }
done

if ! cmp -s package-lock.json node_modules/.tenure-lock.json 2>/dev/null; then
  echo "connect-ts: installing the pinned packages (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.tenure-lock.json
fi
rm -rf gen dist
node_modules/.bin/buf generate
node_modules/.bin/tsc -p tsconfig.json

work=$(mktemp -d)
nats_pid=""
tenure_pid=""
stop() {
  # Tenure first (it leaves NATS alone), then NATS; each by its PID.
  for pid in $tenure_pid $nats_pid; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap stop EXIT

free_port() {
  node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# nats-server with JetStream, its store in the temporary folder.
nats_port=$(free_port)
"$NATS_SERVER" -a 127.0.0.1 -p "$nats_port" -js -sd "$work/nats" -l "$work/nats.log" &
nats_pid=$!
for _ in $(seq 100); do
  (: >"/dev/tcp/127.0.0.1/$nats_port") 2>/dev/null && break
  kill -0 "$nats_pid" 2>/dev/null || { cat "$work/nats.log" >&2; exit 1; }
  sleep 0.1
done

# Auth on: one token, allowed everything under jobs.
token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
printf 'walker %s\n' "$token" >"$work/tokens"
cat >"$work/tenure.toml" <<'TOML'
[[grant]]
identity = "walker"
prefixes = ["jobs."]
actions = ["*"]
TOML

# A free port can be taken before Tenure binds it: try another, thrice.
for attempt in 1 2 3; do
  port=$(free_port)
  "$TENURE_BIN" serve --listen "127.0.0.1:$port" --nats-url "nats://127.0.0.1:$nats_port" \
    --data-dir "$work/data" --auth-tokens "$work/tokens" --config "$work/tenure.toml" \
    --shutdown-grace 1s >"$work/tenure.log" 2>&1 &
  tenure_pid=$!
  ready=""
  for _ in $(seq 300); do
    if curl -sS --max-time 2 -H 'content-type: application/json' -d '{"service":"tenure.v1.LeaseService"}' \
      "http://127.0.0.1:$port/grpc.health.v1.Health/Check" 2>/dev/null | grep -q '"SERVING"'; then
      ready=yes
      break
    fi
    kill -0 "$tenure_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$ready" ] && break
  kill -TERM "$tenure_pid" 2>/dev/null || true
  wait "$tenure_pid" 2>/dev/null || true
  tenure_pid=""
  if [ "$attempt" = 3 ] || ! grep -q "Address already in use" "$work/tenure.log"; then
    echo "connect-ts: tenure did not become ready:" >&2
    cat "$work/tenure.log" >&2
    exit 1
  fi
done

status=0
TENURE_URL="http://127.0.0.1:$port" TENURE_TOKEN="$token" \
  node --test --test-concurrency=1 dist/walkthrough.test.js || status=$?
if [ "$status" != 0 ]; then
  echo "connect-ts: the walkthrough failed; Tenure's log:" >&2
  tail -n 50 "$work/tenure.log" >&2
fi
exit "$status"
