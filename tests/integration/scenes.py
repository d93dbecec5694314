"""Span data the round-trip tests send: an OpenTelemetry SDK scene and hand-built OTLP requests."""

from __future__ import annotations

import os
import time

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status as SdkStatus,
    StatusCode,
    TraceFlags,
    TraceState,
)

from otlpdata import (
    AnyValue,
    ExportTraceServiceRequest,
    InstrumentationScope,
    KeyValue,
    Resource,
    ResourceSpans,
    ScopeSpans,
    Span,
    Status,
    key_values,
    new_span_id,
)

# Span attributes of every type the SDK API can produce.
ALL_TYPES = {
    "str": "hello",
    "str.empty": "",
    "str.unicode": "grüße 漢字 🙂 \"quoted\" \\ back\nslash",
    "int": 42,
    "int.negative": -7,
    "int.max": 2**63 - 1,
    "int.min": -(2**63),
    "int.above_2_53": 2**53 + 1,
    "float": 3.141592653589793,
    "float.tiny": 1e-300,
    "float.negative": -2.5e10,
    "float.integral": 2.0,
    "bool.true": True,
    "bool.false": False,
    "array.str": ["a", "", "ü"],
    "array.int": [1, -2, 2**62, 0],
    "array.float": [0.1, 2.5, -1e-9],
    "array.bool": [True, False, True],
}


class RecordingExporter(SpanExporter):
    """Remembers every span handed to the (optional) real exporter and each export's result."""

    def __init__(self, inner: SpanExporter | None = None) -> None:
        self.inner = inner
        self.spans = []
        self.results: list[SpanExportResult] = []

    def export(self, spans):
        self.spans.extend(spans)
        res = SpanExportResult.SUCCESS if self.inner is None else self.inner.export(spans)
        self.results.append(res)
        return res

    def shutdown(self) -> None:
        if self.inner is not None:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def sdk_scene(exporter: SpanExporter | None, service: str) -> ExportTraceServiceRequest:
    """Create spans with the OTel SDK, export them through `exporter` (None: only record them),
    flush, and return exactly what the OTLP exporters sent, as an ExportTraceServiceRequest."""
    recorder = RecordingExporter(exporter)
    resource = SdkResource.create(
        {
            "service.name": service,
            "service.version": "2.0.1",
            "deployment.environment.name": "integration",
            "host.cpu.count": 2,
            "process.runtime.debug": True,
            "res.ratio": 0.75,
            "res.tags": ["blue", "green"],
        },
        schema_url="https://opentelemetry.io/schemas/1.26.0",
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(recorder, max_export_batch_size=4))
    build_spans(provider)
    assert provider.force_flush(30_000), "TracerProvider.force_flush timed out"
    provider.shutdown()
    assert recorder.results, "nothing was exported"
    assert all(r == SpanExportResult.SUCCESS for r in recorder.results), \
        f"an OTLP export failed: {recorder.results}"
    return encode_spans(recorder.spans)


def build_spans(provider: TracerProvider) -> None:
    api = provider.get_tracer(
        "weft.tests.checkout", "1.4.2",
        schema_url="https://opentelemetry.io/schemas/1.24.0",
        attributes={"scope.component": "checkout", "scope.level": 3},
    )
    db = provider.get_tracer("weft.tests.db", "0.9.0-beta.1")
    base = time.time_ns() - 1_000_000_000 + 123_457  # odd nanoseconds on purpose

    linked = SpanContext(
        trace_id=int.from_bytes(os.urandom(16), "big") | 1,
        span_id=int.from_bytes(os.urandom(8), "big") | 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )

    # Trace 1: a local root with children of every kind.
    root = api.start_span("GET /checkout/{id}", kind=SpanKind.SERVER, attributes=ALL_TYPES,
                          start_time=base)
    root_ctx = trace_api.set_span_in_context(root)
    pay = api.start_span(
        "POST payment", context=root_ctx, kind=SpanKind.CLIENT, start_time=base + 1_000_003,
        attributes={"http.request.method": "POST", "http.response.status_code": 402},
        links=[Link(linked, {"link.reason": "retry-of", "link.attempt": 2, "link.ok": False,
                             "link.ratio": 0.5, "link.tags": ["x", "y"]})],
    )
    pay.add_event("payment.retry", {"attempt": 2, "backoff.ms": 12.5, "final": False,
                                    "codes": [500, 503], "note": "second try"},
                  timestamp=base + 1_500_001)
    pay.add_event("no-attributes", timestamp=base + 1_600_000)
    pay.record_exception(ValueError("card expired"), timestamp=base + 1_700_000, escaped=True)
    pay.set_status(SdkStatus(StatusCode.ERROR, "payment declined: card expired"))
    query = db.start_span("SELECT orders", context=trace_api.set_span_in_context(pay),
                          kind=SpanKind.INTERNAL, start_time=base + 2_000_000,
                          attributes={"db.system.name": "postgresql", "db.rows": 17, "db.float": 0.1})
    query.end(end_time=base + 3_999_999)
    pay.end(end_time=base + 5_000_000)
    pub = api.start_span("publish order", context=root_ctx, kind=SpanKind.PRODUCER,
                         start_time=base + 6_000_000, attributes={"messaging.system": "kafka"})
    pub.set_status(SdkStatus(StatusCode.OK))
    pub.end(end_time=base + 6_500_000)
    root.set_status(SdkStatus(StatusCode.OK))
    root.end(end_time=base + 20_000_000_017)

    # Trace 2: continues a remote trace (its parent is not in weft) and carries a trace state.
    remote_parent = SpanContext(
        trace_id=int.from_bytes(os.urandom(16), "big") | 1,
        span_id=int.from_bytes(os.urandom(8), "big") | 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("weft", "t61rcWkgMzE"), ("vendor2", "opaque-9")]),
    )
    consume = api.start_span(
        "consume order", context=trace_api.set_span_in_context(NonRecordingSpan(remote_parent)),
        kind=SpanKind.CONSUMER, start_time=base + 7_000_000,
        links=[Link(root.get_span_context(), {"link.kind": "follows-from"})],
    )
    inner = db.start_span("处理 — ünïcödé 🙂", context=trace_api.set_span_in_context(consume),
                          start_time=base + 7_100_000)
    inner.add_event("done", {"rows": [1, 2, 3]}, timestamp=base + 7_150_000)
    inner.end(end_time=base + 7_200_000)
    consume.end(end_time=base + 8_000_000)


