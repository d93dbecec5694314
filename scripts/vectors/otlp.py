"""OTLP (otlp.json): a strict protobuf walk of encoded requests and responses, response
classification, back-off and Retry-After."""

from __future__ import annotations

import datetime as _dt
import email.utils
import importlib.util
import re
import struct

from .common import VECTORS, Carrier, need

# (field -> (wire type, sub-message or scalar kind)) per message, from the vendored protos.
SCHEMA = {
    "Request": {1: (2, "ResourceSpans")},
    "ResourceSpans": {1: (2, "Resource"), 2: (2, "ScopeSpans"), 3: (2, "string")},
    "Resource": {1: (2, "KeyValue"), 2: (0, "uint")},
    "ScopeSpans": {1: (2, "Scope"), 2: (2, "Span"), 3: (2, "string")},
    "Scope": {1: (2, "string"), 2: (2, "string"), 3: (2, "KeyValue"), 4: (0, "uint")},
    "Span": {1: (2, "bytes16"), 2: (2, "bytes8"), 3: (2, "string"), 4: (2, "bytes8"), 5: (2, "string"), 6: (0, "uint"), 7: (1, "fixed"), 8: (1, "fixed"),
             9: (2, "KeyValue"), 10: (0, "uint"), 11: (2, "Event"), 12: (0, "uint"), 13: (2, "Link"), 14: (0, "uint"), 15: (2, "Status"), 16: (5, "fixed")},
    "Event": {1: (1, "fixed"), 2: (2, "string"), 3: (2, "KeyValue"), 4: (0, "uint")},
    "Link": {1: (2, "bytes16"), 2: (2, "bytes8"), 3: (2, "string"), 4: (2, "KeyValue"), 5: (0, "uint"), 6: (5, "fixed")},
    "Status": {2: (2, "string"), 3: (0, "uint")},
    "KeyValue": {1: (2, "string"), 2: (2, "AnyValue")},
    "AnyValue": {1: (2, "string"), 2: (0, "any"), 3: (0, "any"), 4: (1, "any"), 5: (2, "ArrayValue"), 6: (2, "KeyValueList"), 7: (2, "bytes")},
    "ArrayValue": {1: (2, "AnyValue")},
    "KeyValueList": {1: (2, "KeyValue")},
    "Response": {1: (2, "PartialSuccess")},
    "PartialSuccess": {1: (0, "uint"), 2: (2, "string")},
}


def read_varint(b, i):
    n = shift = 0
    while True:
        need(i < len(b), "truncated varint")
        x = b[i]
        i += 1
        n |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            need(shift <= 70, "varint too long")
            return n, i


def walk(b, msg, path="", out=None):
    """Validates `b` as message `msg`: known fields, right wire types, ascending order, no defaults.

    Returns a list of (field path, value) for scalars, for spot checks."""
    out = [] if out is None else out
    i, last = 0, 0
    fields = SCHEMA[msg]
    seen_oneof = 0
    while i < len(b):
        key, i = read_varint(b, i)
        f, wt = key >> 3, key & 7
        need(f in fields, f"{msg}{path}: unknown field {f}")
        want, kind = fields[f]
        need(wt == want, f"{msg}.{f}: wire type {wt}, want {want}")
        need(f >= last, f"{msg}: field {f} after {last} (fields must be in ascending order)")
        need(not (f == last and kind in ("string", "uint", "fixed", "bytes8", "bytes16", "any", "bytes") and msg != "AnyValue"), f"{msg}.{f} written twice")
        last = f
        if wt == 0:
            val, i = read_varint(b, i)
            if kind != "any":
                need(val != 0, f"{msg}.{f}: default value 0 must be omitted")
        elif wt == 1:
            need(i + 8 <= len(b), "truncated fixed64")
            val = b[i:i + 8]
            i += 8
            if kind == "fixed":
                need(val != bytes(8), f"{msg}.{f}: default value 0 must be omitted")
        elif wt == 5:
            need(i + 4 <= len(b), "truncated fixed32")
            val = struct.unpack("<I", b[i:i + 4])[0]
            i += 4
            need(val != 0, f"{msg}.{f}: default value 0 must be omitted")
        else:
            n, i = read_varint(b, i)
            need(i + n <= len(b), f"{msg}.{f}: length {n} past the end")
            val = b[i:i + n]
            i += n
            if kind in SCHEMA:
                walk(val, kind, f"{path}.{f}", out)
            else:
                if msg != "AnyValue":
                    need(len(val) > 0, f"{msg}.{f}: empty {kind} must be omitted")
                if kind == "string":
                    val.decode("utf-8")
                if kind == "bytes16":
                    need(len(val) == 16, f"{msg}.{f}: trace IDs are 16 bytes")
                if kind == "bytes8":
                    need(len(val) == 8, f"{msg}.{f}: span IDs are 8 bytes")
        if msg == "AnyValue":
            seen_oneof += 1
        out.append((f"{msg}.{f}", val))
    if msg == "AnyValue":
        need(seen_oneof == 1, "AnyValue must hold exactly one value")
    return out


