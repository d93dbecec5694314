"""Jaeger clients work unchanged: the collector's thrift-over-HTTP port and the agent's UDP ports,
fed by real clients (the OpenTelemetry Jaeger thrift exporter in agent and collector mode,
jaeger-client for Python, and jaeger-client's thrift types in the binary protocol), read back
through the Tempo API (as the OpenTelemetry Collector's Jaeger receiver maps them) and the
Zipkin API. The clients run in .venv-jaeger (scripts/test-deps.sh)."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
import requests

from weftlib import REPO_ROOT, wait_for

PY = REPO_ROOT / ".venv-jaeger" / "bin" / "python"
GRPC_CLIENT = REPO_ROOT / ".tools" / "bin" / "jaeger-grpc"
CLIENTS = REPO_ROOT / "tests" / "integration" / "jaeger_clients.py"


def run_client(*args: str) -> str:
    if not PY.is_file():
        pytest.fail(f"{PY} is missing: run scripts/test-deps.sh", pytrace=False)
    out = subprocess.run([str(PY), str(CLIENTS), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def run_grpc_client(*args: str) -> str:
    """Jaeger's own gRPC client (tests/jaeger-grpc, built by scripts/test-deps.sh)."""
    if not GRPC_CLIENT.is_file():
        pytest.fail(f"{GRPC_CLIENT} is missing: run scripts/test-deps.sh", pytrace=False)
    out = subprocess.run([str(GRPC_CLIENT), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().rjust(32, "0")


def spans_by_name(td):
    out = {}
    for rs in td.resource_spans:
        res = {a.key: a.value for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out[s.name] = (res, ss.scope, s)
    return out


def attr_map(attrs):
    return {a.key: a.value for a in attrs}


def fetch(weft, tid, n):
    def ready():
        td = weft.fetch_trace(tid, protobuf=True)
        return td if td is not None and sum(len(ss.spans) for rs in td.resource_spans for ss in rs.scope_spans) == n else None
    return wait_for(ready, 15, f"trace {tid} with {n} spans")


@pytest.fixture
def weft(weft_factory):
    return weft_factory()


@pytest.mark.parametrize("mode", ["otel-udp", "otel-http"])
def test_opentelemetry_jaeger_exporter(weft, mode):
    target = ([f"http://127.0.0.1:{weft.jaeger_http_port}/api/traces?format=jaeger.thrift"] if mode == "otel-http"
              else ["127.0.0.1", str(weft.jaeger_compact_port)])
    tid = run_client(mode, *target)
    spans = spans_by_name(fetch(weft, tid, 2))
    res, scope, root = spans["POST /cart"]
    assert res["service.name"].string_value == f"shop-{mode}"
    assert root.kind == 2 and not root.parent_span_id
    a = attr_map(root.attributes)
    # As the Collector's Jaeger receiver: the scope tags the exporter sends stay attributes.
    assert a["otel.scope.name"].string_value == "shop.instrumentation" and a["otel.scope.version"].string_value == "2.1"
    assert a["http.method"].string_value == "POST"
    assert a["items"].int_value == 3 and a["ratio"].double_value == 0.5 and a["cached"].bool_value is True
    assert [e.name for e in root.events] == ["validated"]
    assert attr_map(root.events[0].attributes)["rule"].string_value == "max-items"
    _, _, child = spans["INSERT cart"]
    assert child.kind == 3 and child.parent_span_id == root.span_id
    assert child.status.code == 2 and child.status.message == "deadlock"
    assert attr_map(child.attributes)["peer.service"].string_value == "postgres"
    # Jaeger in, Zipkin out.
    z = requests.get(f"{weft.zipkin}/api/v2/trace/{tid}", timeout=10).json()
    assert {s["name"] for s in z} == {"post /cart", "insert cart"}
    assert next(s for s in z if s["name"] == "insert cart")["tags"]["error"] == "deadlock"


def test_jaeger_client_over_udp_compact(weft):
    tid = run_client("jaeger-client", "127.0.0.1", str(weft.jaeger_compact_port))
    spans = spans_by_name(fetch(weft, tid, 2))
    res, _, root = spans["GET /orders"]
    assert res["service.name"].string_value == "legacy-api"
    # The Collector's process-tag translations: hostname → host.name, the client's version.
    assert "host.name" in res and "hostname" not in res
    assert res["opencensus.exporterversion"].string_value == "Jaeger-Python-4.8.0"
    assert root.kind == 2
    assert attr_map(root.attributes)["http.status_code"].int_value == 200
    assert [e.name for e in root.events] == ["cache miss"]
    assert attr_map(root.events[0].attributes)["key"].string_value == "orders:42"
    _, _, child = spans["redis GET"]
    assert child.parent_span_id == root.span_id and child.kind == 3
    assert child.status.code == 2 and "error" not in attr_map(child.attributes)
    assert weft.metric("weft_udp_spans_accepted_total", port="jaeger_compact") == 2


def test_binary_protocol_on_the_second_agent_port(weft):
    tid = run_client("jaeger-binary", "127.0.0.1", str(weft.jaeger_binary_port))
    spans = spans_by_name(fetch(weft, tid, 1))
    res, _, s = spans["binary op"]
    assert res["service.name"].string_value == "binary-svc" and res["host.name"].string_value == "node-7"
    assert s.kind == 4 and attr_map(s.attributes)["bytes"].int_value == 42
    assert s.end_time_unix_nano - s.start_time_unix_nano == 1_234_000


def test_bad_jaeger_input(weft):
    url = f"http://127.0.0.1:{weft.jaeger_http_port}/api/traces"
    r = requests.post(url, data=b"\x00", headers={"Content-Type": "application/x-thrift"}, timeout=10)
    assert r.status_code == 400 and "no process" in r.text, r.text
    r = requests.post(url, data=b"\x0c\x00\x01\x0b\x00\x01\x7f\xff\xff\xff", timeout=10)
    assert r.status_code == 400 and "thrift" in r.text, r.text
    # UDP cannot answer: refusals are counted by reason.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for junk in (b"hello", b"\x82\x21\x01\x03foo\x00", b""):
        s.sendto(junk, ("127.0.0.1", weft.jaeger_compact_port))
    wait_for(lambda: weft.metric("weft_udp_datagrams_refused_total", port="jaeger_compact", reason="parse") == 3,
             10, "three refused datagrams")
    assert weft.metric("weft_udp_datagrams_total", port="jaeger_compact") == 3
    weft.assert_alive()


@pytest.mark.parametrize("gzip", [False, True])
def test_jaeger_grpc_collector(weft, gzip):
    """Jaeger's gRPC CollectorService/PostSpans with Jaeger's own client and model, as the
    Collector's ProtoToTraces maps it: spans with their own process get their own resource,
    scope tags become the scope, nanoseconds are kept."""
    tid = run_grpc_client(*(["-gzip"] if gzip else []), f"127.0.0.1:{weft.jaeger_grpc_port}")
    td = fetch(weft, tid, 3)
    spans = spans_by_name(td)
    res, scope, root = spans["POST /checkout"]
    assert res["service.name"].string_value == "shop-grpc"
    assert res["host.name"].string_value == "node-9" and "hostname" not in res
    assert res["opencensus.exporterversion"].string_value == "Jaeger-Go-2.30.0" and "jaeger.version" not in res
    assert (scope.name, scope.version) == ("shop.checkout", "3.1")
    a = attr_map(root.attributes)
    assert "otel.scope.name" not in a and "span.kind" not in a
    assert root.kind == 2 and a["http.status_code"].int_value == 201 and a["ratio"].double_value == 0.25
    assert a["cached"].bool_value is False and a["blob"].bytes_value == b"\xde\xad"
    assert root.start_time_unix_nano % 1_000_000 == 123_456, "protobuf's nanoseconds are kept"
    assert root.end_time_unix_nano - root.start_time_unix_nano == 9_000_000
    assert [e.name for e in root.events] == ["cart validated"]
    assert attr_map(root.events[0].attributes)["items"].int_value == 3
    cres, _, child = spans["charge"]
    assert cres["service.name"].string_value == "payments-gw" and cres["region"].string_value == "eu-1"
    assert child.parent_span_id == root.span_id and child.kind == 3 and child.status.code == 2
    assert not child.links and "error" not in attr_map(child.attributes)
    _, _, send = spans["send receipt"]
    assert send.parent_span_id == root.span_id and send.kind == 4
    assert len(send.links) == 1 and attr_map(send.links[0].attributes)["opentracing.ref_type"].string_value == "follows_from"
    assert weft.metric("weft_spans_received_total") >= 3


def test_bad_jaeger_grpc_input(weft):
    import grpc

    ch = grpc.insecure_channel(f"127.0.0.1:{weft.jaeger_grpc_port}")
    call = ch.unary_unary("/jaeger.api_v2.CollectorService/PostSpans")
    for body, words in [(b"", "no batch"), (b"\x0a\x05\x0a\x03abc", "span 0"), (b"\x0a\xff", "Jaeger protobuf")]:
        with pytest.raises(grpc.RpcError) as e:
            call(body, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert words in e.value.details(), e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        ch.unary_unary("/jaeger.api_v2.CollectorService/Nope")(b"", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    ch.close()
    weft.assert_alive()


def jget(weft, path, **params):
    r = requests.get(weft.jaeger + path, params=params, timeout=15)
    return r.status_code, r.json()


def test_jaeger_query_api_reads_what_jaeger_clients_sent(weft):
    """Jaeger in, Jaeger out: the routes Jaeger UI calls, in Jaeger's envelope and model."""
    tid = run_client("jaeger-client", "127.0.0.1", str(weft.jaeger_compact_port))
    fetch(weft, tid, 2)
    code, body = jget(weft, "/api/services")
    assert code == 200 and body["data"] == ["legacy-api"] and body["total"] == 1 and body["errors"] is None
    code, body = jget(weft, "/api/services/legacy-api/operations")
    assert body["data"] == ["GET /orders", "redis GET"]
    code, body = jget(weft, "/api/operations", service="legacy-api", spanKind="client")
    assert body["data"] == [{"name": "redis GET", "spanKind": "client"}]
    short = tid.lstrip("0").rjust(16, "0")
    code, body = jget(weft, f"/api/traces/{short}")
    assert code == 200, body
    trace = body["data"][0]
    assert trace["traceID"] == short
    assert trace["processes"]["p1"]["serviceName"] == "legacy-api"
    spans = {s["operationName"]: s for s in trace["spans"]}
    root, child = spans["GET /orders"], spans["redis GET"]
    assert child["references"] == [{"refType": "CHILD_OF", "traceID": short, "spanID": root["spanID"]}]
    tags = {t["key"]: (t["type"], t["value"]) for t in root["tags"]}
    assert tags["http.status_code"] == ("int64", 200) and tags["span.kind"] == ("string", "server")
    assert {t["key"]: t["value"] for t in child["tags"]}["error"] is True
    assert root["logs"][0]["fields"][0] == {"key": "event", "type": "string", "value": "cache miss"}
    # Searches: Jaeger's tags (as text, span or process tags or log fields), one span at a time.
    now_us = int(time.time() * 1e6)
    def search(**q):
        code, body = jget(weft, "/api/traces", service="legacy-api", start=now_us - 600_000_000,
                          end=now_us + 60_000_000, **q)
        assert code == 200, body
        return [t["traceID"] for t in body["data"]]
    assert search() == [short]
    assert search(tags='{"error":"true"}') == [short]
    assert search(tags='{"http.status_code":"200","span.kind":"server"}') == [short]
    assert search(tags='{"http.status_code":"200","error":"true"}') == [], "two spans never make one match"
    assert search(tag="key:orders:42") == [short]
    assert search(operation="redis GET", minDuration="1us") == [short]
    assert search(operation="redis GET", minDuration="1h") == []
    code, body = jget(weft, "/api/traces", traceID=short)
    assert [t["traceID"] for t in body["data"]] == [short]
    # Errors in Jaeger's envelope.
    code, body = jget(weft, "/api/traces")
    assert code == 400 and "service" in body["errors"][0]["msg"]
    code, body = jget(weft, "/api/traces/00000000000000ab")
    assert code == 404 and body["errors"][0]["code"] == 404 and body["data"] is None


def test_jaeger_dependencies_from_otlp_spans(weft):
    """OTLP in, Jaeger out: a call from one service into another is a dependency link."""
    from otlpdata import make_request, make_span, new_span_id, new_trace_id

    now = time.time_ns()
    tid, a, b = new_trace_id(), new_span_id(), new_span_id()
    weft.send(make_request([make_span(tid, a, name="GET /", kind=2, start=now)], service="web"))
    weft.send(make_request([make_span(tid, b, parent=a, name="SELECT", kind=2, start=now + 1000)], service="db"))
    fetch(weft, tid.hex(), 2)
    code, body = jget(weft, "/api/dependencies", endTs=now // 1_000_000 + 1000, lookback=600000)
    assert code == 200 and body["data"] == [{"parent": "web", "child": "db", "callCount": 1}], body


# --- Differential tests against the real Jaeger v2 -------------------------------------------

JAEGER_BIN = REPO_ROOT / ".tools" / "jaeger-bin" / "jaeger"

# Jaeger v2's configuration, shared with scripts/bench_jaeger_xray.py.
JAEGER_CONFIG = (REPO_ROOT / "tests" / "jaeger-v2.yaml").read_text()


@pytest.fixture
def real_jaeger(tmp_path):
    """The real Jaeger v2 (built by scripts/test-deps.sh), in-memory storage, on free ports."""
    from weftlib import free_ports, peer_process

    if not JAEGER_BIN.is_file():
        pytest.fail(f"{JAEGER_BIN} is missing: run scripts/test-deps.sh", pytrace=False)
    ports = dict(zip(["health", "query", "query_grpc", "otlp_grpc", "otlp_http", "thrift_http", "jaeger_grpc",
                      "zipkin"], free_ports(8)))
    cfg = tmp_path / "jaeger.yaml"
    cfg.write_text(JAEGER_CONFIG.format(max_traces=100000, **ports))
    query = f"http://127.0.0.1:{ports['query']}"
    with peer_process([str(JAEGER_BIN), "--config", str(cfg)], tmp_path / "jaeger.log",
                      lambda: requests.get(f"{query}/api/services", timeout=1).status_code == 200,
                      "Jaeger v2", timeout=60):
        yield {"query": query,
               "otlp": f"http://127.0.0.1:{ports['otlp_http']}/v1/traces",
               "thrift": f"http://127.0.0.1:{ports['thrift_http']}/api/traces",
               "grpc": f"127.0.0.1:{ports['jaeger_grpc']}",
               "zipkin": f"http://127.0.0.1:{ports['zipkin']}/api/v2/spans"}


def norm_trace(t: dict) -> dict:
    """Documented differences (spec/formats/jaeger.md): order of spans, tags, logs' fields and
    process IDs; and an event name that a Jaeger client wrote as the `message` field is the
    event's name in weft (shown as `event`), where Jaeger keeps a `message` field."""
    procs = t["processes"]
    key = lambda kv: kv["key"]
    for s in t["spans"]:
        for l in s["logs"]:
            for f in l["fields"]:
                if f["key"] == "event":
                    f["key"] = "message"
    spans = []
    for s in t["spans"]:
        s = dict(s)
        p = procs[s.pop("processID")]
        s["process"] = {"serviceName": p["serviceName"], "tags": sorted(p["tags"], key=key)}
        s["tags"] = sorted(s["tags"], key=key)
        s["logs"] = [{"timestamp": l["timestamp"], "fields": sorted(l["fields"], key=key)} for l in s["logs"]]
        s.pop("warnings", None)
        spans.append(s)
    return {"traceID": t["traceID"], "spans": sorted(spans, key=lambda s: s["spanID"])}


def jcompare(real, weft, path, norm=lambda d: d, **params):
    a = requests.get(real["query"] + path, params=params, timeout=15)
    b = requests.get(weft.jaeger + path, params=params, timeout=15)
    assert a.status_code == b.status_code == 200, (path, a.status_code, a.text[:300], b.status_code, b.text[:300])
    da, db = norm(a.json()["data"]), norm(b.json()["data"])
    assert db == da, f"{path} {params} differs\njaeger: {da}\nweft:   {db}"
    return da


def test_otlp_spans_read_through_jaeger_as_the_real_jaeger_shows_them(real_jaeger, weft):
    import json as _json

    from otlpdata import make_request, make_span, new_span_id, new_trace_id
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    now = time.time_ns()
    tid, a, b, c = new_trace_id(), new_span_id(), new_span_id(), new_span_id()
    ev = Span.Event(time_unix_nano=now + 500, name="cache.miss")
    req1 = make_request([make_span(tid, a, name="GET /cart", kind=2, start=now, end=now + 9_000_000,
                                   attributes={"http.method": "GET", "http.status_code": 200, "ratio": 0.5,
                                               "cached": False}, events=[ev]),
                         make_span(tid, c, parent=a, name="render", kind=1, start=now + 1_000_000)],
                        service="web", resource_attrs={"host.name": "h1", "k8s.pod.name": "web-1"})
    req2 = make_request([make_span(tid, b, parent=a, name="SELECT cart", kind=3, start=now + 2_000_000,
                                   status=Status(code=2, message="deadlock"))], service="db")
    for req in (req1, req2):
        weft.send(req)
        r = requests.post(real_jaeger["otlp"], data=req.SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}, timeout=10)
        assert r.status_code == 200, r.text
    short = tid.hex()
    wait_for(lambda: requests.get(f"{real_jaeger['query']}/api/traces/{short}", timeout=5).status_code == 200
             and len(requests.get(f"{real_jaeger['query']}/api/traces/{short}", timeout=5).json()["data"][0]["spans"]) == 3,
             15, "the trace in Jaeger")
    fetch(weft, short, 3)
    jcompare(real_jaeger, weft, f"/api/traces/{short}", lambda d: [norm_trace(t) for t in d])
    jcompare(real_jaeger, weft, "/api/services", sorted)
    for svc in ("web", "db"):
        jcompare(real_jaeger, weft, f"/api/services/{svc}/operations", sorted)
        jcompare(real_jaeger, weft, "/api/operations",
                 lambda d: sorted(d, key=lambda o: (o["name"], o["spanKind"])), service=svc)
    now_us = now // 1000
    window = {"start": now_us - 60_000_000, "end": now_us + 60_000_000, "limit": 20}
    for q in ({"service": "web"}, {"service": "web", "tags": _json.dumps({"http.status_code": "200"})},
              {"service": "web", "tag": "k8s.pod.name:web-1"}, {"service": "web", "operation": "render"},
              {"service": "web", "minDuration": "5ms"}):
        found = jcompare(real_jaeger, weft, "/api/traces", lambda d: [norm_trace(t) for t in d], **window, **q)
        assert len(found) == 1, (q, found)
    for q in ({"service": "web", "operation": "render", "minDuration": "5ms"}, {"service": "db", "operation": "render"}):
        assert jcompare(real_jaeger, weft, "/api/traces", lambda d: d, **window, **q) == [], q
    # Documented difference: weft also matches the tags its Jaeger view adds (`error`,
    # `span.kind`, `otel.status_code`), as Jaeger v1's storage did; Jaeger v2 matches stored
    # attributes only, so Jaeger UI's usual `error=true` search finds nothing there.
    q = {"service": "db", "tags": _json.dumps({"error": "true"}), **window}
    assert requests.get(real_jaeger["query"] + "/api/traces", params=q, timeout=10).json()["data"] == []
    assert [t["traceID"] for t in jget(weft, "/api/traces", **q)[1]["data"]] == [short]


def test_jaeger_thrift_reads_back_as_from_the_real_jaeger(real_jaeger, weft):
    """The OpenTelemetry Jaeger exporter sends the same spans over thrift HTTP to both."""
    tid = run_client("otel-http", real_jaeger["thrift"], f"http://127.0.0.1:{weft.jaeger_http_port}/api/traces")
    wait_for(lambda: requests.get(f"{real_jaeger['query']}/api/traces/{tid}", timeout=5).status_code == 200,
             15, "the trace in Jaeger")
    fetch(weft, tid, 2)
    jcompare(real_jaeger, weft, f"/api/traces/{tid}", lambda d: [norm_trace(t) for t in d])


def test_jaeger_grpc_reads_back_as_from_the_real_jaeger(real_jaeger, weft):
    """Jaeger's gRPC client sends the same batch to both collectors; both query APIs agree."""
    tid = run_grpc_client(real_jaeger["grpc"], f"127.0.0.1:{weft.jaeger_grpc_port}")
    short = tid.lstrip("0")
    wait_for(lambda: requests.get(f"{real_jaeger['query']}/api/traces/{short}", timeout=5).status_code == 200,
             15, "the trace in Jaeger")
    fetch(weft, tid, 3)
    jcompare(real_jaeger, weft, f"/api/traces/{short}", lambda d: [norm_trace(t) for t in d])
    jcompare(real_jaeger, weft, "/api/services", sorted)
    jcompare(real_jaeger, weft, "/api/operations", lambda d: sorted(d, key=lambda o: (o["name"], o["spanKind"])),
             service="shop-grpc")


def clean(v):
    """OTLP JSON without default values (0, "", [], {}), which encoders may omit or write."""
    if isinstance(v, dict):
        out = {k: clean(x) for k, x in v.items()}
        return {k: x for k, x in out.items() if x not in (0, "", [], {}, None)}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v


def flat_v3(body):
    """The spans of an api/v3 answer, each with its resource and scope, in span ID order (the
    grouping of spans into resource and scope entries is the storage's, not the API's; so is
    the order of a resource's attributes, which is the order a store keeps them in)."""
    out = []
    for rs in body["result"]["resourceSpans"]:
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                # Jaeger v2's memory store adjusts its stored trace in place, so each adjusted
                # read of a trace adds its warnings again: each warning counts once.
                for a in s.get("attributes", []):
                    if a["key"] == "@jaeger@warnings":
                        vals = a["value"]["arrayValue"]["values"]
                        a["value"]["arrayValue"]["values"] = [v for i, v in enumerate(vals) if v not in vals[:i]]
                res = dict(rs.get("resource", {}))
                res["attributes"] = sorted(res.get("attributes", []), key=lambda a: a["key"])
                out.append(clean({"resource": res, "scope": ss.get("scope", {}), "span": s}))
    return sorted(out, key=lambda x: (x["span"]["traceId"], x["span"]["spanId"]))


def v3compare(real, weft, path, norm, expect=200, **params):
    a = requests.get(real["query"] + path, params=params, timeout=15)
    b = requests.get(weft.jaeger + path, params=params, timeout=15)
    assert a.status_code == b.status_code == expect, (path, a.status_code, a.text[:300], b.status_code, b.text[:300])
    da, db = norm(a.json()), norm(b.json())
    if db != da and isinstance(da, list) and isinstance(db, list):
        import json as _json
        ja, jb = ({_json.dumps(x, sort_keys=True) for x in d} for d in (da, db))
        raise AssertionError(f"{path} {params} differs\nonly in jaeger: {sorted(ja - jb)}\nonly in weft: {sorted(jb - ja)}")
    assert db == da, f"{path} {params} differs\njaeger: {da}\nweft:   {db}"
    return da


def test_api_v3_and_dependencies_answer_as_the_real_jaeger(real_jaeger, weft):
    """Jaeger v2's api/v3 OTLP-JSON routes and /api/dependencies, the same spans in both."""
    from datetime import datetime, timezone

    from otlpdata import make_request, make_span, new_span_id, new_trace_id
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    now = time.time_ns()
    t1, t2 = new_trace_id(), new_trace_id()
    a, b, c, d, e = (new_span_id() for _ in range(5))
    ev = [Span.Event(time_unix_nano=now + 900, name="z-last"), Span.Event(time_unix_nano=now + 500, name="a-first")]
    reqs = [
        make_request([make_span(t1, a, name="GET /cart", kind=2, start=now, end=now + 9_000_000, events=ev,
                                attributes={"zeta": 1, "alpha": "x", "telemetry.sdk.language": "go",
                                            "ip": 167772161}),
                      make_span(t1, b, parent=a, name="render", kind=1, start=now + 1_000_000)],
                     service="web", resource_attrs={"host.name": "h1", "telemetry.sdk.language": "go"}),
        make_request([make_span(t1, c, parent=a, name="SELECT cart", kind=3, start=now + 2_000_000,
                                status=Status(code=2, message="deadlock"))], service="db"),
        make_request([make_span(t2, d, name="GET /health", kind=2, start=now + 5_000_000, end=now + 6_000_000),
                      make_span(t2, e, parent=d, name="PING", kind=3, start=now + 5_100_000)], service="web"),
        make_request([make_span(t2, new_span_id(), parent=e, name="PING", kind=2, start=now + 5_200_000)],
                     service="cache"),
    ]
    for req in reqs:
        weft.send(req)
        r = requests.post(real_jaeger["otlp"], data=req.SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}, timeout=10)
        assert r.status_code == 200, r.text
    # Raw reads while waiting: Jaeger v2's memory store hands its stored traces to the adjusters,
    # which change them in place, so a raw read after an adjusted one shows the adjusted trace.
    raw = {"raw_traces": "true"}
    wait_for(lambda: all(len(flat_v3(requests.get(f"{real_jaeger['query']}/api/v3/traces/{t.hex()}", params=raw,
                                                  timeout=5).json())) == 3 for t in (t1, t2)),
             15, "both traces in Jaeger")
    fetch(weft, t1.hex(), 3)
    fetch(weft, t2.hex(), 3)
    raw_spans = v3compare(real_jaeger, weft, f"/api/v3/traces/{t1.hex()}", flat_v3, **raw)
    root = next(s for s in raw_spans if s["span"]["name"] == "GET /cart")
    assert [x["key"] for x in root["span"]["attributes"]][0] == "zeta", "raw: as received"

    v3compare(real_jaeger, weft, "/api/v3/services", lambda d: sorted(d["services"]))
    by_name = lambda d: sorted(d["operations"], key=lambda o: (o["name"], o["spanKind"]))
    v3compare(real_jaeger, weft, "/api/v3/operations", by_name, service="web")
    v3compare(real_jaeger, weft, "/api/v3/operations", by_name, service="web", span_kind="server")
    v3compare(real_jaeger, weft, "/api/v3/operations", by_name, service="nope")
    spans = v3compare(real_jaeger, weft, f"/api/v3/traces/{t1.hex()}", flat_v3)
    root = next(s for s in spans if s["span"]["name"] == "GET /cart")
    # The adjusters ran: sorted attributes and events, the SDK attribute moved to the resource,
    # the integer IP as text.
    assert [x["key"] for x in root["span"]["attributes"]] == ["alpha", "ip", "zeta"], root
    assert [x["name"] for x in root["span"]["events"]] == ["a-first", "z-last"]
    iso = lambda ns: datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat().replace("+00:00", "Z")
    window = {"query.start_time_min": iso(now - 60e9), "query.start_time_max": iso(now + 60e9), "query.num_traces": 20}
    for q in ({"query.service_name": "web"}, {"query.service_name": "db"},
              {"query.service_name": "web", "query.operation_name": "render"},
              {"query.service_name": "web", "query.duration_min": "5ms"},
              {"query.service_name": "cache", "query.duration_max": "1h"}):
        found = v3compare(real_jaeger, weft, "/api/v3/traces", flat_v3, **window, **q)
        assert found, q
    v3compare(real_jaeger, weft, "/api/v3/traces", lambda d: d["error"]["httpCode"], expect=404,
              **window, **{"query.service_name": "web", "query.operation_name": "nope"})
    v3compare(real_jaeger, weft, "/api/v3/traces/00000000000000000000000000000abc", lambda d: d["error"], expect=404)
    code = lambda d: d["error"]["httpCode"]
    v3compare(real_jaeger, weft, "/api/v3/traces", code, expect=400, **{"query.service_name": "web"})
    v3compare(real_jaeger, weft, "/api/v3/traces/xyz", code, expect=400)

    # Dependencies. Documented difference: Jaeger v2's memory store also counts a call within
    # one service (web → web); weft, as Jaeger v1 and its dependency jobs, shows calls between
    # services only.
    params = {"endTs": now // 1_000_000 + 60_000, "lookback": 600_000}
    real = requests.get(real_jaeger["query"] + "/api/dependencies", params=params, timeout=10).json()["data"]
    assert {"parent": "web", "child": "web", "callCount": 2} in real, real
    real = sorted((x for x in real if x["parent"] != x["child"]), key=lambda x: (x["parent"], x["child"]))
    ours = sorted(jget(weft, "/api/dependencies", **params)[1]["data"], key=lambda x: (x["parent"], x["child"]))
    assert ours == real == [{"parent": "web", "child": "cache", "callCount": 1},
                            {"parent": "web", "child": "db", "callCount": 1}], (ours, real)


def test_tenancy_on_every_jaeger_port(weft_factory):
    """With multitenancy: the collector's HTTP and gRPC ports take X-Scope-OrgID, the agent's UDP
    ports use --udp-tenant, and the query API answers each tenant from its own spans."""
    srv = weft_factory("--multitenancy", "--udp-tenant", "udp-fleet")
    tid = run_grpc_client("-tenant", "acme", f"127.0.0.1:{srv.jaeger_grpc_port}")
    short = tid.lstrip("0")
    q = lambda t: requests.get(f"{srv.jaeger}/api/traces/{short}", headers={"X-Scope-OrgID": t}, timeout=10)
    wait_for(lambda: q("acme").status_code == 200, 15, "the gRPC batch in tenant acme")
    assert q("other").status_code == 404
    # Without a tenant the gRPC call is refused, naming the header.
    out = subprocess.run([str(GRPC_CLIENT), f"127.0.0.1:{srv.jaeger_grpc_port}"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "Unauthenticated" in out.stderr and "X-Scope-OrgID" in out.stderr, out.stderr
    # UDP: the configured tenant.
    utid = run_client("jaeger-client", "127.0.0.1", str(srv.jaeger_compact_port)).lstrip("0")
    wait_for(lambda: requests.get(f"{srv.jaeger}/api/traces/{utid}", headers={"X-Scope-OrgID": "udp-fleet"},
                                  timeout=10).status_code == 200, 15, "the UDP spans in tenant udp-fleet")
    r = requests.get(f"{srv.jaeger}/api/services", headers={"X-Scope-OrgID": "udp-fleet"}, timeout=10).json()
    assert r["data"] == ["legacy-api"], r


def summaries_message():
    """jaeger-idl's `FindTraceSummariesResponse` (proto/api_v3/query_service.proto), built from
    its field numbers, so that a JSON answer parses only if every name and type is the message's."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="weft_test/jaeger_api_v3_summaries.proto",
                                            package="jaeger.api_v3", syntax="proto3")

    def message(name, fields):
        m = fd.message_type.add(name=name)
        for fname, number, typ, *rest in fields:
            f = m.field.add(name=fname, number=number, type=typ, label=F.LABEL_OPTIONAL)
            if rest:
                f.label, f.type_name = F.LABEL_REPEATED, rest[0]

    message("ServiceSummary", [("name", 1, F.TYPE_STRING), ("span_count", 2, F.TYPE_INT32),
                               ("error_span_count", 3, F.TYPE_INT32)])
    message("TraceSummary", [
        ("trace_id", 1, F.TYPE_STRING), ("root_service_name", 2, F.TYPE_STRING),
        ("root_operation_name", 3, F.TYPE_STRING), ("min_start_time_unix_nano", 4, F.TYPE_FIXED64),
        ("max_end_time_unix_nano", 5, F.TYPE_FIXED64), ("span_count", 6, F.TYPE_INT32),
        ("error_span_count", 7, F.TYPE_INT32), ("orphan_span_count", 8, F.TYPE_INT32),
        ("services", 9, F.TYPE_MESSAGE, ".jaeger.api_v3.ServiceSummary")])
    message("FindTraceSummariesResponse", [("summaries", 1, F.TYPE_MESSAGE, ".jaeger.api_v3.TraceSummary")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("jaeger.api_v3.FindTraceSummariesResponse"))


def summarize_like_jaeger(body) -> dict[str, dict]:
    """Jaeger's summaries (querysvc/summary.go) of a `FindTraces` answer, by trace ID, as jsonpb
    writes them (defaults left out)."""
    by_trace: dict[str, list] = {}
    for rs in body["result"]["resourceSpans"]:
        svc = next((a["value"].get("stringValue", "") for a in rs.get("resource", {}).get("attributes", [])
                    if a["key"] == "service.name"), "")
        for ss in rs.get("scopeSpans", []):
            for s in ss.get("spans", []):
                by_trace.setdefault(s["traceId"], []).append((svc, s))
    out = {}
    for tid, spans in by_trace.items():
        ids = {s["spanId"] for _, s in spans}
        services: dict[str, list[int]] = {}
        root, orphans, errors = None, 0, 0
        for svc, s in spans:
            st = services.setdefault(svc, [0, 0])
            st[0] += 1
            if s.get("status", {}).get("code") in (2, "STATUS_CODE_ERROR"):
                st[1] += 1
                errors += 1
            start = int(s["startTimeUnixNano"])
            if not s.get("parentSpanId"):
                if root is None or start < root[0]:
                    root = (start, svc, s["name"])
            elif s["parentSpanId"] not in ids:
                orphans += 1
        summary = {"traceId": tid, "rootServiceName": root[1] if root else "",
                   "rootOperationName": root[2] if root else "",
                   "minStartTimeUnixNano": str(min(int(s["startTimeUnixNano"]) for _, s in spans)),
                   "maxEndTimeUnixNano": str(max(int(s["endTimeUnixNano"]) for _, s in spans)),
                   "spanCount": len(spans), "errorSpanCount": errors, "orphanSpanCount": orphans,
                   "services": [{k: v for k, v in (("name", n), ("spanCount", c), ("errorSpanCount", e)) if v}
                                for n, (c, e) in sorted(services.items())]}
        out[tid] = {k: v for k, v in summary.items() if v not in ("", 0, [])}
    return out


def test_trace_summaries_as_jaeger_ui_searches(real_jaeger, weft):
    """`GET /api/v3/trace-summaries`, which Jaeger UI searches with since v2.19 (the Jaeger built
    here, v1.76, predates it): each summary equals Jaeger's own summary of the traces Jaeger's
    `FindTraces` returns for the same query, and the answer parses as jaeger-idl's message. The
    UI's lowerCamelCase parameters, `query.attributes` and `query.searchDepth` are read."""
    import json as _json
    from datetime import datetime, timezone

    from google.protobuf import json_format
    from otlpdata import make_request, make_span, new_span_id, new_trace_id
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    now = time.time_ns()
    t1, t2, t3 = new_trace_id(), new_trace_id(), new_trace_id()
    a, b, c, d = (new_span_id() for _ in range(4))
    err = Status(code=2, message="boom")
    reqs = [
        make_request([make_span(t1, a, name="GET /cart", kind=2, start=now, end=now + 9_000_000,
                                attributes={"http.method": "GET"}),
                      make_span(t1, b, parent=a, name="render", start=now + 1_000_000, status=err)],
                     service="web"),
        make_request([make_span(t1, c, parent=a, name="SELECT", kind=3, start=now + 2_000_000, status=err),
                      # Its parent never arrives: an orphan.
                      make_span(t1, new_span_id(), parent=new_span_id(), name="late", start=now + 3_000_000)],
                     service="db"),
        make_request([make_span(t2, d, name="POST /pay", kind=2, start=now + 5_000_000, end=now + 6_000_000,
                                attributes={"http.method": "POST"}),
                      # A second span without a parent, starting later: not the root.
                      make_span(t2, new_span_id(), name="cron", start=now + 5_500_000)], service="web"),
        make_request([make_span(t3, new_span_id(), name="tick", start=now + 7_000_000)], service="batch"),
    ]
    for req in reqs:
        weft.send(req)
        r = requests.post(real_jaeger["otlp"], data=req.SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf"}, timeout=10)
        assert r.status_code == 200, r.text
    for t, n in ((t1, 4), (t2, 2), (t3, 1)):
        fetch(weft, t.hex(), n)
        wait_for(lambda: len(flat_v3(requests.get(f"{real_jaeger['query']}/api/v3/traces/{t.hex()}",
                                                  timeout=5).json())) == n, 15, "the trace in Jaeger")
    iso = lambda ns: datetime.fromtimestamp(ns / 1e9, timezone.utc).isoformat().replace("+00:00", "Z")
    lo, hi = iso(now - 60e9), iso(now + 60e9)
    cls = summaries_message()
    for q in ({}, {"service_name": "web"}, {"service_name": "db"}, {"service_name": "web", "operation_name": "render"},
              {"service_name": "web", "duration_min": "5ms"}):
        snake = {"query.start_time_min": lo, "query.start_time_max": hi, "query.num_traces": 20,
                 **{f"query.{k}": v for k, v in q.items()}}
        camel = {"query.startTimeMin": lo, "query.startTimeMax": hi, "query.searchDepth": 20,
                 **{"query." + k.split("_")[0] + "".join(w.title() for w in k.split("_")[1:]): v for k, v in q.items()}}
        r = requests.get(real_jaeger["query"] + "/api/v3/traces", params=snake, timeout=15)
        assert r.status_code == 200, r.text
        want = summarize_like_jaeger(r.json())
        got = requests.get(weft.jaeger + "/api/v3/trace-summaries", params=camel, timeout=15)
        assert got.status_code == 200 and got.headers["content-type"] == "application/json", got.text
        json_format.Parse(got.text, cls())  # every field is the message's, with its type
        got = {s["traceId"]: s for s in got.json()["summaries"]}
        assert got == want, f"{q}\njaeger: {want}\nweft:   {got}"
        # The same search over FindTraces, under either spelling of the parameters.
        assert flat_v3(requests.get(weft.jaeger + "/api/v3/traces", params=camel, timeout=15).json()) == \
            flat_v3(requests.get(weft.jaeger + "/api/v3/traces", params=snake, timeout=15).json())
    s1 = got[t1.hex()] if t1.hex() in got else None
    first = summarize_like_jaeger(requests.get(real_jaeger["query"] + "/api/v3/traces", params={
        "query.start_time_min": lo, "query.start_time_max": hi, "query.num_traces": 20}, timeout=15).json())
    assert first[t1.hex()]["orphanSpanCount"] == 1 and first[t1.hex()]["errorSpanCount"] == 2, first
    assert first[t2.hex()]["rootOperationName"] == "POST /pay", first
    del s1

    def summaries(**params):
        r = requests.get(weft.jaeger + "/api/v3/trace-summaries",
                         params={"query.startTimeMin": lo, "query.startTimeMax": hi, **params}, timeout=15)
        return r.status_code, r.json()

    ids = lambda body: sorted(s["traceId"] for s in body.get("summaries", []))
    # Attributes: on the span, its resource, or as Jaeger's special keys.
    assert ids(summaries(**{"query.attributes": _json.dumps({"http.method": "GET"})})[1]) == [t1.hex()]
    assert ids(summaries(**{"query.attributes": _json.dumps({"service.name": "batch"})})[1]) == [t3.hex()]
    assert ids(summaries(**{"query.attributes": _json.dumps({"error": "true"})})[1]) == [t1.hex()]
    assert ids(summaries(**{"query.attributes": _json.dumps({"http.method": "GET", "span.kind": "client"})})[1]) == []
    # Newest first, cut at the depth asked.
    status, body = summaries(**{"query.searchDepth": "2"})
    assert status == 200 and [s["traceId"] for s in body["summaries"]] == [t3.hex(), t2.hex()], body
    # Nothing found is an empty message, as jsonpb writes it.
    assert summaries(**{"query.serviceName": "nope"}) == (200, {})
    for params, words in (({"query.attributes": "{nope"}, "query.attributes"),
                          ({"query.searchDepth": "x"}, "query.searchDepth"),
                          ({"query.startTimeMin": hi, "query.startTimeMax": lo}, "must be before"),
                          ({"query.filter": "{}"}, "query.filter")):
        status, body = summaries(**params)
        assert status == 400 and words in body["error"]["message"], (params, body)


def test_children_of_a_zipkin_shared_span_hang_under_the_server_as_in_jaeger(real_jaeger, weft):
    """A Zipkin server span that joined its client's span ID (`"shared": true`), with a child
    that names the shared ID as its parent: Jaeger de-duplicates the ID and puts the child under
    the server side; weft's Jaeger and Tempo APIs show the same tree."""
    import gzip
    import json as _json

    now = int(time.time() * 1_000_000)
    ep = lambda svc: {"serviceName": svc, "ipv4": "10.0.0.1"}
    tid = "463ac35c9f6413ad48485a3953bb6125"
    spans = [
        {"traceId": tid, "id": "1000000000000001", "kind": "SERVER", "name": "get /", "timestamp": now,
         "duration": 1000, "localEndpoint": ep("web")},
        {"traceId": tid, "parentId": "1000000000000001", "id": "a2fb4a1d1a96d312", "kind": "CLIENT",
         "name": "post /orders", "timestamp": now + 10, "duration": 900, "localEndpoint": ep("web")},
        {"traceId": tid, "parentId": "1000000000000001", "id": "a2fb4a1d1a96d312", "kind": "SERVER",
         "name": "post /orders", "timestamp": now + 100, "duration": 700, "shared": True,
         "localEndpoint": ep("orders")},
        {"traceId": tid, "parentId": "a2fb4a1d1a96d312", "id": "b7ad6b7169203331", "kind": "CLIENT",
         "name": "insert", "timestamp": now + 300, "duration": 20, "localEndpoint": ep("orders")},
        {"traceId": tid, "parentId": "b7ad6b7169203331", "id": "c7ad6b7169203332",
         "name": "encode", "timestamp": now + 305, "duration": 5, "localEndpoint": ep("orders")},
    ]
    body = _json.dumps(spans).encode()
    for url in (real_jaeger["zipkin"], weft.zipkin + "/api/v2/spans"):
        r = requests.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code in (200, 202), (url, r.status_code, r.text)

    def tree(base):
        r = requests.get(f"{base}/api/traces/{tid}", timeout=10)
        if r.status_code != 200 or len(r.json()["data"][0]["spans"]) != len(spans):
            return None
        t = r.json()["data"][0]
        by_id = {s["spanID"]: s for s in t["spans"]}
        name = lambda s: (t["processes"][s["processID"]]["serviceName"], s["operationName"],
                          "server" if any(g["key"] == "span.kind" and g["value"] == "server" for g in s["tags"])
                          else "other")

        def depth(s):
            parents = [r["spanID"] for r in s["references"] if r["refType"] == "CHILD_OF"]
            return 0 if not parents or parents[0] not in by_id else 1 + depth(by_id[parents[0]])
        return sorted((name(s), depth(s)) for s in t["spans"])

    jaeger = wait_for(lambda: tree(real_jaeger["query"]), 15, "the trace in Jaeger")
    ours = wait_for(lambda: tree(weft.jaeger), 15, "the trace in weft")
    assert ours == jaeger, f"\njaeger: {jaeger}\nweft:   {ours}"
    assert (("orders", "insert", "other"), 3) in jaeger, jaeger
    # Tempo's API shows the same parent.
    td = weft.fetch_trace(tid, protobuf=True)
    all_spans = [s for rs in td.resource_spans for ss in rs.scope_spans for s in ss.spans]
    server = next(s for s in all_spans if s.name == "post /orders" and s.kind == 2)
    insert = next(s for s in all_spans if s.name == "insert")
    assert insert.parent_span_id == server.span_id != bytes.fromhex("a2fb4a1d1a96d312")


def test_jaeger_monitor_tab_metrics_from_spans(weft):
    """Jaeger's SPM API (`/api/metrics/{calls,errors,latencies}`), which Jaeger UI's Monitor tab
    calls: rates, error rates and latency quantiles per service and operation, computed from the
    spans, equal to the counts sent and to weft's own TraceQL metrics for the same window."""
    from otlpdata import make_request, make_span, new_trace_id
    from opentelemetry.proto.trace.v1.trace_pb2 import Status

    # The newest time 40 s past a whole minute: a whole minute falls among the spans, so a window
    # aligned to whole steps (as Tempo's query_range aligns) would split them; Jaeger's points,
    # as Prometheus evaluates them, are over the steps ending exactly at endTs.
    now_ms = time.time_ns() // 1_000_000
    end_ms = now_ms - (now_ms - 40_000) % 60_000
    at = lambda i: (end_ms - 50_000 + i * 1000) * 1_000_000  # in the last minute before end_ms
    spans = []
    for i in range(20):
        spans.append(make_span(new_trace_id(), name="GET /a", kind=2, start=at(i), end=at(i) + (i + 1) * 1_000_000,
                               status=Status(code=2) if i % 4 == 0 else None))
    for i in range(10):
        spans.append(make_span(new_trace_id(), name="GET /b", kind=2, start=at(i), end=at(i) + 5_000_000))
    for i in range(7):  # client spans: not counted under the default span kind (server)
        spans.append(make_span(new_trace_id(), name="SELECT", kind=3, start=at(i), end=at(i) + 1_000_000))
    weft.send(make_request(spans, service="web"))
    wait_for(lambda: requests.get(weft.api + "/api/search", params={"q": '{ resource.service.name = "web" }',
                                                                    "limit": 100, "start": end_ms // 1000 - 120,
                                                                    "end": end_ms // 1000 + 60}, timeout=10)
             .json().get("traces", []).__len__() == 37, 15, "the spans stored")

    def spm(figure, **params):
        r = requests.get(f"{weft.jaeger}/api/metrics/{figure}", timeout=30, params={
            "service": "web", "endTs": end_ms, "lookback": 0, "step": 5000, "ratePer": 60000, **params})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
        return r.json()

    calls = spm("calls")
    assert (calls["name"], calls["type"]) == ("service_call_rate", "GAUGE"), calls
    [m] = calls["metrics"]
    assert m["labels"] == [{"name": "service_name", "value": "web"}]
    [point] = m["metricPoints"]
    assert abs(point["gaugeValue"]["doubleValue"] - 30 / 60) < 1e-9, point
    assert point["timestamp"].endswith("Z") and point["timestamp"].startswith(time.strftime("%Y-", time.gmtime()))
    by_op = spm("calls", groupByOperation="true")
    assert by_op["name"] == "service_operation_call_rate", by_op
    rates = {next(l["value"] for l in m["labels"] if l["name"] == "operation"): m["metricPoints"][0]["gaugeValue"]["doubleValue"]
             for m in by_op["metrics"]}
    assert rates.keys() == {"GET /a", "GET /b"} and abs(rates["GET /a"] - 20 / 60) < 1e-9 and abs(rates["GET /b"] - 10 / 60) < 1e-9, rates
    client = spm("calls", spanKind="client")
    assert abs(client["metrics"][0]["metricPoints"][0]["gaugeValue"]["doubleValue"] - 7 / 60) < 1e-9, client
    errors = spm("errors")
    assert errors["name"] == "service_error_rate"
    assert abs(errors["metrics"][0]["metricPoints"][0]["gaugeValue"]["doubleValue"] - 5 / 30) < 1e-9, errors
    # A quantile over the last step, in ms, as weft's own TraceQL metrics compute it over that
    # minute (an instant query: one step over exactly the range asked).
    lat = spm("latencies", quantile="0.5", step=60000, groupByOperation="true")
    assert lat["name"] == "service_operation_latencies"
    got = {next(l["value"] for l in m["labels"] if l["name"] == "operation"): m["metricPoints"][0]["gaugeValue"]["doubleValue"]
           for m in lat["metrics"]}
    own = requests.get(weft.api + "/api/metrics/query", timeout=30, params={
        "q": '{ resource.service.name = "web" && kind = server } | quantile_over_time(duration, 0.5) by (name)',
        "start": str((end_ms - 60_000) * 1_000_000), "end": str(end_ms * 1_000_000)}).json()
    want = {s["labels"][0]["value"]["stringValue"]: s["value"] * 1000 for s in own["series"]}
    assert got.keys() == want.keys() == {"GET /a", "GET /b"}, (got, want)
    assert all(abs(got[k] - want[k]) < 1e-6 for k in got), (got, want)
    assert 5 <= got["GET /a"] <= 20 and 4 <= got["GET /b"] <= 6, got
    # Jaeger's errors for what it cannot read.
    for figure, params, words in (("calls", {"service": ""}, "service"), ("latencies", {}, "quantile"),
                                  ("calls", {"spanKind": "sideways"}, "spanKind")):
        r = requests.get(f"{weft.jaeger}/api/metrics/{figure}", params={"service": "web", **params}, timeout=10)
        assert r.status_code == 400 and words in r.json()["errors"][0]["msg"], (figure, r.text)
