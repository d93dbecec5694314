#!/usr/bin/env python3
"""Before/after benchmark of two weft binaries, side by side in one run.

Runs `scripts/bench_ingest.py --only loadgen` (ingest spans per CPU-second of the server, peak
RSS, trace-by-ID latency) for the old and the new binary in turn, `--rounds` times, so drift of
the shared host hits both alike; then `scripts/bench_search.py` over the same realistic data for
each (10 million spans by default). Prints one table of medians and writes everything to --out.

    make bench-compare BASE=<git rev>      # builds BASE in a worktree, then runs this

Compare ratios, not absolute numbers: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_ingest(binary: str, out: str, spans: int) -> dict:
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_ingest.py"), "--weft", binary,
                    "--only", "loadgen", "--rounds", "1", "--spans", str(spans), "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["runs"][0]


def run_search(binary: str, out: str, spans: int, runs: int) -> dict:
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench_search.py"), "--weft", binary,
                    "--spans", str(spans), "--runs", str(runs), "--out", out], check=True)
    with open(out) as f:
        return json.load(f)


def query_latencies(search: dict) -> dict[str, float]:
    """Each query's median latency over its runs, in seconds, by name (absent: timed out)."""
    return {q["name"]: q["p50_ms"] / 1000 for q in search.get("queries", []) if "p50_ms" in q}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the weft binary before the change")
    ap.add_argument("--new", required=True, help="the weft binary after the change")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spans", type=int, default=3_000_000, help="spans per ingest run")
    ap.add_argument("--search-spans", type=int, default=10_000_000, help="0 skips the search benchmark")
    ap.add_argument("--search-runs", type=int, default=5)
    ap.add_argument("--out", default="bench-out/compare.json")
    args = ap.parse_args()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    tmp = os.path.dirname(args.out) or "."
    result: dict = {"old": args.old, "new": args.new, "ingest": {"old": [], "new": []}, "search": {}}
    for r in range(args.rounds):
        for which in ("old", "new") if r % 2 == 0 else ("new", "old"):
            run = run_ingest(getattr(args, which), os.path.join(tmp, f"compare-ingest-{which}-{r}.json"), args.spans)
            result["ingest"][which].append(run)
            print(f"round {r + 1} {which}: {run['spans_per_s_per_core']:,} spans/s/core, peak RSS "
                  f"{run['peak_rss_mb']} MB, trace by ID {run.get('trace_by_id')}", file=sys.stderr, flush=True)
    if args.search_spans:
        for which in ("old", "new"):
            result["search"][which] = run_search(getattr(args, which),
                                                 os.path.join(tmp, f"compare-search-{which}.json"),
                                                 args.search_spans, args.search_runs)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)

    def med(which: str, key: str, sub: str | None = None):
        vals = []
        for run in result["ingest"][which]:
            v = run.get(key)
            if sub is not None:
                v = (v or {}).get(sub)
            if isinstance(v, (int, float)):
                vals.append(v)
        return statistics.median(vals) if vals else None

    rows = [("ingest spans/s per core", "spans_per_s_per_core", None),
            ("peak RSS MB", "peak_rss_mb", None),
            ("trace by ID p50 ms", "trace_by_id", "p50_ms"),
            ("trace by ID p99 ms", "trace_by_id", "p99_ms")]
    print(f"\n{'median of ' + str(args.rounds) + ' rounds':<32} {'old':>14} {'new':>14} {'new/old':>8}")
    for label, key, sub in rows:
        o, n = med("old", key, sub), med("new", key, sub)
        ratio = f"{n / o:.3f}" if o and n else "-"
        print(f"{label:<32} {o if o is not None else '-':>14} {n if n is not None else '-':>14} {ratio:>8}")
    if result["search"]:
        old_q, new_q = (query_latencies(result["search"][w]) for w in ("old", "new"))
        print(f"\n{'search over ' + format(args.search_spans, ',') + ' spans (s)':<32} {'old':>14} {'new':>14} {'new/old':>8}")
        for name in old_q:
            o, n = old_q[name], new_q.get(name)
            ratio = f"{n / o:.3f}" if o and n else "-"
            print(f"{name:<32} {o:>14.4f} {n if n is not None else float('nan'):>14.4f} {ratio:>8}")


if __name__ == "__main__":
    main()
