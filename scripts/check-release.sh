#!/usr/bin/env bash
# Checks the release archive the way a user gets it: builds it with
# scripts/release.sh (or takes an already built one), verifies SHA256SUMS,
# the SBOM, the man pages and the completions, unpacks it into an empty
# folder and runs the unpacked `tenure` from there, with nothing of this
# checkout around it: first without nats-server on the PATH (it must say
# what is missing, and no path of this machine's build), then with only
# nats-server on the PATH: `tenure serve` with a managed local NATS, its
# start line and build-info metric, `tenure health`, one Acquire, a clean
# stop on SIGTERM.
#
#   scripts/check-release.sh [--profile release|dev] [ARCHIVE.tar.gz]
#
# --profile dev (what CI runs) builds the archive from the debug binary;
# everything else is the same. With ARCHIVE, nothing is built: its
# SHA256SUMS and SBOM are looked for beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

profile=release
archive=
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=${2:?--profile needs release or dev}; shift 2 ;;
    --profile=*) profile=${1#--profile=}; shift ;;
    -*) echo "usage: scripts/check-release.sh [--profile release|dev] [ARCHIVE.tar.gz]" >&2; exit 2 ;;
    *) archive=$1; shift ;;
  esac
done

fail() { echo "check-release: $*" >&2; exit 1; }
say() { echo "check-release: $*" >&2; }

scripts/tools.sh >/dev/null 2>&1 || scripts/tools.sh
nats_bin="$root/.tools/bin/nats-server"
[ -x "$nats_bin" ] || fail "no nats-server in .tools/bin (scripts/tools.sh)"

if [ -z "$archive" ]; then
  scripts/release.sh --profile "$profile"
  archive=$(ls -t "$root"/dist/tenure-*.tar.gz | head -n 1)
fi
[ -f "$archive" ] || fail "no archive at $archive"
archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
dist=$(dirname "$archive")
name=$(basename "$archive" .tar.gz)
say "checking $archive ($(du -h "$archive" | cut -f1))"

