#!/usr/bin/env bash
# Builds the release archive of Tenure for this machine's target (linux
# x86_64: x86_64-unknown-linux-gnu) into dist/ (git-ignored):
#
#   dist/tenure-VERSION-TARGET.tar.gz   the archive: one folder holding
#       bin/tenure, completions/ (bash, zsh, fish), man/man1/ (tenure.1 and
#       one page per subcommand, from the clap definitions), README.md,
#       LICENSE, and sbom/tenure.cdx.json
#   dist/tenure-VERSION-TARGET.cdx.json the SBOM (CycloneDX 1.5 JSON, from
#       cargo-cyclonedx: the crates the binary is built from; build-time
#       ones have scope "excluded")
#   dist/SHA256SUMS                     the archive's and the SBOM's SHA-256
#                                       (`cd dist && sha256sum -c SHA256SUMS`)
#
# From a clean checkout: it installs its SBOM tool (pinned, into .tools/)
# and builds with `cargo build --release --locked`. For an archive whose
# dates are the commit's (the binary's build date, the man pages, the
# files in the archive), give SOURCE_DATE_EPOCH:
#
#   SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) scripts/release.sh
#
# (not set by default: ring's build script watches it, so setting it
# rebuilds ring and the crates above it in this checkout's target folder.)
#
# --profile dev builds the debug binary instead (CI checks the archive this
# way without a second, release build); every other step is the same.
# scripts/check-release.sh checks an archive: unpacked into an empty
# folder, its binary serves an Acquire.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=${2:?--profile needs release or dev}; shift 2 ;;
    --profile=*) profile=${1#--profile=}; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/release.sh [--profile release|dev]" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release) target_dir=release ;;
  dev) target_dir=debug ;;
  *) echo "release: --profile must be release or dev" >&2; exit 2 ;;
esac

started=$SECONDS
say() { printf 'release: [%dm%02ds] %s\n' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)) "$*" >&2; }

say "building the $profile archive: a cold release build takes 7 to 12 minutes on a 2-core machine, and installing the SBOM tool the first time about 3 more"

# --no-optional-locks: a status that rewrote the git index would be a
# change under the build for no reason.
if [ -n "$(git --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  say "warning: tracked files differ from the commit; the binary will say commit ...-dirty"
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "release: no version in Cargo.toml" >&2; exit 1; }
host=$(rustc -vV | sed -n 's/^host: //p')
[ "$host" = x86_64-unknown-linux-gnu ] \
  || say "warning: this machine builds for $host, not x86_64-unknown-linux-gnu; the archive is named for $host"
name="tenure-$version-$host"

say "cargo build --profile $profile --locked (tenure $version for $host)"
cargo build --profile "$profile" --locked -p tenure --bin tenure
bin="${CARGO_TARGET_DIR:-$root/target}/$target_dir/tenure"
"$bin" --version >&2

# The SBOM tool (cargo-cyclonedx, the CycloneDX project's own), pinned in
# scripts/tools.sh and installed into .tools/ like the other tools.
tools="$root/.tools"
scripts/tools.sh --release

dist="$root/dist"
stage="$dist/$name"
rm -rf "$stage" "$dist/$name.tar.gz" "$dist/$name.cdx.json" "$dist/SHA256SUMS"
mkdir -p "$stage/bin" "$stage/completions" "$stage/man/man1" "$stage/sbom"

say "assembling dist/$name/"
install -m 0755 "$bin" "$stage/bin/tenure"
"$bin" completions bash >"$stage/completions/tenure.bash"
"$bin" completions zsh >"$stage/completions/_tenure"
"$bin" completions fish >"$stage/completions/tenure.fish"
"$bin" man --dir "$stage/man/man1" >/dev/null
install -m 0644 README.md "$stage/README.md"
if [ -f LICENSE ]; then
  install -m 0644 LICENSE "$stage/LICENSE"
else
  say "warning: there is no LICENSE file (Cargo.toml says $(sed -n 's/^license = "\(.*\)"$/\1/p' Cargo.toml)); the archive has none"
fi

say "SBOM (cargo-cyclonedx: the crates tenure is built from, for $host)"
# cargo-cyclonedx writes a file next to every workspace member's
# Cargo.toml: run it on a copy of the manifests and Rust sources (all that
# `cargo metadata` reads), so the checkout is left untouched.
sbom_dir=$(mktemp -d)
trap 'rm -rf "$sbom_dir"' EXIT
(find . \( -name target -o -name .tools -o -name dist -o -name node_modules -o -name .git \) -prune \
   -o \( -name Cargo.toml -o -name Cargo.lock -o -name '*.rs' -o -path ./.cargo/config.toml \) -print0 \
   | tar --null -T - -cf -) | tar -xf - -C "$sbom_dir"
(cd "$sbom_dir" && "$tools/bin/cargo-cyclonedx" cyclonedx --format json --spec-version 1.5 \
  --target "$host" --override-filename tenure.cdx --quiet)
# The document names its source folder; make it this checkout's name.
sed "s|file://$sbom_dir|file://$root|g" "$sbom_dir/tenure.cdx.json" >"$stage/sbom/tenure.cdx.json"
cp "$stage/sbom/tenure.cdx.json" "$dist/$name.cdx.json"

mtime=${SOURCE_DATE_EPOCH:-$(date +%s)}
say "archive (files dated $(date -u -d "@$mtime" +%F), owned by 0:0)"
tar --sort=name --mtime="@$mtime" --owner=0 --group=0 --numeric-owner \
  -C "$dist" -cf - "$name" | gzip -n -9 >"$dist/$name.tar.gz"
(cd "$dist" && sha256sum "$name.tar.gz" "$name.cdx.json" >SHA256SUMS)

say "done: dist/$name.tar.gz ($(du -h "$dist/$name.tar.gz" | cut -f1)), dist/$name.cdx.json, dist/SHA256SUMS"
(cd "$dist" && tar -tzvf "$name.tar.gz") >&2
