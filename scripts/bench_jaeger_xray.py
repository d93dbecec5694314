#!/usr/bin/env python3
"""Jaeger and X-Ray ingest: spans per CPU-second of the server, weft beside the real Jaeger v2.

Jaeger thrift over HTTP. The same Jaeger `Batch` structs (thrift binary protocol, 200 spans per
request: 20 traces of 10 spans from one service, as a Jaeger client's reporter sends one
process's spans; `span.kind` server/client, three http tags, an int tag, `peer.service` on
client spans, a log on every fifth span; requests rotate among 4 services) are posted to
`POST /api/traces` (`Content-Type: application/x-thrift`) by several client processes for
--seconds to:
  - weft's Jaeger collector port (durable: 202 after the WAL's fsync),
  - the real Jaeger v2 (.tools/jaeger-bin/jaeger, its `jaeger` receiver's thrift_http protocol
    into its in-memory storage, which stores nothing durably; 200),
  - weft's OTLP/HTTP receiver, with the same spans as OTLP protobuf, written as weft's Jaeger
    conversion writes them (weft's own OTLP figure).

X-Ray daemon protocol over UDP. Datagrams `{"format":"json","version":1}\\n` + one segment
document (an EC2 service's segment with http, annotations, metadata and aws fields, and 4
subsegments: two remote HTTP calls, a DynamoDB call, a local one; 5 spans) are sent to weft's
--xray-port by several sender processes at a paced rate (--xray-rate datagrams/s in all; by
default 80% of the highest rate weft keeps up with, found by a ramp of 2 s steps before the
rounds, which also warms weft up). UDP carries no acknowledgement and no back-pressure, so the
numerator is the spans weft made durable (`weft_udp_spans_accepted_total{port="xray"}`, from
/metrics after the window); datagrams lost in the kernel (the socket's drop count in
/proc/net/udp) or refused by weft (`weft_udp_datagrams_refused_total{port="xray",reason=parse|
overloaded|refused}`) are reported. Beside it, weft's OTLP/HTTP receiver takes the same spans as
OTLP, driven as fast as it acknowledges, twice: 40 segments (200 spans) of one service per
request, as a batching OpenTelemetry SDK would send them, and one segment (5 spans) per request,
as the datagrams carry them (attributes as weft's X-Ray conversion writes them). There is no
X-Ray server to compare with: AWS's X-Ray daemon only forwards segments to the X-Ray service.

Every request carries fresh trace IDs (the bodies are templates whose trace IDs are rewritten
per request), so that an in-memory store keeps at most its limit of traces instead of growing
one trace without bound. Each server's CPU time (utime+stime of its process) over the measured
window (the clients' --seconds and 1 s for acknowledged work to finish), divided into the spans
it acknowledged (for X-Ray: made durable), gives spans per CPU-second; the ratios between them
are reported (the host's speed drift cancels out of a ratio). All servers run at once and take
the load in turn, --rounds times; the median of the rounds' ratios is reported, and beside it the
ratio of pooled figures (each server's spans over its CPU summed across all its rounds, which a
collector's cycles falling in some windows and not others do not move). Every server first
takes a warm-up load of --warmup seconds (60), unmeasured. After every run the last trace each client sent is
read back from the server that took it (weft's Tempo API, Jaeger's query API) and must hold all
its spans (over UDP, one of the senders' last traces: any datagram may be lost). Every weft runs
with compaction off (--compaction-interval 0): its 30 s cycle would land inside some servers'
windows and not others'; blocks are still cut and written during the load, and compaction's
cost per span is measured all-in by bench_allin.py. Results as JSON on stdout and in --out.
"""
import argparse, collections, http.client, json, multiprocessing as mp, os, random, re, shutil, signal, socket, struct
import subprocess, sys, tempfile, time, urllib.error, urllib.request

from benchlib import cpu_seconds, emit, free_port, fresh, template, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAEGER_BIN = os.path.join(ROOT, ".tools", "jaeger-bin", "jaeger")
SPANS_PER_REQUEST = 200
TRACES_PER_REQUEST = 20
SPANS_PER_TRACE = SPANS_PER_REQUEST // TRACES_PER_REQUEST
XRAY_SPANS_PER_DATAGRAM = 5  # a segment and 4 subsegments
XRAY_SEGMENTS_PER_OTLP_REQUEST = SPANS_PER_REQUEST // XRAY_SPANS_PER_DATAGRAM
SERVICES = ["frontend", "checkout", "payments", "inventory"]
XRAY_HEADER = b'{"format":"json","version":1}\n'

# Jaeger v2's configuration, shared with tests/integration/test_jaeger.py.
JAEGER_CONFIG = open(os.path.join(ROOT, "tests", "jaeger-v2.yaml")).read()


# --- Thrift binary protocol (big-endian; what Jaeger clients post to /api/traces) ------------

T_BOOL, T_DOUBLE, T_I32, T_I64, T_STRING, T_STRUCT, T_LIST = 2, 4, 8, 10, 11, 12, 15
TAG_STRING, TAG_DOUBLE, TAG_BOOL, TAG_LONG, TAG_BINARY = 0, 1, 2, 3, 4


