"""TraceQL that Tempo runs and Grafana sends: metrics comparisons and arithmetic, topk/bottomk,
span:childCount and nil, the sibling and union structural operators, coalesce(), hints,
pipelines inside spanset expressions, compare(), nested sets, arithmetic between fields and
exemplars, answered through the HTTP API; what weft does not run (`parent.`, as Tempo) is a 400
that names the feature, never a parse error."""

from __future__ import annotations

import time

from opentelemetry.proto.trace.v1.trace_pb2 import Status

from otlpdata import make_request, make_span, new_trace_id
from weftlib import wait_for_block_spans


def _scene(srv, now):
    # 6 traces: a root with 2 children (svc-a) and 4 traces of a single span (svc-b); one error.
    for i in range(2):
        tid = new_trace_id()
        root = make_span(tid, name="root", start=now - 30_000_000_000 + i, kind=2,
                         attributes={"foo": "x"} if i == 0 else {})
        kids = [make_span(tid, parent=root.span_id, name="kid", start=now - 30_000_000_000 + 10 + k)
                for k in range(2)]
        srv.send(make_request([root] + kids, service="svc-a"))
    for i in range(4):
        tid = new_trace_id()
        srv.send(make_request([make_span(tid, name="solo", start=now - 20_000_000_000 + i)], service="svc-b"))


def _metrics(srv, q, now, instant=False):
    params = {"q": q, "start": str(now - 120_000_000_000), "end": str(now + 1_000_000_000)}
    if not instant:
        params["step"] = "121s"
    r = srv.get("/api/metrics/query" if instant else "/api/metrics/query_range", params=params)
    assert r.status_code == 200, f"{q}: {r.status_code} {r.text}"
    return r.json()["series"]


def _labels(s):
    return {kv["key"]: next(iter(kv["value"].values())) for kv in s["labels"]}


def test_metrics_comparisons_arithmetic_and_topk(weft_factory):
    srv = weft_factory()
    # 60 s past a multiple of the range queries' 121 s step (and not ahead of the clock): the
    # step that holds the spans (now - 30 s, now - 20 s) is [now - 60 s, now + 61 s), whole, as
    # a range query aligns its steps to multiples of the step.
    t = time.time_ns()
    now = t - (t - 60 * 10**9) % (121 * 10**9)
    _scene(srv, now)
    count = {_labels(s).get("resource.service.name"): s["value"]
             for s in _metrics(srv, "{ } | count_over_time() by (resource.service.name)", now, instant=True)}
    assert count == {"svc-a": 6, "svc-b": 4}, count
    # A comparison keeps the series (points) that satisfy it.
    got = _metrics(srv, "{ } | count_over_time() by (resource.service.name) > 5", now, instant=True)
    assert [(_labels(s).get("resource.service.name"), s["value"]) for s in got] == [("svc-a", 6)], got
    # Arithmetic with a scalar, on either side.
    for q in ("({ } | count_over_time()) * 100", "100 * ({ } | count_over_time())"):
        (s,) = _metrics(srv, q, now, instant=True)
        assert s["value"] == 1000, (q, s)
    # Series with series, matched by labels.
    got = _metrics(srv, "({ status = unset } | count_over_time() by (resource.service.name)) / "
                        "({ } | count_over_time() by (resource.service.name))", now, instant=True)
    assert sorted(s["value"] for s in got) == [1, 1], got
    # topk/bottomk per step.
    (s,) = _metrics(srv, "{ } | count_over_time() by (resource.service.name) | topk(1)", now, instant=True)
    assert _labels(s).get("resource.service.name") == "svc-a", s
    (s,) = _metrics(srv, "{ } | count_over_time() by (resource.service.name) | bottomk(1)", now, instant=True)
    assert _labels(s).get("resource.service.name") == "svc-b", s
    got = _metrics(srv, "{ } | rate() by (resource.service.name) | topk(1) > 0", now)
    assert len(got) == 1, got


