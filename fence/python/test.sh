#!/usr/bin/env bash
# Tests tenure-fence (Python): makes .venv (git-ignored) with the package
# installed from this folder with its test extras, every dependency from
# PyPI at the versions of constraints.txt, then runs pytest: the shared
# vectors (../vectors/v1.json), the verifier's strictness, and the ASGI
# middleware served by a real uvicorn on 127.0.0.1. Extra arguments go to
# pytest.
#
# The venv is made once (again when constraints.txt or pyproject.toml
# change); every run reinstalls the package itself, without build isolation
# (hatchling is in the venv), so the tests import the package as installed
# and a warm run needs no network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
venv="$here/.venv"
stamp="$venv/.installed.sha256"
want=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
pip() { "$venv/bin/python" -m pip --disable-pip-version-check --no-input -q "$@"; }

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  py=${PYTHON:-python3}
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    { echo "test.sh: $py is older than Python 3.11 (set PYTHON)" >&2; exit 1; }
  echo "tenure-fence: installing into $venv" >&2
  rm -rf "$venv"
  "$py" -m venv "$venv"
  pip install -c constraints.txt hatchling
  pip install --no-build-isolation -c constraints.txt ".[test]"
  echo "$want" > "$stamp"
else
  pip install --no-build-isolation --no-deps --force-reinstall .
fi

"$venv/bin/python" -m pytest -p no:cacheprovider -ra "$@"
