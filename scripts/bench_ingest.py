#!/usr/bin/env python3
"""Ingest benchmark for weft (stdlib only).

Method (also in BENCHMARKS.md, in short, and in docs/benchmarks/ingest.md,
"Method (`scripts/bench_ingest.py`)"):
  1. Start the release binary on a fresh data dir with default settings (fsync=always).
  2. Drive it with `weft loadgen` (OTLP/gRPC, 512 spans per request, 10 spans per trace,
     32 requests in flight) until at least --spans spans are acknowledged.
  3. Wait until the head is cut and every block is written, then read the server's CPU
     seconds (utime+stime from /proc/<pid>/stat) and peak RSS (VmHWM).
     spans/s per core = acknowledged spans / server CPU seconds (load + block building).
  4. Bytes per span = data.parquet bytes (and all block files) / spans stored.
  5. Trace-by-ID latency: `weft loadgen --query-ids` fetches random acknowledged trace IDs
     over one keep-alive connection, without a time hint, with the spans stored above.
  6. Repeat 1-3 with telemetrygen (several processes) as the client nobody here wrote.
  7. With --otelcol: the OpenTelemetry Collector (bench/otelcol: core OTLP receiver into the `nop`
     exporter, which stores nothing) driven by the same `weft loadgen` invocation as step 2;
     its CPU seconds and peak RSS are read the same way. With --rounds K, weft and the Collector
     run in turn K times (weft, collector, weft, collector, ...) and each pair gives
     ratio_vs_collector = weft spans/s per core / Collector spans/s per core; the top-level
     ratio_vs_collector is the median. The ratio cancels the shared host's speed drift, which
     moves the absolute figures by a quarter within minutes.
"""
import argparse, json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def free_port():
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")

def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0