def test_child_count_nil_and_clear_refusals(weft_factory):
    srv = weft_factory()
    now = time.time_ns()
    _scene(srv, now)

    def search(q):
        r = srv.get("/api/search", params={"q": q, "limit": "50"})
        return r

    r = search("{ span:childCount = 2 }")
    assert r.status_code == 200 and len(r.json()["traces"]) == 2, r.text[:300]
    r = search("{ span.foo != nil }")
    assert r.status_code == 200 and len(r.json()["traces"]) == 1, r.text[:300]
    r = search("{ nil = span.foo && name = \"root\" }")
    assert r.status_code == 200 and len(r.json()["traces"]) == 1, r.text[:300]
    # A span always has a status: Tempo refuses comparing it with nil.
    r = search("{ span:status = nil }")
    assert r.status_code == 400, r.text
    # Siblings, unions, coalesce and hints run.
    r = search('{ name = "kid" } ~ { name = "kid" }')
    assert r.status_code == 200 and len(r.json()["traces"]) == 2, r.text[:300]
    r = search('{ name = "root" } &> { name = "kid" }')
    assert r.status_code == 200 and [t["spanSet"]["matched"] for t in r.json()["traces"]] == [3, 3], r.text[:300]
    r = search('{ name = "solo" } !~ { name = "solo" }')
    assert r.status_code == 200 and len(r.json()["traces"]) == 4, r.text[:300]
    for q in ("{ } | coalesce()", "{ } with (sample=true)", '({ } | count() > 2) && { name = "root" }'):
        r = search(q)
        assert r.status_code == 200, (q, r.text)
    assert len(search('({ } | count() > 2) && { name = "root" }').json()["traces"]) == 2
    # Valid TraceQL weft does not run yet: a 400 naming the feature, not a parse error.
    for q, feature in (('{ parent.foo = "x" }', "parent"),):
        r = search(q)
        assert r.status_code == 400 and feature in r.text and "parse" not in r.text.lower(), (q, r.text)
    # Nested sets (depth-first by start time from the root) and arithmetic between fields.
    r = search('{ nestedSetParent = -1 && name = "root" }')
    assert r.status_code == 200 and len(r.json()["traces"]) == 2, r.text[:300]
    r = search('{ nestedSetRight - nestedSetLeft = 1 && name = "kid" }')
    assert r.status_code == 200 and len(r.json()["traces"]) == 2, r.text[:300]
    r = search('{ name = "root" && nestedSetLeft = 1 && nestedSetRight = 6 }')
    assert r.status_code == 200 and len(r.json()["traces"]) == 2, r.text[:300]
    r = search("{ duration - duration = 0 && span:childCount * 10 + span:childCount = 22 }")
    assert r.status_code == 200 and len(r.json()["traces"]) == 2, r.text[:300]
    # A metrics query sent to search says where to send it, naming no internal function.
    r = search("{ } | rate()")
    assert r.status_code == 400 and "/api/metrics/query_range" in r.text and "eval_metrics" not in r.text, r.text


def test_compare_exemplars_and_span_attribute_metrics(weft_factory):
    srv = weft_factory()
    now = time.time_ns()
    _scene(srv, now)
    # compare(): the error span (a "solo" of svc-b, marked below) against the rest.
    tid = new_trace_id()
    srv.send(make_request([make_span(tid, name="boom", start=now - 10_000_000_000,
                                     status=Status(code=Status.STATUS_CODE_ERROR),
                                     attributes={"foo": "y"})], service="svc-b"))
    got = {}
    for s in _metrics(srv, "{ } | compare({ status = error })", now, instant=True):
        ls = _labels(s)
        meta = ls.pop("__meta_type")
        (key, value), = ls.items()
        got[(meta, key, value)] = s["value"]
    assert got[("selection", "name", "boom")] == 1, got
    assert got[("selection_total", "name", "nil")] == 1, got
    assert got[("baseline", "name", "kid")] == 4, got
    assert got[("baseline", "name", "solo")] == 4, got
    assert got[("baseline_total", "resource.service.name", "nil")] == 10, got
    assert got[("selection", "span.foo", "y")] == 1 and got[("baseline", "span.foo", "x")] == 1, got
    assert ("baseline", "name", "boom") not in got, got
    # topN = 1 keeps the most frequent value of each attribute.
    top = [_labels(s) for s in _metrics(srv, "{ } | compare({ status = error }, 1)", now, instant=True)]
    assert [l["resource.service.name"] for l in top
            if l["__meta_type"] == "baseline" and "resource.service.name" in l] == ["svc-a"], top

    # Exemplars on range queries: trace:id of a stored trace, at most the limit, none on instant.
    params = {"q": "{ } | count_over_time() by (resource.service.name)",
              "start": str(now - 120_000_000_000), "end": str(now + 1_000_000_000), "step": "10s"}
    r = srv.get("/api/metrics/query_range", params=params)
    assert r.status_code == 200, r.text
    exemplars = [(s, e) for s in r.json()["series"] for e in s.get("exemplars", [])]
    assert 1 <= len(exemplars) <= 100, r.text[:500]
    for s, e in exemplars:
        labels = {kv["key"]: kv["value"]["stringValue"] for kv in e["labels"]}
        assert labels["resource.service.name"] == _labels(s)["resource.service.name"], (s, e)
        t = srv.get(f"/api/traces/{labels['trace:id']}")
        assert t.status_code == 200, (labels, t.status_code)
        assert e["value"] >= 1 and int(e["timestampMs"]) > 0, e
    assert len({e["labels"][0]["value"]["stringValue"] for _, e in exemplars}) == len(exemplars), \
        "one exemplar per trace"
    r = srv.get("/api/metrics/query_range", params={**params, "exemplars": "2"})
    assert sum(len(s.get("exemplars", [])) for s in r.json()["series"]) <= 2, r.text[:500]
    r = srv.get("/api/metrics/query_range", params={**params, "q": params["q"] + " with (exemplars=false)"})
    assert not any(s.get("exemplars") for s in r.json()["series"]), r.text[:500]
    r = srv.get("/api/metrics/query_range", params={**params, "exemplars": "many"})
    assert r.status_code == 400 and "exemplars" in r.text, r.text

    # Metrics grouped by a span attribute (from the head here; blocks in the Rust model test).
    got = {_labels(s).get("span.foo"): s["value"]
           for s in _metrics(srv, "{ } | count_over_time() by (span.foo)", now, instant=True)}
    assert got == {"x": 1, "y": 1, "<nil>": 9}, got


