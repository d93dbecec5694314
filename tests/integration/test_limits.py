"""Limits and bad input: the right refusal, a message naming the problem, counted in /metrics,
and the server keeps running and keeps serving what it already stored."""

from __future__ import annotations

import gzip
import json
import re
import socket
import subprocess
import time
import urllib.parse

import grpc
import pytest

from otlpdata import (
    make_request,
    make_span,
    new_span_id,
    new_trace_id,
    to_otlp_json,
)
from test_tempo_streaming import PB
from weftlib import PROTOBUF, SINGLE_TENANT, block_metas, parse_export_response, wait_for, wait_for_block_spans

REFUSED = "weft_spans_refused_total"


def small_request(tid: bytes | None = None, n: int = 3, service: str = "limits"):
    tid = tid or new_trace_id()
    now = time.time_ns()
    return make_request([make_span(tid, name=f"small-{i}", start=now + i) for i in range(n)],
                        service=service)


def padded_request(tid: bytes, n: int, pad: int, name: str = "padded"):
    """n spans of trace tid, each carrying a `pad`-character attribute."""
    now = time.time_ns()
    return make_request([make_span(tid, name=f"{name}-{i}", start=now + i,
                                   attributes={"pad": "x" * pad, "i": i}) for i in range(n)])


def span_ids(td) -> set[bytes]:
    return {sp.span_id for rs in td.resource_spans for ss in rs.scope_spans for sp in ss.spans}


def all_span_ids(req) -> list[bytes]:
    return [sp.span_id for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans]


def assert_still_serving(srv, tid: bytes, n: int) -> None:
    srv.assert_alive()
    r = srv.get("/ready")
    assert r.status_code == 200, f"/ready -> {r.status_code} after refusals"
    td = srv.fetch_trace(tid)
    assert td is not None and len(span_ids(td)) == n, "an earlier trace is no longer served"


def names_limit(text: str, number: int, flag: str) -> bool:
    t = text.lower()
    return str(number) in t or flag in t or flag.replace("-", "_") in t


# ------------------------------------------------------------------------------------------------


def test_request_body_limit(weft_factory):
    limit = 65536
    srv = weft_factory("--max-request-bytes", str(limit))
    good = small_request()
    srv.send(good)

    big = padded_request(new_trace_id(), 4, 20_000)
    body = big.SerializeToString()
    assert len(body) > limit
    r = srv.post_otlp(body)
    assert r.status_code == 413, f"{len(body)}-byte body: {r.status_code} {r.content[:300]!r}"
    assert names_limit(r.content.decode("utf-8", "replace"), limit, "max-request-bytes"), \
        f"413 message does not name the limit: {r.content[:300]!r}"

    r = srv.post_otlp(to_otlp_json(big))
    assert r.status_code == 413, f"JSON body: {r.status_code} {r.content[:300]!r}"

    # Chunked upload without Content-Length: the limit holds while streaming too.
    def chunks():
        for i in range(0, len(body), 8192):
            yield body[i:i + 8192]
    r = srv.http.post(srv.otlp_url, data=chunks(), headers={"Content-Type": PROTOBUF}, timeout=15)
    assert r.status_code == 413, f"chunked body: {r.status_code} {r.content[:300]!r}"

    with pytest.raises(grpc.RpcError) as e:
        srv.grpc_export(big)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
    assert names_limit(e.value.details() or "", limit, "max-request-bytes"), e.value.details()

    # Just under the limit is fine.
    fits = padded_request(new_trace_id(), 2, 30_000)
    assert len(fits.SerializeToString()) < limit
    srv.send(fits)

    assert srv.fetch_trace(big.resource_spans[0].scope_spans[0].spans[0].trace_id) is None
    assert_still_serving(srv, good.resource_spans[0].scope_spans[0].spans[0].trace_id, 3)
    assert (srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="request_too_large") or 0) > 0


