"""The Flask throughput target measured interleaved: every variant of the Flask app runs in turn,
round after round, in one process, so that the load of this shared machine hits them all alike.

    .venv/bin/python bench/flask_ab.py [rounds] [requests_per_round]

Variants: no instrumentation; weft's own middleware (`weft_sdk.wsgi.instrument_flask`); the
official `opentelemetry-instrumentation-flask` over weft_sdk, over the API's no-op provider and
over the official SDK (BatchSpanProcessor, discarding exporter), as in bench.py. Prints the
median µs/request of each and its throughput relative to the uninstrumented app.
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
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    variants = {
        "none": bench.flask_app(None),
        "weft middleware": bench.flask_app(bench.weft_provider(True), middleware=True),
        "official instr. + weft": bench.flask_app(bench.weft_provider(True)),
        "official instr. + no-op API": bench.flask_app(trace.NoOpTracerProvider()),
        "official instr. + OTel SDK": bench.flask_app(bench.otel_provider(True)),
    }
    times: dict = {k: [] for k in variants}
    for f in variants.values():  # warm-up
        for _ in range(n):
            f()
    for _ in range(rounds):
        for name, f in variants.items():
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            times[name].append((time.perf_counter() - t0) / n)
    base = statistics.median(times["none"])
    print(f"| Variant ({rounds} interleaved rounds × {n} requests) | µs/request (median) | throughput vs uninstrumented |")
    print("|---|---:|---:|")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"| {name} | {m * 1e6:,.1f} | {base / m * 100:.1f} % |")
    # The ratio per round (same round, adjacent in time), which is less noisy than medians apart.
    per_round = [a / b for a, b in zip(times["none"], times["weft middleware"])]
    print(f"\nweft middleware / none, per round: median {statistics.median(per_round) * 100:.1f} %, "
          f"quartiles {statistics.quantiles(per_round, n=4)[0] * 100:.1f}–{statistics.quantiles(per_round, n=4)[2] * 100:.1f} %")


if __name__ == "__main__":
    main()
