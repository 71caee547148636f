#!/usr/bin/env bash
# Regenerates the checked-in TypeScript stubs in src/gen/ from the repo's
# proto/ (lease.proto and error_reason.proto, the ErrorReason enum; plus
# google/rpc/status.proto and error_details.proto, which carry Tenure's error
# details).
#
#   ./gen.sh          regenerate src/gen/
#   ./gen.sh --check  regenerate into a temp dir and fail if src/gen/ differs
#
# Tools, all pinned and installed into git-ignored folders of this client:
#   protoc           PyPI grpcio-tools (bundles protoc and the well-known types)
#   google/rpc/*     PyPI googleapis-common-protos (ships the .proto files)
#   protoc-gen-ts_proto  npm ts-proto (from package-lock.json, via npm ci)
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.85.1
GOOGLEAPIS_COMMON_PROTOS_VERSION=1.76.0

here=$(cd "$(dirname "$0")" && pwd)
proto_root=$(cd "$here/../../proto" && pwd)
py="$here/.gen-tools/py"
stamp="$here/.gen-tools/versions"
want="grpcio-tools==$GRPCIO_TOOLS_VERSION googleapis-common-protos==$GOOGLEAPIS_COMMON_PROTOS_VERSION"

if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "gen: installing $want (PyPI)" >&2
  rm -rf "$py"
  # shellcheck disable=SC2086
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps --target "$py" $want
  echo "$want" > "$stamp"
fi

"$here/scripts/npm-ci.sh"

out="$here/src/gen"
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

rm -rf "$out"
mkdir -p "$out"
PYTHONPATH="$py" python3 -m grpc_tools.protoc \
  --plugin=protoc-gen-ts_proto="$here/node_modules/.bin/protoc-gen-ts_proto" \
  --ts_proto_out="$out" \
  --ts_proto_opt=outputServices=grpc-js,env=node,forceLong=bigint,useDate=true,esModuleInterop=true,removeEnumPrefix=true,stringEnums=true \
  -I "$proto_root" \
  -I "$py" \
  -I "$py/grpc_tools/_proto" \
  tenure/v1/lease.proto tenure/v1/error_reason.proto tenure/v1/election.proto google/rpc/status.proto google/rpc/error_details.proto

if [ "${1:-}" = "--check" ]; then
  if ! diff -r "$here/src/gen" "$out" >/dev/null; then
    diff -r "$here/src/gen" "$out" | head -n 40 >&2 || true
    echo "gen: src/gen is out of date with proto/; run clients/typescript/gen.sh" >&2
    exit 1
  fi
  echo "gen: src/gen is up to date with proto/" >&2
fi
