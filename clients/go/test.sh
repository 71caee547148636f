#!/usr/bin/env bash
# Tests the Go client against a real Tenure: checks the generated stubs are
# up to date with the proto, vets, runs `go test`, then installs the module
# into a scratch module outside the repository by the README's documented
# `replace`s (the client, and fence/go which its tests use), builds a
# program and the example worker there, and runs two workers against one
# server (clients/examples/two_workers.sh). Expects the repo
# root's scripts/tools.sh and `cargo build` to have run
# (target/debug/tenure and .tools/bin/nats-server); TENURE_BIN and
# NATS_SERVER override them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

# Modules come from the Go module proxy, checked against go.sum; the
# generation tools (pinned in gen.sh) install into <repo>/.tools.
./gen.sh --check
go mod download
go vet ./...
go test -count=1 -timeout 3m -v ./...

# Install from a scratch module, exactly as the README documents.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(
	cd "$scratch"
	go mod init example.com/scratch >/dev/null 2>&1
	go mod edit -require=github.com/tenure-dev/tenure/clients/go@v0.0.0 \
		-replace=github.com/tenure-dev/tenure/clients/go="$here" \
		-replace=github.com/tenure-dev/tenure/fence/go="$root/fence/go"
	cat >main.go <<'GO'
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tenure-dev/tenure/clients/go/tenure"
)

func main() {
	c, err := tenure.Dial(os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Acquire(ctx, "scratch.install", "scratch", 5*time.Second)
	if err != nil {
		panic(err)
	}
	released, err := s.Release(ctx)
	fmt.Println("token", s.FencingToken(), "released", released, err)
}
GO
	go mod tidy
	go build -o scratch .
	go build -o worker github.com/tenure-dev/tenure/clients/go/examples/worker
)
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
export TENURE_BIN NATS_SERVER
TENURE_BIN=$(abs "${TENURE_BIN:-target/debug/tenure}")
NATS_SERVER=$(abs "${NATS_SERVER:-.tools/bin/nats-server}")
"$here/../examples/two_workers.sh" "$scratch/run" "$scratch/worker"
