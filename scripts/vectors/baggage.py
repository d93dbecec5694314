"""W3C baggage (baggage.json): percent-decoding, properties, limits, extract and inject."""

from __future__ import annotations

import codecs

from .common import HEXANY, OWS

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
