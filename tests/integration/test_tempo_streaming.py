"""Tempo's gRPC streaming query API (`tempopb.StreamingQuerier`) on the HTTP port, as Grafana's
Tempo data source calls it with streaming on: Search, MetricsQueryRange, MetricsQueryInstant.

The messages are built here from Tempo 3's field numbers and types (the wire contract; see
spec/tempo-streaming.md), with OTLP's KeyValue from the opentelemetry-proto package, and called
with grpcio's generic stub over plain-text HTTP/2, as Grafana does for an http:// URL."""

from __future__ import annotations

import subprocess
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.common.v1 import common_pb2  # noqa: F401  (registers KeyValue)

from otlpdata import make_request, make_span, new_trace_id

F = descriptor_pb2.FieldDescriptorProto
T = {"string": F.TYPE_STRING, "uint32": F.TYPE_UINT32, "uint64": F.TYPE_UINT64, "int64": F.TYPE_INT64,
     "int32": F.TYPE_INT32, "double": F.TYPE_DOUBLE, "bool": F.TYPE_BOOL}
KV = ".opentelemetry.proto.common.v1.KeyValue"

# message -> [(field name, number, type or .message, repeated)]
MESSAGES = {
    "SearchRequest": [("Query", 8, "string", False), ("Limit", 4, "uint32", False), ("start", 5, "uint32", False),
                      ("end", 6, "uint32", False), ("SpansPerSpanSet", 9, "uint32", False),
                      ("MinDurationMs", 2, "uint32", False), ("MaxDurationMs", 3, "uint32", False)],
    "ServiceStats": [("spanCount", 1, "uint32", False), ("errorCount", 2, "uint32", False)],
    "Span": [("spanID", 1, "string", False), ("name", 2, "string", False), ("startTimeUnixNano", 3, "uint64", False),
             ("durationNanos", 4, "uint64", False), ("attributes", 5, KV, True)],
    "SpanSet": [("spans", 1, ".tempopb.Span", True), ("matched", 2, "uint32", False), ("attributes", 3, KV, True)],
    "TraceSearchMetadata": [("traceID", 1, "string", False), ("rootServiceName", 2, "string", False),
                            ("rootTraceName", 3, "string", False), ("startTimeUnixNano", 4, "uint64", False),
                            ("durationMs", 5, "uint32", False), ("spanSet", 6, ".tempopb.SpanSet", False),
                            ("spanSets", 7, ".tempopb.SpanSet", True)],
    "SearchMetrics": [("inspectedTraces", 1, "uint32", False), ("inspectedBytes", 2, "uint64", False),
                      ("totalBlocks", 3, "uint32", False), ("completedJobs", 4, "uint32", False),
                      ("totalJobs", 5, "uint32", False), ("totalBlockBytes", 6, "uint64", False),
                      ("inspectedSpans", 7, "uint64", False)],
    "SearchResponse": [("traces", 1, ".tempopb.TraceSearchMetadata", True),
                       ("metrics", 2, ".tempopb.SearchMetrics", False)],
    "QueryRangeRequest": [("query", 1, "string", False), ("start", 2, "uint64", False), ("end", 3, "uint64", False),
                          ("step", 4, "uint64", False), ("exemplars", 16, "uint32", False)],
    "Sample": [("value", 1, "double", False), ("timestamp_ms", 2, "int64", False)],
    "Exemplar": [("labels", 1, KV, True), ("value", 2, "double", False), ("timestamp_ms", 3, "int64", False)],
    "TimeSeries": [("labels", 1, KV, True), ("samples", 2, ".tempopb.Sample", True),
                   ("exemplars", 4, ".tempopb.Exemplar", True)],
    "QueryRangeResponse": [("series", 1, ".tempopb.TimeSeries", True), ("metrics", 2, ".tempopb.SearchMetrics", False),
                           ("status", 3, "int32", False), ("message", 4, "string", False)],
    "QueryInstantRequest": [("query", 1, "string", False), ("start", 2, "uint64", False), ("end", 3, "uint64", False)],
    "InstantSeries": [("labels", 1, KV, True), ("value", 2, "double", False)],
    "QueryInstantResponse": [("series", 1, ".tempopb.InstantSeries", True),
                             ("metrics", 2, ".tempopb.SearchMetrics", False),
                             ("status", 3, "int32", False), ("message", 4, "string", False)],
    "SearchTagsRequest": [("scope", 1, "string", False), ("query", 2, "string", False), ("start", 3, "uint32", False),
                          ("end", 4, "uint32", False)],
    "MetadataMetrics": [("inspectedBytes", 1, "uint64", False), ("totalJobs", 2, "uint32", False),
                        ("completedJobs", 3, "uint32", False), ("totalBlocks", 4, "uint32", False),
                        ("totalBlockBytes", 5, "uint64", False)],
    "SearchTagsResponse": [("tagNames", 1, "string", True), ("metrics", 2, ".tempopb.MetadataMetrics", False)],
    "SearchTagsV2Scope": [("name", 1, "string", False), ("tags", 2, "string", True)],
    "SearchTagsV2Response": [("scopes", 1, ".tempopb.SearchTagsV2Scope", True),
                             ("metrics", 2, ".tempopb.MetadataMetrics", False)],
    "SearchTagValuesRequest": [("tagName", 1, "string", False), ("query", 2, "string", False),
                               ("start", 4, "uint32", False), ("end", 5, "uint32", False)],
    "SearchTagValuesResponse": [("tagValues", 1, "string", True), ("metrics", 2, ".tempopb.MetadataMetrics", False)],
    "TagValue": [("type", 1, "string", False), ("value", 2, "string", False)],
    "SearchTagValuesV2Response": [("tagValues", 1, ".tempopb.TagValue", True),
                                  ("metrics", 2, ".tempopb.MetadataMetrics", False)],
}


