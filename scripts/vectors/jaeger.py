"""Jaeger (jaeger.json): uber-trace-id and uberctx- baggage, extract and inject."""

from __future__ import annotations

import re

from .baggage import is_token, pct_decode
from .common import OWS, is_hex_lc, new_ctx, valid_ids

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
