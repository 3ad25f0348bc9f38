#!/usr/bin/env python3
"""The service's memory under a flood of distinct role names.

    bench/memory_flood.py                    # 150,000 names of 900 bytes
    bench/memory_flood.py --names 60000 --length 32000

What anyone who can reach the API can do: send POST /authority/check with
batches of 1,000 distinct unknown role names (each a vacant verdict), so
that every name is looked up once and its coordinator remembered. It starts
its own Kafka broker (scripts/kafka, instance "bench-memory"), builds the
service in release mode and runs it with the chart's defaults (the
binary's, and the chart's 256 MiB memory limit in mind), then prints the
process's RSS and the bytes the caches account for, every 10,000 names.
The caches must plateau at their bounds; RSS must stay well under the
chart's limit. docs/operations.md (Memory) has the figures and the
formula.
"""

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Service, kafka, metric_sum, rss_mib, run, say  # noqa: E402

LIMIT_MIB = 256  # the chart's resources.limits.memory


def post(url, body):
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return response.status


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", type=int, default=150_000)
    parser.add_argument("--length", type=int, default=900)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    batch = max(1, min(1000, (1 << 20) // (args.length + 40) - 1))

    say("building the service (release)")
    run(["cargo", "build", "--release", "--locked", "--bin", "krabka-authority"])
    name = "bench-memory"
    bootstrap = kafka("start", "--name", name).strip()
    service = None
    try:
        service = Service(bootstrap, "__coordination_state")
        ready = service.wait_ready()
        time.sleep(2)
        base = rss_mib(service.proc.pid)
        say(f"ready after {ready:.2f}s; RSS {base:.1f} MiB before the flood")
        print(f"| names sent | RSS MiB | coordinator table (accounted) MiB |")
        print(f"|---:|---:|---:|")
        sent = 0
        lock = threading.Lock()
        url = service.url + "/authority/check"

        def worker():
            nonlocal sent
            while True:
                with lock:
                    if sent >= args.names:
                        return
                    start = sent
                    sent += batch
                items = [{"role": f"{i:0>{args.length}}", "token": "1:0"}
                         for i in range(start, min(start + batch, args.names))]
                status = post(url, json.dumps(items).encode())
                if status != 200:
                    sys.exit(f"bench: POST answered {status}")

        peak, step = base, 10_000
        threads = [threading.Thread(target=worker) for _ in range(args.workers)]
        for t in threads:
            t.start()
        reported = 0
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            rss = rss_mib(service.proc.pid)
            peak = max(peak, rss)
            with lock:
                now = sent
            if now >= reported + step:
                reported = now - now % step
                table = metric_sum(service.metrics(), "krabka_coordinator_cache_bytes") / 2**20
                print(f"| {reported:,} | {rss:.1f} | {table:.1f} |", flush=True)
        for t in threads:
            t.join()
        time.sleep(1)
        rss = rss_mib(service.proc.pid)
        peak = max(peak, rss)
        samples = service.metrics()
        table = metric_sum(samples, "krabka_coordinator_cache_bytes") / 2**20
        print(f"| {args.names:,} (end) | {rss:.1f} | {table:.1f} |")
        say(f"{args.names:,} distinct names of {args.length} bytes: RSS {base:.1f} -> {rss:.1f} MiB "
            f"(peak {peak:.1f}); coordinator table {table:.1f} MiB accounted; "
            f"chart limit {LIMIT_MIB} MiB")
        if peak > LIMIT_MIB * 0.75:
            sys.exit(f"bench: peak RSS {peak:.1f} MiB leaves less than a quarter of the chart's limit")
    finally:
        if service:
            service.stop()
        kafka("stop", "--purge", "--name", name)


if __name__ == "__main__":
    main()
