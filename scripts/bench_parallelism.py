#!/usr/bin/env python3
"""Query parallelism: the same queries on the same data, one server with --query-parallelism 1
and one with N (default: this machine's cores), side by side (stdlib only).

Method:
  1. Load --spans realistic spans once (`scripts/bench_search.py --keep-data --runs 1`: the
     spans, needles and time range of the search benchmark), or reuse --data-dir from an
     earlier run of this script or of bench_search.py --keep-data.
  2. Start one weft per parallelism at once, each on its own copy of the data (compaction and
     the scrubber off, so the blocks do not change). An idle server costs nothing, so they can
     stand side by side. For each of --rounds rounds and each query group (searches and tags,
     TraceQL metrics, service graph): --runs passes, each pass running every query of the
     group once on every server in turn, alternating which server goes first (the first
     round starts with an untimed pass to warm the caches). A quiet or noisy minute on this
     shared machine then falls on both parallelisms, not on one server's whole turn. Record
     each query's median wall time per round and the server's CPU-seconds per wall-second
     over the group's timed passes (how many cores one query used).
  3. Print, per query, the median over the rounds of each parallelism's median, the speed-up
     (p1 time / pN time), the spread of the per-round speed-ups, and the cores used; write
     JSON to --out.

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


def groups(args, window, start, end, needle):
    """The query groups, each a function of (server, namespace with runs) returning results."""
    return [
        lambda server, a: bench_search.search_queries(server, a, window, needle),
        lambda server, a: bench_search.metrics_queries(server, a, window, start, end),
        lambda server, a: bench_search.graph_queries(server, a, window),
    ]


def run_pass(group, server, args, runs=1):
    """One pass of `group` on `server`: each query `runs` times. Returns the results and the
    server's CPU-seconds over the pass."""
    ns = argparse.Namespace(runs=runs, timeout=args.timeout, service=args.service, measure_timeouts=0)
    c0 = bench_search.cpu_seconds(server.proc.pid)
    got = group(server, ns)
    return got, bench_search.cpu_seconds(server.proc.pid) - c0


def copy_data(src, dst):
    """A copy of a data directory for a second server (reflinked where the file system can)."""
    if subprocess.run(["cp", "-a", "--reflink=auto", src, dst]).returncode != 0:
        shutil.copytree(src, dst)


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
    copies = []
    servers = {}
    try:
        for i, p in enumerate(levels):
            data = os.path.join(kept, "data")
            if i > 0:
                data = tempfile.mkdtemp(prefix=f"bench-parallelism-p{p}-", dir=os.path.dirname(kept))
                copies.append(data)
                data = os.path.join(data, "data")
                copy_data(os.path.join(kept, "data"), data)
            servers[p] = bench_search.Server(weft, None, ["--query-parallelism", str(p), "--compaction-interval", "0",
                                                          "--scrub-interval", "0"], data=data)
        turn = 0
        for rnd in range(args.rounds):
            for gi, group in enumerate(groups(args, window, start, end, needle)):
                times = {p: {} for p in levels}
                busy = {p: [0.0, 0.0] for p in levels}  # CPU-seconds, wall seconds
                print(f"round {rnd + 1}, group {gi + 1}: parallelism {levels} in turn, {args.runs} passes",
                      flush=True)
                for k in range(args.runs + (1 if rnd == 0 else 0)):
                    warm = rnd == 0 and k == 0
                    for p in (levels if turn % 2 == 0 else list(reversed(levels))):
                        t0 = time.time()
                        got, cpu = run_pass(group, servers[p], args)
                        if warm:
                            continue
                        busy[p][0] += cpu
                        busy[p][1] += time.time() - t0
                        for q in got:
                            if not q.get("ok"):
                                failures.append(f"{q['name']} at parallelism {p}: {q.get('error') or q.get('status')}")
                            elif "p50_ms" in q:
                                times[p].setdefault(q["name"], []).append(q["p50_ms"])
                    turn += 1
                for p in levels:
                    # Group CPU: what the group's timed passes cost the server, per wall second.
                    cores = round(busy[p][0] / max(1e-9, busy[p][1]), 2)
                    for name, ms in times[p].items():
                        by[p].setdefault(name, []).append((statistics.median(ms), cores))
    finally:
        for server in servers.values():
            server.stop(keep=False)  # its log and temporary directory; the data stays
        for c in copies:
            shutil.rmtree(c, ignore_errors=True)
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
                # Per round: the two parallelisms' medians of the same round and group, taken in turn.
                per_round = [b[0] / q[0] for b, q in zip(by[base].get(name, []), by[p].get(name, [])) if q[0]]
                row[f"speedup_p{p}_rounds"] = [round(x, 2) for x in per_round]
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
              + f"{r.get(f'p{levels[-1]}_group_cores', float('nan')):>8.2f}"
              + ("  rounds " + " ".join(f"{x:.2f}" for x in r.get(f"speedup_p{levels[-1]}_rounds", []))
                 if len(levels) > 1 else ""))
    print(f"\nwrote {args.out}")
    if not args.data_dir and not args.keep_data:
        shutil.rmtree(kept, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
