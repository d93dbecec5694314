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
in turn, --rounds times; the median of the rounds' ratios is reported. --clients takes a list
(`4,8`): the rounds are run for each number of clients, the servers kept running between them.

Every request carries fresh trace IDs (benchlib.fresh) and span times that follow the clock, as
real clients' do. After every window, the last trace each client had acknowledged must read back
whole through that server's Zipkin API (weft's OTLP receiver serves one too).

The Zipkin server runs with the JVM's default heap (a quarter of the machine's memory), as
`java -jar` in its quick start runs it (--zipkin-heap to choose another); its in-memory store
holds its last 500,000 spans, evicting the oldest traces by timestamp. It needs about a minute
of load before its figure settles (the store fills, G1 sizes its generations), so every server
first takes --warmup seconds of the same load, unmeasured.

Its garbage collector is a large share of its CPU and most of the variation in its figure, in
cycles longer than a window. So each server is also reported pooled (all its rounds' spans over
all its rounds' CPU), the JVM's GC log is kept and the pauses inside each of its windows are
reported. Work a window's spans cause after it closes (the JVM's concurrent marking, weft's block
flushes) falls outside every window, so each server is also reported whole-run: the spans of all
its rounds over all the CPU it used from the first round to the last, the other servers' windows
included, with what it uses idle (measured before any load) beside it.