def _classes():
    fd = descriptor_pb2.FileDescriptorProto(name="weft_tests/tempopb_streaming.proto", package="tempopb",
                                            syntax="proto3",
                                            dependency=["opentelemetry/proto/common/v1/common.proto"])
    for name, fields in MESSAGES.items():
        m = fd.message_type.add(name=name)
        for fname, num, ftype, repeated in fields:
            f = m.field.add(name=fname, number=num, json_name=fname,
                            label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
            if ftype.startswith("."):
                f.type, f.type_name = F.TYPE_MESSAGE, ftype
            else:
                f.type = T[ftype]
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(fd.name)
    except KeyError:
        pool.Add(fd)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tempopb.{n}")) for n in MESSAGES}


PB = _classes()


def stream(srv, method: str, req, reply: str, timeout: float = 30) -> list:
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.http_port}")
    try:
        call = channel.unary_stream(f"/tempopb.StreamingQuerier/{method}",
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=PB[reply].FromString)
        return list(call(req, timeout=timeout))
    finally:
        channel.close()


def test_streaming_search_and_metrics_answer_like_the_http_api(weft_factory):
    srv = weft_factory("--block-max-age", "1")
    now = time.time_ns()
    sent = {}
    for i in range(12):
        tid = new_trace_id()
        root = make_span(tid, name=f"op-{i % 3}", start=now - 60_000_000_000 + i * 1_000_000, kind=2)
        spans = [root] + [make_span(tid, parent=root.span_id, name="child", start=now - 59_000_000_000 + k)
                          for k in range(4)]
        srv.send(make_request(spans, service=f"svc-{i % 2}"))
        sent[tid.hex().lstrip("0")] = i

    start_s, end_s = (now - 600_000_000_000) // 10**9, now // 10**9 + 60
    # Search: the stream's messages merged by trace ID, as Grafana merges them, equal the HTTP answer.
    replies = stream(srv, "Search", PB["SearchRequest"](Query="{ }", Limit=50, start=start_s, end=end_s,
                                                         SpansPerSpanSet=0), "SearchResponse")
    assert replies, "the stream ended without a reply"
    final = replies[-1]
    assert final.metrics.inspectedSpans >= 60, final.metrics
    got = {}
    for r in replies:
        for t in r.traces:
            got.setdefault(t.traceID, t)
    assert set(got) == set(sent), (sorted(got), sorted(sent))
    http = srv.get("/api/search", params={"q": "{ }", "limit": "50", "start": str(start_s), "end": str(end_s),
                                          "spss": "0"}).json()
    assert {t["traceID"] for t in http["traces"]} == {t.traceID for t in final.traces}
    t = got[next(iter(sent))]
    assert t.rootServiceName.startswith("svc-") and t.rootTraceName.startswith("op-"), t
    assert len(t.spanSet.spans) == 5 and t.spanSet.matched == 5, "spss=0 is unlimited"
    assert t.spanSets[0] == t.spanSet

    # A filter and a limit.
    replies = stream(srv, "Search", PB["SearchRequest"](Query='{ resource.service.name = "svc-1" }', Limit=3,
                                                         start=start_s, end=end_s, SpansPerSpanSet=3),
                     "SearchResponse")
    final = replies[-1]
    assert len(final.traces) == 3 and all(sent[t.traceID] % 2 == 1 for t in final.traces), final.traces
    assert all((len(t.spanSet.spans), t.spanSet.matched) == (3, 5) for t in final.traces), final.traces

    # Range metrics, nanosecond times as Grafana sends them.
    q = "{ } | count_over_time() by (resource.service.name)"
    replies = stream(srv, "MetricsQueryRange", PB["QueryRangeRequest"](
        query=q, start=now - 600_000_000_000, end=now + 60_000_000_000, step=60_000_000_000), "QueryRangeResponse")
    totals = {s.labels[0].value.string_value: sum(x.value for x in s.samples) for s in replies[-1].series}
    assert totals == {"svc-0": 30, "svc-1": 30}, totals
    http = srv.get("/api/metrics/query_range", params={"q": q, "start": str(now - 600_000_000_000),
                                                       "end": str(now + 60_000_000_000), "step": "60s"}).json()
    assert len(http["series"]) == len(replies[-1].series)
    # Exemplars (100 at most by default), each a trace of its series, with the series' value.
    exemplars = [(s, e) for s in replies[-1].series for e in s.exemplars]
    assert 1 <= len(exemplars) <= 100, replies[-1]
    for s, e in exemplars:
        labels = {kv.key: kv.value.string_value for kv in e.labels}
        assert labels["resource.service.name"] == s.labels[0].value.string_value, e
        assert srv.get(f"/api/traces/{labels['trace:id']}").status_code == 200, labels
        at = [x.value for x in s.samples if x.timestamp_ms <= e.timestamp_ms < x.timestamp_ms + 60_000]
        assert at == [e.value], (e, s.samples)
    # Instant metrics.
    replies = stream(srv, "MetricsQueryInstant", PB["QueryInstantRequest"](
        query=q, start=now - 600_000_000_000, end=now + 60_000_000_000), "QueryInstantResponse")
    assert sorted(s.value for s in replies[-1].series) == [30, 30], replies[-1]

    # Errors are statuses that name the problem.
    try:
        stream(srv, "Search", PB["SearchRequest"](Query="{ .a = }", start=start_s, end=end_s), "SearchResponse")
        raise AssertionError("a bad query was answered")
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "parse" in e.details().lower(), e
    for method, req, want in [
        ("SearchTagsV2", PB["SearchTagsRequest"](scope="spam"), "scope"),
        ("SearchTagValuesV2", PB["SearchTagValuesRequest"](tagName="not a tag"), "not a tag"),
        ("SearchTagValues", PB["SearchTagValuesRequest"](tagName="service.name", start=end_s, end=start_s), "start"),
    ]:
        try:
            stream(srv, method, req, method.replace("Request", "") + "Response")
            raise AssertionError(f"{method} with a bad request was answered")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and want in e.details(), (method, e)
    # The HTTP API on the same port is unaffected.
    assert srv.get("/api/echo").status_code == 200