def test_decompression_bomb(weft_factory):
    limit = 1 << 20
    srv = weft_factory("--max-request-bytes", str(limit // 4), "--max-decompressed-bytes", str(limit))
    good = small_request()
    srv.send(good, gzip_body=True)

    bomb = padded_request(new_trace_id(), 1, 3 * limit)  # valid OTLP, 3 MiB inflated
    raw = bomb.SerializeToString()
    packed = gzip.compress(raw)
    assert len(packed) < 64 * 1024 < limit < len(raw)
    r = srv.post_otlp(packed, headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413, f"gzip bomb: {r.status_code} {r.content[:300]!r}"
    assert names_limit(r.content.decode("utf-8", "replace"), limit, "max-decompressed-bytes") \
        or "decompress" in r.content.decode("utf-8", "replace").lower(), r.content[:300]

    r = srv.post_otlp(gzip.compress(json.dumps(to_otlp_json(bomb)).encode()),
                      content_type="application/json", headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413, f"JSON gzip bomb: {r.status_code} {r.content[:300]!r}"

    # A plain bomb of zeros (not even OTLP) is refused for its size, not parsed.
    r = srv.post_otlp(gzip.compress(b"\0" * (8 * limit)), headers={"Content-Encoding": "gzip"})
    assert r.status_code == 413, f"zeros bomb: {r.status_code} {r.content[:300]!r}"

    with pytest.raises(grpc.RpcError) as e:
        srv.grpc_export(bomb, compression=grpc.Compression.Gzip)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value

    assert srv.fetch_trace(bomb.resource_spans[0].scope_spans[0].spans[0].trace_id) is None
    assert_still_serving(srv, good.resource_spans[0].scope_spans[0].spans[0].trace_id, 3)


def test_trace_size_limit(weft_factory):
    """Spans past --max-trace-bytes are refused; what was stored stays readable.

    Spans over the limit are valid data the server will not keep: OTLP answers them with a
    partial success (HTTP 200 / gRPC OK naming the rejected count), also when that is every
    span of the request, on both transports alike. Whether the spans of one trace within one
    request are refused one by one or together is left to the server."""
    srv = weft_factory("--max-trace-bytes", "20000")
    tid = new_trace_id()
    first = padded_request(tid, 5, 1000, name="first")
    srv.send(first)  # ~5.5 kB: fits
    refused = 0

    second = padded_request(tid, 30, 1000, name="second")  # ~33 kB more: not all of it fits
    r = srv.post_otlp(second)
    assert r.status_code == 200, f"over the trace limit: {r.status_code} {r.content[:300]!r}"
    ps = parse_export_response(r).partial_success
    assert 0 < ps.rejected_spans <= 30, f"expected spans of 30 rejected: {ps}"
    assert "trace too large" in ps.error_message.lower(), ps.error_message
    rejected = ps.rejected_spans
    refused += rejected

    td = srv.fetch_trace(tid)
    got = span_ids(td)
    assert set(all_span_ids(first)) <= got, "spans stored before the limit was reached were lost"
    assert len(got) == 5 + 30 - rejected, f"{len(got)} spans readable, expected {5 + 30 - rejected}"
    assert got <= set(all_span_ids(first)) | set(all_span_ids(second))

    # Fill the trace one span at a time until a request is refused whole: 200 with a partial
    # success rejecting its one span.
    for fills in range(25):
        one = padded_request(tid, 1, 1000, name=f"fill{fills}")
        r = srv.post_otlp(one)
        assert r.status_code == 200, f"{r.status_code} {r.content[:300]!r}"
        ps = parse_export_response(r).partial_success
        if ps.rejected_spans:
            assert ps.rejected_spans == 1 and "trace too large" in ps.error_message.lower(), ps
            refused += 1
            break
        got |= set(all_span_ids(one))
    else:
        raise AssertionError("25 more 1 kB spans were accepted into a trace limited to 20000 bytes")
    assert span_ids(srv.fetch_trace(tid)) == got, "a refused request changed the stored trace"
    stored_before = len(got)

    def mixed(n_full: int, name: str):
        """n_full spans for the full trace plus 2 for a new trace, in one request."""
        other = new_trace_id()
        req = padded_request(tid, n_full, 1000, name=name)
        req.resource_spans[0].scope_spans[0].spans.extend(
            small_request(other, 2).resource_spans[0].scope_spans[0].spans)
        return other, req

    # Protobuf over HTTP: 200 with a partial success naming the count.
    other, req = mixed(3, "mixed-proto")
    r = srv.post_otlp(req)
    assert r.status_code == 200, f"{r.status_code} {r.content[:300]!r}"
    ps = parse_export_response(r).partial_success
    assert ps.rejected_spans == 3 and "trace too large" in ps.error_message.lower(), ps
    assert len(span_ids(srv.fetch_trace(other))) == 2
    refused += 3

    # JSON: the partial success in JSON, rejectedSpans as a string or a number.
    other, req = mixed(4, "mixed-json")
    r = srv.post_otlp(to_otlp_json(req))
    assert r.status_code == 200, f"{r.status_code} {r.content[:300]!r}"
    assert "json" in r.headers.get("Content-Type", "")
    body = r.json()
    assert int(body["partialSuccess"]["rejectedSpans"]) == 4, body
    assert "trace too large" in body["partialSuccess"]["errorMessage"].lower(), body
    assert len(span_ids(srv.fetch_trace(other))) == 2
    refused += 4

    # gRPC: OK with partial_success, also when every span is refused.
    other, req = mixed(2, "mixed-grpc")
    resp = srv.grpc_export(req)
    assert resp.partial_success.rejected_spans == 2, resp
    assert "trace too large" in resp.partial_success.error_message.lower(), resp
    assert len(span_ids(srv.fetch_trace(other))) == 2
    resp = srv.grpc_export(padded_request(tid, 3, 1000, name="grpc-full"))
    assert resp.partial_success.rejected_spans == 3, resp
    refused += 2 + 3

    # Every span over the limit, over HTTP in both encodings: the same answer as gRPC.
    r = srv.post_otlp(padded_request(tid, 2, 1000, name="http-full"))
    assert r.status_code == 200, f"{r.status_code} {r.content[:300]!r}"
    ps = parse_export_response(r).partial_success
    assert ps.rejected_spans == 2 and "trace too large" in ps.error_message.lower(), ps
    r = srv.post_otlp(to_otlp_json(padded_request(tid, 2, 1000, name="json-full")))
    assert r.status_code == 200, f"{r.status_code} {r.content[:300]!r}"
    assert int(r.json()["partialSuccess"]["rejectedSpans"]) == 2, r.json()
    refused += 4

    assert len(span_ids(srv.fetch_trace(tid))) == stored_before
    assert srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="trace_too_large") == refused

    srv.restart()
    assert span_ids(srv.fetch_trace(tid)) == got, "the trace changed across a restart"


def test_trace_size_limit_takes_a_trace_whole_within_a_request(weft_factory):
    """An SDK's batch holds spans in the order they ended, so one trace's spans come in runs
    between other traces' spans. The limit counts all of a trace's spans in a request together:
    here each run of trace A fits the limit and both do not, so every span of A is refused, and
    the other trace's spans between them are kept."""
    srv = weft_factory("--max-trace-bytes", "12000")
    a, b = new_trace_id(), new_trace_id()
    req = padded_request(a, 8, 1000, name="a-first")  # ~9 kB: fits alone
    spans = req.resource_spans[0].scope_spans[0].spans
    spans.extend(small_request(b, 2).resource_spans[0].scope_spans[0].spans)
    spans.extend(padded_request(a, 8, 1000, name="a-second").resource_spans[0].scope_spans[0].spans)
    r = srv.post_otlp(req)
    assert r.status_code == 200, f"{r.status_code} {r.content[:300]!r}"
    ps = parse_export_response(r).partial_success
    assert ps.rejected_spans == 16, f"both runs of the oversized trace must be refused: {ps}"
    assert "trace too large" in ps.error_message.lower(), ps.error_message
    assert srv.fetch_trace(a) is None, "part of the refused trace was stored"
    assert len(span_ids(srv.fetch_trace(b))) == 2
    assert srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="trace_too_large") == 16


def test_rate_limit(weft_factory):
    srv = weft_factory("--ingestion-rate-bytes", "2000", "--ingestion-burst-bytes", "20000")
    req = padded_request(new_trace_id(), 4, 1000, name="rate")  # ~4.5 kB
    ok = 0
    limited = None
    refused_spans = 0
    for _ in range(20):
        r = srv.post_otlp(make_fresh(req))
        if r.status_code == 200:
            ok += 1
            continue
        assert r.status_code == 429, f"over the rate: {r.status_code} {r.content[:300]!r}"
        limited = r
        refused_spans += 4
        break
    assert ok >= 1, "the burst allowance let no request through"
    assert limited is not None, "20 requests of 4.5 kB against a 20 kB burst were never limited"
    retry_after = limited.headers.get("Retry-After")
    assert retry_after is not None and retry_after.strip().isdigit() and int(retry_after) >= 1, \
        f"429 without a usable Retry-After: {retry_after!r}"

    # The bucket is per tenant, shared by the receivers: gRPC is refused too.
    code = None
    for _ in range(20):
        try:
            srv.grpc_export(make_fresh(req))
        except grpc.RpcError as e:
            code = e.code()
            refused_spans += 4
            break
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, f"gRPC over the rate: {code}"

    assert (srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="rate_limited") or 0) > 0

    # After waiting as told, the tenant may write again.
    deadline = time.monotonic() + 20
    wait = int(retry_after)
    while True:
        assert wait <= 15, f"Retry-After {wait}s for a 4.5 kB request at 2000 B/s"
        time.sleep(wait + 0.2)
        r = srv.post_otlp(make_fresh(req))
        if r.status_code == 200:
            break
        assert r.status_code == 429, f"after Retry-After: {r.status_code} {r.content[:300]!r}"
        assert time.monotonic() < deadline, "still limited 20 s after the first 429"
        wait = int(r.headers.get("Retry-After", "1"))
    srv.assert_alive()


def make_fresh(req):
    """The same request with new span IDs (so every request is new data)."""
    out = type(req)()
    out.CopyFrom(req)
    for rs in out.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                sp.span_id = new_span_id()
    return out


MALFORMED_PROTOBUF = [
    b"\x0a\x10\x01",                 # field 1 claims 16 bytes, 1 follows
    b"\xff\xff\xff\xff\xff\xff",     # unterminated varint tag
    b"\x0a\x04\x12\x05\x00\x00",     # nested length (5) overruns its parent (4)
    b"\x0f\x00",                     # wire type 7 does not exist
]


def test_bad_input(weft_factory):
    srv = weft_factory()
    good = small_request(n=4)
    good_tid = good.resource_spans[0].scope_spans[0].spans[0].trace_id
    srv.send(good)

    for body in MALFORMED_PROTOBUF:
        r = srv.post_otlp(body)
        assert r.status_code == 400, f"malformed protobuf {body!r}: {r.status_code} {r.content[:300]!r}"
        assert re.search(rb"invalid\b.*\bprotobuf", r.content.lower()), \
            f"message does not name the problem: {r.content[:300]!r}"

    for body in (b'{"resourceSpans": [', b"not json at all", b'{"resourceSpans": 7}'):
        r = srv.post_otlp(body, content_type="application/json")
        assert r.status_code == 400, f"malformed JSON {body!r}: {r.status_code} {r.content[:300]!r}"
        assert re.search(rb"invalid\b.*\bjson", r.content.lower()), \
            f"message does not name the problem: {r.content[:300]!r}"

    bad_ids = to_otlp_json(small_request(n=1))
    bad_ids["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "not-hex-at-all"
    r = srv.post_otlp(bad_ids)
    assert r.status_code == 400, f"JSON with a non-hex trace ID: {r.status_code} {r.content[:300]!r}"

    short_id = small_request(n=1)
    short_id.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01\x02\x03\x04\x05"
    r = srv.post_otlp(short_id)
    assert r.status_code == 400, f"protobuf with a 5-byte trace ID: {r.status_code} {r.content[:300]!r}"

    r = srv.post_otlp(b"\x1f\x8b\x08\x00garbage", headers={"Content-Encoding": "gzip"})
    assert r.status_code == 400, f"broken gzip: {r.status_code} {r.content[:300]!r}"

    r = srv.post_otlp(good.SerializeToString(), content_type="text/plain")
    assert r.status_code == 415, f"text/plain: {r.status_code} {r.content[:300]!r}"

    # Empty requests are valid OTLP.
    r = srv.post_otlp(b"")
    assert r.status_code == 200, f"empty protobuf request: {r.status_code} {r.content[:300]!r}"
    r = srv.post_otlp({})
    assert r.status_code == 200, f"empty JSON request: {r.status_code} {r.content[:300]!r}"

    for body in MALFORMED_PROTOBUF:
        with pytest.raises(grpc.RpcError) as e:
            srv.grpc_export_raw(body)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, f"gRPC garbage {body!r}: {e.value}"

    assert_still_serving(srv, good_tid, 4)
    assert (srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="invalid") or 0) > 0
    assert srv.metric("weft_spans_received_total", tenant=SINGLE_TENANT) == 4
    srv.restart()  # the WAL was not corrupted by any of it
    assert_still_serving(srv, good_tid, 4)


def test_refusals_never_answer_500(weft_factory):
    """A burst of mixed good and bad requests from several clients: only 200/400/413/415."""
    import concurrent.futures

    srv = weft_factory("--max-request-bytes", "65536")
    too_big = padded_request(new_trace_id(), 4, 20_000).SerializeToString()

    def one(i: int) -> int:
        from weftlib import http_session
        body, ctype = [
            (small_request().SerializeToString(), PROTOBUF),  # new spans every time
            (MALFORMED_PROTOBUF[i % len(MALFORMED_PROTOBUF)], PROTOBUF),
            (too_big, PROTOBUF),
            (b"{", "application/json"),
        ][i % 4]
        with http_session() as s:
            r = s.post(srv.otlp_url, data=body, headers={"Content-Type": ctype}, timeout=15)
            return r.status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(one, range(64)))
    assert set(codes) <= {200, 400, 413}, f"answers: {sorted(set(codes))}"
    assert codes.count(200) == 16
    srv.assert_alive()
    assert srv.metric("weft_spans_received_total", tenant=SINGLE_TENANT) == 16 * 3
    assert (srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="request_too_large") or 0) > 0
    assert (srv.metric(REFUSED, tenant=SINGLE_TENANT, reason="invalid") or 0) > 0