Both wefts run with compaction off (--compaction-interval 0): its 30 s cycle would land inside
one server's window and not the other's; blocks are still cut and written during the load, and
compaction's cost per span is measured all-in by bench_allin.py. Results as JSON on stdout and in
--out.
"""
import argparse, http.client, json, multiprocessing as mp, os, random, shutil, signal, socket, struct, subprocess, sys
import tempfile, time
import urllib.error, urllib.request

from benchlib import cpu_seconds, emit, free_port, fresh, template, wait_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZIPKIN_JAR = os.path.join(ROOT, ".tools", "zipkin", "zipkin-server-3.5.1-exec.jar")
SPANS_PER_REQUEST = 200
SPANS_PER_TRACE = 10
IDLE_SECONDS = 5


def zipkin_spans(rng, now_us):
    """One request's spans: 20 traces of 10 spans across 4 services."""
    spans = []
    services = ["frontend", "checkout", "payments", "inventory"]
    for _ in range(SPANS_PER_REQUEST // SPANS_PER_TRACE):
        tid = "%032x" % rng.getrandbits(128)
        root = "%016x" % rng.getrandbits(64)
        for i in range(SPANS_PER_TRACE):
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


def time_spots(body, spans, form):
    """Where the spans' times lie in a body: (offset, microseconds). form: 'text' (decimal
    microseconds, as Zipkin's JSON has them) or 'nanos' (OTLP's fixed64 nanoseconds)."""
    values = set()
    for sp in spans:
        values |= {sp["timestamp"], sp["timestamp"] + sp["duration"]}
        values |= {a["timestamp"] for a in sp.get("annotations", [])}
    spots = []
    for v in values:
        needle = str(v).encode() if form == "text" else struct.pack("<Q", v * 1000)
        at = body.find(needle)
        while at >= 0:
            spots.append((at, v))
            at = body.find(needle, at + 1)
    if not spots:
        raise RuntimeError("no span times found in a body template")
    return spots, form


def shifted(tmpl, times, delta_us):
    """The template with every span time moved by delta_us (in place: a microsecond time keeps
    its 16 digits), its trace-ID spots still valid."""
    body, spots, old = tmpl
    b = bytearray(body)
    where, form = times
    for at, v in where:
        new = str(v + delta_us).encode() if form == "text" else struct.pack("<Q", (v + delta_us) * 1000)
        if form == "text" and len(new) != len(str(v)):
            raise RuntimeError(f"span time {v} moved by {delta_us} µs changes its length")
        b[at:at + len(new)] = new
    return bytes(b), spots, old


def client(port, path, ctype, tmpls, stop_at, seed, q):
    rng = random.Random(seed)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = errors = 0
    last = None
    i = 0
    # Span times follow the clock, to the second: the Zipkin server's store evicts its oldest
    # traces by timestamp, so with the times of the first request it would keep the traces with
    # the largest IDs and drop new ones at once.
    current = {}
    while time.time() < stop_at:
        k = i % len(tmpls)
        i += 1
        sec = int(time.time())
        if k not in current or current[k][0] != sec:
            tmpl, times, base_us = tmpls[k]
            current[k] = (sec, shifted(tmpl, times, sec * 1_000_000 - base_us))
        body, first = fresh(current[k][1], rng)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": ctype})
            r = conn.getresponse()
            r.read()
            if r.status in (200, 202):
                sent += SPANS_PER_REQUEST
                last = first.hex()
            else:
                errors += 1
        except Exception:
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    q.put((sent, errors, last))


def check_stored(query_port, trace_ids, what, timeout=20):
    """Every trace in trace_ids (the last one each client had acknowledged) must be readable
    through the server's Zipkin API with all its spans; exits otherwise."""
    for tid in trace_ids:
        deadline, got = time.time() + timeout, None
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{query_port}/api/v2/trace/{tid}", timeout=15) as r:
                    got = len(json.loads(r.read()))
            except urllib.error.HTTPError as e:
                got = f"HTTP {e.code}"
            if got == SPANS_PER_TRACE or time.time() > deadline:
                break
            time.sleep(0.2)
        if got != SPANS_PER_TRACE:
            sys.exit(f"{what}: acknowledged trace {tid} reads back as {got}, not {SPANS_PER_TRACE} spans")


def drive(pid, port, path, ctype, tmpls, seconds, clients, query_port=None, what=""):
    q = mp.Queue()
    stop_at = time.time() + seconds
    c0, t0 = cpu_seconds(pid), time.time()
    procs = [mp.Process(target=client, args=(port, path, ctype, tmpls, stop_at, random.getrandbits(64), q))
             for _ in range(clients)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    time.sleep(1.0)  # acknowledged work finishes (the WAL's group commit, Zipkin's indexing)
    cpu = cpu_seconds(pid) - c0
    spans = sum(r[0] for r in results)
    if query_port:
        check_stored(query_port, [r[2] for r in results if r[2]], what)
    return {"spans": spans, "errors": sum(r[1] for r in results), "wall_s": round(time.time() - t0, 2),
            "window": (t0, time.time()),
            "server_cpu_s": round(cpu, 2), "spans_per_cpu_s": round(spans / cpu) if cpu else None,
            "spans_per_s": round(spans / seconds)}


def gc_pauses(path):
    """The JVM's GC pauses from its `-Xlog:gc:…:uptime` log: (seconds since start, milliseconds)."""
    out = []
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        # [12.345s] GC(7) Pause Young (Normal) (G1 Evacuation Pause) 90M->12M(256M) 3.210ms
        if "Pause" not in line or not line.endswith("ms"):
            continue
        try:
            at = float(line[1:line.index("s]")])
            out.append((at, float(line.rsplit(" ", 1)[1][:-2])))
        except ValueError:
            continue
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weft", required=True)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", default="4,8", help="client processes; a list runs the rounds for each")
    ap.add_argument("--zipkin-heap", default="default", help="the Zipkin server's -Xmx (`1g`); 'default' for the JVM's own")
    ap.add_argument("--warmup", type=float, default=60, help="seconds of unmeasured load each server takes first")
    ap.add_argument("--out")
    ap.add_argument("--keep-data", action="store_true", help="keep weft's data directories (logs are always kept)")
    args = ap.parse_args()
    rng = random.Random(7)
    now_us = int(time.time() * 1e6)
    span_sets = [zipkin_spans(rng, now_us) for _ in range(32)]
    zbodies = [json.dumps(s).encode() for s in span_sets]
    obodies = [otlp_body(s) for s in span_sets]
    # Every request gets fresh trace IDs (benchlib.fresh): the same 32 bodies over and over would
    # be 6,400 spans stored again and again, which neither server sees from real clients (weft
    # drops repeats of a span when it cuts a block; Zipkin's store piles them onto 640 traces).
    tids = [sorted({bytes.fromhex(x["traceId"]) for x in s}) for s in span_sets]
    ztmpls = [(template(b, t, "hex"), time_spots(b, sp, "text"), now_us) for b, t, sp in zip(zbodies, tids, span_sets)]
    otmpls = [(template(b, t, "raw"), time_spots(b, sp, "nanos"), now_us) for b, t, sp in zip(obodies, tids, span_sets)]
    tmp = tempfile.mkdtemp(prefix="weft-bench-zipkin-")
    client_counts = [int(c) for c in str(args.clients).split(",")]
    results = {"spans_per_request": SPANS_PER_REQUEST, "clients": client_counts, "seconds": args.seconds,
               "rounds": args.rounds, "zipkin_heap": args.zipkin_heap, "warmup_s": args.warmup,
               "zipkin_json_bytes_per_span": round(sum(map(len, zbodies)) / (len(zbodies) * SPANS_PER_REQUEST)),
               "otlp_bytes_per_span": round(sum(map(len, obodies)) / (len(obodies) * SPANS_PER_REQUEST))}
    procs = []
    try:
        zport = free_port()
        zlog = open(os.path.join(tmp, "zipkin.log"), "w")
        gc_log = os.path.join(tmp, "zipkin-gc.log")
        zipkin_started = time.time()
        heap = [] if args.zipkin_heap == "default" else [f"-Xmx{args.zipkin_heap}"]
        zipkin = subprocess.Popen(["java", *heap, f"-Xlog:gc:file={gc_log}:uptime", "-jar", ZIPKIN_JAR],
                                  stdout=zlog, stderr=subprocess.STDOUT,
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
                                     "--sampling-http-port", "0", "--sampling-grpc-port", "0",
                                     # Compaction off: its 30 s cycle lands inside some measuring
                                     # windows and not others (bench_allin.py counts it, all-in).
                                     "--compaction-interval", "0"],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(weft)
            wait_http(f"http://127.0.0.1:{http_port}/ready", weft, "weft")
            wefts[name] = (weft, zp if "zipkin" in name else otlp, zp)
        # Every server first takes the same load, unmeasured: the JVM's JIT, heap and full store,
        # weft's head block, maps and WAL segments (reused once the first ones are in blocks).
        loads = {"zipkin_server_json": (zipkin.pid, zport, "/api/v2/spans", "application/json", ztmpls),
                 "weft_zipkin_json": (wefts["weft_zipkin_json"][0].pid, wefts["weft_zipkin_json"][1],
                                      "/api/v2/spans", "application/json", ztmpls),
                 "weft_otlp_http": (wefts["weft_otlp_http"][0].pid, wefts["weft_otlp_http"][1],
                                    "/v1/traces", "application/x-protobuf", otmpls)}
        query_ports = {"zipkin_server_json": zport, "weft_zipkin_json": wefts["weft_zipkin_json"][2],
                       "weft_otlp_http": wefts["weft_otlp_http"][2]}
        # What each server costs doing nothing, before any load: charged to it in the whole-run
        # figures below, so it is reported beside them.
        c0, t0 = {k: cpu_seconds(load[0]) for k, load in loads.items()}, time.time()
        time.sleep(IDLE_SECONDS)
        idle = {k: (cpu_seconds(load[0]) - c0[k]) / (time.time() - t0) for k, load in loads.items()}
        for load in loads.values():
            drive(*load, args.warmup, client_counts[0])
        runs = {c: {k: [] for k in loads} for c in client_counts}
        whole = {}
        for c in client_counts:
            c0 = {k: cpu_seconds(load[0]) for k, load in loads.items()}
            # Rounds interleave the three, so drift in the shared host's speed hits each alike.
            for _ in range(args.rounds):
                for k, load in loads.items():
                    # After each window, the last trace each client had acknowledged is read back
                    # through that server's Zipkin API (weft's OTLP receiver's too): acknowledged
                    # means stored.
                    runs[c][k].append(drive(*load, args.seconds, c, query_ports[k], k))
            # Every CPU-second each server spent from the first round to the last, its windows and
            # the others' alike: work its spans caused after its window closed (a JVM's concurrent
            # marking, weft's block flushes) is charged to them too.
            whole[c] = {k: cpu_seconds(load[0]) - c0[k] for k, load in loads.items()}
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
    pauses = gc_pauses(gc_log)
    by_clients = {}
    for c, rc in runs.items():
        for r in rc["zipkin_server_json"]:
            a, b = (t - zipkin_started for t in r["window"])
            inside = [ms for at, ms in pauses if a <= at <= b]
            r["jvm_gc_pauses"], r["jvm_gc_pause_s"] = len(inside), round(sum(inside) / 1000, 2)
        out = {}
        for k, rs in rc.items():
            for r in rs:
                del r["window"]
            out[k] = {"rounds": rs, "median_spans_per_cpu_s": med([r["spans_per_cpu_s"] for r in rs])}
        z = [r["spans_per_cpu_s"] for r in rc["zipkin_server_json"]]
        w = [r["spans_per_cpu_s"] for r in rc["weft_zipkin_json"]]
        o = [r["spans_per_cpu_s"] for r in rc["weft_otlp_http"]]
        out["ratio_weft_zipkin_json_vs_zipkin_server"] = round(med([a / b for a, b in zip(w, z)]), 2)
        out["ratio_weft_zipkin_json_vs_weft_otlp"] = round(med([a / b for a, b in zip(w, o)]), 2)
        for k in rc:
            out[k]["whole_run_cpu_s"] = round(whole[c][k], 2)
            out[k]["idle_cpu_per_s"] = round(idle[k], 4)
        # Pooled: all rounds' spans over the CPU of their windows; whole run: over all the CPU
        # from the first round to the last.
        for form, cpu in (("pooled", lambda k, rs: sum(r["server_cpu_s"] for r in rs)),
                          ("whole_run", lambda k, rs: whole[c][k])):
            fig = {k: sum(r["spans"] for r in rs) / cpu(k, rs) for k, rs in rc.items()}
            for k, v in fig.items():
                out[k][f"{form}_spans_per_cpu_s"] = round(v)
            for other, key in (("zipkin_server", "zipkin_server_json"), ("weft_otlp", "weft_otlp_http")):
                out[f"{form}_ratio_weft_zipkin_json_vs_{other}"] = round(fig["weft_zipkin_json"] / fig[key], 2)
        by_clients[str(c)] = out
    # The first client count's figures at the top level, as before the sweep.
    results.update(by_clients[str(client_counts[0])])
    if len(client_counts) > 1:
        results["by_clients"] = by_clients
    emit(results, args.out)


if __name__ == "__main__":
    main()
