#!/usr/bin/env python3
"""Checks the shared SDK test vectors in spec/vectors/.

For every vector file this checks that it is well-formed (JSON, `version`, `spec` pointer, unique
names, the members each operation requires, hex of the right width wherever a valid context is
expected) and then re-derives every expected value it can with small independent reference
implementations of the rules in spec/*.md: W3C traceparent/tracestate/baggage, B3, X-Ray, Jaeger, the
composite propagator, ID generation, all samplers, OTLP encoding and retry rules.

Standard library only (Python 3.11+). Usage:

    python3 scripts/check_vectors.py [-v]

Prints one line per failure and a closing `N passed, M failed` line; exits 1 if anything failed.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import email.utils
import importlib.util
import json
import math
import pathlib
import re
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"
VECTORS = SPEC / "vectors"
KNOWN_VERSION = 1

OPERATIONS = {
    "ids.json": {"hex_encode", "validate", "generate", "generate_xray", "prng_wyrand"},
    "traceparent.json": {"extract", "inject"},
    "tracestate.json": {"extract", "inject"},
    "baggage.json": {"extract", "inject"},
    "b3.json": {"extract", "inject"},
    "xray.json": {"extract", "inject"},
    "jaeger.json": {"extract", "inject"},
    "composite.json": {"extract", "inject"},
    "sampling.json": {"trace_id_ratio_bound", "threshold_encode", "should_sample", "rate_limit_sequence", "jaeger_remote_resolve"},
    "otlp.json": {"encode_request", "classify_response", "backoff", "parse_retry_after", "decode_response"},
}
PROPAGATION_FILES = {"traceparent.json", "tracestate.json", "baggage.json", "b3.json", "xray.json", "jaeger.json", "composite.json"}
NAME_RE = re.compile(r"[a-z0-9][a-z0-9./_+-]*")
OWS = " \t"
HEXLC = frozenset("0123456789abcdef")
HEXANY = frozenset("0123456789abcdefABCDEF")


class Fail(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Fail(msg)


def is_hex_lc(s, n=None):
    return isinstance(s, str) and len(s) > 0 and (n is None or len(s) == n) and all(c in HEXLC for c in s)


def nonzero_hex(s):
    return any(c != "0" for c in s)


# =============================================================================================
# Carrier and common helpers


class Carrier:
    def __init__(self, headers):
        need(isinstance(headers, dict), "headers must be an object")
        self.items = []
        for name, values in headers.items():
            need(isinstance(name, str) and name, "header names must be non-empty strings")
            need(isinstance(values, list) and all(isinstance(v, str) for v in values), f"header {name!r} must map to a list of strings")
            for v in values:
                self.items.append((name, v))

    def get(self, name):
        n = name.lower()
        return [v for k, v in self.items if k.lower() == n]

    def first(self, name):
        vals = self.get(name)
        if not vals:
            return None
        v = vals[0].strip(OWS)
        return v if v else None

    def names(self):
        seen = []
        for k, _ in self.items:
            if k.lower() not in seen:
                seen.append(k.lower())
        return seen


def valid_ids(tid, sid):
    return is_hex_lc(tid, 32) and nonzero_hex(tid) and is_hex_lc(sid, 16) and nonzero_hex(sid)


def new_ctx(tid, sid, flags, tracestate=""):
    return {"valid": True, "trace_id": tid, "span_id": sid, "trace_flags": f"{flags:02x}", "is_remote": True, "tracestate": tracestate}


# =============================================================================================
# W3C trace context

KEY_RE = re.compile(r"[a-z0-9][a-z0-9_\-*/@]{0,255}")


def ts_value_ok(v):
    return 1 <= len(v) <= 256 and all(0x20 <= ord(c) <= 0x7E and c not in ",=" for c in v) and v[-1] != " "


def parse_tracestate(values):
    """propagation.md "tracestate extract": any invalid member (a duplicate included) or more than 32
    non-empty members as received (duplicates included) discards the list; a repeated key keeps its
    first occurrence and drops the later ones."""
    members, seen, count = [], set(), 0
    for piece in ",".join(values).split(","):
        p = piece.strip(OWS)
        if not p:
            continue
        if "=" not in p:
            return []
        k, v = p.split("=", 1)
        if not KEY_RE.fullmatch(k) or not ts_value_ok(v):
            return []
        count += 1
        if count > 32:
            return []
        if k in seen:
            continue
        seen.add(k)
        members.append((k, v))
    return members


def ts_str(members):
    return ",".join(f"{k}={v}" for k, v in members)


def ts_members(s):
    """Parses a canonical tracestate string (vectors use canonical form)."""
    if s == "":
        return []
    out = []
    for m in s.split(","):
        need("=" in m, f"tracestate {s!r} is not canonical")
        k, v = m.split("=", 1)
        out.append((k, v))
    return out


def ts_truncate(members):
    m = list(members)
    while len(ts_str(m)) > 512:
        large = [i for i, (k, v) in enumerate(m) if len(k) + 1 + len(v) > 128]
        if not large:
            break
        del m[large[-1]]
    while len(ts_str(m)) > 512:
        m.pop()
    return m


def tc_extract(c):
    vals = c.get("traceparent")
    if len(vals) != 1:
        return None
    v = vals[0].strip(OWS)
    if len(v) < 55 or not is_hex_lc(v[:2], 2) or v[2] != "-" or v[:2] == "ff":
        return None
    ver = v[:2]
    if ver == "00" and len(v) != 55:
        return None
    if ver != "00" and len(v) > 55 and v[55] != "-":
        return None
    tid, sid, fl = v[3:35], v[36:52], v[53:55]
    if v[35] != "-" or v[52] != "-" or not valid_ids(tid, sid) or not is_hex_lc(fl, 2):
        return None
    flags = int(fl, 16) & (0x03 if ver == "00" else 0x01)
    return new_ctx(tid, sid, flags, ts_str(parse_tracestate(c.get("tracestate"))))


def tc_inject(ctx):
    if not ctx or not valid_ids(ctx["trace_id"], ctx["span_id"]):
        return {}
    out = {"traceparent": f"00-{ctx['trace_id']}-{ctx['span_id']}-{int(ctx['trace_flags'], 16) & 3:02x}"}
    ts = ts_truncate(ts_members(ctx.get("tracestate", "")))
    if ts:
        out["tracestate"] = ts_str(ts)
    return out


# =============================================================================================
# Baggage

TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def is_token(s):
    return isinstance(s, str) and len(s) > 0 and all(c in TCHAR for c in s)


def is_octet(c):
    o = ord(c)
    return o == 0x21 or 0x23 <= o <= 0x2B or 0x2D <= o <= 0x3A or 0x3C <= o <= 0x5B or 0x5D <= o <= 0x7E


def _bytewise_replace(err):
    # One U+FFFD per offending byte (spec/propagation.md, W3C Baggage): resume right after it.
    return "\ufffd", err.start + 1


codecs.register_error("weft-replace-bytewise", _bytewise_replace)


def pct_decode(s, plus=False):
    out, i = bytearray(), 0
    while i < len(s):
        ch = s[i]
        if ch == "%":
            h = s[i + 1:i + 3]
            if len(h) != 2 or not all(x in HEXANY for x in h):
                return None
            out.append(int(h, 16))
            i += 3
        else:
            out += b" " if (plus and ch == "+") else ch.encode("utf-8")
            i += 1
    return out.decode("utf-8", errors="weft-replace-bytewise")


def property_list(props):
    """Canonical metadata from raw property strings, or None if one is invalid."""
    out = []
    for raw in props:
        p = raw.strip(OWS)
        if not p:
            continue
        if "=" in p:
            k, v = p.split("=", 1)
            k, v = k.strip(OWS), v.strip(OWS)
            if not is_token(k) or not all(is_octet(c) for c in v):
                return None
            out.append(f"{k}={v}")
        else:
            if not is_token(p):
                return None
            out.append(p)
    return ";".join(out)


def bg_encode(v):
    return "".join(chr(b) if (b < 0x80 and b != 0x25 and is_octet(chr(b))) else f"%{b:02X}" for b in v.encode("utf-8"))


def bg_member(e):
    s = f"{e['key']}={bg_encode(e['value'])}"
    return s + (";" + e["metadata"] if e["metadata"] else "")


def bg_limit(entries):
    kept, size = [], 0
    for e in entries:
        n = len(bg_member(e).encode("utf-8")) + (1 if kept else 0)
        if len(kept) + 1 <= 180 and size + n <= 8192:
            kept.append(e)
            size += n
    return kept


def bg_merge(base, new):
    out = [dict(e) for e in base]
    for e in new:
        for o in out:
            if o["key"] == e["key"]:
                o["value"], o["metadata"] = e["value"], e["metadata"]
                break
        else:
            out.append(dict(e))
    return out


def bg_extract(c):
    entries = []
    for piece in ",".join(c.get("baggage")).split(","):
        p = piece.strip(OWS)
        if not p:
            continue
        parts = p.split(";")
        if "=" not in parts[0]:
            continue
        k, v = parts[0].split("=", 1)
        k, v = k.strip(OWS), v.strip(OWS)
        if not is_token(k) or not all(is_octet(ch) for ch in v):
            continue
        dv = pct_decode(v)
        meta = property_list(parts[1:])
        if dv is None or meta is None:
            continue
        entries = bg_merge(entries, [{"key": k, "value": dv, "metadata": meta}])
    return bg_limit(entries)


def bg_inject(entries):
    ok = []
    for e in entries:
        if not is_token(e["key"]):
            continue
        meta = e.get("metadata", "")
        if meta and property_list(meta.split(";")) != meta:
            meta = ""
        ok.append({"key": e["key"], "value": e["value"], "metadata": meta})
    ok = bg_limit(ok)
    return {"baggage": ",".join(bg_member(e) for e in ok)} if ok else {}


# =============================================================================================
# B3


def b3_id(tid):
    if len(tid) == 16:
        tid = "0" * 16 + tid
    return tid


def b3_single(v):
    if v in ("0", "1", "d"):
        return None
    parts = v.split("-")
    if len(parts) not in (2, 3, 4):
        return None
    if len(parts[0]) not in (16, 32):
        return None
    tid, sid = b3_id(parts[0]), parts[1]
    if not valid_ids(tid, sid):
        return None
    sampling = parts[2] if len(parts) > 2 else None
    if sampling is not None and sampling not in ("0", "1", "d"):
        return None
    if len(parts) == 4 and not (is_hex_lc(parts[3], 16) and nonzero_hex(parts[3])):
        return None
    return dict(new_ctx(tid, sid, 1 if sampling in ("1", "d") else 0), b3_debug=sampling == "d")


def b3_multi(c):
    tid, sid = c.first("x-b3-traceid"), c.first("x-b3-spanid")
    if tid is None or sid is None or len(tid) not in (16, 32):
        return None
    tid = b3_id(tid)
    if not valid_ids(tid, sid):
        return None
    sampled = c.first("x-b3-sampled")
    smp = False
    if sampled is not None:
        s = sampled.lower()
        if s in ("1", "true"):
            smp = True
        elif s not in ("0", "false"):
            return None
    parent = c.first("x-b3-parentspanid")
    if parent is not None and not (is_hex_lc(parent, 16) and nonzero_hex(parent)):
        return None
    debug = c.first("x-b3-flags") == "1"
    return dict(new_ctx(tid, sid, 1 if (smp or debug) else 0), b3_debug=debug)


def b3_extract(c):
    v = c.first("b3")
    if v is not None:
        r = b3_single(v)
        if r:
            return r
    return b3_multi(c)


def b3_inject(ctx, encoding):
    if not ctx or not valid_ids(ctx["trace_id"], ctx["span_id"]):
        return {}
    tid, sid = ctx["trace_id"], ctx["span_id"]
    sampled = int(ctx["trace_flags"], 16) & 1
    debug = bool(ctx.get("b3_debug"))
    if encoding == "single":
        return {"b3": f"{tid}-{sid}-{'d' if debug else ('1' if sampled else '0')}"}
    out = {"x-b3-traceid": tid, "x-b3-spanid": sid}
    if debug:
        out["x-b3-flags"] = "1"
    else:
        out["x-b3-sampled"] = "1" if sampled else "0"
    return out


# =============================================================================================
# X-Ray

ROOT_RE = re.compile(r"1-([0-9a-f]{1,8})-([0-9a-f]{24})")


def xray_extract(c):
    vals = c.get("x-amzn-trace-id")
    if not vals:
        return None
    kv = {}
    for part in vals[0].strip(OWS).split(";"):
        p = part.strip(OWS)
        if not p:
            continue
        if "=" not in p:
            return None
        k, v = p.split("=", 1)
        kv[k.strip(OWS)] = v.strip(OWS)
    root, parent = kv.get("Root"), kv.get("Parent")
    if root is None or parent is None:
        return None
    m = ROOT_RE.fullmatch(root)
    if not m:
        return None
    tid = m.group(1).rjust(8, "0") + m.group(2)
    if not valid_ids(tid, parent):
        return None
    s = kv.get("Sampled")
    if s is None or s in ("0", "?"):
        flags = 0
    elif s == "1":
        flags = 1
    else:
        return None
    ctx = new_ctx(tid, parent, flags)
    if kv.get("Lineage"):
        ctx["xray_lineage"] = kv["Lineage"]
    return ctx


def xray_inject(ctx):
    if not ctx or not valid_ids(ctx["trace_id"], ctx["span_id"]):
        return {}
    t = ctx["trace_id"]
    h = f"Root=1-{t[:8]}-{t[8:]};Parent={ctx['span_id']};Sampled={int(ctx['trace_flags'], 16) & 1}"
    if ctx.get("xray_lineage"):
        h += f";Lineage={ctx['xray_lineage']}"
    return {"x-amzn-trace-id": h}


# =============================================================================================
# Jaeger

UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def jaeger_ctx(c):
    v = c.first("uber-trace-id")
    if v is None:
        return None
    v = pct_decode(v)
    if v is None:
        return None
    parts = v.split(":")
    if len(parts) != 4:
        return None
    t, s, _, f = parts
    if not (is_hex_lc(t) and len(t) <= 32 and is_hex_lc(s) and len(s) <= 16 and re.fullmatch(r"[0-9a-fA-F]{1,2}", f)):
        return None
    t, s = t.rjust(32, "0"), s.rjust(16, "0")
    if not valid_ids(t, s):
        return None
    fl = int(f, 16)
    return dict(new_ctx(t, s, fl & 1), jaeger_debug=(fl & 3) == 3)


def jaeger_baggage(c):
    out = []
    for name in sorted(n for n in c.names() if n.startswith("uberctx-") and len(n) > len("uberctx-")):
        raw = c.get(name)[0].strip(OWS)
        v = pct_decode(raw, plus=True) if raw else None
        if v is not None:
            out.append({"key": name[len("uberctx-"):], "value": v, "metadata": ""})
    return out


def jaeger_inject(ctx, baggage):
    out = {}
    if ctx and valid_ids(ctx["trace_id"], ctx["span_id"]):
        sampled = int(ctx["trace_flags"], 16) & 1
        fl = 3 if (ctx.get("jaeger_debug") and sampled) else sampled
        out["uber-trace-id"] = f"{ctx['trace_id']}:{ctx['span_id']}:0:{fl}"
    for e in baggage:
        if is_token(e["key"]) and e["key"] == e["key"].lower():
            out[f"uberctx-{e['key']}"] = "".join(chr(b) if chr(b) in UNRESERVED else f"%{b:02X}" for b in e["value"].encode("utf-8"))
    return out


# =============================================================================================
# Propagators and the composite

PROPAGATOR_NAMES = {"tracecontext", "baggage", "b3", "b3multi", "xray", "jaeger", "none"}


def run_extract(names, c):
    ctx, baggage = None, []
    seen = []
    for n in names:
        if n in seen:
            continue
        seen.append(n)
        r = None
        if n == "tracecontext":
            r = tc_extract(c)
        elif n == "baggage":
            baggage = bg_merge(baggage, bg_extract(c))
        elif n in ("b3", "b3multi"):
            r = b3_extract(c)
        elif n == "xray":
            r = xray_extract(c)
        elif n == "jaeger":
            r = jaeger_ctx(c)
            baggage = bg_merge(baggage, jaeger_baggage(c))
        if r:
            ctx = r
    out = dict(ctx) if ctx else {"valid": False}
    out["baggage"] = bg_limit(baggage)
    return out


def run_inject(names, ctx, baggage):
    out = {}
    seen = []
    for n in names:
        if n in seen:
            continue
        seen.append(n)
        if n == "tracecontext":
            out.update(tc_inject(ctx))
        elif n == "baggage":
            out.update(bg_inject(baggage))
        elif n == "b3":
            out.update(b3_inject(ctx, "single"))
        elif n == "b3multi":
            out.update(b3_inject(ctx, "multi"))
        elif n == "xray":
            out.update(xray_inject(ctx))
        elif n == "jaeger":
            out.update(jaeger_inject(ctx, baggage))
    return out


def propagator_names(inp):
    if "propagators" in inp:
        names = inp["propagators"]
        need(isinstance(names, list) and names and all(n in PROPAGATOR_NAMES for n in names), f"bad propagators {names!r}")
        return names
    p = inp.get("propagator")
    need(isinstance(p, dict) and "name" in p, "input.propagator must be an object with a name")
    name = p["name"]
    need(name in PROPAGATOR_NAMES - {"b3multi", "none"}, f"unknown propagator {name!r}")
    if name == "b3":
        enc = p.get("inject_encoding", "single")
        need(enc in ("single", "multi"), f"bad inject_encoding {enc!r}")
        return ["b3multi" if enc == "multi" else "b3"]
    return [name]


CTX_DEFAULTS = {"b3_debug": False, "jaeger_debug": False, "xray_lineage": None, "baggage": []}


def check_context_shape(e, where):
    need(isinstance(e.get("valid"), bool), f"{where}: 'valid' must be a boolean")
    if e["valid"]:
        need(is_hex_lc(e.get("trace_id"), 32) and nonzero_hex(e["trace_id"]), f"{where}: trace_id must be 32 lowercase hex digits, not all zero")
        need(is_hex_lc(e.get("span_id"), 16) and nonzero_hex(e["span_id"]), f"{where}: span_id must be 16 lowercase hex digits, not all zero")
        need(is_hex_lc(e.get("trace_flags"), 2), f"{where}: trace_flags must be 2 lowercase hex digits")
        need(e.get("is_remote") is True, f"{where}: extracted contexts have is_remote true")
        need(isinstance(e.get("tracestate"), str), f"{where}: tracestate must be a string")
    else:
        for k in ("trace_id", "span_id", "trace_flags", "tracestate"):
            need(k not in e, f"{where}: an invalid context has no {k}")
    for b in e.get("baggage", []):
        need(set(b) == {"key", "value", "metadata"} and all(isinstance(x, str) for x in b.values()), f"{where}: baggage entries are {{key, value, metadata}} strings")


def normal(ctx):
    out = {k: v for k, v in ctx.items() if k != "reinject"}
    for k, d in CTX_DEFAULTS.items():
        if out.get(k) in (None, False, []) or k not in out:
            out[k] = d
    return out


def check_propagation(fname, v):
    inp, exp = v["input"], v["expected"]
    names = propagator_names(inp)
    if v["operation"] == "extract":
        c = Carrier(inp.get("headers"))
        check_context_shape(exp, "expected")
        got = run_extract(names, c)
        ge, ee = normal(got), normal(exp)
        need(ge == ee, f"reference extract gives {json.dumps(got, ensure_ascii=False)[:400]}")
        if "reinject" in exp:
            need(exp["valid"], "reinject only makes sense for a valid context")
            re_h = run_inject(names, got, [])
            need(re_h == exp["reinject"], f"reference re-inject gives {re_h}")
    else:
        ctx = inp.get("context")
        if ctx is not None:
            need(is_hex_lc(ctx.get("trace_id"), 32) and is_hex_lc(ctx.get("span_id"), 16) and is_hex_lc(ctx.get("trace_flags"), 2),
                 "input.context needs trace_id, span_id (lowercase hex) and trace_flags")
            ts = ctx.get("tracestate", "")
            need(isinstance(ts, str), "input.context.tracestate must be a canonical string")
            need(ts_str(parse_tracestate([ts])) == ts, "input.context.tracestate must be valid and canonical (no OWS, no empty or repeated members)")
        baggage = inp.get("baggage", [])
        need(isinstance(exp.get("headers"), dict), "expected.headers must be an object")
        for k, val in exp["headers"].items():
            need(k == k.lower() and isinstance(val, str), "expected inject headers are lowercase names mapped to one string")
        got = run_inject(names, ctx, baggage)
        need(got == exp["headers"], f"reference inject gives {got}")


# =============================================================================================
# IDs


def wyrand(seed, n):
    s, out = seed, []
    for _ in range(n):
        s = (s + 0xA0761D6478BD642F) & 0xFFFFFFFFFFFFFFFF
        t = s * (s ^ 0xE7037ED1A0B428DB)
        out.append(((t >> 64) ^ t) & 0xFFFFFFFFFFFFFFFF)
    return out


def gen_id(kind, draws):
    it = iter(draws)
    used = 0
    while True:
        if kind == "trace_id":
            a, b = next(it), next(it)
            used += 2
            h = a + b
        else:
            h = next(it)
            used += 1
        if nonzero_hex(h):
            return h, used


def check_ids(v):
    op, inp, exp = v["operation"], v["input"], v["expected"]
    if op == "hex_encode":
        b = inp["bytes"]
        need(all(isinstance(x, int) and 0 <= x <= 255 for x in b), "bytes must be 0..255")
        need(bytes(b).hex() == exp["hex"], f"hex is {bytes(b).hex()}")
    elif op == "validate":
        n = 32 if inp["kind"] == "trace_id" else 16
        need(inp["kind"] in ("trace_id", "span_id"), "kind must be trace_id or span_id")
        got = is_hex_lc(inp["hex"], n) and nonzero_hex(inp["hex"])
        need(got == exp["valid"], f"valid is {got}")
    elif op == "generate":
        if inp["kind"] == "trace_flags":
            p = inp["parent_trace_flags"]
            random = 0x02 if p is None else int(p, 16) & 0x02
            got = f"{random | (1 if inp['sampled'] else 0):02x}"
            need(got == exp["trace_flags"], f"trace_flags is {got}")
        else:
            need(inp["kind"] in ("trace_id", "span_id"), "kind")
            need(all(is_hex_lc(d, 16) for d in inp["draws"]), "draws are 16 lowercase hex digits")
            h, used = gen_id(inp["kind"], inp["draws"])
            need((h, used) == (exp["id"], exp["draws_used"]), f"generated {h} using {used} draws")
    elif op == "generate_xray":
        secs = int(inp["unix_nanos"]) // 1_000_000_000
        need(0 <= secs < 2 ** 32, "time out of the 32-bit range")
        h, _ = gen_id("trace_id", inp["draws"])
        tid = f"{secs:08x}" + h[8:]
        need(tid == exp["trace_id"], f"trace_id is {tid}")
        need(exp["xray_root"] == f"1-{tid[:8]}-{tid[8:]}", "xray_root does not match trace_id")
        need(bytes.fromhex(tid)[:4] == struct.pack(">I", secs), "first 4 bytes are not the big-endian epoch seconds")
    elif op == "prng_wyrand":
        got = [f"{x:016x}" for x in wyrand(int(inp["seed"], 16), inp["count"])]
        need(got == exp["outputs"], f"outputs are {got}")


# =============================================================================================
# Sampling

S, D = "RECORD_AND_SAMPLE", "DROP"


def ratio_bound(r):
    if not (r > 0):
        return 0
    if r >= 1:
        return None
    return int(r * 9223372036854775808.0)


def threshold_th(p):
    if p >= 1:
        return "0"
    _, e = math.frexp(p)
    prec = max(1, min(12, 4 + (-e) // 4))
    q = 2.0 - p
    q += math.ldexp(0.5, -4 * prec)
    digits = "fffffffffffff" if q >= 2.0 else q.hex()[4:-3]
    need(len(digits) == 13, "internal: hex float digits")
    return digits[:prec].rstrip("0") or "0"


def th_value(s):
    if s is None or not (1 <= len(s) <= 14) or not all(c in HEXANY for c in s):
        return None
    return int(s.ljust(14, "0"), 16)


def rv_value(s):
    if s is None or len(s) != 14 or not all(c in HEXANY for c in s):
        return None
    return int(s, 16)


def ot_of(members):
    for k, v in members:
        if k == "ot":
            return v
    return None


def ot_sub(members, key):
    ot = ot_of(members)
    if ot is None:
        return None
    for piece in ot.split(";"):
        if piece.startswith(key + ":"):
            return piece[len(key) + 1:]
    return None


def set_ot(members, new):
    if new == ot_of(members):
        return members
    if new is not None and len(new) > 256:
        return members
    rest = [(k, v) for k, v in members if k != "ot"]
    if new is None:
        return rest
    return ([("ot", new)] + rest)[:32]


def set_th(members, th):
    ot = ot_of(members)
    pieces = [p for p in (ot.split(";") if ot is not None else []) if not p.startswith("th:")]
    return set_ot(members, ";".join([f"th:{th}"] + pieces))


def erase_th(members):
    ot = ot_of(members)
    if ot is None:
        return members
    pieces = ot.split(";")
    kept = [p for p in pieces if not p.startswith("th:")]
    if len(kept) == len(pieces):
        return members
    return set_ot(members, ";".join(kept) if kept else None)


def randomness(members, trace_id):
    rv = rv_value(ot_sub(members, "rv"))
    return rv if rv is not None else int(trace_id[18:], 16)


def should_sample(cfg, trace_id, parent):
    t = cfg["type"]
    pvalid = parent is not None and valid_ids(parent["trace_id"], parent["span_id"])
    pts = ts_members(parent["tracestate"]) if pvalid else []
    if t == "always_on":
        return S, pts
    if t == "always_off":
        return D, pts
    if t == "trace_id_ratio":
        b = ratio_bound(cfg["ratio"])
        x = int(trace_id[16:], 16) >> 1
        if b is None or x < b:
            return S, erase_th(pts)
        return D, pts
    if t == "consistent_probability":
        p = cfg["probability"]
        if not (p > 0):
            return D, pts
        th = threshold_th(min(p, 1.0))
        if randomness(pts, trace_id) >= th_value(th):
            return S, set_th(pts, th)
        return D, pts
    if t == "parent_based":
        if not pvalid:
            return should_sample(cfg["root"], trace_id, None)
        sampled = int(parent["trace_flags"], 16) & 1
        slot = ("remote_parent_" if parent["is_remote"] else "local_parent_") + ("sampled" if sampled else "not_sampled")
        delegate = cfg.get(slot, {"type": "always_on" if sampled else "always_off"})
        dec, ts = should_sample(delegate, trace_id, parent)
        if dec == S:
            T = th_value(ot_sub(ts, "th"))
            if T is not None and randomness(ts, trace_id) < T:
                ts = erase_th(ts)
        return dec, ts
    raise Fail(f"unknown sampler type {t!r}")


def rate_limit(rate, created, calls):
    if not (rate > 0):
        return [False] * len(calls)
    maxb = max(1.0, rate)
    bal, last, out = maxb, created, []
    for now in calls:
        if now > last:
            bal = min(maxb, bal + (float(now - last) / 1e9) * rate)
            last = now
        if bal >= 1.0:
            bal -= 1.0
            out.append(True)
        else:
            out.append(False)
    return out


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def jaeger_resolve(body, ops):
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None

    def obj(d, k):
        v = d.get(k)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise ValueError
        return v

    def number(d, k):
        v = d.get(k, 0)
        if not num(v):
            raise ValueError
        return float(v)

    clamp = lambda r: min(1.0, max(0.0, r))  # noqa: E731
    try:
        opsamp = obj(doc, "operationSampling")
        prob = obj(doc, "probabilisticSampling")
        rate = obj(doc, "rateLimitingSampling")
        if opsamp is not None:
            dp = clamp(number(opsamp, "defaultSamplingProbability"))
            lb = number(opsamp, "defaultLowerBoundTracesPerSecond")
            per = opsamp.get("perOperationStrategies", [])
            if not isinstance(per, list):
                raise ValueError
            table = {}
            for e in per:
                if not isinstance(e, dict) or not isinstance(e.get("operation"), str):
                    raise ValueError
                ps = obj(e, "probabilisticSampling") or {}
                table.setdefault(e["operation"], clamp(number(ps, "samplingRate")))
            return {op: {"type": "guaranteed_throughput", "ratio": table.get(op, dp), "lower_bound": lb} for op in ops}
        if prob is not None:
            r = clamp(number(prob, "samplingRate"))
            return {op: {"type": "trace_id_ratio", "ratio": r} for op in ops}
        if rate is not None:
            r = number(rate, "maxTracesPerSecond")
            return {op: {"type": "rate_limiting", "spans_per_second": r} for op in ops}
    except ValueError:
        return None
    return None


def check_sampler_cfg(cfg):
    need(isinstance(cfg, dict) and "type" in cfg, "sampler must be an object with a type")
    t = cfg["type"]
    need(t in ("always_on", "always_off", "trace_id_ratio", "consistent_probability", "parent_based"), f"unknown sampler {t!r}")
    if t == "trace_id_ratio":
        need(num(cfg.get("ratio")), "ratio must be a number")
    if t == "consistent_probability":
        need(num(cfg.get("probability")), "probability must be a number")
    if t == "parent_based":
        check_sampler_cfg(cfg["root"])
        for k, d in cfg.items():
            if k not in ("type", "root"):
                need(k in ("remote_parent_sampled", "remote_parent_not_sampled", "local_parent_sampled", "local_parent_not_sampled"), f"unknown slot {k}")
                check_sampler_cfg(d)


def check_sampling(v):
    op, inp, exp = v["operation"], v["input"], v["expected"]
    if op == "trace_id_ratio_bound":
        b = ratio_bound(inp["ratio"])
        got = {"sample_all": True} if b is None else {"bound": f"{b:016x}"}
        need(got == exp, f"bound is {got}")
    elif op == "threshold_encode":
        th = threshold_th(inp["probability"])
        need(th == exp["th"], f"th is {th}")
        need(exp["threshold"] == f"{th_value(th):014x}", "threshold does not match th")
    elif op == "should_sample":
        check_sampler_cfg(inp["sampler"])
        need(is_hex_lc(inp["trace_id"], 32) and nonzero_hex(inp["trace_id"]), "trace_id must be 32 lowercase hex digits")
        par = inp.get("parent")
        if par is not None:
            need(par["trace_id"] == inp["trace_id"], "the parent's trace_id must equal trace_id")
            need(is_hex_lc(par["span_id"], 16) and is_hex_lc(par["trace_flags"], 2) and isinstance(par["is_remote"], bool), "parent fields")
            need(ts_str(parse_tracestate([par["tracestate"]])) == par["tracestate"] or not par["tracestate"], "parent tracestate must be valid and canonical")
        need(exp["decision"] in (S, D, "RECORD_ONLY"), "decision")
        dec, ts = should_sample(inp["sampler"], inp["trace_id"], par)
        need((dec, ts_str(ts)) == (exp["decision"], exp["tracestate"]), f"reference gives {dec} {ts_str(ts)!r}")
    elif op == "rate_limit_sequence":
        calls = [int(c) for c in inp["calls_ns"]]
        got = rate_limit(inp["spans_per_second"], int(inp["created_ns"]), calls)
        need(got == exp["sampled"], f"reference gives {got}")
    elif op == "jaeger_remote_resolve":
        need(isinstance(inp["body"], str), "body is the raw response body string")
        got = jaeger_resolve(inp["body"], inp["operations"])
        if got is None:
            need(exp == {"valid": False}, "reference finds the strategy invalid")
        else:
            need(exp.get("valid") is True and exp["samplers"] == got, f"reference resolves {got}")


# =============================================================================================
# OTLP

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


# =============================================================================================
# Driver


def anchors(doc):
    out = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(a)
    return out


def check_pointer(ptr):
    need(isinstance(ptr, str) and ptr, "spec pointer must be a non-empty string")
    path, _, anchor = ptr.partition("#")
    doc = SPEC / path
    need(doc.is_file(), f"spec pointer {ptr!r}: no such document")
    if anchor:
        need(anchor in anchors(doc), f"spec pointer {ptr!r}: no such section")


def main(argv):
    verbose = "-v" in argv
    passed = failed = 0
    gen = load_gen()

    def report(where, msg):
        nonlocal failed
        failed += 1
        print(f"FAIL {where}: {msg}")

    files = sorted(VECTORS.glob("*.json"))
    missing = sorted(set(OPERATIONS) - {f.name for f in files})
    for m in missing:
        report(m, "vector file is missing")
    for path in files:
        fname = path.name
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            need(isinstance(doc, dict), "top level must be an object")
            need(doc.get("version") == KNOWN_VERSION and type(doc.get("version")) is int, f"version must be {KNOWN_VERSION}")
            check_pointer(doc.get("spec"))
            need(isinstance(doc.get("description"), str) and doc["description"], "description must be a non-empty string")
            need(isinstance(doc.get("vectors"), list) and doc["vectors"], "vectors must be a non-empty list")
            need(fname in OPERATIONS, "unknown vector file (add it to OPERATIONS in check_vectors.py)")
            if fname == "otlp.json":
                regenerated = json.dumps(gen.build(verify=False), indent=2, ensure_ascii=False) + "\n"
                need(regenerated == path.read_text(encoding="utf-8"), "otlp.json differs from gen_otlp.py output: regenerate it, never edit it by hand")
        except (Fail, ValueError) as e:
            report(fname, str(e))
            continue
        names = set()
        for idx, v in enumerate(doc["vectors"]):
            where = f"{fname}[{idx}] {v.get('name', '?') if isinstance(v, dict) else '?'}"
            try:
                need(isinstance(v, dict), "a vector must be an object")
                for k in ("name", "description", "operation", "input", "expected"):
                    need(k in v, f"missing {k!r}")
                need(isinstance(v["name"], str) and NAME_RE.fullmatch(v["name"]), "name must be lowercase [a-z0-9./_+-]")
                need(v["name"] not in names, "duplicate name")
                names.add(v["name"])
                need(isinstance(v["description"], str) and len(v["description"]) >= 8, "description must be a sentence")
                need(v["operation"] in OPERATIONS[fname], f"operation {v['operation']!r} is not allowed in {fname}")
                need(isinstance(v["input"], dict) and isinstance(v["expected"], dict), "input and expected must be objects")
                if "spec" in v:
                    check_pointer(v["spec"])
                if fname in PROPAGATION_FILES:
                    check_propagation(fname, v)
                elif fname == "ids.json":
                    check_ids(v)
                elif fname == "sampling.json":
                    check_sampling(v)
                elif fname == "otlp.json":
                    check_otlp(v, gen)
            except (Fail, KeyError, TypeError, ValueError, StopIteration) as e:
                report(where, f"{type(e).__name__}: {e}" if not isinstance(e, Fail) else str(e))
                continue
            passed += 1
            if verbose:
                print(f"ok   {where}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