def test_streamed_tag_lookups_answer_like_the_http_api(weft_factory):
    """tempo-cli's `query api search-tags` and `search-tag-values` with `--use-grpc` call the
    streaming tag RPCs: each answers the HTTP API's lists in one message, with its metrics."""
    srv = weft_factory("--block-max-age", "1")
    now = time.time_ns()
    for i in range(12):
        tid = new_trace_id()
        root = make_span(tid, name=f"op-{i % 3}", start=now - 60_000_000_000 + i * 1_000_000, kind=2,
                         attributes={"http.route": f"/r/{i % 4}"})
        child = make_span(tid, parent=root.span_id, name="child", start=now - 59_000_000_000,
                          attributes={"db.system": "pg"})
        srv.send(make_request([root, child], service=f"svc-{i % 2}"))
    start_s, end_s = (now - 600_000_000_000) // 10**9, now // 10**9 + 60
    window = {"start": str(start_s), "end": str(end_s)}

    def one(method, req, reply):
        replies = stream(srv, method, req, reply)
        assert len(replies) == 1, (method, replies)
        return replies[0]

    for scope in ("", "span", "resource", "intrinsic"):
        r = one("SearchTagsV2", PB["SearchTagsRequest"](scope=scope, start=start_s, end=end_s), "SearchTagsV2Response")
        http = srv.get("/api/v2/search/tags", params={**window, **({"scope": scope} if scope else {})}).json()
        assert [(s.name, list(s.tags)) for s in r.scopes] == [(s["name"], s["tags"]) for s in http["scopes"]], scope
        assert r.metrics.totalJobs >= 1 and r.metrics.completedJobs == r.metrics.totalJobs, (scope, r.metrics)
        assert r.metrics.totalJobs == http["metrics"]["totalJobs"], (scope, r.metrics, http["metrics"])
    r = one("SearchTagsV2", PB["SearchTagsRequest"](start=start_s, end=end_s), "SearchTagsV2Response")
    scopes = {s.name: set(s.tags) for s in r.scopes}
    assert {"http.route", "db.system"} <= scopes["span"] and "service.name" in scopes["resource"], scopes
    # Filtered by a query: only the keys of the spans it matches.
    r = one("SearchTagsV2", PB["SearchTagsRequest"](scope="span", query='{ name = "child" }', start=start_s, end=end_s),
            "SearchTagsV2Response")
    assert set(r.scopes[0].tags) == {"db.system"}, r
    r = one("SearchTags", PB["SearchTagsRequest"](start=start_s, end=end_s), "SearchTagsResponse")
    assert list(r.tagNames) == srv.get("/api/search/tags", params=window).json()["tagNames"]

    r = one("SearchTagValuesV2", PB["SearchTagValuesRequest"](tagName="resource.service.name", start=start_s,
                                                              end=end_s), "SearchTagValuesV2Response")
    http = srv.get("/api/v2/search/tag/resource.service.name/values", params=window).json()
    assert [(v.type, v.value) for v in r.tagValues] == [(v["type"], v["value"]) for v in http["tagValues"]]
    assert sorted(v.value for v in r.tagValues) == ["svc-0", "svc-1"] and r.metrics.totalJobs >= 1
    r = one("SearchTagValuesV2", PB["SearchTagValuesRequest"](tagName="span.http.route", query='{ resource.service.name = "svc-0" }',
                                                              start=start_s, end=end_s), "SearchTagValuesV2Response")
    assert sorted(v.value for v in r.tagValues) == ["/r/0", "/r/2"], r  # even i
    r = one("SearchTagValuesV2", PB["SearchTagValuesRequest"](tagName="status"), "SearchTagValuesV2Response")
    assert [(v.type, v.value) for v in r.tagValues] == [("keyword", "ok"), ("keyword", "error"), ("keyword", "unset")]
    # v1 names an attribute, whatever its scope, and answers text sorted.
    r = one("SearchTagValues", PB["SearchTagValuesRequest"](tagName="http.route", start=start_s, end=end_s),
            "SearchTagValuesResponse")
    assert list(r.tagValues) == srv.get("/api/search/tag/http.route/values", params=window).json()["tagValues"]
    assert list(r.tagValues) == ["/r/0", "/r/1", "/r/2", "/r/3"], r


