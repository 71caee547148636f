#!/usr/bin/env bash
# Builds the Java client (stubs generated from ../../proto at build time) and runs
# its JUnit 5 tests through Maven Surefire against real Tenure servers that the
# tests start themselves (tenure serve + its own nats-server, on 127.0.0.1).
#
# Assumes scripts/tools.sh and `cargo build` ran at the repository root, so that
# target/debug/tenure and .tools/bin/nats-server exist; TENURE_BIN and
# NATS_SERVER override those paths. Dependencies are pinned in pom.xml and come
# from Maven Central into the default ~/.m2 (fast when already there).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

absolute() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}
TENURE_BIN=$(absolute "${TENURE_BIN:-$root/target/debug/tenure}")
NATS_SERVER=$(absolute "${NATS_SERVER:-$root/.tools/bin/nats-server}")
export TENURE_BIN NATS_SERVER
for bin in "$TENURE_BIN" "$NATS_SERVER"; do
  if [ ! -x "$bin" ]; then
    echo "test.sh: $bin is missing: run scripts/tools.sh and cargo build at $root" >&2
    exit 1
  fi
done

# The machine image has OpenJDK 17 and Maven; install them from Debian's
# packages only where they are missing.
if ! command -v mvn >/dev/null || ! command -v javac >/dev/null; then
  echo "test.sh: installing maven and openjdk-17-jdk-headless (apt)" >&2
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven openjdk-17-jdk-headless
fi

cd "$here"
# -ntp keeps download progress out of the log; Surefire's summary stays visible.
exec mvn -B -ntp -Dstyle.color=never test
