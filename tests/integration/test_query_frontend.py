"""One search over many queriers (--query-peers, issue 47): a querier that names peers acts as
the search's frontend. It splits the blocks of its listing into jobs, sends them to the peers,
merges their results in job order and reads the traces split across blocks whole once. The
answers must equal those of a querier that reads everything alone, hit for hit and in order,
also while a peer hangs (its jobs time out and go to the next) and while peers are killed (their
jobs go to the next peer, then run on the frontend)."""

from __future__ import annotations

import json
import signal
import threading
import time

import requests

from opentelemetry.proto.trace.v1.trace_pb2 import Status

from otlpdata import make_request, make_span, new_span_id, new_trace_id
from weftlib import start_sharing, wait_for, wait_for_block_spans

BASE = time.time_ns() - 120_000_000_000
BATCHES = 6
TRACES_PER_BATCH = 40
SPANS = 4
# The job protocol version this build speaks (spec/jobs.md).
JOB_VERSION = 5


def _send_traces(ingester) -> int:
    """Sends traces in batches, each cut into blocks of its own; every other trace's last spans
    come with the next batch, so it is split across two blocks (enough of them for the
    frontend to share out their reads as trace jobs). Returns the spans sent."""
    held: list = []
    sent = 0
    for b in range(BATCHES):
        spans = held
        held = []
        for i in range(TRACES_PER_BATCH):
            n = b * TRACES_PER_BATCH + i
            tid, root = new_trace_id(), new_span_id()
            trace = [
                make_span(tid, root if k == 0 else None, parent=b"" if k == 0 else root, name=f"op-{n % 7}-{k}",
                          start=BASE + n * 1_000_000 + k * 1000, end=BASE + n * 1_000_000 + 500_000 + k,
                          attributes={"k": k, "n": n},
                          status=Status(code=Status.STATUS_CODE_ERROR if (n + k) % 5 == 0 else Status.STATUS_CODE_OK))
                for k in range(SPANS)
            ]
            if n % 2 == 0 and b + 1 < BATCHES:
                spans += trace[:2]
                held += trace[2:]
            else:
                spans += trace
        for k in range(3):
            part = [s for j, s in enumerate(spans) if j % 3 == k]
            ingester.send(make_request(part, service=f"svc-{k}"))
        sent += len(spans)
        time.sleep(1.2)  # the ingester cuts a block every 0.5 s
    return sent


