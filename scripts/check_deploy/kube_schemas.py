"""Kubernetes JSON schemas for kubeconform, from client-go (run by scripts/check-deploy).

    kube_schemas.py <client-go>/applyconfigurations/internal/internal.go OUT_DIR

Turns client-go's structured-merge-diff schema (a YAML string in internal.go)
into one standalone JSON schema per kind, named as kubeconform looks them up:
kind-group-version.json. Needs PyYAML.
"""
import json, os, re, sys
import yaml

source, out = sys.argv[1], sys.argv[2]
text = open(source, encoding="utf-8").read()
match = re.search(r"typed\.YAMLObject\(`(.*?)`\)", text, re.S)
if not match:
    sys.exit(f"no schema YAML in {source}")
types = {t["name"]: t for t in yaml.load(match.group(1), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["types"]}

SCALARS = {"string": ["string"], "numeric": ["number"], "boolean": ["boolean"],
           "untyped": ["string", "number", "boolean"]}

def atom(a, refs):
    """JSON schema of one SMD atom (scalar, list, map or a named type)."""
    if "namedType" in a:
        refs.add(a["namedType"])
        return {"$ref": "#/definitions/" + a["namedType"]}
    kinds = [k for k in ("scalar", "list", "map") if k in a]
    if len(kinds) != 1:
        return {}  # deduced or untyped: anything
    if "scalar" in a:
        return {"type": SCALARS[a["scalar"]] + ["null"]}
    if "list" in a:
        return {"type": ["array", "null"], "items": atom(a["list"]["elementType"], refs)}
    m = a["map"]
    schema = {"type": ["object", "null"]}
    if "fields" in m:
        schema["properties"] = {f["name"]: atom(f["type"], refs) for f in m["fields"]}
    # strict: a map with fields and no element type takes no other keys
    schema["additionalProperties"] = atom(m["elementType"], refs) if "elementType" in m else False
    return schema

definitions = {}
def define(name):
    pending = [name]
    while pending:
        n = pending.pop()
        if n in definitions:
            continue
        refs = set()
        definitions[n] = atom({k: v for k, v in types[n].items() if k != "name"}, refs)
        pending.extend(refs - definitions.keys())

os.makedirs(out, exist_ok=True)
written = 0
for name, t in sorted(types.items()):
    parts = name.split(".")
    if parts[:3] != ["io", "k8s", "api"] or len(parts) != 6:
        continue
    fields = {f["name"] for f in t.get("map", {}).get("fields", [])}
    if not {"apiVersion", "kind", "metadata"} <= fields:
        continue
    package, version, kind = parts[3:]
    # kubeconform's KindSuffix: -<first label of the API group>-<version>
    group = {"core": None, "apiserverinternal": "internal"}.get(package, package)
    suffix = (f"-{group}" if group else "") + f"-{version}"
    definitions = {}
    define(name)
    root = dict(definitions[name])
    root["type"] = "object"  # the document itself is never null
    root["definitions"] = definitions
    with open(os.path.join(out, f"{kind.lower()}{suffix}.json"), "w") as f:
        json.dump(root, f)
    written += 1
print(f"  {written} kinds", file=sys.stderr)
