#!/usr/bin/env bash
# Tests the Go client against a real Tenure: checks the generated stubs are
# up to date with the proto, vets, and runs `go test`. Expects the repo
# root's scripts/tools.sh and `cargo build` to have run (target/debug/tenure
# and .tools/bin/nats-server); TENURE_BIN and NATS_SERVER override them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

# Modules come from the Go module proxy, checked against go.sum; the
# generation tools (pinned in gen.sh) install into <repo>/.tools.
./gen.sh --check
go mod download
go vet ./...
go test -count=1 -timeout 3m -v ./...
