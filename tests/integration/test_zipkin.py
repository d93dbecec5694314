"""Zipkin clients work unchanged: the Zipkin receiver and the Zipkin v2 query API, checked
against the real Zipkin server (io.zipkin:zipkin-server, in-memory storage) fed the identical
bytes by a real Zipkin client (py_zipkin, in all four of its encodings).

Documented differences (spec/formats/zipkin.md, "Differences from Zipkin"), normalised before comparing:
- order: of traces in /api/v2/traces and of spans in a trace (Zipkin returns spans in arrival
  order; weft by start time), and of dependency links;
- nothing else: every field of every span must be equal.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from weftlib import REPO_ROOT, free_ports, peer_process, wait_for

ZIPKIN_JAR = REPO_ROOT / ".tools" / "zipkin" / "zipkin-server-3.5.1-exec.jar"


@pytest.fixture
def zipkin(tmp_path_factory):
    """The real Zipkin server on a free port (a fresh one per test: in-memory storage cannot be
    emptied), stopped after the test."""
    if not ZIPKIN_JAR.is_file():
        pytest.fail(f"{ZIPKIN_JAR} is missing: run scripts/test-deps.sh", pytrace=False)
    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("zipkin") / "zipkin.log"
    env = {**os.environ, "QUERY_PORT": str(port), "STORAGE_TYPE": "mem", "JAVA_OPTS": "-Xmx256m",
           "SELF_TRACING_ENABLED": "false", "COLLECTOR_ACTIVEMQ_ENABLED": "false"}
    url = f"http://127.0.0.1:{port}"
    with peer_process(["java", "-Xmx256m", "-jar", str(ZIPKIN_JAR)], log,
                      lambda: requests.get(f"{url}/health", timeout=1).status_code == 200,
                      "zipkin-server", env=env):
        yield url


@pytest.fixture
def weft(weft_factory):
    return weft_factory("--block-max-age", "1")


CONTENT_TYPES = {
    "V1_THRIFT": ("/api/v1/spans", "application/x-thrift"),
    "V1_JSON": ("/api/v1/spans", "application/json"),
    "V2_JSON": ("/api/v2/spans", "application/json"),
    "V2_PROTO3": ("/api/v2/spans", "application/x-protobuf"),
}


def post_both(urls, encoding: str, payload: bytes, *, compress: bool = False):
    path, ctype = CONTENT_TYPES[encoding]
    if isinstance(payload, str):
        payload = payload.encode()
    headers = {"Content-Type": ctype}
    body = payload
    if compress:
        body = gzip.compress(payload)
        headers["Content-Encoding"] = "gzip"
    for url in urls:
        r = requests.post(url + path, data=body, headers=headers, timeout=30)
        assert r.status_code == 202, f"{url}{path} ({encoding}): {r.status_code} {r.text}"


ZIPKIN_CORE_THRIFT = """
struct Endpoint { 1: i32 ipv4, 2: i16 port, 3: string service_name, 4: optional binary ipv6 }
struct Annotation { 1: i64 timestamp, 2: string value, 3: optional Endpoint host }
enum AnnotationType { BOOL, BYTES, I16, I32, I64, DOUBLE, STRING }
struct BinaryAnnotation { 1: string key, 2: binary value, 3: AnnotationType annotation_type,
  4: optional Endpoint host }
struct Span { 1: i64 trace_id, 3: string name, 4: i64 id, 5: optional i64 parent_id,
  6: list<Annotation> annotations, 8: list<BinaryAnnotation> binary_annotations,
  9: optional bool debug = 0, 10: optional i64 timestamp, 11: optional i64 duration,
  12: optional i64 trace_id_high }
