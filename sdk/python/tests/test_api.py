"""The `opentelemetry-api` surface: tracer, spans, context, limits, status, exceptions."""

from __future__ import annotations

import logging
import time

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import weft_sdk
from conftest import flushed


def test_native_types_are_api_types(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    assert isinstance(tracer, trace.Tracer)
    span = tracer.start_span("s")
    assert isinstance(span, trace.Span)
    span.end()
    assert isinstance(provider, trace.TracerProvider)


def test_parent_child_through_context(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t", "1.2.3", "https://schema")
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER, attributes={"a": 1}) as parent:
        assert trace.get_current_span() is parent
        with tracer.start_as_current_span("child") as child:
            assert trace.get_current_span() is child
        sibling = tracer.start_span("sibling")
        sibling.end()
    assert trace.get_current_span() is trace.INVALID_SPAN
    spans = {s["name"]: s for s in flushed(provider)}
    assert set(spans) == {"parent", "child", "sibling"}
    p, c, s = spans["parent"], spans["child"], spans["sibling"]
    assert p["parent_span_id"] == 0 and p["kind"] == 1 and p["attributes"] == {"a": 1}
    assert c["trace_id"] == p["trace_id"] == s["trace_id"]
    assert c["parent_span_id"] == p["span_id"] and s["parent_span_id"] == p["span_id"]
    assert p["trace_flags"] == 0x03, "sampled and random"
    assert p["scope"] == "t"
    assert p["start_time"] <= c["start_time"] <= c["end_time"] <= p["end_time"]
    assert abs(p["start_time"] - time.time_ns()) < 60e9


def test_explicit_context_and_use_span(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    root = tracer.start_span("root")
    cx = trace.set_span_in_context(root)
    child = tracer.start_span("child", context=cx)
    with trace.use_span(child, end_on_exit=True):
        assert trace.get_current_span() is child
        inner = tracer.start_span("inner")
        inner.end()
    root.end()
    spans = {s["name"]: s for s in flushed(provider)}
    assert spans["child"]["parent_span_id"] == spans["root"]["span_id"]
    assert spans["inner"]["parent_span_id"] == spans["child"]["span_id"]
    assert spans["child"]["end_time"] > 0


def test_foreign_parent_span_context(provider: weft_sdk.TracerProvider) -> None:
    sc = trace.SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(1), trace_state=trace.TraceState([("k", "v")]))
    cx = trace.set_span_in_context(trace.NonRecordingSpan(sc))
    s = provider.get_tracer("t").start_span("x", context=cx)
    got = s.get_span_context()
    assert got.trace_id == 0x1234 and got.span_id != 0x5678 and not got.is_remote
    assert got.trace_state.get("k") == "v"
    s.end()
    (d,) = flushed(provider)
    assert d["parent_span_id"] == 0x5678 and d["parent_is_remote"] and d["trace_state"] == "k=v"


def test_span_context_is_made_once(provider: weft_sdk.TracerProvider) -> None:
    s = provider.get_tracer("t").start_span("x")
    a = s.get_span_context()
    assert a is s.get_span_context()
    assert a.trace_id == s.trace_id and a.span_id == s.span_id and a.is_valid
    s.end()


def test_attributes_events_links_status(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    other = tracer.start_span("other")
    other.end()
    s = tracer.start_span("s", links=[Link(other.get_span_context(), {"l": True})], start_time=1_700_000_000_000_000_000)
    s.set_attribute("str", "v")
    s.set_attribute("bool", True)
    s.set_attribute("int", -7)
    s.set_attribute("float", 1.5)
    s.set_attributes({"list": ["a", "b"], "ints": (1, 2), "empty": []})
    s.add_event("ev", {"e": 1}, timestamp=1_700_000_000_000_000_100)
    s.add_event("ev2")
    s.add_link(other.get_span_context())
    s.update_name("renamed")
    s.set_status(Status(StatusCode.ERROR, "bad"))
    s.end(end_time=1_700_000_000_000_001_000)
    assert not s.is_recording()
    s.set_attribute("after", 1)  # ignored after end
    d = [x for x in flushed(provider) if x["name"] == "renamed"][0]
    assert d["attributes"] == {"str": "v", "bool": True, "int": -7, "float": 1.5, "list": ("a", "b"), "ints": (1, 2), "empty": ()}
    assert d["events"][0]["name"] == "ev" and d["events"][0]["time"] == 1_700_000_000_000_000_100
    assert d["events"][0]["attributes"] == {"e": 1}
    assert len(d["links"]) == 2 and d["links"][0]["attributes"] == {"l": True}
    assert d["links"][0]["span_id"] == other.span_id
    assert (d["status_code"], d["status_description"]) == (2, "bad")
    assert d["start_time"] == 1_700_000_000_000_000_000 and d["end_time"] == 1_700_000_000_000_001_000


def test_status_rules(provider: weft_sdk.TracerProvider) -> None:
    s = provider.get_tracer("t").start_span("s")
    s.set_status(StatusCode.OK)
    s.set_status(StatusCode.ERROR, "ignored: OK is final")
    s.end()
    (d,) = flushed(provider)
    assert d["status_code"] == 1


def test_invalid_attributes_warn_and_never_raise(provider: weft_sdk.TracerProvider, caplog: pytest.LogCaptureFixture) -> None:
    s = provider.get_tracer("t").start_span("s")
    with caplog.at_level(logging.WARNING, logger="weft_sdk"):
        s.set_attribute("obj", object())
        s.set_attribute("", 1)
        s.set_attribute("mixed", [1, "a"])
        s.set_attribute("big", 1 << 70)
        s.set_attributes({"ok": 1, 3: "non-str key"})
    s.end()
    (d,) = flushed(provider)
    assert d["attributes"] == {"ok": 1}


def test_bad_arguments_are_clear_errors(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    with pytest.raises(TypeError, match="timestamps are int nanoseconds"):
        tracer.start_span("s", start_time=1.5)
    with pytest.raises(ValueError, match="invalid span kind"):
        tracer.start_span("s", kind=9)
    with pytest.raises(TypeError, match="attributes must be a mapping"):
        tracer.start_span("s", attributes=[1, 2])
    with pytest.raises(TypeError):
        weft_sdk.TracerProvider(sampler="always_on", exporter=weft_sdk.InMemoryExporter())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="between 0 and 1"):
        weft_sdk.sampling.TraceIdRatioBased(2)
    with pytest.raises(ValueError, match="protocol"):
        weft_sdk.TracerProvider(exporter=weft_sdk.OTLPExporter(protocol="thrift"))
    with pytest.raises(ValueError, match="http:// or https://"):
        weft_sdk.TracerProvider(exporter=weft_sdk.OTLPExporter(endpoint="ftp://x"))


def test_limits_count_drops() -> None:
    p = weft_sdk.TracerProvider(
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=weft_sdk.InMemoryExporter(),
        span_limits=weft_sdk.SpanLimits(max_attributes=2, max_attribute_length=3, max_events=1, max_links=0),
        shutdown_on_exit=False,
    )
    t = p.get_tracer("t")
    other = t.start_span("o")
    s = t.start_span("s", attributes={"a": "abcdef", "b": 2, "c": 3})
    s.set_attribute("d", 4)
    s.add_event("e1")
    s.add_event("e2")
    s.add_link(other.get_span_context())
    s.end()
    other.end()
    d = [x for x in flushed(p) if x["name"] == "s"][0]
    assert d["attributes"] == {"a": "abc", "b": 2}
    assert d["dropped_attributes_count"] == 2
    assert d["dropped_events_count"] == 1 and d["dropped_links_count"] == 1
    p.shutdown()


def test_exception_in_current_span(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    with pytest.raises(ValueError):
        with tracer.start_as_current_span("boom"):
            raise ValueError("no")
    with pytest.raises(KeyboardInterrupt):
        with tracer.start_as_current_span("interrupted"):
            raise KeyboardInterrupt
    spans = {s["name"]: s for s in flushed(provider)}
    d = spans["boom"]
    assert d["status_code"] == 2 and d["status_description"] == "ValueError: no"
    (ev,) = d["events"]
    assert ev["name"] == "exception"
    assert ev["attributes"]["exception.type"] == "ValueError"
    assert "raise ValueError" in ev["attributes"]["exception.stacktrace"]
    assert spans["interrupted"]["status_code"] == 0 and not spans["interrupted"]["events"]
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_decorator_makes_a_span_per_call(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")

    @tracer.start_as_current_span("work", attributes={"k": "v"})
    def work(x: int) -> int:
        assert trace.get_current_span().is_recording()
        return x * 2

    assert work(2) == 4 and work(3) == 6
    spans = [s for s in flushed(provider) if s["name"] == "work"]
    assert len(spans) == 2 and spans[0]["span_id"] != spans[1]["span_id"]
    assert spans[0]["attributes"] == {"k": "v"}


def test_end_on_exit_false(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("open", end_on_exit=False) as s:
        pass
    assert s.is_recording()
    s.end()
    assert [x["name"] for x in flushed(provider)] == ["open"]


def test_unsampled_spans_are_handles_only() -> None:
    p = weft_sdk.TracerProvider(sampler=weft_sdk.sampling.ALWAYS_OFF, exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False)
    t = p.get_tracer("t")
    with t.start_as_current_span("root") as root:
        child = t.start_span("child")
        assert not child.is_recording()
        assert child.get_span_context().trace_id == root.get_span_context().trace_id
        assert int(child.get_span_context().trace_flags) == 0x02, "random flag, not sampled"
        child.set_attribute("ignored", 1)
        child.end()
    assert flushed(p) == []
    p.shutdown()


def test_parent_based_follows_remote_parent() -> None:
    p = weft_sdk.TracerProvider(
        sampler=weft_sdk.sampling.ParentBased(weft_sdk.sampling.ALWAYS_OFF),
        exporter=weft_sdk.InMemoryExporter(),
        shutdown_on_exit=False,
    )
    prop = weft_sdk.propagators.TraceContextPropagator()
    cx = prop.extract({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
    s = p.get_tracer("t").start_span("follows", context=cx)
    r = p.get_tracer("t").start_span("root")
    s.end()
    r.end()
    (d,) = flushed(p)
    assert d["name"] == "follows" and f"{d['trace_id']:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    p.shutdown()


def test_shutdown_drops_and_counts(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    tracer.start_span("before").end()
    assert provider.shutdown(timeout_millis=2000)
    assert provider.shutdown() is False
    tracer.start_span("after").end()
    stats = provider.stats()
    assert stats["exported"] == 1
    assert stats["dropped_shutdown"] == 1


def test_global_tracer_provider_in_a_fresh_interpreter() -> None:
    """The only change an application makes: `set_tracer_provider(weft_sdk.TracerProvider())`."""
    import subprocess
    import sys

    code = """
import weft_sdk
from opentelemetry import trace
p = weft_sdk.TracerProvider(exporter=weft_sdk.InMemoryExporter())
trace.set_tracer_provider(p)
tracer = trace.get_tracer("app")
with tracer.start_as_current_span("a"):
    with trace.get_tracer("lib").start_as_current_span("b"):
        pass
p.force_flush()
spans = p.exported_spans()
assert [s["name"] for s in spans] == ["b", "a"], spans
assert spans[0]["scope"] == "lib"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_env_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "svc-from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,team=a%20b,service.name=ignored")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    p = weft_sdk.TracerProvider(exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False)
    attrs = p.resource_attributes
    assert attrs["service.name"] == "svc-from-env"
    assert attrs["deployment.environment"] == "prod" and attrs["team"] == "a b"
    assert attrs["telemetry.sdk.language"] == "python"
    assert "TraceIdRatioBased{0.25}" in p.sampler_description
    p.shutdown()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    p = weft_sdk.TracerProvider(exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False)
    assert p.sampler_description == "AlwaysOffSampler"
    p.shutdown()


def test_otlp_exporter_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%3Db,x=y")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")
    spec = weft_sdk.OTLPExporter()._spec()
    assert spec == ("otlp", "http/protobuf", "http://collector:4318/v1/traces", [("api-key", "a=b"), ("x", "y")], "gzip", 2500, (None, None, None, False))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")
    spec = weft_sdk.OTLPExporter()._spec()
    assert spec[1:3] == ("grpc", "http://collector:4318/") and spec[4] == "none"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:4317")
    assert weft_sdk.OTLPExporter()._spec()[2] == "http://other:4317"


def test_ids() -> None:
    ids = {weft_sdk.new_trace_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(0 < i < 1 << 128 for i in ids)
    assert all(0 < weft_sdk.new_span_id() < 1 << 64 for _ in range(100))


def test_xray_ids(provider: weft_sdk.TracerProvider) -> None:
    p = weft_sdk.TracerProvider(sampler=weft_sdk.sampling.ALWAYS_ON, exporter=weft_sdk.InMemoryExporter(), id_generator="xray", shutdown_on_exit=False)
    s = p.get_tracer("t").start_span("x")
    assert abs((s.trace_id >> 96) - int(time.time())) < 5
    s.end()
    p.shutdown()


def test_context_detach_restores_previous(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    token = otel_context.attach(otel_context.set_value("k", "v"))
    with tracer.start_as_current_span("s"):
        assert otel_context.get_value("k") == "v"
    assert otel_context.get_value("k") == "v"
    otel_context.detach(token)


def test_unsampled_span_allocates_only_the_handle() -> None:
    """An unsampled span costs the Python heap one handle and nothing else (issue 51). Each span
    is kept, so that its handle is a new allocation; the peak of traced memory during the
    operation, above what it was before and above the same measurement around a call that
    allocates nothing, is at most the handle's size."""
    import collections
    import sys
    import tracemalloc
    from typing import Any, Callable, List

    p = weft_sdk.TracerProvider(sampler=weft_sdk.sampling.ALWAYS_OFF, exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False)
    tracer = p.get_tracer("t")

    def typical_peak(op: Callable[[], Any]) -> int:
        kept: List[Any] = [None] * 400
        counts: "collections.Counter[int]" = collections.Counter()
        for _ in range(100):
            op()
        tracemalloc.start()
        for i in range(400):
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            kept[i] = op()
            _, peak = tracemalloc.get_traced_memory()
            counts[peak - before] += 1
        tracemalloc.stop()
        return counts.most_common(1)[0][0]

    def unsampled() -> Any:
        s = tracer.start_span("op")
        s.end()
        return s

    with tracer.start_as_current_span("parent"):
        handle = sys.getsizeof(tracer.start_span("probe"))
        baseline = typical_peak(lambda: None)
        span = typical_peak(unsampled)
    assert span - baseline <= handle, f"an unsampled span took {span - baseline} bytes of Python heap; the handle is {handle}"
    p.shutdown()


def test_otel_propagators_loads_weft_propagators_by_entry_point() -> None:
    """`OTEL_PROPAGATORS=weft_tracecontext,weft_b3`: the API itself loads weft's propagators."""
    import subprocess
    import sys

    from conftest import env_without_otel

    code = """
from opentelemetry import propagate, trace
import weft_sdk
assert [type(p).__name__ for p in propagate.get_global_textmap()._propagators] == ["TraceContextPropagator", "B3Propagator"]
p = weft_sdk.TracerProvider(exporter=weft_sdk.InMemoryExporter())
trace.set_tracer_provider(p)
with trace.get_tracer("x").start_as_current_span("a") as s:
    c = {}
    propagate.inject(c)
assert c["traceparent"] == f"00-{s.trace_id:032x}-{s.span_id:016x}-03", c
assert c["b3"] == f"{s.trace_id:032x}-{s.span_id:016x}-1", c
print("ok")
"""
    env = env_without_otel({"OTEL_PROPAGATORS": "weft_tracecontext,weft_b3"})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
