"""weft_sdk beside the official OpenTelemetry Python SDK, in the same run (pyperf).

    .venv/bin/python bench/bench.py -o results.json    # (bench.sh runs this on a release build)
    .venv/bin/python bench/report.py results.json      # the table of ns/op and ratios

Each benchmark exists twice, `weft/<name>` and `otel/<name>` (and `none/flask_request` for the
app without tracing), so every ratio compares two figures from the same run on the same machine.
Both SDKs export through their real queue and batching path to an exporter that discards the
batches (weft: `NoopExporter` on its Rust export thread; OTel: `BatchSpanProcessor` with a
`SpanExporter` that returns SUCCESS), so a span's cost includes the hand-off to the exporter.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Tuple

os.environ.setdefault("WEFT_SDK_QUIET", "1")
os.environ.setdefault("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")

import pyperf  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider as OTelProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator  # noqa: E402
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF as OTEL_OFF  # noqa: E402
from opentelemetry.sdk.trace.sampling import ALWAYS_ON as OTEL_ON  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402

import weft_sdk  # noqa: E402

TRACEPARENT = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "congo=t61rcWkgMzE"}
ATTRS4 = {"http.request.method": "GET", "http.response.status_code": 200, "url.path": "/api/v1/orders", "server.port": 8080}
ATTRS10 = {f"attr.{i}": (i if i % 2 else f"value-{i}") for i in range(10)}


class _Discard(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def otel_provider(sampled: bool) -> OTelProvider:
    p = OTelProvider(sampler=OTEL_ON if sampled else OTEL_OFF, shutdown_on_exit=False)
    p.add_span_processor(BatchSpanProcessor(_Discard()))
    return p


def weft_provider(sampled: bool) -> weft_sdk.TracerProvider:
    return weft_sdk.TracerProvider(
        resource={"service.name": "bench"},
        sampler=weft_sdk.sampling.ALWAYS_ON if sampled else weft_sdk.sampling.ALWAYS_OFF,
        exporter=weft_sdk.NoopExporter(),
        shutdown_on_exit=False,
    )


def loop(op: Callable[[], Any]) -> Callable[[int], float]:
    def run(loops: int) -> float:
        r = range(loops)
        t0 = time.perf_counter()
        for _ in r:
            op()
        return time.perf_counter() - t0

    return run


def threaded(op: Callable[[], Any], threads: int) -> Callable[[int], float]:
    """Time for `loops` spans spread over `threads` Python threads (per span)."""

    def run(loops: int) -> float:
        per = max(loops // threads, 1)
        start = threading.Barrier(threads + 1)

        def work() -> None:
            start.wait()
            for _ in range(per):
                op()

        ts = [threading.Thread(target=work) for _ in range(threads)]
        for t in ts:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        return (time.perf_counter() - t0) * loops / (per * threads)

    return run


def flask_app(provider: Any, middleware: bool = False) -> Callable[[], Any]:
    """One request through the test client; instrumented by the official Flask instrumentation
    with `provider`, or (`middleware`) by weft's own `weft_sdk.wsgi.instrument_flask`."""
    from flask import Flask
    from opentelemetry.instrumentation.flask import FlaskInstrumentor

    app = Flask(f"bench-{id(provider)}-{middleware}")

    @app.route("/orders/<int:n>")
    def orders(n: int) -> Dict[str, Any]:
        # A small real handler: some work that is not tracing.
        total = sum(i * i for i in range(200))
        return {"order": n, "total": total}

    if middleware:
        weft_sdk.wsgi.instrument_flask(app, tracer_provider=provider)
    elif provider is not None:
        FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    client = app.test_client()

    def request() -> None:
        r = client.get("/orders/7")
        assert r.status_code == 200
        r.close()  # what a server does: closing the response ends weft's server span

    return request


def benchmarks() -> Dict[str, Callable[[int], float]]:
    out: Dict[str, Callable[[int], float]] = {}
    gen = RandomIdGenerator()
    out["otel/id_generation"] = loop(lambda: (gen.generate_trace_id(), gen.generate_span_id()))
    out["weft/id_generation"] = loop(lambda: (weft_sdk.new_trace_id(), weft_sdk.new_span_id()))

    official = TraceContextTextMapPropagator()
    ours = weft_sdk.propagators.TraceContextPropagator()
    out["otel/traceparent_extract"] = loop(lambda: official.extract(TRACEPARENT))
    out["weft/traceparent_extract"] = loop(lambda: ours.extract(TRACEPARENT))

    for sdk, sampled_p, off_p in (("otel", otel_provider(True), otel_provider(False)), ("weft", weft_provider(True), weft_provider(False))):
        on = sampled_p.get_tracer("bench")
        off = off_p.get_tracer("bench")
        prop = official if sdk == "otel" else ours
        inject_span = on.start_span("client")
        inject_cx = trace.set_span_in_context(inject_span)

        def inject(prop: Any = prop, cx: Any = inject_cx) -> None:
            prop.inject({}, cx)

        out[f"{sdk}/traceparent_inject"] = loop(inject)
        out[f"{sdk}/span_unsampled"] = loop(lambda off=off: off.start_span("op").end())
        out[f"{sdk}/span_unsampled_current"] = loop(lambda off=off: _with(off))
        out[f"{sdk}/span_sampled_0_attrs"] = loop(lambda on=on: on.start_span("op").end())
        out[f"{sdk}/span_sampled_4_attrs"] = loop(lambda on=on: on.start_span("op", attributes=ATTRS4).end())

        def ten_and_event(on: Any = on) -> None:
            s = on.start_span("op", attributes=ATTRS10)
            s.add_event("cache.miss", {"key": "k"})
            s.end()

        out[f"{sdk}/span_10_attrs_1_event"] = loop(ten_and_event)
        out[f"{sdk}/span_sampled_current"] = loop(lambda on=on: _with(on))
        out[f"{sdk}/export_queue_1_thread"] = threaded(lambda on=on: on.start_span("op").end(), 1)
        out[f"{sdk}/export_queue_4_threads"] = threaded(lambda on=on: on.start_span("op").end(), 4)
        out[f"{sdk}/flask_request"] = loop(flask_app(sampled_p))
        if sdk == "weft":
            out["weftmw/flask_request"] = loop(flask_app(sampled_p, middleware=True))
    out["none/flask_request"] = loop(flask_app(None))
    # The official instrumentation with the API's no-op provider: the floor any SDK starts from.
    out["noop/flask_request"] = loop(flask_app(trace.NoOpTracerProvider()))
    return out


def _with(tracer: Any) -> None:
    with tracer.start_as_current_span("op"):
        pass


def main() -> None:
    if os.environ.get("WEFT_BENCH_ONLY") and "--worker" not in sys.argv:
        # pyperf's workers run with a clean environment and pick their benchmark by index: they
        # must see the same filter, or they would run (and report under its name) another one.
        sys.argv += ["--inherit-environ", "WEFT_BENCH_ONLY,WEFT_SDK_QUIET"]
    runner = pyperf.Runner(processes=3, values=3, warmups=1, min_time=0.1)
    runner.metadata["description"] = "weft_sdk vs opentelemetry-sdk (same run)"
    only = os.environ.get("WEFT_BENCH_ONLY")
    for name, fn in benchmarks().items():
        if only and only not in name:
            continue
        runner.bench_time_func(name, fn)


if __name__ == "__main__":
    sys.exit(main())
