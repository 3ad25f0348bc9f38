"""What kubeconform cannot see in the rendered chart (run by scripts/check-deploy).

    chart_semantics.py docs/operations.md RENDERED.yaml...

The CRDs' structure (ServiceMonitor, PrometheusRule), the drain/grace
relation, every KRABKA_* variable of the Configuration table (in
docs/operations.md) set.
Prints one summary line per file and each error; exits 1 on any error.
Needs PyYAML.
"""
import re, sys
import yaml

readme, files = sys.argv[1], sys.argv[2:]
errors = []
def err(where, msg): errors.append(f"{where}: {msg}")

DUR = re.compile(r"^([0-9]+(ns|us|µs|ms|s|m|h))+$")
UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
def seconds(text):
    return sum(int(n) * UNIT[u] for n, u in re.findall(r"([0-9]+)(ns|us|µs|ms|s|m|h)", text))

# The memory budget of a pod (docs/operations.md, Memory): the process
# itself (about 20 MiB measured, counted generously) and requests in flight.
BASE_MIB, IN_FLIGHT_MIB = 64, 64
QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "": 1}
def mebibytes(quantity):
    """A Kubernetes memory quantity in MiB (None when unset)."""
    if quantity is None:
        return None
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T|)", str(quantity))
    if not m:
        err("resources", f"cannot read the memory quantity {quantity!r}")
        return None
    return float(m.group(1)) * QUANTITY[m.group(2)] / 2**20

# The Configuration section's table; the Security section's variables
# depend on Secrets and are checked in the all-on render only.
text = open(readme).read()
configuration = text.split("\n## Configuration", 1)[-1].split("\n## ", 1)[0]
env_documented = set(re.findall(r"^\|[^|]*\|\s*`(KRABKA_[A-Z_]+)`", configuration, re.M))
SECURITY_ENV = {"KRABKA_KAFKA_SECURITY_PROTOCOL", "KRABKA_KAFKA_TLS_CA_FILE", "KRABKA_KAFKA_TLS_CERT_FILE",
                "KRABKA_KAFKA_TLS_KEY_FILE", "KRABKA_KAFKA_TLS_VERIFY_HOSTNAME", "KRABKA_KAFKA_SASL_MECHANISM",
                "KRABKA_KAFKA_SASL_USERNAME", "KRABKA_KAFKA_SASL_PASSWORD_FILE", "KRABKA_API_TOKENS_FILE",
                "KRABKA_PUBLIC_METRICS"}
if len(env_documented) < 10:
    err(readme, "cannot find the Configuration table's KRABKA_* variables")

for path in files:
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    if not docs:
        err(path, "nothing to check: its helm template failed")
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    services = by_kind.get("Service", [])

    for dep in by_kind.get("Deployment", []):
        pod = dep["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        wanted = env_documented | (SECURITY_ENV if path.endswith("all-on.yaml") else set())
        missing = sorted(wanted - env.keys())
        if "KRABKA_KAFKA_SASL_PASSWORD" in env:
            err(path, "the SASL password is in an environment variable; the chart mounts it as a file")
        mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
        for name, value in env.items():
            if name.endswith(("_FILE",)) and value and not any(value.startswith(m + "/") for m in mounts):
                err(path, f"{name}={value} is not under a mounted volume")
        if missing:
            err(path, f"Deployment sets no {', '.join(missing)}")
        if "RUST_LOG" not in env:
            err(path, "Deployment sets no RUST_LOG")
        drain = env.get("KRABKA_DRAIN_TIMEOUT", "")
        delay = env.get("KRABKA_SHUTDOWN_DELAY", "0s")
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if not DUR.match(drain) or not DUR.match(delay) or grace <= seconds(drain) + seconds(delay):
            err(path, f"terminationGracePeriodSeconds {grace} is not above the shutdown delay {delay!r} plus the drain timeout {drain!r}")
        # Memory: the limit holds the process, every cache bound (a flood of
        # distinct role names fills them all) and requests in flight
        # (docs/operations.md, Memory).
        limit = mebibytes(container.get("resources", {}).get("limits", {}).get("memory"))
        caches = sum(int(env.get(k) or 0) for k in (
            "KRABKA_SUPERSEDED_CACHE_BYTES", "KRABKA_HIGH_WATER_BYTES", "KRABKA_COORDINATOR_CACHE_BYTES")) / 2**20
        if limit is not None and limit < BASE_MIB + caches + IN_FLIGHT_MIB:
            err(path, f"memory limit {limit:.0f} MiB is under the process ({BASE_MIB} MiB) + the cache bounds "
                      f"({caches:.0f} MiB) + requests in flight ({IN_FLIGHT_MIB} MiB)")
        for probe, want in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            if container.get(probe, {}).get("httpGet", {}).get("path") != want:
                err(path, f"{probe} is not GET {want}")

    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"].get("matchLabels", {})
        targets = [s for s in services
                   if sel and all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
        if not targets:
            err(path, "the ServiceMonitor selects no Service of the chart")
        for ep in sm["spec"]["endpoints"]:
            if not any(ep.get("port") == p.get("name") for s in targets for p in s["spec"]["ports"]):
                err(path, f"ServiceMonitor endpoint port {ep.get('port')!r} is no port of the Service")
            for key in ("interval", "scrapeTimeout"):
                if key in ep and not DUR.match(str(ep[key])):
                    err(path, f"ServiceMonitor {key} {ep[key]!r} is not a duration")

    RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
    for pr in by_kind.get("PrometheusRule", []):
        groups = pr.get("spec", {}).get("groups")
        if not isinstance(groups, list) or not groups:
            err(path, "PrometheusRule has no spec.groups")
            continue
        names = [g.get("name") for g in groups]
        if len(set(names)) != len(names):
            err(path, "PrometheusRule group names repeat")
        for g in groups:
            where = f"PrometheusRule group {g.get('name')!r}"
            if not isinstance(g.get("name"), str) or not g["name"]:
                err(path, "a PrometheusRule group has no name")
            unknown = set(g) - {"name", "interval", "rules", "limit", "partial_response_strategy", "query_offset", "labels"}
            if unknown:
                err(path, f"{where}: unknown keys {sorted(unknown)}")
            rules = g.get("rules")
            if not isinstance(rules, list) or not rules:
                err(path, f"{where} has no rules")
                continue
            for r in rules:
                name = r.get("alert", r.get("record"))
                if ("alert" in r) == ("record" in r):
                    err(path, f"{where}: a rule needs exactly one of alert and record (keys: {sorted(r)})")
                if not isinstance(r.get("expr"), (str, int, float)) or str(r.get("expr")).strip() == "":
                    err(path, f"{where}: rule {name!r} has no expr")
                if set(r) - RULE_KEYS:
                    err(path, f"{where}: rule {name!r} has unknown keys {sorted(set(r) - RULE_KEYS)}")
                for key in ("for", "keep_firing_for"):
                    if key in r and not DUR.match(str(r[key])):
                        err(path, f"{where}: rule {name!r} {key} {r[key]!r} is not a duration")
                for key in ("labels", "annotations"):
                    if not all(isinstance(v, str) for v in (r.get(key) or {}).values()):
                        err(path, f"{where}: rule {name!r} {key} are not all strings")
    kinds = ", ".join(f"{k} {len(v)}" for k, v in sorted(by_kind.items()))
    print(f"  {path.rsplit('/', 1)[-1]}: {kinds}", file=sys.stderr)

for e in errors:
    print("  " + e, file=sys.stderr)
sys.exit(1 if errors else 0)