class Thrift:
    def __init__(self):
        self.b = bytearray()

    def field(self, ty, fid):
        self.b += struct.pack(">bh", ty, fid)

    def stop(self):
        self.b.append(0)

    def i32(self, fid, v):
        self.field(T_I32, fid)
        self.b += struct.pack(">i", v)

    def i64(self, fid, v):
        self.field(T_I64, fid)
        self.b += struct.pack(">q", v - (1 << 64) if v >= 1 << 63 else v)

    def double(self, fid, v):
        self.field(T_DOUBLE, fid)
        self.b += struct.pack(">d", v)

    def bool(self, fid, v):
        self.field(T_BOOL, fid)
        self.b.append(1 if v else 0)

    def string(self, fid, v):
        if isinstance(v, str):
            v = v.encode()
        self.field(T_STRING, fid)
        self.b += struct.pack(">i", len(v)) + v

    def list(self, fid, elem_ty, n):
        self.field(T_LIST, fid)
        self.b += struct.pack(">bi", elem_ty, n)


def thrift_tags(w, fid, tags):
    """list<Tag>; a tag is (key, value): str is STRING, bool BOOL, int LONG, float DOUBLE."""
    w.list(fid, T_STRUCT, len(tags))
    for k, v in tags:
        w.string(1, k)
        if isinstance(v, bool):
            w.i32(2, TAG_BOOL)
            w.bool(5, v)
        elif isinstance(v, int):
            w.i32(2, TAG_LONG)
            w.i64(6, v)
        elif isinstance(v, float):
            w.i32(2, TAG_DOUBLE)
            w.double(4, v)
        else:
            w.i32(2, TAG_STRING)
            w.string(3, v)
        w.stop()


def jaeger_thrift(batch):
    """One jaeger.thrift Batch{1: Process, 2: list<Span>} in the binary protocol."""
    w = Thrift()
    w.field(T_STRUCT, 1)  # Process{1: serviceName, 2: tags}
    w.string(1, batch["service"])
    thrift_tags(w, 2, batch["process_tags"])
    w.stop()
    w.list(2, T_STRUCT, len(batch["spans"]))
    for s in batch["spans"]:
        w.i64(1, int.from_bytes(s["trace_id"][8:], "big"))  # traceIdLow
        w.i64(2, int.from_bytes(s["trace_id"][:8], "big"))  # traceIdHigh
        w.i64(3, int.from_bytes(s["span_id"], "big"))
        w.i64(4, int.from_bytes(s["parent_id"], "big") if s["parent_id"] else 0)
        w.string(5, s["name"])
        w.i32(7, 1)  # flags: sampled
        w.i64(8, s["start_us"])
        w.i64(9, s["duration_us"])
        thrift_tags(w, 10, s["tags"])
        if s["logs"]:
            w.list(11, T_STRUCT, len(s["logs"]))
            for ts, fields in s["logs"]:
                w.i64(1, ts)
                thrift_tags(w, 2, fields)
                w.stop()
        w.stop()
    w.stop()
    return bytes(w.b)


def jaeger_batch(rng, now_us, service):
    """One request's spans: 20 traces of 10 spans of one service (a Jaeger batch has one process)."""
    n = SERVICES.index(service)
    spans = []
    for _ in range(TRACES_PER_REQUEST):
        tid = rng.getrandbits(128).to_bytes(16, "big")
        root = rng.getrandbits(64).to_bytes(8, "big")
        for i in range(SPANS_PER_TRACE):
            sid = root if i == 0 else rng.getrandbits(64).to_bytes(8, "big")
            tags = [("span.kind", "server" if i % 2 == 0 else "client"), ("http.method", "GET"),
                    ("http.path", f"/api/v1/resource/{i}"), ("http.status_code", "200"), ("net.host.port", 8080)]
            if i % 2:
                tags.append(("peer.service", SERVICES[(n + 1 + i) % 4]))
            logs = [(now_us + i * 100 + 10, [("event", "wire.send")])] if i % 5 == 0 else []
            spans.append({"trace_id": tid, "span_id": sid, "parent_id": root if i else None,
                          "name": f"GET /api/v1/resource/{i}", "start_us": now_us + i * 100,
                          "duration_us": 900 - i * 50, "tags": tags, "logs": logs})
    return {"service": service, "spans": spans,
            "process_tags": [("hostname", f"{service}-7d9f8b6c4-x2k8p"), ("ip", "10.0.0.%d" % (n + 1)),
                             ("jaeger.version", "Go-2.30.0")]}


def any_value(v):
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(string_value=v)


def kv(k, v):
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue
    return KeyValue(key=k, value=any_value(v))


