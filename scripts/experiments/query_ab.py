#!/usr/bin/env python3
"""Two weft binaries side by side on the same queries: the source of the interner figures in
docs/benchmarks/query-parallelism.md (2026-12-05).

    scripts/experiments/query_ab.py --old OLD --new NEW --data-dir KEPT \
        [--parallelism 2] [--queries cmp,ser,err] [--runs 6]

KEPT is a directory kept by `scripts/bench_search.py --keep-data` (it holds data/). Both
servers stand at once, the new one on a copy of the data; each run sends every query to one
then the other, alternating which goes first, so a noisy minute falls on both. Prints, per
query, the median wall and server CPU (utime+stime from /proc) of each and their ratio, and
every run's wall time (the spread shows which runs were slow).
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bench_search as bs  # noqa: E402
from bench_parallelism import copy_data  # noqa: E402


def queries(data):
    metas = [json.load(open(p)) for p in glob.glob(os.path.join(data, "blocks", "*", "*", "meta.json"))]
    start = min(m["min_start_unix_nano"] for m in metas) // 10**9 - 60
    end = max(m["max_end_unix_nano"] for m in metas) // 10**9 + 60
    w = {"start": start, "end": end}
    step = f"{max(60, (end - start) // 60)}s"
    metrics = "/api/metrics/query_range"
    return {
        "cmp": (metrics, {"q": "{nestedSetParent<0 && true} | compare({status = error}, 10)", **w,
                          "step": f"{end - start}s"}),
        "ser": (metrics, {"q": '{ resource.service.name = "checkout" } >> { status = error } | rate()', **w,
                          "step": step}),
        "err": (metrics, {"q": "{ status = error } | rate() by (resource.service.name)", **w, "step": step}),
        "slow": (metrics, {"q": "{ duration > 1s } | rate()", **w, "step": step}),
        "route": (metrics, {"q": "{ } | rate() by (span.http.route) | topk(5)", **w, "step": step}),
        "rbs": (metrics, {"q": "{ } | rate() by (resource.service.name)", **w, "step": step}),
        "rur": ("/api/search", {"q": "{nestedSetParent<0} >> {nestedSetParent<0 && status=error}", **w,
                                "limit": "20"}),
        "tns": ("/api/v2/search/tag/name/values", {"q": '{ resource.service.name = "checkout" }', **w}),
        "tsv": ("/api/v2/search/tag/resource.service.name/values", dict(w)),
        "grf": ("/api/service-graph", {**w, "maxSpans": "50000000"}),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--parallelism", default="2")
    ap.add_argument("--queries", default="cmp,ser,err")
    ap.add_argument("--runs", type=int, default=6)
    a = ap.parse_args()
    data = os.path.join(a.data_dir, "data")
    q = queries(data)
    names = a.queries.split(",")
    copy = tempfile.mkdtemp(prefix="query-ab-", dir=a.data_dir)
    servers = {}
    try:
        copy_data(data, os.path.join(copy, "data"))
        flags = ["--query-parallelism", a.parallelism, "--compaction-interval", "0", "--scrub-interval", "0"]
        servers = {"old": bs.Server(os.path.abspath(a.old), None, flags, data=data),
                   "new": bs.Server(os.path.abspath(a.new), None, flags, data=os.path.join(copy, "data"))}
        got = {k: {n: [] for n in names} for k in servers}
        for i in range(a.runs):
            for k in (["old", "new"] if i % 2 == 0 else ["new", "old"]):
                s = servers[k]
                for n in names:
                    path, params = q[n]
                    c0 = bs.cpu_seconds(s.proc.pid)
                    url = f"http://127.0.0.1:{s.http}{path}?{urllib.parse.urlencode(params)}"
                    status, body, ms, _ = bs.http_get(url, 300)
                    if status != 200:
                        sys.exit(f"{k} {n}: {status} {body[:300]!r}")
                    got[k][n].append((ms, 1000 * (bs.cpu_seconds(s.proc.pid) - c0)))
        for n in names:
            o, w = got["old"][n], got["new"][n]
            wo, wn = statistics.median(x[0] for x in o), statistics.median(x[0] for x in w)
            co, cn = statistics.median(x[1] for x in o), statistics.median(x[1] for x in w)
            print(f"{n}: wall old {wo:.0f} new {wn:.0f} ms (new/old {wn / wo:.2f}); "
                  f"cpu old {co:.0f} new {cn:.0f} ms ({cn / co:.2f}); "
                  f"runs old {[round(x[0]) for x in o]} new {[round(x[0]) for x in w]}", flush=True)
    finally:
        for s in servers.values():
            s.stop(keep=False)
        shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
