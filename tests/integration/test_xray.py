"""AWS X-Ray clients work unchanged: the X-Ray SDK for Python sends segments over UDP to weft's
X-Ray daemon port and asks it for sampling rules over TCP; the spans read back through the Tempo,
Zipkin and Jaeger APIs, and a trace that crosses an X-Ray-instrumented service and an
OpenTelemetry-instrumented one stays one trace."""

from __future__ import annotations

import socket
import time
import traceback

import pytest
import requests

from otlpdata import make_request, make_span
from weftlib import wait_for


@pytest.fixture
def weft(weft_factory):
    return weft_factory()


@pytest.fixture
def recorder(weft):
    from aws_xray_sdk.core import xray_recorder

    xray_recorder.configure(service="orders", sampling=False, context_missing="LOG_ERROR",
                            daemon_address=f"127.0.0.1:{weft.xray_port}")
    yield xray_recorder


def record_trace(rec) -> tuple[str, str]:
    """A segment with HTTP data, an annotation and metadata, a remote subsegment that failed with
    an exception, and a local subsegment. Returns the X-Ray trace ID and the remote call's ID."""
    seg = rec.begin_segment("orders")
    seg.put_http_meta("method", "GET")
    seg.put_http_meta("url", "http://shop/orders/7")
    rec.put_annotation("customer", "c-9")
    rec.put_metadata("cart", {"size": 2}, "debug")
    sub = rec.begin_subsegment("payments", namespace="remote")
    sub.put_http_meta("method", "POST")
    sub.put_http_meta("status", 502)
    try:
        raise ValueError("gateway down")
    except ValueError as e:
        sub.add_exception(e, traceback.extract_stack())
    remote_id = sub.id
    rec.end_subsegment()
    with rec.in_subsegment("render"):
        time.sleep(0.002)
    seg.put_http_meta("status", 500)
    tid = seg.trace_id
    rec.end_segment()
    return tid, remote_id


def hex_of(xray_id: str) -> str:
    return xray_id.replace("1-", "", 1).replace("-", "")


