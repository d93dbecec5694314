"""OTLP data helpers for the integration tests.

* build OTLP protobuf requests by hand (every AnyValue kind, links, events, flags, ...);
* convert a request to OTLP/JSON (hex IDs, camelCase, enums as ints) for posting;
* parse weft's OTLP/JSON answers strictly (hex IDs, decimal-string 64-bit ints, int enums);
* reduce any TracesData to a canonical, order-independent form keyed by span ID, so that what was
  sent and what was read back can be compared field by field.
"""

from __future__ import annotations

import base64
import copy
import os
import re
from typing import Any, Iterable

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import (
    ResourceSpans,
    ScopeSpans,
    Span,
    Status,
    TracesData,
)

__all__ = [
    "AnyValue", "ArrayValue", "ExportTraceServiceRequest", "ExportTraceServiceResponse",
    "InstrumentationScope", "KeyValue", "KeyValueList", "Resource", "ResourceSpans", "ScopeSpans",
    "Span", "Status", "TracesData",
]

# --------------------------------------------------------------------------------------------
# IDs
# --------------------------------------------------------------------------------------------


def new_trace_id() -> bytes:
    while True:
        tid = os.urandom(16)
        if any(tid):
            return tid


def new_span_id() -> bytes:
    while True:
        sid = os.urandom(8)
        if any(sid):
            return sid


# --------------------------------------------------------------------------------------------
# Building protobuf values
# --------------------------------------------------------------------------------------------


def any_value(v: Any) -> AnyValue:
    """Python value -> AnyValue. bytes -> bytes_value, dict -> kvlist, list/tuple -> array,
    None -> an AnyValue with no value set."""
    out = AnyValue()
    if v is None:
        pass
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int):
        out.int_value = v
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, (bytes, bytearray)):
        out.bytes_value = bytes(v)
    elif isinstance(v, dict):
        out.kvlist_value.SetInParent()
        out.kvlist_value.values.extend(key_values(v))
    elif isinstance(v, (list, tuple)):
        out.array_value.SetInParent()
        out.array_value.values.extend(any_value(x) for x in v)
    else:
        raise TypeError(f"unsupported attribute value {v!r}")
    return out


def key_values(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def make_span(
    trace_id: bytes,
    span_id: bytes | None = None,
    *,
    parent: bytes = b"",
    name: str = "span",
    kind: int = Span.SPAN_KIND_INTERNAL,
    start: int,
    end: int | None = None,
    attributes: dict[str, Any] | None = None,
    **fields: Any,
) -> Span:
    span = Span(
        trace_id=trace_id,
        span_id=span_id or new_span_id(),
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_time_unix_nano=start,
        end_time_unix_nano=end if end is not None else start + 1_000_000,
        attributes=key_values(attributes or {}),
        **fields,
    )
    return span


def make_request(
    spans: Iterable[Span],
    *,
    service: str = "weft-tests",
    resource_attrs: dict[str, Any] | None = None,
    scope_name: str = "weft.tests",
    scope_version: str = "1.0.0",
) -> ExportTraceServiceRequest:
    attrs = {"service.name": service}
    attrs.update(resource_attrs or {})
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=key_values(attrs)),
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(name=scope_name, version=scope_version),
                        spans=list(spans),
                    )
                ],
            )
        ]
    )


def count_spans(msg) -> int:
    return sum(len(ss.spans) for rs in msg.resource_spans for ss in rs.scope_spans)


# --------------------------------------------------------------------------------------------
# OTLP/JSON encoding (what a client posts)
# --------------------------------------------------------------------------------------------

_ID_FIELDS_SPAN = ("traceId", "spanId", "parentSpanId")
_ID_FIELDS_LINK = ("traceId", "spanId")


def _b64_to_hex(s: str) -> str:
    return base64.b64decode(s).hex()


def _walk_values(value: dict, fn) -> None:
    """Apply fn to every AnyValue dict in a (JSON) AnyValue tree, depth first."""
    fn(value)
    if "arrayValue" in value:
        for v in value["arrayValue"].get("values", []):
            _walk_values(v, fn)
    if "kvlistValue" in value:
        for kv in value["kvlistValue"].get("values", []):
            _walk_values(kv.get("value", {}), fn)


def _walk_attr_lists(rs_list: list[dict]):
    """Yield every attribute list (a list of {"key","value"}) in resourceSpans JSON."""
    for rs in rs_list:
        yield rs.get("resource", {}).get("attributes", [])
        for ss in rs.get("scopeSpans", []):
            yield ss.get("scope", {}).get("attributes", [])
            for sp in ss.get("spans", []):
                yield sp.get("attributes", [])
                for ev in sp.get("events", []):
                    yield ev.get("attributes", [])
                for ln in sp.get("links", []):
                    yield ln.get("attributes", [])


