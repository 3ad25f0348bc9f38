"""What bench/run (one broker), bench/cluster.py (three brokers) and
bench/network.py (three brokers behind a delay) share:
running commands, the service under test, wrk, the Java peer, Kafka
instances, metrics, the machine and versions, and docs/benchmarks.md, whose
cluster section each mode keeps when it rewrites the other's part."""

import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECONDS = int(os.environ.get("BENCH_SECONDS", "10"))
WARMUP = 2
CONCURRENCY = [int(c) for c in os.environ.get("BENCH_CONCURRENCY", "1,64,512").split(",")]
ROLES = int(os.environ.get("BENCH_ROLES", "1000"))
# cargo's target directory: CARGO_TARGET_DIR, as cargo reads it, else target/
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target").absolute()
BIN = TARGET / "release/krabka-authority"
KAFKA = ROOT / "scripts/kafka"
DOC = ROOT / "docs/benchmarks.md"
# docs/benchmarks.md: bench/run writes what comes before this heading,
# bench/run --cluster this heading and everything after it.
CLUSTER_HEADING = "## On a three-broker cluster"
# bench/run --network writes this heading and everything after it.
NETWORK_HEADING = "## On a network with round trips"


def say(*args):
    print("bench:", *args, file=sys.stderr, flush=True)


def run(cmd, **kw):
    say("$", " ".join(str(c) for c in cmd))
    return subprocess.run(cmd, check=True, cwd=kw.pop("cwd", ROOT), **kw)


def output(cmd, **kw):
    return run(cmd, stdout=subprocess.PIPE, text=True, **kw).stdout.strip()


def kafka(*args):
    """scripts/kafka with its stdout (KRABKA_KAFKA_STATE picks the state dir)."""
    return output([KAFKA, *args])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def http_json(url, timeout=5):
    """(status, parsed body or None)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return 0, None


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid):
    """CPU time (user + system) a process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def environment(changes):
    """The service's environment: ours, RUST_LOG=warn, then `changes`
    (a value of None unsets its variable)."""
    env = {**os.environ, "RUST_LOG": "warn", **(changes or {})}
    return {k: v for k, v in env.items() if v is not None}


class Service:
    """`krabka-authority serve` on a free port (`binary`: another build;
    `env`: variables to set for it alone, None to unset one)."""

    running = []  # started and not stopped yet, for Service.stop_all

    def __init__(self, bootstrap, topic, *extra, binary=BIN, env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(Path(tempfile.gettempdir()) / f"bench-serve-{self.port}.log", "w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [binary, "serve", "--bootstrap-servers", bootstrap, "--topic", topic,
             "--listen", f"127.0.0.1:{self.port}", *extra],
            stdout=self.log, stderr=self.log, env=environment(env))
        Service.running.append(self)

    def wait_ready(self, limit=120):
        while time.monotonic() - self.started < limit:
            if http_status(self.url + "/readyz") == 200:
                return time.monotonic() - self.started
            if self.proc.poll() is not None:
                sys.exit(f"bench: the service exited; see {self.log.name}")
            time.sleep(0.02)
        sys.exit(f"bench: the service was not ready after {limit}s; see {self.log.name}")

    def metrics(self):
        """Every sample of /metrics: {(name, ((label, value), ...)): value}."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return parse_metrics(r.read().decode())

    def stop(self):
        if self not in Service.running:
            return
        Service.running.remove(self)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    @staticmethod
    def stop_all():
        for service in list(Service.running):
            service.stop()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        try:
            samples[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return samples


def metric_sum(samples, name, **labels):
    """The sum of `name`'s samples whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def wrk_command(url, concurrency, seconds):
    threads = 1 if concurrency == 1 else 2
    return ["wrk", "-t", str(threads), "-c", str(concurrency), "--timeout", "10s",
            "-s", str(ROOT / "bench/wrk/paths.lua"), "-d", f"{seconds}s", url]


def wrk_env(paths_file):
    return {**os.environ, "PATHS_FILE": str(paths_file)}


def wrk_result(out):
    """wrk's figures from the JSON line bench/wrk/paths.lua prints."""
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    r = json.loads(line)
    seconds = r["duration_us"] / 1e6
    return {"throughput": r["requests"] / seconds, "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000, "requests": r["requests"],
            "errors": r["socket_errors"] + r["non2xx"]}


def wrk(url, paths_file, concurrency, seconds=None, warmup=WARMUP):
    """`warmup` seconds of load, then `seconds` (SECONDS) measured."""
    env = wrk_env(paths_file)
    if warmup:
        subprocess.run(wrk_command(url, concurrency, warmup), env=env, check=True,
                       stdout=subprocess.DEVNULL)
    out = subprocess.run(wrk_command(url, concurrency, seconds or SECONDS), env=env,
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return wrk_result(out)


def java_peer(bootstrap, roles_file, concurrency):
    out = output(["java", "-jar", "target/describe-load.jar", "--bootstrap", bootstrap,
                  "--roles-file", str(roles_file), "--concurrency", str(concurrency),
                  "--duration", str(SECONDS), "--warmup", str(WARMUP)],
                 cwd=ROOT / "bench/java", stderr=subprocess.DEVNULL)
    r = json.loads(out.splitlines()[-1])
    return {"throughput": r["throughput"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "requests": r["checks"], "errors": r["errors"] + r["mismatches"]}


def read_roles(roles_file):
    """[(role, token)] from a `<role> <producerId>:<epoch>` file."""
    return [tuple(l.split()) for l in Path(roles_file).read_text().splitlines() if l.strip()]


def check_paths(roles, work, name="checks.paths"):
    """A wrk paths file of one authority check per role."""
    path = Path(work) / name
    path.write_text("".join(f"/roles/{r}/authority?token={t}\n" for r, t in roles))
    return path


def machine():
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // (1024 * 1024)
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem,
            "kernel": platform.release()}


def versions():
    def first(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
            return (r.stdout or r.stderr).splitlines()[0].strip()
        except OSError:
            return "n/a"
    kafka_version = re.search(r'DEFAULT_KAFKA_VERSION\s*=\s*"([^"]+)"', KAFKA.read_text())
    return {"rustc": first(["rustc", "--version"]), "java": first(["java", "-version"]),
            "kafka": os.environ.get("KRABKA_KAFKA_VERSION",
                                    kafka_version.group(1) if kafka_version else "?"),
            "wrk": first(["wrk", "--version"]),
            "krabka-authority": output([BIN, "--version"])}


def fmt(x, digits=1):
    return f"{x:,.{digits}f}"


def write_doc(single=None, cluster=None, network=None):
    """Rewrites docs/benchmarks.md with a new single-node part, cluster
    section and/or network section (bench/run, --cluster, --network); a
    part not given is kept as it is in the file."""
    old = DOC.read_text() if DOC.exists() else ""

    def cut(text, heading):
        at = text.find("\n" + heading + "\n")
        return (text, "") if at < 0 else (text[:at + 1], text[at + 1:])
    rest, old_network = cut(old, NETWORK_HEADING)
    old_single, old_cluster = cut(rest, CLUSTER_HEADING)
    single = old_single if single is None else single
    cluster = old_cluster if cluster is None else cluster
    network = old_network if network is None else network
    if not single:
        single = "# Benchmarks\n\nRun `bench/run` for the single-node sections.\n"
    doc = single.rstrip("\n") + "\n"
    for part in (cluster, network):
        if part:
            doc += "\n" + part.rstrip("\n") + "\n"
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(doc)
