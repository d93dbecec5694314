"""Turns bench.py's pyperf JSON (and allocs.py's JSON) into the Markdown table of BENCHMARKS.md.

    .venv/bin/python bench/report.py results.json [allocs.json]
"""

from __future__ import annotations

import json
import sys
from typing import Dict

import pyperf

ORDER = [
    "id_generation",
    "traceparent_extract",
    "traceparent_inject",
    "span_unsampled",
    "span_unsampled_current",
    "span_sampled_0_attrs",
    "span_sampled_4_attrs",
    "span_10_attrs_1_event",
    "span_sampled_current",
    "export_queue_1_thread",
    "export_queue_4_threads",
]


def main() -> None:
    suite = pyperf.BenchmarkSuite.load(sys.argv[1])
    ns: Dict[str, float] = {b.get_name(): b.median() * 1e9 for b in suite.get_benchmarks()}
    allocs: Dict[str, float] = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else {}
    print("| benchmark | weft ns/op | OTel SDK ns/op | weft / OTel | weft B/op | OTel B/op |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in ORDER:
        w, o = ns.get(f"weft/{name}"), ns.get(f"otel/{name}")
        if w is None or o is None:
            continue
        wa, oa = allocs.get(f"weft/{name}"), allocs.get(f"otel/{name}")
        # Negative peaks (the op freed more than it allocated: a handle back to its free list) are 0.
        fa = lambda a: "" if a is None else f"{max(a, 0):,.0f}"  # noqa: E731
        print(f"| {name} | {w:,.0f} | {o:,.0f} | {w / o:.3f} (1/{o / w:.1f}) | {fa(wa)} | {fa(oa)} |")
    none, weft, otel = ns.get("none/flask_request"), ns.get("weft/flask_request"), ns.get("otel/flask_request")
    noop, mw = ns.get("noop/flask_request"), ns.get("weftmw/flask_request")
    if none and weft and otel:
        print()
        print("| Flask app (test client, one instrumented request) | µs/request | requests/s | throughput vs uninstrumented |")
        print("|---|---:|---:|---:|")
        rows = [
            ("no tracing", none),
            ("weft_sdk.wsgi middleware (weft's own instrumentation)", mw),
            ("official instrumentation, API no-op provider", noop),
            ("official instrumentation, weft_sdk", weft),
            ("official instrumentation, OpenTelemetry SDK", otel),
        ]
        for label, v in rows:
            if v is None:
                continue
            print(f"| {label} | {v / 1e3:,.1f} | {1e9 / v:,.0f} | {none / v * 100:.1f} % |")


if __name__ == "__main__":
    main()
