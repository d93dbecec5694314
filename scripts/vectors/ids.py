"""IDs (ids.json): hex encoding, validation, generation from PRNG draws, X-Ray trace IDs, wyrand."""

from __future__ import annotations

import struct

from .common import is_hex_lc, need, nonzero_hex


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