SEARCHES = [
    {"q": "{ }", "limit": "20"},
    {"q": "{ }", "limit": "3"},
    {"q": "{ }", "limit": "500", "spss": "10"},
    {"q": '{ resource.service.name = "svc-1" }', "limit": "5"},
    {"q": "{ status = error }", "limit": "20"},
    {"q": "{ span.k = 2 }", "limit": "7"},
    {"q": "{ } | count() > 3", "limit": "50"},
    {"q": '{ name =~ "op-1-.*" } | select(span.n)', "limit": "20"},
    {"q": "{ span.k = 0 } >> { span.k = 3 && status = error }", "limit": "20"},
    {"q": "{ span.n > 20 && span.n < 140 }", "limit": "10",
     "start": str((BASE + 25_000_000) // 10**9), "end": str((BASE + 60_000_000) // 10**9 + 1)},
    {"tags": "service.name=svc-2", "limit": "8"},
]


METRICS = [
    "{ } | rate() by (resource.service.name)",
    "{ status = error } | count_over_time() by (name)",
    "{ } | quantile_over_time(duration, .5, .9) by (resource.service.name)",
    "{ } | histogram_over_time(duration)",
    "{ } | avg_over_time(duration) by (span.k)",
    "{ } | sum_over_time(span.n) by (resource.service.name)",
    "{ } | max_over_time(span.n)",
    "({ } | count_over_time()) / ({ status = error } | count_over_time())",
    # Whole traces (split traces read whole on the frontend).
    "{ span.k = 0 } >> { status = error } | count_over_time()",
    "{ span.k = 0 } && { span.k = 3 } | rate() by (resource.service.name)",
    "{ } | count() > 3 | quantile_over_time(duration, .9) by (name)",
]


def _series(querier, q: str) -> list:
    """The series of a range query over the test's spans with their exemplars (the same however
    the query was split), values to 12 significant digits (sums of floats may differ in their
    last bits with the order they are added in)."""
    start = BASE // 10**9 - 60
    r = querier.get("/api/metrics/query_range", params={"q": q, "start": start, "end": start + 600, "step": "30s"})
    assert r.status_code == 200, f"{querier.name} {q}: {r.status_code} {r.text[:300]}"
    out = []
    for s in r.json()["series"]:
        samples = [(x.get("timestampMs"), float(f"{float(x.get('value', 0)):.12g}")) for x in s.get("samples", [])]
        exemplars = [(repr(e.get("labels")), e.get("timestampMs"), float(f"{float(e.get('value', 0)):.12g}"))
                     for e in s.get("exemplars", [])]
        out.append((repr(s.get("labels")), samples, exemplars))
    return sorted(out)


def _assert_same_series(alone, frontend, what: str):
    for q in METRICS:
        want = _series(alone, q)
        assert want, f"{q} has series"
        got = _series(frontend, q)
        assert got == want, f"{what}: {q}\nfrontend: {got[:2]}\nalone: {want[:2]}"


TAG_VALUES = [
    ("/api/v2/search/tag/resource.service.name/values", {}),
    ("/api/v2/search/tag/span.n/values", {}),
    ("/api/v2/search/tag/name/values", {"q": "{ status = error }"}),
    ("/api/search/tag/k/values", {}),
    # Filters that need whole traces: split as a search is.
    ("/api/v2/search/tag/resource.service.name/values", {"q": "{ } >> { status = error }"}),
    ("/api/v2/search/tag/span.n/values", {"q": "{ } | count() > 2"}),
]


def _values(querier, path: str, params: dict) -> list:
    """A tag-value reply's values in name order (the order found depends on how the blocks
    were read, as in Tempo)."""
    r = querier.get(path, params=params)
    assert r.status_code == 200, f"{querier.name} {path}: {r.status_code} {r.text[:300]}"
    body = r.json()
    values = body.get("tagValues", [])
    return sorted(json.dumps(v, sort_keys=True) for v in values)


def _assert_same_values(alone, frontend, what: str):
    for path, params in TAG_VALUES:
        want = _values(alone, path, params)
        assert want, f"{path} {params} has values"
        assert _values(frontend, path, params) == want, f"{what}: {path} {params}"


TAG_NAMES = [
    ("/api/search/tags", {}),
    ("/api/v2/search/tags", {}),
    ("/api/v2/search/tags", {"q": "{ status = error }", "scope": "span"}),
    ("/api/v2/search/tags", {"q": "{ } >> { status = error }", "scope": "resource"}),
]


def _names(querier, path: str, params: dict):
    r = querier.get(path, params=params)
    assert r.status_code == 200, f"{querier.name} {path}: {r.status_code} {r.text[:300]}"
    body = r.json()
    if "scopes" in body:
        return sorted((s["name"], sorted(s["tags"])) for s in body["scopes"])
    return sorted(body["tagNames"])


# Graphs of the traces a filter matches: read as whole traces, split as a search is.
GRAPH_FILTERS = ["{ status = error }", "{ span.k = 0 } >> { span.k = 3 }", "{ } | count() > 3"]


def _graph(querier, q: str | None = None) -> tuple:
    start = BASE // 10**9 - 60
    params = {"start": start, "end": start + 600, **({"q": q} if q else {})}
    r = querier.get("/api/service-graph", params=params)
    assert r.status_code == 200, f"{querier.name} service graph: {r.status_code} {r.text[:300]}"
    body = r.json()
    return (sorted(json.dumps(s, sort_keys=True) for s in body["services"]),
            sorted(json.dumps(e, sort_keys=True) for e in body["edges"]), body.get("complete"))


def _assert_same_lookups(alone, frontend, what: str):
    """Tag values, tag names and the service graph."""
    _assert_same_values(alone, frontend, what)
    for path, params in TAG_NAMES:
        want = _names(alone, path, params)
        assert want, f"{path} {params} has names"
        assert _names(frontend, path, params) == want, f"{what}: {path} {params}"
    want = _graph(alone)
    assert want[1], "the graph has edges"
    assert _graph(frontend) == want, f"{what}: service graph"
    for q in GRAPH_FILTERS:
        want = _graph(alone, q)
        assert want[0], f"the graph of {q} has services"
        assert _graph(frontend, q) == want, f"{what}: service graph of {q}"


def _traces(querier, params: dict) -> list:
    r = querier.get("/api/search", params=params)
    assert r.status_code == 200, f"{querier.name} {params}: {r.status_code} {r.text[:300]}"
    return r.json()["traces"]


def _foreign_searches() -> list:
    """Searches of Jaeger's and Zipkin's query APIs (their own matching rules and order),
    split over the queriers as Tempo's search is."""
    lo_us, hi_us = BASE // 1000 - 60_000_000, BASE // 1000 + 600_000_000
    rfc = lambda us: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(us // 10**6)) + "Z"  # noqa: E731
    window = {"start": lo_us, "end": hi_us}
    zipkin = {"endTs": hi_us // 1000, "lookback": (hi_us - lo_us) // 1000}
    v3 = {"query.start_time_min": rfc(lo_us), "query.start_time_max": rfc(hi_us + 10**6)}
    return [
        ("jaeger", "/api/traces", {"service": "svc-1", "limit": "5", **window}),
        ("jaeger", "/api/traces", {"service": "svc-0", "limit": "500", **window}),
        ("jaeger", "/api/traces", {"service": "svc-0", "operation": "op-3-1", "limit": "4", **window}),
        ("jaeger", "/api/traces", {"service": "svc-2", "tags": '{"k":"2"}', "limit": "7", **window}),
        ("jaeger", "/api/v3/traces", {"query.service_name": "svc-2", "query.num_traces": "9", **v3}),
        ("zipkin", "/api/v2/traces", {"serviceName": "svc-0", "limit": "6", **zipkin}),
        ("zipkin", "/api/v2/traces", {"annotationQuery": "k=3", "limit": "300", **zipkin}),
    ]


def _foreign(querier, api: str, path: str, params: dict):
    r = requests.get(getattr(querier, api) + path, params=params, timeout=60)
    assert r.status_code == 200, f"{querier.name} {api} {path} {params}: {r.status_code} {r.text[:300]}"
    body = r.json()
    if api == "zipkin":
        return [sorted(json.dumps(s, sort_keys=True) for s in t) for t in body]
    traces = body["data"] if path == "/api/traces" else body["result"]["resourceSpans"]
    return json.dumps(traces, sort_keys=True)


def _trace_ids(alone) -> list:
    """Trace IDs to read by ID: every other one is split over two blocks (`_send_traces`)."""
    ids = [t["traceID"] for t in _traces(alone, {"q": "{ }", "limit": "500"})]
    assert len(ids) >= 200, len(ids)
    return ids[::7]


def _by_id(querier, tid: str) -> list:
    """A trace by ID from Tempo's, Jaeger's and Zipkin's APIs."""
    out = []
    for base, path in [(querier.api, f"/api/v2/traces/{tid}"), (querier.jaeger, f"/api/traces/{tid}"),
                       (querier.zipkin, f"/api/v2/trace/{tid}")]:
        r = requests.get(base + path, timeout=60)
        assert r.status_code == 200, f"{querier.name} {path}: {r.status_code} {r.text[:300]}"
        out.append(json.dumps(r.json(), sort_keys=True))
    return out


def _assert_same_answers(alone, frontend, what: str):
    sent = _jobs(frontend, "sent_traces")
    for tid in _trace_ids(alone):
        assert _by_id(frontend, tid) == _by_id(alone, tid), f"{what}: trace {tid}"
    if "every peer up" in what:
        assert _jobs(frontend, "sent_traces") > sent, "traces in two blocks were read by ID on the peers"
    for params in SEARCHES:
        want = _traces(alone, params)
        assert want, f"{params} matches something"
        got = _traces(frontend, params)
        assert got == want, f"{what}: {params}\nfrontend: {got[:3]}\nalone: {want[:3]}"
    for api, path, params in _foreign_searches():
        want = _foreign(alone, api, path, params)
        assert want and want != "[]", f"{api} {path} {params} matches something"
        got = _foreign(frontend, api, path, params)
        assert got == want, f"{what}: {api} {path} {params}\nfrontend: {str(got)[:600]}\nalone: {str(want)[:600]}"


def _jobs(srv, outcome: str) -> float:
    return srv.metric("weft_query_jobs_total", outcome=outcome) or 0


def _alone_and_split(weft_factory, data, *frontend_args: str):
    """Queriers on the shared `data`: one that reads everything alone, two peers, and a frontend
    that splits its queries over the peers (`frontend_args` added)."""
    def querier(name: str, *args: str):
        return start_sharing(weft_factory, name, "--target", "querier", "--blocklist-poll", "0.2", *args,
                             data_dir=data)
    alone = querier("alone")
    peers = [querier(f"peer{i}") for i in range(2)]
    frontend = querier("frontend", "--query-peers", ",".join(f"127.0.0.1:{p.http_port}" for p in peers),
                       *frontend_args)
    return alone, peers, frontend


def test_a_search_split_over_queriers_answers_as_one_querier(weft_factory, tmp_path):
    data = tmp_path / "shared-data"
    ingester = start_sharing(weft_factory, "ingester", "--target", "ingester", "--block-max-age", "0.5",
                             "--compaction-interval", "0", data_dir=data)
    sent = _send_traces(ingester)
    metas = wait_for_block_spans(ingester, sent)
    assert len(metas) >= 5, f"several blocks to split: {len(metas)}"

    alone, peers, frontend = _alone_and_split(weft_factory, data, "--query-job-timeout", "2")

    sent = _jobs(frontend, "sent")
    for api, path, params in _foreign_searches():
        _foreign(frontend, api, path, params)
    assert _jobs(frontend, "sent") >= sent + len(_foreign_searches()), "Jaeger and Zipkin searches went to the peers"
    _assert_same_answers(alone, frontend, "every peer up")
    sent = _jobs(frontend, "sent")
    _assert_same_series(alone, frontend, "every peer up")
    assert _jobs(frontend, "sent") > sent, "metrics jobs went to the peers"
    sent, traces = _jobs(frontend, "sent"), _jobs(frontend, "sent_traces")
    _series(frontend, METRICS[-1])
    assert _jobs(frontend, "sent") > sent, "whole-trace metrics jobs went to the peers"
    assert _jobs(frontend, "sent_traces") > traces, "the split traces were counted on the peers"
    sent = _jobs(frontend, "sent")
    _assert_same_values(alone, frontend, "every peer up")
    assert _jobs(frontend, "sent") > sent, "tag-value jobs went to the peers"
    sent = _jobs(frontend, "sent")
    for path, params in TAG_NAMES:
        assert _names(frontend, path, params) == _names(alone, path, params), f"every peer up: {path} {params}"
    assert _jobs(frontend, "sent") > sent, "tag-name jobs went to the peers"
    sent = _jobs(frontend, "sent")
    graph = _graph(alone)
    assert graph[1] and graph[2] is not False, f"a complete graph with edges: {graph}"
    assert _graph(frontend) == graph, "every peer up: service graph"
    assert _jobs(frontend, "sent") > sent, "service-graph jobs went to the peers"
    for q in GRAPH_FILTERS:
        sent = _jobs(frontend, "sent")
        want = _graph(alone, q)
        assert want[0] and want[2] is not False, f"a complete graph of {q}: {want}"
        assert _graph(frontend, q) == want, f"every peer up: service graph of {q}"
        assert _jobs(frontend, "sent") > sent, f"the graph of {q} went to the peers as jobs"
    assert _jobs(frontend, "sent") >= len(SEARCHES), "the frontend sent the jobs to its peers"
    assert _jobs(frontend, "sent_traces") > 0, "split traces were read whole on the peers"
    assert all(_jobs(p, "served") > 0 for p in peers), "both peers answered jobs"
    assert _jobs(frontend, "replanned") == 0, "the block lists agreed"
    # A search's metrics count the frontend's jobs (the head part, then each block job), all
    # done at its end, as Tempo's frontend counts its jobs for Grafana's progress.
    m = frontend.get("/api/search", params=SEARCHES[2]).json()["metrics"]
    assert m["totalJobs"] > 2 and m["completedJobs"] == m["totalJobs"], m
    # So do streamed metrics queries, span-local and over whole traces, whose last message is
    # the HTTP API's answer.
    from test_tempo_streaming import PB, stream
    start = BASE - 60 * 10**9
    for q in (METRICS[0], METRICS[-3]):
        replies = stream(frontend, "MetricsQueryRange", PB["QueryRangeRequest"](
            query=q, start=start, end=start + 600 * 10**9, step=30 * 10**9), "QueryRangeResponse", timeout=60)
        final = replies[-1]
        assert final.metrics.totalJobs > 2 and final.metrics.completedJobs == final.metrics.totalJobs, (q, final.metrics)
        got = sorted((sorted((kv.key, kv.value.string_value) for kv in s.labels), sum(x.value for x in s.samples))
                     for s in final.series)
        http = frontend.get("/api/metrics/query_range", params={
            "q": q, "start": str(start), "end": str(start + 600 * 10**9), "step": "30s"}).json()
        assert got == sorted((sorted((kv["key"], kv["value"].get("stringValue", "")) for kv in s["labels"]),
                              sum(float(x["value"]) for x in s["samples"])) for s in http["series"]), q
        assert (http["metrics"]["completedJobs"], http["metrics"]["totalJobs"]) == (
            final.metrics.totalJobs, final.metrics.totalJobs), (q, http["metrics"])

    # A peer that hangs (stopped): its jobs time out and go to the other one; no search waits
    # much past the job timeout.
    want_all = [_traces(alone, p) for p in SEARCHES]
    taken_back = frontend.stderr_path.read_text().count("a query peer answers")
    peers[0].proc.send_signal(signal.SIGSTOP)
    try:
        for params in SEARCHES[:3]:
            t0 = time.monotonic()
            got = _traces(frontend, params)
            took = time.monotonic() - t0
            assert got == _traces(alone, params), f"a peer hung: {params}"
            assert took < 12, f"{params} took {took:.1f}s with a peer hung (job timeout 2 s)"
        assert _jobs(frontend, "failed") > 0, "jobs to the hung peer timed out"
    finally:
        peers[0].proc.send_signal(signal.SIGCONT)
    # Resumed, it gets jobs again once it answers a probe of its /ready (10 s after it was
    # left out; a query starts the probe). Its `served` count alone does not show that: on
    # SIGCONT it serves the jobs that timed out while it was stopped, still in its socket.
    def back() -> bool:
        if frontend.stderr_path.read_text().count("a query peer answers") > taken_back:
            return True
        assert [_traces(frontend, p) for p in SEARCHES] == want_all, "searches while the peer is left out"
        return False
    wait_for(back, 30, "the frontend to take the resumed peer back", 0.5)
    served = _jobs(peers[0], "served")
    wait_for(lambda: [_traces(frontend, p) for p in SEARCHES] == want_all and _jobs(peers[0], "served") > served,
             30, "the resumed peer to get jobs again", 0.5)

    # A peer killed while searches run: the jobs it held go to the other one; every search
    # completes with the same answer.
    failed_before = _jobs(frontend, "failed")
    want = {i: _traces(alone, SEARCHES[i]) for i in range(4)}
    answers: list = []
    errors: list = []

    def keep_searching():
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            for i in range(4):
                try:
                    answers.append((i, _traces(frontend, SEARCHES[i])))
                except Exception as e:  # noqa: BLE001 (reported below, in the test's thread)
                    errors.append(repr(e))
    searching = threading.Thread(target=keep_searching)
    searching.start()
    time.sleep(1.5)
    peers[0].kill9()
    searching.join()
    assert not errors, f"searches failed while a peer was killed: {errors[:3]}"
    assert len(answers) > 8 and all(got == want[i] for i, got in answers), "searches during the kill"
    _assert_same_answers(alone, frontend, "one peer killed")
    _assert_same_series(alone, frontend, "one peer killed")
    _assert_same_lookups(alone, frontend, "one peer killed")
    assert _jobs(frontend, "failed") > failed_before, "jobs to the killed peer failed and were retried"
    # Both killed: the frontend reads the jobs itself.
    peers[1].kill9()
    _assert_same_answers(alone, frontend, "every peer killed")
    _assert_same_series(alone, frontend, "every peer killed")
    _assert_same_lookups(alone, frontend, "every peer killed")
    assert _jobs(frontend, "ran_here") > 0
    # Back: jobs go out again.
    before = _jobs(frontend, "sent")
    for p in peers:
        p.start()
    wait_for(lambda: all(p.get("/ready").status_code == 200 for p in peers), 30, "the peers to be ready")
    _assert_same_answers(alone, frontend, "peers restarted")
    assert _jobs(frontend, "sent") > before


def test_a_tag_value_list_filled_by_the_newest_job_sends_no_other_job(weft_factory, tmp_path):
    """A lookup of values that fills its cap (1,000 values) in the newest blocks sends that job
    alone, as a search that fills its limit does: side by side from the start, every querier
    paid a job's fixed cost for nothing. A lookup that does not fill still reads every block
    and answers as one querier alone does."""
    data = tmp_path / "shared-data"
    ingester = start_sharing(weft_factory, "ingester", "--target", "ingester", "--block-max-age", "0.5",
                             "--compaction-interval", "0", data_dir=data)
    sent = 0
    # Older blocks with a few values each, then one block of 1,200 distinct values.
    for b, count in enumerate([60, 60, 60, 60, 1200]):
        spans = [make_span(new_trace_id(), new_span_id(), name=f"op-{b}", start=BASE + (b * 10_000 + i) * 1000,
                           end=BASE + (b * 10_000 + i) * 1000 + 500, attributes={"u": f"user-{b}-{i}", "b": b})
                 for i in range(count)]
        ingester.send(make_request(spans, service="svc"))
        sent += len(spans)
        time.sleep(1.2)  # the ingester cuts a block every 0.5 s
    metas = wait_for_block_spans(ingester, sent)
    assert len(metas) >= 5, f"several blocks to split: {len(metas)}"

    alone, peers, frontend = _alone_and_split(weft_factory, data)

    path = "/api/v2/search/tag/span.u/values"
    before = _jobs(frontend, "sent")
    r = frontend.get(path)
    assert r.status_code == 200, r.text[:300]
    values = r.json()["tagValues"]
    assert len(values) == 1000 and r.headers.get("x-weft-tag-values-truncated") == "true", (len(values), r.headers)
    assert all(v["value"].startswith("user-4-") for v in values), "the newest block's values"
    assert _jobs(frontend, "sent") - before == 1, "only the newest job was sent"
    # Its metrics count the recent spans and every job, those left unsent as done, as Tempo's
    # frontend counts a lookup's jobs.
    m = r.json()["metrics"]
    assert m["totalJobs"] >= 3 and m["completedJobs"] == m["totalJobs"], m
    # Values that do not fill: every job, the same answer as alone.
    before = _jobs(frontend, "sent")
    assert _values(frontend, "/api/v2/search/tag/span.b/values", {}) == \
        _values(alone, "/api/v2/search/tag/span.b/values", {})
    assert len(_values(alone, "/api/v2/search/tag/span.b/values", {})) == 5
    sent = _jobs(frontend, "sent") - before
    assert sent >= 2, "a list that does not fill reads every job"
    # Each reply counts its units: the frontend 1 + its jobs, a querier alone each row group it
    # reads (at least one per block).
    for srv, path in [(frontend, "/api/v2/search/tag/span.b/values"), (frontend, "/api/v2/search/tags"),
                      (alone, "/api/v2/search/tag/span.b/values"), (alone, "/api/v2/search/tags"),
                      (frontend, "/api/search/tag/b/values"), (frontend, "/api/search/tags")]:
        m = srv.get(path).json()["metrics"]
        assert m["completedJobs"] == m["totalJobs"], (srv.name, path, m)
        assert m["totalJobs"] >= (1 + sent if srv is frontend else len(metas)), (srv.name, path, m)


def test_a_needle_search_splits_a_block_cut_from_the_head_by_row_group(weft_factory, tmp_path):
    """Blocks cut from the head have no value blooms (compaction writes them), so a search for a
    rare value reads them whole and little else. The frontend weighs blocks by what a search
    may read and splits such a block between jobs by row group (`row_groups`, job protocol
    v5), so the work divides over the queriers. The answers equal a lone querier's, with traces
    whose rows cross a row-group boundary read whole once. Span-local metrics, the graph of
    every trace, tag lookups and queries over whole traces (metrics, a filtered graph) are
    weighed and split the same way."""
    data = tmp_path / "shared-data"
    ingester = start_sharing(weft_factory, "ingester", "--target", "ingester", "--block-max-age", "3",
                             "--compaction-interval", "0", data_dir=data)
    # About 30,000 spans in one block (8,192 rows per row group: 4 row groups), traces of 1 to
    # 5 spans so that some cross a row group's edge; three traces carry a rare value.
    spans, n = [], 0
    while len(spans) < 30_000:
        tid, root = new_trace_id(), new_span_id()
        size = 1 + n % 5
        spans += [make_span(tid, root if k == 0 else None, parent=b"" if k == 0 else root, name=f"op-{n % 7}",
                            start=BASE + n * 10_000 + k * 1000, end=BASE + n * 10_000 + 5000 + k,
                            attributes={"user": "needle" if n in (17, 3000, 6001) and k == size - 1 else f"u-{n}",
                                        "k": k},
                            status=Status(code=Status.STATUS_CODE_ERROR if (n + k) % 9 == 0 else
                                          Status.STATUS_CODE_OK))
                  for k in range(size)]
        n += 1
    for i in range(0, len(spans), 5000):
        ingester.send(make_request(spans[i:i + 5000], service=f"svc-{i // 5000 % 3}"))
    metas = wait_for_block_spans(ingester, len(spans))
    assert max(int(m["row_groups"]) for _, m in metas) >= 3, [m["row_groups"] for _, m in metas]

    alone, peers, frontend = _alone_and_split(weft_factory, data)
    needle = {"q": '{ span.user = "needle" }', "limit": "20"}
    want = _traces(alone, needle)
    assert len(want) == 3, want
    before = _jobs(frontend, "sent")
    assert _traces(frontend, needle) == want
    # Two peers: about four jobs of equal cost. Only a block split by row group makes more
    # jobs than blocks.
    assert _jobs(frontend, "sent") - before > len(metas), (_jobs(frontend, "sent") - before, len(metas))
    for params in [{"q": "{ }", "limit": "20"}, {"q": "{ }", "limit": "2000", "spss": "6"},
                   {"q": "{ } | count() > 3", "limit": "300"}, {"q": '{ span.user = "needle" } && { span.k = 0 }'},
                   {"q": "{ span.k = 0 } >> { status = error }", "limit": "500"},
                   {"q": '{ span.user = "needle" } || { span.user = "u-4242" }', "limit": "20"}]:
        want = _traces(alone, params)
        assert want, f"{params} matches something"
        assert _traces(frontend, params) == want, params
    for api, path, params in _foreign_searches():
        assert _foreign(frontend, api, path, params) == _foreign(alone, api, path, params), (api, path, params)
    # Span-local metrics are weighed and split the same way.
    for q in ['{ span.user = "needle" } | count_over_time() by (resource.service.name)',
              '{ span.user = "needle" || span.k = 4 } | rate() by (name)', "{ status = error } | count_over_time()"]:
        before = _jobs(frontend, "sent")
        want = _series(alone, q)
        assert want, f"{q} has series"
        assert _series(frontend, q) == want, q
        assert _jobs(frontend, "sent") - before > len(metas), (q, _jobs(frontend, "sent") - before, len(metas))
    # So is the graph of every trace, from columns.
    before = _jobs(frontend, "sent")
    want = _graph(alone)
    assert want[0] and want[2] is not False, f"a complete graph with services: {want}"
    assert _graph(frontend) == want, "graph of every trace"
    assert _jobs(frontend, "sent") - before > len(metas), ("graph", _jobs(frontend, "sent") - before, len(metas))
    # A block split between jobs counts once (it was once per job that read some of it).
    for srv in (alone, frontend):
        r = srv.get("/api/service-graph", params={"start": BASE // 10**9 - 60, "end": BASE // 10**9 + 600})
        counted = int(r.headers["x-weft-inspected-blocks"]) + int(r.headers["x-weft-skipped-blocks"])
        assert counted == len(metas), (srv.name, dict(r.headers), len(metas))
    # So are tag lookups from columns, and queries over whole traces: metrics, a filtered
    # service graph, tag lookups.
    both = '{ span.user = "needle" } && { span.k = 0 }'
    for what, ask in [
        ("tag names", lambda s: _names(s, "/api/v2/search/tags", {})),
        ("tag values", lambda s: _values(s, "/api/v2/search/tag/name/values", {})),
        ("metrics", lambda s: _series(s, '{ } >> { span.user = "needle" } | count_over_time() by (resource.service.name)')),
        ("metrics", lambda s: _series(s, both + " | count_over_time()")),
        ("graph", lambda s: _graph(s, both)[0]),
        ("tag values", lambda s: _values(s, "/api/v2/search/tag/name/values", {"q": '{ } >> { span.user = "needle" }'})),
        ("tag names", lambda s: _names(s, "/api/v2/search/tags", {"q": both, "scope": "span"})),
    ]:
        before = _jobs(frontend, "sent")
        want = ask(alone)
        assert want, f"{what} of the needle's traces: something"
        assert ask(frontend) == want, what
        assert _jobs(frontend, "sent") - before > len(metas), (what, _jobs(frontend, "sent") - before, len(metas))


def test_a_bad_job_gets_a_400_that_names_the_problem(weft_factory):
    q = weft_factory("--target", "querier")
    r = q.http.post(f"{q.api}/internal/v1/jobs/search", data=b"{not json", timeout=10)
    assert r.status_code == 400 and "invalid search job" in r.text, r.text
    r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                    json={"version": 99, "params": {}, "floor": None, "blocks": [], "listing": []}, timeout=10)
    assert r.status_code == 400 and "version 99" in r.text, r.text
    r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                    json={"version": JOB_VERSION, "params": {"q": "{ nope"}, "floor": None, "blocks": [], "listing": []},
                    timeout=10)
    assert r.status_code == 400, r.text
    for path, what in [("tag-names", "tag-names"), ("tag-values", "tag-values"), ("service-graph", "service-graph"),
                       ("metrics", "metrics")]:
        r = q.http.post(f"{q.api}/internal/v1/jobs/{path}", data=b"[]", timeout=10)
        assert r.status_code == 400 and f"invalid {what} job" in r.text, (path, r.text)
    r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                    json={"version": JOB_VERSION, "params": {"q": "{ }"}, "floor": None, "blocks": [], "listing": [],
                          "recent": "not a filter!"}, timeout=10)
    assert r.status_code == 400 and "recent" in r.text, r.text
    r = q.http.post(f"{q.api}/internal/v1/jobs/service-graph",
                    json={"version": JOB_VERSION, "window": [5, 1], "max_spans": 10, "blocks": [], "listing": []}, timeout=10)
    assert r.status_code == 400 and "empty window" in r.text, r.text
    # Found by a hostile-input audit: each of these killed the querier, froze it or got a 500.
    now = time.time_ns()
    r = q.http.post(f"{q.api}/internal/v1/jobs/metrics",
                    json={"version": JOB_VERSION, "q": "{ } | rate()", "start": now - 3600 * 10**9, "end": now,
                          "step": 15 * 10**9, "exemplars": 1 << 40, "max_series": 1000, "max_points": 2000000,
                          "blocks": [], "listing": []}, timeout=10)
    assert r.status_code == 400 and "exemplars" in r.text, r.text[:300]
    r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                    json={"version": JOB_VERSION, "params": {"q": " | ".join(["{ }"] * 30000)}, "floor": None,
                          "blocks": [], "listing": []}, timeout=10)
    assert r.status_code == 400 and "nests too deeply" in r.text, r.text[:300]
    r = q.get("/api/search", params={"q": " | ".join(["{ }"] * 5000)})
    assert r.status_code == 400 and "nests too deeply" in r.text, r.text[:300]
    r = q.http.post(f"{q.api}/internal/v1/jobs/tag-values",
                    json={"version": JOB_VERSION, "query": "{ }", "field": "name", "window": [5, 1], "cap": 10,
                          "blocks": [], "listing": []}, timeout=10)
    assert r.status_code == 400 and "window ends" in r.text, r.text[:300]
    jaeger = {"service": "api", "operation": None, "tags": [], "start_min_us": 1700003600000000,
              "start_max_us": 1700000000000000, "duration_min_us": None, "duration_max_us": None}
    for limit, query in ((20, jaeger), (0, {**jaeger, "start_max_us": 1700007200000000})):
        r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                        json={"version": JOB_VERSION, "params": {}, "floor": None, "blocks": [], "listing": [],
                              "foreign": {"filter": "{ }", "limit": limit, "api": "jaeger", "query": query}},
                        timeout=10)
        assert r.status_code == 400 and "empty time range" in r.text, (limit, r.status_code, r.text[:300])
    r = q.http.post(f"{q.api}/internal/v1/jobs/trace",
                    json={"version": JOB_VERSION, "trace_id": "00000000000000000000000000000001", "blocks": ["a\nb"],
                          "max_bytes": 1}, timeout=10)
    assert r.status_code == 400 and "not a block ID" in r.text, r.text[:300]
    # Fields that only some jobs read, and blocks outside the listing, are refused, not ignored.
    block = "01a24000-0000-7000-8000-000000000001"
    r = q.http.post(f"{q.api}/internal/v1/jobs/metrics",
                    json={"version": JOB_VERSION, "q": "{ } | rate()", "start": now - 3600 * 10**9, "end": now,
                          "step": 15 * 10**9, "exemplars": 0, "max_series": 1000, "max_points": 2000000, "blocks": [],
                          "listing": [], "traces": ["zz"]}, timeout=10)
    assert r.status_code == 400 and "whole traces" in r.text, r.text[:300]
    r = q.http.post(f"{q.api}/internal/v1/jobs/service-graph",
                    json={"version": JOB_VERSION, "window": [1, 5], "max_spans": 10, "blocks": [], "listing": [],
                          "exclude": ["not hex"]}, timeout=10)
    assert r.status_code == 400 and "filtered by `q`" in r.text, r.text[:300]
    r = q.http.post(f"{q.api}/internal/v1/jobs/tag-names",
                    json={"version": JOB_VERSION, "query": "{ }", "window": [1, 5], "cap": 10, "blocks": [],
                          "listing": [], "recent": ["00"]}, timeout=10)
    assert r.status_code == 400 and "whole traces" in r.text, r.text[:300]
    for path, job in (("search", {"params": {"q": "{ }"}, "floor": None}),
                      ("tag-names", {"query": "{ }", "window": [1, 5], "cap": 10}),
                      ("service-graph", {"window": [1, 5], "max_spans": 10})):
        r = q.http.post(f"{q.api}/internal/v1/jobs/{path}",
                        json={"version": JOB_VERSION, **job, "blocks": [block], "listing": []}, timeout=10)
        assert r.status_code == 400 and "not in the job's listing" in r.text, (path, r.text[:300])
    r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                    json={"version": JOB_VERSION, "params": {"q": "{ }"}, "floor": None, "blocks": [],
                          "row_groups": {block: [0, 1]}, "listing": [block]}, timeout=10)
    assert r.status_code == 400 and "does not read" in r.text, r.text[:300]
    r = q.http.post(f"{q.api}/internal/v1/jobs/metrics",
                    json={"version": JOB_VERSION, "q": "{ } | rate()", "start": now - 3600 * 10**9, "end": now,
                          "step": 15 * 10**9, "exemplars": 0, "max_series": 1000, "max_points": 2000000, "blocks": [],
                          "row_groups": {block: [3]}, "listing": [block]}, timeout=10)
    assert r.status_code == 400 and "does not read" in r.text, r.text[:300]
    r = q.http.post(f"{q.api}/internal/v1/jobs/service-graph",
                    json={"version": JOB_VERSION, "window": [1, 5], "max_spans": 10, "blocks": [],
                          "row_groups": {block: [2]}, "listing": [block]}, timeout=10)
    assert r.status_code == 400 and "does not read" in r.text, r.text[:300]
    # 200,000 unknown blocks in a listing (8 MB, above the 2 MiB a job's body could be): answered
    # at once (each was compared with every other: 33 s of CPU in a release build).
    listing = [f"01a24000-0000-7000-8000-{i:012x}" for i in range(200_000)]
    r = q.http.post(f"{q.api}/internal/v1/jobs/search",
                    json={"version": JOB_VERSION, "params": {"q": "{ }"}, "floor": None, "blocks": [],
                          "listing": listing}, timeout=20)
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["outcome"]["missing_blocks"]) == len(listing)
    assert q.get("/ready").status_code == 200