def test_a_query_whose_client_went_away_stops_reading(weft_factory, weft_bin):
    """A client that gives up on a query (Grafana cancels the previous search as the user types;
    a script times out) must not leave the query reading on: on each query API, a heavy query
    is started and its connection closed early, and the server's CPU must then fall idle while
    the whole query, run to its end, keeps a core busy for seconds. Before, Jaeger's and
    Zipkin's searches ran to their end on a task of their own, and a streamed gRPC search that
    had found nothing new to send noticed only at its end."""
    srv = weft_factory("--query-parallelism", "1", "--compaction-interval", "0", "--block-max-age", "1")
    subprocess.run([str(weft_bin), "loadgen", "--endpoint", srv.grpc_target, "--realistic",
                    "--max-spans", "400000", "--seed", "3", "--duration", "300"],
                   check=True, capture_output=True, timeout=300)
    # Every span in a block before anything is measured: no cut runs beside the queries.
    wait_for_block_spans(srv, 400_000, timeout=120)
    now = int(time.time())
    nothing = '{ span.http.url =~ ".*no-such.*" }'  # matches each span's URL, finds none
    tempo = "/api/search?" + urllib.parse.urlencode({"q": nothing, "start": now - 7200, "end": now + 60,
                                                     "limit": 20})
    jaeger = "/api/traces?" + urllib.parse.urlencode({"service": "frontend", "limit": 10000,
                                                      "lookback": "3h", "tags": '{"no.such":"tag"}'})
    zipkin = "/api/v2/traces?" + urllib.parse.urlencode({"serviceName": "frontend", "limit": 10000,
                                                         "lookback": 10_800_000, "endTs": (now + 60) * 1000,
                                                         "annotationQuery": "no.such=tag"})
    ports = {"tempo": srv.http_port, "jaeger": srv.jaeger_query_port, "zipkin": srv.zipkin_port}
    paths = {"tempo": tempo, "jaeger": jaeger, "zipkin": zipkin}

    def cpu() -> float:
        return srv.metric("process_cpu_seconds_total")

    def grpc_search(timeout: float) -> None:
        channel = grpc.insecure_channel(f"127.0.0.1:{srv.http_port}")
        try:
            call = channel.unary_stream("/tempopb.StreamingQuerier/Search",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=PB["SearchResponse"].FromString)
            list(call(PB["SearchRequest"](Query=nothing, Limit=20, start=now - 7200, end=now + 60,
                                           SpansPerSpanSet=3), timeout=timeout))
        finally:
            channel.close()

    def run(api: str, cancel_after: float | None) -> None:
        """The query, to its end, or with its connection closed (the call cancelled) after
        `cancel_after` seconds."""
        if api == "grpc":
            try:
                grpc_search(cancel_after or 300)
            except grpc.RpcError as e:
                assert cancel_after and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
            return
        s = socket.create_connection(("127.0.0.1", ports[api]))
        s.sendall(f"GET {paths[api]} HTTP/1.1\r\nHost: weft\r\nConnection: close\r\n\r\n".encode())
        if cancel_after is None:
            s.settimeout(300)
            head = s.recv(64)
            assert head.startswith(b"HTTP/1.1 200"), (api, head)
            while s.recv(1 << 16):
                pass
        else:
            time.sleep(cancel_after)
            running = srv.metric("weft_queries_running", tenant=SINGLE_TENANT)
            assert running == 1, f"{api}: weft_queries_running is {running} while the query runs"
        s.close()

    # CPU time, not wall time, says how much work is left: the query runtime is niced, so on a
    # busy machine a query may take far longer than its CPU time. Contention can only make
    # the check below pass when it should not, never fail when it should not.
    for api in ["tempo", "grpc", "jaeger", "zipkin"]:
        c0 = cpu()
        run(api, None)
        whole_cpu = cpu() - c0
        assert whole_cpu > 2.5, f"{api}: the query took {whole_cpu:.2f} CPU-s; too little data to tell"
        # At most 1 CPU-s is spent by the time the client has gone for 0.5 s; at least 1.5
        # remain, which a query that reads on spends in the next 2 s on an idle core.
        run(api, 0.5)
        # (A tenant holding no slot and waiting for none has no sample.)
        wait_for(lambda: not srv.metric("weft_queries_running", tenant=SINGLE_TENANT), 3,
                 f"{api}: the query's slot given back after its client went away")
        time.sleep(0.5)
        c1 = cpu()
        time.sleep(2)
        after = cpu() - c1
        assert after < 0.3, (
            f"{api}: {after:.2f} CPU-s in the 2 s after the client went away "
            f"(the whole query: {whole_cpu:.1f} CPU-s): it read on")