def test_a_search_answer_over_a_clients_message_limit_arrives_whole(weft_factory):
    """A search whose complete answer is larger than gRPC clients accept in one message by
    default (4 MiB: grpc-go's, so Grafana's, and grpcio's, used here with its defaults) comes
    in several messages that merge to the HTTP API's answer. Before, the final message held
    the whole answer: the client refused it (RESOURCE_EXHAUSTED), and over 16 MiB the server
    failed the call."""
    srv = weft_factory()
    now = time.time_ns()
    for i in range(150):
        tid = new_trace_id()
        spans = [make_span(tid, name=f"op-{k}", start=now - 60_000_000_000 + i * 1_000_000 + k,
                           attributes={"pad": f"{i}-{k}-" + "x" * 800}) for k in range(40)]
        srv.send(make_request(spans, service="big"))
    start_s, end_s = (now - 600_000_000_000) // 10**9, now // 10**9 + 60
    q = "{ } | select(span.pad)"
    replies = stream(srv, "Search", PB["SearchRequest"](Query=q, Limit=150, start=start_s, end=end_s,
                                                         SpansPerSpanSet=40), "SearchResponse", timeout=120)
    assert sum(r.ByteSize() for r in replies) > 4 << 20, "the answer must exceed one message's limit"
    assert all(r.ByteSize() <= 4 << 20 for r in replies)
    merged = {}
    for r in replies:
        for t in r.traces:
            merged[t.traceID] = t
    http = srv.get("/api/search", params={"q": q, "limit": "150", "spss": "40", "start": str(start_s),
                                          "end": str(end_s)}).json()
    assert len(http["traces"]) == 150
    assert set(merged) == {t["traceID"] for t in http["traces"]}
    for t in http["traces"]:
        got = merged[t["traceID"]].spanSet
        assert len(got.spans) == 40 and got.matched == 40, (t["traceID"], len(got.spans), got.matched)
        pads = {kv.value.string_value for sp in got.spans for kv in sp.attributes if kv.key == "pad"}
        assert pads == {a["value"]["stringValue"] for sp in t["spanSet"]["spans"] for a in sp["attributes"]
                        if a["key"] == "pad"}
    assert replies[-1].metrics.inspectedSpans == 6000, replies[-1].metrics


