#!/usr/bin/env python3
"""One tenant's flood of heavy queries against another tenant's small ones: the source of the
tenant-fairness figures in docs/benchmarks/query-frontend.md (2026-12-05).

    scripts/experiments/tenant_fairness.py --weft BIN [--queriers 2] [--flood 12]

Loads 2,000,000 realistic spans into tenant `heavy` and 200,000 into `light` (`weft loadgen
--realistic`) on one server with multi-tenancy, then stops it. Then, for one process (or a
frontend with `--queriers` block-only queriers on the same data directory):
- the heavy tenant's range query `{ } | rate() by (resource.service.name)` alone;
- the light tenant's two small queries (a `limit 20` search of one service and an error
  rate) alone, 5 times each;
- the same while `--flood` threads send the heavy query for tenant `heavy` without pause,
  and, for comparison, the heavy tenant's own small queries under its own flood.
Prints the median and the worst of each. Default ports (3200, 4317, ...) must be free.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HTTP = 3200


def ports(offset):
    names = ["otlp-grpc", "otlp-http", "zipkin", "jaeger-query", "jaeger-http", "jaeger-grpc",
             "jaeger-compact", "jaeger-binary", "xray", "sampling-http", "sampling-grpc"]
    return [x for i, n in enumerate(names) for x in (f"--{n}-port", str(20000 + 100 * offset + i))]


def start(weft, data, offset, http, log, *args):
    proc = subprocess.Popen([weft, "--data-dir", data, "--multitenancy", "true", "--fsync", "never",
                             "--http-port", str(http), *ports(offset), *args],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http}/ready", timeout=1).read()
            return proc
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise SystemExit(f"weft on port {http} did not start; see {log}")


def query(tenant, path, params):
    url = f"http://127.0.0.1:{HTTP}{path}?{urllib.parse.urlencode(params)}"
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"X-Scope-OrgID": tenant}),
                                    timeout=120) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    return time.perf_counter() - t, code


def show(tag, runs):
    ds = [d for d, _ in runs]
    codes = sorted({c for _, c in runs})
    print(f"{tag}: p50 {statistics.median(ds) * 1000:.0f} ms, max {max(ds) * 1000:.0f} ms, status {codes}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", required=True)
    ap.add_argument("--queriers", type=int, default=0, help="block-only queriers behind a frontend (0: one process)")
    ap.add_argument("--flood", type=int, default=12, help="heavy queries in flight at once")
    ap.add_argument("--keep", help="a data directory to load once and reuse")
    a = ap.parse_args()

    work = a.keep or tempfile.mkdtemp(prefix="weft-fairness-")
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    if not os.path.isdir(data):
        srv = start(a.weft, data, 0, HTTP, os.path.join(work, "load.log"))
        for tenant, spans, seed in (("heavy", 2_000_000, 1), ("light", 200_000, 2)):
            subprocess.run([a.weft, "loadgen", "--endpoint", "127.0.0.1:20000", "--realistic", "--tenant", tenant,
                            "--max-spans", str(spans), "--seed", str(seed), "--duration", "600"],
                           check=True, stdout=subprocess.DEVNULL)
        time.sleep(15)  # blocks cut and compacted
        srv.terminate()
        srv.wait()

    procs = [start(a.weft, data, 1 + i, HTTP + 101 + i, os.path.join(work, f"q{i}.log"), "--target", "querier")
             for i in range(a.queriers)]
    peers = ",".join(f"127.0.0.1:{HTTP + 101 + i}" for i in range(a.queriers))
    procs.append(start(a.weft, data, 0, HTTP, os.path.join(work, "server.log"),
                       *(["--query-peers", peers] if peers else [])))
    try:
        time.sleep(3)
        now = int(time.time())
        w = {"start": now - 7200, "end": now}
        heavy = ("/api/metrics/query_range", {"q": "{ } | rate() by (resource.service.name)", **w, "step": "60"})
        small = [("/api/search", {"q": '{ resource.service.name = "frontend" }', "limit": "20", **w}),
                 ("/api/metrics/query_range", {"q": "{ status = error } | rate()", **w, "step": "60"})]

        def smalls(tenant, n):
            runs = {0: [], 1: []}
            for _ in range(n):
                for k, (p, q) in enumerate(small):
                    runs[k].append(query(tenant, p, q))
            return runs

        show("heavy query alone", [query("heavy", *heavy) for _ in range(3)])
        for k, runs in smalls("light", 5).items():
            show(f"light tenant's small query {k} alone", runs)
        stop, flood = threading.Event(), []

        def loop():
            while not stop.is_set():
                flood.append(query("heavy", *heavy))
        threads = [threading.Thread(target=loop) for _ in range(a.flood)]
        for t in threads:
            t.start()
        time.sleep(2)
        for k, runs in smalls("light", 5).items():
            show(f"light tenant's small query {k} under {a.flood} heavy queries", runs)
        for k, runs in smalls("heavy", 2).items():
            show(f"heavy tenant's own small query {k} under its flood", runs)
        stop.set()
        for t in threads:
            t.join()
        show("heavy queries under the flood", flood)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        if not a.keep:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
