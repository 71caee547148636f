#!/usr/bin/env bash
# Lints proto/ with buf (rules in the root buf.yaml: STANDARD).
#
# buf comes from the npm package @bufbuild/buf, pinned below and installed
# into the git-ignored .tools/buf (skipped when that version is already
# there), so the lint is the same on every machine.
set -euo pipefail

BUF_VERSION=1.75.0

root=$(cd "$(dirname "$0")/.." && pwd)
prefix="$root/.tools/buf"
buf="$prefix/node_modules/.bin/buf"

if ! [ -x "$buf" ] || [ "$("$buf" --version 2>/dev/null)" != "$BUF_VERSION" ]; then
  echo "buf-lint: installing @bufbuild/buf@$BUF_VERSION (npm) into $prefix" >&2
  rm -rf "$prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error \
    "@bufbuild/buf@$BUF_VERSION" >&2
fi

cd "$root"
"$buf" lint
echo "buf-lint: ok"