def test_a_streamed_search_reports_its_progress_as_tempos_frontend_does(weft_factory, weft_bin):
    """Grafana shows a streamed search's progress from the last message's `completedJobs` of
    `totalJobs` (and its inspected figures). Tempo's frontend sends them as its jobs complete.
    Before, weft's progress messages carried empty metrics and the final one said 1 job of 1,
    so Grafana's progress stood at nothing until the search ended."""
    from weftlib import block_metas, wait_for_block_spans

    srv = weft_factory("--query-parallelism", "1", "--compaction-interval", "0", "--block-max-age", "1")
    subprocess.run([str(weft_bin), "loadgen", "--endpoint", srv.grpc_target, "--realistic",
                    "--max-spans", "200000", "--seed", "5", "--duration", "300"],
                   check=True, capture_output=True, timeout=300)
    wait_for_block_spans(srv, 200_000, timeout=120)
    blocks = block_metas(srv.data_dir)
    now = int(time.time())
    # Matches no span but must look at every URL: the search reads every row group.
    q = '{ span.http.url =~ ".*no-such.*" }'
    replies = stream(srv, "Search", PB["SearchRequest"](Query=q, Limit=20, start=now - 7200, end=now + 60,
                                                         SpansPerSpanSet=3), "SearchResponse", timeout=300)
    final = replies[-1].metrics
    assert final.totalJobs > 1 and final.completedJobs == final.totalJobs, final
    assert final.totalBlocks == len(blocks), (final, len(blocks))
    spans = final.inspectedSpans
    assert spans >= 200_000, final  # whole traces: the load may end a few spans over
    progress = [r.metrics for r in replies[:-1] if r.HasField("metrics") and r.metrics.totalJobs]
    assert progress, f"no progress message in {len(replies)} messages: the search took too little time to tell"
    for before, after in zip(progress, progress[1:] + [final]):
        assert before.totalJobs == final.totalJobs and before.totalBlocks == final.totalBlocks, (before, final)
        assert before.completedJobs <= after.completedJobs, (before, after)
        assert before.inspectedBytes <= after.inspectedBytes and before.inspectedSpans <= after.inspectedSpans
    assert any(0 < p.completedJobs < final.totalJobs and 0 < p.inspectedSpans < spans for p in progress), progress

    # The HTTP API's metrics count the same jobs.
    http = srv.get("/api/search", params={"q": q, "limit": "20", "start": str(now - 7200),
                                          "end": str(now + 60)}, timeout=300).json()
    assert (http["metrics"]["completedJobs"], http["metrics"]["totalJobs"]) == (final.totalJobs, final.totalJobs)


