"""Propagators and the composite: runs the propagation vectors (traceparent.json ... composite.json)
through the reference extract and inject of each propagator named."""

from __future__ import annotations

import json

from .b3 import b3_extract, b3_inject
from .baggage import bg_extract, bg_inject, bg_limit, bg_merge
from .common import Carrier, is_hex_lc, need, nonzero_hex
from .jaeger import jaeger_baggage, jaeger_ctx, jaeger_inject
from .tracecontext import parse_tracestate, tc_extract, tc_inject, ts_str
from .xray import xray_extract, xray_inject

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
