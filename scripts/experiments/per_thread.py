#!/usr/bin/env python3
"""Per-thread CPU of weft under telemetrygen's load: the source of the "per-thread script"
figures in docs/benchmarks/wal.md and docs/benchmarks/all-in-cost-and-compaction.md.

    scripts/experiments/per_thread.py --weft target/release/weft [--weft OTHER] \
        [--rounds 2] [--shape 75x512|760x50] [--perf SECONDS] [-- extra weft flags]

Each round starts a fresh server per binary (alternating), sends 4 telemetrygen processes of
8 workers for 20 s, waits 2 s, and prints each thread's CPU (utime+stime from /proc), its
voluntary and involuntary context switches, the disk's write and flush requests
(/sys/block/<disk>/stat) and the WAL's commit count and time from /metrics. With --perf it
records the server for that many seconds of the load (perf record -g) into perf-<round>.data.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench_ingest import Server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TG = os.path.join(ROOT, ".tools", "bin", "telemetrygen")
TICK = os.sysconf("SC_CLK_TCK")
SHAPES = {"75x512": ("1280", "512"), "760x50": ("1250", "50")}


def threads(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        vol = int(re.search(r"voluntary_ctxt_switches:\s+(\d+)", status).group(1))
        invol = int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status).group(1))
        out[tid] = (name, cpu, vol, invol)
    return out


def disk():
    dev = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "--target", "/tmp"], capture_output=True,
                         text=True).stdout.strip().split("/")[-1]
    base = re.sub(r"\d+$", "", dev) if not os.path.exists(f"/sys/block/{dev}") else dev
    try:
        f = open(f"/sys/block/{base}/stat").read().split()
        return int(f[4]), int(f[15]) if len(f) > 15 else 0
    except OSError:
        return 0, 0


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.split()[-1])
    return total


def run(weft, shape, extra, perf, label):
    rate, batch = SHAPES[shape]
    srv = Server(weft, extra)
    try:
        pid = srv.proc.pid
        before = threads(pid)
        d0 = disk()
        procs = [subprocess.Popen([TG, "traces", "--otlp-insecure", "--otlp-endpoint", f"127.0.0.1:{srv.grpc}",
                                   "--duration", "20s", "--rate", rate, "--workers", "8", "--child-spans", "9",
                                   "--batch-size", batch], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(4)]
        rec = None
        if perf:
            time.sleep(3)
            rec = subprocess.Popen(["perf", "record", "-F", "4000", "-g", "-p", str(pid), "-o",
                                    f"perf-{label}.data", "--", "sleep", str(perf)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in procs:
            p.wait()
        if rec:
            rec.wait()
        time.sleep(2)
        after = threads(pid)
        d1 = disk()
        spans = metric(srv.http, "weft_spans_received_total")
        fs = metric(srv.http, "weft_wal_fsyncs_total")
        fss = metric(srv.http, "weft_wal_fsync_seconds_total")
    finally:
        srv.stop()
    groups = collections.OrderedDict()
    for tid, (name, cpu, vol, invol) in after.items():
        b = before.get(tid, (name, 0, 0, 0))
        key = re.sub(r"[-#]?\d+$", "", name)
        g = groups.setdefault(key, [0.0, 0, 0, 0])
        g[0] += cpu - b[1]
        g[1] += vol - b[2]
        g[2] += invol - b[3]
        g[3] += 1
    total = sum(g[0] for g in groups.values())
    print(f"== {label}: {weft} {shape} spans={spans:.0f} cpu={total:.2f}s "
          f"us/span={total / max(spans, 1) * 1e6:.3f} disk writes={d1[0] - d0[0]} flushes={d1[1] - d0[1]} "
          f"commits={fs:.0f} mean_commit_ms={fss / max(fs, 1) * 1e3:.3f}")
    for key, (cpu, vol, invol, n) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        if cpu > 0 or vol > 100:
            print(f"   {key:<24} x{n:<2} cpu={cpu:6.2f}s us/span={cpu / max(spans, 1) * 1e6:6.3f} "
                  f"vol={vol:7d} invol={invol:6d}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shape", default="75x512", choices=sorted(SHAPES))
    ap.add_argument("--perf", type=int, default=0)
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    for r in range(a.rounds):
        for i, w in enumerate(a.weft):
            run(w, a.shape, a.extra, a.perf, f"r{r}-b{i}")


if __name__ == "__main__":
    main()