def test_an_all_in_one_frontend_with_block_only_queriers_evaluates_split_traces_whole(weft_factory, tmp_path):
    """The frontend's recent spans are its own (an all-in-one process beside queriers that read
    blocks only): a trace with spans in a block and in the frontend's head looks whole to a
    querier reading the block. Such hits are read whole on the frontend before they count, as
    one scan reads them: `count() = 2` matches the two-span traces, never a four-span trace
    cut in two."""
    data = tmp_path / "shared-data"
    first = start_sharing(weft_factory, "first", "--block-max-age", "0.3", "--compaction-interval", "0",
                          data_dir=data)
    split_ids, pair_ids, held = [], [], []
    spans = []
    for n in range(12):
        tid, root = new_trace_id(), new_span_id()
        size = 2 if n % 3 == 0 else 4
        trace = [make_span(tid, root if k == 0 else None, parent=b"" if k == 0 else root, name=f"op-{k}",
                           start=BASE + n * 1_000_000 + k, attributes={"k": k}) for k in range(size)]
        if size == 2:
            pair_ids.append(tid.hex())
            spans += trace
        else:
            split_ids.append(tid.hex())
            spans += trace[:2]
            held += trace[2:]
    # Calls whose caller is in the frontend's head and whose callee is in a block: a querier
    # reading the block must keep them aside for the frontend (the service graph).
    roots, callees = [], []
    for n in range(5):
        tid, root = new_trace_id(), new_span_id()
        roots.append(make_span(tid, root, name="call", start=BASE + n * 1_000_000, kind=3))
        callees += [make_span(tid, parent=root, name="serve", start=BASE + n * 1_000_000 + 10 + k, kind=2)
                    for k in range(2)]
    first.send(make_request(spans, service="svc"))
    first.send(make_request(callees, service="callee"))
    wait_for_block_spans(first, len(spans) + len(callees))
    first.stop()
    peers = [start_sharing(weft_factory, f"blocks-only{i}", "--target", "querier", "--blocklist-poll", "0.2",
                           data_dir=data) for i in range(2)]
    frontend = start_sharing(weft_factory, "all-in-one", "--block-max-age", "600", "--compaction-interval", "0",
                             "--query-peers", ",".join(f"127.0.0.1:{p.http_port}" for p in peers),
                             data_dir=data)
    frontend.send(make_request(held, service="svc"))
    frontend.send(make_request(roots, service="caller"))
    got = {t["traceID"].rjust(32, "0") for t in _traces(frontend, {"q": "{ } | count() = 2", "limit": "100"})}
    assert got == set(pair_ids), f"two-span traces only: {sorted(got)}"
    assert _jobs(frontend, "sent") > 0, "the blocks were read by the queriers"
    every = {t["traceID"].rjust(32, "0") for t in _traces(frontend, {"q": "{ } | count() = 4", "limit": "100"})}
    assert every == set(split_ids), "the traces cut in two count their four spans"
    # One leaf passed in the block's piece, the other in the head's: the trace is read whole.
    both = {t["traceID"].rjust(32, "0")
            for t in _traces(frontend, {"q": "{ span.k = 0 } && { span.k = 3 }", "limit": "100"})}
    assert both == set(split_ids), "leaves passed by pieces in a block and in the head"
    sent = _jobs(frontend, "sent")
    r = frontend.get("/api/service-graph", params={"start": BASE // 10**9 - 60, "end": BASE // 10**9 + 600})
    assert r.status_code == 200, r.text
    edges = {(e["parent"], e["child"]): e["callCount"] for e in r.json()["edges"]}
    assert edges == {("caller", "callee"): 10}, f"every call from the head into a block: {r.json()}"
    assert _jobs(frontend, "sent") > sent, "the graph's blocks were read by the queriers"