def metrics(port):
    """One scrape of /metrics: each metric's value, summed over its labels."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        except ValueError:
            pass
    return out

def metric(port, name):
    return metrics(port).get(name)

def loadgen_cmd(args, grpc_port, ids):
    """The one `weft loadgen` invocation that drives both weft and the Collector."""
    return [args.weft, "loadgen", "--endpoint", f"127.0.0.1:{grpc_port}", "--duration", str(args.max_seconds),
        "--max-spans", str(args.spans), "--concurrency", str(args.concurrency), "--connections", "4",
        "--ids-out", ids, "--ids-every", "4"]

class Server:
    def __init__(self, weft, extra=()):
        self.dir = tempfile.mkdtemp(prefix="weft-bench-")
        self.http, self.grpc, self.otlp_http = free_port(), free_port(), free_port()
        self.log = open(os.path.join(self.dir, "weft.log"), "w")
        self.proc = subprocess.Popen([weft, "--data-dir", os.path.join(self.dir, "data"), "--http-port", str(self.http),
            "--otlp-grpc-port", str(self.grpc), "--otlp-http-port", str(self.otlp_http), *extra], stdout=self.log, stderr=self.log,
            env={**os.environ, "WEFT_ZIPKIN_PORT": "0", "WEFT_JAEGER_HTTP_PORT": "0", "WEFT_JAEGER_GRPC_PORT": "0", "WEFT_JAEGER_QUERY_PORT": "0", "WEFT_XRAY_PORT": "0",
                 "WEFT_JAEGER_COMPACT_PORT": "0", "WEFT_JAEGER_BINARY_PORT": "0",
                 "WEFT_SAMPLING_HTTP_PORT": "0", "WEFT_SAMPLING_GRPC_PORT": "0"})
        for _ in range(300):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ready", timeout=1).status == 200:
                    return
            except Exception:
                time.sleep(0.1)
        raise SystemExit("weft did not become ready; see " + self.log.name)

    def wait_blocks_written(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if metric(self.http, "weft_head_spans") == 0 and metric(self.http, "weft_flushing_bytes") == 0:
                return True
            time.sleep(0.5)
        return False

    def block_bytes(self):
        data = other = 0
        for root, _, files in os.walk(os.path.join(self.dir, "data", "blocks")):
            for f in files:
                size = os.path.getsize(os.path.join(root, f))
                if f == "data.parquet": data += size
                else: other += size
        return data, other

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try: self.proc.wait(30)
        except subprocess.TimeoutExpired: self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

def run_loadgen(args):
    s = Server(args.weft)
    try:
        ids = os.path.join(s.dir, "ids.txt")
        cpu0 = cpu_seconds(s.proc.pid)
        t0 = time.time()
        out = subprocess.run(loadgen_cmd(args, s.grpc, ids), check=True, capture_output=True, text=True).stdout
        load = json.loads(out.strip().splitlines()[-1])
        load_cpu = cpu_seconds(s.proc.pid) - cpu0
        ok = s.wait_blocks_written()
        cpu = cpu_seconds(s.proc.pid) - cpu0
        spans = load["spans"]
        received = metric(s.http, "weft_spans_received_total")
        data, other = s.block_bytes()
        rss = peak_rss(s.proc.pid)
        q = json.loads(subprocess.run([args.weft, "loadgen", "--query-ids", ids, "--query-http", f"127.0.0.1:{s.http}",
            "--queries", str(args.queries)], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        return {
            "client": "weft loadgen", "spans_acknowledged": spans, "spans_received_metric": received,
            "load_errors": load["errors"], "load_wall_s": round(load["elapsed_s"], 2), "client_spans_per_s": round(load["spans_per_s"]),
            "server_cpu_s_during_load": round(load_cpu, 2), "server_cpu_s_total": round(cpu, 2),
            "spans_per_s_per_core": round(spans / cpu), "blocks_all_written": ok,
            "peak_rss_mb": round(rss / 2**20, 1), "data_parquet_bytes_per_span": round(data / spans, 2),
            "all_block_files_bytes_per_span": round((data + other) / spans, 2),
            "trace_by_id": q,
        }
    finally:
        s.stop()

class Collector:
    """The OpenTelemetry Collector built by scripts/otelcol.sh, on free ports, logging to a temp dir."""
    def __init__(self, binary, config):
        self.dir = tempfile.mkdtemp(prefix="otelcol-bench-")
        self.grpc, self.metrics = free_port(), free_port()
        self.log = open(os.path.join(self.dir, "otelcol.log"), "w")
        env = dict(os.environ, OTELCOL_BENCH_GRPC_ENDPOINT=f"127.0.0.1:{self.grpc}", OTELCOL_BENCH_METRICS_PORT=str(self.metrics))
        self.proc = subprocess.Popen([binary, "--config", config], stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.grpc), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        log = open(self.log.name).read()
        self.stop()
        raise SystemExit("the Collector did not open its gRPC port:\n" + log)

    def accepted_spans(self):
        # otelcol_receiver_accepted_spans, with or without the _total suffix (it moved between releases).
        for name in ("otelcol_receiver_accepted_spans_total", "otelcol_receiver_accepted_spans"):
            try:
                v = metric(self.metrics, name)
            except Exception:
                return None
            if v is not None:
                return v
        return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try: self.proc.wait(30)
        except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

def collector_version(binary):
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return None

def run_collector(args):
    c = Collector(args.otelcol, args.otelcol_config)
    try:
        ids = os.path.join(c.dir, "ids.txt")
        cpu0 = cpu_seconds(c.proc.pid)
        out = subprocess.run(loadgen_cmd(args, c.grpc, ids), check=True, capture_output=True, text=True).stdout
        load = json.loads(out.strip().splitlines()[-1])
        load_cpu = cpu_seconds(c.proc.pid) - cpu0
        # Nothing is left to do once the last request is answered (nop drops spans in the call);
        # a short settle takes in what the Go runtime (GC) still spends on the load.
        time.sleep(1)
        cpu = cpu_seconds(c.proc.pid) - cpu0
        spans = load["spans"]
        return {
            "client": "weft loadgen", "server": "otelcol (otlp receiver -> nop exporter)",
            "spans_acknowledged": spans, "spans_received_metric": c.accepted_spans(),
            "load_errors": load["errors"], "load_last_error": load.get("last_error", ""),
            "load_wall_s": round(load["elapsed_s"], 2), "client_spans_per_s": round(load["spans_per_s"]),
            "server_cpu_s_during_load": round(load_cpu, 2), "server_cpu_s_total": round(cpu, 2),
            "spans_per_s_per_core": round(spans / cpu) if cpu else None,
            "peak_rss_mb": round(peak_rss(c.proc.pid) / 2**20, 1),
        }
    finally:
        c.stop()

def run_telemetrygen(args):
    if not os.path.exists(args.telemetrygen):
        return {"client": "telemetrygen", "skipped": "telemetrygen not installed"}
    s = Server(args.weft)
    try:
        cpu0 = cpu_seconds(s.proc.pid)
        procs = [subprocess.Popen([args.telemetrygen, "traces", "--otlp-insecure", "--otlp-endpoint", f"127.0.0.1:{s.grpc}",
            "--duration", f"{args.tg_seconds}s", "--rate", "0", "--workers", "4", "--child-spans", "9", "--batch-size", "512"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(args.tg_procs)]
        for p in procs: p.wait()
        time.sleep(1)
        ok = s.wait_blocks_written()
        cpu = cpu_seconds(s.proc.pid) - cpu0
        spans = metric(s.http, "weft_spans_received_total") or 0
        data, other = s.block_bytes()
        return {"client": f"telemetrygen x{args.tg_procs} (4 workers each)", "spans_acknowledged": int(spans),
                "server_cpu_s_total": round(cpu, 2), "spans_per_s_per_core": round(spans / cpu) if cpu else None,
                "blocks_all_written": ok, "peak_rss_mb": round(peak_rss(s.proc.pid) / 2**20, 1),
                "data_parquet_bytes_per_span": round(data / spans, 2) if spans else None,
                "all_block_files_bytes_per_span": round((data + other) / spans, 2) if spans else None}
    finally:
        s.stop()

RUNS = ("loadgen", "collector", "telemetrygen")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--telemetrygen", default=".tools/bin/telemetrygen")
    ap.add_argument("--otelcol", help="OpenTelemetry Collector binary (scripts/otelcol.sh builds .tools/bin/otelcol-bench); "
        "without it there is no collector run")
    ap.add_argument("--otelcol-config", default=os.path.join(ROOT, "bench", "otelcol", "config.yaml"))
    ap.add_argument("--rounds", type=int, default=1, help="run weft and the Collector in turn this many times")
    ap.add_argument("--spans", type=int, default=3_000_000)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--tg-procs", type=int, default=4)
    ap.add_argument("--tg-seconds", type=int, default=15)
    ap.add_argument("--out", default="bench-out/ingest.json")
    ap.add_argument("--only", help="comma-separated subset of " + ", ".join(RUNS) + " (default: all; collector only with --otelcol)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else set(RUNS)
    if not only <= set(RUNS):
        ap.error(f"--only: unknown run(s) {', '.join(sorted(only - set(RUNS)))}; choose from {', '.join(RUNS)}")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if "collector" in only and not args.otelcol:
        if args.only:
            ap.error("--only collector needs --otelcol PATH (scripts/otelcol.sh builds .tools/bin/otelcol-bench)")
        only.discard("collector")
    if "collector" in only and not os.path.exists(args.otelcol):
        ap.error(f"--otelcol {args.otelcol}: no such file (run scripts/otelcol.sh)")

    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(), "runs": []}
    rounds = []
    for i in range(args.rounds if only & {"loadgen", "collector"} else 0):
        r = {"round": i + 1}
        if "loadgen" in only: r["weft"] = run_loadgen(args)
        if "collector" in only: r["collector"] = run_collector(args)
        if "weft" in r and "collector" in r and r["collector"]["spans_per_s_per_core"]:
            r["ratio_vs_collector"] = round(r["weft"]["spans_per_s_per_core"] / r["collector"]["spans_per_s_per_core"], 3)
        rounds.append(r)
        print(f"round {i + 1}: " + ", ".join(f"{k} {r[k]['spans_per_s_per_core']:,} spans/s/core" for k in ("weft", "collector") if k in r)
              + (f", ratio {r['ratio_vs_collector']}" if "ratio_vs_collector" in r else ""), file=sys.stderr, flush=True)
    # "runs" keeps its old shape: the (first) weft loadgen run, then telemetrygen.
    if rounds and "weft" in rounds[0]: results["runs"].append(rounds[0]["weft"])
    if "telemetrygen" in only: results["runs"].append(run_telemetrygen(args))
    if "collector" in only or args.rounds > 1:
        results["collector_version"] = collector_version(args.otelcol) if "collector" in only else None
        results["rounds"] = rounds
        for k in ("weft", "collector"):
            v = [r[k]["spans_per_s_per_core"] for r in rounds if k in r and r[k]["spans_per_s_per_core"]]
            if v: results[f"{k}_spans_per_s_per_core_median"] = round(statistics.median(v))
        ratios = [r["ratio_vs_collector"] for r in rounds if "ratio_vs_collector" in r]
        if ratios:
            results["ratios_vs_collector"] = ratios
            results["ratio_vs_collector"] = round(statistics.median(ratios), 3)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f: json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    if "ratio_vs_collector" in results:
        print(f"ratio_vs_collector (weft spans/s/core / Collector spans/s/core, median of {len(ratios)}): "
              f"{results['ratio_vs_collector']}  [{', '.join(map(str, ratios))}]")

if __name__ == "__main__":
    main()
