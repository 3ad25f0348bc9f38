"""bench/run --network: the section "On a network with round trips" of
docs/benchmarks.md, from one run.

    bench/run --network                  # about 20 minutes (the first run also builds BENCH_BEFORE)
    BENCH_DELAYS_MS=0.5 bench/run --network
    bench/run --network --report-only    # rewrite the section from target/bench-network-results.json
    bench/run --network --price-only     # both builds alone, printed (target/bench-network-price.json);
                                         # docs/benchmarks.md is left as it is
    BENCH_CONCURRENCY=64 BENCH_DELAYS_MS=1 bench/run --network --price-only

On this machine the brokers, the service and the load share two cores and a
loopback whose round trip is tens of microseconds; a deployment's brokers
are on other machines, 0.1-1 ms away. This puts the network's delay back:
a cluster of one controller and three brokers (scripts/kafka start
--brokers 3, instance "bench-network") gets a second listener, CLIENT,
advertised at a port of bench/delay-proxy, which forwards to it holding
every chunk of bytes for the delay in each direction. Clients bootstrapped
at the proxies reach every broker through them (the brokers' own traffic
and the PLAINTEXT listener do not). Then, for no delay (PLAINTEXT, direct)
and each of BENCH_DELAYS_MS (default 0.25 and 1 ms one way):

 1. the service of this commit and of BENCH_BEFORE (dfb26ea, the last build
    without confirmation; bench/cluster.py builds it) side by side,
    alternating wrk runs at concurrency 1, 64 and 512 as bench/run --cluster
    does, with Kafka's, the service's and the proxy's CPU per 1,000 checks;
 2. the peers on the same roles and concurrencies: Kafka's Java
    Admin.describeTransactions (bench/java, describe-load) and franz-go's
    kadm.DescribeTransactions (bench/go), each in a closed loop;
 3. the round trip the proxy adds, measured through it (an echo route).

And, without delay, the scale-out: 1, 4 and 8 replicas of the service at
the same total open-loop check rate (BENCH_SCALE_RATE, default 800/s, split
evenly; after a warm-up, BENCH_SCALE_CYCLES cycles, default 3, of the
order 1 4 8 8 4 1): the brokers' CPU per 1,000 checks (every pass of a
count combined, and each cycle's 8 against 1 for the spread), Kafka requests per check, the Kafka requests
per second of each replica while idle, whether every
replica's roster views agree on each holder, and every answer's verdict.

Set KRABKA_KAFKA_STATE to keep its brokers apart from others'.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cluster as cl
from harness import (CONCURRENCY, NETWORK_HEADING, ROOT, SECONDS, TARGET, WARMUP, Service,
                     check_paths, cpu_seconds, fmt, http_json, java_peer, kafka, machine, metric_sum,
                     output, read_roles, run, say, versions, write_doc)

NETWORK = "bench-network"
TOPIC = cl.TOPIC
DELAYS_MS = [float(x) for x in os.environ.get("BENCH_DELAYS_MS", "0.25,1").split(",") if x]
RESULTS = TARGET / "bench-network-results.json"
# bench/delay-proxy is a project of its own: cargo builds it under
# CARGO_TARGET_DIR when that is set, else in its own target/.
PROXY = (Path(os.environ["CARGO_TARGET_DIR"]).absolute() if os.environ.get("CARGO_TARGET_DIR")
         else ROOT / "bench/delay-proxy/target") / "release/delay-proxy"
GO_PEER = TARGET / "describe-load-go"
REPLICAS = [1, 4, 8]
SCALE_RATE = float(os.environ.get("BENCH_SCALE_RATE", "800"))
SCALE_S = int(os.environ.get("BENCH_SCALE_SECONDS", "20"))
SCALE_CYCLES = int(os.environ.get("BENCH_SCALE_CYCLES", "3"))
SCALE_WARMUP_S = 30
IDLE_S = 10
VIEW_ROLES = 100  # roles whose views every replica is asked for

LISTENERS = [
    "listeners=PLAINTEXT://127.0.0.1:{port},CLIENT://127.0.0.1:{free1}",
    "advertised.listeners=PLAINTEXT://127.0.0.1:{port},CLIENT://127.0.0.1:{free2}",
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT,CONTROLLER:PLAINTEXT",
]


def main(args):
    if args == ["--report-only"]:
        report(json.loads(RESULTS.read_text()))
        return
    price_only = args == ["--price-only"]
    if args and not price_only:
        sys.exit("usage: bench/run --network [--report-only | --price-only]")
    for tool in ["cargo", "java", "mvn", "wrk", "git", "go"]:
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is required (wrk: apt-get install wrk)")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="krabka-bench-network-"))
    run(["cargo", "build", "--release", "--locked", "--bin", "krabka-authority",
         "--example", "bench_mint"])
    run(["cargo", "build", "--release", "--locked", "--manifest-path",
         str(ROOT / "bench/delay-proxy/Cargo.toml")])
    run(["go", "build", "-o", str(GO_PEER), "."], cwd=ROOT / "bench/go")
    run(["mvn", "-q", "-B", "package"], cwd=ROOT / "bench/java")
    before = cl.build_before()
    results = {"machine": machine(), "versions": versions(), "seconds": SECONDS,
               "load": [os.getloadavg()[0]], "roles": cl.ROLES,
               "before": {"rev": cl.BEFORE, "version": output([before, "--version"])},
               "go": output(["go", "version"]), "delays_ms": DELAYS_MS,
               "scale_rate": SCALE_RATE, "scale_cycles": SCALE_CYCLES, "networks": {}}
    cl.stop_instance(NETWORK)
    sets = [a for s in LISTENERS for a in ("--set", s)]
    direct = kafka("start", "--name", NETWORK, "--brokers", str(cl.BROKERS), *sets)
    try:
        bound = kafka("address", "--name", NETWORK, "--listener", "CLIENT").split(",")
        advertised = kafka("address", "--name", NETWORK, "--listener", "CLIENT",
                           "--advertised").split(",")
        roles_file = cl.mint(direct, work / "roles.txt")
        roles = read_roles(roles_file)
        paths = check_paths(roles, work)
        for delay in [0.0] + DELAYS_MS:
            results["networks"][str(delay)] = network(delay, direct, list(zip(advertised, bound)),
                                                      roles_file, paths, before, price_only)
        if price_only:
            (TARGET / "bench-network-price.json").write_text(json.dumps(results, indent=2))
            print(render(results))
            return
        results["scale"] = scale_out(direct, roles)
    finally:
        Service.stop_all()
        cl.stop_instance(NETWORK)
    results["load"].append(os.getloadavg()[0])
    results["bench_seconds"] = time.monotonic() - started
    say(f"done in {results['bench_seconds']:.0f} s")
    report(results)


class Proxy:
    """bench/delay-proxy in front of each broker's CLIENT listener, and an
    echo route through it to measure the round trip it adds."""

    def __init__(self, delay_ms, routes):
        self.echo = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._echo, daemon=True).start()
        probe = socket.create_server(("127.0.0.1", 0))
        self.echo_via = probe.getsockname()
        probe.close()
        echo_at = "127.0.0.1:%d" % self.echo.getsockname()[1]
        args = [str(PROXY), "--delay-us", str(round(delay_ms * 1000))]
        args += [f"{listen}={target}" for listen, target in routes]
        args.append("%s:%d=%s" % (*self.echo_via, echo_at))
        say("$", " ".join(args))
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if self.proc.stdout.readline().strip() != b"ready":
            sys.exit("bench: the delay proxy did not start")

    def _echo(self):
        while True:
            conn, _ = self.echo.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _serve(conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(65536):
            conn.sendall(data)

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def rtt(self, n=500):
        """Round trips of 100 bytes through the proxy: p50 and p99, ms."""
        conn = socket.create_connection(self.echo_via)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        took = []
        for _ in range(n):
            t = time.perf_counter()
            conn.sendall(b"x" * 100)
            got = 0
            while got < 100:
                got += len(conn.recv(65536))
            took.append((time.perf_counter() - t) * 1000)
            time.sleep(0.002)
        conn.close()
        took.sort()
        return {"p50_ms": took[n // 2], "p99_ms": took[int(n * 0.99)]}

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def go_peer(bootstrap, roles_file, concurrency):
    out = output([str(GO_PEER), "--bootstrap", bootstrap, "--roles-file", str(roles_file),
                  "--concurrency", str(concurrency), "--duration", str(SECONDS),
                  "--warmup", str(WARMUP)], stderr=subprocess.DEVNULL)
    r = json.loads(out.splitlines()[-1])
    return {"throughput": r["throughput"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "requests": r["checks"], "errors": r["errors"] + r["mismatches"]}


def network(delay, direct, routes, roles_file, paths, before, price_only=False):
    """Both builds and both peers with `delay` ms each way (0: direct)."""
    say(f"--- one-way delay {delay} ms")
    proxy = Proxy(delay, routes) if delay else None
    bootstrap = ",".join(listen for listen, _ in routes) if delay else direct
    out = {"bootstrap": bootstrap}
    try:
        if proxy:
            out["rtt_idle"] = proxy.rtt()
        after = Service(bootstrap, TOPIC)
        old = Service(bootstrap, TOPIC, binary=before)
        after.wait_ready()
        old.wait_ready()
        cl.warm({"after": after, "before": old}, paths)
        jvm = cl.KafkaCpu(NETWORK)
        abba = ["after", "before", "before", "after"]
        services = {"after": after, "before": old}
        out["price"] = {str(c): cl.alternating(services, paths, c,
                                               abba * (2 if c == 64 else 1), jvm, proxy)
                        for c in CONCURRENCY}
        after.stop()
        old.stop()
        peers = {"java": {}, "go": {}}
        for c in ([] if price_only else CONCURRENCY):
            for name, peer in (("java", java_peer), ("go", go_peer)):
                p0 = proxy.cpu() if proxy else None
                r = peer(bootstrap, roles_file, c)
                if proxy:
                    # over warmup and measurement alike: per check, an upper bound
                    r["proxy_cpu_ms_per_1000"] = 1e6 * (proxy.cpu() - p0) / max(r["requests"], 1)
                peers[name][str(c)] = r
                say(f"c={c}", name, r)
        out["peers"] = peers
        if proxy:
            out["rtt_after"] = proxy.rtt()
    finally:
        Service.stop_all()
        if proxy:
            proxy.stop()
    return out


# --- the scale-out -----------------------------------------------------------


def requests_total(samples):
    return metric_sum(samples, "krabka_kafka_requests_total")


def scale_out(bootstrap, roles):
    """1, 4 and 8 replicas at SCALE_RATE checks/s in all: after a warm-up
    (the brokers' JIT: the first minutes of a fresh cluster cost it up to
    twice the CPU per check), SCALE_CYCLES cycles of the order 1 4 8 8 4 1,
    so a drift of the brokers' cost weighs on every count alike. The
    brokers' CPU over 20 s moves by a quarter between two passes of one
    count here (their collections, the controller): one cycle's ratio is
    noise of that size, so the counts are compared over every cycle, and
    each cycle's own ratio is kept to show the spread."""
    jvm = cl.KafkaCpu(NETWORK, idle_s=1)
    say(f"--- warm-up: 1 replica, {SCALE_WARMUP_S} s")
    warm = Service(bootstrap, TOPIC)
    try:
        warm.wait_ready()
        probe = cl.Probe(warm.url, roles, rate=SCALE_RATE)
        probe.start()
        time.sleep(SCALE_WARMUP_S)
        probe.stop()
    finally:
        warm.stop()
    passes = {str(n): [] for n in REPLICAS}
    for _ in range(SCALE_CYCLES):
        for n in REPLICAS + REPLICAS[::-1]:
            passes[str(n)].append(scale_pass(bootstrap, roles, n, jvm))
    out = {n: combined(p) for n, p in passes.items()}
    out[str(REPLICAS[-1])]["cycle_ratios"] = cycle_ratios(passes[str(REPLICAS[0])],
                                                          passes[str(REPLICAS[-1])])
    return out


