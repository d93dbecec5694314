"""Shared by every family: paths, the failure raised by a check, hex and ID tests, the header carrier."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SPEC = ROOT / "spec"
VECTORS = SPEC / "vectors"

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