"""


def v1_json_to_thrift(payload: bytes) -> bytes:
    """Re-encodes py_zipkin's v1 JSON spans as Zipkin v1 thrift (a TBinaryProtocol list<Span>,
    zipkinCore.thrift), with thriftpy2: py_zipkin 1.x no longer writes thrift itself."""
    import ipaddress
    import struct
    import tempfile

    import thriftpy2
    from thriftpy2.protocol.binary import TBinaryProtocol
    from thriftpy2.transport import TMemoryBuffer

    with tempfile.NamedTemporaryFile("w", suffix="_thrift.thrift", delete=False) as f:
        f.write(ZIPKIN_CORE_THRIFT)
    zc = thriftpy2.load(f.name, module_name="zipkincore_thrift")

    def i64(hexstr):
        return struct.unpack(">q", bytes.fromhex(hexstr.rjust(16, "0")))[0]

    def endpoint(e):
        if not e:
            return None
        v4 = e.get("ipv4")
        return zc.Endpoint(ipv4=struct.unpack(">i", ipaddress.IPv4Address(v4).packed)[0] if v4 else 0,
                           # Thrift's i16 is signed: ports above 32767 travel negative.
                           port=(e.get("port", 0) + 32768) % 65536 - 32768, service_name=e.get("serviceName", ""),
                           ipv6=ipaddress.IPv6Address(e["ipv6"]).packed if e.get("ipv6") else None)

    spans = []
    for s in json.loads(payload):
        tid = s["traceId"].rjust(32, "0")
        bins = []
        for b in s.get("binaryAnnotations", []):
            if isinstance(b["value"], bool):
                bins.append(zc.BinaryAnnotation(key=b["key"], value=b"\x01" if b["value"] else b"\x00",
                                                annotation_type=zc.AnnotationType.BOOL,
                                                host=endpoint(b.get("endpoint"))))
            else:
                bins.append(zc.BinaryAnnotation(key=b["key"], value=str(b["value"]).encode(),
                                                annotation_type=zc.AnnotationType.STRING,
                                                host=endpoint(b.get("endpoint"))))
        spans.append(zc.Span(
            trace_id=i64(tid[16:]), trace_id_high=i64(tid[:16]) or None, name=s.get("name", ""),
            id=i64(s["id"]), parent_id=i64(s["parentId"]) if s.get("parentId") else None,
            annotations=[zc.Annotation(timestamp=a["timestamp"], value=a["value"], host=endpoint(a.get("endpoint")))
                         for a in s.get("annotations", [])],
            binary_annotations=bins, timestamp=s.get("timestamp"), duration=s.get("duration")))
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    for sp in spans:
        proto.write_struct(sp)
    # The list header: element type STRUCT (12), then the count.
    return bytes([12]) + struct.pack(">i", len(spans)) + buf.getvalue()


def py_zipkin_traces(encoding: str, send) -> list[str]:
    """Records two traces with py_zipkin and hands every encoded batch to `send`. Returns
    their trace IDs. Trace 1: a server root in `gateway` with a local child span, an error, a
    client call to `users` (whose server side joins the client's span ID, as py_zipkin does for
    incoming B3 headers) and a client call to an uninstrumented `postgres`. Trace 2: a lone
    producer span."""
    from py_zipkin import Kind
    from py_zipkin.encoding import Encoding
    from py_zipkin.transport import BaseTransportHandler
    from py_zipkin.zipkin import ZipkinAttrs, zipkin_span, create_http_headers_for_new_span

    class Transport(BaseTransportHandler):
        def get_max_payload_bytes(self):
            return None

        def send(self, payload):
            if encoding == "V1_THRIFT":
                payload = v1_json_to_thrift(payload)
            send(payload)

    enc = Encoding["V1_JSON" if encoding == "V1_THRIFT" else encoding]
    t = Transport()
    ids = []
    with zipkin_span(service_name="gateway", span_name="GET /checkout", transport_handler=t,
                     sample_rate=100.0, encoding=enc, kind=Kind.SERVER, host="10.0.0.1", port=8080,
                     use_128bit_trace_id=(encoding.startswith("V2"))) as root:
        ids.append(root.zipkin_attrs.trace_id)
        root.update_binary_annotations({"http.method": "GET", "http.path": "/checkout"})
        with zipkin_span(service_name="gateway", span_name="render", annotations={"cache.miss": time.time()}):
            time.sleep(0.002)
        with zipkin_span(service_name="gateway", span_name="call users", kind=Kind.CLIENT) as client:
            client.add_sa_binary_annotation(port=9000, service_name="users", host="10.0.0.2")
            headers = create_http_headers_for_new_span()
            attrs = ZipkinAttrs(trace_id=headers["X-B3-TraceId"], span_id=headers["X-B3-SpanId"],
                                parent_span_id=headers["X-B3-ParentSpanId"], flags="0", is_sampled=True)
            with zipkin_span(service_name="users", span_name="GET /users/42", zipkin_attrs=attrs,
                             transport_handler=t, encoding=enc, kind=Kind.SERVER, host="10.0.0.2",
                             port=9000) as server:
                server.update_binary_annotations({"error": "user 42 is locked", "user.id": "42"})
                time.sleep(0.003)
        with zipkin_span(service_name="gateway", span_name="select order", kind=Kind.CLIENT) as db:
            db.add_sa_binary_annotation(port=5432, service_name="postgres", host="10.0.0.3")
            db.update_binary_annotations({"sql.query": "select * from orders where id = $1"})
    with zipkin_span(service_name="billing", span_name="publish invoice", transport_handler=t,
                     sample_rate=100.0, encoding=enc, kind=Kind.PRODUCER) as p:
        ids.append(p.zipkin_attrs.trace_id)
        p.add_sa_binary_annotation(port=9092, service_name="kafka", host="10.0.0.9")
    return ids


def span_count(url: str, tid: str) -> int:
    r = requests.get(f"{url}/api/v2/trace/{tid}", timeout=10)
    return len(r.json()) if r.status_code == 200 else 0


def span_key(s: dict):
    return (s.get("id"), s.get("kind", ""), bool(s.get("shared")))


def norm_trace(spans: list[dict]) -> list[dict]:
    return sorted(spans, key=span_key)


def norm_traces(traces: list[list[dict]]) -> list[list[dict]]:
    return sorted((norm_trace(t) for t in traces), key=lambda t: t[0]["traceId"])


def get_json(url: str, path: str, **params):
    r = requests.get(url + path, params=params, timeout=30)
    assert r.status_code == 200, f"{url}{path} {params}: {r.status_code} {r.text}"
    return r.json()


def compare(z: str, w: str, path: str, norm=lambda x: x, **params):
    a, b = norm(get_json(z, path, **params)), norm(get_json(w, path, **params))
    assert b == a, (f"{path} {params} differs\nzipkin: {json.dumps(a, sort_keys=True)}\n"
                    f"weft:   {json.dumps(b, sort_keys=True)}")
    return a


@pytest.mark.parametrize("encoding", ["V2_JSON", "V2_PROTO3", "V1_JSON", "V1_THRIFT"])
def test_py_zipkin_reads_back_as_from_the_real_zipkin(zipkin, weft, encoding):
    urls = [zipkin, weft.zipkin]
    ids = py_zipkin_traces(encoding, lambda payload: post_both(urls, encoding, payload,
                                                               compress=encoding == "V2_JSON"))
    now_ms = int(time.time() * 1000) + 1000
    for tid in ids:
        # Both must hold the whole trace (the real server indexes asynchronously too).
        wait_for(lambda: span_count(zipkin, tid) == span_count(weft.zipkin, tid) > 0,
                 15, f"trace {tid} in both servers")
        compare(zipkin, weft.zipkin, f"/api/v2/trace/{tid}", norm_trace)
    compare(zipkin, weft.zipkin, "/api/v2/traceMany", norm_traces, traceIds=",".join(ids))

    services = compare(zipkin, weft.zipkin, "/api/v2/services")
    assert {"gateway", "users", "billing"} <= set(services), services
    for svc in services:
        compare(zipkin, weft.zipkin, "/api/v2/spans", serviceName=svc)
        compare(zipkin, weft.zipkin, "/api/v2/remoteServices", serviceName=svc)

    searches = [
        {},
        {"serviceName": "gateway"},
        {"serviceName": "GATEWAY", "spanName": "render"},
        {"serviceName": "users", "annotationQuery": "error"},
        {"serviceName": "gateway", "annotationQuery": "http.method=GET and cache.miss"},
        {"annotationQuery": "http.method=POST"},
        {"serviceName": "gateway", "remoteServiceName": "postgres"},
        {"minDuration": "2000"},
        {"minDuration": "1", "maxDuration": "10"},
        {"spanName": "all", "limit": "1"},
        {"serviceName": "nobody"},
    ]
    for q in searches:
        found = compare(zipkin, weft.zipkin, "/api/v2/traces", norm_traces, endTs=now_ms, lookback=600000, **q)
        if q == {}:
            assert len(found) == 2, found

    deps = compare(zipkin, weft.zipkin, "/api/v2/dependencies",
                   lambda links: sorted(links, key=lambda l: (l["parent"], l["child"])),
                   endTs=now_ms, lookback=600000)
    assert {(l["parent"], l["child"]) for l in deps} >= {("gateway", "users"), ("gateway", "postgres")}, deps


def test_zipkin_spans_read_as_otlp_through_the_tempo_api(weft):
    """Zipkin in, Tempo out: the span tree, names, kinds, status and attributes, as the
    OpenTelemetry Collector's Zipkin receiver maps them."""
    ids = py_zipkin_traces("V2_JSON", lambda p: post_both([weft.zipkin], "V2_JSON", p))
    td = weft.fetch_trace(ids[0], protobuf=True)
    assert td is not None
    spans = {}
    for rs in td.resource_spans:
        svc = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans[s.name] = (svc, s)
    assert set(spans) == {"GET /checkout", "render", "call users", "GET /users/42", "select order"}
    svc, root = spans["GET /checkout"]
    assert svc == "gateway" and root.kind == 2 and not root.parent_span_id
    _, client = spans["call users"]
    svc, server = spans["GET /users/42"]
    assert svc == "users" and server.kind == 2
    # The server joined the client's span ID in Zipkin; in OTLP it is the client's child.
    assert server.parent_span_id == client.span_id and server.span_id != client.span_id
    assert server.status.code == 2 and server.status.message == "user 42 is locked"
    attrs = {a.key: a.value for a in client.attributes}
    assert attrs["peer.service"].string_value == "users"
    assert attrs["net.peer.port"].int_value == 9000
    _, render = spans["render"]
    assert [e.name for e in render.events] == ["cache.miss"]
    # Zipkin in, Jaeger out.
    j = requests.get(f"{weft.jaeger}/api/traces/{ids[0]}", timeout=10).json()["data"][0]
    ops = {s["operationName"]: s for s in j["spans"]}
    assert set(ops) == set(spans)
    users = ops["GET /users/42"]
    assert users["references"][0]["spanID"] == ops["call users"]["spanID"]
    assert {t["key"]: t["value"] for t in users["tags"]}["error"] is True