# ------------------------------------------------------------------------------------------------
# Hand-built requests with what the SDK API cannot produce: kvlist, bytes, empty values,
# heterogeneous arrays, dropped counts, flags, link trace state, several resources.
# ------------------------------------------------------------------------------------------------

RICH_ATTRS = {
    "bytes": b"\x00\x01\x02\xfe\xff",
    "bytes.empty": b"",
    "kvlist": {"region": "eu-west-1", "zone": {"id": 3, "primary": True},
               "tags": ["a", 1, 2.5, False, None]},
    "kvlist.empty": {},
    "array.mixed": ["s", 7, 1.25, True, b"\xab\xcd", {"k": "v"}, ["nested", 1]],
    "array.empty": [],
    "empty": None,
    "int.min": -(2**63),
    "double.small": -1.5e-7,
    "str": "plain",
}


def rich_request(trace_id: bytes, service: str = "raw-svc") -> ExportTraceServiceRequest:
    base = time.time_ns() - 2_000_000_000 + 999
    root, child, grand, other = (new_span_id() for _ in range(4))
    link_trace = os.urandom(16)

    root_span = Span(
        trace_id=trace_id, span_id=root, name="raw root", kind=Span.SPAN_KIND_SERVER,
        trace_state="rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", flags=0x301,
        start_time_unix_nano=base, end_time_unix_nano=base + 9_000_000_001,
        attributes=key_values(RICH_ATTRS), dropped_attributes_count=4,
        events=[
            Span.Event(time_unix_nano=base + 10, name="with kvlist",
                       attributes=key_values({"ev.kv": {"a": 1, "b": [b"\x01", "x"]},
                                              "ev.bytes": b"\xff\x00"}),
                       dropped_attributes_count=2),
            Span.Event(time_unix_nano=base + 20, name="bare"),
        ],
        dropped_events_count=5,
        links=[
            Span.Link(trace_id=link_trace, span_id=new_span_id(), trace_state="a=1,b=2",
                      attributes=key_values({"link.kv": {"x": "y"}, "link.bytes": b"\x7f"}),
                      dropped_attributes_count=1, flags=0x101),
            Span.Link(trace_id=trace_id, span_id=other),
        ],
        dropped_links_count=6,
        status=Status(code=Status.STATUS_CODE_OK, message="all good"),
    )
    child_span = Span(
        trace_id=trace_id, span_id=child, parent_span_id=root, name="raw child",
        kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=base + 1_000,
        end_time_unix_nano=base + 1_000, flags=0x100,
        attributes=key_values({"peer.bytes": bytes(range(256))}),
        status=Status(code=Status.STATUS_CODE_ERROR, message="upstream timeout"),
    )
    grand_span = Span(
        trace_id=trace_id, span_id=grand, parent_span_id=child, name="unspecified kind",
        kind=Span.SPAN_KIND_UNSPECIFIED, start_time_unix_nano=base + 2_000,
        end_time_unix_nano=base + 3_000,
    )
    other_span = Span(
        trace_id=trace_id, span_id=other, parent_span_id=root, name="other service",
        kind=Span.SPAN_KIND_PRODUCER, start_time_unix_nano=base + 4_000,
        end_time_unix_nano=base + 5_000_000,
        attributes=key_values({"messaging.destination.name": "orders"}),
    )
    return ExportTraceServiceRequest(resource_spans=[
        ResourceSpans(
            resource=Resource(
                attributes=key_values({"service.name": service,
                                       "res.kv": {"cluster": "c1", "nodes": [1, 2]},
                                       "res.bytes": b"\xde\xad\xbe\xef"}),
                dropped_attributes_count=3,
            ),
            schema_url="https://example.test/resource-schema/1",
            scope_spans=[
                ScopeSpans(
                    scope=InstrumentationScope(
                        name="weft.raw", version="3.1.4",
                        attributes=[KeyValue(key="scope.bytes", value=AnyValue(bytes_value=b"\x10"))],
                        dropped_attributes_count=1,
                    ),
                    schema_url="https://example.test/scope-schema/1",
                    spans=[root_span, child_span],
                ),
                ScopeSpans(scope=InstrumentationScope(name="weft.raw.other"), spans=[grand_span]),
            ],
        ),
        ResourceSpans(
            resource=Resource(attributes=key_values({"service.name": service + "-2"})),
            scope_spans=[ScopeSpans(scope=InstrumentationScope(), spans=[other_span])],
        ),
    ])