def test_exemplars_name_their_span_whether_it_is_in_the_head_or_a_block(weft_factory):
    """An exemplar's `trace:id` and `span:id` name a stored span, and a query over blocks picks
    the exemplars a query over the head picks, labels and all (span-local metrics read blocks
    by columns, the head by rows)."""
    head = weft_factory(name="ex-head")
    blocks = weft_factory("--block-max-age", "1", name="ex-blocks")
    now = time.time_ns()

    class Both:
        def send(self, req):
            head.send(req)
            blocks.send(req)
    _scene(Both(), now)
    wait_for_block_spans(blocks, 10)
    params = {"q": "{ } | count_over_time() by (name)", "start": str(now - 120_000_000_000),
              "end": str(now + 1_000_000_000), "step": "10s"}

    def exemplars(srv):
        r = srv.get("/api/metrics/query_range", params=params)
        assert r.status_code == 200, r.text
        return [{kv["key"]: kv["value"]["stringValue"] for kv in e["labels"]}
                for s in r.json()["series"] for e in s.get("exemplars", [])]

    got = exemplars(blocks)
    assert got == exemplars(head) and len(got) >= 2, got
    for labels in got:
        trace = blocks.fetch_trace(labels["trace:id"].rjust(32, "0"))
        assert trace is not None, labels
        names = {sp.span_id.hex(): sp.name for rs in trace.resource_spans for ss in rs.scope_spans
                 for sp in ss.spans}
        assert names.get(labels.get("span:id")) == labels["name"], (labels, names)


def test_a_range_query_is_aligned_to_its_step_as_tempo_aligns_it(weft_factory):
    """Start rounds down and end up to whole steps, so a chart of the last minutes refreshed a
    few seconds later counts the same buckets (Tempo does the same: grafana/tempo#3490)."""
    srv = weft_factory()
    now = time.time_ns()
    _scene(srv, now)
    step = 10_000_000_000

    def series(shift_ns):
        r = srv.get("/api/metrics/query_range", params={
            "q": "{ } | count_over_time() by (resource.service.name)", "step": "10s",
            "start": str(now - 120_000_000_000 + shift_ns), "end": str(now + 10_000_000_000 + shift_ns)})
        assert r.status_code == 200, r.text
        return {_labels(s)["resource.service.name"]: [(int(x["timestampMs"]), x["value"]) for x in s["samples"]]
                for s in r.json()["series"]}

    first = series(0)
    assert first and all(ts * 1_000_000 % step == 0 for samples in first.values() for ts, _ in samples), first
    assert {k: sum(v for _, v in samples) for k, samples in first.items()} == {"svc-a": 6, "svc-b": 4}, first
    # A refresh within the same steps (start and end 13 steps apart) sees the same buckets.
    shift = step - (now - 120_000_000_000) % step - 1
    assert series(shift) == first
