# Sourced by gen.sh and test.sh: makes sure .venv (git-ignored, next to this
# folder) holds exactly the pins in requirements.txt, then sets $PY to its
# interpreter. Fast when nothing changed: a stamp file records the hash of
# requirements.txt that was last installed.
set -euo pipefail
_client_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_venv="$_client_dir/.venv"
_stamp="$_venv/.requirements.sha256"
_want=$(sha256sum "$_client_dir/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$_venv/bin/python" ] || [ "$(cat "$_stamp" 2>/dev/null)" != "$_want" ]; then
  echo "python client: installing pinned packages into $_venv" >&2
  "${PYTHON:-python3}" -m venv "$_venv"
  "$_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --no-input -r "$_client_dir/requirements.txt"
  echo "$_want" > "$_stamp"
fi
PY="$_venv/bin/python"
