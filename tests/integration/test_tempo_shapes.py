"""Every Tempo-compatible reply has exactly the fields of its message in Tempo 3's `tempopb`.

Grafana's Tempo data source decodes `/api/search` and `/api/metrics/query` with a JSON decoder
that rejects unknown fields, and so does tempo-cli for every endpoint; one extra field fails
the whole query. The schemas below are Tempo 3.0's messages (field names per protobuf's JSON
mapping, 64-bit integers as strings). The checker walks every reply and fails on any field the
message does not have, or a value of the wrong JSON type, as a strict protobuf JSON decoder
would. weft's own statistics are in `x-weft-*` headers instead."""

from __future__ import annotations

import time

from otlpdata import make_request, make_span, new_trace_id
from weftlib import wait_for_block_spans

U32, U64, I64, DOUBLE, STR, BOOL, ENUM = "u32", "u64", "i64", "double", "str", "bool", "enum"


class Map:
    """A protobuf map<string, V>."""

    def __init__(self, value):
        self.value = value


ANY_VALUE: dict = {}
KEY_VALUE = {"key": STR, "value": ANY_VALUE}
ANY_VALUE.update({
    "stringValue": STR, "boolValue": BOOL, "intValue": I64, "doubleValue": DOUBLE,
    "arrayValue": {"values": [ANY_VALUE]}, "kvlistValue": {"values": [KEY_VALUE]}, "bytesValue": STR,
})
SPAN = {"spanID": STR, "name": STR, "startTimeUnixNano": U64, "durationNanos": U64, "attributes": [KEY_VALUE]}
SPAN_SET = {"spans": [SPAN], "matched": U32, "attributes": [KEY_VALUE]}
TRACE_SEARCH_METADATA = {
    "traceID": STR, "rootServiceName": STR, "rootTraceName": STR, "startTimeUnixNano": U64,
    "durationMs": U32, "spanSet": SPAN_SET, "spanSets": [SPAN_SET],
    "serviceStats": Map({"spanCount": U32, "errorCount": U32}),
}
SEARCH_METRICS = {
    "inspectedTraces": U32, "inspectedBytes": U64, "totalBlocks": U32, "completedJobs": U32,
    "totalJobs": U32, "totalBlockBytes": U64, "inspectedSpans": U64,
}
METADATA_METRICS = {
    "inspectedBytes": U64, "totalJobs": U32, "completedJobs": U32, "totalBlocks": U32, "totalBlockBytes": U64,
}
SEARCH_RESPONSE = {"traces": [TRACE_SEARCH_METADATA], "metrics": SEARCH_METRICS}
SEARCH_TAGS_RESPONSE = {"tagNames": [STR], "metrics": METADATA_METRICS}
SEARCH_TAGS_V2_RESPONSE = {"scopes": [{"name": STR, "tags": [STR]}], "metrics": METADATA_METRICS}
SEARCH_TAG_VALUES_RESPONSE = {"tagValues": [STR], "metrics": METADATA_METRICS}
SEARCH_TAG_VALUES_V2_RESPONSE = {"tagValues": [{"type": STR, "value": STR}], "metrics": METADATA_METRICS}
SAMPLE = {"timestampMs": I64, "value": DOUBLE}
EXEMPLAR = {"labels": [KEY_VALUE], "value": DOUBLE, "timestampMs": I64}
QUERY_RANGE_RESPONSE = {
    "series": [{"labels": [KEY_VALUE], "samples": [SAMPLE], "exemplars": [EXEMPLAR]}],
    "metrics": SEARCH_METRICS, "status": ENUM, "message": STR,
}
QUERY_INSTANT_RESPONSE = {
    "series": [{"labels": [KEY_VALUE], "value": DOUBLE}],
    "metrics": SEARCH_METRICS, "status": ENUM, "message": STR,
}


