#!/usr/bin/env bash
# Copies the proto files the Rust client is built from (../../proto/tenure/v1)
# into proto/ inside the crate, so that `cargo package` and a crate used from
# outside the repository carry them (build.rs compiles proto/, never ../../).
# scripts/gen-clients.sh runs this; its --check fails when the copy differs.
#
# Usage: ./gen.sh            refresh proto/
#        ./gen.sh --check    fail if proto/ differs from ../../proto
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/../../proto/tenure/v1"
dst="$here/proto/tenure/v1"
# Every .proto of the package, so a file added to proto/tenure/v1 is copied
# (and a removed one dropped) without editing this list.
files=()
for f in "$src"/*.proto; do files+=("$(basename "$f")"); done
case "${1:-}" in
  "")
    rm -rf "$dst"
    mkdir -p "$dst"
    for f in "${files[@]}"; do cp "$src/$f" "$dst/$f"; done
    ;;
  --check)
    if ! diff -rq "$src" "$dst" >/dev/null; then
      echo "clients/rust/proto/tenure/v1 differs from proto/tenure/v1: run scripts/gen-clients.sh" >&2
      diff -rq "$src" "$dst" >&2 || true
      exit 1
    fi
    ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
