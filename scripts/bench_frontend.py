#!/usr/bin/env python3
"""One query over many queriers (--query-peers): what each querier spends per search, metrics
query, tag lookup and service graph with 1, 2 and 4 queriers behind a frontend, against one
querier alone, on one data set (stdlib only).

Method:
  1. Load --spans realistic spans once (as scripts/bench_parallelism.py does: the search
     benchmark's data, kept), or reuse --data-dir.
  2. For each count of queriers: start them (`--target querier` on the data directory,
     compaction and the scrubber off) and a frontend (`--target querier --query-peers ...`),
     all on this machine, every count at once. For a querier alone: one querier, no peers.
  3. For each search and metrics query of the search benchmark named below: one warm-up
     run per setup, then --runs timed runs, the setups taking turns run by run (the lone
     querier, then 1, 2, 4 queriers, then again), so that a machine whose speed drifts moves
     every setup alike. Record the median wall time and, over the timed runs, every process's
     CPU-seconds per search (from /proc), and the jobs the frontend sent.
  4. Print per search and count: the frontend's CPU per search and per job, the queriers'
     mean and largest CPU per search, and the mean (div) and the largest (bdiv) against the
     lone querier's divided by the count (1.0: the work divides exactly). Write JSON to --out.

Every process runs on this machine's cores, so wall times show the split's overhead, not the
speed-up of separate machines. Queriers running side by side on a small machine also slow each
other (they share its caches and memory bandwidth), which separate machines would not: with
--one-job-at-a-time the frontend reaches each querier through a relay in this script, and the
relays let one job run at a time over all of them, so each querier's CPU is what it would spend
on a machine of its own (the wall times are then meaningless).
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_parallelism  # noqa: E402  (loading the data, the needle)
import bench_search  # noqa: E402  (the server wrapper, the queries and their checks)

ROOT = bench_search.ROOT
SEARCHES = ["needle", "duration_gt_1s", "service_error", "sibling_error", "root_errors", "root_under_root"]
# Span-local metrics queries and one over whole traces, then tag lookups and the service graph
# of every span (all split into jobs too).
METRICS = ["rate_by_service", "errors_rate", "duration_hist", "rate_per_count", "user_count", "root_rate",
           "service_error_rate"]
LOOKUPS = ["tag_values", "tag_names", "tag_services", "tag_names_of_service", "service_graph_all"]
FIXED = ["--target", "querier", "--compaction-interval", "0", "--scrub-interval", "0"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", default=os.path.join(ROOT, "target", "release", "weft"))
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--data-dir", default=None, help="a kept bench_search data directory (skips loading)")
    ap.add_argument("--keep-data", action="store_true", help="keep the loaded data directory")
    ap.add_argument("--queriers", default="1,2,4", help="comma-separated counts of queriers behind the frontend")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per search")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--service", default="checkout")
    ap.add_argument("--only", default=None, help="comma-separated query names to run (default: all)")
    ap.add_argument("--out", default="bench-frontend.json")
    ap.add_argument("--one-job-at-a-time", action="store_true",
                    help="relay the frontend's jobs so that one runs at a time over all queriers (CPU as on separate machines)")
    return ap.parse_args()


class Relay:
    """Forwards a frontend's requests to one querier; every relay of the run holds one lock while a
    request is forwarded, so one job runs at a time over all the queriers."""

    LOCK = threading.Lock()

    def __init__(self, target_port):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                skip = {"host", "content-length", "connection", "transfer-encoding"}
                req = urllib.request.Request(f"http://127.0.0.1:{target_port}{self.path}", data=body, method=self.command,
                                             headers={k: v for k, v in self.headers.items() if k.lower() not in skip})
                with Relay.LOCK:
                    try:
                        with urllib.request.urlopen(req, timeout=300) as r:
                            code, data, headers = r.status, r.read(), r.headers
                    except urllib.error.HTTPError as e:
                        code, data, headers = e.code, e.read(), e.headers
                self.send_response(code)
                for k, v in headers.items():
                    if k.lower() not in skip | {"date", "server"}:
                        self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def jobs_sent(frontend):
    body = bench_search.urllib.request.urlopen(f"http://127.0.0.1:{frontend.http}/metrics", timeout=30).read().decode()
    for line in body.splitlines():
        if line.startswith('weft_query_jobs_total{outcome="sent"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def names(args):
    every = SEARCHES + METRICS + LOOKUPS
    return [n for n in every if not args.only or n in args.only.split(",")]


def measure(setups, args, window, needle, start, end):
    """Per query and setup (a frontend and its queriers; the lone querier has none): wall p50,
    CPU-seconds per query of the frontend and of each querier. The setups take turns run by
    run, so that a machine that speeds up or slows down during the benchmark moves every
    setup's figures alike, not only those of the setup running at the time."""
    ns = argparse.Namespace(runs=1, timeout=args.timeout, service=args.service, measure_timeouts=0)
    rows = {count: [] for count in setups}
    for name in names(args):
        bench_search.ONLY = {name}

        def group(frontend, a):
            if name in SEARCHES or name.startswith("tag_"):
                return bench_search.search_queries(frontend, a, window, needle)
            if name.startswith("service_graph"):
                return bench_search.graph_queries(frontend, a, window)
            return bench_search.metrics_queries(frontend, a, window, start, end)

        for frontend, _ in setups.values():
            group(frontend, ns)  # warm-up
        acc = {count: {"ok": True, "ms": [], "cpu": [0.0] * (1 + len(peers)), "jobs": 0.0}
               for count, (_, peers) in setups.items()}
        for _ in range(args.runs):
            for count, (frontend, peers) in setups.items():
                a = acc[count]
                procs = [frontend] + peers
                cpu0 = [bench_search.cpu_seconds(p.proc.pid) for p in procs]
                jobs0 = jobs_sent(frontend) if peers else 0
                (q,) = [r for r in group(frontend, ns) if not r.get("skipped")]
                a["cpu"] = [t + bench_search.cpu_seconds(p.proc.pid) - c for t, p, c in zip(a["cpu"], procs, cpu0)]
                a["jobs"] += (jobs_sent(frontend) - jobs0) if peers else 0
                a["ok"] = a["ok"] and bool(q.get("ok"))
                a["ms"].append(q.get("p50_ms"))
        for count, a in acc.items():
            cpu = [c / args.runs for c in a["cpu"]]
            rows[count].append({"name": name, "ok": a["ok"], "p50_ms": statistics.median(a["ms"]),
                                "frontend_cpu_s": round(cpu[0], 4), "querier_cpu_s": [round(c, 4) for c in cpu[1:]],
                                "jobs_per_search": round(a["jobs"] / args.runs, 2)})
    return rows


