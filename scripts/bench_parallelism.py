#!/usr/bin/env python3
"""Query parallelism: the same queries on the same data, one server with --query-parallelism 1
and one with N (default: this machine's cores), side by side (stdlib only).

Method:
  1. Load --spans realistic spans once (`scripts/bench_search.py --keep-data --runs 1`: the
     spans, needles and time range of the search benchmark), or reuse --data-dir from an
     earlier run of this script or of bench_search.py --keep-data.
  2. For each of --rounds rounds, for each parallelism (alternating, so drift hits both), start
     weft on the data (compaction and the scrubber off, so the blocks do not change), run each query once to warm the caches, then --runs timed runs one at a time.
     Record the median wall time and the server's CPU-seconds per wall-second over the timed
     runs (how many cores one query used).
  3. Print, per query, the median over the rounds of each parallelism's median, the speed-up
     (p1 time / pN time), and the cores used; write JSON to --out.

Queries: the search benchmark's searches, tag lookups, TraceQL metrics and service graph
(scripts/bench_search.py), minus trace by ID (one trace, nothing to split).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_search  # noqa: E402  (the server wrapper, the queries and their checks)

ROOT = bench_search.ROOT


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", default=os.path.join(ROOT, "target", "release", "weft"))
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--data-dir", default=None, help="a kept bench_search data directory (skips loading)")
    ap.add_argument("--keep-data", action="store_true", help="keep the loaded data directory")
    ap.add_argument("--parallelism", default=f"1,{os.cpu_count() or 2}",
                    help="comma-separated --query-parallelism values (default 1,<cores>)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per query per round")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--service", default="checkout")
    ap.add_argument("--only", default="", help="comma-separated query names to run (default: all)")
    ap.add_argument("--out", default="bench-parallelism.json")
    return ap.parse_args()


def load(args):
    """Loads the spans with bench_search.py; returns the kept directory (holding data/)."""
    out = os.path.join(tempfile.gettempdir(), f"bench-parallelism-load-{os.getpid()}.json")
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "bench_search.py"), "--weft", args.weft,
           "--spans", str(args.spans), "--runs", "1", "--keep-data", "--out", out, "--trace-queries", "10"]
    print("loading:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    return r["data_dir"]


def needle_of(data_dir):
    for path in (os.path.join(data_dir, "needles.jsonl"), os.path.join(data_dir, "..", "needles.jsonl")):
        if os.path.exists(path):
            return bench_search.read_needle(path)
    raise SystemExit(f"no needles.jsonl in {data_dir}: load with bench_search.py --keep-data")


def queries(server, args, window, start, end, needle):
    """Runs every query once (warm-up: --runs 1 through bench_search), then the timed runs."""
    ns = argparse.Namespace(runs=args.runs, timeout=args.timeout, service=args.service, measure_timeouts=0)
    warm = argparse.Namespace(**{**vars(ns), "runs": 1})
    out = []
    groups = [
        lambda a: bench_search.search_queries(server, a, window, needle),
        lambda a: bench_search.metrics_queries(server, a, window, start, end),
        lambda a: bench_search.graph_queries(server, a, window),
    ]
    for g in groups:
        g(warm)
        c0, t0 = bench_search.cpu_seconds(server.proc.pid), time.time()
        got = g(ns)
        # Group CPU: what the group's timed runs cost the server, per wall second.
        cores = (bench_search.cpu_seconds(server.proc.pid) - c0) / max(1e-9, time.time() - t0)
        for q in got:
            q["group_cores"] = round(cores, 2)
        out.extend(got)
    return out


def main():
    args = parse_args()
    weft = os.path.abspath(args.weft)
    if not os.access(weft, os.X_OK):
        sys.exit(f"no weft binary at {weft}; build it with cargo build --release -p weft-server")
    levels = [int(p) for p in args.parallelism.split(",")]
    bench_search.ONLY = {n for n in args.only.split(",") if n}
    kept = args.data_dir or load(args)
    needle = needle_of(kept)
    metas = []
    for root, _, files in os.walk(os.path.join(kept, "data", "blocks")):
        if "meta.json" in files:
            with open(os.path.join(root, "meta.json")) as f:
                metas.append(json.load(f))
    start = min(m["min_start_unix_nano"] for m in metas) // 10**9 - 60
    end = max(m["max_end_unix_nano"] for m in metas) // 10**9 + 60
    window = {"start": str(start), "end": str(end)}
    spans = sum(m["span_count"] for m in metas)
    print(f"{spans} spans in {len(metas)} blocks; parallelism {levels}, {args.rounds} rounds", flush=True)
    by = {p: {} for p in levels}
    failures = []
    for rnd in range(args.rounds):
        for p in (levels if rnd % 2 == 0 else list(reversed(levels))):
            print(f"round {rnd + 1}, --query-parallelism {p}:", flush=True)
            server = bench_search.Server(weft, None, ["--query-parallelism", str(p), "--compaction-interval", "0",
                                                      "--scrub-interval", "0"], data=os.path.join(kept, "data"))
            try:
                for q in queries(server, args, window, start, end, needle):
                    if not q.get("ok"):
                        failures.append(f"{q['name']} at parallelism {p}: {q.get('error') or q.get('status')}")
                    elif "p50_ms" in q:
                        by[p].setdefault(q["name"], []).append((q["p50_ms"], q["group_cores"]))
            finally:
                server.stop(keep=False)  # its log and temporary directory; the data stays
    rows = []
    base = levels[0]
    for name in by[base]:
        row = {"name": name}
        for p in levels:
            runs = by[p].get(name, [])
            if runs:
                row[f"p{p}_ms"] = round(statistics.median(r[0] for r in runs), 1)
                row[f"p{p}_group_cores"] = round(statistics.median(r[1] for r in runs), 2)
        for p in levels[1:]:
            if row.get(f"p{p}_ms"):
                row[f"speedup_p{p}"] = round(row[f"p{base}_ms"] / row[f"p{p}_ms"], 2)
        rows.append(row)
    result = {"benchmark": "query parallelism", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count()}, "spans": spans, "blocks": len(metas), "levels": levels,
              "rounds": args.rounds, "runs": args.runs, "queries": rows, "failures": failures}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    head = f"{'query':<22}" + "".join(f"{'p' + str(p) + ' ms':>11}" for p in levels) + \
        "".join(f"{'x p' + str(p):>8}" for p in levels[1:]) + f"{'cores':>8}"
    print("\n" + head)
    for r in rows:
        print(f"{r['name']:<22}" + "".join(f"{r.get(f'p{p}_ms', float('nan')):>11.1f}" for p in levels)
              + "".join(f"{r.get(f'speedup_p{p}', float('nan')):>8.2f}" for p in levels[1:])
              + f"{r.get(f'p{levels[-1]}_group_cores', float('nan')):>8.2f}")
    print(f"\nwrote {args.out}")
    if not args.data_dir and not args.keep_data:
        shutil.rmtree(kept, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
