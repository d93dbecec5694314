"""The Flask throughput target measured interleaved: every variant of the Flask app runs in turn,
round after round, in one process, so that the load of this shared machine hits them all alike.

    .venv/bin/python bench/flask_ab.py [rounds] [requests_per_round]

Variants: no instrumentation; weft's own middleware (`weft_sdk.wsgi.instrument_flask`); the
official `opentelemetry-instrumentation-flask` over weft_sdk, over the API's no-op provider and
over the official SDK (BatchSpanProcessor, discarding exporter), as in bench.py. Prints the
median µs/request of each and its throughput relative to the uninstrumented app, in CPU time of
the process (every thread, the export threads included; time spent waiting for a CPU that other
work on this shared machine holds is not counted) and in wall time.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("WEFT_SDK_QUIET", "1")
sys.path.insert(0, os.path.dirname(__file__))

from opentelemetry import trace  # noqa: E402

import bench  # noqa: E402


def main() -> None:
    load0 = f"{os.getloadavg()[0]:.1f}"
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    variants = {
        "none": bench.flask_app(None),
        "weft middleware": bench.flask_app(bench.weft_provider(True), middleware=True),
        "official instr. + weft": bench.flask_app(bench.weft_provider(True)),
        "official instr. + no-op API": bench.flask_app(trace.NoOpTracerProvider()),
        "official instr. + OTel SDK": bench.flask_app(bench.otel_provider(True)),
    }
    wall: dict = {k: [] for k in variants}
    cpu: dict = {k: [] for k in variants}
    for f in variants.values():  # warm-up
        for _ in range(n):
            f()
    for _ in range(rounds):
        for name, f in variants.items():
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                f()
            wall[name].append((time.perf_counter() - t0) / n)
            cpu[name].append((time.process_time() - c0) / n)
    print(f"{rounds} interleaved rounds × {n} requests; load average before/after: {load0} / {os.getloadavg()[0]:.1f}\n")
    print("| Variant | µs/request, CPU (process) | throughput vs uninstrumented, CPU | µs/request, wall | vs uninstrumented, wall |")
    print("|---|---:|---:|---:|---:|")
    bc, bw = statistics.median(cpu["none"]), statistics.median(wall["none"])
    for name in variants:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        print(f"| {name} | {c * 1e6:,.1f} | {bc / c * 100:.1f} % | {w * 1e6:,.1f} | {bw / w * 100:.1f} % |")

if __name__ == "__main__":
    main()
