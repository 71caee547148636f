#!/usr/bin/env bash
# Throwaway Redis for the store kits' tests.
#
#   fence/kits/scripts/redis.sh start DIR   installs redis-server from Debian
#                                           packages if missing, starts it in
#                                           DIR (a new folder) on a free
#                                           127.0.0.1 port, without
#                                           persistence, and prints its URL
#                                           on stdout once it accepts clients
#   fence/kits/scripts/redis.sh stop DIR    stops it by its PID (the caller
#                                           removes DIR)
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

case "$cmd" in
  start)
    if ! command -v redis-server >/dev/null 2>&1; then
      echo "redis: installing redis-server (apt-get)" >&2
      if [ "$(id -u)" -ne 0 ]; then
        echo "redis: redis-server is missing and only root can install it: apt-get install redis-server" >&2
        exit 1
      fi
      apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >&2
    fi
    mkdir -p "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    : >"$dir/redis.log"  # tail below follows it from the first line
    redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
      --daemonize no --logfile "$dir/redis.log" >/dev/null 2>&1 &
    pid=$!
    echo "$pid" >"$dir/redis.pid"
    # Await the readiness line in its log; tail ends with the server if it
    # dies first, and is stopped once the line is seen.
    exec 3< <(exec tail --pid="$pid" -s 0.1 -n +1 -F "$dir/redis.log" 2>/dev/null)
    tail_pid=$!
    ready=0
    timeout 30 grep -q -m1 'Ready to accept connections' <&3 && ready=1
    kill "$tail_pid" 2>/dev/null || true
    exec 3<&-
    if [ "$ready" -ne 1 ]; then
      echo "redis: redis-server did not start on 127.0.0.1:$port; its log:" >&2
      cat "$dir/redis.log" >&2 || true
      kill "$pid" 2>/dev/null || true
      exit 1
    fi
    echo "redis://127.0.0.1:$port/0"
    ;;
  stop)
    [ -f "$dir/redis.pid" ] || exit 0
    pid=$(cat "$dir/redis.pid")
    if kill "$pid" 2>/dev/null; then
      # Not our child in this shell: wait for the PID to go away.
      timeout 30 tail --pid="$pid" -s 0.1 -f /dev/null || kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/redis.pid"
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
