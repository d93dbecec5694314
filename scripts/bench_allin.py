#!/usr/bin/env python3
"""All-in ingest cost: spans per CPU-second of the server from the first request until it is
quiescent (the head cut into blocks and every compaction the load triggered finished), under
the load real clients send, beside the OpenTelemetry Collector into `nop` on the same load.

Load shapes (each for --seconds):
  - loadgen: `weft loadgen` saturating the server (OTLP/gRPC, 512 spans per request, 32 in
    flight): the old headline's load.
  - tg-100x512: telemetrygen, 4 processes x 8 workers, 10 spans per trace, batches of 512 spans,
    paced to about 100 requests per second (51,200 spans/s offered).
  - tg-1000x50: the same, batches of 50 spans, paced to about 1,000 requests per second.
  - realistic-100x512: `weft loadgen --realistic` (15 attributes per span, high-cardinality
    values), 100 requests of 512 spans a second, 8 in flight at most.

For weft (default settings: fsync always, head cut at 30 s, 1,000,000 spans or 64 MiB, compaction every 30 s)
the CPU time of the process is read before the load and again once it is quiescent: the head
is empty, no block waits to be written, and no compaction happened for --quiet-seconds (longer
than the compaction interval). The Collector stores nothing and has no background work; its CPU
is read after the load. Reported per shape: spans per CPU-second during the load and all-in, the
ratio to the Collector, compaction's CPU per span against the ingest path's, and write
amplification (weft_compaction_write_amplification). Tempo is not run: the environment's policy
forbids building it (AGPL); BENCHMARKS.md keeps the earlier measurement.
"""
import argparse, json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ingest import Collector, Server, metric, metrics  # noqa: E402
from benchlib import cpu_seconds, emit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHAPES = {
    # name: (batch size, traces per second per telemetrygen process, whose workers share one
    # rate limiter; 0 = loadgen). 10 spans per trace, 4 processes.
    "loadgen": (512, 0),
    "tg-100x512": (512, 1280),
    "tg-1000x50": (50, 1250),
    # `weft loadgen --realistic` paced to 100 requests of 512 spans a second: 15 attributes
    # per span with high-cardinality values, so attribute blobs rarely repeat.
    "realistic-100x512": (512, 100),
}
PROCS, WORKERS = 4, 8