def test_bad_zipkin_input_gets_a_clear_error(weft):
    z = weft.zipkin
    cases = [
        ("/api/v2/spans", "application/json", b"{", 400, "malformed"),
        ("/api/v2/spans", "application/json", b'[{"traceId":"xyz","id":"1"}]', 400, "traceId"),
        ("/api/v2/spans", "application/json", b'[{"traceId":"1"}]', 400, "id is missing"),
        ("/api/v2/spans", "application/x-protobuf", b"\x0a\x05\x0a\x01", 400, "proto3"),
        ("/api/v1/spans", "application/x-thrift", b"\x0c\x00\x00\x00\x05", 400, "thrift"),
        # As in Zipkin, a body not declared protobuf (or thrift) is read as JSON.
        ("/api/v2/spans", "text/csv", b"a,b", 400, "malformed Zipkin JSON"),
    ]
    for path, ctype, body, status, words in cases:
        r = requests.post(z + path, data=body, headers={"Content-Type": ctype}, timeout=10)
        assert r.status_code == status and words in r.text, (path, ctype, r.status_code, r.text)
    r = requests.get(z + "/api/v2/trace/not-hex", timeout=10)
    assert r.status_code == 400, r.text
    r = requests.get(z + "/api/v2/trace/00000000000000aa", timeout=10)
    assert r.status_code == 404, r.text
    r = requests.get(z + "/api/v2/spans", timeout=10)
    assert r.status_code == 400 and "serviceName" in r.text
    r = requests.get(z + "/api/v2/traces", params={"minDuration": "0"}, timeout=10)
    assert r.status_code == 400 and "minDuration" in r.text
    weft.assert_alive()