def otlp_from_jaeger(batch):
    """The same spans as an OTLP request, as weft's Jaeger conversion writes them: the process is
    the resource (hostname as host.name, jaeger.version as opencensus.exporterversion), span.kind
    is the kind, the other tags attributes, logs events named by their `event` field."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(kv("service.name", batch["service"]))
    for k, v in batch["process_tags"]:
        if k == "hostname":
            rs.resource.attributes.append(kv("host.name", v))
        elif k == "jaeger.version":
            rs.resource.attributes.append(kv("opencensus.exporterversion", "Jaeger-" + v))
        else:
            rs.resource.attributes.append(kv(k, v))
    ss = rs.scope_spans.add()
    for s in batch["spans"]:
        o = ss.spans.add()
        o.trace_id, o.span_id = s["trace_id"], s["span_id"]
        if s["parent_id"]:
            o.parent_span_id = s["parent_id"]
        o.name = s["name"]
        o.start_time_unix_nano = s["start_us"] * 1000
        o.end_time_unix_nano = (s["start_us"] + s["duration_us"]) * 1000
        for k, v in s["tags"]:
            if k == "span.kind":
                o.kind = 2 if v == "server" else 3
            else:
                o.attributes.append(kv(k, v))
        for ts, fields in s["logs"]:
            e = o.events.add()
            e.time_unix_nano = ts * 1000
            e.name = dict(fields).get("event", "")
            for k, v in fields:
                if k != "event":
                    e.attributes.append(kv(k, v))
    return req.SerializeToString()


# --- X-Ray --------------------------------------------------------------------------------------

def xray_segment(rng, now_s, service):
    """One segment document (5 spans): an EC2 service's request, with two remote HTTP calls, a
    DynamoDB call and a local subsegment, as the X-Ray SDKs write them."""
    n = SERVICES.index(service)
    tid = "1-%08x-%024x" % (int(now_s), rng.getrandbits(96))
    hexid = lambda: "%016x" % (rng.getrandbits(64) | 1)
    t0 = round(now_s + rng.random(), 6)
    at = lambda ms: round(t0 + ms / 1000, 6)
    i = rng.randrange(10)
    seg = {
        "name": service, "id": hexid(), "trace_id": tid, "start_time": t0, "end_time": at(48),
        "origin": "AWS::EC2::Instance",
        "http": {"request": {"method": "GET", "url": f"https://{service}.example.com/api/v1/resource/{i}",
                             "client_ip": "10.0.2.%d" % (i + 1), "user_agent": "Mozilla/5.0"},
                 "response": {"status": 200, "content_length": 512}},
        "annotations": {"customer_tier": "gold", "items": i, "region": "eu-west-1"},
        "metadata": {"default": {"cart": {"size": i, "currency": "EUR"}}},
        "aws": {"xray": {"sdk": "X-Ray for Python", "sdk_version": "2.15.0"},
                "ec2": {"instance_id": "i-0%015x" % (n + 1), "availability_zone": "eu-west-1a"}},
        "subsegments": [
            {"name": SERVICES[(n + 1) % 4], "id": hexid(), "start_time": at(2), "end_time": at(14),
             "namespace": "remote",
             "http": {"request": {"method": "GET", "url": f"http://{SERVICES[(n + 1) % 4]}/items/{i}"},
                      "response": {"status": 200}}},
            {"name": "DynamoDB", "id": hexid(), "start_time": at(15), "end_time": at(22), "namespace": "aws",
             "aws": {"operation": "GetItem", "region": "eu-west-1", "table_name": "carts",
                     "request_id": "%032X" % rng.getrandbits(128)},
             "http": {"response": {"status": 200}}},
            {"name": "render", "id": hexid(), "start_time": at(23), "end_time": at(30),
             "annotations": {"template": "cart"}},
            {"name": SERVICES[(n + 2) % 4], "id": hexid(), "start_time": at(31), "end_time": at(46),
             "namespace": "remote",
             "http": {"request": {"method": "POST", "url": f"http://{SERVICES[(n + 2) % 4]}/charge"},
                      "response": {"status": 200}}},
        ],
    }
    return seg


def xray_datagram(seg):
    return XRAY_HEADER + json.dumps(seg, separators=(",", ":")).encode()


def otlp_from_xray(segs):
    """Segments of one service as one OTLP request: one span per segment and subsegment, the
    attributes as weft's X-Ray conversion writes them (the resource from the segment: service.name,
    cloud.*, host.id, telemetry.sdk.*; http.*, aws.*, annotations as attributes, metadata as
    aws.xray.metadata.<namespace> JSON text; SERVER for the segment, CLIENT for remote/aws
    subsegments, INTERNAL for the others)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    s0 = segs[0]
    for k, v in [("service.name", s0["name"]), ("cloud.provider", "aws"),
                 ("telemetry.sdk.name", s0["aws"]["xray"]["sdk"]),
                 ("telemetry.sdk.version", s0["aws"]["xray"]["sdk_version"]),
                 ("host.id", s0["aws"]["ec2"]["instance_id"]),
                 ("cloud.availability_zone", s0["aws"]["ec2"]["availability_zone"]), ("cloud.platform", "aws_ec2")]:
        rs.resource.attributes.append(kv(k, v))
    ss = rs.scope_spans.add()
    ns = lambda t: int(round(t * 1e6)) * 1000

    def add(m, tid, parent, segment):
        o = ss.spans.add()
        o.trace_id, o.span_id = tid, bytes.fromhex(m["id"])
        if parent:
            o.parent_span_id = parent
        o.name = m["name"]
        space = m.get("namespace")
        o.kind = 2 if segment else 3 if space in ("remote", "aws") else 1
        o.start_time_unix_nano, o.end_time_unix_nano = ns(m["start_time"]), ns(m["end_time"])
        if space:
            o.attributes.append(kv("aws.xray.namespace", space))
        h = m.get("http", {})
        for f, t in [("method", "http.method"), ("url", "http.url"), ("user_agent", "http.user_agent"),
                     ("client_ip", "http.client_ip")]:
            if f in h.get("request", {}):
                o.attributes.append(kv(t, h["request"][f]))
        for f, t in [("status", "http.status_code"), ("content_length", "http.response_content_length")]:
            if f in h.get("response", {}):
                o.attributes.append(kv(t, h["response"][f]))
        for f in ("operation", "region", "request_id", "table_name"):
            if not segment and f in m.get("aws", {}):
                o.attributes.append(kv("aws." + f, m["aws"][f]))
        for k, v in m.get("annotations", {}).items():
            o.attributes.append(kv(k, v))
        for k, v in m.get("metadata", {}).items():
            o.attributes.append(kv("aws.xray.metadata." + k, json.dumps(v, separators=(",", ":"))))
        for sub in m.get("subsegments", []):
            add(sub, tid, o.span_id, False)

    for seg in segs:
        add(seg, bytes.fromhex(seg["trace_id"][2:].replace("-", "")), None, True)
    return req.SerializeToString()


