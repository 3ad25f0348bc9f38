"""bench/run --cluster: the section "On a three-broker cluster" of
docs/benchmarks.md, from one run.

    bench/run --cluster                 # about 8 minutes (the first run also builds BENCH_BEFORE)
    BENCH_SECONDS=4 bench/run --cluster # shorter load phases (the failures keep their length)
    bench/run --cluster --report-only   # rewrite the section from target/bench-cluster-results.json
    bench/run --cluster --price-only    # part 1 alone, printed (target/bench-cluster-price.json);
                                        # docs/benchmarks.md is left as it is

It starts a cluster of one controller and three brokers (scripts/kafka start
--brokers 3, instance "bench-cluster"), mints 1,000 roles held by real tokens
as bench/run does, and measures:

 1. the price of confirmation: wrk against the service of this commit and of
    BENCH_BEFORE (default dfb26ea, the last commit before describes were
    confirmed; exported with git archive and built once into
    ~/.cache/krabka-authority/bench-before/<rev>/, outside this workspace),
    side by side on the same cluster, at concurrency 1, 64 and 512; and both
    at 64 on a single node (instance "bench-cluster-single"), where nothing
    is confirmed: checks, /healthz and roster views. Per build: checks/s,
    p50/p99, Kafka requests per 1,000 checks by API, and the service's CPU
    per 1,000 requests, each over the measured runs only;
 2. a hung broker: the coordinator of some roles SIGSTOPped for 20 s while
    the service and Kafka's Java Admin (bench/java, same timeouts) check the
    same roles in an open loop; when each is correct again for the roles that
    broker coordinated, and how stale the roster views of healthy partitions
    got meanwhile;
 3. the storm: the coordinator of some roles killed (kill -9) for 15 s under
    wrk at concurrency 64, then restarted; the service's counters of
    coordinator lookups and Kafka requests over the outage.

Set KRABKA_KAFKA_STATE to keep its brokers apart from others'.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import http.client
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import (BIN, CLUSTER_HEADING, CONCURRENCY, KAFKA, ROLES, ROOT, SECONDS, TARGET,
                     WARMUP, Service, check_paths, cpu_seconds, fmt, http_json, kafka, machine,
                     metric_sum, output, read_roles, run, say, versions, wrk, wrk_command,
                     wrk_env, wrk_result, write_doc)

CLUSTER = "bench-cluster"
SINGLE = "bench-cluster-single"
BROKERS = 3
TOPIC = "bench-coordination"
BEFORE = os.environ.get("BENCH_BEFORE", "dfb26ea")
RESULTS = TARGET / "bench-cluster-results.json"
PRICE_RESULTS = TARGET / "bench-cluster-price.json"
BEFORE_DIR = Path(os.environ.get("KRABKA_BENCH_BEFORE_DIR",
                                 Path.home() / ".cache/krabka-authority/bench-before"))

HANG_S = 20          # how long the coordinator is SIGSTOPped
KILL_S = 15          # how long the killed coordinator stays down
LEAD_S = 5           # steady load before a failure
TAIL_S = 10          # load after the resume / after the restarted broker is ready
PROBE_RATE = float(os.environ.get("BENCH_PROBE_RATE", "200"))  # checks/s per client
PROBE_ROLES = 50     # roles of the failed broker probed, and as many others
PROBE_CAP = 512      # most checks outstanding per client
WARM_S = 8           # unmeasured load on each build before the side-by-side runs
ROSTER_TTL_MS = 1000  # the service's default --roster-ttl
RETRY_BACKOFF = (0.1, 1.0)  # the client's retry backoff: 100 ms doubling to 1 s

# Kafka's Java Admin set like the service's defaults: a Kafka request times
# out after 5 s, a check gets an answer or an error within 5 s (the service's
# --request-timeout), connections are given 5 s (its connect timeout), and
# retry and reconnect backoffs are Kafka's defaults (the service's too).
JAVA_SETTINGS = {
    "request.timeout.ms": 5000,
    "default.api.timeout.ms": 5000,
    "socket.connection.setup.timeout.ms": 5000,
    "socket.connection.setup.timeout.max.ms": 5000,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "metadata.max.age.ms": 300000,
}


def main(args):
    if args == ["--report-only"]:
        report(json.loads(RESULTS.read_text()))
        return
    price_only = args == ["--price-only"]
    if args and not price_only:
        sys.exit("usage: bench/run --cluster [--report-only | --price-only]")
    for tool in ["cargo", "java", "mvn", "wrk", "git"]:
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is required (wrk: apt-get install wrk)")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="krabka-bench-cluster-"))
    run(["cargo", "build", "--release", "--locked", "--bin", "krabka-authority",
         "--example", "bench_mint"])
    run(["mvn", "-q", "-B", "package"], cwd=ROOT / "bench/java")
    before = build_before()
    results = {"machine": machine(), "versions": versions(), "seconds": SECONDS,
               "load": [os.getloadavg()[0]],
               "roles": ROLES, "before": {"rev": BEFORE, "version": output([before, "--version"])},
               "java_settings": JAVA_SETTINGS, "probe_rate": PROBE_RATE}
    say("after:", BIN, "before:", before)

    bench_started = time.monotonic()
    try:
        results["single"] = single_node(work, before)
    finally:
        Service.stop_all()
    stop_instance(CLUSTER)
    bootstrap = kafka("start", "--name", CLUSTER, "--brokers", str(BROKERS))
    try:
        roles_file = mint(bootstrap, work / "roles.txt")
        roles = read_roles(roles_file)
        paths = check_paths(roles, work)
        after = Service(bootstrap, TOPIC)
        old = Service(bootstrap, TOPIC, binary=before)
        after.wait_ready()
        old.wait_ready()
        warm({"after": after, "before": old}, paths)
        results["price"] = price_of_confirmation(after, old, paths, KafkaCpu(CLUSTER))
        old.stop()
        if price_only:
            results["load"].append(os.getloadavg()[0])
            PRICE_RESULTS.write_text(json.dumps(results, indent=2))
            text, _, targets = render_price(results)
            print(text + "\n" + targets)
            say("wrote", PRICE_RESULTS)
            return
        results["hang"] = hung_broker(bootstrap, roles, roles_file, after, work)
        results["storm"] = storm(bootstrap, roles, roles_file, after, paths, work)
    finally:
        Service.stop_all()
        stop_instance(CLUSTER)
    results["bench_seconds"] = time.monotonic() - bench_started
    results["load"].append(os.getloadavg()[0])
    say(f"done in {time.monotonic() - started:.0f} s (the measurements {results['bench_seconds']:.0f} s)")
    report(results)


def build_before():
    """The service of BENCH_BEFORE, exported with git archive and built once
    into BEFORE_DIR/<rev>/ (BENCH_BEFORE_BIN: an existing build). Outside
    this checkout: inside it, cargo would take the export for a member of
    this workspace."""
    if os.environ.get("BENCH_BEFORE_BIN"):
        return Path(os.environ["BENCH_BEFORE_BIN"])
    rev = output(["git", "rev-parse", "--short", BEFORE])
    base = BEFORE_DIR / rev
    src = base / "src"
    if not (src / "Cargo.toml").exists():
        src.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True,
                                 stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    run(["cargo", "build", "--release", "--locked", "--bin", "krabka-authority"], cwd=src,
        env={**os.environ, "CARGO_TARGET_DIR": str(base / "target")})
    return base / "target/release/krabka-authority"


def stop_instance(name):
    subprocess.run([KAFKA, "stop", "--purge", "--name", name], capture_output=True)


class KafkaCpu:
    """The CPU time of an instance's JVMs (brokers and controller), less
    what they burn idle with the services attached (their polls, the
    controller's heartbeats): what the checks cost Kafka, beside what they
    cost the service. Each request costs a broker a fixed path of JVM
    threads whatever its API, so a build's requests per check show here."""

    def __init__(self, name, idle_s=3):
        nodes = json.loads(kafka("nodes", "--name", name, "--json"))
        self.pids = [n["pid"] for n in nodes if n["state"] == "running"]
        t0, cpu0 = time.monotonic(), self.seconds()
        time.sleep(idle_s)
        self.idle_rate = (self.seconds() - cpu0) / (time.monotonic() - t0)

    def seconds(self):
        return sum(cpu_seconds(pid) for pid in self.pids)

    def start(self):
        return time.monotonic(), self.seconds()

    def since(self, mark):
        """CPU seconds above idle since `mark` (from start)."""
        t0, cpu0 = mark
        return max(0.0, self.seconds() - cpu0 - self.idle_rate * (time.monotonic() - t0))


def mint(bootstrap, out):
    """ROLES roles held by real tokens, as bench/run mints them (the topic
    has 16 partitions and the cluster's replication: 3 on three brokers)."""
    run([str(TARGET / "release/examples/bench_mint"), "--bootstrap", bootstrap,
         "--topic", TOPIC, "--roles", str(ROLES), "--out", out])
    return out


def layout(bootstrap, roles_file, settle=False):
    """Brokers, each role's coordinator and each partition's leader
    (bench.Layout); `settle`: wait for full ISRs and elect preferred leaders
    first, so each failure starts from the same balanced cluster."""
    extra = ["--wait-isr", "90", "--elect-preferred"] if settle else []
    out = output(["java", "-cp", "target/lib/*:target/describe-load.jar", "bench.Layout",
                  "--bootstrap", bootstrap, "--roles-file", str(roles_file), "--topic", TOPIC,
                  *extra], cwd=ROOT / "bench/java", stderr=subprocess.DEVNULL)
    return json.loads(out.splitlines()[-1])


# --- 1. The price of confirmation ---------------------------------------


def single_node(work, before):
    """Both builds at 64 on a single node, where describes are not confirmed:
    checks, and the paths no Kafka request is on (the HTTP floor /healthz and
    the watcher's roster views), so a regression elsewhere shows too. Then
    this commit with one runtime worker against the default count (one per
    CPU), checks at 64 and 512 and /healthz at 64: docs/operations.md,
    *Sizing*, cites the trade."""
    stop_instance(SINGLE)
    bootstrap = kafka("start", "--name", SINGLE)
    try:
        roles = read_roles(mint(bootstrap, work / "single-roles.txt"))
        paths = check_paths(roles, work, "single.paths")
        views = work / "single-views.paths"
        views.write_text("".join(f"/roles/{r}\n" for r, _ in roles))
        health = work / "single-health.paths"
        health.write_text("/healthz\n")
        # The default worker count, whatever the caller's environment says.
        default = {"TOKIO_WORKER_THREADS": None}
        services = {"after": Service(bootstrap, TOPIC, env=default),
                    "before": Service(bootstrap, TOPIC, binary=before, env=default)}
        workers = {"after": services["after"],
                   "one worker": Service(bootstrap, TOPIC, env={"TOKIO_WORKER_THREADS": "1"})}
        for service in [*services.values(), workers["one worker"]]:
            service.wait_ready()
        warm({**services, **workers}, paths)
        jvm = KafkaCpu(SINGLE)
        abba = ["after", "before", "before", "after"]
        one = ["after", "one worker", "one worker", "after"]
        return {"checks": alternating(services, paths, 64, abba, jvm),
                "healthz": alternating(services, health, 64, abba, jvm),
                "views": alternating(services, views, 64, abba, jvm),
                "workers": {"checks": alternating(workers, paths, 64, one, jvm),
                            "checks_512": alternating(workers, paths, 512, one, jvm),
                            "healthz": alternating(workers, health, 64, one, jvm)}}
    finally:
        stop_instance(SINGLE)


def price_of_confirmation(after, before, paths, jvm):
    """Per concurrency, alternating wrk runs (after, before, before, after;
    twice at 64, the target's concurrency) of SECONDS/2 each, so drift of
    the shared machine hits both builds alike."""
    abba = ["after", "before", "before", "after"]
    services = {"after": after, "before": before}
    return {str(c): alternating(services, paths, c, abba * (2 if c == 64 else 1), jvm)
            for c in CONCURRENCY}


def warm(services, paths):
    """Load on each service, unmeasured, before the first measured run: the
    brokers' JIT and the freshly minted roles' caches warm up for both builds
    alike (without it the first run, always "after", was the slowest)."""
    for service in services.values():
        subprocess.run(wrk_command(service.url, 64, WARM_S), env=wrk_env(paths), check=True,
                       stdout=subprocess.DEVNULL)


def alternating(services, paths, c, order, jvm, proxy=None):
    """wrk runs of SECONDS/2 at concurrency c against services[label] for
    each label of `order` (each after WARMUP s of load on that service);
    per label the runs combined. The service's counters and CPU time, and
    Kafka's (`jvm`, a KafkaCpu), are sampled around the measured run alone."""
    runs = {label: [] for label in services}
    for label in order:
        service = services[label]
        subprocess.run(wrk_command(service.url, c, WARMUP), env=wrk_env(paths), check=True,
                       stdout=subprocess.DEVNULL)
        m0, cpu0, jvm0 = service.metrics(), cpu_seconds(service.proc.pid), jvm.start()
        proxy0 = proxy.cpu() if proxy else None
        r = wrk(service.url, paths, c, max(2, SECONDS // 2), warmup=0)
        r["kafka"] = kafka_counts(m0, service.metrics(), cpu_seconds(service.proc.pid) - cpu0)
        r["kafka"]["kafka_cpu_s"] = jvm.since(jvm0)
        if proxy:
            r["kafka"]["proxy_cpu_s"] = proxy.cpu() - proxy0
        runs[label].append(r)
        say(f"c={c}", label, {k: v for k, v in r.items() if k != "kafka"})
    return {label: combine(rs) for label, rs in runs.items()}


def combine(runs):
    """Runs of one build: requests/s and p50 averaged, the worse p99, every
    error; the Kafka and CPU figures over all runs, per 1,000 requests (the
    measured runs' requests: checks, or /healthz and view requests)."""
    n = len(runs)
    k = {}
    for r in runs:
        for key, v in r["kafka"].items():
            if isinstance(v, dict):
                for api, x in v.items():
                    k.setdefault(key, {})
                    k[key][api] = k[key].get(api, 0) + x
            else:
                k[key] = k.get(key, 0) + v
    requests = sum(r["requests"] for r in runs)
    per = 1000 / max(requests, 1)
    apis = k.get("apis", {})
    describe = apis.get("DescribeTransactions", 0)
    return {"throughput": sum(r["throughput"] for r in runs) / n,
            "p50_ms": sum(r["p50_ms"] for r in runs) / n,
            "p99_ms": max(r["p99_ms"] for r in runs),
            "requests": requests,
            "errors": sum(r["errors"] for r in runs),
            "rounds": [round(r["throughput"]) for r in runs],
            "kafka": {"checks": k["checks"],
                      "per_1000_by_api": {api: x * per for api, x in sorted(apis.items()) if x},
                      "describe_per_1000": describe * per,
                      "find_coordinator_per_1000": apis.get("FindCoordinator", 0) * per,
                      "confirmations_per_1000": k["confirmations"] * per,
                      "confirmations_per_describe": k["confirmations"] / describe if describe else None,
                      "ids_per_describe": k["ids"] / k["batches"] if k["batches"] else None,
                      "ms_by_api": {api: 1000 * k["seconds"].get(api, 0) / x
                                    for api, x in sorted(apis.items()) if x},
                      "describe_ms": 1000 * k["seconds"].get("DescribeTransactions", 0) / describe
                      if describe else None,
                      "cpu_ms_per_1000": 1e6 * k["cpu_s"] / max(requests, 1),
                      "kafka_cpu_ms_per_1000": 1e6 * k["kafka_cpu_s"] / max(requests, 1)
                      if "kafka_cpu_s" in k else None,
                      "proxy_cpu_ms_per_1000": 1e6 * k["proxy_cpu_s"] / max(requests, 1)
                      if "proxy_cpu_s" in k else None}}


def by_label(samples, name, label):
    """{label value: the sum of `name`'s samples with it}."""
    out = {}
    for (n, labels), v in samples.items():
        if n == name:
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0) + v
    return out


def kafka_counts(m0, m1, cpu_s):
    """What the service did between two /metrics samples: checks, Kafka
    requests by API and their time, describe batches, confirmations, CPU
    seconds. A confirmation is a FindCoordinator that is not a coordinator
    lookup, unless the build counts them itself
    (krabka_describe_confirmations_total)."""
    def diff(name, **labels):
        return metric_sum(m1, name, **labels) - metric_sum(m0, name, **labels)

    def diff_by(name, label):
        a, b = by_label(m0, name, label), by_label(m1, name, label)
        return {key: b[key] - a.get(key, 0) for key in b}
    apis = diff_by("krabka_kafka_requests_total", "api")
    if any(n == "krabka_describe_confirmations_total" for n, _ in m1):
        confirmations = diff("krabka_describe_confirmations_total")
    else:
        confirmations = max(0, apis.get("FindCoordinator", 0) - diff("krabka_coordinator_lookups_total"))
    return {"checks": diff("krabka_authority_checks_total"),
            "apis": apis,
            "seconds": diff_by("krabka_kafka_request_duration_seconds_sum", "api"),
            "confirmations": confirmations,
            "ids": diff("krabka_describe_batch_size_sum"),
            "batches": diff("krabka_describe_batch_size_count"),
            "cpu_s": cpu_s}


# --- 2. and 3.: open-loop checks, each answer logged ----------------------


class Probe:
    """Checks against the service in an open loop, as `describe-load --rate`
    does against Kafka: one every 1/rate s over `roles` in turn, at most
    PROBE_CAP outstanding; each answer logged as (issued, completed, role,
    outcome) in epoch seconds, outcome "ok" for a 200 with the role's token."""

    def __init__(self, url, roles, rate=PROBE_RATE):
        self.host, self.port = url.removeprefix("http://").split(":")
        self.roles, self.rate = roles, rate
        self.events = []
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(PROBE_CAP)
        self.pool = ThreadPoolExecutor(max_workers=PROBE_CAP)
        self.local = threading.local()
        self.stopping = threading.Event()
        self.issuer = threading.Thread(target=self._issue, daemon=True)

    def start(self):
        self.issuer.start()
        return self

    def stop(self):
        self.stopping.set()
        self.issuer.join()
        self.pool.shutdown(wait=True)
        return self.events

    def _issue(self):
        period, tick, i = 1 / self.rate, time.monotonic(), 0
        while not self.stopping.is_set():
            now = time.monotonic()
            if tick > now:
                time.sleep(tick - now)
                continue
            tick = now + period if now - tick > period else tick + period
            self.slots.acquire()
            self.pool.submit(self._check, *self.roles[i % len(self.roles)])
            i += 1

    def _check(self, role, token):
        issued = time.time()
        try:
            try:
                outcome = self._get(role, token)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # A kept-alive connection the service closed while idle
                # (--header-timeout): once more on a fresh one, as HTTP
                # clients do.
                outcome = self._get(role, token)
        except (OSError, http.client.HTTPException, ValueError) as e:
            outcome = f"error:{type(e).__name__}"
        finally:
            self.slots.release()
        with self.lock:
            self.events.append((issued, time.time(), role, outcome))

    def _get(self, role, token):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=15)
        try:
            conn.request("GET", f"/roles/{role}/authority?token={token}")
            response = conn.getresponse()
            body = response.read()
        except BaseException:
            self.local.conn = None
            conn.close()
            raise
        ok = response.status == 200 and json.loads(body).get("current") == token
        return "ok" if ok else f"http:{response.status}"


def java_probe(bootstrap, roles_file, seconds, events_file, log):
    """describe-load as an open loop at PROBE_RATE with JAVA_SETTINGS, every
    answer logged to events_file."""
    settings = [a for k, v in JAVA_SETTINGS.items() for a in ("--set", f"{k}={v}")]
    cmd = ["java", "-jar", "target/describe-load.jar", "--bootstrap", bootstrap,
           "--roles-file", str(roles_file), "--concurrency", str(PROBE_CAP),
           "--rate", str(PROBE_RATE), "--warmup", "0", "--duration", str(seconds),
           "--events", str(events_file), *settings]
    say("$", " ".join(cmd))
    return subprocess.Popen(cmd, cwd=ROOT / "bench/java", stdout=subprocess.DEVNULL, stderr=log)


def read_events(path):
    events = []
    for line in Path(path).read_text().splitlines():
        issued, done, role, outcome = line.split(" ")[:4]
        events.append((int(issued) / 1000, int(done) / 1000, role, outcome))
    return events


def recovery(events, affected, failed_at, until):
    """Per affected role, when its checks were correct again after
    `failed_at` and stayed so until `until`: the completion of its first
    correct check sent after its last failed one was sent (0 when none
    failed). Returns the spread over the roles and the failure counts."""
    mine = sorted((e for e in events if e[2] in affected and e[1] >= failed_at and e[0] < until),
                  key=lambda e: e[0])
    others = [e for e in events if e[2] not in affected and e[1] >= failed_at and e[0] < until]
    bad = [e for e in mine if e[3] != "ok"]
    by_role = {}
    for e in mine:
        by_role.setdefault(e[2], []).append(e)
    per_role = []
    for checks in by_role.values():
        failed = [e[0] for e in checks if e[3] != "ok"]
        if not failed:
            per_role.append(0.0)
            continue
        good = [e[1] for e in checks if e[0] > failed[-1]]
        per_role.append(min(good) - failed_at if good else None)
    done = sorted(x for x in per_role if x is not None)
    out = {"checks": len(mine), "failed": len(bad), "roles": len(per_role),
           "never": sum(1 for x in per_role if x is None),
           "failed_other_roles": sum(1 for e in others if e[3] != "ok"),
           "first_failure_s": min((e[1] for e in bad), default=failed_at) - failed_at if bad else None,
           "outcomes": {}}
    for e in bad:
        out["outcomes"][e[3]] = out["outcomes"].get(e[3], 0) + 1
    if done:
        out["p50_s"] = done[len(done) // 2]
        out["p90_s"] = done[min(len(done) - 1, int(len(done) * 0.9))]
    # All affected roles correct again (None if one never was).
    out["recovered_s"] = max(done) if done and not out["never"] else None
    return out


def per_second(events, affected, start, seconds):
    """Checks of the affected roles per second from `start`: [ok, failed]."""
    out = [[0, 0] for _ in range(int(seconds) + 1)]
    for issued, done, role, outcome in events:
        k = int(done - start)
        if role in affected and 0 <= k < len(out):
            out[k][0 if outcome == "ok" else 1] += 1
    return out


def node_action(verb, node):
    """scripts/kafka pause|resume|kill|start-node; the instant it returned."""
    before = time.time()
    kafka(verb, "--name", CLUSTER, "--node", str(node))
    after = time.time()
    say(verb, node, f"took {after - before:.2f} s")
    return after, after - before


def pick_victim(lay, roles, work, name):
    """The broker coordinating the first role; the roles it coordinates; and
    the probed roles (PROBE_ROLES of those and as many others, written as a
    roles file for the Java peer)."""
    victim = lay["coordinators"][roles[0][0]]
    affected = {r for r, c in lay["coordinators"].items() if c == victim}
    probed = ([rt for rt in roles if rt[0] in affected][:PROBE_ROLES] +
              [rt for rt in roles if rt[0] not in affected][:PROBE_ROLES])
    probed.sort(key=lambda rt: roles.index(rt))
    probe_file = work / f"{name}-roles.txt"
    probe_file.write_text("".join(f"{r} {t}\n" for r, t in probed))
    return victim, affected, probed, probe_file


# --- 2. A hung broker ------------------------------------------------------


def hung_broker(bootstrap, roles, roles_file, service, work):
    lay = layout(bootstrap, roles_file, settle=True)
    victim, affected, probed, probe_file = pick_victim(lay, roles, work, "hang")
    say(f"hang: broker {victim} coordinates {len(affected)} of {len(roles)} roles")
    # Roster views to watch: one role per partition led by another broker.
    _, listing = http_json(service.url + "/roles", timeout=30)
    by_partition = {}
    for r in listing["roles"]:
        by_partition.setdefault(r["partition"], r["role"])
    healthy = {p: role for p, role in by_partition.items() if lay["leaders"][str(p)] != victim}
    hung = {p: role for p, role in by_partition.items() if lay["leaders"][str(p)] == victim}

    seconds = LEAD_S + HANG_S + TAIL_S
    java_events = work / "java-hang.events"
    with open(work / "java-hang.log", "w") as log:
        java = java_probe(bootstrap, probe_file, seconds + 2, java_events, log)
        try:
            probe = Probe(service.url, probed).start()
            sampler = Sampler(service).start()
            time.sleep(LEAD_S)
            before = counters(service.metrics())
            paused, pause_took = node_action("pause", victim)
            try:
                ages, views_failed, polls = roster_ages(service, healthy, paused + HANG_S)
                hung_ages, _, _ = roster_ages(service, hung, 0)  # one look at the hung ones
            finally:
                resumed, _ = node_action("resume", victim)
            time.sleep(max(0.0, resumed + TAIL_S - time.time()))
            until = time.time()
            service_events = probe.stop()
            samples = sampler.stop()
            after = counters(service.metrics())
            java.wait()
        finally:
            if java.poll() is None:
                java.kill()
    java_events = read_events(java_events)
    out = {"victim": victim, "affected": len(affected), "roles": len(roles),
           "probed": len(probed), "probed_affected": sum(1 for r, _ in probed if r in affected),
           "pause_command_s": pause_took, "hang_s": resumed - paused, "window_s": until - paused,
           "counters": {k: after[k] - before[k] for k in before},
           "lookups_per_second": per_second_of(samples, "lookups", paused),
           "views": {"max_age_ms": max(ages.values(), default=None), "by_partition": ages,
                     "polls": polls, "not_200": views_failed, "partitions": len(healthy),
                     "hung_partitions": len(hung),
                     "hung_age_ms_at_end": max(hung_ages.values(), default=None)}}
    for name, events in [("service", service_events), ("java", java_events)]:
        out[name] = recovery(events, affected, paused, until)
        out[name]["after_resume_failed"] = sum(
            1 for e in events if e[2] in affected and e[0] >= resumed and e[0] < until and e[3] != "ok")
        out[name]["per_second"] = per_second(events, affected, paused - LEAD_S, seconds)
        say("hang", name, {k: v for k, v in out[name].items() if k != "per_second"})
    say("hang views", out["views"])
    return out


def roster_ages(service, roles_by_partition, until):
    """GET /roles/{role} for each partition every 200 ms until `until` (at
    least once): the largest view.ageMs per partition, non-200s, polls."""
    ages, failed, polls = {}, 0, 0
    while True:
        for p, role in roles_by_partition.items():
            status, body = http_json(f"{service.url}/roles/{role}")
            polls += 1
            if status != 200 or body is None:
                failed += 1
                continue
            ages[str(p)] = max(ages.get(str(p), 0), body["view"]["ageMs"])
        if time.time() >= until:
            return ages, failed, polls
        time.sleep(0.2)


# --- 3. The storm ---------------------------------------------------------

COUNTERS = [
    ("lookups", "krabka_coordinator_lookups_total", {}),
    ("find_coordinator", "krabka_kafka_requests_total", {"api": "FindCoordinator"}),
    ("describe", "krabka_kafka_requests_total", {"api": "DescribeTransactions"}),
    ("stale", "krabka_stale_answers_total", {}),
    ("checks", "krabka_authority_checks_total", {}),
]
OUTCOMES = {"krabka_kafka_requests_total": ("outcome", ["ok", "timeout", "disconnected", "error"]),
            "krabka_stale_answers_total": ("reason", ["unconfirmed", "below_high_water"]),
            "krabka_authority_checks_total": ("verdict", ["authoritative", "unavailable"])}


def counters(samples):
    """The storm's counters, by outcome, from one /metrics sample."""
    out = {}
    for key, name, labels in COUNTERS:
        out[key] = metric_sum(samples, name, **labels)
        if name in OUTCOMES:
            label, values = OUTCOMES[name]
            for v in values:
                out[f"{key}.{v}"] = metric_sum(samples, name, **labels, **{label: v})
    return out


class Sampler:
    """The storm's counters once a second, in a thread."""

    def __init__(self, service):
        self.service, self.samples = service, []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        while not self.stopping.is_set():
            t = time.time()
            try:
                self.samples.append((t, counters(self.service.metrics())))
            except OSError:
                pass
            self.stopping.wait(max(0.0, t + 1 - time.time()))

    def stop(self):
        self.stopping.set()
        self.thread.join()
        return self.samples

    def at(self, t):
        """The first sample taken at or after t (else the last)."""
        return next((s for ts, s in self.samples if ts >= t), self.samples[-1][1])


def per_second_of(samples, key, since):
    """A counter's increase in each second from `since` (the 1 s samples;
    the first interval starts at the last sample before `since`)."""
    first = max((i for i, (t, _) in enumerate(samples) if t < since), default=0)
    series = [s[key] for _, s in samples[first:]]
    return [round(b - a) for a, b in zip(series, series[1:])]


def backoffs(seconds):
    """How many retry backoffs (100 ms doubling to 1 s) fit in `seconds`, the
    last one begun counted whole."""
    n, step, elapsed = 0, RETRY_BACKOFF[0], 0.0
    while elapsed < seconds:
        n += 1
        elapsed += step
        step = min(step * 2, RETRY_BACKOFF[1])
    return n


def peak_per_backoff(per_second):
    """The most lookups per retry backoff in any second from the failure:
    (lookups / backoffs begun in that second, the second). The backoff
    schedule (100 ms doubling to 1 s) starts when the service notices the
    failure, which the 1 s samples do not show (killing a broker took up
    to 0.6 s): it is anchored at each tenth of the first second with a
    lookup, and the best fitting anchor counts."""
    first = next((i for i, n in enumerate(per_second) if n), 0)
    best = None
    for tenth in range(10):
        starts, t, step = [], first + tenth / 10, RETRY_BACKOFF[0]
        while t < len(per_second) + 1:
            starts.append(t)
            t += step
            step = min(step * 2, RETRY_BACKOFF[1])
        peak = (0.0, 0)
        for i, n in enumerate(per_second):
            begun = max(1, sum(1 for x in starts if i <= x < i + 1))
            peak = max(peak, (n / begun, i))
        best = peak if best is None else min(best, peak)
    return best


def storm(bootstrap, roles, roles_file, service, paths, work):
    lay = layout(bootstrap, roles_file, settle=True)
    victim, affected, probed, _ = pick_victim(lay, roles, work, "storm")
    say(f"storm: broker {victim} coordinates {len(affected)} of {len(roles)} roles")
    # wrk until stopped (SIGINT: it stops and reports), however long the
    # restart takes.
    load = subprocess.Popen(wrk_command(service.url, 64, 600), env=wrk_env(paths),
                            stdout=subprocess.PIPE, text=True)
    try:
        sampler = Sampler(service).start()
        probe = Probe(service.url, probed).start()
        time.sleep(LEAD_S)
        before = counters(service.metrics())
        killed, _ = node_action("kill", victim)
        time.sleep(max(0.0, killed + KILL_S - time.time()))
        restarted = time.time()
        kafka("start-node", "--name", CLUSTER, "--node", str(victim))
        ready = time.time()
        say(f"start-node {victim} took {ready - restarted:.1f} s")
        time.sleep(TAIL_S)
        load.send_signal(signal.SIGINT)
        wrk_out = load.communicate()[0]
        until = time.time()
        events = probe.stop()
        samples = sampler.stop()
        after = counters(service.metrics())
    finally:
        if load.poll() is None:
            load.kill()
    rec = recovery(events, affected, killed, until)
    outage = rec["recovered_s"] if rec["recovered_s"] is not None else until - killed
    down = restarted - killed

    def window(seconds, counts):
        return {"seconds": seconds, "backoffs": backoffs(seconds),
                "counters": {k: counts[k] - before[k] for k in before}}
    out = {"victim": victim, "affected": len(affected), "roles": len(roles),
           "probed": len(probed), "probed_affected": sum(1 for r, _ in probed if r in affected),
           "down_s": down, "ready_s": ready - killed, "window_s": until - killed,
           "wrk": wrk_result(wrk_out), "recovery": rec, "affected_coordinators": 1,
           "windows": {"down": window(down, sampler.at(killed + down)),
                       "outage": window(outage, sampler.at(killed + outage)),
                       "phase": window(until - killed, after)}}
    out["lookups_per_second"] = per_second_of(samples, "lookups", killed)
    say("storm", {k: v for k, v in out.items() if k not in ("recovery",)})
    return out


# --- The report -------------------------------------------------------------


def report(results):
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    section = render(results)
    notes = ROOT / "docs/benchmarks-cluster-notes.md"
    if notes.exists():
        # Hand-written reading of one run's figures, as docs/benchmarks-notes.md.
        section += "\n" + notes.read_text()
    write_doc(cluster=section)
    print(section)
    say("wrote docs/benchmarks.md (its cluster section) and", RESULTS)


def render_price(results):
    """Part 1 as markdown, and its targets as (name, measured, met)."""
    before, price, single = results["before"], results["price"], results["single"]
    half = max(2, results["seconds"] // 2)
    if "checks" not in single:  # results of a run before the HTTP rows
        single = {"checks": single}

    def opt(x, digits=1):
        return "n/a" if x is None else fmt(x, digits)

    def ratio(a, b, key="throughput"):
        return a[key] / b[key] if b[key] else float("nan")

    rows = [(f"3 brokers, c={c}", price[str(c)]) for c in CONCURRENCY]
    rows.append(("single node, c=64", single["checks"]))
    apis = sorted({api for _, pair in rows for r in pair.values()
                   for api in r["kafka"].get("per_1000_by_api", {})},
                key=lambda a: ({"DescribeTransactions": 0, "FindCoordinator": 1}.get(a, 2), a))
    head = ("| checks | build | checks/s | p50 ms | p99 ms | errors | service CPU ms per 1,000 | "
            "Kafka CPU ms per 1,000 | "
            + " | ".join(f"{a} per 1,000" for a in apis) + " | confirmations per describe |")
    lines = [head, "|---|---|" + "---:|" * (7 + len(apis))]
    for label, pair in rows:
        for build in ["after", "before"]:
            r = pair[build]
            k = r["kafka"]
            by_api = k.get("per_1000_by_api", {})
            name = "after" if build == "after" else f"before ({before['rev']})"
            lines.append(f"| {label} | {name} | {fmt(r['throughput'], 0)} | {fmt(r['p50_ms'], 2)} | "
                         f"{fmt(r['p99_ms'], 2)} | {r['errors']} | {fmt(k['cpu_ms_per_1000'], 1)} | "
                         f"{opt(k.get('kafka_cpu_ms_per_1000'))} | "
                         + " | ".join(opt(by_api.get(a, 0.0)) for a in apis)
                         + f" | {opt(k.get('confirmations_per_describe'), 2)} |")
    checks_table = "\n".join(lines)

    http_lines = ["| path, single node, c=64 | build | requests/s | p50 ms | p99 ms | errors | "
                  "service CPU ms per 1,000 |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, label in [("healthz", "`/healthz` (the HTTP floor)"),
                       ("views", "roster views `GET /roles/{role}`")]:
        if key not in single:
            continue
        for build in ["after", "before"]:
            http_lines.append(http_row(label, build, single[key][build]))
    http_table = "\n".join(http_lines)

    ratio_lines = ["| after / before | checks/s (requests/s) | p50 | service CPU per request | "
                   "Kafka CPU per request |", "|---|---:|---:|---:|---:|"]
    measures = [(label, pair) for label, pair in rows]
    measures += [(f"single node `/healthz`, c=64", single["healthz"])] if "healthz" in single else []
    measures += [(f"single node roster views, c=64", single["views"])] if "views" in single else []
    for label, pair in measures:
        a, b = pair["after"], pair["before"]
        cpu = a["kafka"]["cpu_ms_per_1000"] / b["kafka"]["cpu_ms_per_1000"] \
            if b["kafka"]["cpu_ms_per_1000"] else float("nan")
        # Only checks ask Kafka anything; the other paths' figure is noise.
        ka, kb = a["kafka"].get("kafka_cpu_ms_per_1000"), b["kafka"].get("kafka_cpu_ms_per_1000")
        asked = b["kafka"].get("checks", 0) > 0
        jvm = f"{ka / kb:.2f} ×" if asked and ka is not None and kb else "n/a"
        ratio_lines.append(f"| {label} | {ratio(a, b):.2f} × | {ratio(a, b, 'p50_ms'):.2f} × | {cpu:.2f} × | {jvm} |")
    ratio_table = "\n".join(ratio_lines)
    workers_table = render_workers(single.get("workers"), results["machine"]["cores"])

    k64 = price["64"]["after"]["kafka"]
    per_describe = k64.get("confirmations_per_describe") or 0.0
    targets = [
        ("3 brokers: checks/s ≥ 0.90 × at c=64", f"{ratio(*[price['64'][x] for x in ('after', 'before')]):.2f} ×",
         ratio(price["64"]["after"], price["64"]["before"]) >= 0.90),
        ("3 brokers: checks/s ≥ 0.90 × at c=512",
         f"{ratio(price['512']['after'], price['512']['before']):.2f} ×",
         ratio(price["512"]["after"], price["512"]["before"]) >= 0.90),
        ("3 brokers: p50 at c=1 ≤ 1.25 ×",
         f"{ratio(price['1']['after'], price['1']['before'], 'p50_ms'):.2f} ×",
         ratio(price["1"]["after"], price["1"]["before"], "p50_ms") <= 1.25),
        ("confirmations ≤ 0.35 per DescribeTransactions at c=64 on 3 brokers",
         f"{per_describe:.2f}", per_describe <= 0.35),
        ("single node: checks/s ≥ 0.97 × at c=64",
         f"{ratio(single['checks']['after'], single['checks']['before']):.2f} ×",
         ratio(single["checks"]["after"], single["checks"]["before"]) >= 0.97),
    ]
    if "healthz" in single:
        h = ratio(single["healthz"]["after"], single["healthz"]["before"])
        per_check = single["checks"]["after"]["kafka"]["cpu_ms_per_1000"]
        per_health = single["healthz"]["after"]["kafka"]["cpu_ms_per_1000"]
        targets += [("single node: `/healthz` ≥ 0.97 × at c=64", f"{h:.2f} ×", h >= 0.97),
                    ("service CPU per check ≤ 1.6 × per `/healthz` (single node, c=64)",
                     f"{per_check / per_health:.2f} × ({per_check:.1f} against {per_health:.1f} ms per 1,000)",
                     per_check <= 1.6 * per_health)]
    rounds = "; ".join(f"{label} " + ", ".join(f"{x:,}" for x in price["64"][label]["rounds"])
                       for label in ["after", "before"])
    target_table = "\n".join(["| target (issue 24) | measured | met |", "|---|---:|:---:|"] +
                             [f"| {n} | {v} | {'yes' if ok else 'NO'} |" for n, v, ok in targets])
    k_before = price["64"]["before"]["kafka"]
    text = f"""### The price of confirmation

On a cluster that ever listed more than one broker, the service of this
commit uses a coordinator's DescribeTransactions answer only when another
broker confirms it (see `crates/krabka-kafka/src/describe/`); the build before does not.
Both services run side by side against the same cluster and roles; wrk
rotates over the {results['roles']:,} checks as in *Authority checks*. After {WARM_S} s of
unmeasured load on each build, each concurrency has four alternating runs
(after, before, before, after; eight at 64) of {half} s, each after {WARMUP} s of
warm-up of its own: requests/s and p50 are the mean of a build's runs, p99
the worst, errors the sum; the service's Kafka requests (from `/metrics`)
and CPU time (user + system of its process) are counted over the measured
runs alone, per 1,000 requests, and so is Kafka's CPU time (its brokers'
and controller's processes, less their idle rate measured before the runs
with both services attached). On a single node (a broker of its own, the
same roles minted there) nothing is confirmed: the reference rows, and the
paths without a Kafka request. All rows come from this run; compare them
with each other, not with *Authority checks* above (another run, another
load on the machine: load average {results['load'][0]:.1f} at the start of this run,
{results['load'][-1]:.1f} at its end).

{checks_table}

At c=64 on three brokers the runs gave (checks/s) {rounds}; the service of
this commit sent {opt(k64['confirmations_per_1000'])} confirmations per 1,000 checks
({opt(k64['ids_per_describe'])} ids per DescribeTransactions; mean round trip
{opt(k64['describe_ms'], 2)} ms), the build before none ({opt(k_before['ids_per_describe'])} ids; {opt(k_before['describe_ms'], 2)} ms).

{http_table}

{ratio_table}
{workers_table}"""
    return text, targets, target_table


def http_row(label, build, r):
    """A row of requests/s, p50, p99, errors and service CPU per 1,000."""
    return (f"| {label} | {build} | {fmt(r['throughput'], 0)} | {fmt(r['p50_ms'], 2)} | "
            f"{fmt(r['p99_ms'], 2)} | {r['errors']} | {fmt(r['kafka']['cpu_ms_per_1000'], 1)} |")


def render_workers(workers, cores):
    """This commit on the single node with one runtime worker against the
    default (one per CPU): empty for results of a run without it."""
    if not workers:
        return ""
    lines = ["| single node | runtime workers | requests/s | p50 ms | p99 ms | errors | "
             "service CPU ms per 1,000 |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, label in [("checks", "checks, c=64"), ("checks_512", "checks, c=512"),
                       ("healthz", "`/healthz`, c=64")]:
        for build, name in [("after", f"one per CPU ({cores})"),
                            ("one worker", "one (`TOKIO_WORKER_THREADS=1`)")]:
            lines.append(http_row(label, name, workers[key][build]))
    per = {b: workers["checks"][b]["kafka"]["cpu_ms_per_1000"]
           / workers["healthz"][b]["kafka"]["cpu_ms_per_1000"] for b in ["after", "one worker"]}
    return f"""
The runtime's worker count, this commit alone (runs in the order default,
one, one, default, as above): a check's CPU against a `/healthz` request's
is {per['after']:.2f} × with one worker per CPU and {per['one worker']:.2f} × with one
(docs/operations.md, *Sizing*).

""" + "\n".join(lines) + "\n"


def render(results):
    m, ver, before = results["machine"], results["versions"], results["before"]
    hang, st = results["hang"], results["storm"]

    def opt(x, digits=1):
        return "n/a" if x is None else fmt(x, digits)

    def secs(x):
        return "not within the phase" if x is None else f"{x:.2f} s"

    price_text, price_targets, _ = render_price(results)

    # 2. A hung broker.
    s, j = hang["service"], hang["java"]
    hang_lines = ["| client | first failed answer | correct again: p50 of roles | p90 | all probed roles | "
                  "failed checks, affected roles | failed checks, other roles | failed, sent after the resume |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in [("service (this commit)", s), ("Java Admin.describeTransactions", j)]:
        first = "none" if r["first_failure_s"] is None else f"{r['first_failure_s']:.2f} s"
        hang_lines.append(
            f"| {label} | {first} | {opt(r.get('p50_s'), 2)} s | {opt(r.get('p90_s'), 2)} s | "
            f"{secs(r['recovered_s'])} | {r['failed']:,} of {r['checks']:,} | {r['failed_other_roles']:,} | "
            f"{r['after_resume_failed']:,} |")
    hang_table = "\n".join(hang_lines)
    outcomes = "; ".join(
        f"{label}: " + (", ".join(f"{n:,} × `{k}`" for k, n in sorted(r["outcomes"].items())) or "none")
        for label, r in [("service", s), ("Java", j)])
    timeline = ["| seconds from the pause | service: correct | failed | Java Admin: correct | failed |",
                "|---|---:|---:|---:|---:|"]
    for k in range(0, len(s["per_second"]) - 1, 2):
        a = [sum(x) for x in zip(*s["per_second"][k:k + 2])]
        b = [sum(x) for x in zip(*j["per_second"][k:k + 2])]
        t = k - LEAD_S
        timeline.append(f"| {t} to {t + 2} | {a[0]:,} | {a[1]:,} | {b[0]:,} | {b[1]:,} |")
    timeline_table = "\n".join(timeline)
    java_settings = ", ".join(f"`{k}={v}`" for k, v in results["java_settings"].items())
    views = hang["views"]
    bound = ROSTER_TTL_MS + 1000
    age = views["max_age_ms"]

    # 3. The storm.
    win = st["windows"]
    recovered = st["recovery"]["recovered_s"]
    outage_label = ("kill → probed roles correct again" if recovered is not None
                    else "kill → end (probed roles not all correct again)")
    storm_lines = [f"| counter | broker down ({win['down']['seconds']:.1f} s) | per s | "
                   f"{outage_label} ({win['outage']['seconds']:.1f} s) | per s | "
                   f"kill → end ({win['phase']['seconds']:.1f} s) | per s |",
                   "|---|---:|---:|---:|---:|---:|---:|"]
    for key, label in [("lookups", "coordinator lookups (`krabka_coordinator_lookups_total`)"),
                       ("find_coordinator.ok", "FindCoordinator, ok"),
                       ("find_coordinator.timeout", "FindCoordinator, timeout"),
                       ("find_coordinator.disconnected", "FindCoordinator, disconnected"),
                       ("find_coordinator.error", "FindCoordinator, error"),
                       ("describe.ok", "DescribeTransactions, ok"),
                       ("describe.timeout", "DescribeTransactions, timeout"),
                       ("describe.disconnected", "DescribeTransactions, disconnected"),
                       ("describe.error", "DescribeTransactions, error"),
                       ("stale.unconfirmed", "stale answers, unconfirmed"),
                       ("stale.below_high_water", "stale answers, below high water"),
                       ("checks.authoritative", "checks answered 200"),
                       ("checks.unavailable", "checks answered 503")]:
        cells = []
        for w in ["down", "outage", "phase"]:
            v = win[w]["counters"][key]
            cells.append(f"{v:,.0f} | {v / win[w]['seconds']:,.1f}")
        storm_lines.append(f"| {label} | " + " | ".join(cells) + " |")
    storm_table = "\n".join(storm_lines)
    per_backoff = {w: win[w]["counters"]["lookups"] / (win[w]["backoffs"] * st["affected_coordinators"])
                   for w in win}
    peak, peak_at = peak_per_backoff(st["lookups_per_second"])
    worst = max(max(per_backoff.values()), peak)
    hc = hang["counters"]
    hang_lps = ", ".join(str(x) for x in hang["lookups_per_second"])
    lps = ", ".join(str(x) for x in st["lookups_per_second"])
    sr = st["recovery"]

    # Targets.
    targets = list(price_targets)
    sv, jv = s["recovered_s"], j["recovered_s"]
    targets.append(("hung coordinator: service correct again ≤ Java Admin + 1 s (all probed roles)",
                    f"{secs(sv)} vs {secs(jv)}",
                    sv is not None and (jv is None or sv <= jv + 1)))
    targets.append((f"roster views of healthy partitions during the hang ≤ --roster-ttl + 1 s = {bound:,} ms",
                     f"{opt(age, 0)} ms", age is not None and age <= bound and views["not_200"] == 0))
    targets.append(("storm: ≤ 2 lookups per affected coordinator per retry backoff (worst window or second)",
                    f"{worst:.2f}", worst <= 2))
    target_table = "\n".join(["| target | measured | met |", "|---|---:|:---:|"] +
                             [f"| {n} | {v} | {'yes' if ok else 'NO'} |" for n, v, ok in targets])

    return f"""{CLUSTER_HEADING}

Figures from one run of `bench/run --cluster` ({results['bench_seconds'] / 60:.1f} minutes of
measurement), on the machine above, whose {m['cores']} cores a controller, three brokers,
the services, the load generators and the Java peer share:
`scripts/kafka start --brokers 3` (Kafka {ver['kafka']}: one controller and three
brokers; `__transaction_state` replicated 3 times with min ISR 2; Kafka's
defaults otherwise, e.g. `broker.session.timeout.ms` 9 s). {results['roles']:,} roles are
minted as in bench/run (topic `{TOPIC}`, 16 partitions, replication 3; a
registration and a lease under a fresh token each). The services run with
their defaults: Kafka request timeout 5 s, HTTP request timeout 5 s,
`--roster-ttl` 1 s.

- Reproduce: `bench/run --cluster` (wrk and the Java peer as above; it builds
  commit {before['rev']} once into `~/.cache/krabka-authority/bench-before/`; set
  `KRABKA_KAFKA_STATE` to keep its brokers apart from others').
  `bench/run --cluster --report-only` rewrites this section from
  `target/bench-cluster-results.json`; `bench/run --cluster --price-only`
  runs the side-by-side part alone and prints it.
- Builds: *after* = {ver['krabka-authority']} at this commit; *before* = {before['version']}
  at {before['rev']}, the last commit before the client confirmed describes.

{price_text}
### A hung broker, side by side with Kafka's Java Admin

Broker {hang['victim']}, the coordinator of {hang['affected']:,} of the {hang['roles']:,} roles (found
with FindCoordinator, by Kafka's Admin in `bench.Layout`, after a
preferred-leader election), is stopped with SIGSTOP (`scripts/kafka pause`,
which took {hang['pause_command_s']:.2f} s; times count from its return) for {hang['hang_s']:.1f} s, then
resumed. From {LEAD_S} s before the pause to {TAIL_S} s after the resume the service and
Kafka's Java Admin each check the same {hang['probed']} roles ({hang['probed_affected']} of them coordinated by
broker {hang['victim']}) in an open loop of {results['probe_rate']:.0f} checks per second, at most
{PROBE_CAP} outstanding: each role about every {hang['probed'] / results['probe_rate']:.1f} s (the service: HTTP
keep-alive from Python threads; the Java peer: `describe-load --rate
--events`, one `Admin.describeTransactions` per check). A check is correct
when it answers the role's token (the service: 200 with that `current`).
A role is *correct again* at the completion of its first correct check sent
after its last failed one: every later check of it was correct until the end;
*all probed roles* is the latest of these. The Java Admin ran with
{java_settings}: the service's Kafka request timeout, its HTTP request
timeout as the per-call timeout, its connect timeout, and Kafka's (and the
service's) retry and reconnect backoffs.

{hang_table}

Failed checks by kind: {outcomes}. Answers to checks of the affected roles
over time (by completion; the pause at 0, the resume at {hang['hang_s']:.1f}):

{timeline_table}

The service's counters from the pause to the end ({hang['window_s']:.1f} s):
{hc['lookups']:,.0f} coordinator lookups (per second from the pause: {hang_lps}),
FindCoordinator {hc['find_coordinator.ok']:,.0f} ok, {hc['find_coordinator.timeout']:,.0f} timed out, {hc['find_coordinator.disconnected']:,.0f} disconnected;
DescribeTransactions {hc['describe.ok']:,.0f} ok, {hc['describe.timeout']:,.0f} timed out, {hc['describe.disconnected']:,.0f} disconnected;
{hc['stale.unconfirmed']:,.0f} answers not used as unconfirmed and {hc['stale.below_high_water']:,.0f} as below the high water.

Roster views during the hang: `GET /roles/{{role}}` for one role of each of the
{views['partitions']} partitions of `{TOPIC}` led by a healthy broker, every 200 ms
({views['polls']:,} requests, {views['not_200']} not 200): `view.ageMs` was at most
**{opt(age, 0)} ms** (bound: `--roster-ttl` + 1 s = {bound:,} ms). The {views['hung_partitions']} partitions
led by the hung broker were {opt(views['hung_age_ms_at_end'], 0)} ms old at the resume (their
replicas on the other brokers take over once the controller fences the hung
broker, after `broker.session.timeout.ms`; until then nothing can be read
from them).

### The storm

Broker {st['victim']}, the coordinator of {st['affected']:,} of the {st['roles']:,} roles, is killed
(`scripts/kafka kill`, SIGKILL) under wrk at concurrency 64 over all roles and
restarted {st['down_s']:.1f} s later (`scripts/kafka start-node`, ready
{st['ready_s']:.1f} s after the kill); wrk runs from {LEAD_S} s before the kill to {TAIL_S} s after
the restarted broker is ready, with the open-loop probe of the hung-broker
scenario alongside ({st['probed']} roles, {st['probed_affected']} of them coordinated by broker {st['victim']}). wrk
over the phase: {fmt(st['wrk']['throughput'], 0)} checks/s, p50 {fmt(st['wrk']['p50_ms'], 2)} ms, p99
{fmt(st['wrk']['p99_ms'], 2)} ms, {st['wrk']['errors']:,} errors (503s and socket errors). The probed roles of the
killed coordinator were correct again after {opt(sr.get('p50_s'), 2)} s (p50 of roles),
{opt(sr.get('p90_s'), 2)} s (p90), all of them: {secs(recovered)}
({sr['failed']:,} of {sr['checks']:,} probe checks of them failed). The service's
counters, as differences of `/metrics` samples (FindCoordinator requests
count the lookups and the confirmations of one or two ids, larger
confirmations are Metadata requests; one coordinator is affected, so each
figure is also per affected coordinator):

{storm_table}

Coordinator lookups per second from the kill: {lps}. A retry backoff is
100 ms doubling to 1 s (the last one begun counted whole): the broker-down
window spans {win['down']['backoffs']} of them, hence
**{per_backoff['down']:.2f} lookups per backoff** per affected coordinator while the broker
is down; {per_backoff['outage']:.2f} and {per_backoff['phase']:.2f} over the other two windows. The busiest
second, {peak_at} to {peak_at + 1} s after the kill, had **{peak:.1f} lookups per backoff**
begun in it (the schedule starts when the service notices the failure,
which the 1 s samples do not show: it is anchored at the tenth of the
first second with a lookup that fits best).

### Targets on the cluster

{target_table}
"""
