#!/usr/bin/env bash
# Throwaway PostgreSQL for the safety checker: the fenced downstream store.
#
#   scripts/postgres.sh start DIR   installs PostgreSQL from Debian packages if
#                                   missing, creates a cluster in DIR (a new
#                                   folder), starts it on a free 127.0.0.1 port
#                                   and prints its connection string on stdout
#   scripts/postgres.sh stop DIR    stops it (the caller removes DIR)
#
# PostgreSQL refuses to run as root, so as root the cluster runs as the
# `postgres` user the Debian package creates. Trust auth on loopback only;
# fsync off: the data is thrown away after the run.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

find_bindir() {
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir; return
  fi
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

bindir=$(find_bindir || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
  if [ "$cmd" = stop ]; then exit 0; fi
  echo "postgres: installing PostgreSQL (apt-get)" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "postgres: PostgreSQL is missing and only root can install it: apt-get install postgresql" >&2
    exit 1
  fi
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
  bindir=$(find_bindir)
fi

# Run a PostgreSQL tool as a non-root user.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$dir" && chmod 700 "$dir"
      runuser -u postgres -- test -x "$dir" \
        || { echo "postgres: user postgres cannot reach $dir; make its parents world-searchable (chmod o+x)" >&2; exit 1; }
    fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    as_pg "$bindir/initdb" -D "$dir/data" -U tenure --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 30 \
      -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >&2
    echo "host=127.0.0.1 port=$port user=tenure dbname=postgres"
    ;;
  stop)
    [ -d "$dir/data" ] || exit 0
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
