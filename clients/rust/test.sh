#!/usr/bin/env bash
# Tests the Rust client (crate tenure-client) the way a user gets it:
#  1. clients/rust/proto is the same as the repository's proto/tenure/v1;
#  2. the crate's tests (they start real nats-server + tenure processes),
#     unless TENURE_RUST_CLIENT_TESTED=1 says the caller has just run them
#     (scripts/test.sh does, in its workspace-wide `cargo test`: run here
#     with -p they would be built again, features resolved apart);
#  3. `cargo package -p tenure-client` (packs the crate with everything it
#     needs, proto included; not verified by cargo, because step 4 builds
#     the packaged sources the way a user's project does);
#  4. a scratch Cargo project in a mktemp directory outside the repository
#     (so without this repository's build flags) adds the packaged crate by
#     the README's documented `cargo add tenure-client --path ...`, builds a
#     program using the API and the example worker (examples/worker.rs
#     copied in as a binary);
#  5. two of those workers against one server (clients/examples/two_workers.sh).
# Expects the repo root's scripts/tools.sh and `cargo build` to have run
# (target/debug/tenure and .tools/bin/nats-server); TENURE_BIN and
# NATS_SERVER override them. Arguments go to `cargo test` and skip 3-5.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
export TENURE_BIN NATS_SERVER
TENURE_BIN=$(abs "${TENURE_BIN:-target/debug/tenure}")
NATS_SERVER=$(abs "${NATS_SERVER:-.tools/bin/nats-server}")
for bin in "$TENURE_BIN" "$NATS_SERVER"; do
  [ -x "$bin" ] || { echo "test.sh: $bin missing: run scripts/tools.sh and cargo build at the repo root" >&2; exit 1; }
done
# One target directory for the workspace, the package check and the scratch
# project, so dependencies compiled once are reused (the check stays quick).
export CARGO_TARGET_DIR
CARGO_TARGET_DIR=$(abs "${CARGO_TARGET_DIR:-target}")

"$here/gen.sh" --check
if [ $# -gt 0 ] || [ "${TENURE_RUST_CLIENT_TESTED:-0}" != 1 ]; then
  cargo test -p tenure-client "$@"
fi
if [ $# -gt 0 ]; then exit 0; fi # a chosen subset of tests: no install check

cargo package -p tenure-client --allow-dirty --no-verify
crate=$(ls -t "$CARGO_TARGET_DIR"/package/tenure-client-*.crate | head -n 1)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/vendor"
tar -xzf "$crate" -C "$scratch/vendor"
pkg=$(echo "$scratch"/vendor/tenure-client-*)
(
  cd "$scratch"
  cargo new --quiet --bin scratch
  cd scratch
  # The workspace's lock file and dev profile, so the scratch build resolves
  # the same dependency versions and reuses their compiled artifacts.
  cp "$root/Cargo.lock" .
  sed -n '/^\[profile\.dev\]/,/^debug = false/p' "$root/Cargo.toml" >>Cargo.toml
  # The documented install command (README, "Install"), on the packaged crate.
  cargo add --quiet tenure-client --path "$pkg"
  cargo add --quiet tokio --features rt-multi-thread,macros,signal,time
  cargo add --quiet libc
  cat >src/main.rs <<'RS'
//! Acquires and releases one lease on the server given as the argument.
use std::time::Duration;
use tenure_client::{AcquireOptions, Client, ClientConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).expect("usage: scratch ADDR");
    let client = Client::connect_with(ClientConfig::new(addr)).await?;
    let session = client
        .acquire("scratch.install", "scratch", Duration::from_secs(5), AcquireOptions::default())
        .await?;
    let token = session.fencing_token();
    let released = session.release().await?;
    println!("token {token} released {released}");
    Ok(())
}
RS
  mkdir -p src/bin
  cp "$pkg/examples/worker.rs" src/bin/worker.rs
  cargo build --quiet --bins
)
"$here/../examples/two_workers.sh" "$scratch/run" "$CARGO_TARGET_DIR/debug/worker"
echo "clients/rust: tests, package, scratch install and two workers passed" >&2
