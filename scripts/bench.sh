#!/usr/bin/env bash
# Runs tenure-bench (bench/): Tenure next to raw NATS JetStream KV and etcd,
# in one run on this machine. Installs what is missing first: the pinned
# nats-server (scripts/tools.sh), ghz (go install, pinned), and for the full
# run Debian's etcd-server and protobuf-compiler (etcd-client needs protoc).
#
#   scripts/bench.sh                       # full run, table also in target/bench-table.md
#   scripts/bench.sh --quick               # CI smoke run (debug build, no etcd, < 60 s)
#   scripts/bench.sh --runs 5 --only 1,2   # any tenure-bench flag passes through
#   scripts/bench.sh --only 10             # shards only: starts its own 3-node cluster
#
# With 2 or more CPUs, the servers (nats-server, tenure, etcd) are pinned to
# CPU 0 with taskset and the load generator (and ghz) to CPU 1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="$root/.tools/bin:$PATH"

GHZ_VERSION=v0.120.0

quick=false
for arg in "$@"; do
  [ "$arg" = "--quick" ] && quick=true
done

scripts/tools.sh

if ! [ -x .tools/bin/ghz ] || ! grep -qs "$GHZ_VERSION" .tools/ghz.version; then
  echo "bench: installing ghz $GHZ_VERSION (go install)" >&2
  GOBIN="$root/.tools/bin" GOFLAGS=-mod=mod go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION"
  echo "$GHZ_VERSION" > .tools/ghz.version
fi

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "bench: $* missing; install it (apt-get install $*) or run as root" >&2
    return 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pin=()
if [ "$(nproc)" -ge 2 ]; then
  pin=(--server-cpus 0 --load-cpus 1)
fi

# The bench crate shares the repository's target/ so the server's
# dependencies are built once.
export CARGO_TARGET_DIR="$root/target"

if $quick; then
  # The workspace's own build (CI's `cargo build --workspace` made it): the
  # quick run skips etcd, but building without the etcd feature would
  # compile the benchmark a second time.
  cargo build --quiet --workspace --bins
  exec target/debug/tenure-bench --tenure-bin target/debug/tenure "${pin[@]}" "$@"
fi

command -v etcd >/dev/null || apt_install etcd-server
command -v protoc >/dev/null || apt_install protobuf-compiler
cargo build --release --quiet
(cd bench && cargo build --release --quiet)
exec target/release/tenure-bench "${pin[@]}" --out target/bench-table.md "$@"