def test_a_streamed_metrics_query_sends_the_series_so_far_as_it_reads(weft_factory, weft_bin):
    """With streaming on, Grafana draws each metrics message in place of the one before, so
    Tempo's frontend sends the whole series counted so far as its jobs complete, and a chart
    fills in while the query runs. Before, weft sent one message at the end: nothing to see
    until the whole range was read. Each message here must hold whole series (never more than
    the answer, and less before the end), its progress must only grow, and the last must be
    the HTTP API's answer."""
    from weftlib import wait_for_block_spans

    srv = weft_factory("--query-parallelism", "1", "--compaction-interval", "0", "--block-max-age", "1")
    subprocess.run([str(weft_bin), "loadgen", "--endpoint", srv.grpc_target, "--realistic",
                    "--max-spans", "1000000", "--seed", "5", "--duration", "300"],
                   check=True, capture_output=True, timeout=300)
    wait_for_block_spans(srv, 1_000_000, timeout=180)
    now = time.time_ns()
    start, end, step = now - 7200 * 10**9, now + 60 * 10**9, 60 * 10**9

    def totals(series) -> dict:
        return {tuple((kv.key, kv.value.string_value) for kv in s.labels): sum(x.value for x in s.samples)
                for s in series}

    # Span-local (counted from columns) and over whole traces (a structural query). Each takes
    # over a second in a debug build: several progress intervals.
    for q in ("{ } | count_over_time() by (resource.service.name, name)", "{ } >> { } | count_over_time()"):
        replies = stream(srv, "MetricsQueryRange", PB["QueryRangeRequest"](query=q, start=start, end=end, step=step),
                         "QueryRangeResponse", timeout=300)
        final = replies[-1]
        want = totals(final.series)
        assert want and final.metrics.completedJobs == final.metrics.totalJobs > 1, (q, final.metrics)
        partial = replies[:-1]
        print(q, len(replies), [(r.metrics.completedJobs, r.metrics.totalJobs, sum(totals(r.series).values()))
                                for r in replies])
        assert partial, f"`{q}`: no message before the answer ({len(replies)} in all)"
        for before, after in zip(partial, partial[1:] + [final]):
            assert before.metrics.completedJobs <= after.metrics.completedJobs, (q, before.metrics, after.metrics)
            assert before.metrics.inspectedSpans <= after.metrics.inspectedSpans, (q, before.metrics, after.metrics)
            got, later = totals(before.series), totals(after.series)
            assert all(got[k] <= later.get(k, 0) for k in got), (q, got, later)
        assert any(sum(totals(r.series).values()) < sum(want.values()) for r in partial), q
        assert all(r.metrics.completedJobs < r.metrics.totalJobs for r in partial), q
        http = srv.get("/api/metrics/query_range", params={"q": q, "start": str(start), "end": str(end),
                                                           "step": "60s"}, timeout=300).json()
        assert {tuple((kv["key"], kv["value"].get("stringValue", "")) for kv in s["labels"]):
                sum(float(x["value"]) for x in s["samples"]) for s in http["series"]} == want, q
        # The HTTP reply counts the same jobs.
        jobs = (http["metrics"]["completedJobs"], http["metrics"]["totalJobs"])
        assert jobs == (final.metrics.totalJobs, final.metrics.totalJobs), (q, http["metrics"])