def check(value, schema, path: str, errors: list[str]) -> None:
    """Appends to `errors` every way `value` is not `schema` under a strict protobuf JSON decoder."""
    if isinstance(schema, list):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {value!r:.80}")
            return
        for i, v in enumerate(value):
            check(v, schema[0], f"{path}[{i}]", errors)
    elif isinstance(schema, Map):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map, got {value!r:.80}")
            return
        for k, v in value.items():
            check(v, schema.value, f"{path}[{k!r}]", errors)
    elif isinstance(schema, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object, got {value!r:.80}")
            return
        for k, v in value.items():
            if k not in schema:
                errors.append(f"{path}.{k}: unknown field (the message has {sorted(schema)})")
            else:
                check(v, schema[k], f"{path}.{k}", errors)
    elif schema in (U64, I64):
        ok = isinstance(value, int) and not isinstance(value, bool) or \
            isinstance(value, str) and value.lstrip("-").isdigit()
        if not ok or (schema == U64 and str(value).startswith("-")):
            errors.append(f"{path}: expected a {schema} (a decimal string), got {value!r}")
    elif schema == U32:
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32):
            errors.append(f"{path}: expected a uint32 number, got {value!r}")
    elif schema == DOUBLE:
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                or value in ("NaN", "Infinity", "-Infinity")):
            errors.append(f"{path}: expected a number, got {value!r}")
    elif schema == STR:
        if not isinstance(value, str):
            errors.append(f"{path}: expected a string, got {value!r}")
    elif schema == BOOL:
        if not isinstance(value, bool):
            errors.append(f"{path}: expected a bool, got {value!r}")
    elif schema == ENUM:
        if value not in ("COMPLETE", "PARTIAL", 0, 1):
            errors.append(f"{path}: expected PartialStatus, got {value!r}")


def assert_shape(r, schema, what: str):
    assert r.status_code == 200, f"{what}: {r.status_code} {r.text[:300]}"
    body = r.json()
    errors: list[str] = []
    check(body, schema, what, errors)
    assert not errors, "\n".join(errors[:20])
    return body


def test_strict_checker_rejects_what_tempo_clients_reject():
    errors: list[str] = []
    check({"traces": [], "metrics": {"inspectedBlocks": 1}}, SEARCH_RESPONSE, "r", errors)
    check({"series": [{"labels": [], "value": 1, "promLabels": "{}"}]}, QUERY_INSTANT_RESPONSE, "i", errors)
    check({"tagValues": [], "metrics": {"inspectedSpans": "3"}}, SEARCH_TAG_VALUES_RESPONSE, "t", errors)
    check({"traces": [{"durationMs": "5"}]}, SEARCH_RESPONSE, "d", errors)
    assert len(errors) == 4, errors


