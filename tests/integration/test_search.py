"""Search, tag and metrics APIs over traces sent by the OpenTelemetry Python SDK, in Tempo's JSON
shapes: from the head, from blocks, and after a restart."""

from __future__ import annotations

import time

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from weftlib import block_metas, wait_for_block_spans

BLOCK_AGE = "3"
MS = 1_000_000


def send_scene(srv) -> dict[str, str]:
    """Three traces over three services, sent through the SDK's OTLP/HTTP exporter. Returns the
    trace IDs (hex) by letter.

    A: frontend "GET /cart" 2s > checkout "POST /checkout" 250ms (user.id u-17) > payments
       "charge" 1.2s, status error.
    B: frontend "GET /home" 50ms, http.status_code 200.
    C: checkout "POST /checkout" 120ms, user.id u-99, http.status_code 500.
    """
    providers = {}
    for svc in ("frontend", "checkout", "payments"):
        p = TracerProvider(resource=Resource.create({"service.name": svc, "deployment.environment": "test"}))
        p.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=srv.otlp_url)))
        providers[svc] = p
    tracer = {svc: p.get_tracer("weft.tests.search") for svc, p in providers.items()}
    base = time.time_ns() - 10_000 * MS
    ids = {}

    a = tracer["frontend"].start_span("GET /cart", kind=SpanKind.SERVER, start_time=base)
    ctx = trace_api.set_span_in_context(a)
    b = tracer["checkout"].start_span("POST /checkout", context=ctx, kind=SpanKind.SERVER,
                                      start_time=base + 10 * MS, attributes={"user.id": "u-17"})
    c = tracer["payments"].start_span("charge", context=trace_api.set_span_in_context(b),
                                      kind=SpanKind.CLIENT, start_time=base + 20 * MS,
                                      attributes={"payment.amount": 12.5})
    c.set_status(Status(StatusCode.ERROR, "card declined"))
    c.end(end_time=base + 1220 * MS)
    b.end(end_time=base + 260 * MS)
    a.end(end_time=base + 2000 * MS)
    ids["A"] = format(a.get_span_context().trace_id, "032x")

    h = tracer["frontend"].start_span("GET /home", kind=SpanKind.SERVER, start_time=base + 3000 * MS,
                                      attributes={"http.status_code": 200})
    h.end(end_time=base + 3050 * MS)
    ids["B"] = format(h.get_span_context().trace_id, "032x")

    k = tracer["checkout"].start_span("POST /checkout", kind=SpanKind.SERVER, start_time=base + 4000 * MS,
                                      attributes={"user.id": "u-99", "http.status_code": 500})
    k.end(end_time=base + 4120 * MS)
    ids["C"] = format(k.get_span_context().trace_id, "032x")

    for p in providers.values():
        assert p.force_flush(30_000)
        p.shutdown()
    return ids


def search(srv, **params):
    r = srv.get("/api/search", params=params)
    assert r.status_code == 200, f"/api/search {params}: {r.status_code} {r.text}"
    body = r.json()
    assert set(body) == {"traces", "metrics"}, body
    return body


def found(body) -> list[str]:
    return [t["traceID"].rjust(32, "0") for t in body["traces"]]


