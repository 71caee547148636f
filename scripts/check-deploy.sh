#!/usr/bin/env bash
# Checks the deploy manifests, offline:
#  - ops/systemd/tenure.service: `systemd-analyze verify` (any message
#    fails: systemd only warns about a misspelt or unparsable directive) on
#    a copy whose ExecStart names the built binary, and
#    `systemd-analyze security --offline` (exposure at most 2.0); its stop
#    timeout must exceed Tenure's default --shutdown-grace;
#  - deploy/helm/tenure: `helm lint` with the default values and each
#    ci/*-values.yaml, `helm template` of each, the NOTES rendered
#    (`helm install --dry-run=client`), and `kubeconform -strict` of the
#    output against the schemas vendored in deploy/schemas (no network:
#    helm and kubeconform run in an empty network namespace where
#    `unshare -n` works, and with a dead proxy otherwise);
#  - the chart's copy of the alert rules is ops/prometheus-rules.yml; the
#    args each rendering gives the container parse (`tenure serve ARGS
#    --help`), and the tenure.toml it renders passes `tenure check-config`;
#  - negative controls: a unit with a misspelt directive, a unit without
#    its hardening, manifests with an unknown field, a wrong type and a
#    misspelt CRD field, a bad flag value and a config with an unknown key
#    must each be rejected, so that a check which passes everything fails.
#
# helm and kubeconform come from `scripts/tools.sh --deploy` (go install into
# .tools/bin); building helm the first time takes about 6 minutes on a
# 2-core machine. With the tools installed the check takes seconds.
# The tenure binary: $TENURE_BIN, else target/debug/tenure or
# target/release/tenure, else `cargo build --bin tenure`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$SECONDS
say() { echo "check-deploy: $*" >&2; }
die() { say "FAIL: $*"; exit 1; }

if ! [ -x .tools/bin/helm ] || ! [ -x .tools/bin/kubeconform ]; then
  say "helm/kubeconform missing: installing them with scripts/tools.sh --deploy (go install; about 6 minutes the first time)"
fi
scripts/tools.sh --deploy || die "scripts/tools.sh --deploy failed"
bin="$root/.tools/bin"
helm="$bin/helm"
kubeconform="$bin/kubeconform"
[ -x "$helm" ] && [ -x "$kubeconform" ] || die "scripts/tools.sh --deploy did not install helm and kubeconform"

tenure=${TENURE_BIN:-}
if [ -z "$tenure" ]; then
  for b in target/debug/tenure target/release/tenure; do
    [ -x "$b" ] && { tenure="$root/$b"; break; }
  done
fi
if [ -z "$tenure" ]; then
  say "no tenure binary: cargo build --bin tenure"
  cargo build --quiet --bin tenure
  tenure="$root/target/debug/tenure"
