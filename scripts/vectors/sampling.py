"""Sampling (sampling.json): ratio bounds, consistent-probability thresholds, every sampler, the
rate limiter and Jaeger remote sampling strategies."""

from __future__ import annotations

import json
import math

from .common import HEXANY, Fail, is_hex_lc, need, nonzero_hex, valid_ids
from .tracecontext import parse_tracestate, ts_members, ts_str

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
