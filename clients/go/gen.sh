#!/usr/bin/env bash
# Regenerates the checked-in Go stubs in tenurev1/ from ../../proto.
#
# Tools (all pinned, installed into <repo>/.tools, which git ignores):
#   protoc              from PyPI grpcio-tools (python3 -m grpc_tools.protoc), in a venv
#   protoc-gen-go       google.golang.org/protobuf, via go install
#   protoc-gen-go-grpc  google.golang.org/grpc/cmd/protoc-gen-go-grpc, via go install
# Running it twice yields no diff: the output depends only on the proto and
# the pinned versions.
#
# Usage: ./gen.sh            regenerate tenurev1/
#        ./gen.sh --check    fail if the checked-in tenurev1/ is out of date
set -euo pipefail

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

GRPCIO_TOOLS_VERSION=1.78.0
PROTOC_GEN_GO_VERSION=v1.36.11
PROTOC_GEN_GO_GRPC_VERSION=v1.6.1

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools="$root/.tools"
venv="$tools/go-gen-venv"
bin="$tools/bin"
mkdir -p "$bin"

# protoc (bundled in grpcio-tools) in its own venv.
have=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)
if [ "$have" != "$GRPCIO_TOOLS_VERSION" ]; then
  echo "gen: installing grpcio-tools $GRPCIO_TOOLS_VERSION into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "grpcio-tools==$GRPCIO_TOOLS_VERSION"
fi

# The Go plugins, each recorded with its version so a re-run skips them.
install_plugin() { # name module version
  local name=$1 module=$2 version=$3
  if ! [ -x "$bin/$name" ] || ! grep -qsx "$version" "$tools/$name.version"; then
    echo "gen: installing $name $version (go install)" >&2
    GOBIN="$bin" GOFLAGS=-mod=mod go install "$module@$version"
    echo "$version" > "$tools/$name.version"
  fi
}
install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

# grpc_tools ships the well-known types (google/protobuf/*.proto).
wkt=$("$venv/bin/python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Relative proto paths keep absolute folders out of the generated comments.
(cd "$root/proto" && "$venv/bin/python" -m grpc_tools.protoc \
  -I . -I "$wkt" \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=module=github.com/tenure-dev/tenure/clients/go \
  --go-grpc_out="$out" --go-grpc_opt=module=github.com/tenure-dev/tenure/clients/go \
  tenure/v1/lease.proto tenure/v1/error_reason.proto tenure/v1/election.proto)

if $check; then
  if ! diff -ru "$here/tenurev1" "$out/tenurev1" >&2; then
    echo "gen: clients/go/tenurev1 is out of date with proto/: run clients/go/gen.sh" >&2
    exit 1
  fi
  echo "gen: clients/go/tenurev1 is up to date" >&2
  exit 0
fi

rm -f "$here"/tenurev1/*.pb.go
mkdir -p "$here/tenurev1"
cp "$out"/tenurev1/*.pb.go "$here/tenurev1/"
echo "gen: wrote $(cd "$here" && ls tenurev1/*.pb.go | tr '\n' ' ')" >&2