def spans_of(td):
    out = {}
    for rs in td.resource_spans:
        res = {a.key: a.value for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out[s.name] = (res, s)
    return out


def test_xray_sdk_segments_read_back_through_every_api(weft, recorder):
    xid, _ = record_trace(recorder)
    tid = hex_of(xid)
    td = wait_for(lambda: weft.fetch_trace(tid, protobuf=True), 15, "the X-Ray trace")
    spans = spans_of(td)
    assert set(spans) == {"orders", "payments", "render"}
    res, seg = spans["orders"]
    assert res["service.name"].string_value == "orders"
    assert res["telemetry.sdk.name"].string_value == "X-Ray for Python"
    # X-Ray's trace ID is the 128-bit ID: 8 hex digits of epoch seconds, then 24 random.
    assert seg.trace_id.hex() == tid and seg.kind == 2 and not seg.parent_span_id
    attrs = {a.key: a.value for a in seg.attributes}
    assert attrs["http.method"].string_value == "GET" and attrs["http.status_code"].int_value == 500
    assert attrs["customer"].string_value == "c-9"
    assert '"size":2' in attrs["aws.xray.metadata.debug"].string_value
    assert seg.status.code == 2
    _, pay = spans["payments"]
    assert pay.kind == 3 and pay.parent_span_id == seg.span_id
    # As the Collector's X-Ray receiver: the 502 and the cause make an error, the exception
    # object gives no status message; the exception is an event with its X-Ray ID.
    assert pay.status.code == 2 and pay.status.message == ""
    ev = {a.key: a.value for a in pay.events[0].attributes}
    assert pay.events[0].name == "exception" and ev["exception.type"].string_value == "ValueError"
    assert ev["exception.message"].string_value == "gateway down" and ev["aws.xray.exception.id"].string_value
    assert ev["exception.stacktrace"].string_value.startswith("ValueError: gateway down\n\tat ")
    assert attrs["aws.xray.annotations"].array_value.values[0].string_value == "customer"
    _, render = spans["render"]
    assert render.kind == 1 and render.parent_span_id == seg.span_id
    # X-Ray in, Zipkin and Jaeger out.
    z = requests.get(f"{weft.zipkin}/api/v2/trace/{tid}", timeout=10).json()
    assert {s["name"] for s in z} == {"orders", "payments", "render"}
    j = requests.get(f"{weft.jaeger}/api/traces/{tid}", timeout=10).json()["data"][0]
    assert {s["operationName"] for s in j["spans"]} == {"orders", "payments", "render"}
    assert weft.metric("weft_udp_spans_accepted_total", port="xray") == 3


def test_a_trace_crossing_xray_and_opentelemetry_stays_one(weft, recorder):
    """An OpenTelemetry service called by the X-Ray one continues its trace (the X-Ray
    propagator hands it the same 128 bits): one trace in weft."""
    xid, remote_id = record_trace(recorder)
    tid = bytes.fromhex(hex_of(xid))
    now = time.time_ns()
    weft.send(make_request([make_span(tid, parent=bytes.fromhex(remote_id), name="POST /charge", kind=2,
                                      start=now)], service="payments-otel"))
    td = wait_for(lambda: (t := weft.fetch_trace(tid.hex(), protobuf=True)) and len(spans_of(t)) == 4 and t,
                  15, "one trace of 4 spans")
    spans = spans_of(td)
    assert spans["POST /charge"][1].parent_span_id == spans["payments"][1].span_id


def test_sampling_endpoints_answer_as_the_daemon(weft):
    # The SDK with centralized sampling asks the daemon's TCP port for rules, and samples the
    # first request of the second by the default rule it gets.
    from aws_xray_sdk.core import xray_recorder
    xray_recorder.configure(service="sampled", sampling=True, context_missing="LOG_ERROR",
                            daemon_address=f"127.0.0.1:{weft.xray_port}")
    seg = xray_recorder.begin_segment("sampled")
    sampled, xid = seg.sampled, seg.trace_id
    xray_recorder.end_segment()
    assert sampled
    wait_for(lambda: weft.fetch_trace(hex_of(xid), protobuf=True), 15, "the sampled trace")
    wait_for(lambda: (weft.metric("weft_connections_accepted_total", port="xray") or 0) >= 1, 15,
             "the SDK's rule poller to call the daemon's TCP port")
    base = f"http://127.0.0.1:{weft.xray_port}"
    rules = requests.post(f"{base}/GetSamplingRules", json={}, timeout=10).json()
    rule = rules["SamplingRuleRecords"][0]["SamplingRule"]
    assert rule["RuleName"] == "Default" and rule["FixedRate"] == 0.05 and rule["ReservoirSize"] == 1
    targets = requests.post(f"{base}/SamplingTargets", json={"SamplingStatisticsDocuments": [
        {"RuleName": "Default", "ClientID": "c1", "Timestamp": time.time(), "RequestCount": 5,
         "SampledCount": 1, "BorrowCount": 0}]}, timeout=10).json()
    assert targets["SamplingTargetDocuments"][0]["RuleName"] == "Default"
    assert targets["UnprocessedStatistics"] == []


def test_bad_datagrams_are_counted(weft):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for junk in (b"no header", b'{"format":"json","version":1}\n{"name":"x"}',
                 b'{"format":"json","version":1}\n{"name":"x","id":"70de5b6f19ff9a0a","start_time":1,'
                 b'"end_time":2,"trace_id":"bad"}'):
        s.sendto(junk, ("127.0.0.1", weft.xray_port))
    wait_for(lambda: weft.metric("weft_udp_datagrams_refused_total", port="xray", reason="parse") == 3,
             10, "three refused datagrams")
    weft.assert_alive()


def test_xray_sdk_for_java(weft):
    """The AWS X-Ray SDK for Java (2.18.2, Maven Central), sending to weft's daemon port."""
    import os
    import subprocess

    from weftlib import REPO_ROOT

    d = REPO_ROOT / "tests" / "xray-java"
    cp_file = d / "target" / "classpath.txt"
    if not cp_file.is_file():
        pytest.fail(f"{cp_file} is missing: run scripts/test-deps.sh", pytrace=False)
    env = {**os.environ, "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{weft.xray_port}"}
    out = subprocess.run(["java", "-cp", f"{d / 'target' / 'classes'}:{cp_file.read_text().strip()}",
                          "weft.xray.Report"], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    xid = out.stdout.strip().splitlines()[-1]
    td = wait_for(lambda: (t := weft.fetch_trace(hex_of(xid), protobuf=True)) and len(spans_of(t)) == 3 and t,
                  15, "the Java SDK's trace")
    spans = spans_of(td)
    res, seg = spans["inventory"]
    assert res["telemetry.sdk.name"].string_value == "X-Ray for Java"
    attrs = {a.key: a.value for a in seg.attributes}
    # Annotation numbers are doubles, as the Collector reads JSON numbers.
    assert attrs["sku"].string_value == "sku-42" and attrs["count"].double_value == 3
    assert res["telemetry.sdk.language"].string_value == "Java", "what follows \"for \" in the SDK name"
    _, call = spans["warehouse"]
    assert call.kind == 3 and call.parent_span_id == seg.span_id
    assert call.status.code == 2 and call.status.message == ""
    ev = {a.key: a.value.string_value for a in call.events[0].attributes}
    assert ev["exception.message"] == "warehouse unavailable"
    assert ev["exception.type"] == "java.lang.IllegalStateException"
    _, inner = spans["retry-backoff"]
    assert inner.parent_span_id == call.span_id and inner.kind == 1


def test_local_sampling_rules_file_reaches_the_sdk(weft_factory, tmp_path):
    """--xray-sampling-rules: the X-Ray SDK's centralized sampler polls the daemon port and
    decides by the file's rules (a path rule that samples all, a default that samples none)."""
    import json

    from aws_xray_sdk.core import xray_recorder
    from aws_xray_sdk.core.daemon_config import DaemonConfig
    from aws_xray_sdk.core.sampling.sampler import DefaultSampler

    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({
        "version": 2,
        "rules": [{"description": "moves", "host": "*", "http_method": "POST", "url_path": "/api/move/*",
                   "fixed_target": 0, "rate": 1.0}],
        "default": {"fixed_target": 0, "rate": 0.0}}))
    weft = weft_factory("--xray-sampling-rules", str(rules))
    sampler = DefaultSampler()
    sampler.load_settings(DaemonConfig(f"127.0.0.1:{weft.xray_port}"), xray_recorder.context)
    move = {"host": "game", "method": "POST", "path": "/api/move/7", "service": "game"}
    wait_for(lambda: sampler.should_trace(dict(move)) == "weft-local-1", 15, "the file's rule in the SDK")
    assert all(sampler.should_trace({"host": "game", "method": "GET", "path": "/scores"}) is False
               for _ in range(50)), "the default rule of the file samples nothing"
    base = f"http://127.0.0.1:{weft.xray_port}"
    recs = requests.post(f"{base}/GetSamplingRules", json={}, timeout=10).json()["SamplingRuleRecords"]
    assert [(r["SamplingRule"]["RuleName"], r["SamplingRule"]["Priority"]) for r in recs] == \
        [("weft-local-1", 1), ("Default", 10000)]
    # A file that is not a rules document stops the server with a message naming it.
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 2, "default": {"fixed_target": 1, "rate": 7}}')
    srv = weft_factory("--xray-sampling-rules", str(bad), start=False, name="badrules")
    import subprocess
    r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30, env=srv.process_env())
    assert r.returncode != 0 and "rate" in r.stderr and "bad.json" in r.stderr, r.stderr