def load_gen():
    spec = importlib.util.spec_from_file_location("gen_otlp", VECTORS / "gen_otlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HTTP_RETRYABLE = {429, 502, 503, 504}
GRPC_RETRYABLE = {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"}
GRPC_CODES = GRPC_RETRYABLE | {"OK", "UNKNOWN", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                               "FAILED_PRECONDITION", "UNIMPLEMENTED", "INTERNAL", "UNAUTHENTICATED"}


def retry_after_ms(value, now):
    if re.fullmatch(r"[0-9]+", value):
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    base = email.utils.parsedate_to_datetime(now)
    return max(0, int((when - base) / _dt.timedelta(milliseconds=1)))


def check_otlp(v, gen):
    op, inp, exp = v["operation"], v["input"], v["expected"]
    if op == "encode_request":
        need(isinstance(exp.get("hex"), str) and re.fullmatch(r"(?:[0-9a-f]{2})+", exp["hex"]), "expected.hex must be lowercase hex")
        data = bytes.fromhex(exp["hex"])
        need(len(data) == exp["length"], f"hex decodes to {len(data)} bytes, expected.length says {exp['length']}")
        fields = walk(data, "Request")
        flags = [val for name, val in fields if name == "Span.16"]
        spans = [s for ss in inp["scope_spans"] for s in ss["spans"]]
        want = [(int(s["trace_flags"], 16) & 0xFF) | 0x100 | (0x200 if s.get("parent_is_remote") else 0) for s in spans]
        need(flags == want, f"span flags {flags}, want {want}")
        need(gen.enc_request(inp) == data, "gen_otlp.enc_request(input) does not reproduce expected.hex")
    elif op == "decode_response":
        data = bytes.fromhex(inp["hex"])
        fields = walk(data, "Response") if data else []
        rejected = next((val for name, val in fields if name == "PartialSuccess.1"), 0)
        msg = next((val.decode() for name, val in fields if name == "PartialSuccess.2"), "")
        got = {"rejected_spans": rejected, "error_message": msg, "partial": bool(rejected or msg)}
        need(got == exp, f"decoded {got}")
    elif op == "classify_response":
        if inp["transport"] == "http":
            if "error" in inp:
                got = {"outcome": "retryable"}
            else:
                st = inp["status"]
                if 200 <= st < 300:
                    got = {"outcome": "success"}
                elif st in HTTP_RETRYABLE:
                    got = {"outcome": "retryable"}
                    ra = Carrier(inp.get("headers", {})).first("retry-after")
                    if ra is not None and st in (429, 503):
                        d = retry_after_ms(ra, inp.get("now", "Tue, 14 Nov 2023 22:13:20 GMT"))
                        if d is not None:
                            got["delay_ms"] = d
                else:
                    got = {"outcome": "permanent"}
        else:
            need(inp["transport"] == "grpc" and inp["code"] in GRPC_CODES, "transport/code")
            code, ri = inp["code"], inp.get("retry_info_delay_ms")
            if code == "OK":
                got = {"outcome": "success"}
            elif code in GRPC_RETRYABLE or (code == "RESOURCE_EXHAUSTED" and ri is not None):
                got = {"outcome": "retryable"}
                if ri is not None:
                    got["delay_ms"] = ri
            else:
                got = {"outcome": "permanent"}
        need(got == exp, f"reference classifies {got}")
    elif op == "backoff":
        k = inp["retry"]
        if k > 4:
            got = {"give_up": True}
        else:
            c = min(5000.0, 1000.0 * 1.5 ** (k - 1))
            got = {"min_ms": c / 2, "max_ms": c}
        need(got == exp, f"reference back-off {got}")
    elif op == "parse_retry_after":
        got = retry_after_ms(inp["value"], inp["now"])
        need(got == exp["delay_ms"], f"reference delay {got}")