def to_otlp_json(msg, *, numbers: bool = False) -> dict:
    """Encode an ExportTraceServiceRequest (or TracesData) as OTLP/JSON.

    IDs become hex, enums stay integers, 64-bit integers are decimal strings, or JSON numbers
    when numbers=True (both are valid OTLP/JSON)."""
    d = json_format.MessageToDict(msg, use_integers_for_enums=True)
    for rs in d.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for f in _ID_FIELDS_SPAN:
                    if f in sp:
                        sp[f] = _b64_to_hex(sp[f])
                for ln in sp.get("links", []):
                    for f in _ID_FIELDS_LINK:
                        if f in ln:
                            ln[f] = _b64_to_hex(ln[f])
                if numbers:
                    for f in ("startTimeUnixNano", "endTimeUnixNano"):
                        if f in sp:
                            sp[f] = int(sp[f])
                    for ev in sp.get("events", []):
                        if "timeUnixNano" in ev:
                            ev["timeUnixNano"] = int(ev["timeUnixNano"])
    if numbers:
        def conv(v: dict) -> None:
            if "intValue" in v:
                v["intValue"] = int(v["intValue"])

        for attrs in _walk_attr_lists(d.get("resourceSpans", [])):
            for kv in attrs:
                _walk_values(kv.get("value", {}), conv)
    return d


# --------------------------------------------------------------------------------------------
# Strict OTLP/JSON decoding (what weft answers)
# --------------------------------------------------------------------------------------------

_HEX = re.compile(r"[0-9a-fA-F]*")
_DIGITS = re.compile(r"-?[0-9]+")
_UDIGITS = re.compile(r"[0-9]+")


class OtlpJsonError(AssertionError):
    pass


def _hex_id_to_b64(value: Any, nbytes: int, where: str, *, optional: bool) -> str:
    if not isinstance(value, str):
        raise OtlpJsonError(f"{where}: expected a hex string, got {value!r}")
    if value == "" and optional:
        return ""
    if len(value) != 2 * nbytes or not _HEX.fullmatch(value):
        raise OtlpJsonError(f"{where}: expected {2 * nbytes} hex characters, got {value!r}")
    return base64.b64encode(bytes.fromhex(value)).decode()


def _check_u64_string(value: Any, where: str) -> None:
    if not (isinstance(value, str) and _UDIGITS.fullmatch(value)):
        raise OtlpJsonError(f"{where}: expected a decimal string, got {value!r}")


def _check_int_enum(value: Any, where: str) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool)):
        raise OtlpJsonError(f"{where}: expected an integer enum, got {value!r}")


def _check_any_value(v: Any, where: str) -> None:
    if not isinstance(v, dict):
        raise OtlpJsonError(f"{where}: AnyValue must be an object, got {v!r}")
    keys = set(v) & {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue",
                     "kvlistValue", "bytesValue"}
    if len(keys) > 1:
        raise OtlpJsonError(f"{where}: AnyValue has several values: {v!r}")
    if "intValue" in v and not (isinstance(v["intValue"], str) and _DIGITS.fullmatch(v["intValue"])):
        raise OtlpJsonError(f"{where}: intValue must be a decimal string, got {v['intValue']!r}")
    if "doubleValue" in v and (isinstance(v["doubleValue"], bool)
                               or not isinstance(v["doubleValue"], (int, float, str))):
        raise OtlpJsonError(f"{where}: bad doubleValue {v['doubleValue']!r}")
    if "bytesValue" in v:
        try:
            base64.b64decode(v["bytesValue"], validate=True)
        except Exception as e:  # noqa: BLE001
            raise OtlpJsonError(f"{where}: bytesValue is not base64: {v['bytesValue']!r}") from e
    if "arrayValue" in v:
        for i, x in enumerate(v["arrayValue"].get("values", [])):
            _check_any_value(x, f"{where}.arrayValue[{i}]")
    if "kvlistValue" in v:
        _check_attrs(v["kvlistValue"].get("values", []), f"{where}.kvlistValue")


def _check_attrs(attrs: Any, where: str) -> None:
    if not isinstance(attrs, list):
        raise OtlpJsonError(f"{where}: attributes must be a list, got {attrs!r}")
    for kv in attrs:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise OtlpJsonError(f"{where}: bad KeyValue {kv!r}")
        _check_any_value(kv.get("value", {}), f"{where}[{kv['key']!r}]")


