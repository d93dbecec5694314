"""End to end against the real weft binary ($WEFT_BIN): export over OTLP HTTP and gRPC, read the
trace back through GET /api/traces/<id>."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

import weft_sdk
from conftest import Weft, free_port


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_export_and_read_back(weft: Weft, protocol: str) -> None:
    endpoint = weft.otlp_http if protocol == "http/protobuf" else weft.otlp_grpc
    p = weft_sdk.TracerProvider(
        resource={"service.name": f"py-e2e-{protocol}"},
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=weft_sdk.OTLPExporter(endpoint=endpoint, protocol=protocol),
        shutdown_on_exit=False,
    )
    tracer = p.get_tracer("e2e")
    with tracer.start_as_current_span("checkout", kind=SpanKind.SERVER, attributes={"order": 42}) as root:
        for i in range(3):
            with tracer.start_as_current_span(f"step-{i}") as s:
                s.add_event("done", {"i": i})
    trace_id = root.trace_id
    assert p.shutdown(timeout_millis=10_000)
    assert p.stats()["exported"] == 4
    spans = weft.read_trace(trace_id, 4)
    names = {s.name for _, _, s in spans}
    assert names == {"checkout", "step-0", "step-1", "step-2"}
    by_name = {s.name: (rs, sc, s) for rs, sc, s in spans}
    rs, scope, r = by_name["checkout"]
    assert r.span_id == root.span_id.to_bytes(8, "big")
    assert any(kv.key == "service.name" and kv.value.string_value == f"py-e2e-{protocol}" for kv in rs.resource.attributes)
    assert scope.name == "e2e"
    assert any(kv.key == "order" and kv.value.int_value == 42 for kv in r.attributes)
    for i in range(3):
        s = by_name[f"step-{i}"][2]
        assert s.parent_span_id == r.span_id
        assert s.events[0].name == "done"


def test_global_provider_with_env_configuration(weft: Weft) -> None:
    """Configured only through OTEL_* variables, in a fresh interpreter."""
    import subprocess
    import sys

    from conftest import env_without_otel

    code = """
import weft_sdk
from opentelemetry import trace
trace.set_tracer_provider(weft_sdk.TracerProvider())
with trace.get_tracer("env").start_as_current_span("from-env") as s:
    print(f"{s.trace_id:032x}")
"""
    env = env_without_otel({"OTEL_SERVICE_NAME": "py-env", "OTEL_EXPORTER_OTLP_ENDPOINT": weft.otlp_http.rsplit("/v1/traces", 1)[0]})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    trace_id = int(out.stdout.strip(), 16)
    ((rs, _, s),) = weft.read_trace(trace_id, 1)
    assert s.name == "from-env"
    assert any(kv.key == "service.name" and kv.value.string_value == "py-env" for kv in rs.resource.attributes)
    _ = trace


def test_jaeger_remote_sampler_follows_weft(tmp_path: "os.PathLike[str]") -> None:
    """The Jaeger remote sampler polls the weft binary's own /sampling and samples by the
    strategies file weft serves."""
    import os
    import time
    from pathlib import Path

    binary = os.environ.get("WEFT_BIN")
    if not binary:
        pytest.skip("WEFT_BIN is not set: not running the end-to-end tests against the weft binary")
    d = Path(tmp_path)
    (d / "strategies.json").write_text(
        '{"service_strategies": [{"service": "checkout", "type": "probabilistic", "param": 1.0,'
        ' "operation_strategies": [{"operation": "GET /health", "type": "probabilistic", "param": 0}]}]}'
    )
    port = free_port()
    w = Weft(binary, d, {"WEFT_SAMPLING_HTTP_PORT": str(port), "WEFT_SAMPLING_STRATEGIES_FILE": str(d / "strategies.json")})
    try:
        p = weft_sdk.TracerProvider(
            sampler=weft_sdk.sampling.JaegerRemoteSampler(
                "checkout",
                endpoint=f"http://127.0.0.1:{port}/sampling",
                polling_interval=0.1,
                initial_sampler=weft_sdk.sampling.TraceIdRatioBased(0.5),
            ),
            exporter=weft_sdk.InMemoryExporter(),
            shutdown_on_exit=False,
        )
        tracer = p.get_tracer("remote")

        def sampled(name: str) -> bool:
            s = tracer.start_span(name)
            s.end()
            return bool(int(s.get_span_context().trace_flags) & 1)

        # Until the first fetch the initial sampler keeps half; the strategy keeps no health check.
        deadline = time.time() + 15
        dropped = 0
        while dropped < 200:
            if sampled("GET /health"):
                dropped = 0
                assert time.time() < deadline, "the sampler did not take weft's strategy within 15 s"
                time.sleep(0.02)
                continue
            dropped += 1
        for i in range(1000):
            assert not sampled("GET /health") and sampled("POST /pay"), f"decision {i} does not follow the strategy"
        p.shutdown()
    finally:
        w.stop()
