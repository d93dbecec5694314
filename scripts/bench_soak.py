#!/usr/bin/env python3
"""Soak benchmark: mixed ingest and query load with kill -9, a full disk and abusive clients.

Method (also in BENCHMARKS.md, in short, and in docs/benchmarks/soak.md,
"Method (`scripts/bench_soak.py`, part of `make bench`)"):
  1. Start the weft binary with default settings on a data directory that is a tmpfs of
     --disk-mib MiB (mounted here; needs root), so the disk can be filled for real.
  2. For --seconds: --writers threads post OTLP/protobuf batches over HTTP (50 spans in 5 new
     traces each, a new connection per thread after every failure) and record, per request,
     the latency and the answer; --readers threads run searches, tag lookups, metrics and
     trace-by-ID queries; an abuser thread cycles through hostile clients: 40 stalled 15 MiB
     uploads, slowloris headers, a 60 MiB OTLP/JSON bomb (gzip), a metrics query asking for
     series x steps far past the limit, and a flood of 1,500 idle connections.
  3. Every --kill-every seconds the server is killed with SIGKILL and restarted on the same
     data; every --fill-every seconds the disk is filled to the last byte for 10 s, then freed.
  4. At the end the server is restarted once more and acknowledged traces are read back by ID
     (protobuf; a uniform sample of --sample, or all with --full-read-back); a span acknowledged
     but not read back is lost. A metrics query counts every stored span, which must be at least
     the acknowledged count.
  Before all that, an isolation phase measures ingest latency alone and then while
  --heavy-queries threads run heavy searches and metrics without pause (queries run on
  low-priority threads, at most --max-concurrent-queries at once; ingest should barely notice).
  Reported: peak RSS of every server instance (VmHWM), ingest latency percentiles of
  acknowledged requests, answers by status, acknowledged vs read-back spans and traces,
  kills, disk-full episodes and how ingest answered during them.

Run it with the test virtualenv's Python (it uses the OTLP protobuf classes the integration
tests use): `.venv/bin/python scripts/bench_soak.py --weft target/release/weft`.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import requests  # noqa: E402
from otlpdata import make_request, make_span, new_trace_id  # noqa: E402
from pathlib import Path  # noqa: E402
from weftlib import TracesData, WeftServer, http_session  # noqa: E402


def vm(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Soak:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="weft-soak-")
        self.srv = WeftServer(Path(args.weft).resolve(), Path(self.work), name="soak")
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked = {}          # trace id -> span count, for traces of acknowledged requests
        self.latencies = []      # seconds, acknowledged requests
        self.answers = {}        # "ingest 200", "ingest 503", "query 200", ...
        self.peaks = []          # VmHWM of each server instance
        self.kills = 0
        self.fills = 0
        self.during_fill = {}
        self.filling = False
        self.down = threading.Event()

    def count(self, key):
        with self.lock:
            self.answers[key] = self.answers.get(key, 0) + 1

    # ---- server lifecycle -------------------------------------------------------------------
    def mount(self):
        os.makedirs(self.srv.data_dir, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.args.disk_mib}m", "tmpfs",
                            str(self.srv.data_dir)], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"bench_soak: cannot mount a tmpfs (needs root): {r.stderr.strip()}")

    def record_peak(self):
        if self.srv.proc and self.srv.proc.poll() is None:
            self.peaks.append(vm(self.srv.proc.pid, "VmHWM"))

    def restart(self, kill):
        self.down.set()
        self.record_peak()
        if kill:
            self.srv.kill9()
            self.kills += 1
        else:
            self.srv.stop(timeout=30)
        self.srv.start(timeout=120)
        self.down.clear()

    # ---- load -------------------------------------------------------------------------------
    def writer(self, seed):
        rng = random.Random(seed)
        s = http_session()
        while not self.stop.is_set():
            tids = [new_trace_id() for _ in range(5)]
            now = time.time_ns()
            spans = [make_span(t, name=f"op-{rng.randrange(20)}", start=now - rng.randrange(10**9),
                               attributes={"user": f"u{rng.randrange(1000)}", "i": i})
                     for t in tids for i in range(10)]
            body = make_request(spans, service=f"svc-{rng.randrange(8)}").SerializeToString()
            t0 = time.monotonic()
            try:
                r = s.post(self.srv.otlp_url, data=body, timeout=30,
                           headers={"Content-Type": "application/x-protobuf"})
                code = r.status_code
            except requests.RequestException:
                code = "error"
                s = http_session()
            dt = time.monotonic() - t0
            self.count(f"ingest {code}")
            if self.filling:
                with self.lock:
                    self.during_fill[str(code)] = self.during_fill.get(str(code), 0) + 1
            if code == 200:
                with self.lock:
                    self.latencies.append(dt)
                    for t in tids:
                        self.acked[t] = 10
            elif code != 200:
                time.sleep(0.05)

    def reader(self, seed):
        rng = random.Random(seed)
        s = http_session()
        queries = [
            ("/api/search", {"q": "{ }", "limit": "20"}),
            ("/api/search", {"q": '{ resource.service.name = "svc-3" && span.user = "u7" }', "limit": "20"}),
            ("/api/v2/search/tags", {"scope": "span"}),
            ("/api/v2/search/tag/span.user/values", {}),
            ("/api/metrics/query_range", {"q": "{ } | rate() by (resource.service.name)", "since": "15m",
                                          "step": "30s"}),
            ("/api/service-graph", {"since": "15m"}),
        ]
        while not self.stop.is_set():
            if self.down.is_set():
                time.sleep(0.2)
                continue
            path, params = rng.choice(queries)
            if rng.random() < 0.3:
                with self.lock:
                    ids = list(self.acked.keys())[-1000:]
                if ids:
                    path, params = f"/api/traces/{rng.choice(ids).hex()}", {}
            try:
                r = s.get(self.srv.api + path, params=params, timeout=60)
                self.count(f"query {r.status_code}")
            except requests.RequestException:
                self.count("query error")
                s = http_session()

    def abuser(self):
        bomb = gzip.compress(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "bomb",
            "attributes": [{"key": f"k{i}", "value": {"intValue": str(i)}} for i in range(1_000_000)]}]}]}]}
        ).encode(), 6)
        step = 0
        while not self.stop.is_set():
            if self.down.is_set():
                time.sleep(0.5)
                continue
            kind = step % 5
            step += 1
            socks = []
            try:
                if kind == 0:  # stalled uploads
                    for _ in range(40):
                        c = socket.create_connection(("127.0.0.1", self.srv.otlp_http_port), timeout=2)
                        c.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                                  b"Content-Length: 15728640\r\n\r\n" + b"\0" * (1 << 20))
                        socks.append(c)
                elif kind == 1:  # slowloris
                    for _ in range(50):
                        c = socket.create_connection(("127.0.0.1", self.srv.http_port), timeout=2)
                        c.sendall(b"GET /api/search HTTP/1.1\r\nHost: x\r\n")
                        socks.append(c)
                elif kind == 2:  # OTLP/JSON bomb
                    r = requests.post(self.srv.otlp_url, data=bomb, timeout=120, headers={
                        "Content-Type": "application/json", "Content-Encoding": "gzip"})
                    self.count(f"abuse json {r.status_code}")
                elif kind == 3:  # metrics bomb
                    end = int(time.time())
                    r = requests.get(self.srv.api + "/api/metrics/query_range", timeout=120, params={
                        "q": "{ } | count_over_time() by (span.user)", "start": str(end - 100_000),
                        "end": str(end), "step": "1s"})
                    self.count(f"abuse metrics {r.status_code}")
                else:  # connection flood
                    for _ in range(1500):
                        c = socket.socket()
                        c.setblocking(False)
                        try:
                            c.connect(("127.0.0.1", self.srv.otlp_http_port))
                        except BlockingIOError:
                            pass
                        socks.append(c)
                time.sleep(8)
            except (OSError, requests.RequestException):
                pass
            finally:
                for c in socks:
                    c.close()

    # ---- the run ----------------------------------------------------------------------------
    def fill_disk(self):
        path = os.path.join(self.srv.data_dir, "filler")
        try:
            with open(path, "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * (1 << 20))
        except OSError:
            pass
        try:
            with open(path, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * 4096)
        except OSError:
            pass
        self.filling = True
        self.fills += 1
        time.sleep(10)
        self.filling = False
        os.unlink(path)

    def isolation(self):
        """Ingest latency with no queries, then while --heavy-queries threads run heavy
        searches and metrics without pause (the first phase of the run, before any chaos)."""
        a = self.args
        writers = [threading.Thread(target=self.writer, args=(1000 + i,), daemon=True) for i in range(a.writers)]
        for t in writers:
            t.start()
        time.sleep(a.phase_seconds)  # data for the queries to chew on
        with self.lock:
            self.latencies.clear()
        time.sleep(a.phase_seconds)
        with self.lock:
            idle = sorted(self.latencies)
            self.latencies.clear()
        heavy_stop = threading.Event()
        done = [0]

        def heavy(seed):
            rng = random.Random(seed)
            s = http_session()
            qs = [("/api/search", {"q": "{ span.i > 3 }", "limit": "500", "spss": "10"}),
                  ("/api/metrics/query_range", {"q": "{ } | quantile_over_time(duration, .99) by (span.user)",
                                                "since": "10m", "step": "10s"}),
                  ("/api/search", {"q": '{ span.user =~ "u1.*" } >> { name = "op-3" }', "limit": "200"})]
            while not heavy_stop.is_set():
                path, params = rng.choice(qs)
                try:
                    s.get(self.srv.api + path, params=params, timeout=120)
                    done[0] += 1
                except requests.RequestException:
                    s = http_session()

        hs = [threading.Thread(target=heavy, args=(i,), daemon=True) for i in range(a.heavy_queries)]
        for t in hs:
            t.start()
        time.sleep(a.phase_seconds)
        with self.lock:
            loaded = sorted(self.latencies)
            self.latencies.clear()
        heavy_stop.set()
        self.stop.set()
        for t in writers + hs:
            t.join(timeout=150)
        self.stop.clear()

        def pct(lat, q):
            return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else None

        return {
            "heavy_query_threads": a.heavy_queries,
            "queries_finished_while_loaded": done[0],
            "ingest_requests": {"idle": len(idle), "loaded": len(loaded)},
            "ingest_latency_ms_idle": {"p50": pct(idle, .5), "p99": pct(idle, .99)},
            "ingest_latency_ms_loaded": {"p50": pct(loaded, .5), "p99": pct(loaded, .99)},
        }

    def run(self):
        a = self.args
        self.mount()
        try:
            self.srv.start(timeout=120)
            isolation = self.isolation() if a.heavy_queries else None
            if a.isolation_only:
                self.record_peak()
                return {"isolation": isolation, "peak_rss_mib": round(max(self.peaks or [0]) / 2**20, 1)}
            threads = [threading.Thread(target=self.writer, args=(i,), daemon=True) for i in range(a.writers)]
            threads += [threading.Thread(target=self.reader, args=(100 + i,), daemon=True) for i in range(a.readers)]
            threads.append(threading.Thread(target=self.abuser, daemon=True))
            for t in threads:
                t.start()
            started = time.monotonic()
            next_kill = started + a.kill_every
            next_fill = started + a.fill_every
            while time.monotonic() - started < a.seconds:
                now = time.monotonic()
                if now >= next_kill:
                    self.restart(kill=True)
                    next_kill = now + a.kill_every
                elif now >= next_fill:
                    self.fill_disk()
                    next_fill = time.monotonic() + a.fill_every
                time.sleep(0.5)
            self.stop.set()
            for t in threads:
                t.join(timeout=150)
            self.restart(kill=True)
            result = self.read_back()
            result["isolation"] = isolation
            return result
        finally:
            self.record_peak()
            try:
                self.srv.stop(timeout=30)
            except Exception:
                pass
            subprocess.run(["umount", "-l", str(self.srv.data_dir)], capture_output=True)
            shutil.rmtree(self.work, ignore_errors=True)

    def read_back(self):
        """Reads acknowledged traces back by ID, in parallel: all of them with --full-read-back,
        else a uniform sample of --sample; and counts every stored span with a metrics query,
        which must be at least the acknowledged count (requests whose answer was lost to a
        kill may be stored without being acknowledged)."""
        from concurrent.futures import ThreadPoolExecutor
        items = list(self.acked.items())
        if not self.args.full_read_back and len(items) > self.args.sample:
            items = random.Random(7).sample(items, self.args.sample)
        local = threading.local()

        def fetch(item):
            tid, n = item
            if not hasattr(local, "s"):
                local.s = http_session()
            r = local.s.get(f"{self.srv.api}/api/traces/{tid.hex()}", headers={"Accept": "application/protobuf"},
                            timeout=60)
            got = 0
            if r.status_code == 200:
                td = TracesData.FromString(r.content)
                got = sum(len(ss.spans) for rs in td.resource_spans for ss in rs.scope_spans)
            return tid, n, got

        found_traces = found_spans = 0
        missing = []
        with ThreadPoolExecutor(8) as ex:
            for tid, n, got in ex.map(fetch, items):
                found_spans += min(got, n)
                if got >= n:
                    found_traces += 1
                else:
                    missing.append(tid.hex())
        now = int(time.time())
        r = http_session().get(f"{self.srv.api}/api/metrics/query", timeout=600, params={
            "q": "{ } | count_over_time()", "start": str(now - 7200), "end": str(now + 60)})
        stored = sum(s.get("value", 0) for s in r.json().get("series", [])) if r.status_code == 200 else None
        lat = sorted(self.latencies)
        pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else None
        return {
            "seconds": self.args.seconds,
            "peak_rss_mib": round(max(self.peaks or [0]) / 2**20, 1),
            "peak_rss_mib_per_instance": [round(p / 2**20, 1) for p in self.peaks],
            "ingest_latency_ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "p999": pct(0.999),
                                  "max": pct(1.0) if lat else None,
                                  "mean": round(statistics.mean(lat) * 1000, 2) if lat else None},
            "answers": dict(sorted(self.answers.items())),
            "acknowledged_traces": len(self.acked),
            "acknowledged_spans": sum(self.acked.values()),
            "read_back_checked_traces": len(items),
            "read_back_traces": found_traces,
            "read_back_spans": found_spans,
            "lost_spans": sum(n for _, n in items) - found_spans,
            "stored_spans_counted": stored,
            "stored_at_least_acknowledged": stored is not None and stored >= sum(self.acked.values()),
            "missing_traces_sample": missing[:10],
            "kills": self.kills,
            "disk_full_episodes": self.fills,
            "ingest_answers_while_disk_full": self.during_fill,
        }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weft", default=os.path.join(ROOT, "target", "release", "weft"))
    p.add_argument("--seconds", type=int, default=600)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--readers", type=int, default=4)
    p.add_argument("--kill-every", type=int, default=90)
    p.add_argument("--fill-every", type=int, default=120)
    p.add_argument("--disk-mib", type=int, default=2048)
    p.add_argument("--heavy-queries", type=int, default=64,
                   help="threads of heavy queries in the isolation phase (0 skips it)")
    p.add_argument("--phase-seconds", type=int, default=20)
    p.add_argument("--isolation-only", action="store_true", help="run the isolation phase only")
    p.add_argument("--sample", type=int, default=50_000, help="acknowledged traces read back by ID")
    p.add_argument("--full-read-back", action="store_true", help="read back every acknowledged trace")
    p.add_argument("--out")
    a = p.parse_args()
    result = Soak(a).run()
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    if result.get("lost_spans"):
        sys.exit(f"bench_soak: {result['lost_spans']} acknowledged spans were not read back")
    if "stored_at_least_acknowledged" in result and not result["stored_at_least_acknowledged"]:
        sys.exit("bench_soak: fewer spans stored than acknowledged")


if __name__ == "__main__":
    main()