def traces_data_from_json(resource_spans: Any, where: str = "resourceSpans") -> TracesData:
    """Strictly validate OTLP/JSON resourceSpans (as weft must produce them) and decode them."""
    if not isinstance(resource_spans, list):
        raise OtlpJsonError(f"{where}: expected a list, got {type(resource_spans).__name__}")
    rs_list = copy.deepcopy(resource_spans)
    for i, rs in enumerate(rs_list):
        w = f"{where}[{i}]"
        _check_attrs(rs.get("resource", {}).get("attributes", []), f"{w}.resource.attributes")
        for j, ss in enumerate(rs.get("scopeSpans", [])):
            w2 = f"{w}.scopeSpans[{j}]"
            _check_attrs(ss.get("scope", {}).get("attributes", []), f"{w2}.scope.attributes")
            for k, sp in enumerate(ss.get("spans", [])):
                w3 = f"{w2}.spans[{k}]"
                sp["traceId"] = _hex_id_to_b64(sp.get("traceId"), 16, f"{w3}.traceId", optional=False)
                sp["spanId"] = _hex_id_to_b64(sp.get("spanId"), 8, f"{w3}.spanId", optional=False)
                if "parentSpanId" in sp:
                    sp["parentSpanId"] = _hex_id_to_b64(sp["parentSpanId"], 8, f"{w3}.parentSpanId",
                                                        optional=True)
                for f in ("startTimeUnixNano", "endTimeUnixNano"):
                    if f in sp:
                        _check_u64_string(sp[f], f"{w3}.{f}")
                if "kind" in sp:
                    _check_int_enum(sp["kind"], f"{w3}.kind")
                if "code" in sp.get("status", {}):
                    _check_int_enum(sp["status"]["code"], f"{w3}.status.code")
                _check_attrs(sp.get("attributes", []), f"{w3}.attributes")
                for e, ev in enumerate(sp.get("events", [])):
                    if "timeUnixNano" in ev:
                        _check_u64_string(ev["timeUnixNano"], f"{w3}.events[{e}].timeUnixNano")
                    _check_attrs(ev.get("attributes", []), f"{w3}.events[{e}].attributes")
                for n, ln in enumerate(sp.get("links", [])):
                    ln["traceId"] = _hex_id_to_b64(ln.get("traceId"), 16, f"{w3}.links[{n}].traceId",
                                                   optional=False)
                    ln["spanId"] = _hex_id_to_b64(ln.get("spanId"), 8, f"{w3}.links[{n}].spanId",
                                                  optional=False)
                    _check_attrs(ln.get("attributes", []), f"{w3}.links[{n}].attributes")
    try:
        return json_format.ParseDict({"resourceSpans": rs_list}, TracesData())
    except json_format.ParseError as e:
        raise OtlpJsonError(f"{where}: not valid OTLP/JSON: {e}") from e


# --------------------------------------------------------------------------------------------
# Protobuf wire helpers (for the v2 protobuf envelope)
# --------------------------------------------------------------------------------------------


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = 0
    val = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        val |= (c & 0x7F) << shift
        if not c & 0x80:
            return val, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def proto_fields(b: bytes) -> list[tuple[int, int, Any]]:
    """Decode one level of a protobuf message into (field number, wire type, value)."""
    out = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        fno, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(b, i)
        elif wt == 1:
            val, i = b[i:i + 8], i + 8
        elif wt == 2:
            ln, i = _varint(b, i)
            if i + ln > len(b):
                raise ValueError("truncated length-delimited field")
            val, i = b[i:i + ln], i + ln
        elif wt == 5:
            val, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        out.append((fno, wt, val))
    return out


# --------------------------------------------------------------------------------------------
# Canonical form
# --------------------------------------------------------------------------------------------


def canon_value(v: AnyValue):
    which = v.WhichOneof("value")
    if which is None:
        return ("empty",)
    if which == "string_value":
        return ("string", v.string_value)
    if which == "bool_value":
        return ("bool", v.bool_value)
    if which == "int_value":
        return ("int", v.int_value)
    if which == "double_value":
        return ("double", repr(float(v.double_value)))  # repr round-trips exactly
    if which == "bytes_value":
        return ("bytes", bytes(v.bytes_value))
    if which == "array_value":
        return ("array", tuple(canon_value(x) for x in v.array_value.values))
    if which == "kvlist_value":
        return ("kvlist", canon_attrs(v.kvlist_value.values))
    raise AssertionError(f"unknown AnyValue kind {which}")


