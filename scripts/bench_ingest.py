#!/usr/bin/env python3
"""Ingest benchmark for weft (stdlib only).

Method (also in BENCHMARKS.md):
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
"""
import argparse, json, os, re, shutil, signal, subprocess, sys, tempfile, time, urllib.request

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

def metric(port, name):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    total = 0.0
    found = False
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1]); found = True
    return total if found else None

class Server:
    def __init__(self, weft, extra=()):
        self.dir = tempfile.mkdtemp(prefix="weft-bench-")
        self.http, self.grpc, self.otlp_http = free_port(), free_port(), free_port()
        self.log = open(os.path.join(self.dir, "weft.log"), "w")
        self.proc = subprocess.Popen([weft, "--data-dir", os.path.join(self.dir, "data"), "--http-port", str(self.http),
            "--otlp-grpc-port", str(self.grpc), "--otlp-http-port", str(self.otlp_http), *extra], stdout=self.log, stderr=self.log)
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
        out = subprocess.run([args.weft, "loadgen", "--endpoint", f"127.0.0.1:{s.grpc}", "--duration", str(args.max_seconds),
            "--max-spans", str(args.spans), "--concurrency", str(args.concurrency), "--connections", "4",
            "--ids-out", ids, "--ids-every", "4"], check=True, capture_output=True, text=True).stdout
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

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--telemetrygen", default=".tools/bin/telemetrygen")
    ap.add_argument("--spans", type=int, default=3_000_000)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--tg-procs", type=int, default=4)
    ap.add_argument("--tg-seconds", type=int, default=15)
    ap.add_argument("--out", default="bench-out/ingest.json")
    ap.add_argument("--only", choices=["loadgen", "telemetrygen"])
    args = ap.parse_args()
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(), "runs": [r(args) for n, r in (("loadgen", run_loadgen), ("telemetrygen", run_telemetrygen)) if args.only in (None, n)]}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f: json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))

if __name__ == "__main__":
    main()