def check_searches(srv, ids: dict[str, str], stage: str) -> None:
    A, B, C = ids["A"], ids["B"], ids["C"]

    body = search(srv, q='{ resource.service.name = "payments" && status = error }')
    assert found(body) == [A], stage
    t = body["traces"][0]
    assert t["rootServiceName"] == "frontend" and t["rootTraceName"] == "GET /cart", t
    assert isinstance(t["startTimeUnixNano"], str) and int(t["startTimeUnixNano"]) > 0, t
    assert t["durationMs"] == 2000, t
    (ss,) = t["spanSets"]
    assert ss["matched"] == 1 and t["spanSet"] == ss, t
    (span,) = ss["spans"]
    assert span["name"] == "charge" and len(span["spanID"]) == 16, span
    assert span["durationNanos"] == str(1200 * MS), span
    attrs = {a["key"]: a["value"] for a in span["attributes"]}
    assert attrs["service.name"] == {"stringValue": "payments"}, attrs
    assert attrs["status"] == {"stringValue": "error"}, attrs
    # Tempo's serviceStats: every span of the trace by service, not only the matched ones
    assert t["serviceStats"] == {
        "frontend": {"spanCount": 1},
        "checkout": {"spanCount": 1},
        "payments": {"spanCount": 1, "errorCount": 1},
    }, t

    assert found(search(srv, q="{ duration > 1s }")) == [A], stage
    assert search(srv, q="{ duration > 1s }")["traces"][0]["spanSets"][0]["matched"] == 2
    assert found(search(srv, q='{ resource.service.name = "frontend" } >> { status = error }')) == [A], stage
    assert found(search(srv, q='{ resource.service.name = "payments" } >> { }')) == [], stage
    assert found(search(srv, q='{ span.user.id = "u-99" }')) == [C], stage
    assert found(search(srv, q="{ span.http.status_code >= 500 }")) == [C], stage
    assert found(search(srv, q='{ .user.id =~ "u-1.*" }')) == [A], stage
    # Most recent first; limit keeps the newest.
    assert found(search(srv, q="{ }")) == [C, B, A], stage
    assert found(search(srv, q="{ }", limit=1)) == [C], stage
    # Tempo's logfmt tags and duration filters (trace duration).
    assert set(found(search(srv, tags="service.name=frontend"))) == {A, B}, stage
    assert found(search(srv, tags="service.name=frontend", minDuration="1s")) == [A], stage
    assert found(search(srv, tags="service.name=frontend", maxDuration="100ms")) == [B], stage
    assert found(search(srv, tags="http.status_code=500")) == [C], stage
    # Pipelines report their aggregates on the spanset.
    body = search(srv, q="{ } | count() > 2")
    assert found(body) == [A], stage
    sattrs = {a["key"]: a["value"] for a in body["traces"][0]["spanSets"][0]["attributes"]}
    assert sattrs == {"count()": {"intValue": "3"}}, sattrs
    # spss caps the spans shown, not the count.
    ss = search(srv, q="{ }", spss=1, limit=5)
    a_sets = [t for t in ss["traces"] if t["traceID"].rjust(32, "0") == A][0]["spanSets"]
    assert a_sets[0]["matched"] == 3 and len(a_sets[0]["spans"]) == 1, a_sets
    # A time window that holds none of the traces.
    assert found(search(srv, q="{ }", start=1_000_000, end=1_000_100)) == [], stage
    now = int(time.time())
    assert set(found(search(srv, q="{ }", start=now - 600, end=now + 60))) == {A, B, C}, stage


