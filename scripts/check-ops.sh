#!/usr/bin/env bash
# Checks the operations assets in ops/:
#  - ops/prometheus-rules.yml with `promtool check rules`, and its unit tests
#    (ops/prometheus-rules.test.yml) with `promtool test rules`;
#  - ops/grafana-dashboard.json: valid JSON, every panel has a query, every
#    query is valid PromQL (checked by promtool once Grafana's $variables are
#    filled in) and names only metrics the server registers;
#  - the same metric-name check for the alert expressions.
#
# promtool comes from Debian's `prometheus` package. Installing that package
# would pull in a web UI's JavaScript and start a Prometheus service, so the
# script only downloads the .deb and extracts /usr/bin/promtool into
# .tools/bin (skipped when a promtool is already there or on the PATH).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin="$root/.tools/bin"
mkdir -p "$bin"
export PATH="$bin:$PATH"

if ! command -v promtool >/dev/null 2>&1; then
  echo "check-ops: extracting promtool from Debian's prometheus package" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && { apt-get download prometheus >/dev/null 2>&1 \
      || { apt-get update -qq && apt-get download prometheus; }; })
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
  install -m 0755 "$tmp/x/usr/bin/promtool" "$bin/promtool"
fi
promtool --version 2>&1 | head -n 1 >&2

promtool check rules ops/prometheus-rules.yml
(cd ops && promtool test rules prometheus-rules.test.yml)

# The metric names the server registers, wherever its source keeps them.
metrics=$(grep -rhoE '"tenure_[a-z_]+_(total|seconds|active|connected|bytes)"' src | tr -d '"' | sort -u)
[ -n "$metrics" ] || { echo "check-ops: found no metric names in src/" >&2; exit 1; }

exprs=$(mktemp)
python3 - "$exprs" $metrics <<'PY'
import json, re, sys

out, known = sys.argv[1], set(sys.argv[2:])
errors = []

def names(expr):
    found = set()
    for m in re.findall(r"\btenure_[a-z_]+", expr):
        for suffix in ("_bucket", "_sum", "_count"):
            if m.endswith(suffix) and m[: -len(suffix)] in known:
                m = m[: -len(suffix)]
        found.add(m)
    return found

dash = json.load(open("ops/grafana-dashboard.json"))
queries = []
for p in dash["panels"]:
    if p.get("type") == "row":
        continue
    targets = p.get("targets") or []
    if not targets:
        errors.append(f"panel {p.get('title')!r} has no query")
    for t in targets:
        expr = t.get("expr", "")
        used = names(expr)
        if not used:
            errors.append(f"panel {p['title']!r}: query names no tenure metric: {expr}")
        for n in used - known:
            errors.append(f"panel {p['title']!r}: unknown metric {n}")
        # Fill in Grafana's variables so promtool can parse the query.
        queries.append((p["title"], expr.replace("$__rate_interval", "5m")
                        .replace("$__range", "1h").replace("$job", ".*")))

rules = open("ops/prometheus-rules.yml").read()
for expr in re.findall(r"expr: (.+(?:\n {10,}.+)*)", rules):
    for n in names(expr) - known:
        errors.append(f"alert rule: unknown metric {n}")

# Each dashboard query as a recording rule: `promtool check rules` parses it.
with open(out, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, (title, q) in enumerate(queries):
        f.write(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(q)}\n")

for e in errors:
    print("check-ops:", e, file=sys.stderr)
print(f"check-ops: {len(queries)} dashboard queries, {len(known)} known metrics", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
promtool check rules "$exprs" >/dev/null || { promtool check rules "$exprs"; exit 1; }
rm -f "$exprs"
echo "check-ops: ok" >&2
