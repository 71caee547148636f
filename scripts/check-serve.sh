#!/usr/bin/env bash
# Checks the README's first command: `scripts/serve.sh` starts Tenure with a
# managed local nats-server, answers a health check and an Acquire over
# gRPC, and on SIGTERM stops, taking its nats-server with it. Runs the
# debug build (TENURE_SERVE_PROFILE=dev) so CI needs no release build; the
# script is otherwise the one the README runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  pkill -KILL -f "$dir" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

TENURE_SERVE_PROFILE=dev scripts/serve.sh --listen "127.0.0.1:$port" --data-dir "$dir/data" \
  >"$dir/serve.log" 2>&1 &
pid=$!

ready=false
# The first run may build the debug binary: wait up to ~5 minutes.
for _ in $(seq 1 600); do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  if grpcurl -plaintext -max-time 2 "127.0.0.1:$port" grpc.health.v1.Health/Check 2>/dev/null \
    | grep -q SERVING; then
    ready=true
    break
  fi
  sleep 0.5
done
if ! $ready; then
  echo "check-serve: scripts/serve.sh did not answer a health check on 127.0.0.1:$port; its output:" >&2
  cat "$dir/serve.log" >&2
  exit 1
fi

out=$(grpcurl -plaintext -d '{"name":"check-serve","holder":"ci","ttl":"10s"}' \
  "127.0.0.1:$port" tenure.v1.LeaseService/Acquire)
if ! grep -q '"fencingToken"' <<<"$out"; then
  echo "check-serve: Acquire through scripts/serve.sh returned no fencing token:" >&2
  echo "$out" >&2
  exit 1
fi

kill -TERM "$pid"
for _ in $(seq 1 40); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
if kill -0 "$pid" 2>/dev/null; then
  echo "check-serve: Tenure did not stop within 20 s of SIGTERM" >&2
  exit 1
fi
if pgrep -f "$dir/data" >/dev/null; then
  echo "check-serve: the managed nats-server outlived Tenure" >&2
  exit 1
fi
echo "check-serve: scripts/serve.sh served health and an Acquire on 127.0.0.1:$port and stopped cleanly"