# --- Drivers ------------------------------------------------------------------------------------

def http_client(port, path, ctype, tmpls, per_request, stop_at, seed, q):
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = errors = 0
    last = None
    first_error = None
    i = 0
    while time.time() < stop_at:
        t = tmpls[i % len(tmpls)]
        i += 1
        body, first = fresh(t, rng)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": ctype})
            r = conn.getresponse()
            data = r.read()
            if r.status in (200, 202):
                sent += per_request
                last = first
            else:
                errors += 1
                first_error = first_error or f"{r.status} {data[:200]!r}"
        except Exception as e:
            errors += 1
            first_error = first_error or repr(e)
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    q.put((sent, errors, last.hex() if last else None, first_error))


def collect(q, procs, seconds):
    """The clients' results; exits if a client died without one."""
    import queue
    results, deadline = [], time.time() + seconds + 120
    while len(results) < len(procs):
        try:
            results.append(q.get(timeout=0.5))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead or time.time() > deadline:
                sys.exit(f"a client process failed (exit codes {dead}) or hung")
    for p in procs:
        p.join()
    return results


def drive_http(pid, port, path, ctype, tmpls, seconds, clients, per_request=SPANS_PER_REQUEST):
    q = mp.Queue()
    stop_at = time.time() + seconds
    c0, t0 = cpu_seconds(pid), time.time()
    procs = [mp.Process(target=http_client, daemon=True,
                        args=(port, path, ctype, tmpls, per_request, stop_at, random.getrandbits(64), q))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = collect(q, procs, seconds)
    time.sleep(1.0)  # acknowledged work finishes (the WAL's group commit)
    cpu = cpu_seconds(pid) - c0
    spans = sum(r[0] for r in results)
    out = {"spans": spans, "errors": sum(r[1] for r in results), "wall_s": round(time.time() - t0, 2),
           "server_cpu_s": round(cpu, 2), "spans_per_cpu_s": round(spans / cpu) if cpu else None,
           "spans_per_s": round(spans / seconds)}
    errs = [r[3] for r in results if r[3]]
    if errs:
        out["first_error"] = errs[0]
    return out, [r[2] for r in results if r[2]]


def udp_client(port, tmpls, rate, stop_at, seed, q):
    """Sends datagrams at `rate` per second, paced; a client that falls behind by more than 20 ms
    starts over from the present instead of bursting to catch up."""
    rng = random.Random(seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    gap = 1.0 / rate
    sent = errors = i = 0
    # The last 50 traces sent: UDP may drop any datagram, so the read-back looks for one of them.
    last = collections.deque(maxlen=50)
    next_t = time.time()
    while True:
        now = time.time()
        if now >= stop_at:
            break
        if now < next_t:
            time.sleep(next_t - now)
        elif now - next_t > 0.02:
            next_t = now
        next_t += gap
        body, first = fresh(tmpls[i % len(tmpls)], rng)
        i += 1
        try:
            s.send(body)
            sent += 1
            last.append(first)
        except OSError:
            errors += 1
    q.put((sent, errors, [t.hex() for t in last]))


def metrics(port):
    """weft's /metrics samples as {(name, frozenset(labels)): value}."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in body.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)", line)
        if m and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def xray_counters(http_port):
    m = metrics(http_port)
    get = lambda name, **l: m.get((name, frozenset({("port", "xray"), *l.items()})))
    c = {"datagrams": get("weft_udp_datagrams_total"), "spans_accepted": get("weft_udp_spans_accepted_total")}
    for reason in ("parse", "overloaded", "refused"):
        c["refused_" + reason] = get("weft_udp_datagrams_refused_total", reason=reason)
    missing = [k for k, v in c.items() if v is None]
    if missing:
        sys.exit(f"weft's /metrics lacks the X-Ray UDP counters {missing} (port=\"xray\"): is the binary too old?")
    return c


def kernel_udp_drops(port):
    """The kernel's drop count of the UDP socket bound to port (receive buffer full)."""
    with open("/proc/net/udp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == port:
                return int(cols[-1])
    return 0


def drive_udp(pid, http_port, port, tmpls, seconds, clients, rate):
    q = mp.Queue()
    stop_at = time.time() + seconds
    k0, m0 = kernel_udp_drops(port), xray_counters(http_port)
    c0, t0 = cpu_seconds(pid), time.time()
    procs = [mp.Process(target=udp_client, args=(port, tmpls, rate / clients, stop_at, random.getrandbits(64), q),
                        daemon=True) for _ in range(clients)]
    for p in procs:
        p.start()
    results = collect(q, procs, seconds)
    time.sleep(1.0)  # datagrams in flight are made durable
    cpu = cpu_seconds(pid) - c0
    m1 = xray_counters(http_port)
    d = {k: int(m1[k] - m0[k]) for k in m1}
    sent = sum(r[0] for r in results)
    spans = d["spans_accepted"]
    out = {"spans": spans, "datagrams_sent": sent, "send_errors": sum(r[1] for r in results),
           "datagrams_received": d["datagrams"], "kernel_drops": kernel_udp_drops(port) - k0,
           "refused": {r: d["refused_" + r] for r in ("parse", "overloaded", "refused")},
           "lost_fraction": round(1 - spans / (sent * XRAY_SPANS_PER_DATAGRAM), 4) if sent else None,
           "wall_s": round(time.time() - t0, 2), "server_cpu_s": round(cpu, 2),
           "spans_per_cpu_s": round(spans / cpu) if cpu else None, "spans_per_s": round(spans / seconds),
           "datagrams_per_s_sent": round(sent / seconds)}
    return out, [t for r in results for t in r[2]]


# --- Read-back checks ---------------------------------------------------------------------------

def get_json(url):
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                timeout=15) as r:
        return r.status, json.loads(r.read())


def count_spans(doc):
    """Spans in a Tempo-API (OTLP JSON) trace: objects with a spanId."""
    if isinstance(doc, dict):
        return ("spanId" in doc) + sum(count_spans(v) for v in doc.values())
    if isinstance(doc, list):
        return sum(count_spans(v) for v in doc)
    return 0


def stored_spans(kind, port, tid):
    """Spans of a trace as the server's query API returns them (0 when not found)."""
    try:
        status, doc = get_json(f"http://127.0.0.1:{port}/api/traces/{tid}")
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}", 0
    if kind == "weft":  # the Tempo API: OTLP JSON
        return f"HTTP {status}", count_spans(doc)
    return f"HTTP {status}", sum(len(t.get("spans", [])) for t in doc.get("data") or [])  # Jaeger's API


def check_stored(kind, port, ids, want, what, need_all=True, timeout=20):
    """The traces in ids must be readable with `want` spans (with need_all false, one of them
    is enough: UDP may lose any datagram); exits otherwise."""
    pending, failures = list(ids), {}
    deadline = time.time() + timeout
    while pending:
        tid = pending.pop(0)
        try:
            status, n = stored_spans(kind, port, tid)
        except Exception as e:
            status, n = repr(e), 0
        if n >= want:
            failures.pop(tid, None)
            if not need_all:
                return
            continue
        failures[tid] = f"{status}, {n} spans"
        if time.time() > deadline:
            break
        pending.append(tid)
        time.sleep(0.2)
    if failures:
        sys.exit(f"{what}: acknowledged traces are not stored with {want} spans: {failures}")


# --- Processes ----------------------------------------------------------------------------------

def die_with_parent():
    """In a server's child process: SIGKILL it when this script dies, even by SIGKILL."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def start_weft(args, tmp, name, procs, jaeger_http=False, xray=False):
    http_port, otlp, grpc = free_port(), free_port(), free_port()
    jp = free_port() if jaeger_http else 0
    xp = free_port(udp_too=True) if xray else 0
    log = os.path.join(tmp, f"{name}.log")
    weft = subprocess.Popen([args.weft, "--data-dir", os.path.join(tmp, name), "--http-port", str(http_port),
                             "--zipkin-port", "0", "--otlp-grpc-port", str(grpc), "--otlp-http-port", str(otlp),
                             "--jaeger-query-port", "0", "--jaeger-http-port", str(jp), "--jaeger-compact-port", "0",
                             "--jaeger-binary-port", "0", "--xray-port", str(xp),
                             "--sampling-http-port", "0", "--sampling-grpc-port", "0",
                             # Compaction off: its 30 s cycle lands inside some measuring
                             # windows and not others (bench_allin.py counts it, all-in).
                             "--compaction-interval", "0"],
                            # Ports newer than these flags, off by environment (which an older
                            # binary ignores), so that the instances do not collide on defaults.
                            env={**os.environ, "WEFT_JAEGER_GRPC_PORT": "0"},
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=die_with_parent)
    procs.append(weft)
    wait_http(f"http://127.0.0.1:{http_port}/ready", weft, f"weft ({name})", log)
    return {"proc": weft, "http": http_port, "otlp": otlp, "jaeger": jp, "xray": xp}


def start_jaeger(args, tmp, procs):
    ports = {k: free_port() for k in ("health", "query", "query_grpc", "thrift_http", "jaeger_grpc", "otlp_grpc",
                                      "otlp_http", "zipkin")}
    cfg = os.path.join(tmp, "jaeger.yaml")
    with open(cfg, "w") as f:
        f.write(JAEGER_CONFIG.format(max_traces=args.jaeger_max_traces, **ports))
    log = os.path.join(tmp, "jaeger.log")
    p = subprocess.Popen([args.jaeger, "--config", cfg], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                         start_new_session=True, preexec_fn=die_with_parent)
    procs.append(p)
    wait_http(f"http://127.0.0.1:{ports['query']}/api/services", p, "Jaeger v2", log)
    # The receiver may open after the query API.
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", ports["thrift_http"]), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline:
                sys.exit(f"Jaeger v2's thrift_http receiver did not open; see {log}")
            time.sleep(0.2)
    return {"proc": p, **ports}


def stop_all(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def calibrate_xray(w, tmpls, clients, max_loss):
    """The X-Ray rate: datagrams/s raised by half each 2 s step while weft makes durable all but
    max_loss of them and the senders keep up; then 80% of the last rate that passed, so that a
    round's noise does not push it into drops. Doubles as weft's warm-up."""
    steps, good, rate = [], None, 2000.0
    while rate <= 200000:
        r, _ = drive_udp(w["proc"].pid, w["http"], w["xray"], tmpls, 2.0, clients, rate)
        steps.append({"rate": round(rate), "datagrams_per_s_sent": r["datagrams_per_s_sent"],
                      "lost_fraction": r["lost_fraction"], "kernel_drops": r["kernel_drops"],
                      "refused": r["refused"], "spans_per_cpu_s": r["spans_per_cpu_s"]})
        print(f"xray calibration: {json.dumps(steps[-1])}", file=sys.stderr)
        if r["datagrams_per_s_sent"] < 0.9 * rate or r["lost_fraction"] > max_loss:
            break
        good = rate
        rate *= 1.5
    if good is None:
        sys.exit(f"X-Ray: weft loses more than {max_loss:.1%} of datagrams even at 2000/s: {steps}")
    return round(0.8 * good), steps


def parse_args():
    """The command line, checked: returns the arguments and the set of parts to run."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weft", required=True, help="the weft release binary")
    ap.add_argument("--jaeger", default=JAEGER_BIN, help="the Jaeger v2 binary (scripts/test-deps.sh builds it)")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=60, help="seconds of unmeasured load each server takes first")
    ap.add_argument("--clients", type=int, default=4, help="HTTP client processes")
    ap.add_argument("--xray-clients", type=int, default=2, help="UDP sender processes")
    ap.add_argument("--xray-rate", default="auto",
                    help="X-Ray datagrams per second, all senders together (5 spans each); auto: 80%% of the "
                         "highest rate weft keeps up with, found by a ramp before the rounds")
    ap.add_argument("--xray-max-loss", type=float, default=0.005,
                    help="the loss (kernel drops and refusals) the auto rate's ramp tolerates")
    ap.add_argument("--jaeger-max-traces", type=int, default=100000, help="Jaeger v2's in-memory trace limit")
    ap.add_argument("--parts", default="jaeger,xray", help="comma-separated: jaeger, xray")
    ap.add_argument("--keep-data", action="store_true", help="keep weft's data directories (logs are always kept)")
    ap.add_argument("--out")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - {"jaeger", "xray"}:
        sys.exit("--parts takes jaeger, xray or both")
    if args.xray_rate != "auto":
        try:
            args.xray_rate = float(args.xray_rate)
        except ValueError:
            sys.exit("--xray-rate takes a number or auto")
    if not (os.path.isfile(args.weft) and os.access(args.weft, os.X_OK)):
        sys.exit(f"weft binary {args.weft} is missing or not executable (cargo build --release -p weft-server)")
    if "jaeger" in parts and not (os.path.isfile(args.jaeger) and os.access(args.jaeger, os.X_OK)):
        sys.exit(f"Jaeger v2 binary {args.jaeger} is missing: run scripts/test-deps.sh")
    return args, parts