def test_zipkin_tenancy(weft_factory):
    srv = weft_factory("--multitenancy")
    payload = json.dumps([{"traceId": "a1", "id": "b2", "name": "op", "timestamp": int(time.time() * 1e6),
                           "duration": 10, "localEndpoint": {"serviceName": "t"}}])
    r = requests.post(srv.zipkin + "/api/v2/spans", data=payload, headers={"Content-Type": "application/json"})
    assert r.status_code == 401, r.text
    r = requests.post(srv.zipkin + "/api/v2/spans", data=payload,
                      headers={"Content-Type": "application/json", "X-Scope-OrgID": "acme"})
    assert r.status_code == 202, r.text
    assert requests.get(srv.zipkin + "/api/v2/trace/a1", headers={"X-Scope-OrgID": "other"}).status_code == 404
    r = requests.get(srv.zipkin + "/api/v2/trace/a1", headers={"X-Scope-OrgID": "acme"})
    assert r.status_code == 200 and r.json()[0]["name"] == "op"


def test_shared_rpc_spans_match_the_real_zipkin(zipkin, weft):
    """The two shapes of a shared RPC span: v1 with `cs`/`sr`/`ss`/`cr` on one span (split in two
    by Zipkin's v1 rules), and v2 where the server joined the client's span ID
    (`"shared": true`, as Brave reports it). Both read back as Zipkin shows them, and link the
    services."""
    now = int(time.time() * 1_000_000)
    ep = lambda svc, ip, port=0: {"serviceName": svc, "ipv4": ip, **({"port": port} if port else {})}
    v1 = [{
        "traceId": "5af7183fb1d4cf5f", "id": "352bff9a74ca9ad2", "parentId": "6b221d5bc9e6496c",
        "name": "GET /api", "timestamp": now, "duration": 300,
        "annotations": [
            {"timestamp": now, "value": "cs", "endpoint": ep("web", "10.1.0.1")},
            {"timestamp": now + 50, "value": "sr", "endpoint": ep("api", "10.1.0.2", 80)},
            {"timestamp": now + 120, "value": "db.query", "endpoint": ep("api", "10.1.0.2", 80)},
            {"timestamp": now + 250, "value": "ss", "endpoint": ep("api", "10.1.0.2", 80)},
            {"timestamp": now + 300, "value": "cr", "endpoint": ep("web", "10.1.0.1")}],
        "binaryAnnotations": [
            {"key": "http.path", "value": "/api", "endpoint": ep("api", "10.1.0.2", 80)},
            {"key": "ca", "value": True, "endpoint": ep("web", "10.1.0.1", 51000)},
            {"key": "sa", "value": True, "endpoint": ep("api", "10.1.0.2", 80)}]},
        {"traceId": "5af7183fb1d4cf5f", "id": "6b221d5bc9e6496c", "name": "index", "timestamp": now - 100,
         "duration": 500, "annotations": [
             {"timestamp": now - 100, "value": "sr", "endpoint": ep("web", "10.1.0.1")},
             {"timestamp": now + 400, "value": "ss", "endpoint": ep("web", "10.1.0.1")}]}]
    v2 = [
        # The client's own parent makes the shared span one call, not two (found by Lens).
        {"traceId": "463ac35c9f6413ad48485a3953bb6124", "id": "c0c0c0c0c0c0c0c0", "kind": "SERVER",
         "name": "get /checkout", "timestamp": now - 50, "duration": 1000, "localEndpoint": ep("shop", "10.2.0.1")},
        {"traceId": "463ac35c9f6413ad48485a3953bb6124", "parentId": "c0c0c0c0c0c0c0c0", "id": "a2fb4a1d1a96d312",
         "kind": "CLIENT",
         "name": "post /orders", "timestamp": now, "duration": 900, "localEndpoint": ep("shop", "10.2.0.1"),
         "remoteEndpoint": ep("orders", "10.2.0.2", 8080), "tags": {"http.method": "POST"}},
        {"traceId": "463ac35c9f6413ad48485a3953bb6124", "id": "a2fb4a1d1a96d312", "kind": "SERVER",
         "name": "post /orders", "timestamp": now + 100, "duration": 700, "shared": True,
         "localEndpoint": ep("orders", "10.2.0.2", 8080), "remoteEndpoint": ep("shop", "10.2.0.1", 40000),
         "tags": {"error": "out of stock"}, "annotations": [{"timestamp": now + 200, "value": "reserved"}]},
        {"traceId": "463ac35c9f6413ad48485a3953bb6124", "parentId": "a2fb4a1d1a96d312",
         "id": "b7ad6b7169203331", "kind": "PRODUCER", "name": "send", "timestamp": now + 300,
         "duration": 20, "localEndpoint": ep("orders", "10.2.0.2"), "remoteEndpoint": ep("kafka", "10.2.0.9", 9092)},
        {"traceId": "463ac35c9f6413ad48485a3953bb6124", "parentId": "a2fb4a1d1a96d312",
         "id": "d1d1d1d1d1d1d1d1", "kind": "CLIENT", "name": "get /stock", "timestamp": now + 400,
         "duration": 30, "localEndpoint": ep("orders", "10.2.0.2"), "remoteEndpoint": ep("stock", "10.2.0.7", 80)},
        # The same, from the server side's own endpoint: Zipkin hangs it under the server side.
        {"traceId": "463ac35c9f6413ad48485a3953bb6124", "parentId": "a2fb4a1d1a96d312",
         "id": "e1e1e1e1e1e1e1e1", "kind": "CLIENT", "name": "get /price", "timestamp": now + 450,
         "duration": 30, "localEndpoint": ep("orders", "10.2.0.2", 8080),
         "remoteEndpoint": ep("pricing", "10.2.0.8", 80)}]
    post_both([zipkin, weft.zipkin], "V1_JSON", json.dumps(v1).encode())
    post_both([zipkin, weft.zipkin], "V2_JSON", json.dumps(v2).encode(), compress=True)
    for tid, n in (("5af7183fb1d4cf5f", 3), ("463ac35c9f6413ad48485a3953bb6124", 6)):
        wait_for(lambda: span_count(zipkin, tid) == span_count(weft.zipkin, tid) == n, 15, f"trace {tid}")
        compare(zipkin, weft.zipkin, f"/api/v2/trace/{tid}", norm_trace)
    end = now // 1000 + 1000
    for q in ({"serviceName": "api"}, {"serviceName": "orders", "annotationQuery": "error and reserved"},
              {"remoteServiceName": "orders"}, {"spanName": "get /api", "minDuration": "200"}):
        found = compare(zipkin, weft.zipkin, "/api/v2/traces", norm_traces, endTs=end, lookback=60000, **q)
        assert len(found) == 1, (q, found)
    deps = compare(zipkin, weft.zipkin, "/api/v2/dependencies",
                   lambda links: sorted(links, key=lambda l: (l["parent"], l["child"])), endTs=end, lookback=60000)
    assert {(l["parent"], l["child"]) for l in deps} == {("web", "api"), ("shop", "orders"), ("orders", "kafka"),
                                                         ("orders", "stock"), ("orders", "pricing")}, deps
    # Lens asks with an empty serviceName when its service filter is removed: no names, not an
    # error. Without the parameter, both refuse.
    for path in ("/api/v2/spans", "/api/v2/remoteServices"):
        assert compare(zipkin, weft.zipkin, path, serviceName="") == [], path
        codes = [requests.get(base + path, timeout=10).status_code for base in (zipkin, weft.zipkin)]
        assert codes == [400, 400], (path, codes)


