"""B3 (b3.json): single-header and multi-header extract, inject in either encoding."""

from __future__ import annotations

from .common import is_hex_lc, new_ctx, nonzero_hex, valid_ids


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
