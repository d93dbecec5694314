#!/usr/bin/env python3
"""Metrics queries over HTTP and over Tempo's streaming gRPC API, side by side: what the
progressive messages cost (docs/benchmarks/query-parallelism.md, "progressive metrics",
2026-12-05). Needs grpcio and protobuf (the integration tests' venv has them).

    python3 scripts/experiments/metrics_stream.py [--spans 5000000] [--data DIR] BIN

Loads --spans realistic spans with `weft loadgen` into a new data directory (kept, and reused
when --data names one that exists), with blocks cut every 2 s, then runs each query 3 times
each way and prints the wall times, the streamed messages and the jobs.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import grpc
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
from test_tempo_streaming import PB  # noqa: E402  (the test's Tempo messages, built from field numbers)

QUERIES = [
    "{ } | count_over_time() by (resource.service.name, name)",
    "{ } | quantile_over_time(duration, .5, .99) by (resource.service.name)",
    "{ } >> { } | count_over_time()",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--spans", type=int, default=5_000_000)
    ap.add_argument("--data")
    ap.add_argument("--port", type=int, default=13200)
    a = ap.parse_args()
    data = a.data or tempfile.mkdtemp(prefix="weft-metrics-stream-")
    fresh = not os.path.exists(os.path.join(data, "wal")) and not os.path.exists(os.path.join(data, "blocks"))
    http, otlp = a.port, a.port + 1117
    proc = subprocess.Popen([a.bin, "--data-dir", data, "--http-port", str(http), "--otlp-grpc-port", str(otlp),
                             "--compaction-interval", "0", "--block-max-age", "2", "--query-parallelism", "2"],
                            stdout=open(os.path.join(data, "..", "metrics-stream-weft.log"), "w"),
                            stderr=subprocess.STDOUT)
    try:
        for _ in range(150):
            try:
                if requests.get(f"http://127.0.0.1:{http}/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        if fresh:
            subprocess.run([a.bin, "loadgen", "--endpoint", f"127.0.0.1:{otlp}", "--realistic",
                            "--max-spans", str(a.spans), "--seed", "7", "--duration", "600"],
                           check=True, capture_output=True)
            time.sleep(15)  # the last blocks cut
        now = time.time_ns()
        start, end = now - 6 * 3600 * 10**9, now + 60 * 10**9
        channel = grpc.insecure_channel(f"127.0.0.1:{http}")
        call = channel.unary_stream("/tempopb.StreamingQuerier/MetricsQueryRange",
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=PB["QueryRangeResponse"].FromString)
        for q in QUERIES:
            over_http, streamed, messages = [], [], []
            for _ in range(3):
                t = time.time()
                body = requests.get(f"http://127.0.0.1:{http}/api/metrics/query_range",
                                    params={"q": q, "start": str(start), "end": str(end), "step": "60s"},
                                    timeout=600).json()
                over_http.append(time.time() - t)
                t = time.time()
                replies = list(call(PB["QueryRangeRequest"](query=q, start=start, end=end, step=60 * 10**9),
                                    timeout=600))
                streamed.append(time.time() - t)
                messages.append(len(replies))
            m = body["metrics"]
            print(f"{q}: HTTP {[round(x * 1000) for x in over_http]} ms, streamed "
                  f"{[round(x * 1000) for x in streamed]} ms, messages {messages}, "
                  f"jobs {m.get('totalJobs')}, spans {m.get('inspectedSpans')}")
        channel.close()
    finally:
        proc.terminate()
        proc.wait()
    print(f"data: {data}")


if __name__ == "__main__":
    main()