def test_otlp_spans_read_through_zipkin_as_the_real_zipkin_shows_them(zipkin, weft):
    """OTLP in, Zipkin out: one OpenTelemetry SDK trace exported over OTLP to weft and with the
    OpenTelemetry Zipkin exporter to the real Zipkin; weft's Zipkin API shows it as Zipkin does,
    up to the differences documented in spec/formats/zipkin.md, where weft follows the Collector's
    Zipkin exporter: `peer.service` becomes the remote endpoint; internal spans are tagged
    `span.kind: internal`; status ERROR is the `error` tag alone; no `service.name` tag (it is
    the local endpoint); no `debug` flag (OTLP has none); scope and SDK tags; JSON spacing."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.exporter.zipkin.json import ZipkinExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind, Status, StatusCode

    provider = TracerProvider(resource=Resource.create({"service.name": "Checkout"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=weft.otlp_url)))
    provider.add_span_processor(SimpleSpanProcessor(ZipkinExporter(endpoint=f"{zipkin}/api/v2/spans")))
    tracer = provider.get_tracer("shop")
    with tracer.start_as_current_span("POST /pay", kind=SpanKind.SERVER) as root:
        root.set_attribute("http.method", "POST")
        root.set_attribute("retries", 2)
        root.add_event("validated", {"card": "visa"})
        with tracer.start_as_current_span("charge", kind=SpanKind.CLIENT) as c:
            c.set_attribute("peer.service", "bank")
            c.set_status(Status(StatusCode.ERROR, "declined"))
        with tracer.start_as_current_span("audit"):
            pass
        tid = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    wait_for(lambda: span_count(zipkin, tid) == span_count(weft.zipkin, tid) == 3, 15, "the trace in both")

    def documented(spans):
        for s in spans:
            s.pop("debug", None)
            tags = s.get("tags", {})
            for k in [k for k in tags if k.startswith(("otel.library.", "otel.scope.", "telemetry.sdk."))]:
                del tags[k]
            tags.pop("service.name", None)
            if tags.get("otel.status_code") == "ERROR":
                del tags["otel.status_code"]
            if tags.get("span.kind") == "internal":
                del tags["span.kind"]
            if "peer.service" in tags:
                s["remoteEndpoint"] = {"serviceName": tags.pop("peer.service").lower()}
            if not tags:
                s.pop("tags", None)
            for a in s.get("annotations", []):
                try:
                    a["value"] = json.loads(a["value"])
                except ValueError:
                    pass
        return norm_trace(spans)

    compare(zipkin, weft.zipkin, f"/api/v2/trace/{tid}", documented)


LEGACY_PY = REPO_ROOT / ".venv-jaeger" / "bin" / "python"


def test_otel_zipkin_protobuf_exporter_reads_back_as_from_the_real_zipkin(zipkin, weft):
    """The OpenTelemetry Zipkin exporter in its protobuf form (Python's
    `opentelemetry-exporter-zipkin-proto-http`, which needs protobuf 3 and so runs in
    .venv-jaeger) sends one SDK trace to both servers: a server span with attributes of every
    type and an event, and a failing client child with `peer.service`."""
    if not LEGACY_PY.is_file():
        pytest.fail(f"{LEGACY_PY} is missing: run scripts/test-deps.sh", pytrace=False)
    tid = report_to_both([str(LEGACY_PY), str(REPO_ROOT / "tests" / "integration" / "jaeger_clients.py"),
                          "otel-zipkin-proto"], zipkin, weft, 2)
    spans = compare(zipkin, weft.zipkin, f"/api/v2/trace/{tid}", norm_trace)
    root = next(s for s in spans if "parentId" not in s)
    child = next(s for s in spans if "parentId" in s)
    assert root["kind"] == "SERVER" and root["localEndpoint"]["serviceName"] == "shop-otel-zipkin-proto", root
    assert {root["tags"][k] for k in ("http.method", "items", "ratio", "cached")} == {"POST", "3", "0.5", "true"}
    assert [a["value"] for a in root["annotations"]] == ['{"validated": {"rule": "max-items"}}'], root
    # The exporter's tags as sent: `peer.service` a tag (no remote endpoint), the status twice,
    # the scope in both spellings, and its `debug` flag.
    assert "remoteEndpoint" not in child and child["debug"] is True, child
    assert {k: child["tags"].get(k) for k in ("peer.service", "error", "otel.status_code", "otel.library.name")} == {
        "peer.service": "postgres", "error": "deadlock", "otel.status_code": "ERROR",
        "otel.library.name": "shop.instrumentation"}, child
    end = int(time.time() * 1000) + 1000
    for q in ({"serviceName": "shop-otel-zipkin-proto"}, {"spanName": "insert cart"},
              {"annotationQuery": "error and items=3"}, {"annotationQuery": "peer.service=postgres"}):
        found = compare(zipkin, weft.zipkin, "/api/v2/traces", norm_traces, endTs=end, lookback=60000, **q)
        assert len(found) == 1, (q, found)
    assert compare(zipkin, weft.zipkin, "/api/v2/remoteServices", serviceName="shop-otel-zipkin-proto") == []
    assert compare(zipkin, weft.zipkin, "/api/v2/dependencies", endTs=end, lookback=60000) == []
    # With a remote endpoint as well (as other exporters send it), that endpoint is the remote
    # service, and the tag stays a tag.
    now_us = int(time.time() * 1e6)
    post_both([zipkin, weft.zipkin], "V2_JSON", json.dumps([{
        "traceId": "5e1f0000000000000000000000000001", "id": "5e1f000000000001", "kind": "CLIENT",
        "name": "get", "timestamp": now_us, "duration": 15, "debug": True,
        "localEndpoint": {"serviceName": "shop-otel-zipkin-proto"},
        "remoteEndpoint": {"serviceName": "redis", "port": 6379},
        "tags": {"peer.service": "Redis-Main", "otel.status_code": "ERROR", "error": "timeout"}}]))
    wait_for(lambda: span_count(zipkin, "5e1f0000000000000000000000000001")
             == span_count(weft.zipkin, "5e1f0000000000000000000000000001") == 1, 20, "the span in both")
    compare(zipkin, weft.zipkin, "/api/v2/trace/5e1f0000000000000000000000000001", norm_trace)
    assert compare(zipkin, weft.zipkin, "/api/v2/remoteServices", serviceName="shop-otel-zipkin-proto") == ["redis"]
    # In OTLP (Tempo's API) the Collector's mapping: scope, status and `peer.service` as fields.
    td = weft.fetch_trace(tid, protobuf=True)
    (ss,) = [ss for rs in td.resource_spans for ss in rs.scope_spans]
    assert (ss.scope.name, ss.scope.version) == ("shop.instrumentation", "2.1")
    failed = next(s for s in ss.spans if s.name == "INSERT cart")
    assert (failed.status.code, failed.status.message) == (2, "deadlock")
    attrs = {a.key: a.value.string_value for a in failed.attributes}
    assert attrs["peer.service"] == "postgres" and "otel.status_code" not in attrs, attrs
    # weft's note for the Zipkin API (what gave `debug` and the tags back above) is no
    # attribute through the other APIs: not in Tempo's trace, its JSON, its tag names or Jaeger's.
    assert "zipkin.original" not in attrs, attrs
    as_json = weft.get(f"/api/v2/traces/{tid}")
    assert as_json.status_code == 200 and "INSERT cart" in as_json.text
    assert "zipkin.original" not in as_json.text
    names = weft.get("/api/v2/search/tags", params={"scope": "span"}).json()
    assert "peer.service" in names["scopes"][0]["tags"] and "zipkin.original" not in names["scopes"][0]["tags"], names
    j = requests.get(f"{weft.jaeger}/api/traces/{tid}", timeout=10).json()["data"][0]
    tags = {t["key"] for s in j["spans"] for t in s["tags"]}
    assert "peer.service" in tags and "zipkin.original" not in tags, tags
    v3 = requests.get(f"{weft.jaeger}/api/v3/traces/{tid}", timeout=10)
    assert v3.status_code == 200 and "INSERT cart" in v3.text and "zipkin.original" not in v3.text


BRAVE_DIR = REPO_ROOT / "tests" / "zipkin-brave"


def report_to_both(command: list[str], zipkin: str, weft, spans: int) -> str:
    """Runs a client `command` with both servers' span endpoints appended; it prints the trace
    ID. Returns it once both servers hold the trace's `spans` spans."""
    out = subprocess.run([*command, f"{zipkin}/api/v2/spans", f"{weft.zipkin}/api/v2/spans"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    tid = out.stdout.strip().splitlines()[-1]
    wait_for(lambda: span_count(zipkin, tid) == span_count(weft.zipkin, tid) == spans, 20, f"trace {tid} in both")
    return tid


def java_client(main_class: str) -> list[str]:
    """The command that runs a main class of tests/zipkin-brave (built by scripts/test-deps.sh)."""
    cp_file = BRAVE_DIR / "target" / "classpath.txt"
    if not cp_file.is_file():
        pytest.fail(f"{cp_file} is missing: run scripts/test-deps.sh", pytrace=False)
    return ["java", "-cp", f"{BRAVE_DIR / 'target' / 'classes'}:{cp_file.read_text().strip()}", main_class]


def compare_exporter_trace(zipkin: str, weft, tid: str, service: str) -> list[dict]:
    """The trace every OpenTelemetry exporter client here sends (a server root with attributes
    of every type and an event, a failing client child with `peer.service`, an internal span),
    read through both servers' API: the trace, queries, remote services and dependency links."""
    spans = compare(zipkin, weft.zipkin, f"/api/v2/trace/{tid}", norm_trace)
    db = next(s for s in spans if s["name"] == "insert cart")
    assert (db["tags"]["peer.service"], db["tags"]["error"]) == ("postgres", "deadlock"), db
    end = int(time.time() * 1000) + 1000
    for q in ({"serviceName": service}, {"spanName": "render"}, {"annotationQuery": "error and items=3"}):
        found = compare(zipkin, weft.zipkin, "/api/v2/traces", norm_traces, endTs=end, lookback=60000, **q)
        assert len(found) == 1, (q, found)
    compare(zipkin, weft.zipkin, "/api/v2/remoteServices", serviceName=service)
    compare(zipkin, weft.zipkin, "/api/v2/dependencies",
            lambda links: sorted(links, key=lambda l: (l["parent"], l["child"])), endTs=end, lookback=60000)
    return spans


@pytest.mark.parametrize("encoding", ["JSON", "PROTO3"])
def test_otel_java_zipkin_exporter_reads_back_as_from_the_real_zipkin(zipkin, weft, encoding):
    """The OpenTelemetry Java SDK's Zipkin exporter (`opentelemetry-exporter-zipkin` 1.59.0,
    its last release) sends the exporters' trace to both servers."""
    tid = report_to_both([*java_client("weft.brave.OtelZipkin"), encoding], zipkin, weft, 3)
    compare_exporter_trace(zipkin, weft, tid, "shop-java")


def test_otel_js_zipkin_exporter_reads_back_as_from_the_real_zipkin(zipkin, weft):
    """The OpenTelemetry JS SDK's Zipkin exporter (`@opentelemetry/exporter-zipkin`, in
    tests/zipkin-js) sends the exporters' trace to both servers. It writes `peer.service` as a
    tag without a remote endpoint, so Zipkin shows no remote service and no dependency link."""
    js = REPO_ROOT / "tests" / "zipkin-js"
    if not (js / "node_modules" / "@opentelemetry" / "exporter-zipkin").is_dir():
        pytest.fail(f"{js}/node_modules is missing: run scripts/test-deps.sh", pytrace=False)
    tid = report_to_both(["node", str(js / "report.mjs")], zipkin, weft, 3)
    spans = compare_exporter_trace(zipkin, weft, tid, "shop-js")
    db = next(s for s in spans if s["name"] == "insert cart")
    assert db["tags"]["otel.status_code"] == "ERROR" and "remoteEndpoint" not in db, db
    end = int(time.time() * 1000) + 1000
    assert compare(zipkin, weft.zipkin, "/api/v2/remoteServices", serviceName="shop-js") == []
    assert compare(zipkin, weft.zipkin, "/api/v2/dependencies", endTs=end, lookback=60000) == []


@pytest.mark.parametrize("encoding", ["JSON", "PROTO3"])
def test_brave_reads_back_as_from_the_real_zipkin(zipkin, weft, encoding):
    """Brave (io.zipkin.brave 6 with zipkin-reporter's URLConnection sender) reports one trace,
    including a server span that joined its client's span ID, to both servers at once."""
    tid = report_to_both([*java_client("weft.brave.Report"), encoding], zipkin, weft, 5)
    spans = compare(zipkin, weft.zipkin, f"/api/v2/trace/{tid}", norm_trace)
    assert any(s.get("shared") for s in spans), spans
    end = int(time.time() * 1000) + 1000
    for q in ({"serviceName": "users"}, {"serviceName": "gateway", "annotationQuery": "error"},
              {"remoteServiceName": "postgres"}, {"annotationQuery": "auth.checked and http.method=GET"}):
        found = compare(zipkin, weft.zipkin, "/api/v2/traces", norm_traces, endTs=end, lookback=60000, **q)
        assert len(found) == 1, (q, found)
    deps = compare(zipkin, weft.zipkin, "/api/v2/dependencies",
                   lambda links: sorted(links, key=lambda l: (l["parent"], l["child"])), endTs=end, lookback=60000)
    assert {(l["parent"], l["child"]) for l in deps} == {("gateway", "users"), ("gateway", "postgres")}, deps
    # In OTLP (Tempo's API) the joined server span is the client span's child, with its own ID.
    td = weft.fetch_trace(tid, protobuf=True)
    by_name = {}
    for rs in td.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                by_name.setdefault(s.name, []).append(s)
    client, server = sorted(by_name["GET /users/{id}"], key=lambda s: s.kind, reverse=True)
    assert (client.kind, server.kind) == (3, 2)
    assert server.parent_span_id == client.span_id != server.span_id


def test_a_zipkin_search_finds_every_spelling_of_a_service_in_blocks_and_recent_spans(weft_factory):
    """Zipkin's service names are lower case; weft keeps the case spans were sent with, so a
    search reads every stored spelling. The spellings of a block are read once and kept: a
    spelling first seen in recent spans, or in a block written later, is still found."""
    from otlpdata import make_request, make_span, new_span_id, new_trace_id
    from weftlib import wait_for_block_spans

    w = weft_factory("--block-max-age", "0.5")
    now = time.time_ns()

    def send(service: str, n: int) -> set:
        ids = set()
        for i in range(n):
            tid = new_trace_id()
            ids.add(tid.hex())
            w.send(make_request([make_span(tid, new_span_id(), name="pay", start=now - (10 - i) * 10**9,
                                           end=now - (10 - i) * 10**9 + 10**6)], service=service))
        return ids

    def found() -> set:
        r = requests.get(f"{w.zipkin}/api/v2/traces", params={"serviceName": "checkout", "limit": "100"}, timeout=30)
        assert r.status_code == 200, r.text
        return {t[0]["traceId"] for t in r.json()}

    first = send("Checkout", 3)
    wait_for_block_spans(w, 3)
    assert found() == first, "a spelling in a block"
    second = send("CHECKOUT", 2)
    assert found() == first | second, "a new spelling in recent spans, beside a block read before"
    wait_for_block_spans(w, 5)
    third = send("checkOut", 1)
    wait_for_block_spans(w, 6)
    assert found() == first | second | third, "a spelling in a block written after the first search"
    assert requests.get(f"{w.zipkin}/api/v2/traces", params={"serviceName": "nobody"}, timeout=30).json() == []