def test_sampling_targets_share_a_rules_reservoir_between_clients(weft_factory, tmp_path):
    """X-Ray's model: each SDK instance gets a share of a rule's reservoir by its request rate,
    so together they sample at most the reservoir a second from it, also while one joins."""
    import json

    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"version": 2, "rules": [], "default": {"fixed_target": 10, "rate": 0.05}}))
    weft = weft_factory("--xray-sampling-rules", str(rules))
    base = f"http://127.0.0.1:{weft.xray_port}"

    def report(client: str, at: float, requests_: int) -> dict:
        r = requests.post(f"{base}/SamplingTargets", json={"SamplingStatisticsDocuments": [
            {"RuleName": "Default", "ClientID": client, "Timestamp": at, "RequestCount": requests_,
             "SampledCount": 1, "BorrowCount": 0}]}, timeout=10)
        assert r.status_code == 200, r.text
        docs = r.json()["SamplingTargetDocuments"]
        assert len(docs) == 1 and docs[0]["FixedRate"] == 0.05 and docs[0]["Interval"] == 10
        assert docs[0]["ReservoirQuotaTTL"] > time.time()
        return docs[0]

    t = time.time()
    held = {"a": report("a", t, 100)["ReservoirQuota"]}
    assert held["a"] == 10, "alone, a client gets the whole reservoir"
    for client in "bc":
        held[client] = report(client, t, 100)["ReservoirQuota"]
        assert sum(held.values()) <= 10, held
    # After a round of reports at equal rates, the reservoir is split about evenly.
    for _ in range(2):
        for client in "abc":
            held[client] = report(client, t + 10, 100)["ReservoirQuota"]
            assert sum(held.values()) <= 10, held
    assert sorted(held.values()) == [3, 3, 4], held
    # A client without its ID is named as unprocessed.
    r = requests.post(f"{base}/SamplingTargets", json={"SamplingStatisticsDocuments": [
        {"RuleName": "Default", "Timestamp": t, "RequestCount": 1}]}, timeout=10).json()
    assert r["UnprocessedStatistics"][0]["Message"] == "ClientID is missing"

