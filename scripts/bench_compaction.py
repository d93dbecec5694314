#!/usr/bin/env python3
"""The CPU of one merge: spans per CPU-second of compaction, process-wide.

For each span source (`weft loadgen`'s replayed spans, telemetrygen's, and `weft loadgen
--realistic`'s), a weft with compaction off takes about 800k spans and cuts them into head
blocks (four of about 190k for the first two, the middle tier that the default policy merges
into one final block, cut at `--block-max-spans 190000`: with the default head these loads make
one cut that is final already; seven or eight of about 110k for realistic spans, which fill
the 64 MiB head first, and whose first merge takes four of them). That data directory is the
fixture. Each round
copies it, starts weft on the copy with compaction every second, and reads the process's CPU
from /ready until every merge the fixture calls for is done, while nothing else runs. Reported per source: the median
of the rounds' CPU seconds, microseconds per span written, and the compactor's own metric
(weft_compaction_cpu_seconds_total), which should agree with the process figure.

With --base, a second binary merges the same fixture in alternate rounds and the median of the
per-round ratios is reported too (the shared host's drift cancels out of a ratio).
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ingest import Server, metrics  # noqa: E402
from benchlib import cpu_seconds, emit, free_port, wait_http  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUIET_PORTS = {k: "0" for k in ("WEFT_ZIPKIN_PORT", "WEFT_JAEGER_HTTP_PORT", "WEFT_JAEGER_GRPC_PORT",
                                "WEFT_JAEGER_QUERY_PORT", "WEFT_XRAY_PORT", "WEFT_JAEGER_COMPACT_PORT",
                                "WEFT_JAEGER_BINARY_PORT", "WEFT_SAMPLING_HTTP_PORT", "WEFT_SAMPLING_GRPC_PORT")}


def make_fixture(weft, telemetrygen, source, out):
    small_cuts = [] if source == "realistic" else ["--block-max-spans", "190000"]
    s = Server(weft, ["--compaction-interval", "0", *small_cuts])
    try:
        if source in ("loadgen", "realistic"):
            # realistic: 15 attributes per span with high-cardinality values, so attribute blobs
            # rarely repeat and the 16 MiB head is cut at about 30,000 spans (29 head blocks).
            extra = ["--realistic", "--time-range-secs", "600"] if source == "realistic" else []
            subprocess.run([weft, "loadgen", "--endpoint", f"127.0.0.1:{s.grpc}", "--duration", "60",
                            "--max-spans", "800000", "--concurrency", "32", "--connections", "4", *extra],
                           check=True, capture_output=True)
        else:
            procs = [subprocess.Popen([telemetrygen, "traces", "--otlp-insecure", "--otlp-endpoint",
                                       f"127.0.0.1:{s.grpc}", "--duration", "20s", "--rate", "1280",
                                       "--workers", "8", "--child-spans", "9", "--batch-size", "512"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(4)]
            for p in procs:
                p.wait()
        time.sleep(1)
        if not s.wait_blocks_written():
            sys.exit("the head was not cut into blocks")
        s.proc.send_signal(signal.SIGTERM)
        s.proc.wait(30)
        shutil.copytree(os.path.join(s.dir, "data"), out)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
        shutil.rmtree(s.dir, ignore_errors=True)


def merge_once(weft, fixture):
    d = tempfile.mkdtemp(prefix="weft-bench-compact-")
    data = os.path.join(d, "data")
    shutil.copytree(fixture, data)
    http, grpc, otlp_http = free_port(), free_port(), free_port()
    log = open(os.path.join(d, "weft.log"), "w")
    p = subprocess.Popen([weft, "--data-dir", data, "--http-port", str(http), "--otlp-grpc-port", str(grpc),
                          "--otlp-http-port", str(otlp_http), "--compaction-interval", "1"],
                         env={**os.environ, **QUIET_PORTS}, stdout=log, stderr=log)
    try:
        wait_http(f"http://127.0.0.1:{http}/ready", p, "weft", log.name)
        c0 = cpu_seconds(p.pid)
        deadline = time.time() + 120
        while time.time() < deadline:
            m = metrics(http)
            if m.get("weft_compactions_total", 0) >= 1:
                break
            time.sleep(0.5)
        else:
            sys.exit(f"no compaction within 120 s; see {log.name}")
        # Until quiescent: a fixture of many small blocks takes more than one merge. Done when
        # no merge finished and the process used under 30 ms of CPU, twice in a row.
        last, prev_cpu, calm = m.get("weft_compactions_total", 0), cpu_seconds(p.pid), 0
        while calm < 2 and time.time() < deadline + 120:
            time.sleep(1)
            n, now = metrics(http).get("weft_compactions_total", 0), cpu_seconds(p.pid)
            calm = calm + 1 if n == last and now - prev_cpu < 0.03 else 0
            last, prev_cpu = n, now
        cpu = cpu_seconds(p.pid) - c0
        m = metrics(http)
        written = m.get("weft_compaction_spans_written_total", 0)
        return {"cpu_s": round(cpu, 3), "spans_written": int(written),
                "merges": int(m.get("weft_compactions_total", 0)),
                "metric_cpu_s": round(m.get("weft_compaction_cpu_seconds_total", 0), 3),
                "us_per_span": round(cpu / written * 1e6, 3) if written else None}
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--base", help="another weft binary to merge the same fixtures in alternate rounds")
    ap.add_argument("--telemetrygen", default=os.path.join(ROOT, ".tools", "bin", "telemetrygen"))
    ap.add_argument("--sources", default="loadgen,telemetrygen,realistic")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    results = {"rounds": args.rounds, "sources": {}}
    work = tempfile.mkdtemp(prefix="weft-bench-fixtures-")
    try:
        for source in args.sources.split(","):
            if source == "telemetrygen" and not os.path.exists(args.telemetrygen):
                sys.exit(f"{args.telemetrygen} is missing: run scripts/test-deps.sh")
            fixture = os.path.join(work, source)
            make_fixture(args.weft, args.telemetrygen, source, fixture)
            runs, base_runs, ratios = [], [], []
            for _ in range(args.rounds):
                r = merge_once(args.weft, fixture)
                runs.append(r)
                if args.base:
                    b = merge_once(args.base, fixture)
                    base_runs.append(b)
                    ratios.append(b["cpu_s"] / r["cpu_s"] if r["cpu_s"] else None)
            res = {"spans_written": runs[0]["spans_written"],
                   "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
                   "us_per_span_written_median": statistics.median(r["us_per_span"] for r in runs),
                   "metric_cpu_s_median": statistics.median(r["metric_cpu_s"] for r in runs),
                   "runs": runs}
            if args.base:
                res["base_cpu_s_median"] = statistics.median(b["cpu_s"] for b in base_runs)
                res["base_over_this_median"] = round(statistics.median(x for x in ratios if x), 2)
                res["base_runs"] = base_runs
            results["sources"][source] = res
            print(source, json.dumps({k: v for k, v in res.items() if not k.endswith("runs")}), file=sys.stderr,
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(results, args.out)


if __name__ == "__main__":
    main()
