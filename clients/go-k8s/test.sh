#!/usr/bin/env bash
# Tests the client-go resource lock against a real Tenure: gofmt, go vet
# (which also compiles the controller-runtime example), then go test:
# the lock's calls, client-go's leaderelection.RunOrDie with two and three
# candidates in this process and in separate processes (one killed with
# SIGKILL), and two controller-runtime managers of the example electing
# through Tenure with no Kubernetes cluster. Prints how long it took.
# Expects the repo root's scripts/tools.sh and `cargo build` to have run
# (target/debug/tenure and .tools/bin/nats-server); TENURE_BIN and
# NATS_SERVER override them. Modules come from the Go module proxy,
# checked against go.sum.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
start=$(date +%s.%N)
elapsed() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f s", e - s }'; }

go mod download
echo "modules ready after $(elapsed)"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt: these files need formatting:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
echo "vet done after $(elapsed)"
# TENURELOCK_LOG=1 shows the electors' and managers' logs.
go test -count=1 -timeout 5m -v ./...
echo "clients/go-k8s: all tests passed in $(elapsed)"
