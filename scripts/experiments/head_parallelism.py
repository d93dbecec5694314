#!/usr/bin/env python3
"""Searches over the head (spans not yet in a block) at each parallelism, for one or more
binaries side by side: the source of docs/benchmarks/query-parallelism.md, "the head's part on
every core" (2026-12-05).

    python3 scripts/experiments/head_parallelism.py [--spans 1000000] [--parallelism 1,2] BIN [BIN...]

Loads --spans realistic spans (start times over the last 10 minutes, needles every 100,000)
with the first binary into a head that is never cut (--block-max-age 3600, no span or byte
limit), stops it, then for each round, binary and parallelism starts a server on that data
(the WAL replays into the head) and prints each query's median of 5 runs after a warm-up, in
ms, with the CPU-seconds of the median run.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_search as bs  # noqa: E402

QUERIES = {
    "all": "{ }",
    "service": '{ resource.service.name = "frontend" }',
    "status500": "{ span.http.status_code = 500 }",
    "needle": '{ span.user.id = "needle-3" }',
    "root_under_root": "{nestedSetParent<0} >> {nestedSetParent<0 && status=error}",
    "regex": '{ span.http.url =~ ".*no-such.*" }',
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--parallelism", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    head = ["--compaction-interval", "0", "--scrub-interval", "0", "--block-max-age", "3600",
            "--block-max-spans", "100000000", "--block-max-bytes", str(4 << 30)]
    srv = bs.Server(a.bins[0], None, head)
    subprocess.run([a.bins[0], "loadgen", "--endpoint", f"127.0.0.1:{srv.grpc}", "--realistic", "--max-spans",
                    str(a.spans), "--seed", "5", "--duration", "600", "--time-range-secs", "600",
                    "--needle-every", "100000"], check=True, capture_output=True)
    data = srv.data
    srv.stop(keep=True)
    now = int(time.time())
    res = {}
    for _ in range(a.rounds):
        for b in a.bins:
            for p in a.parallelism.split(","):
                s = bs.Server(b, None, head + ["--query-parallelism", p], data=data)
                try:
                    for name, q in QUERIES.items():
                        url = f"http://127.0.0.1:{s.http}/api/search?" + urllib.parse.urlencode(
                            {"q": q, "start": now - 3600, "end": now + 60, "limit": 20})
                        bs.http_get(url, 300)
                        runs = []
                        for _ in range(5):
                            c0 = bs.cpu_seconds(s.proc.pid)
                            ms = bs.http_get(url, 300)[2]
                            runs.append((ms, bs.cpu_seconds(s.proc.pid) - c0))
                        runs.sort()
                        res.setdefault((name, b, p), []).append(runs[2])
                finally:
                    s.stop(keep=True)
    for name in QUERIES:
        cells = [f"{os.path.basename(b)} p{p}: " + ", ".join(f"{ms:.0f} ms/{cpu:.2f}s" for ms, cpu in res[(name, b, p)])
                 for b in a.bins for p in a.parallelism.split(",")]
        print(f"{name:16} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