def canon_attrs(kvs) -> tuple:
    """Attributes as a tuple of (key, value) sorted by key (attribute order carries no meaning;
    duplicate keys stay visible)."""
    return tuple(sorted(((kv.key, canon_value(kv.value)) for kv in kvs), key=lambda x: x[0]))


def canon_span(rs: ResourceSpans, ss: ScopeSpans, sp: Span) -> dict:
    return {
        "resource": {
            "attributes": canon_attrs(rs.resource.attributes),
            "dropped_attributes_count": rs.resource.dropped_attributes_count,
            "schema_url": rs.schema_url,
        },
        "scope": {
            "name": ss.scope.name,
            "version": ss.scope.version,
            "attributes": canon_attrs(ss.scope.attributes),
            "dropped_attributes_count": ss.scope.dropped_attributes_count,
            "schema_url": ss.schema_url,
        },
        "trace_id": sp.trace_id.hex(),
        "span_id": sp.span_id.hex(),
        "parent_span_id": sp.parent_span_id.hex(),
        "trace_state": sp.trace_state,
        "flags": sp.flags,
        "name": sp.name,
        "kind": int(sp.kind),
        "start_time_unix_nano": sp.start_time_unix_nano,
        "end_time_unix_nano": sp.end_time_unix_nano,
        "attributes": canon_attrs(sp.attributes),
        "dropped_attributes_count": sp.dropped_attributes_count,
        "events": [
            {
                "time_unix_nano": ev.time_unix_nano,
                "name": ev.name,
                "attributes": canon_attrs(ev.attributes),
                "dropped_attributes_count": ev.dropped_attributes_count,
            }
            for ev in sp.events
        ],
        "dropped_events_count": sp.dropped_events_count,
        "links": [
            {
                "trace_id": ln.trace_id.hex(),
                "span_id": ln.span_id.hex(),
                "trace_state": ln.trace_state,
                "attributes": canon_attrs(ln.attributes),
                "dropped_attributes_count": ln.dropped_attributes_count,
                "flags": ln.flags,
            }
            for ln in sp.links
        ],
        "dropped_links_count": sp.dropped_links_count,
        "status": {"code": int(sp.status.code), "message": sp.status.message},
    }


def canon_spans(msg, trace_id: bytes | None = None) -> tuple[dict[str, dict], list[str]]:
    """msg: TracesData / ExportTraceServiceRequest. Returns ({span_id_hex: canon}, duplicates)."""
    out: dict[str, dict] = {}
    dups: list[str] = []
    for rs in msg.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if trace_id is not None and sp.trace_id != trace_id:
                    continue
                c = canon_span(rs, ss, sp)
                key = c["span_id"]
                if key in out:
                    dups.append(key)
                out[key] = c
    return out, dups


def trace_ids_of(msg) -> list[bytes]:
    seen: dict[bytes, None] = {}
    for rs in msg.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                seen.setdefault(bytes(sp.trace_id), None)
    return list(seen)


def _is_attr_tuple(v: Any) -> bool:
    return isinstance(v, tuple) and all(
        isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], tuple)
        for x in v)


def _diff(e: Any, a: Any, path: str, out: list[str]) -> None:
    if e == a:
        return
    if isinstance(e, dict) and isinstance(a, dict):
        for k in list(e) + [k for k in a if k not in e]:
            _diff(e.get(k, "<absent>"), a.get(k, "<absent>"), f"{path}.{k}", out)
        return
    if _is_attr_tuple(e) and _is_attr_tuple(a) and len({k for k, _ in e}) == len(e) \
            and len({k for k, _ in a}) == len(a):
        _diff(dict(e), dict(a), path, out)
        return
    if isinstance(e, list) and isinstance(a, list) and len(e) == len(a):
        for i, (x, y) in enumerate(zip(e, a)):
            _diff(x, y, f"{path}[{i}]", out)
        return
    out.append(f"{path}:\n      sent: {e!r}\n      read: {a!r}")


def assert_same_spans(expected: dict[str, dict], actual: dict[str, dict], what: str) -> None:
    """Compare canonical span maps; the message names every missing, extra and differing span
    and, within a span, every differing field (down to single attributes)."""
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing spans {missing}")
    if extra:
        problems.append(f"unexpected spans {extra}")
    for sid in sorted(set(expected) & set(actual)):
        _diff(expected[sid], actual[sid], f"span {sid} ({expected[sid]['name']!r})", problems)
    if problems:
        raise AssertionError(f"{what}: read-back differs from what was sent:\n  " + "\n  ".join(problems))
