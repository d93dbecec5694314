"""Python heap bytes per operation (tracemalloc), weft_sdk beside the official SDK.

For each operation: the peak of memory traced by tracemalloc while one operation runs, above
what was allocated before it, averaged over many single operations. tracemalloc sees the
Python allocators only, so this is what an operation costs the Python heap (objects and
their buffers); the native core's own allocations (Rust) are not in it.

    .venv/bin/python bench/allocs.py      # prints a JSON object {name: bytes}
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any, Callable, Dict

from bench import ATTRS4, ATTRS10, TRACEPARENT, otel_provider, weft_provider
from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import weft_sdk

N = 2000


def peak_bytes(op: Callable[[], Any]) -> float:
    for _ in range(200):  # warm caches, pools and interned strings
        op()
    tracemalloc.start()
    total = 0
    for _ in range(N):
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        op()
        _, peak = tracemalloc.get_traced_memory()
        total += peak - before
    tracemalloc.stop()
    return total / N


def main() -> None:
    out: Dict[str, float] = {}
    gen = RandomIdGenerator()
    out["otel/id_generation"] = peak_bytes(lambda: (gen.generate_trace_id(), gen.generate_span_id()))
    out["weft/id_generation"] = peak_bytes(lambda: (weft_sdk.new_trace_id(), weft_sdk.new_span_id()))
    official = TraceContextTextMapPropagator()
    ours = weft_sdk.propagators.TraceContextPropagator()
    out["otel/traceparent_extract"] = peak_bytes(lambda: official.extract(TRACEPARENT))
    out["weft/traceparent_extract"] = peak_bytes(lambda: ours.extract(TRACEPARENT))
    for sdk, on_p, off_p in (("otel", otel_provider(True), otel_provider(False)), ("weft", weft_provider(True), weft_provider(False))):
        on, off = on_p.get_tracer("bench"), off_p.get_tracer("bench")
        prop = official if sdk == "otel" else ours
        cx = trace.set_span_in_context(on.start_span("client"))
        out[f"{sdk}/traceparent_inject"] = peak_bytes(lambda prop=prop, cx=cx: prop.inject({}, cx))
        out[f"{sdk}/span_unsampled"] = peak_bytes(lambda off=off: off.start_span("op").end())
        out[f"{sdk}/span_sampled_0_attrs"] = peak_bytes(lambda on=on: on.start_span("op").end())
        out[f"{sdk}/span_sampled_4_attrs"] = peak_bytes(lambda on=on: on.start_span("op", attributes=ATTRS4).end())

        def ten(on: Any = on) -> None:
            s = on.start_span("op", attributes=ATTRS10)
            s.add_event("cache.miss", {"key": "k"})
            s.end()

        out[f"{sdk}/span_10_attrs_1_event"] = peak_bytes(ten)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
