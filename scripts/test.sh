#!/usr/bin/env bash
# Runs every check and test of the project: formatting, lints, the Rust unit
# and integration tests (real nats-server processes), the benchmark smoke run,
# and each client's tests. Installs what it needs first. This full run is
# what CI calls. `scripts/test.sh --fast` is the loop to use while changing
# code: fmt, clippy, unit tests and the integration tests but the slow ones.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
# Incremental caches only help rebuilds; on a clean clone they cost disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

started=$SECONDS
step() { printf '\n==> [%dm%02ds] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }

# The integration tests (tests/it, one binary) that take longer than a few
# seconds each: `--fast` skips them. Every other module, a new one included,
# is in the fast tier.
SLOW_MODULES=(expiry fencing fifo_r3 hostile_load no_atomic shards_cluster watch_heals watch_memory)

if [ "${1:-}" = "--fast" ]; then
  step "fast tier: fmt, clippy, unit tests, the fast integration tests and the walkthroughs; under 5 minutes on a warm 2-core machine (the full run, CI's: scripts/test.sh)"
  scripts/tools.sh --protoc
  step "cargo fmt --check"
  cargo fmt --all --check
  step "cargo clippy"
  cargo clippy --workspace --all-targets -- -D warnings
  step "unit tests (server, Rust client, safety checker, benchmark)"
  cargo test --workspace --lib --bins
  step "integration tests but the slow modules (${SLOW_MODULES[*]})"
  skips=()
  for m in "${SLOW_MODULES[@]}"; do skips+=(--skip "$m::"); done
  cargo test -p tenure --test it -- "${skips[@]}"
  step "fast checks passed (the full run: scripts/test.sh)"
  exit 0
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/test.sh [--fast]" >&2
  exit 2
fi

step "every check and test: about 25 minutes on a fresh 2-core machine (a clean clone of c6725e1: 20 min 1 s), most of it building, the safety run in two lanes, and the client suites, with the model check and tool builds filling the gaps"
step "disk before the run (a clean run needs about 6 GB)"
df -h . >&2 || true

step "tools (first run on a fresh machine: a few minutes of installs and builds)"
scripts/tools.sh --protoc

# helm and kubeconform (go install) and cargo-cyclonedx (cargo install)
# build from source for minutes of CPU on a fresh machine; they build
# beside the Rust build and tests, and the checks that need them
# (release archive, deploy manifests) run near the end. At the lowest CPU
# priority: every step of this run keeps two cores busy only part of the
# time (tests wait on servers and deadlines), and a background build that
# only fills those gaps does not slow the steps that wait for each other.
tools_log=$(mktemp)
step "deploy and release tools (helm, kubeconform, cargo-cyclonedx) start building in the background, at the lowest CPU priority"
nice -n 19 scripts/tools.sh --deploy --release >"$tools_log" 2>&1 &
tools_pid=$!
trap 'kill "$tools_pid" 2>/dev/null || true; rm -f "$tools_log"' EXIT

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test (server, Rust client, safety checker, benchmark)"
cargo build --workspace --quiet
# The 3-node cluster tests time a cluster forming (Tenure's 20 s start-up
# patience), the R3 fairness test needs a floor of grants from its load,
# and the hostile load must fill unread watches within its 20 s attack:
# run them alone, not beside the 200 other integration tests.
ALONE=(shards_cluster fifo_r3 hostile_load)
skips=()
for m in "${ALONE[@]}"; do skips+=(--skip "$m::"); done
cargo test --workspace -- "${skips[@]}"

# `--workspace`, as above: `-p tenure` alone would unify dependency
# features differently and rebuild the test binary (a minute of CPU).
step "the 3-node cluster tests, alone (tests/it/shards_cluster.rs)"
cargo test --workspace --test it shards_cluster::

step "R3 fairness and hostile load, one at a time (tests/it/fifo_r3.rs, tests/it/hostile_load.rs)"
cargo test --workspace --test it -- --test-threads=1 fifo_r3:: hostile_load::

step "README quick start: scripts/serve.sh serves and stops (debug build)"
scripts/check-serve.sh

step "ops assets: alert rules (promtool), their unit tests, the Grafana dashboard"
scripts/check-ops.sh

# The model check is one single-threaded pan process at a time (about 8
# minutes of one core), started here at the lowest CPU priority: it fills
# what the safety run and the client suites leave of the two cores. The
# safety run takes its scenarios in two lanes (each lane keeps about 0.8 of
# a core busy: its clients mostly wait on NATS and on their deadlines); the
# checker judges by the clients' deadlines and margins, not by speed. The
# model check's report is printed, and its failure fails the run, after the
# client suites.
# spin and gcc are installed first: the safety run installs PostgreSQL and
# redis-server with apt-get too, and two apt-gets at once fail on its lock.
scripts/model-check.sh --install
model_log=$(mktemp)
step "model check of the lease, fair-queue, semaphore, group, lock-delay and read-write lock protocols starts in the background (spin; about 8 minutes of one core, at the lowest CPU priority)"
nice -n 19 scripts/model-check.sh >"$model_log" 2>&1 &
model_pid=$!
trap 'kill "$model_pid" "$tools_pid" 2>/dev/null || true; rm -f "$model_log" "$tools_log"' EXIT

step "safety under faults (CI variant in two lanes; the long run is scripts/safety.sh)"
scripts/safety.sh --lanes 2 --quick

# The fence verifiers and kits (fence/test.sh: Go, Python, Java, PostgreSQL,
# Redis) mostly download, start servers and wait on them: they run beside
# the smoke runs and client suites too. The TypeScript one runs after the
# client suites, as clients/typescript builds the same package.
# The client-go resource lock (clients/go-k8s) compiles client-go and
# controller-runtime for about 5 minutes of CPU on a fresh machine; it runs
# in the same background job, after the fence suites.
fence_log=$(mktemp)
step "fence verifiers, store kits and the client-go resource lock start in the background (fence/test.sh, clients/go-k8s; about 8 minutes cold)"
{ fence/test.sh go python java kits && { echo "==> clients/go-k8s"; clients/go-k8s/test.sh; }; } >"$fence_log" 2>&1 &
fence_pid=$!
trap 'kill "$model_pid" "$tools_pid" "$fence_pid" 2>/dev/null || true; rm -f "$model_log" "$tools_log" "$fence_log"' EXIT

step "benchmark smoke runs (debug builds; the full runs: scripts/bench.sh, cargo bench)"
cargo test --bench latency -- --quick
scripts/bench.sh --quick

# The Rust client's own tests ran in the workspace `cargo test` above.
export TENURE_RUST_CLIENT_TESTED=1
# Nothing passes by skipping: a client without its runnable test.sh fails.
for lang in go python typescript java rust; do
  [ -x "clients/$lang/test.sh" ] || { echo "test.sh: clients/$lang/test.sh is missing or not executable" >&2; exit 1; }
done

# The client suites spend much of their time downloading packages,
# starting servers and waiting on them, so they run in two lanes: Go,
# Python and Rust in the background (their report follows), TypeScript
# (with the Connect client and the TypeScript verifier, which build on its
# package) and Java here. Each suite starts its own servers on free ports.
lane_log=$(mktemp)
step "clients/go, clients/python, clients/rust start in the background (their report after the TypeScript and Java suites)"
{
  for lang in go python rust; do
    printf '\n==> clients/%s\n' "$lang"
    "clients/$lang/test.sh" || exit
  done
} >"$lane_log" 2>&1 &
lane_pid=$!
trap 'kill "$model_pid" "$tools_pid" "$fence_pid" "$lane_pid" 2>/dev/null || true; rm -f "$model_log" "$tools_log" "$fence_log" "$lane_log"' EXIT

step "clients/typescript"
clients/typescript/test.sh

step "the Connect TypeScript client and gRPC-Web against a real Tenure (tests/connect-ts)"
tests/connect-ts/test.sh

step "fence/typescript (the verifier the TypeScript client's tests built)"
fence/test.sh typescript

step "clients/java"
clients/java/test.sh

step "clients/go, clients/python, clients/rust (their report; started before the TypeScript suite)"
lane_status=0
wait "$lane_pid" || lane_status=$?
cat "$lane_log" >&2
[ "$lane_status" = 0 ] || { echo "test.sh: a client suite of Go, Python or Rust failed (exit $lane_status)" >&2; exit "$lane_status"; }

step "fence verifiers, store kits and clients/go-k8s (their report; started before the smoke runs)"
fence_status=0
wait "$fence_pid" || fence_status=$?
cat "$fence_log" >&2
[ "$fence_status" = 0 ] || { echo "test.sh: fence/test.sh or clients/go-k8s/test.sh failed (exit $fence_status)" >&2; exit "$fence_status"; }

step "model check (its report; started before the safety run)"
model_status=0
wait "$model_pid" || model_status=$?
cat "$model_log"
[ "$model_status" = 0 ] || { echo "test.sh: model check failed (exit $model_status)" >&2; exit "$model_status"; }

step "deploy and release tools (started in the background at the beginning)"
tools_status=0
wait "$tools_pid" || tools_status=$?
cat "$tools_log" >&2
[ "$tools_status" = 0 ] || { echo "test.sh: scripts/tools.sh --deploy --release failed (exit $tools_status)" >&2; exit "$tools_status"; }

step "release archive from the debug build, unpacked and run from an empty folder (the release build: scripts/release.sh)"
scripts/check-release.sh --profile dev

step "container image: buildah build, podman run, one Acquire from the host"
scripts/check-image.sh --binary target/debug/tenure

step "deploy manifests: systemd unit, Helm chart (lint, template, kubeconform offline)"
scripts/check-deploy.sh

step "buf lint (proto/)"
scripts/buf-lint.sh

step "generated client code is up to date with proto/"
scripts/gen-clients.sh --check

step "all checks passed"