fi
[ -x "$tenure" ] || die "tenure binary $tenure is not executable"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Offline: an empty network namespace when we may make one; a proxy on a
# closed port catches any HTTP client either way.
offline=(env HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
  HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data")
if unshare -n true 2>/dev/null; then
  offline=(unshare -n "${offline[@]}")
  say "offline: helm and kubeconform run in an empty network namespace (unshare -n)"
elif unshare -rn true 2>/dev/null; then
  offline=(unshare -rn "${offline[@]}")
  say "offline: helm and kubeconform run in an empty network namespace (unshare -rn)"
else
  say "offline: no network namespace here; HTTP(S)_PROXY points at a closed port"
fi

# ---------------------------------------------------------------- systemd
unit=ops/systemd/tenure.service
say "systemd-analyze verify $unit (ExecStart -> $tenure)"
mkdir -p "$tmp/unit"
sed "s#^ExecStart=/usr/local/bin/tenure #ExecStart=$tenure #" "$unit" > "$tmp/unit/tenure.service"
[ "$(grep -c "^ExecStart=$tenure serve " "$tmp/unit/tenure.service")" = 1 ] \
  || die "$unit: expected one ExecStart=/usr/local/bin/tenure serve ... line"

# verify exits 0 after merely warning about an unknown or unparsable
# directive ("..., ignoring."), so any output is a failure.
verify() {
  local out
  out=$(cd "$tmp/unit" && systemd-analyze verify "$1" 2>&1) && [ -z "$out" ] && return 0
  printf '%s\n' "$out" >&2
  return 1
}
verify tenure.service || die "systemd-analyze verify $unit"
security=$(cd "$tmp/unit" && systemd-analyze security --offline=true --threshold=20 --no-pager tenure.service 2>&1) \
  || { printf '%s\n' "$security" | grep '✗' >&2; die "$unit: exposure above 2.0 (systemd-analyze security)"; }
say "  verify: no messages; $(printf '%s\n' "$security" | grep 'Overall exposure level' | sed 's/^→ //')"

# The stop timeout must leave Tenure its whole shutdown grace.
grace=$("$tenure" serve --help | sed -n '/--shutdown-grace/,/default:/p' | sed -n 's/.*\[default: \([0-9]*\)s\].*/\1/p')
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s\{0,1\}$/\1/p' "$unit")
[ -n "$grace" ] && [ -n "$stop" ] && [ "$stop" -gt "$grace" ] \
  || die "$unit: TimeoutStopSec=${stop:-?}s must exceed the default --shutdown-grace (${grace:-?}s)"
say "  TimeoutStopSec=${stop}s > --shutdown-grace default ${grace}s"

say "negative: a misspelt directive and a unit without hardening must fail"
sed 's/^ProtectSystem=strict/ProtectSytem=strict/' "$tmp/unit/tenure.service" > "$tmp/unit/typo.service"
if verify typo.service 2>"$tmp/typo.err"; then die "a unit with ProtectSytem= passed systemd-analyze verify"; fi
say "  rejected: $(head -n 1 "$tmp/typo.err")"
sed '/^CapabilityBoundingSet=/,/^UMask=/d' "$tmp/unit/tenure.service" > "$tmp/unit/soft.service"
if (cd "$tmp/unit" && systemd-analyze security --offline=true --threshold=20 --no-pager soft.service >/dev/null 2>&1); then
  die "a unit without its hardening passed the exposure threshold"
fi
say "  rejected: $(cd "$tmp/unit" && systemd-analyze security --offline=true --no-pager soft.service 2>&1 | grep 'Overall exposure level' | sed 's/^→ //')"

# ------------------------------------------------------------------- helm
chart=deploy/helm/tenure
cmp -s ops/prometheus-rules.yml "$chart/files/prometheus-rules.yml" \
  || die "$chart/files/prometheus-rules.yml differs from ops/prometheus-rules.yml: cp ops/prometheus-rules.yml $chart/files/"

# name -> values file: the chart's defaults, then each ci/NAME-values.yaml
variants=(default "")
for f in "$chart"/ci/*-values.yaml; do
  n=$(basename "$f" -values.yaml)
  variants+=("$n" "$f")
done
[ ${#variants[@]} -ge 4 ] || die "no $chart/ci/*-values.yaml"
[ -f "$chart/ci/tls-auth-values.yaml" ] || die "$chart/ci/tls-auth-values.yaml is missing (TLS + auth rendering)"
for ((i = 0; i < ${#variants[@]}; i += 2)); do
  name=${variants[i]} values=${variants[i + 1]}
  args=()
  [ -n "$values" ] && args=(-f "$values")
  say "helm lint $chart${args[*]:+ ${args[*]}}"
  "${offline[@]}" "$helm" lint --strict "$chart" "${args[@]}" > "$tmp/lint.out" 2>&1 \
    || { cat "$tmp/lint.out" >&2; die "helm lint ($name)"; }
  sed 's/^/  /' "$tmp/lint.out" | grep -v '^  *$' >&2
  say "helm template tenure $chart${args[*]:+ ${args[*]}} > $name.yaml"
  "${offline[@]}" "$helm" template tenure "$chart" "${args[@]}" > "$tmp/$name.yaml" \
    || die "helm template ($name)"
  "${offline[@]}" "$helm" install tenure "$chart" "${args[@]}" --dry-run=client > "$tmp/$name.install" 2>&1 \
    || { cat "$tmp/$name.install" >&2; die "helm install --dry-run=client ($name)"; }
  grep -q '^NOTES:' "$tmp/$name.install" || die "no NOTES rendered ($name)"
done

kubeconform() {
  "${offline[@]}" "$kubeconform" -strict -summary -kubernetes-version 1.37.0 \
    -schema-location 'deploy/schemas/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json' \
    -schema-location 'deploy/schemas/crds/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json' \
    "$@"
}
for ((i = 0; i < ${#variants[@]}; i += 2)); do
  name=${variants[i]}
  say "kubeconform -strict (offline, Kubernetes 1.37.0 schemas) $name.yaml"
  kubeconform "$tmp/$name.yaml" > "$tmp/kc.out" 2>&1 || { cat "$tmp/kc.out" >&2; die "kubeconform rejected the $name rendering"; }
  sed "s#$tmp/##; s/^/  /" "$tmp/kc.out" >&2
done
kinds=$(cat "$tmp"/*.yaml | sed -n 's/^kind: //p' | sort -u | tr '\n' ' ')
say "  kinds validated: $kinds"
for kind in Deployment Service PodDisruptionBudget ConfigMap Secret ServiceAccount ServiceMonitor PrometheusRule; do
  case " $kinds " in *" $kind "*) ;; *) die "no $kind in any rendering: the check would not validate it" ;; esac
done

say "negative: broken manifests must be rejected by kubeconform"
broken() { # name, sed expression, source rendering
  sed "$2" "$tmp/$3.yaml" > "$tmp/broken-$1.yaml"
  cmp -s "$tmp/$3.yaml" "$tmp/broken-$1.yaml" && die "negative control $1 changed nothing"
  if kubeconform "$tmp/broken-$1.yaml" > "$tmp/kc.out" 2>&1; then
    cat "$tmp/kc.out" >&2
    die "kubeconform accepted a broken manifest ($1)"
  fi
  say "  rejected ($1): $(grep -m 1 -E 'is invalid|failed validation' "$tmp/kc.out" | sed "s#$tmp/##; s/problem validating schema. Check JSON formatting: //")"
}
broken unknown-field 's/readOnlyRootFilesystem: true/readOnlyRootFileSystem: true/' default
broken wrong-type 's/^  replicas: 3$/  replicas: three/' default
broken crd-field 's/^      scrapeTimeout:/      scrapeTimeOut:/' tls-auth

# ------------------------------------------- the rendered command and config
# The container's args of a rendering, one per line.
args_of() {
  python3 - "$1" <<'PY'
import json, sys
out, inside = [], False
for line in open(sys.argv[1]).read().splitlines():
    if line == "          args:":
        inside = True
    elif inside and line.startswith("            - "):
        value = line[len("            - "):]
        out.append(json.loads(value) if value.startswith('"') else value)
    elif inside:
        break
print("\n".join(out))
PY
}
# clap parses every flag and value (names, durations, addresses, enums)
# before it acts on --help, so `serve ARGS --help` exits 2 on any bad one.
parses() {
  local args
  mapfile -t args < <(args_of "$1")
  [ "${args[0]:-}" = serve ] || die "no 'serve' args in $1"
  "$tenure" "${args[@]}" --help > /dev/null 2> "$tmp/parse.err"
}
say "tenure serve parses the command line each rendering gives the container"
for ((i = 0; i < ${#variants[@]}; i += 2)); do
  name=${variants[i]}
  parses "$tmp/$name.yaml" || { cat "$tmp/parse.err" >&2; die "tenure serve refused the args of the $name rendering"; }
  say "  $name: $(args_of "$tmp/$name.yaml" | wc -l) args accepted"
done
"${offline[@]}" "$helm" template tenure "$chart" --set 'extraArgs[0]=--max-ttl=10x' > "$tmp/badarg.yaml"
if parses "$tmp/badarg.yaml"; then die "tenure serve accepted --max-ttl=10x"; fi
say "  rejected (bad value): $(grep -m 1 -i error "$tmp/parse.err")"

say "tenure check-config on the tenure.toml the chart renders (tls-auth values)"
toml() { # the tenure.toml of a rendering
  "${offline[@]}" "$helm" template tenure "$chart" "$@" --show-only templates/configmap.yaml \
    | sed -n '/^  tenure.toml: |$/,$p' | tail -n +2 | sed 's/^    //'
}
toml -f "$chart/ci/tls-auth-values.yaml" > "$tmp/tenure.toml"
"$tenure" check-config "$tmp/tenure.toml" > "$tmp/check-config.out" 2>&1 \
  || { cat "$tmp/check-config.out" >&2; die "tenure check-config rejected the rendered tenure.toml"; }
say "  $(grep -c '^grant ' "$tmp/check-config.out") grants, $(grep -c '# file$' "$tmp/check-config.out") settings from the file: ok"
toml -f "$chart/ci/tls-auth-values.yaml" --set config.max_tll=1m > "$tmp/typo.toml"
if "$tenure" check-config "$tmp/typo.toml" > "$tmp/check-config.out" 2>&1; then
  die "tenure check-config accepted a config with the unknown key max_tll"
fi
say "  rejected (unknown key): $(tail -n 1 "$tmp/check-config.out")"

say "ok ($((SECONDS - start)) s)"
