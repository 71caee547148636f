#!/usr/bin/env bash
# Checks the container image end to end: builds it with scripts/image.sh
# (buildah, --isolation chroot), runs it with podman against a nats-server
# on this host, serves one Acquire from it to the host's `tenure`, runs its
# health check, stops it with SIGTERM, and prints what `podman inspect` and
# `buildah inspect` say of it (user, entrypoint, health check, size).
#
#   scripts/check-image.sh [--binary PATH]
#
# --binary: the tenure binary to put in the image and to call it with
# (default: target/release/tenure; CI passes the debug build). Installs
# buildah, podman and runc with apt-get when they are missing (as root).
# Everything lives in a temp folder, the image store included, and is
# removed afterwards; the nats-server is stopped by its PID.
#
# How podman runs here: with Debian's runc (`--runtime runc`; crun refuses
# on these machines), cgroup_manager "cgroupfs" and no default ulimits in a
# containers.conf named by CONTAINERS_CONF, the vfs store, and the host's
# network (`--network host`).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

binary=target/release/tenure
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    *) echo "usage: scripts/check-image.sh [--binary PATH]" >&2; exit 2 ;;
  esac
done

started=$SECONDS
say() { printf 'check-image: [%dm%02ds] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }
fail() { echo "check-image: $*" >&2; exit 1; }

missing=()
for tool in buildah podman runc; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || fail "${missing[*]} missing: apt-get install buildah podman runc (as root)"
  say "installing ${missing[*]} (apt-get; about a minute)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah podman runc >/dev/null
fi
scripts/tools.sh >/dev/null 2>&1 || scripts/tools.sh
nats_bin="$root/.tools/bin/nats-server"

if [ ! -x "$binary" ]; then
  say "building $binary"
  cargo build --release --locked -p tenure --bin tenure
fi
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")

tmp=$(mktemp -d)
name="tenure-check-$$"
tag="localhost/tenure:check-$$"
nats_pid=
cleanup() {
  set +e
  podman rm -f -t 0 "$name" >/dev/null 2>&1
  podman rmi -f "$tag" >/dev/null 2>&1
  buildah rm --all >/dev/null 2>&1
  [ -n "$nats_pid" ] && { kill -TERM "$nats_pid"; wait "$nats_pid"; } 2>/dev/null
  # The store is private to this run: nothing of it stays mounted.
  grep -o " $tmp/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# A private store and the settings podman needs on these machines.
mkdir -p "$tmp/storage" "$tmp/run"
cat >"$tmp/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$tmp/storage"
runroot = "$tmp/run"
EOF
cat >"$tmp/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
EOF
export CONTAINERS_STORAGE_CONF="$tmp/storage.conf"
export CONTAINERS_CONF="$tmp/containers.conf"

say "building the image from $binary"
scripts/image.sh --binary "$binary" --tag "$tag"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nport=$(free_port)
gport=$(free_port)
mport=$(free_port)

say "nats-server on the host, 127.0.0.1:$nport"
"$nats_bin" -js -a 127.0.0.1 -p "$nport" -sd "$tmp/nats" >"$tmp/nats.log" 2>&1 &
nats_pid=$!
for _ in $(seq 1 100); do
  python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2)' "$nport" 2>/dev/null && break
  kill -0 "$nats_pid" 2>/dev/null || { cat "$tmp/nats.log" >&2; fail "nats-server exited"; }
  sleep 0.1
done

say "podman run (runc, host network): tenure serve on 127.0.0.1:$gport"
# No systemd here to run the health check on a timer (podman says so in
# three error lines): `podman healthcheck run` below runs it once instead.
podman run -d --name "$name" --runtime runc --network host --health-interval disable \
  -e TENURE_NATS_URL="nats://127.0.0.1:$nport" \
  -e TENURE_LISTEN="127.0.0.1:$gport" \
  -e TENURE_SERVER="http://127.0.0.1:$gport" \
  -e TENURE_METRICS_LISTEN="127.0.0.1:$mport" \
  "$tag" >/dev/null

client() { "$binary" "$@" --server "http://127.0.0.1:$gport"; }
ready=false
for _ in $(seq 1 120); do
  if client health >/dev/null 2>&1; then ready=true; break; fi
  [ "$(podman inspect -f '{{.State.Running}}' "$name")" = true ] || break
  sleep 0.25
done
$ready || { podman logs "$name" >&2; fail "the container did not become healthy"; }
say "host's tenure health: $(client health)"

out=$(client acquire check-image --holder ci --ttl 10s --output json)
token=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["fencing_token"])' "$out") \
  || fail "Acquire returned: $out"
[ "$token" -ge 1 ] || fail "Acquire returned: $out"
say "Acquire served from the container: fencing token $token"

# The image's own HEALTHCHECK (`tenure health` inside the container).
podman healthcheck run "$name" >/dev/null || fail "the image's health check failed"
say "podman healthcheck run: healthy"
uid=$(podman top "$name" huser 2>/dev/null | sed -n 2p | tr -d ' ')
[ -z "$uid" ] || { [ "$uid" != 0 ] && [ "$uid" != root ]; } || fail "tenure runs as root in the container"
say "process user on the host: ${uid:-?}"

start_line=$(podman logs "$name" 2>&1 | grep -m1 "serving tenure.v1.LeaseService" || true)
grep -q '"commit"' <<<"$start_line" || { podman logs "$name" >&2; fail "no start line with the commit in the container's log"; }
say "start line: $start_line"

podman stop -t 20 "$name" >/dev/null
code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || { podman logs "$name" >&2; fail "tenure exited $code on SIGTERM"; }
say "stopped with SIGTERM: exit 0"

# What the image says of itself, from podman's and buildah's inspect.
podman image inspect "$tag" >"$tmp/podman-inspect.json"
buildah inspect --type image "$tag" >"$tmp/buildah-inspect.json"
python3 - "$tmp/podman-inspect.json" "$tmp/buildah-inspect.json" "$tag" <<'PY' || fail "the image is not what deploy/container/Containerfile says"
import json, sys
image = json.load(open(sys.argv[1]))[0]
built = json.load(open(sys.argv[2]))
config = image["Config"]
health = (built.get("Docker", {}).get("config") or {}).get("Healthcheck") or {}
user, entrypoint = config.get("User"), config.get("Entrypoint")
print(f"image:       {sys.argv[3]} ({image['Id'][:12]})")
print(f"user:        {user}")
print(f"entrypoint:  {json.dumps(entrypoint)}, cmd {json.dumps(config.get('Cmd'))}")
print(f"healthcheck: {json.dumps(health.get('Test'))}, every {health.get('Interval', 0) // 10**9}s")
print(f"size:        {image['Size']} bytes ({image['Size'] / 2**20:.1f} MiB), {len(image['RootFS']['Layers'])} layers")
assert user == "10001:10001", user
assert entrypoint == ["/usr/local/bin/tenure"], entrypoint
assert "health" in (health.get("Test") or []), health
PY
say "passed: the image built with buildah served an Acquire under podman, passed its health check and stopped cleanly"