def check_tags_and_metrics(srv, ids: dict[str, str]) -> None:
    r = srv.get("/api/v2/search/tags")
    assert r.status_code == 200, r.text
    scopes = {s["name"]: set(s["tags"]) for s in r.json()["scopes"]}
    assert {"service.name", "deployment.environment"} <= scopes["resource"], scopes
    assert {"user.id", "http.status_code", "payment.amount"} <= scopes["span"], scopes
    assert {"duration", "name", "status", "rootServiceName"} <= scopes["intrinsic"], scopes
    r = srv.get("/api/v2/search/tags", params={"scope": "span"})
    assert [s["name"] for s in r.json()["scopes"]] == ["span"], r.text
    assert srv.get("/api/v2/search/tags", params={"scope": "bogus"}).status_code == 400
    names = srv.get("/api/search/tags").json()["tagNames"]
    assert {"service.name", "user.id", "http.status_code"} <= set(names), names

    r = srv.get("/api/v2/search/tag/resource.service.name/values")
    assert r.status_code == 200, r.text
    vals = r.json()["tagValues"]
    assert sorted(v["value"] for v in vals) == ["checkout", "frontend", "payments"], vals
    assert all(v["type"] == "string" for v in vals), vals
    r = srv.get("/api/v2/search/tag/resource.service.name/values", params={"q": '{ span.user.id = "u-99" }'})
    assert r.json()["tagValues"] == [{"type": "string", "value": "checkout"}], r.text
    r = srv.get("/api/v2/search/tag/span.http.status_code/values")
    assert sorted(r.json()["tagValues"], key=lambda v: v["value"]) == [
        {"type": "int", "value": "200"}, {"type": "int", "value": "500"}], r.text
    r = srv.get("/api/v2/search/tag/status/values")
    assert {v["value"] for v in r.json()["tagValues"]} == {"ok", "error", "unset"}, r.text
    r = srv.get("/api/search/tag/service.name/values")
    assert sorted(r.json()["tagValues"]) == ["checkout", "frontend", "payments"], r.text
    # An incomplete query while typing filters nothing rather than failing autocomplete.
    r = srv.get("/api/v2/search/tag/resource.service.name/values", params={"q": '{ span.user.id = '})
    assert r.status_code == 200 and len(r.json()["tagValues"]) == 3, r.text

    now = time.time_ns()
    params = {"q": "{ } | count_over_time() by (resource.service.name)",
              "start": str(now - 600 * 10**9), "end": str(now + 60 * 10**9), "step": "30s"}
    r = srv.get("/api/metrics/query_range", params=params)
    assert r.status_code == 200, r.text
    series = r.json()["series"]
    totals = {}
    for s in series:
        (label,) = s["labels"]
        assert label["key"] == "resource.service.name", s
        assert set(s) <= {"labels", "samples", "exemplars"}, f"not Tempo 3's TimeSeries: {s}"
        for sample in s["samples"]:
            assert isinstance(sample["timestampMs"], str), sample
        totals[label["value"]["stringValue"]] = sum(x["value"] for x in s["samples"])
    assert totals == {"frontend": 2, "checkout": 2, "payments": 1}, totals

    r = srv.get("/api/metrics/query", params={"q": "{ status = error } | count_over_time()",
                                              "start": params["start"], "end": params["end"]})
    assert r.status_code == 200, r.text
    (s,) = r.json()["series"]
    assert s["value"] == 1, s
    # Over the whole range as one step: an instant query (a range query's steps are aligned to
    # whole multiples of the step, and a boundary could fall between the two checkout spans).
    r = srv.get("/api/metrics/query", params={
        "q": "{ } | quantile_over_time(duration, 0.5) by (resource.service.name)",
        "start": params["start"], "end": params["end"]})
    assert r.status_code == 200, r.text
    med = {s["labels"][0]["value"]["stringValue"]: s["value"] for s in r.json()["series"]
           if s["labels"][0]["key"] == "resource.service.name"}
    assert med["payments"] == 1.2 and med["checkout"] == (0.25 + 0.12) / 2, med


def test_search_head_blocks_and_restart(weft_factory):
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    ids = send_scene(srv)
    check_searches(srv, ids, "from the head")
    check_tags_and_metrics(srv, ids)
    wait_for_block_spans(srv, 5)
    r = srv.get("/api/search", params={"q": "{ }"})
    assert r.status_code == 200, r.text
    body = r.json()
    # weft's block counts ride in headers: Tempo's SearchMetrics has no field for them.
    assert int(r.headers["x-weft-inspected-blocks"]) >= 1, dict(r.headers)
    assert "inspectedBlocks" not in body["metrics"] and "skippedBlocks" not in body["metrics"], body
    assert body["metrics"]["totalBlocks"] == len(block_metas(srv.data_dir)), body["metrics"]
    check_searches(srv, ids, "from blocks")
    check_tags_and_metrics(srv, ids)
    srv.restart()
    check_searches(srv, ids, "after a restart")


def test_search_errors_are_clear_400s(weft_factory):
    srv = weft_factory()
    cases = {
        "/api/search?q={ .a = }": "column",
        # compare() runs, as a metrics query: search says where to send it.
        '/api/search?q={ resource.service.name = "x" } | compare({ status = error })': "/api/metrics/query_range",
        "/api/search?q={ status = 3 }": "invalid query",
        "/api/search?q={ }&limit=abc": "limit",
        "/api/search?q={ }&minDuration=fast": "fast",
        "/api/search?q={ }&start=20&end=10": "start",
        "/api/search?tags=noequals": "tags",
        "/api/metrics/query_range?q={ } | rate()&step=0": "step",
        "/api/metrics/query_range?q={ }": "metrics",
        "/api/metrics/query_range": "missing q",
        "/api/v2/search/tag/not a tag {/values": "invalid tag",
    }
    for path, needle in cases.items():
        r = srv.get(path)
        assert r.status_code == 400, f"{path}: {r.status_code} {r.text}"
        assert needle in r.text, f"{path}: {r.text!r} does not mention {needle!r}"
    srv.assert_alive()


