#!/usr/bin/env bash
# Builds the Tenure container image with buildah, from
# deploy/container/Containerfile (FROM scratch: no base image to pull).
#
#   scripts/image.sh [--binary PATH] [--tag NAME] [--context-only DIR]
#
# It lays out the build context first: rootfs/ with the `tenure` binary
# (default: target/release/tenure, built when missing), exactly the shared
# libraries `ldd` lists for it and the dynamic loader, at the paths ldd
# names; /etc/passwd and /etc/group with the non-root user tenure (10001);
# /etc/nsswitch.conf; and data/, the user's empty home. Then
# `buildah build --isolation chroot --format docker` (the docker format keeps
# the HEALTHCHECK, `tenure health`; the OCI format has none), dated with
# SOURCE_DATE_EPOCH when it is set.
#
# --context-only DIR only writes the context into DIR, for `podman build` or
# `docker build -f deploy/container/Containerfile DIR` where a registry is
# at hand (docs/install.md). Needs buildah (Debian package; installed with
# apt-get when missing and run as root). scripts/check-image.sh runs the
# image with podman.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

binary=
tag=
context_only=
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    --context-only) context_only=${2:?--context-only needs a folder}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/image.sh [--binary PATH] [--tag NAME] [--context-only DIR]" >&2; exit 2 ;;
  esac
done

say() { echo "image: $*" >&2; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
tag=${tag:-localhost/tenure:$version}

if [ -z "$binary" ]; then
  binary=target/release/tenure
  if [ ! -x "$binary" ]; then
    say "building the release binary (a cold build takes several minutes)"
    cargo build --release --locked -p tenure --bin tenure
  fi
fi
[ -x "$binary" ] || { say "no executable at $binary"; exit 1; }
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")

if [ -n "$context_only" ]; then
  ctx=$context_only
  rm -rf "$ctx"
  mkdir -p "$ctx"
else
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
fi
rootfs="$ctx/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc" "$ctx/data"
install -m 0755 "$binary" "$rootfs/usr/local/bin/tenure"

# Exactly what ldd lists: `name => /path (addr)` and the loader
# `/lib64/ld-linux-x86-64.so.2 (addr)`; the vDSO has no file.
libs=$(ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
[ -n "$libs" ] || { say "ldd lists no libraries for $binary (a static binary needs none: fine)"; }
if ldd "$binary" | grep -q "not found"; then
  say "ldd cannot resolve every library of $binary:"; ldd "$binary" >&2; exit 1
fi
for lib in $libs; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
tenure:x:10001:10001:Tenure:/data:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
tenure:x:10001:
EOF
# Name lookups (NATS hosts) from /etc/hosts, then DNS; glibc 2.34+ has both
# built in, so no NSS library is needed.
echo "hosts: files dns" >"$rootfs/etc/nsswitch.conf"
cp deploy/container/Containerfile "$ctx/Containerfile"
say "context: $(cd "$rootfs" && find . -type f | sed 's|^\./|/|' | sort | tr '\n' ' ')"

if [ -n "$context_only" ]; then
  say "context written to $ctx; build it with: podman build -t $tag -f deploy/container/Containerfile --format docker $ctx"
  exit 0
fi

if ! command -v buildah >/dev/null; then
  [ "$(id -u)" = 0 ] || { say "buildah is missing: apt-get install buildah (as root)"; exit 1; }
  say "installing buildah (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null
fi

stamp=()
[ -z "${SOURCE_DATE_EPOCH:-}" ] || stamp=(--timestamp "$SOURCE_DATE_EPOCH")
say "buildah build --isolation chroot -t $tag"
buildah build --isolation chroot --format docker "${stamp[@]}" \
  -f "$ctx/Containerfile" -t "$tag" "$ctx" >&2
say "built $tag"
