"""W3C trace context (traceparent.json, tracestate.json): traceparent and tracestate extract and inject."""

from __future__ import annotations

import re

from .common import OWS, is_hex_lc, need, new_ctx, valid_ids

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
