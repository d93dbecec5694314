#!/usr/bin/env python3
"""Zipkin ingest: spans per CPU-second of the server, weft beside the real Zipkin server.

The same Zipkin v2 JSON requests (200 spans each, 10 spans per trace, endpoints, three tags per
span, an annotation on every fifth span, as Brave's reporter batches them) are posted by
several client processes for --seconds to:
  - weft's Zipkin receiver (durable: 202 after the WAL's fsync),
  - the real Zipkin server 3.5.1 (its default in-memory storage; it stores nothing durably),
  - weft's OTLP/HTTP receiver, with the same spans as OTLP protobuf (weft's own OTLP figure).
Each server's CPU time (utime+stime of its process) over the measured window, divided into the
spans it acknowledged, gives spans per CPU-second; the ratios between them are what is reported
(the host's speed drift cancels out of a ratio). The three servers run at once and take the load
in turn, --rounds times; the median of the rounds' ratios is reported. Every server first takes a
warm-up load of the same length, unmeasured (the Zipkin server's JIT and heap; weft's head block
and WAL segments). Both wefts run with compaction off (--compaction-interval 0): its 30 s cycle
would land inside one server's window and not the other's; blocks are still cut and written during the load, and compaction's cost per span is
measured all-in by bench_allin.py. Results as JSON on stdout and in --out.
"""
import argparse, http.client, json, multiprocessing as mp, os, random, shutil, signal, socket, subprocess, sys, tempfile, time

from benchlib import cpu_seconds, emit, free_port, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZIPKIN_JAR = os.path.join(ROOT, ".tools", "zipkin", "zipkin-server-3.5.1-exec.jar")
SPANS_PER_REQUEST = 200


