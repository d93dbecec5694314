"""Spans sent by real OTLP clients come back from the query API exactly as sent: from the head,
from a block, and after a restart; over protobuf and JSON, v1 and v2 APIs."""

from __future__ import annotations

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

from otlpdata import (
    ExportTraceServiceRequest,
    Span,
    assert_same_spans,
    canon_attrs,
    canon_spans,
    count_spans,
    key_values,
    new_trace_id,
    to_otlp_json,
    trace_ids_of,
)
from scenes import ALL_TYPES, RICH_ATTRS, rich_request, sdk_scene
from weftlib import SINGLE_TENANT, block_metas, parse_export_response, wait_for_block_spans

BLOCK_AGE = "3"  # long enough to read from the head first, short enough to wait for the cut


def verify_readback(srv, sent: ExportTraceServiceRequest, stage: str) -> None:
    """Every trace of `sent` reads back field for field, through v1/v2 x protobuf/JSON."""
    for tid in trace_ids_of(sent):
        expected, _ = canon_spans(sent, tid)
        for version in (1, 2):
            for protobuf in (True, False):
                how = f"{stage}, /api/{'v2/' if version == 2 else ''}traces as " \
                      f"{'protobuf' if protobuf else 'JSON'}, trace {tid.hex()}"
                td = srv.fetch_trace(tid, version=version, protobuf=protobuf)
                assert td is not None, f"{how}: 404"
                got, dups = canon_spans(td)
                assert not dups, f"{how}: span IDs returned more than once: {dups}"
                assert_same_spans(expected, got, how)


def block_span_total(srv) -> int:
    return sum(int(m["span_count"]) for _, m in block_metas(srv.data_dir, SINGLE_TENANT))


def head_block_restart(srv, sent: ExportTraceServiceRequest) -> None:
    n = count_spans(sent)
    verify_readback(srv, sent, "from the head")
    assert not block_metas(srv.data_dir), (
        f"a block was cut less than a second after the write although --block-max-age is "
        f"{BLOCK_AGE}s; the head read above is not known to have come from the head")
    wait_for_block_spans(srv, n)
    assert block_span_total(srv) == n, "blocks hold a different number of spans than were sent"
    verify_readback(srv, sent, "after the block cut")
    srv.restart()
    verify_readback(srv, sent, "after a restart")
    assert block_span_total(srv) == n, "blocks hold a different number of spans after the restart"


def check_scene_expectation(sent: ExportTraceServiceRequest, service: str) -> None:
    """Guard against a vacuous comparison: the expectation holds what the scene built."""
    assert count_spans(sent) == 6
    assert len(trace_ids_of(sent)) == 2
    spans = {c["name"]: c for c in canon_spans(sent)[0].values()}
    root = spans["GET /checkout/{id}"]
    assert root["attributes"] == canon_attrs(key_values(ALL_TYPES))
    assert ("service.name", ("string", service)) in root["resource"]["attributes"]
    assert root["scope"]["name"] == "weft.tests.checkout" and root["scope"]["version"] == "1.4.2"
    assert root["parent_span_id"] == ""
    pay = spans["POST payment"]
    assert pay["parent_span_id"] == root["span_id"]
    assert pay["status"] == {"code": 2, "message": "payment declined: card expired"}
    assert [e["name"] for e in pay["events"]] == ["payment.retry", "no-attributes", "exception"]
    assert len(pay["links"]) == 1 and pay["links"][0]["attributes"]
    assert sorted(c["kind"] for c in spans.values()) == [1, 1, 2, 3, 4, 5]
    assert spans["consume order"]["trace_state"] == "weft=t61rcWkgMzE,vendor2=opaque-9"


def test_sdk_grpc_exporter_roundtrip(weft_factory):
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    exporter = GrpcSpanExporter(endpoint=srv.grpc_target, insecure=True, timeout=10)
    sent = sdk_scene(exporter, "roundtrip-grpc")
    check_scene_expectation(sent, "roundtrip-grpc")
    assert srv.metric("weft_spans_received_total", tenant=SINGLE_TENANT) == count_spans(sent)
    head_block_restart(srv, sent)


def test_sdk_http_protobuf_exporter_roundtrip(weft_factory):
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    exporter = HttpSpanExporter(endpoint=srv.otlp_url, timeout=10, compression=HttpCompression.Gzip)
    sent = sdk_scene(exporter, "roundtrip-http")
    check_scene_expectation(sent, "roundtrip-http")
    assert srv.metric("weft_spans_received_total", tenant=SINGLE_TENANT) == count_spans(sent)
    head_block_restart(srv, sent)


