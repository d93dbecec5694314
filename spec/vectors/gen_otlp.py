#!/usr/bin/env python3
"""Generates spec/vectors/otlp.json: the exact OTLP bytes weft exporters produce.

The encoder below follows spec/otlp.md (ascending field numbers, defaults omitted, AnyValue oneof
always written). Every encoding is then checked against the official `opentelemetry-proto` Python
package: the official message built from the same span description must serialise to the same bytes,
and parsing our bytes must give an equal message.

Regenerate (from the repository root):

    python3 -m venv /tmp/specvenv
    /tmp/specvenv/bin/pip install opentelemetry-proto==1.45.2
    /tmp/specvenv/bin/python spec/vectors/gen_otlp.py            # rewrites otlp.json
    /tmp/specvenv/bin/python spec/vectors/gen_otlp.py --check    # fails if otlp.json is stale

Never edit otlp.json by hand; change the descriptions in this script and regenerate.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import struct
import sys

OUT = pathlib.Path(__file__).with_name("otlp.json")

KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
HAS_IS_REMOTE = 0x100
IS_REMOTE = 0x200


# --------------------------------------------------------------------------------------------
# A minimal protobuf writer.


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 two's complement, 10 bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def f_varint(field: int, n: int, omit_default: bool = True) -> bytes:
    if omit_default and n == 0:
        return b""
    return tag(field, 0) + varint(n)


def f_bytes(field: int, data: bytes, omit_default: bool = True) -> bytes:
    if omit_default and not data:
        return b""
    return tag(field, 2) + varint(len(data)) + data


def f_str(field: int, s: str, omit_default: bool = True) -> bytes:
    return f_bytes(field, s.encode("utf-8"), omit_default)


def f_msg(field: int, body: bytes) -> bytes:
    """A present message field: always written, even when empty."""
    return tag(field, 2) + varint(len(body)) + body


def f_fixed64(field: int, n: int) -> bytes:
    if n == 0:
        return b""
    return tag(field, 1) + struct.pack("<Q", n)


def f_fixed32(field: int, n: int) -> bytes:
    if n == 0:
        return b""
    return tag(field, 5) + struct.pack("<I", n)


# --------------------------------------------------------------------------------------------
# Encoding of the vector description format (see spec/README.md and spec/otlp.md).


def enc_any(v: dict) -> bytes:
    (kind, val), = v.items()
    if kind == "string":
        return f_str(1, val, omit_default=False)
    if kind == "bool":
        return f_varint(2, int(val), omit_default=False)
    if kind == "int":
        return f_varint(3, int(val), omit_default=False)
    if kind == "double":
        return tag(4, 1) + struct.pack("<d", float(val))
    if kind == "array":
        return f_msg(5, b"".join(f_msg(1, enc_any(x)) for x in val))
    if kind == "kvlist":
        return f_msg(6, b"".join(f_msg(1, enc_kv(x)) for x in val))
    if kind == "bytes":
        return f_bytes(7, bytes.fromhex(val), omit_default=False)
    raise ValueError(f"unknown value type {kind!r}")


def enc_kv(kv: dict) -> bytes:
    return f_str(1, kv["key"]) + f_msg(2, enc_any(kv["value"]))


def enc_attrs(field: int, attrs: list) -> bytes:
    return b"".join(f_msg(field, enc_kv(a)) for a in attrs)


def span_flags(trace_flags: str, remote: bool) -> int:
    return (int(trace_flags, 16) & 0xFF) | HAS_IS_REMOTE | (IS_REMOTE if remote else 0)


def enc_event(e: dict) -> bytes:
    return (
        f_fixed64(1, int(e["time_unix_nano"]))
        + f_str(2, e["name"])
        + enc_attrs(3, e.get("attributes", []))
        + f_varint(4, e.get("dropped_attributes_count", 0))
    )


def enc_link(l: dict) -> bytes:
    return (
        f_bytes(1, bytes.fromhex(l["trace_id"]))
        + f_bytes(2, bytes.fromhex(l["span_id"]))
        + f_str(3, l.get("trace_state", ""))
        + enc_attrs(4, l.get("attributes", []))
        + f_varint(5, l.get("dropped_attributes_count", 0))
        + f_fixed32(6, span_flags(l["trace_flags"], l["is_remote"]))
    )


def enc_status(st: dict | None) -> bytes:
    if not st:
        return b""
    code = STATUS[st.get("code", "UNSET")]
    msg = st.get("message", "")
    if code == 0 and not msg:
        return b""
    return f_msg(15, f_str(2, msg) + f_varint(3, code))


def enc_span(s: dict) -> bytes:
    return (
        f_bytes(1, bytes.fromhex(s["trace_id"]))
        + f_bytes(2, bytes.fromhex(s["span_id"]))
        + f_str(3, s.get("trace_state", ""))
        + f_bytes(4, bytes.fromhex(s.get("parent_span_id", "")))
        + f_str(5, s["name"])
        + f_varint(6, KIND[s["kind"]])
        + f_fixed64(7, int(s["start_time_unix_nano"]))
        + f_fixed64(8, int(s["end_time_unix_nano"]))
        + enc_attrs(9, s.get("attributes", []))
        + f_varint(10, s.get("dropped_attributes_count", 0))
        + b"".join(f_msg(11, enc_event(e)) for e in s.get("events", []))
        + f_varint(12, s.get("dropped_events_count", 0))
        + b"".join(f_msg(13, enc_link(l)) for l in s.get("links", []))
        + f_varint(14, s.get("dropped_links_count", 0))
        + enc_status(s.get("status"))
        + f_fixed32(16, span_flags(s["trace_flags"], s.get("parent_is_remote", False)))
    )


def enc_request(req: dict) -> bytes:
    res = req["resource"]
    resource = enc_attrs(1, res.get("attributes", [])) + f_varint(2, res.get("dropped_attributes_count", 0))
    scope_spans = b""
    for ss in req["scope_spans"]:
        sc = ss["scope"]
        scope = (
            f_str(1, sc.get("name", ""))
            + f_str(2, sc.get("version", ""))
            + enc_attrs(3, sc.get("attributes", []))
            + f_varint(4, sc.get("dropped_attributes_count", 0))
        )
        body = f_msg(1, scope) + b"".join(f_msg(2, enc_span(s)) for s in ss["spans"]) + f_str(3, ss.get("schema_url", ""))
        scope_spans += f_msg(2, body)
    rs = f_msg(1, resource) + scope_spans + f_str(3, res.get("schema_url", ""))
    return f_msg(1, rs)


def enc_response(partial: dict | None) -> bytes:
    if partial is None:
        return b""
    body = f_varint(1, partial.get("rejected_spans", 0)) + f_str(2, partial.get("error_message", ""))
    return f_msg(1, body)


# --------------------------------------------------------------------------------------------
# Cross-check with the official opentelemetry-proto package.


def official_request(req: dict):
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
    from opentelemetry.proto.common.v1 import common_pb2 as c

    def any_value(v: dict):
        (kind, val), = v.items()
        a = c.AnyValue()
        if kind == "string":
            a.string_value = val
        elif kind == "bool":
            a.bool_value = val
        elif kind == "int":
            a.int_value = int(val)
        elif kind == "double":
            a.double_value = float(val)
        elif kind == "bytes":
            a.bytes_value = bytes.fromhex(val)
        elif kind == "array":
            a.array_value.SetInParent()
            for x in val:
                a.array_value.values.append(any_value(x))
        elif kind == "kvlist":
            a.kvlist_value.SetInParent()
            for x in val:
                a.kvlist_value.values.append(kv(x))
        return a

    def kv(x: dict):
        return c.KeyValue(key=x["key"], value=any_value(x["value"]))

    out = ts.ExportTraceServiceRequest()
    rs = out.resource_spans.add()
    res = req["resource"]
    rs.resource.SetInParent()
    rs.resource.attributes.extend(kv(a) for a in res.get("attributes", []))
    rs.resource.dropped_attributes_count = res.get("dropped_attributes_count", 0)
    rs.schema_url = res.get("schema_url", "")
    for ss in req["scope_spans"]:
        oss = rs.scope_spans.add()
        sc = ss["scope"]
        oss.scope.SetInParent()
        oss.scope.name = sc.get("name", "")
        oss.scope.version = sc.get("version", "")
        oss.scope.attributes.extend(kv(a) for a in sc.get("attributes", []))
        oss.scope.dropped_attributes_count = sc.get("dropped_attributes_count", 0)
        oss.schema_url = ss.get("schema_url", "")
        for s in ss["spans"]:
            o = oss.spans.add()
            o.trace_id = bytes.fromhex(s["trace_id"])
            o.span_id = bytes.fromhex(s["span_id"])
            o.trace_state = s.get("trace_state", "")
            o.parent_span_id = bytes.fromhex(s.get("parent_span_id", ""))
            o.flags = span_flags(s["trace_flags"], s.get("parent_is_remote", False))
            o.name = s["name"]
            o.kind = KIND[s["kind"]]
            o.start_time_unix_nano = int(s["start_time_unix_nano"])
            o.end_time_unix_nano = int(s["end_time_unix_nano"])
            o.attributes.extend(kv(a) for a in s.get("attributes", []))
            o.dropped_attributes_count = s.get("dropped_attributes_count", 0)
            for e in s.get("events", []):
                oe = o.events.add()
                oe.time_unix_nano = int(e["time_unix_nano"])
                oe.name = e["name"]
                oe.attributes.extend(kv(a) for a in e.get("attributes", []))
                oe.dropped_attributes_count = e.get("dropped_attributes_count", 0)
            o.dropped_events_count = s.get("dropped_events_count", 0)
            for l in s.get("links", []):
                ol = o.links.add()
                ol.trace_id = bytes.fromhex(l["trace_id"])
                ol.span_id = bytes.fromhex(l["span_id"])
                ol.trace_state = l.get("trace_state", "")
                ol.attributes.extend(kv(a) for a in l.get("attributes", []))
                ol.dropped_attributes_count = l.get("dropped_attributes_count", 0)
                ol.flags = span_flags(l["trace_flags"], l["is_remote"])
            o.dropped_links_count = s.get("dropped_links_count", 0)
            st = s.get("status")
            if st and (STATUS[st.get("code", "UNSET")] or st.get("message")):
                o.status.code = STATUS[st.get("code", "UNSET")]
                o.status.message = st.get("message", "")
    return out


def verify_request(req: dict, ours: bytes) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts

    official = official_request(req)
    theirs = official.SerializeToString(deterministic=True)
    if theirs != ours:
        raise SystemExit(f"encoding differs from opentelemetry-proto:\nours   {ours.hex()}\ntheirs {theirs.hex()}")
    parsed = ts.ExportTraceServiceRequest.FromString(ours)
    if parsed != official:
        raise SystemExit("opentelemetry-proto parses our bytes into a different message")


def verify_response(partial: dict | None, ours: bytes) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts

    msg = ts.ExportTraceServiceResponse()
    if partial is not None:
        msg.partial_success.SetInParent()
        msg.partial_success.rejected_spans = partial.get("rejected_spans", 0)
        msg.partial_success.error_message = partial.get("error_message", "")
    if msg.SerializeToString(deterministic=True) != ours:
        raise SystemExit("response encoding differs from opentelemetry-proto")


# --------------------------------------------------------------------------------------------
# The spans.

S = lambda v: {"string": v}  # noqa: E731
I = lambda v: {"int": str(v)}  # noqa: E731
D = lambda v: {"double": v}  # noqa: E731
B = lambda v: {"bool": v}  # noqa: E731


def kv(k, v):
    return {"key": k, "value": v}


RESOURCE_BASIC = {"attributes": [kv("service.name", S("checkout"))]}

MINIMAL = {
    "resource": RESOURCE_BASIC,
    "scope_spans": [
        {
            "scope": {"name": "weft.test"},
            "spans": [
                {
                    "trace_id": "5b8efff798038103d269b633813fc60c",
                    "span_id": "eee19b7ec3c1b174",
                    "name": "root",
                    "kind": "INTERNAL",
                    "start_time_unix_nano": "1700000000000000000",
                    "end_time_unix_nano": "1700000000250000000",
                    "trace_flags": "03",
                    "parent_is_remote": False,
                }
            ],
        }
    ],
}

FULL = {
    "resource": {
        "attributes": [
            kv("service.name", S("checkout")),
            kv("service.version", S("1.4.2")),
            kv("host.cpu.count", I(8)),
            kv("deployment.environment.name", S("production")),
        ],
        "dropped_attributes_count": 1,
        "schema_url": "https://opentelemetry.io/schemas/1.26.0",
    },
    "scope_spans": [
        {
            "scope": {
                "name": "io.weft.http",
                "version": "0.3.0",
                "attributes": [kv("library.language", S("rust"))],
            },
            "schema_url": "https://opentelemetry.io/schemas/1.26.0",
            "spans": [
                {
                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "span_id": "00f067aa0ba902b7",
                    "trace_state": "ot=th:8,congo=t61rcWkgMzE",
                    "parent_span_id": "b7ad6b7169203331",
                    "name": "POST /checkout",
                    "kind": "SERVER",
                    "start_time_unix_nano": "1700000000123456789",
                    "end_time_unix_nano": "1700000000987654321",
                    "trace_flags": "03",
                    "parent_is_remote": True,
                    "attributes": [
                        kv("http.request.method", S("POST")),
                        kv("http.response.status_code", I(500)),
                        kv("retry.delta", I(-3)),
                        kv("zero.int", I(0)),
                        kv("server.load", D(0.75)),
                        kv("payment.amount", D(-1234.5)),
                        kv("cache.hit", B(True)),
                        kv("feature.enabled", B(False)),
                        kv("empty.string", S("")),
                        kv("unicode.text", S("grüße, 世界")),
                        kv("http.request.header.accept", {"array": [S("application/json"), S("text/plain")]}),
                        kv("retry.backoffs_ms", {"array": [I(100), I(200), I(400)]}),
                        kv("empty.array", {"array": []}),
                        kv(
                            "user",
                            {
                                "kvlist": [
                                    kv("id", I(42)),
                                    kv("roles", {"array": [S("admin"), S("ops")]}),
                                    kv("address", {"kvlist": [kv("city", S("Lyon"))]}),
                                ]
                            },
                        ),
                        kv("request.digest", {"bytes": "00ff10e0deadbeef"}),
                    ],
                    "dropped_attributes_count": 2,
                    "events": [
                        {
                            "time_unix_nano": "1700000000500000000",
                            "name": "exception",
                            "attributes": [
                                kv("exception.type", S("PaymentDeclined")),
                                kv("exception.message", S("card declined")),
                                kv("exception.escaped", B(False)),
                            ],
                            "dropped_attributes_count": 1,
                        }
                    ],
                    "dropped_events_count": 3,
                    "links": [
                        {
                            "trace_id": "0af7651916cd43dd8448eb211c80319c",
                            "span_id": "b9c7c989f97918e1",
                            "trace_state": "rojo=00f067aa0ba902b7",
                            "trace_flags": "01",
                            "is_remote": True,
                            "attributes": [kv("messaging.batch.index", I(7))],
                            "dropped_attributes_count": 1,
                        }
                    ],
                    "dropped_links_count": 4,
                    "status": {"code": "ERROR", "message": "payment failed"},
                }
            ],
        }
    ],
}

MULTI = {
    "resource": {
        "attributes": [kv("service.name", S("inventory")), kv("telemetry.sdk.name", S("weft"))],
    },
    "scope_spans": [
        {
            "scope": {"name": "io.weft.db", "version": "1.0.0"},
            "spans": [
                {
                    "trace_id": "0000000000000000a3ce929d0e0e4736",
                    "span_id": "1111111111111111",
                    "parent_span_id": "2222222222222222",
                    "name": "SELECT inventory.items",
                    "kind": "CLIENT",
                    "start_time_unix_nano": "1700000001000000000",
                    "end_time_unix_nano": "1700000001000001000",
                    "trace_flags": "01",
                    "parent_is_remote": False,
                    "attributes": [kv("db.system.name", S("postgresql"))],
                    "events": [{"time_unix_nano": "1700000001000000500", "name": "rows.fetched"}],
                    "status": {"code": "OK"},
                },
                {
                    "trace_id": "0000000000000000a3ce929d0e0e4736",
                    "span_id": "2222222222222222",
                    "parent_span_id": "3333333333333333",
                    "name": "reserve",
                    "kind": "INTERNAL",
                    "start_time_unix_nano": "1700000000900000000",
                    "end_time_unix_nano": "1700000001100000000",
                    "trace_flags": "01",
                    "parent_is_remote": True,
                },
            ],
        },
        {
            "scope": {"name": "io.weft.messaging"},
            "spans": [
                {
                    "trace_id": "6553f10089abcdeffedcba9876543210",
                    "span_id": "0123456789abcdef",
                    "name": "inventory.reserved publish",
                    "kind": "PRODUCER",
                    "start_time_unix_nano": "1700000001200000000",
                    "end_time_unix_nano": "1700000001300000000",
                    "trace_flags": "03",
                    "parent_is_remote": False,
                    "links": [
                        {
                            "trace_id": "0000000000000000a3ce929d0e0e4736",
                            "span_id": "2222222222222222",
                            "trace_flags": "01",
                            "is_remote": False,
                        }
                    ],
                    "status": {"code": "UNSET", "message": ""},
                }
            ],
        },
    ],
}

ENCODE = [
    ("encode/minimal-root-span", "One root INTERNAL span with no attributes, events, links or status: shows every omitted default, the always-written resource and scope, and flags 0x103.", MINIMAL),
    ("encode/full-server-span", "A SERVER span under a remote parent with every attribute type (string, int incl. negative and zero, double, bool, empty string, non-ASCII, arrays, nested kvlist, bytes, empty array), an event, a link, ERROR status, tracestate, dropped counts and schema URLs.", FULL),
    ("encode/two-scopes-three-spans", "Two scopes in first-appearance order, a local-parent child with an event without attributes and OK status, a remote-parent span without status, and a producer span with a local link (link flags 0x101).", MULTI),
]

STATIC = [
    # classify_response: HTTP
    *[
        {
            "name": f"retry/http/{code}",
            "description": f"HTTP {code} is {'retryable' if r else 'permanent'} (OTLP/HTTP retry table).",
            "operation": "classify_response",
            "input": {"transport": "http", "status": code, "headers": {}},
            "expected": {"outcome": "retryable" if r else ("success" if code < 300 else "permanent")},
        }
        for code, r in [(200, False), (400, False), (401, False), (403, False), (404, False), (413, False), (429, True), (500, False), (501, False), (502, True), (503, True), (504, True)]
    ],
    {
        "name": "retry/http/429-retry-after-seconds",
        "description": "A 429 with Retry-After: 3 is retried after exactly 3 s instead of the computed back-off.",
        "operation": "classify_response",
        "input": {"transport": "http", "status": 429, "headers": {"Retry-After": ["3"]}},
        "expected": {"outcome": "retryable", "delay_ms": 3000},
    },
    {
        "name": "retry/http/503-retry-after-date",
        "description": "A 503 with an HTTP-date Retry-After 7 s after the (injected) current time waits 7 s.",
        "operation": "classify_response",
        "input": {"transport": "http", "status": 503, "headers": {"Retry-After": ["Tue, 14 Nov 2023 22:13:27 GMT"]}, "now": "Tue, 14 Nov 2023 22:13:20 GMT"},
        "expected": {"outcome": "retryable", "delay_ms": 7000},
    },
    {
        "name": "retry/http/400-with-retry-after-is-permanent",
        "description": "Retry-After does not make a permanent status retryable.",
        "operation": "classify_response",
        "input": {"transport": "http", "status": 400, "headers": {"Retry-After": ["1"]}},
        "expected": {"outcome": "permanent"},
    },
    {
        "name": "retry/http/connection-refused",
        "description": "A connection failure without any HTTP status is retryable.",
        "operation": "classify_response",
        "input": {"transport": "http", "error": "connection_refused"},
        "expected": {"outcome": "retryable"},
    },
    # classify_response: gRPC
    *[
        {
            "name": f"retry/grpc/{code.lower()}",
            "description": f"gRPC {code} is {'retryable' if r else 'permanent'} (OTLP/gRPC retry table).",
            "operation": "classify_response",
            "input": {"transport": "grpc", "code": code},
            "expected": {"outcome": ("success" if code == "OK" else ("retryable" if r else "permanent"))},
        }
        for code, r in [
            ("OK", False), ("CANCELLED", True), ("UNKNOWN", False), ("INVALID_ARGUMENT", False),
            ("DEADLINE_EXCEEDED", True), ("NOT_FOUND", False), ("ALREADY_EXISTS", False),
            ("PERMISSION_DENIED", False), ("RESOURCE_EXHAUSTED", False), ("FAILED_PRECONDITION", False),
            ("ABORTED", True), ("OUT_OF_RANGE", True), ("UNIMPLEMENTED", False), ("INTERNAL", False),
            ("UNAVAILABLE", True), ("DATA_LOSS", True), ("UNAUTHENTICATED", False),
        ]
    ],
    {
        "name": "retry/grpc/resource_exhausted-with-retryinfo",
        "description": "RESOURCE_EXHAUSTED carrying google.rpc.RetryInfo{retry_delay: 2.5s} is retried after exactly 2.5 s.",
        "operation": "classify_response",
        "input": {"transport": "grpc", "code": "RESOURCE_EXHAUSTED", "retry_info_delay_ms": 2500},
        "expected": {"outcome": "retryable", "delay_ms": 2500},
    },
    {
        "name": "retry/grpc/unavailable-with-retryinfo",
        "description": "RetryInfo on a retryable status sets the delay.",
        "operation": "classify_response",
        "input": {"transport": "grpc", "code": "UNAVAILABLE", "retry_info_delay_ms": 1000},
        "expected": {"outcome": "retryable", "delay_ms": 1000},
    },
    # backoff
    *[
        {
            "name": f"backoff/retry-{k}",
            "description": f"Retry {k} sleeps uniformly in [c/2, c] with c = min(5 s, 1 s * 1.5^{k - 1}).",
            "operation": "backoff",
            "input": {"retry": k},
            "expected": {"min_ms": min(5000.0, 1000.0 * 1.5 ** (k - 1)) / 2, "max_ms": min(5000.0, 1000.0 * 1.5 ** (k - 1))},
        }
        for k in (1, 2, 3, 4)
    ],
    {
        "name": "backoff/no-fifth-retry",
        "description": "A batch gets at most 5 attempts: after the 4th retry fails it is dropped.",
        "operation": "backoff",
        "input": {"retry": 5},
        "expected": {"give_up": True},
    },
    # parse_retry_after
    *[
        {
            "name": f"retry-after/{name}",
            "description": desc,
            "operation": "parse_retry_after",
            "input": {"value": value, "now": "Tue, 14 Nov 2023 22:13:20 GMT"},
            "expected": {"delay_ms": delay},
        }
        for name, desc, value, delay in [
            ("seconds", "An integer number of seconds.", "120", 120000),
            ("zero", "Zero seconds means retry at once.", "0", 0),
            ("date-future", "An IMF-fixdate 60 s after now.", "Tue, 14 Nov 2023 22:14:20 GMT", 60000),
            ("date-past", "A date in the past means 0.", "Tue, 14 Nov 2023 22:00:00 GMT", 0),
            ("negative", "A negative number is not a valid Retry-After: ignored (null).", "-5", None),
            ("fraction", "Fractional seconds are not valid delay-seconds: ignored.", "1.5", None),
            ("garbage", "Anything else is ignored.", "soon", None),
            ("empty", "An empty value is ignored.", "", None),
        ]
    ],
]


def response_vectors() -> list:
    out = []
    for name, desc, partial, expected in [
        ("response/empty-body", "An empty 2xx body is a full success.", None, {"rejected_spans": 0, "error_message": "", "partial": False}),
        (
            "response/partial-rejected",
            "partial_success with rejected_spans = 3: not retried, 3 spans counted as rejected, message logged.",
            {"rejected_spans": 3, "error_message": "trace too large"},
            {"rejected_spans": 3, "error_message": "trace too large", "partial": True},
        ),
        (
            "response/partial-warning-only",
            "rejected_spans = 0 with a message is a warning, not a failure.",
            {"rejected_spans": 0, "error_message": "attribute values truncated"},
            {"rejected_spans": 0, "error_message": "attribute values truncated", "partial": True},
        ),
        (
            "response/empty-partial-success",
            "An empty partial_success message (all defaults) is a full success.",
            {},
            {"rejected_spans": 0, "error_message": "", "partial": False},
        ),
    ]:
        body = enc_response(partial)
        out.append((name, desc, partial, body, expected))
    return out


def build(verify: bool) -> dict:
    vectors = []
    for name, desc, req in ENCODE:
        data = enc_request(req)
        if verify:
            verify_request(req, data)
        vectors.append(
            {
                "name": name,
                "description": desc,
                "operation": "encode_request",
                "input": req,
                "expected": {"length": len(data), "hex": data.hex()},
            }
        )
    for name, desc, partial, body, expected in response_vectors():
        if verify:
            verify_response(partial, body)
        vectors.append(
            {
                "name": name,
                "description": desc,
                "operation": "decode_response",
                "input": {"hex": body.hex()},
                "expected": expected,
            }
        )
    vectors.extend(STATIC)
    return {
        "version": 1,
        "spec": "otlp.md",
        "description": "Exact ExportTraceServiceRequest bytes for fully specified spans, response decoding, retry classification and back-off. Generated by gen_otlp.py; do not edit by hand.",
        "generator": "spec/vectors/gen_otlp.py (verified against opentelemetry-proto 1.45.2)",
        "vectors": vectors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if otlp.json differs from what would be generated")
    ap.add_argument("--no-verify", action="store_true", help="skip the opentelemetry-proto cross-check")
    args = ap.parse_args()
    if not args.no_verify:
        try:
            import opentelemetry.proto  # noqa: F401
        except ImportError:
            print("opentelemetry-proto is not installed; see the module docstring, or pass --no-verify", file=sys.stderr)
            return 2
    text = json.dumps(build(verify=not args.no_verify), indent=2, ensure_ascii=False) + "\n"
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: regenerate it with gen_otlp.py", file=sys.stderr)
            return 1
        print(f"{OUT.name} is up to date")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(build(verify=False)['vectors'])} vectors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