def main():
    args = parse_args()
    weft = os.path.abspath(args.weft)
    if not os.access(weft, os.X_OK):
        sys.exit(f"no weft binary at {weft}; build it with cargo build --release -p weft-server")
    kept = args.data_dir or bench_parallelism.load(args)
    needle = bench_parallelism.needle_of(kept)
    metas = []
    for root, _, files in os.walk(os.path.join(kept, "data", "blocks")):
        if "meta.json" in files:
            with open(os.path.join(root, "meta.json")) as f:
                metas.append(json.load(f))
    start = min(m["min_start_unix_nano"] for m in metas) // 10**9 - 60
    end = max(m["max_end_unix_nano"] for m in metas) // 10**9 + 60
    window = {"start": str(start), "end": str(end)}
    spans = sum(m["span_count"] for m in metas)
    data = os.path.join(kept, "data")
    counts = [int(c) for c in args.queriers.split(",")]
    print(f"{spans} spans in {len(metas)} blocks; queriers {counts}", flush=True)
    failures = []
    servers, relays, setups = [], [], {}
    try:
        # Every setup at once (idle ones cost next to nothing: compaction and the scrubber off),
        # taking turns query by query and run by run (measure).
        for count in [0] + counts:
            peers = [bench_search.Server(weft, None, FIXED, data=data) for _ in range(count)]
            servers += peers
            ports = [p.http for p in peers]
            if args.one_job_at_a_time:
                relays += [Relay(p) for p in ports]
                ports = [r.port for r in relays[-count:]] if count else []
            extra = ["--query-peers", ",".join(f"127.0.0.1:{p}" for p in ports)] if peers else []
            frontend = bench_search.Server(weft, None, FIXED + extra, data=data)
            servers.append(frontend)
            setups[count] = (frontend, peers)
        results = measure(setups, args, window, needle, start, end)
        for count, rows in results.items():
            label = "alone" if count == 0 else f"{count} queriers"
            failures += [f"{r['name']} with {label}" for r in rows if not r["ok"]]
    finally:
        for s in servers:
            s.stop(keep=False)
        for r in relays:
            r.stop()
    table = []
    for name in names(args):
        alone = next(r for r in results[0] if r["name"] == name)
        row = {"name": name, "alone_ms": alone["p50_ms"], "alone_cpu_s": alone["frontend_cpu_s"]}
        for count in counts:
            r = next(r for r in results[count] if r["name"] == name)
            mean = statistics.mean(r["querier_cpu_s"])
            row[f"q{count}"] = {
                "ms": r["p50_ms"], "frontend_cpu_s": r["frontend_cpu_s"],
                "frontend_cpu_ms_per_job": round(1000 * r["frontend_cpu_s"] / r["jobs_per_search"], 2)
                if r["jobs_per_search"] else None,
                "querier_cpu_s_mean": round(mean, 4), "querier_cpu_s_max": max(r["querier_cpu_s"]),
                # 1.0: each querier spends exactly the lone querier's CPU divided by the count.
                "division": round(mean / (alone["frontend_cpu_s"] / count), 2) if alone["frontend_cpu_s"] else None,
                # The same for the busiest querier.
                "busiest_division": round(max(r["querier_cpu_s"]) / (alone["frontend_cpu_s"] / count), 2)
                if alone["frontend_cpu_s"] else None,
                "jobs_per_search": r["jobs_per_search"],
            }
        table.append(row)
    out = {"benchmark": "query frontend", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count()}, "one_job_at_a_time": args.one_job_at_a_time,
           # The loaded spans, when kept (--keep-data): for another run with --data-dir.
           "data_dir": kept if args.keep_data and not args.data_dir else None, "spans": spans, "blocks": len(metas), "runs": args.runs,
           "queries": table, "failures": failures}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"\n{'query':<18}{'alone ms':>10}{'alone cpu':>10}" +
          "".join(f"{'n=' + str(c) + ' ms':>10}{'fe cpu':>8}{'q cpu':>8}{'max':>7}{'div':>6}{'bdiv':>6}" for c in counts))
    for row in table:
        line = f"{row['name']:<18}{row['alone_ms']:>10.1f}{row['alone_cpu_s']:>10.3f}"
        for c in counts:
            r = row[f"q{c}"]
            line += (f"{r['ms']:>10.1f}{r['frontend_cpu_s']:>8.3f}{r['querier_cpu_s_mean']:>8.3f}"
                     f"{r['querier_cpu_s_max']:>7.3f}{r['division'] or float('nan'):>6.2f}"
                     f"{r['busiest_division'] or float('nan'):>6.2f}")
        print(line)
    print(f"\nwrote {args.out}")
    if not args.data_dir and not args.keep_data:
        shutil.rmtree(kept, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