def drive(args, shape, grpc_port):
    """Runs the shape's load against an OTLP/gRPC port; returns (spans sent or None, wall s)."""
    batch, rate = SHAPES[shape]
    t0 = time.time()
    if shape == "loadgen":
        out = subprocess.run([args.weft, "loadgen", "--endpoint", f"127.0.0.1:{grpc_port}", "--duration",
                              str(args.seconds), "--max-spans", "100000000", "--concurrency", "32",
                              "--connections", "4"], check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])["spans"], time.time() - t0
    if shape.startswith("realistic"):
        out = subprocess.run([args.weft, "loadgen", "--endpoint", f"127.0.0.1:{grpc_port}", "--realistic",
                              "--duration", str(args.seconds), "--rate", str(rate), "--spans-per-request",
                              str(batch), "--concurrency", "8", "--connections", "4", "--time-range-secs",
                              str(int(args.seconds))], check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])["spans"], time.time() - t0
    procs = [subprocess.Popen([args.telemetrygen, "traces", "--otlp-insecure", "--otlp-endpoint",
                               f"127.0.0.1:{grpc_port}", "--duration", f"{int(args.seconds)}s", "--rate", str(rate),
                               "--workers", str(WORKERS), "--child-spans", "9", "--batch-size", str(batch)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(PROCS)]
    for p in procs:
        p.wait()
    return None, time.time() - t0


def quiescent(s, quiet_seconds, timeout=300):
    """Waits until the head is empty, no block waits, and no compaction for quiet_seconds.

    One scrape of /metrics every 2 s: a scrape costs the server about 0.5 ms of CPU, and
    polling faster (8 scrapes a second before) put about 0.15 s of scraping into the all-in
    figure, where Prometheus scrapes every 15 s or so."""
    deadline = time.time() + timeout
    last, since = None, time.time()
    while time.time() < deadline:
        m = metrics(s.http)
        head = m.get("weft_head_spans", 0)
        flushing = m.get("weft_flushing_bytes", 0)
        done = (m.get("weft_compactions_total", 0), m.get("weft_blocks", 0))
        if done != last or head or flushing:
            last, since = done, time.time()
        elif time.time() - since >= quiet_seconds:
            return True
        time.sleep(2)
    return False


def run_weft(args, shape):
    s = Server(args.weft)
    try:
        c0 = cpu_seconds(s.proc.pid)
        sent, wall = drive(args, shape, s.grpc)
        # Acknowledged work finishes (the WAL's last group commit) before the load's CPU is read.
        time.sleep(1)
        c_load = cpu_seconds(s.proc.pid) - c0
        ok = quiescent(s, args.quiet_seconds)
        c_all = cpu_seconds(s.proc.pid) - c0
        spans = metric(s.http, "weft_spans_received_total") or 0
        comp_cpu = metric(s.http, "weft_compaction_cpu_seconds_total") or 0
        comp_spans = metric(s.http, "weft_compaction_spans_written_total") or 0
        ingest_cpu = c_all - comp_cpu
        return {"spans": int(spans), "load_wall_s": round(wall, 1), "quiescent": ok,
                "cpu_s_during_load": round(c_load, 2), "cpu_s_all_in": round(c_all, 2),
                "spans_per_cpu_s_during_load": round(spans / c_load) if c_load else None,
                "spans_per_cpu_s_all_in": round(spans / c_all) if c_all else None,
                "compactions": int(metric(s.http, "weft_compactions_total") or 0),
                "compaction_cpu_s": round(comp_cpu, 2),
                "compaction_us_per_span_written": round(comp_cpu / comp_spans * 1e6, 2) if comp_spans else None,
                "compaction_us_per_span_received": round(comp_cpu / spans * 1e6, 2) if spans else None,
                "ingest_us_per_span": round(ingest_cpu / spans * 1e6, 2) if spans else None,
                "write_amplification": metric(s.http, "weft_compaction_write_amplification"),
                "blocks": int(metric(s.http, "weft_blocks") or 0),
                "requests_per_s": None if sent else round(spans / SHAPES[shape][0] / max(wall, 1e-9))}
    finally:
        s.stop()


def run_collector(args, shape):
    c = Collector(args.otelcol, args.otelcol_config)
    try:
        c0 = cpu_seconds(c.proc.pid)
        _, wall = drive(args, shape, c.grpc)
        time.sleep(1)
        cpu = cpu_seconds(c.proc.pid) - c0
        spans = c.accepted_spans()
        return {"spans": int(spans), "load_wall_s": round(wall, 1), "cpu_s": round(cpu, 2),
                "spans_per_cpu_s": round(spans / cpu) if cpu else None}
    finally:
        c.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--telemetrygen", default=os.path.join(ROOT, ".tools", "bin", "telemetrygen"))
    ap.add_argument("--otelcol", default=os.path.join(ROOT, ".tools", "bin", "otelcol-bench"))
    ap.add_argument("--otelcol-config", default=os.path.join(ROOT, "bench", "otelcol", "config.yaml"))
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--quiet-seconds", type=float, default=35,
                    help="no compaction for this long (more than the 30 s interval) counts as quiescent")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--out")
    args = ap.parse_args()
    for tool in (args.telemetrygen, args.otelcol):
        if not os.path.exists(tool):
            sys.exit(f"{tool} is missing: run scripts/test-deps.sh and scripts/otelcol.sh")
    results = {"seconds": args.seconds, "shapes": {}}
    for shape in args.shapes.split(","):
        w = run_weft(args, shape)
        c = run_collector(args, shape)
        r = {"weft": w, "collector_nop": c}
        if w["spans_per_cpu_s_all_in"] and c["spans_per_cpu_s"]:
            r["ratio_all_in_vs_collector"] = round(w["spans_per_cpu_s_all_in"] / c["spans_per_cpu_s"], 2)
            r["ratio_during_load_vs_collector"] = round(w["spans_per_cpu_s_during_load"] / c["spans_per_cpu_s"], 2)
        if w["compaction_us_per_span_received"] is not None and w["ingest_us_per_span"]:
            r["compaction_share_of_ingest"] = round(w["compaction_us_per_span_received"] / w["ingest_us_per_span"], 3)
        results["shapes"][shape] = r
        print(shape, json.dumps(r), file=sys.stderr, flush=True)
    results["notes"] = ["Tempo 3 is not run: this environment's package policy forbids building it (AGPL)."]
    emit(results, args.out)


if __name__ == "__main__":
    main()
