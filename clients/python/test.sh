#!/usr/bin/env bash
# Runs the Python client's tests against a real Tenure + nats-server, then
# (without arguments) the install checks and the two-worker example run.
#
# Installs the pinned packages of requirements.txt into .venv (git-ignored;
# skipped when already there), then runs pytest: the tests start their own
# servers from $TENURE_BIN (default: target/debug/tenure) and $NATS_SERVER
# (default: .tools/bin/nats-server), so run `scripts/tools.sh` and
# `cargo build` at the repo root first. Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$here/scripts/venv.sh"

# Defaults and relative paths are taken from the repo root.
TENURE_BIN=${TENURE_BIN:-target/debug/tenure}
NATS_SERVER=${NATS_SERVER:-.tools/bin/nats-server}
case $TENURE_BIN in /*) ;; *) TENURE_BIN="$root/$TENURE_BIN" ;; esac
case $NATS_SERVER in /*) ;; *) NATS_SERVER="$root/$NATS_SERVER" ;; esac
export TENURE_BIN NATS_SERVER
for bin in "$TENURE_BIN" "$NATS_SERVER"; do
  [ -x "$bin" ] || { echo "test.sh: $bin missing: run scripts/tools.sh and cargo build at the repo root" >&2; exit 1; }
done

cd "$here"
# Byte-compile the package first so a syntax error fails fast and clearly.
"$PY" -m compileall -q src/tenure_client >/dev/null
"$PY" -m pytest -p no:cacheprovider -ra "$@"
if [ $# -gt 0 ]; then exit 0; fi  # a chosen subset of tests: no install check

# Install checks, by the README's documented commands, from a scratch folder
# outside the repository: build the sdist and wheel, pip install from the
# path and from a git URL, none of which may write into the checkout; then
# two example workers against one server.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
before=$(git -C "$here" status --porcelain --ignored -- .)
cd "$scratch"
pipq() { "$scratch/venv/bin/python" -m pip --disable-pip-version-check --no-input -q "$@"; }
"${PYTHON:-python3}" -m venv "$scratch/venv"
pipq install build==1.2.2.post1
"$scratch/venv/bin/python" -m build --outdir "$scratch/dist" "$here" >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log" >&2; exit 1; }
ls "$scratch"/dist/tenure_client-*.tar.gz "$scratch"/dist/tenure_client-*-py3-none-any.whl >/dev/null
pipq install "$here"
if git -C "$root" rev-parse --verify -q HEAD >/dev/null; then
  # The git URL installs the committed tree (HEAD), as a user would get it,
  # into a venv of its own (the workers below run what is checked out).
  "${PYTHON:-python3}" -m venv "$scratch/gitvenv"
  "$scratch/gitvenv/bin/python" -m pip --disable-pip-version-check --no-input -q install --no-deps \
    "git+file://$root@$(git -C "$root" rev-parse HEAD)#subdirectory=clients/python"
  "$scratch/gitvenv/bin/python" -c "import importlib.util as u; print('git install:', u.find_spec('tenure_client').origin)"
fi
after=$(git -C "$here" status --porcelain --ignored -- .)
if [ "$before" != "$after" ]; then
  echo "test.sh: building or installing wrote into the checkout:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
cp "$here/examples/worker.py" "$scratch/worker.py"
"$here/../examples/two_workers.sh" "$scratch/run" "$scratch/venv/bin/python" "$scratch/worker.py"