def test_a_query_past_query_timeout_is_stopped_with_a_504(weft_factory, weft_bin):
    """`--query-timeout`: a query still reading when it runs out is answered 504 (gRPC:
    DEADLINE_EXCEEDED) with a message naming the flag, on every query API, and its work stops
    (the process falls idle) instead of reading on."""
    # Every span stays in the head, which is scanned on the query's own task (not the query
    # workers) and yields between chunks of traces.
    srv = weft_factory("--query-parallelism", "1", "--compaction-interval", "0", "--query-timeout", "0.5",
                       "--block-max-age", "3600", "--block-max-spans", "10000000",
                       "--block-max-bytes", str(1 << 30))
    subprocess.run([str(weft_bin), "loadgen", "--endpoint", srv.grpc_target, "--realistic",
                    "--max-spans", "200000", "--seed", "4", "--duration", "300", "--time-range-secs", "600"],
                   check=True, capture_output=True, timeout=300)
    now = int(time.time())
    slow = '{ span.http.url =~ ".*no-such.*" }'
    window = {"start": now - 7200, "end": now + 60}
    calls = {
        "tempo search": lambda: srv.get("/api/search", params={"q": slow, **window}, timeout=60),
        "tempo metrics": lambda: srv.get("/api/metrics/query_range",
                                         params={"q": "{ } >> " + slow + " | rate()", "step": "60", **window},
                                         timeout=60),
        "jaeger": lambda: srv.http.get(f"{srv.jaeger}/api/traces", params={
            "service": "frontend", "limit": 10000, "lookback": "3h", "tags": '{"no.such":"tag"}'}, timeout=60),
        "zipkin": lambda: srv.http.get(f"{srv.zipkin}/api/v2/traces", params={
            "serviceName": "frontend", "limit": 10000, "lookback": 10_800_000, "endTs": (now + 60) * 1000,
            "annotationQuery": "no.such=tag"}, timeout=60),
    }
    for api, call in calls.items():
        t0 = time.monotonic()
        r = call()
        took = time.monotonic() - t0
        assert r.status_code == 504 and "--query-timeout" in r.text, (api, r.status_code, r.text[:300])
        assert took < 10, f"{api}: answered after {took:.1f} s"
        time.sleep(0.5)  # the piece of work running at the time ends
        c1 = srv.metric("process_cpu_seconds_total")
        time.sleep(1.5)
        after = srv.metric("process_cpu_seconds_total") - c1
        assert after < 0.3, f"{api}: {after:.2f} CPU-s in the 1.5 s after the 504: the query read on"
    channel = grpc.insecure_channel(f"127.0.0.1:{srv.http_port}")
    try:
        call = channel.unary_stream("/tempopb.StreamingQuerier/Search",
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=PB["SearchResponse"].FromString)
        with pytest.raises(grpc.RpcError) as e:
            list(call(PB["SearchRequest"](Query=slow, Limit=20, SpansPerSpanSet=3, **window), timeout=60))
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "--query-timeout" in e.value.details()
    finally:
        channel.close()
    assert not block_metas(srv.data_dir), "a block was cut: the head was not what was read"
    # A quick query is unaffected.
    r = srv.get("/api/search", params={"q": '{ resource.service.name = "frontend" }', "limit": 5,
                                       "start": now - 120, "end": now + 60})
    assert r.status_code == 200 and len(r.json()["traces"]) == 5, r.text[:300]