def cycle_ratios(first, last):
    """Each cycle's Kafka CPU per check of `last`'s two passes against
    `first`'s two (a cycle runs each count twice)."""
    def per_check(passes):
        return sum(p["kafka_cpu_s"] for p in passes) / max(sum(p["checks"] for p in passes), 1)
    return [ratio(per_check(last[i:i + 2]), per_check(first[i:i + 2]))
            for i in range(0, min(len(first), len(last)), 2)]


def combined(passes):
    """The passes of one replica count as one: sums over both, the views
    and verdicts of every pass, and each pass's own CPU per check."""
    checks = sum(p["checks"] for p in passes)
    seconds = sum(p["seconds"] for p in passes)
    outcomes = {}
    for p in passes:
        for k, x in p["outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + x
    idle_by_api = {}
    for p in passes:
        for api, x in p["idle_by_api_per_replica_s"].items():
            idle_by_api[api] = idle_by_api.get(api, 0) + x / len(passes)
    return {
        "checks": checks,
        "checks_per_s": checks / seconds,
        "kafka_cpu_ms_per_1000": 1e6 * sum(p["kafka_cpu_s"] for p in passes) / max(checks, 1),
        "kafka_cpu_above_idle_ms_per_1000":
            1e6 * sum(p["kafka_cpu_above_idle_s"] for p in passes) / max(checks, 1),
        "passes_kafka_cpu_ms_per_1000": [1e6 * p["kafka_cpu_s"] / max(p["checks"], 1)
                                         for p in passes],
        "kafka_requests_per_check": sum(p["requests"] for p in passes) / max(checks, 1),
        "idle_requests_per_replica_s": [x for p in passes for x in p["idle_requests_per_replica_s"]],
        "idle_by_api_per_replica_s": idle_by_api,
        "outcomes": outcomes,
        "wrong_200": outcomes.get("http:200", 0),
        "views": {"roles": passes[0]["views"]["roles"],
                  "disagree": max(p["views"]["disagree"] for p in passes),
                  "examples": [e for p in passes for e in p["views"]["examples"]][:3],
                  "leased": min(p["views"]["leased"] for p in passes),
                  "not_the_minted_token": max(p["views"]["not_the_minted_token"] for p in passes)},
    }


def scale_pass(bootstrap, roles, n, jvm):
    """n replicas: idle, then loaded at SCALE_RATE / n each."""
    say(f"--- {n} replicas")
    replicas = [Service(bootstrap, TOPIC) for _ in range(n)]
    try:
        for r in replicas:
            r.wait_ready()
        time.sleep(3)
        # Idle: what each replica asks of Kafka with nothing to check.
        m0, t0 = [r.metrics() for r in replicas], time.monotonic()
        k0 = jvm.seconds()
        time.sleep(IDLE_S)
        m1, t1 = [r.metrics() for r in replicas], time.monotonic()
        idle_kafka_cpu = (jvm.seconds() - k0) / (t1 - t0)
        idle = [(requests_total(b) - requests_total(a)) / (t1 - t0) for a, b in zip(m0, m1)]
        idle_by_api = {}
        for a, b in zip(m0, m1):
            for api, x in cl.by_label(b, "krabka_kafka_requests_total", "api").items():
                y = x - cl.by_label(a, "krabka_kafka_requests_total", "api").get(api, 0)
                idle_by_api[api] = idle_by_api.get(api, 0) + y / (t1 - t0) / n
        # Loaded: the same total rate, split evenly.
        probes = [cl.Probe(r.url, roles, rate=SCALE_RATE / n) for r in replicas]
        for p in probes:
            p.start()
        time.sleep(3)
        m0, k0, t0 = [r.metrics() for r in replicas], jvm.seconds(), time.monotonic()
        time.sleep(SCALE_S)
        m1, k1, t1 = [r.metrics() for r in replicas], jvm.seconds(), time.monotonic()
        events = [e for p in probes for e in p.stop()]
        checks = sum(metric_sum(b, "krabka_authority_checks_total")
                     - metric_sum(a, "krabka_authority_checks_total") for a, b in zip(m0, m1))
        outcomes = {}
        for e in events:
            outcomes[e[3]] = outcomes.get(e[3], 0) + 1
        out = {
            "checks": checks,
            "seconds": t1 - t0,
            "kafka_cpu_s": k1 - k0,
            "kafka_cpu_above_idle_s": max(0.0, k1 - k0 - idle_kafka_cpu * (t1 - t0)),
            "requests": sum(requests_total(b) - requests_total(a) for a, b in zip(m0, m1)),
            "idle_requests_per_replica_s": idle,
            "idle_by_api_per_replica_s": idle_by_api,
            "outcomes": outcomes,
            "views": views_agree(replicas, roles[:VIEW_ROLES]),
        }
        say(n, "replicas", {k: v for k, v in out.items() if k != "idle_requests_per_replica_s"})
        return out
    finally:
        for r in replicas:
            r.stop()


def views_agree(replicas, roles):
    """Every replica's roster view of each role: do they name the same
    holder and token, and is it the token the role was minted with?"""
    disagree, wrong, leased = [], 0, 0
    for role, token in roles:
        seen = set()
        for r in replicas:
            status, body = http_json(f"{r.url}/roles/{role}", timeout=10)
            lease = (body or {}).get("lease") or {}
            seen.add((status, lease.get("member"), lease.get("token")))
        if len(seen) > 1:
            disagree.append(role)
        tokens = {t for _, _, t in seen if t is not None}
        leased += bool(tokens)
        wrong += bool(tokens - {token})
    return {"roles": len(roles), "disagree": len(disagree), "examples": disagree[:3],
            "leased": leased, "not_the_minted_token": wrong}


# --- the report ----------------------------------------------------------------


def report(results):
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    section = render(results)
    write_doc(network=section)
    print(section)
    say("wrote docs/benchmarks.md (its network section) and", RESULTS)


def cycles(n):
    return "one cycle" if n == 1 else f"{n} cycles"


def ratio(a, b):
    return a / b if b else float("nan")


def render(results):
    m, v = results["machine"], results["versions"]
    lines = [NETWORK_HEADING, "",
             f"`bench/run --network`, one run: {m['cpu']}, {m['cores']} cores, "
             f"{m['memory_gib']} GiB, Linux {m['kernel']}; Kafka {v['kafka']} (a controller and "
             f"three brokers), {v['java']}, {results['go']}; {results['roles']} roles; "
             f"load average {results['load'][0]:.2f} at the start, {results['load'][-1]:.2f} at "
             f"the end. Every broker connection of the clients below goes through "
             f"`bench/delay-proxy`, which holds each chunk of bytes for the one-way delay in "
             f"each direction (none: direct). Builds: this commit (*after*) and "
             f"{results['before']['rev']} (*before*, no confirmation), alternating wrk runs of "
             f"{max(2, results['seconds'] // 2)} s; the peers in a closed loop of "
             f"{results['seconds']} s each.", ""]
    targets = []
    for delay, net in results["networks"].items():
        d = float(delay)
        lines.append(f"### One-way delay {d:g} ms" if d else "### No delay (loopback)")
        lines.append("")
        if "rtt_idle" in net:
            lines.append(f"Round trip through the proxy, 100 bytes: p50 "
                         f"{net['rtt_idle']['p50_ms']:.2f} ms, p99 {net['rtt_idle']['p99_ms']:.2f} ms "
                         f"idle; p50 {net['rtt_after']['p50_ms']:.2f} ms, p99 "
                         f"{net['rtt_after']['p99_ms']:.2f} ms after the load (loopback alone: "
                         f"about 0.03 ms).")
            lines.append("")
        lines += ["| client | c | checks/s | p50 ms | p99 ms | errors | Kafka requests / check "
                  "| its CPU ms / 1,000 | Kafka CPU ms / 1,000 | proxy CPU ms / 1,000 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in net["price"]:
            for label in ("after", "before"):
                r = net["price"][c][label]
                k = r["kafka"]
                per_check = sum(k["per_1000_by_api"].values()) / 1000
                lines.append(
                    f"| service, {label} | {c} | {fmt(r['throughput'], 0)} | {r['p50_ms']:.2f} "
                    f"| {r['p99_ms']:.2f} | {r['errors']} | {per_check:.2f} "
                    f"| {fmt(k['cpu_ms_per_1000'], 0)} | {fmt(k['kafka_cpu_ms_per_1000'] or 0, 0)} "
                    f"| {fmt(k['proxy_cpu_ms_per_1000'], 0) if k.get('proxy_cpu_ms_per_1000') is not None else '-'} |")
            for name, title in (("java", "Java Admin"), ("go", "franz-go kadm")):
                r = net["peers"][name].get(c)
                if r is None:
                    continue
                proxy = r.get("proxy_cpu_ms_per_1000")
                lines.append(f"| {title} | {c} | {fmt(r['throughput'], 0)} | {r['p50_ms']:.2f} | "
                             f"{r['p99_ms']:.2f} | {r['errors']} | 1 | - | - | "
                             f"{fmt(proxy, 0) if proxy is not None else '-'} |")
        lines.append("")
        name = f"{d:g} ms" if d else "no delay"
        price = net["price"]

        def builds(c, key):
            a, b = price[c]["after"][key], price[c]["before"][key]
            return ratio(a, b)
        if "1" in price:
            r = builds("1", "p50_ms")
            targets.append((f"{name}: p50 at c=1, after / before", r, "≤ 1.15", r <= 1.15))
        for c in ("64", "512"):
            if c in price:
                r = builds(c, "throughput")
                targets.append((f"{name}: checks/s at c={c}, after / before", r, "≥ 0.90",
                                r >= 0.90))
        peers64 = [net["peers"][p]["64"] for p in ("java", "go") if "64" in net["peers"][p]]
        if "64" in price and peers64:
            peer = max(peers64, key=lambda r: r["throughput"])
            mine = price["64"]["after"]
            r = ratio(mine["throughput"], peer["throughput"])
            targets.append((f"{name}: checks/s at c=64, service / better peer", r, "≥ 5", r >= 5))
            r = ratio(mine["p99_ms"], peer["p99_ms"])
            targets.append((f"{name}: p99 at c=64, service / better peer", r, "< 1", r < 1))
    scale = results.get("scale")
    if scale:
        lines += ["### Scale-out: replicas at one total rate", "",
                  f"Open-loop checks at {results['scale_rate']:.0f}/s in all, split evenly over "
                  f"the replicas, no delay; after {SCALE_WARMUP_S} s of warm-up, "
                  f"{cycles(results.get('scale_cycles', 1))} of the order 1 4 8 8 4 1, "
                  f"{SCALE_S} s each, every pass of a count combined. Kafka's "
                  f"CPU is that of its four JVMs over the run, idle polls of every replica "
                  f"included (each pass's own in parentheses; above idle: less their rate with "
                  f"the replicas attached and unloaded).", "",
                  "| replicas | checks/s | Kafka CPU ms / 1,000 checks | above idle | Kafka requests / check "
                  "| idle requests / s per replica | views agreeing | wrong 200s | other answers |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for n, s in scale.items():
            idle = s["idle_requests_per_replica_s"]
            views = s["views"]
            other = {k: x for k, x in s["outcomes"].items() if k != "ok"}
            lines.append(
                f"| {n} | {fmt(s['checks_per_s'], 0)} | {fmt(s['kafka_cpu_ms_per_1000'], 0)} ("
                f"{', '.join(fmt(x, 0) for x in s.get('passes_kafka_cpu_ms_per_1000', []))}) "
                f"| {fmt(s['kafka_cpu_above_idle_ms_per_1000'], 0)} "
                f"| {s['kafka_requests_per_check']:.2f} | {min(idle):.1f}-{max(idle):.1f} "
                f"| {views['roles'] - views['disagree']} of {views['roles']} | {s['wrong_200']} "
                f"| {json.dumps(other) if other else 'none'} |")
        lines.append("")
        one = scale[str(REPLICAS[0])]
        last = scale[str(REPLICAS[-1])]
        by_api = ", ".join(f"{api} {x:.2f}" for api, x in
                           sorted(last["idle_by_api_per_replica_s"].items()) if x > 0.005)
        lines += [f"An idle replica's Kafka requests per second, by API ({REPLICAS[-1]} replicas): "
                  f"{by_api}.", ""]
        if last.get("cycle_ratios"):
            lines += [f"Each cycle's own {REPLICAS[-1]} replicas against 1 (Kafka CPU per check, "
                      f"the cycle's two passes of each): "
                      f"{', '.join(f'{x:.2f} x' for x in last['cycle_ratios'])}.", ""]
        targets.append((f"{REPLICAS[-1]} replicas: Kafka CPU per check / 1 replica's",
                        ratio(last["kafka_cpu_ms_per_1000"], one["kafka_cpu_ms_per_1000"]),
                        "≤ 1.25", ratio(last["kafka_cpu_ms_per_1000"],
                                        one["kafka_cpu_ms_per_1000"]) <= 1.25))
        targets.append(("wrong 200s, every replica count", sum(s["wrong_200"] for s in scale.values()),
                        "0", all(s["wrong_200"] == 0 for s in scale.values())))
    lines += ["### Targets on a network with round trips", "",
              "| target | measured | wanted | met |", "|---|---:|---:|---|"]
    for name, measured, wanted, met in targets:
        shown = f"{measured:.2f}" if isinstance(measured, float) else str(measured)
        lines.append(f"| {name} | {shown} | {wanted} | {'yes' if met else '**no**'} |")
    lines.append("")
    notes = ROOT / "docs/benchmarks-network-notes.md"
    if notes.exists():
        lines.append(notes.read_text())
    return "\n".join(lines)