def test_large_trace_is_written_found_and_returned_truncated(weft_factory):
    """A 200,000-span trace: accepted with the default limits, found by search, and returned
    capped at --max-trace-response-bytes with the truncation marked, while RSS stays bounded."""
    from otlpdata import ExportTraceServiceRequest, new_trace_id

    cap = 4_000_000
    srv = weft_factory("--block-max-age", "2", "--max-trace-response-bytes", str(cap))
    tid = new_trace_id()
    root_id = b"\x01" * 8
    base = time.time_ns() - 60 * 10**9
    total, per_request = 200_000, 10_000
    for first in range(0, total, per_request):
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", "batch-job"
        ss = rs.scope_spans.add()
        for i in range(first, first + per_request):
            s = ss.spans.add()
            s.trace_id = tid
            s.span_id = root_id if i == 0 else (i + 2).to_bytes(8, "big")
            if i:
                s.parent_span_id = root_id
            s.name = "run-batch" if i == 0 else f"item-{i % 100}"
            s.start_time_unix_nano = base + i * 1000
            s.end_time_unix_nano = base + i * 1000 + (59 * 10**9 if i == 0 else 500)
            a = s.attributes.add()
            a.key, a.value.int_value = "item.index", i
        srv.send(req)

    body = search(srv, q='{ resource.service.name = "batch-job" && name = "run-batch" }')
    assert found(body) == [tid.hex()], body
    assert body["traces"][0]["rootTraceName"] == "run-batch"

    def fetch_v2():
        r = srv.get(f"/api/v2/traces/{tid.hex()}")
        assert r.status_code == 200, r.text[:300]
        return r

    for stage in ("head", "blocks"):
        if stage == "blocks":
            wait_for_block_spans(srv, total, timeout=60)
        r = fetch_v2()
        assert r.headers.get("x-weft-trace-truncated") == "true", (stage, dict(r.headers))
        doc = r.json()
        assert doc["status"] == "PARTIAL" and "--max-trace-response-bytes" in doc["message"], doc.get("message")
        spans = [s for rs in doc["trace"]["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        assert 1000 < len(spans) < total, (stage, len(spans))
        assert spans[0]["name"] == "run-batch", "the earliest spans, root first, are kept"
        assert len(r.content) < 3 * cap, len(r.content)
        r1 = srv.get(f"/api/traces/{tid.hex()}")
        assert r1.status_code == 200 and r1.headers.get("x-weft-trace-truncated") == "true"
        assert list(r1.json()) == ["batches"], "v1 is tempopb.Trace: the truncation is in the header"
        if stage == "blocks" and len(block_metas(srv.data_dir)) > 1:
            # Split over blocks, the trace is searched on its first spans only: the answer
            # says so instead of silently missing matches in the rest.
            r = srv.get("/api/search", params={"q": '{ name = "item-7" }'})
            assert r.status_code == 200
            assert int(r.headers.get("x-weft-partial-truncated-traces", "0")) >= 1, dict(r.headers)
    rss = srv.metric("process_resident_memory_peak_bytes")
    assert rss is not None and rss < 600 * 2**20, f"peak RSS {rss / 2**20:.0f} MiB"


def graph(srv, **params):
    r = srv.get("/api/service-graph", params=params)
    assert r.status_code == 200, f"/api/service-graph {params}: {r.status_code} {r.text}"
    return r.json()


def check_service_graph(srv, stage: str) -> None:
    """The scene's graph: frontend -> checkout (1 call) -> payments (1 call, failed), counted
    over every trace, with the services' span, error and root counts."""
    body = graph(srv)
    assert body["complete"] is True and "countedFrom" not in body, (stage, body)
    edges = {(e["parent"], e["child"]): e for e in body["edges"]}
    assert set(edges) == {("frontend", "checkout"), ("checkout", "payments")}, (stage, body)
    fc, cp = edges[("frontend", "checkout")], edges[("checkout", "payments")]
    assert (fc["callCount"], fc["errorCount"]) == (1, 0), (stage, fc)
    assert (cp["callCount"], cp["errorCount"]) == (1, 1), (stage, cp)
    # Edge latency is the callee's duration, kept in a histogram with 8 buckets per power of two,
    # so a quantile is within 10% of the truth.
    for e, want in ((fc, 250 * MS), (cp, 1200 * MS)):
        for q in ("latencyP50Nano", "latencyP90Nano", "latencyP99Nano"):
            assert isinstance(e[q], str) and abs(int(e[q]) - want) <= want // 10, (stage, q, e)
    services = {s["name"]: (s["spanCount"], s["errorCount"], s["rootCount"]) for s in body["services"]}
    assert services == {"frontend": (2, 0, 2), "checkout": (2, 0, 1), "payments": (1, 1, 0)}, (stage, services)
    assert body["metrics"]["inspectedTraces"] >= 3, body["metrics"]

    # A filter keeps whole traces whose spans match: only trace A reaches payments.
    only_a = graph(srv, q='{ resource.service.name = "payments" }')
    assert {(e["parent"], e["child"]) for e in only_a["edges"]} == set(edges), (stage, only_a)
    assert {s["name"]: s["spanCount"] for s in only_a["services"]} == {"frontend": 1, "checkout": 1, "payments": 1}
    assert graph(srv, q="{ duration > 1h }")["edges"] == []

    # A window before the scene holds nothing; a span budget that reading every span spends
    # exactly still gives a complete count.
    old = graph(srv, start=str(int(time.time()) - 7200), end=str(int(time.time()) - 3600))
    assert old["edges"] == [] and old["services"] == [], (stage, old)
    exact = graph(srv, maxSpans="5")
    assert exact["complete"] is True and exact["edges"] == body["edges"], (stage, exact)


def test_service_graph_head_blocks_and_restart(weft_factory):
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    send_scene(srv)
    check_service_graph(srv, "from the head")
    wait_for_block_spans(srv, 5)
    check_service_graph(srv, "from blocks")
    srv.restart()
    check_service_graph(srv, "after a restart")
    for path, needle in {
        "/api/service-graph?q={ .a = }": "column",
        "/api/service-graph?q={ } | rate()": "metrics",
        "/api/service-graph?maxSpans=0": "maxSpans",
        "/api/service-graph?since=forever": "forever",
        "/api/service-graph?start=20&end=10": "start",
    }.items():
        r = srv.get(path)
        assert r.status_code == 400, f"{path}: {r.status_code} {r.text}"
        assert needle in r.text, f"{path}: {r.text!r} does not mention {needle!r}"


def test_service_graph_counts_calls_across_a_trace_split_between_block_and_head(weft_factory):
    """The caller's span is already in a block when the callee's arrives in the head: the call
    is still counted, once, and still once when both are in blocks."""
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    providers = {}
    for svc in ("gateway", "inventory"):
        p = TracerProvider(resource=Resource.create({"service.name": svc}))
        p.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=srv.otlp_url)))
        providers[svc] = p
    base = time.time_ns() - 5_000 * MS
    client = providers["gateway"].get_tracer("t").start_span("GET /stock", kind=SpanKind.CLIENT, start_time=base)
    client.set_status(Status(StatusCode.ERROR, "timeout"))
    client.end(end_time=base + 900 * MS)
    assert providers["gateway"].force_flush(30_000)
    wait_for_block_spans(srv, 1)
    server = providers["inventory"].get_tracer("t").start_span(
        "stock", context=trace_api.set_span_in_context(client), kind=SpanKind.SERVER,
        start_time=base + 5 * MS)
    server.end(end_time=base + 805 * MS)
    assert providers["inventory"].force_flush(30_000)
    for p in providers.values():
        p.shutdown()
    for stage in ("block and head", "two blocks"):
        body = graph(srv)
        edges = {(e["parent"], e["child"]): e for e in body["edges"]}
        assert set(edges) == {("gateway", "inventory")}, (stage, body)
        e = edges[("gateway", "inventory")]
        assert (e["callCount"], e["errorCount"]) == (1, 1), (stage, e)  # the caller saw it fail
        assert abs(int(e["latencyP50Nano"]) - 800 * MS) <= 80 * MS, (stage, e)
        assert "unresolvedCalls" not in body, (stage, body)
        # A budget of one span leaves the other piece unread: the count says it is partial.
        partial = graph(srv, maxSpans="1")
        assert partial["complete"] is False and int(partial["countedFrom"]) > 0, (stage, partial)
        if stage == "block and head":
            wait_for_block_spans(srv, 2)