def per_span(bodies, n):
    """Mean bytes per span of request bodies that carry `n` spans each."""
    return round(sum(map(len, bodies)) / (len(bodies) * n))


def jaeger_templates(rng, now_us, tmpls, results):
    """Jaeger thrift batches and the same spans as OTLP, as request templates in `tmpls`; their
    bytes per span in `results`."""
    batches = [jaeger_batch(rng, now_us, SERVICES[k % 4]) for k in range(32)]
    tids = [[s["trace_id"] for s in b["spans"][::SPANS_PER_TRACE]] for b in batches]
    jb = [jaeger_thrift(b) for b in batches]
    ob = [otlp_from_jaeger(b) for b in batches]
    tmpls["jaeger"] = [template(b, t, "thrift") for b, t in zip(jb, tids)]
    tmpls["otlp_j"] = [template(b, t, "raw") for b, t in zip(ob, tids)]
    results["bytes_per_span"] = {"jaeger_thrift_binary": per_span(jb, SPANS_PER_REQUEST),
                                 "otlp_jaeger_shape": per_span(ob, SPANS_PER_REQUEST)}


def xray_templates(rng, args, tmpls, results):
    """X-Ray datagrams and the same spans as OTLP (200 and 5 spans per request), as request
    templates in `tmpls`; their sizes in `results`."""
    segs = [xray_segment(rng, time.time(), SERVICES[k % 4]) for k in range(4 * 256)]
    tid_of = lambda s: bytes.fromhex(s["trace_id"][2:].replace("-", ""))
    xb = [xray_datagram(s) for s in segs]
    tmpls["xray"] = [template(b, [tid_of(s)], "xray") for b, s in zip(xb, segs)]
    # OTLP as a batching SDK sends it: 40 segments (200 spans) of one service per request.
    by_svc = {svc: [s for s in segs if s["name"] == svc] for svc in SERVICES}
    n = XRAY_SEGMENTS_PER_OTLP_REQUEST
    groups = [by_svc[SERVICES[k % 4]][(k // 4) * n:(k // 4 + 1) * n] for k in range(24)]
    ox = [otlp_from_xray(g) for g in groups]
    tmpls["otlp_x"] = [template(b, [tid_of(s) for s in g], "raw") for b, g in zip(ox, groups)]
    # And one segment (5 spans) per request, as the datagrams carry them.
    o1 = [otlp_from_xray([s]) for s in segs]
    tmpls["otlp_x1"] = [template(b, [tid_of(s)], "raw") for b, s in zip(o1, segs)]
    results.setdefault("bytes_per_span", {}).update({
        "xray_json_datagram": per_span(xb, XRAY_SPANS_PER_DATAGRAM),
        "otlp_xray_shape_200_spans_per_request": per_span(ox, SPANS_PER_REQUEST),
        "otlp_xray_shape_5_spans_per_request": per_span(o1, XRAY_SPANS_PER_DATAGRAM)})
    results.update({"xray_clients": args.xray_clients, "xray_spans_per_datagram": XRAY_SPANS_PER_DATAGRAM,
                    "xray_datagram_bytes": round(sum(map(len, xb)) / len(xb))})


def start_legs(args, parts, tmp, procs, tmpls):
    """Starts the servers and returns the legs, (name, drive, read-back check) each, and the
    X-Ray weft (None without the xray part)."""
    ctype_t, ctype_p = "application/x-thrift", "application/x-protobuf"
    legs = []  # (name, drive, read-back check)
    wx = None
    if "jaeger" in parts:
        jaeger = start_jaeger(args, tmp, procs)
        wj = start_weft(args, tmp, "weft_jaeger_thrift_http", procs, jaeger_http=True)
        wo = start_weft(args, tmp, "weft_otlp_http_jaeger_shape", procs)
        legs += [
            ("jaeger_v2_thrift_http", lambda secs=args.seconds: drive_http(
                jaeger["proc"].pid, jaeger["thrift_http"], "/api/traces", ctype_t, tmpls["jaeger"],
                secs, args.clients), ("jaeger", jaeger["query"], SPANS_PER_TRACE)),
            ("weft_jaeger_thrift_http", lambda secs=args.seconds: drive_http(
                wj["proc"].pid, wj["jaeger"], "/api/traces", ctype_t, tmpls["jaeger"], secs,
                args.clients), ("weft", wj["http"], SPANS_PER_TRACE)),
            ("weft_otlp_http_jaeger_shape", lambda secs=args.seconds: drive_http(
                wo["proc"].pid, wo["otlp"], "/v1/traces", ctype_p, tmpls["otlp_j"], secs,
                args.clients), ("weft", wo["http"], SPANS_PER_TRACE))]
    if "xray" in parts:
        wx = start_weft(args, tmp, "weft_xray_udp", procs, xray=True)
        wox = start_weft(args, tmp, "weft_otlp_http_xray_shape", procs)
        wox1 = start_weft(args, tmp, "weft_otlp_http_xray_shape_5_spans_per_request", procs)
        legs += [
            ("weft_xray_udp", lambda secs=args.seconds: drive_udp(
                wx["proc"].pid, wx["http"], wx["xray"], tmpls["xray"], secs, args.xray_clients,
                args.xray_rate), ("weft", wx["http"], XRAY_SPANS_PER_DATAGRAM)),
            ("weft_otlp_http_xray_shape", lambda secs=args.seconds: drive_http(
                wox["proc"].pid, wox["otlp"], "/v1/traces", ctype_p, tmpls["otlp_x"], secs,
                args.clients), ("weft", wox["http"], XRAY_SPANS_PER_DATAGRAM)),
            ("weft_otlp_http_xray_shape_5_spans_per_request", lambda secs=args.seconds: drive_http(
                wox1["proc"].pid, wox1["otlp"], "/v1/traces", ctype_p, tmpls["otlp_x1"], secs,
                args.clients, XRAY_SPANS_PER_DATAGRAM), ("weft", wox1["http"], XRAY_SPANS_PER_DATAGRAM))]
    return legs, wx


def measure(args, legs, tmp, runs):
    """A warm-up per server, then --rounds rounds of every leg, each run checked by reading its
    last traces back; the rounds' results go in `runs`, by leg."""
    # Every server first takes the same load once, unmeasured, so that each round measures
    # it at its working size: Jaeger v2's heap and in-memory store, weft's head block, maps
    # and WAL segments (reused once the first ones are in blocks).
    for name, run, _ in legs:
        r, _ = run(args.warmup)
        print(f"{name} (warm-up): {json.dumps(r)}", file=sys.stderr)
    # Rounds interleave the servers, so drift in the shared host's speed hits each alike.
    for _ in range(args.rounds):
        for name, run, (kind, port, want) in legs:
            r, last_ids = run()
            print(f"{name}: {json.dumps(r)}", file=sys.stderr)
            if not r["spans"]:
                sys.exit(f"{name}: no spans were acknowledged ({r.get('first_error', 'no error reported')}); "
                         f"logs in {tmp}")
            # The last trace each client sent must be stored whole (outside the CPU window;
            # over UDP, one of them: any datagram may be lost).
            check_stored(kind, port, last_ids, want, name, need_all=not name.endswith("_udp"))
            runs.setdefault(name, []).append(r)


def jaeger_notes(args):
    """What the Jaeger figures measure, for the results' notes."""
    try:
        with open(os.path.join(os.path.dirname(args.jaeger), "version")) as f:
            version = f.read().strip()
    except OSError:
        version = "version unknown"
    return [
        f"Jaeger v2 {version}: `jaeger` receiver, thrift_http, no processors, jaeger_storage_exporter into "
        f"in-memory storage (max_traces {args.jaeger_max_traces}); it answers 200 with nothing durable. "
        "Every server (Jaeger v2 and each weft) first takes a warm-up load of --warmup seconds. "
        "weft answers 202 after the WAL's fsync.",
        "Jaeger requests: one Batch (one process) of 200 spans, 20 traces x 10 spans, the service rotating "
        "between requests; weft's OTLP figure posts the same spans as weft's Jaeger conversion writes them.",
    ]


def xray_notes(args):
    """What the X-Ray figures measure, for the results' notes."""
    return [
        "No X-Ray server to compare with: AWS's X-Ray daemon only forwards segments to the X-Ray service, "
        "so X-Ray is compared with weft's own OTLP/HTTP figure for the same spans.",
        f"X-Ray: one segment with 4 subsegments per datagram (5 spans), paced at {args.xray_rate:g} "
        f"datagrams/s from {args.xray_clients} senders; UDP has no acknowledgement or back-pressure, so the "
        "numerator is weft_udp_spans_accepted_total{port=\"xray\"} (spans made durable) and the loss (kernel "
        "receive-buffer drops from /proc/net/udp, weft's refusals by reason) is reported per round.",
        "The X-Ray OTLP figures are driven as fast as weft acknowledges: 40 segments (200 spans) of one "
        "service per request, as a batching OpenTelemetry SDK sends them, and one segment (5 spans) per "
        "request, as the datagrams carry them; the second separates the format's cost from the cost of "
        "a push (and a share of a WAL commit) per 5 spans. Attributes as weft's X-Ray conversion writes them.",
    ]


def summarize_runs(args, parts, runs, results):
    """Each leg's rounds with their median and pooled spans per CPU-second, the ratios between
    legs, and the notes, into `results`."""
    med = lambda xs: sorted(xs)[len(xs) // 2]
    # Pooled too (all of a server's rounds' spans over all their CPU), as bench_zipkin.py does:
    # what a long run costs, whichever windows a collector's cycles fall in.
    pooled = {k: sum(r["spans"] for r in rs) / sum(r["server_cpu_s"] for r in rs) for k, rs in runs.items()}
    for k, rs in runs.items():
        results[k] = {"rounds": rs, "median_spans_per_cpu_s": med([r["spans_per_cpu_s"] for r in rs]),
                      "pooled_spans_per_cpu_s": round(pooled[k])}
    rate = lambda k: [r["spans_per_cpu_s"] for r in runs[k]]
    ratio = lambda a, b: round(med([x / y for x, y in zip(rate(a), rate(b))]), 2)
    pooled_ratio = lambda a, b: round(pooled[a] / pooled[b], 2)
    notes = []
    if "jaeger" in parts:
        results["ratio_weft_jaeger_vs_jaeger_v2"] = ratio("weft_jaeger_thrift_http", "jaeger_v2_thrift_http")
        results["ratio_weft_jaeger_vs_weft_otlp"] = ratio("weft_jaeger_thrift_http", "weft_otlp_http_jaeger_shape")
        results["pooled_ratio_weft_jaeger_vs_jaeger_v2"] = pooled_ratio("weft_jaeger_thrift_http", "jaeger_v2_thrift_http")
        results["pooled_ratio_weft_jaeger_vs_weft_otlp"] = pooled_ratio("weft_jaeger_thrift_http",
                                                                        "weft_otlp_http_jaeger_shape")
        results["targets"] = {"ratio_weft_jaeger_vs_jaeger_v2": ">= 5", "ratio_weft_jaeger_vs_weft_otlp": ">= 0.5"}
        notes += jaeger_notes(args)
    if "xray" in parts:
        results["ratio_weft_xray_vs_weft_otlp"] = ratio("weft_xray_udp", "weft_otlp_http_xray_shape")
        results["pooled_ratio_weft_xray_vs_weft_otlp"] = pooled_ratio("weft_xray_udp", "weft_otlp_http_xray_shape")
        results["ratio_weft_xray_vs_weft_otlp_5_spans_per_request"] = ratio(
            "weft_xray_udp", "weft_otlp_http_xray_shape_5_spans_per_request")
        notes += xray_notes(args)
    notes.append("Every request carries fresh trace IDs; after every run the last trace of each client is read "
                 "back and must hold all its spans.")
    results["notes"] = notes


def main():
    args, parts = parse_args()
    try:
        import opentelemetry.proto  # noqa: F401
    except ImportError:
        sys.exit("opentelemetry-proto is missing: run this with .venv/bin/python")

    rng = random.Random(7)
    now_us = int(time.time() * 1e6)
    results = {"spans_per_request": SPANS_PER_REQUEST, "clients": args.clients, "seconds": args.seconds,
               "rounds": args.rounds}
    tmpls = {}
    if "jaeger" in parts:
        jaeger_templates(rng, now_us, tmpls, results)
    if "xray" in parts:
        xray_templates(rng, args, tmpls, results)

    tmp = tempfile.mkdtemp(prefix="weft-bench-jaeger-xray-")
    results["logs"] = tmp
    procs, wefts = [], []

    def on_signal(sig, _frame):
        raise SystemExit(f"interrupted by signal {sig}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runs = {}
    try:
        legs, wx = start_legs(args, parts, tmp, procs, tmpls)
        wefts = [os.path.join(tmp, n) for n, _, (kind, _, _) in legs if kind == "weft"]
        if "xray" in parts:
            if args.xray_rate == "auto":
                args.xray_rate, results["xray_rate_calibration"] = calibrate_xray(
                    wx, tmpls["xray"], args.xray_clients, args.xray_max_loss)
            results["xray_rate_datagrams_per_s"] = args.xray_rate
        measure(args, legs, tmp, runs)
    finally:
        stop_all(procs)
        if not args.keep_data:
            for d in wefts:
                shutil.rmtree(d, ignore_errors=True)

    summarize_runs(args, parts, runs, results)
    emit(results, args.out)


if __name__ == "__main__":
    main()
