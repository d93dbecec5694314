#!/usr/bin/env python3
"""Peak memory and /ready latency of large search replies: the source of
docs/benchmarks/reply-memory.md (2026-12-05).

    scripts/experiments/reply_memory.py BIN DATA_DIR [TENANT]

DATA_DIR is a data directory with multi-tenancy (tenant `heavy` by default), e.g. the one
`scripts/experiments/tenant_fairness.py --keep DIR` loads (DIR/data). Runs one Jaeger search of
10,000 traces of service `frontend` and one Tempo search of 10,000 traces with 1,000 spans each,
printing time, body size and the process's peak RSS (VmHWM), the same for a Zipkin search of 10,000
traces, then 8 Jaeger searches of 2,000
traces at once while /ready is polled every 50 ms. Ports 3700, 16996 and a few others must be
free.
"""
import subprocess, sys, time, threading, urllib.request, statistics
B, DATA = sys.argv[1], sys.argv[2]
TENANT = sys.argv[3] if len(sys.argv) > 3 else "heavy"
p = subprocess.Popen([B, "--data-dir", DATA, "--multitenancy", "true", "--http-port", "3700", "--jaeger-query-port", "16996",
    "--otlp-grpc-port", "4717", "--otlp-http-port", "4718", "--zipkin-port", "9722", "--jaeger-http-port", "14578", "--jaeger-grpc-port", "14560",
    "--jaeger-compact-port", "7141", "--jaeger-binary-port", "7142", "--xray-port", "2310", "--sampling-http-port", "6088", "--sampling-grpc-port", "6089"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def get(url, tenant=TENANT, timeout=300):
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"X-Scope-OrgID": tenant}), timeout=timeout) as r:
        n = len(r.read())
    return time.perf_counter() - t, n
def hwm():
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith("VmHWM"): return int(l.split()[1]) // 1024
try:
    for _ in range(100):
        try: get("http://127.0.0.1:3700/ready"); break
        except Exception: time.sleep(0.2)
    time.sleep(2)
    J = "http://127.0.0.1:16996/api/traces?service=frontend&limit=10000&lookback=1e308"
    T = "http://127.0.0.1:3700/api/search?limit=10000&spss=1000&q=%7B%7D%20%7C%20select(.user.id,.http.route,name,duration,status,kind)&start=0&end=2000000000"
    Z = "http://127.0.0.1:9722/api/v2/traces?serviceName=frontend&limit=10000&lookback=4000000000000&endTs=4000000000000"
    for name, u in (("jaeger", J), ("tempo", T), ("zipkin", Z)):
        d, n = get(u); print(f"{name}: {d:.1f} s, {n/1e6:.0f} MB body, peak RSS so far {hwm()} MB", flush=True)
    stop = threading.Event(); ready = []
    def probe():
        while not stop.is_set():
            ready.append(get("http://127.0.0.1:3700/ready")[0]); time.sleep(0.05)
    th = threading.Thread(target=probe); th.start()
    ws = [threading.Thread(target=get, args=(J.replace("limit=10000", "limit=2000"),)) for _ in range(8)]
    [w.start() for w in ws]; [w.join() for w in ws]
    stop.set(); th.join()
    print(f"/ready during 8 Jaeger searches of 2,000 traces: max {max(ready)*1000:.0f} ms, p50 {statistics.median(ready)*1000:.0f} ms, n {len(ready)}; peak RSS {hwm()} MB")
finally:
    p.terminate(); p.wait()