def zipkin_spans(rng, now_us):
    """One request's spans: 20 traces of 10 spans across 4 services."""
    spans = []
    services = ["frontend", "checkout", "payments", "inventory"]
    for _ in range(SPANS_PER_REQUEST // 10):
        tid = "%032x" % rng.getrandbits(128)
        root = "%016x" % rng.getrandbits(64)
        for i in range(10):
            sid = root if i == 0 else "%016x" % rng.getrandbits(64)
            svc = services[i % 4]
            s = {"traceId": tid, "id": sid, "kind": "SERVER" if i % 2 == 0 else "CLIENT",
                 "name": f"GET /api/v1/resource/{i}", "timestamp": now_us + i * 100, "duration": 900 - i * 50,
                 "localEndpoint": {"serviceName": svc, "ipv4": "10.0.0.%d" % (i + 1), "port": 8080},
                 "tags": {"http.method": "GET", "http.path": f"/api/v1/resource/{i}", "http.status_code": "200"}}
            if i:
                s["parentId"] = root
            if i % 2:
                s["remoteEndpoint"] = {"serviceName": services[(i + 1) % 4], "ipv4": "10.0.1.%d" % i, "port": 9000}
            if i % 5 == 0:
                s["annotations"] = [{"timestamp": now_us + i * 100 + 10, "value": "wire.send"}]
            spans.append(s)
    return spans


def otlp_body(spans):
    """The same spans as an OTLP ExportTraceServiceRequest (one resource per service)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    req = ExportTraceServiceRequest()
    by_svc = {}
    for s in spans:
        svc = s["localEndpoint"]["serviceName"]
        if svc not in by_svc:
            rs = req.resource_spans.add()
            rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=svc)))
            by_svc[svc] = rs.scope_spans.add()
        o = by_svc[svc].spans.add()
        o.trace_id = bytes.fromhex(s["traceId"])
        o.span_id = bytes.fromhex(s["id"])
        if "parentId" in s:
            o.parent_span_id = bytes.fromhex(s["parentId"])
        o.name = s["name"]
        o.kind = 2 if s["kind"] == "SERVER" else 3
        o.start_time_unix_nano = s["timestamp"] * 1000
        o.end_time_unix_nano = (s["timestamp"] + s["duration"]) * 1000
        for k, v in s["tags"].items():
            o.attributes.append(KeyValue(key=k, value=AnyValue(string_value=v)))
        o.attributes.append(KeyValue(key="net.host.ip", value=AnyValue(string_value=s["localEndpoint"]["ipv4"])))
        o.attributes.append(KeyValue(key="net.host.port", value=AnyValue(int_value=8080)))
        if "remoteEndpoint" in s:
            o.attributes.append(KeyValue(key="peer.service", value=AnyValue(string_value=s["remoteEndpoint"]["serviceName"])))
        for a in s.get("annotations", []):
            e = o.events.add()
            e.time_unix_nano = a["timestamp"] * 1000
            e.name = a["value"]
    return req.SerializeToString()


def client(port, path, ctype, bodies, stop_at, q):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = errors = 0
    i = 0
    while time.time() < stop_at:
        body = bodies[i % len(bodies)]
        i += 1
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": ctype})
            r = conn.getresponse()
            r.read()
            if r.status in (200, 202):
                sent += SPANS_PER_REQUEST
            else:
                errors += 1
        except Exception:
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    q.put((sent, errors))


def drive(pid, port, path, ctype, bodies, seconds, clients):
    q = mp.Queue()
    stop_at = time.time() + seconds
    c0, t0 = cpu_seconds(pid), time.time()
    procs = [mp.Process(target=client, args=(port, path, ctype, bodies, stop_at, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    time.sleep(1.0)  # acknowledged work finishes (the WAL's group commit, Zipkin's indexing)
    cpu = cpu_seconds(pid) - c0
    spans = sum(r[0] for r in results)
    return {"spans": spans, "errors": sum(r[1] for r in results), "wall_s": round(time.time() - t0, 2),
            "server_cpu_s": round(cpu, 2), "spans_per_cpu_s": round(spans / cpu) if cpu else None,
            "spans_per_s": round(spans / seconds)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--out")
    ap.add_argument("--keep-data", action="store_true", help="keep weft's data directories (logs are always kept)")
    args = ap.parse_args()
    rng = random.Random(7)
    now_us = int(time.time() * 1e6)
    span_sets = [zipkin_spans(rng, now_us) for _ in range(32)]
    zbodies = [json.dumps(s).encode() for s in span_sets]
    obodies = [otlp_body(s) for s in span_sets]
    tmp = tempfile.mkdtemp(prefix="weft-bench-zipkin-")
    results = {"spans_per_request": SPANS_PER_REQUEST, "clients": args.clients, "seconds": args.seconds,
               "rounds": args.rounds,
               "zipkin_json_bytes_per_span": round(sum(map(len, zbodies)) / (len(zbodies) * SPANS_PER_REQUEST)),
               "otlp_bytes_per_span": round(sum(map(len, obodies)) / (len(obodies) * SPANS_PER_REQUEST))}
    procs = []
    try:
        zport = free_port()
        zlog = open(os.path.join(tmp, "zipkin.log"), "w")
        zipkin = subprocess.Popen(["java", "-Xmx1g", "-jar", ZIPKIN_JAR], stdout=zlog, stderr=subprocess.STDOUT,
                                  env={**os.environ, "QUERY_PORT": str(zport), "STORAGE_TYPE": "mem"},
                                  start_new_session=True)
        procs.append(zipkin)
        wait_http(f"http://127.0.0.1:{zport}/health", zipkin, "zipkin-server")
        wefts = {}
        for name in ("weft_zipkin_json", "weft_otlp_http"):
            http_port, zp, grpc, otlp = free_port(), free_port(), free_port(), free_port()
            log = open(os.path.join(tmp, f"{name}.log"), "w")
            weft = subprocess.Popen([args.weft, "--data-dir", os.path.join(tmp, name), "--http-port", str(http_port),
                                     "--zipkin-port", str(zp), "--otlp-grpc-port", str(grpc),
                                     "--otlp-http-port", str(otlp), "--jaeger-query-port", "0", "--jaeger-http-port", "0", "--jaeger-grpc-port", "0",
                                     "--jaeger-compact-port", "0", "--jaeger-binary-port", "0", "--xray-port", "0",
                                     # Compaction off: its 30 s cycle lands inside some measuring
                                     # windows and not others (bench_allin.py counts it, all-in).
                                     "--compaction-interval", "0"],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(weft)
            wait_http(f"http://127.0.0.1:{http_port}/ready", weft, "weft")
            wefts[name] = (weft, zp if "zipkin" in name else otlp)
        # Every server first takes the same load once, unmeasured: the JVM's JIT and heap, weft's
        # head block, maps and WAL segments (reused once the first ones are in blocks).
        drive(zipkin.pid, zport, "/api/v2/spans", "application/json", zbodies, args.seconds, args.clients)
        w, port = wefts["weft_zipkin_json"]
        drive(w.pid, port, "/api/v2/spans", "application/json", zbodies, args.seconds, args.clients)
        w, port = wefts["weft_otlp_http"]
        drive(w.pid, port, "/v1/traces", "application/x-protobuf", obodies, args.seconds, args.clients)
        runs = {"zipkin_server_json": [], "weft_zipkin_json": [], "weft_otlp_http": []}
        # Rounds interleave the three, so drift in the shared host's speed hits each alike.
        for _ in range(args.rounds):
            runs["zipkin_server_json"].append(
                drive(zipkin.pid, zport, "/api/v2/spans", "application/json", zbodies, args.seconds, args.clients))
            w, port = wefts["weft_zipkin_json"]
            runs["weft_zipkin_json"].append(
                drive(w.pid, port, "/api/v2/spans", "application/json", zbodies, args.seconds, args.clients))
            w, port = wefts["weft_otlp_http"]
            runs["weft_otlp_http"].append(
                drive(w.pid, port, "/v1/traces", "application/x-protobuf", obodies, args.seconds, args.clients))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        # Each weft's data is a few hundred MB by the end; the logs stay for a look.
        for name in ("weft_zipkin_json", "weft_otlp_http") if not args.keep_data else ():
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
    med = lambda xs: sorted(xs)[len(xs) // 2]
    for k, rs in runs.items():
        results[k] = {"rounds": rs, "median_spans_per_cpu_s": med([r["spans_per_cpu_s"] for r in rs])}
    z = [r["spans_per_cpu_s"] for r in runs["zipkin_server_json"]]
    w = [r["spans_per_cpu_s"] for r in runs["weft_zipkin_json"]]
    o = [r["spans_per_cpu_s"] for r in runs["weft_otlp_http"]]
    results["ratio_weft_zipkin_json_vs_zipkin_server"] = round(med([a / b for a, b in zip(w, z)]), 2)
    results["ratio_weft_zipkin_json_vs_weft_otlp"] = round(med([a / b for a, b in zip(w, o)]), 2)
    emit(results, args.out)


if __name__ == "__main__":
    main()
