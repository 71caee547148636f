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
files=(lease.proto error_reason.proto)
case "${1:-}" in
  "")
    mkdir -p "$dst"
    for f in "${files[@]}"; do cp "$src/$f" "$dst/$f"; done
    ;;
  --check)
    for f in "${files[@]}"; do
      if ! cmp -s "$src/$f" "$dst/$f"; then
        echo "clients/rust/proto/tenure/v1/$f differs from proto/tenure/v1/$f: run scripts/gen-clients.sh" >&2
        exit 1
      fi
    done
    ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
