#!/usr/bin/env python3
"""Checks the shared SDK test vectors in spec/vectors/.

For every vector file this checks that it is well-formed (JSON, `version`, `spec` pointer, unique
names, the members each operation requires, hex of the right width wherever a valid context is
expected) and then re-derives every expected value it can with small independent reference
implementations of the rules in spec/*.md: W3C traceparent/tracestate/baggage, B3, X-Ray, Jaeger, the
composite propagator, ID generation, all samplers, OTLP encoding and retry rules.

The reference implementations are in scripts/vectors/, one module per family (common, tracecontext,
baggage, b3, xray, jaeger, propagation, ids, sampling, otlp); this script drives them.

Standard library only (Python 3.11+). Usage:

    python3 scripts/check_vectors.py [-v]

Prints one line per failure and a closing `N passed, M failed` line; exits 1 if anything failed.
"""

from __future__ import annotations

import json
import re
import sys

from vectors.common import SPEC, VECTORS, Fail, need
from vectors.ids import check_ids
from vectors.otlp import check_otlp, load_gen
from vectors.propagation import check_propagation
from vectors.sampling import check_sampling

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