tmp=$(mktemp -d)
serve_pid=
cleanup() {
  if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then kill -KILL "$serve_pid" 2>/dev/null || true; fi
  # The managed nats-server, should it have outlived tenure: the PIDs of
  # the processes whose command line names this run's temp folder.
  for p in $(pgrep -f -- "$tmp/data" || true); do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# 1. Checksums and SBOM, beside the archive.
(cd "$dist" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not match"
grep -q " $name.tar.gz\$" "$dist/SHA256SUMS" || fail "SHA256SUMS does not list $name.tar.gz"
python3 - "$dist/$name.cdx.json" <<'PY' || fail "the SBOM is not a CycloneDX document naming tenure and its crates"
import json, sys
bom = json.load(open(sys.argv[1]))
assert bom.get("bomFormat") == "CycloneDX", bom.get("bomFormat")
main = bom.get("metadata", {}).get("component", {})
assert main.get("name") == "tenure", main.get("name")
names = {c.get("name") for c in bom.get("components", [])}
for crate in ("tonic", "async-nats", "tokio", "prost"):
    assert crate in names, f"{crate} missing from the SBOM"
print(f"check-release: SBOM: CycloneDX {bom.get('specVersion')}, {len(names)} components", file=sys.stderr)
PY

# 2. Unpack into an empty folder; the expected files and nothing else.
mkdir "$tmp/unpacked"
tar -xzf "$archive" -C "$tmp/unpacked"
top="$tmp/unpacked/$name"
[ -d "$top" ] || fail "the archive has no top folder $name/"
expected="README.md bin/tenure completions/_tenure completions/tenure.bash completions/tenure.fish man/man1/tenure.1 man/man1/tenure-serve.1 man/man1/tenure-health.1 man/man1/tenure-lock.1 sbom/tenure.cdx.json"
[ -f "$root/LICENSE" ] && expected="$expected LICENSE"
for f in $expected; do
  [ -s "$top/$f" ] || fail "the archive lacks $name/$f (or it is empty)"
done
cmp -s "$top/sbom/tenure.cdx.json" "$dist/$name.cdx.json" || fail "the SBOM in the archive differs from the one beside it"
[ -x "$top/bin/tenure" ] || fail "bin/tenure is not executable"
say "files: $(cd "$top" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')"

# 3. Man pages render, completions parse.
for page in "$top"/man/man1/*.1; do
  head -n 5 "$page" | grep -q '^\.TH' || fail "$page is not a man page (no .TH)"
done
if command -v man >/dev/null && man -l "$top/man/man1/tenure.1" >/dev/null 2>&1; then
  text=$(MANWIDTH=80 man -l "$top/man/man1/tenure-health.1" 2>/dev/null | col -b 2>/dev/null || true)
  grep -q -- "--server" <<<"$text" || fail "tenure-health(1) does not render with --server in it"
  say "man pages render ($(ls "$top"/man/man1 | wc -l) pages)"
else
  say "man pages: roff with .TH checked ($(ls "$top"/man/man1 | wc -l) pages; no man here to render them)"
fi
bash -n "$top/completions/tenure.bash" || fail "the bash completion does not parse"
grep -q "health" "$top/completions/tenure.bash" || fail "the bash completion lacks tenure health"

# 4. Run the unpacked binary from an empty folder, with a PATH that holds
#    nothing of this checkout. First without nats-server.
run_dir="$tmp/run"
mkdir -p "$run_dir" "$tmp/path"
cd "$run_dir"
tenure="$top/bin/tenure"
base_path=/usr/bin:/bin
version_line=$(env -i PATH="$base_path" "$tenure" --version)
grep -Eq '^tenure [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{7,}(-dirty)?|unknown), built [0-9]{4}-[0-9]{2}-[0-9]{2}\)$' <<<"$version_line" \
  || fail "tenure --version printed: $version_line"
say "$version_line"

set +e
missing=$(env -i PATH="$base_path" HOME="$tmp" "$tenure" serve --listen 127.0.0.1:0 --data-dir "$tmp/none" 2>&1)
code=$?
set -e
[ "$code" != 0 ] || fail "tenure serve without nats-server did not fail"
grep -q "nats-server not found" <<<"$missing" || fail "without nats-server, tenure serve said: $missing"
if grep -q "$root" <<<"$missing"; then fail "the message names a path of the build checkout: $missing"; fi
say "without nats-server (exit $code): $(grep -m1 'nats-server not found' <<<"$missing")"

# Then with only nats-server on the PATH.
ln -s "$nats_bin" "$tmp/path/nats-server"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
mport=$(free_port)
env -i PATH="$tmp/path:$base_path" HOME="$tmp" RUST_LOG=info \
  "$tenure" serve --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" --data-dir "$tmp/data" \
  --log-format json \
  >"$tmp/serve.log" 2>&1 &
serve_pid=$!
client() { env -i PATH="$base_path" "$tenure" "$@" --server "http://127.0.0.1:$port"; }
ready=false
for _ in $(seq 1 120); do
  kill -0 "$serve_pid" 2>/dev/null || break
  if client health >/dev/null 2>&1; then ready=true; break; fi
  sleep 0.25
done
$ready || { cat "$tmp/serve.log" >&2; fail "the unpacked tenure serve did not become healthy"; }
say "tenure health: $(client health)"

out=$(client acquire check-release --holder ci --ttl 10s --output json)
python3 -c 'import json,sys; l=json.loads(sys.argv[1]); assert l["fencing_token"] >= 1, l' "$out" \
  || fail "Acquire returned: $out"
say "Acquire: fencing token $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fencing_token"])' "$out")"

# tenure VERSION (commit COMMIT, built DATE)
read -r _ ver _ commit _ built <<<"$(tr -d '(),' <<<"$version_line")"
start_line=$(grep -m1 "serving tenure.v1.LeaseService" "$tmp/serve.log" || true)
for want in "\"version\":\"$ver\"" "\"commit\":\"$commit\"" "\"built\":\"$built\""; do
  grep -qF "$want" <<<"$start_line" || { cat "$tmp/serve.log" >&2; fail "the start line lacks $want"; }
done
say "start line: $start_line"
metrics=$(python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$mport/metrics")
info=$(grep '^tenure_build_info{' <<<"$metrics" || true)
for want in "version=\"$ver\"" "commit=\"$commit\"" "build_date=\"$built\""; do
  grep -qF "$want" <<<"$info" || fail "tenure_build_info lacks $want: $info"
done
say "metric: $info"

kill -TERM "$serve_pid"
for _ in $(seq 1 40); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.5; done
kill -0 "$serve_pid" 2>/dev/null && fail "tenure did not stop within 20 s of SIGTERM"
wait "$serve_pid" || fail "tenure serve exited $? after SIGTERM"
serve_pid=
if pgrep -f "$tmp/data" >/dev/null; then fail "the managed nats-server outlived tenure"; fi
say "passed: $name unpacked into an empty folder served health and an Acquire with a managed nats-server found on the PATH, and stopped cleanly"