def test_otlp_json_roundtrip(weft_factory):
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    sent = sdk_scene(None, "roundtrip-json")
    check_scene_expectation(sent, "roundtrip-json")
    # 64-bit integers as decimal strings (the canonical OTLP/JSON form)...
    r = srv.post_otlp(to_otlp_json(sent))
    assert r.status_code == 200, f"{r.status_code} {r.text[:500]}"
    assert "json" in r.headers.get("Content-Type", ""), \
        f"a JSON request must get a JSON answer, got Content-Type {r.headers.get('Content-Type')!r}"
    assert parse_export_response(r).partial_success.rejected_spans == 0
    # ...and as JSON numbers, with kvlist and bytes values, gzip-compressed.
    rich = rich_request(new_trace_id(), service="raw-json")
    r = srv.post_otlp(to_otlp_json(rich, numbers=True), gzip_body=True)
    assert r.status_code == 200, f"{r.status_code} {r.text[:500]}"
    assert parse_export_response(r).partial_success.rejected_spans == 0
    both = ExportTraceServiceRequest()
    both.MergeFrom(sent)
    both.MergeFrom(rich)
    head_block_restart(srv, both)


def test_kvlist_bytes_roundtrip_protobuf_and_grpc(weft_factory):
    srv = weft_factory("--block-max-age", BLOCK_AGE)
    over_http = rich_request(new_trace_id(), service="raw-http")
    over_grpc = rich_request(new_trace_id(), service="raw-grpc")
    spans = canon_spans(over_http)[0]
    root = next(c for c in spans.values() if c["name"] == "raw root")
    assert root["attributes"] == canon_attrs(key_values(RICH_ATTRS))
    assert dict(root["attributes"])["kvlist"][0] == "kvlist"
    assert dict(root["attributes"])["bytes"] == ("bytes", b"\x00\x01\x02\xfe\xff")

    srv.send(over_http, gzip_body=True)
    resp = srv.grpc_export(over_grpc, compression=grpc.Compression.Gzip)
    assert resp.partial_success.rejected_spans == 0
    both = ExportTraceServiceRequest()
    both.MergeFrom(over_http)
    both.MergeFrom(over_grpc)
    assert srv.metric("weft_spans_received_total", tenant=SINGLE_TENANT) == count_spans(both)
    head_block_restart(srv, both)


def test_head_survives_kill9_before_block_cut(weft_factory):
    """Acknowledged spans are replayed from the WAL after kill -9, then cut into a block."""
    srv = weft_factory("--block-max-age", "600")
    sent = rich_request(new_trace_id(), service="wal-replay")
    srv.send(sent)
    verify_readback(srv, sent, "from the head")
    srv.kill9()
    srv.start()
    verify_readback(srv, sent, "after kill -9 and WAL replay")
    srv.kill9()
    srv.start()
    verify_readback(srv, sent, "after a second kill -9 and WAL replay")
    srv.stop()
    srv.args = ["--block-max-age", "1"]
    srv.start()
    wait_for_block_spans(srv, count_spans(sent))
    assert block_span_total(srv) == count_spans(sent)
    verify_readback(srv, sent, "after replay and block cut")


def test_spans_of_one_trace_in_many_requests_and_blocks(weft_factory):
    """A trace whose spans arrive over several requests, before and after cuts, reads back whole."""
    srv = weft_factory("--block-max-age", "1")
    tid = new_trace_id()
    parts = [rich_request(tid, service=f"part-{i}") for i in range(3)]
    srv.send(parts[0])
    wait_for_block_spans(srv, count_spans(parts[0]))
    srv.send(parts[1], json_body=True)
    srv.grpc_export(parts[2])
    merged = ExportTraceServiceRequest()
    for p in parts:
        merged.MergeFrom(p)
    verify_readback(srv, merged, "spread over a block and the head")
    wait_for_block_spans(srv, count_spans(merged))
    verify_readback(srv, merged, "spread over several blocks")
    assert {s.kind for rs in merged.resource_spans for ss in rs.scope_spans for s in ss.spans} \
        >= {Span.SPAN_KIND_UNSPECIFIED, Span.SPAN_KIND_SERVER}
