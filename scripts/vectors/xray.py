"""AWS X-Ray (xray.json): the X-Amzn-Trace-Id header, extract and inject."""

from __future__ import annotations

import re

from .common import OWS, new_ctx, valid_ids

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