def test_every_tempo_endpoint_replies_with_exactly_tempos_fields(weft_factory):
    srv = weft_factory("--block-max-age", "1")
    now = time.time_ns()
    ids = []
    for i in range(6):
        tid = new_trace_id()
        root = make_span(tid, name="GET /cart", start=now - 5_000_000_000 + i, kind=2,
                         attributes={"http.route": "/cart", "http.status_code": 200 + i})
        spans = [root] + [make_span(tid, parent=root.span_id, name=f"db-{k}", start=now - 4_000_000_000 + k,
                                    attributes={"db.system": "postgresql"}) for k in range(5)]
        srv.send(make_request(spans, service=f"svc-{i % 2}"))
        ids.append(tid)

    def all_endpoints(stage: str):
        window = {"start": str((now - 600_000_000_000) // 10**9), "end": str(now // 10**9 + 60)}
        body = assert_shape(srv.get("/api/search", params={"q": "{ }", **window}), SEARCH_RESPONSE,
                            f"search ({stage})")
        assert len(body["traces"]) == 6, body
        r = srv.get("/api/search", params={"q": '{ name =~ "db-.*" }', "spss": "0", **window})
        body = assert_shape(r, SEARCH_RESPONSE, f"search spss=0 ({stage})")
        # spss=0 is unlimited, as Tempo documents it: all five matching spans, not the default 3.
        assert all(len(t["spanSet"]["spans"]) == 5 for t in body["traces"]), body["traces"][0]
        assert int(r.headers["x-weft-inspected-spans"]) >= 36, dict(r.headers)
        assert_shape(srv.get("/api/search", params={"tags": "service.name=svc-1"}), SEARCH_RESPONSE,
                     f"search by tags ({stage})")
        body = assert_shape(srv.get("/api/search/tags"), SEARCH_TAGS_RESPONSE, f"tags v1 ({stage})")
        assert "http.route" in body["tagNames"], body
        body = assert_shape(srv.get("/api/v2/search/tags"), SEARCH_TAGS_V2_RESPONSE, f"tags v2 ({stage})")
        assert {s["name"] for s in body["scopes"]} >= {"resource", "span", "intrinsic"}, body
        body = assert_shape(srv.get("/api/search/tag/http.route/values"), SEARCH_TAG_VALUES_RESPONSE,
                            f"tag values v1 ({stage})")
        assert body["tagValues"] == ["/cart"], body
        body = assert_shape(srv.get("/api/v2/search/tag/span.http.status_code/values"),
                            SEARCH_TAG_VALUES_V2_RESPONSE, f"tag values v2 ({stage})")
        assert {v["type"] for v in body["tagValues"]} == {"int"}, body
        assert_shape(srv.get("/api/v2/search/tag/status/values"), SEARCH_TAG_VALUES_V2_RESPONSE,
                     f"intrinsic values ({stage})")
        mwindow = {"start": str(now - 600_000_000_000), "end": str(now + 60_000_000_000)}
        body = assert_shape(srv.get("/api/metrics/query_range", params={
            "q": "{ } | rate() by (resource.service.name)", "step": "60s", **mwindow}),
            QUERY_RANGE_RESPONSE, f"query_range ({stage})")
        assert len(body["series"]) == 2, body
        body = assert_shape(srv.get("/api/metrics/query", params={
            "q": "{ } | count_over_time() by (resource.service.name)", **mwindow}),
            QUERY_INSTANT_RESPONSE, f"query instant ({stage})")
        assert sorted(s["value"] for s in body["series"]) == [18, 18], body
        # Trace by ID: v1 is tempopb.Trace, v2 TraceByIDResponse.
        r = srv.get(f"/api/traces/{ids[0].hex()}")
        assert r.status_code == 200 and list(r.json()) == ["batches"], r.text[:200]
        r = srv.get(f"/api/v2/traces/{ids[0].hex()}")
        assert r.status_code == 200 and set(r.json()) <= {"trace", "metrics", "status", "message"}, r.text[:200]

    all_endpoints("head")
    wait_for_block_spans(srv, 36, timeout=30)
    all_endpoints("blocks")
    r = srv.get("/api/search", params={"q": "{ }"})
    assert int(r.headers["x-weft-inspected-blocks"]) >= 1, dict(r.headers)


def test_every_offered_intrinsic_has_values(weft_factory):
    """Each intrinsic the tags endpoint offers answers its values endpoint with values
    (trace-level ones once per trace: root name, root service, trace duration)."""
    srv = weft_factory()
    now = time.time_ns()
    for i in range(3):
        tid = new_trace_id()
        root = make_span(tid, name=f"root-{i}", start=now - 10**9, end=now - 10**9 + (i + 1) * 10**8, kind=2)
        child = make_span(tid, parent=root.span_id, name="child", start=now - 10**9 + 10)
        srv.send(make_request([root, child], service=f"svc-{i}"))
    r = srv.get("/api/v2/search/tags", params={"scope": "intrinsic"})
    offered = assert_shape(r, SEARCH_TAGS_V2_RESPONSE, "intrinsic tags")["scopes"][0]["tags"]
    empty = []
    for tag in offered:
        body = assert_shape(srv.get(f"/api/v2/search/tag/{tag}/values"), SEARCH_TAG_VALUES_V2_RESPONSE, tag)
        if not body["tagValues"]:
            empty.append(tag)
    # Only what these spans do not have (no events, no status message, no scope version).
    assert set(empty) <= {"event:name", "event:timeSinceStart", "statusMessage", "span:statusMessage",
                          "instrumentation:version"}, empty

    def values(tag, **params):
        body = assert_shape(srv.get(f"/api/v2/search/tag/{tag}/values", params=params),
                            SEARCH_TAG_VALUES_V2_RESPONSE, tag)
        return sorted((v["type"], v["value"]) for v in body["tagValues"])

    assert values("rootName") == [("string", f"root-{i}") for i in range(3)]
    assert values("trace:rootService") == [("string", f"svc-{i}") for i in range(3)]
    assert values("traceDuration") == [("duration", "100ms"), ("duration", "200ms"), ("duration", "300ms")]
    assert values("rootName", q='{ resource.service.name = "svc-1" }') == [("string", "root-1")]
