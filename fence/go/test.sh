#!/usr/bin/env bash
# Tests the Go fence verifier and middleware: gofmt, go vet, then go test
# (every case of the shared vectors ../vectors/v1.json, the verifier's
# bounds and strict Ed25519, the middleware behind a real HTTP server).
# Standard library only: nothing is downloaded. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt: these files need formatting: $unformatted" >&2
	exit 1
fi
go vet ./...
go test -count=1 -timeout 2m -v ./...
