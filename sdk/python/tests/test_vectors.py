"""Runs every shared vector in spec/vectors/*.json (spec/README.md "Conformance").

Propagation vectors go through the public `TextMapPropagator`s with dict carriers and the OTel
context, exactly as an application uses them; ID, sampler and OTLP vectors run the native
functions the SDK itself runs. No vector is skipped (`SKIPPED` is empty and must give a reason
for any entry), and a vector file without a runner fails the suite.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

import pytest
from opentelemetry import baggage as otel_baggage
from opentelemetry import trace
from opentelemetry.context import Context

import weft_sdk
from weft_sdk import _native
from weft_sdk.propagators import WeftPropagator

from conftest import VECTORS

T = _native.testing
SKIPPED: Dict[str, str] = {}

PROPAGATION_FILES = ["traceparent.json", "tracestate.json", "baggage.json", "b3.json", "xray.json", "jaeger.json", "composite.json"]
OTHER_FILES = ["ids.json", "sampling.json", "otlp.json"]


def load(name: str) -> List[dict]:
    doc = json.loads((VECTORS / name).read_text())
    assert doc["version"] == 1, f"{name}: unknown vector format version"
    return doc["vectors"]


def cases(files: List[str]) -> List[Any]:
    out = []
    for f in files:
        for v in load(f):
            marks = [pytest.mark.skip(reason=SKIPPED[v["name"]])] if v["name"] in SKIPPED else []
            out.append(pytest.param(f, v, id=f"{f}:{v['name']}", marks=marks))
    return out


def test_every_vector_file_has_a_runner() -> None:
    files = sorted(p.name for p in VECTORS.glob("*.json"))
    assert files == sorted(PROPAGATION_FILES + OTHER_FILES), f"vector files without a runner: {files}"


# ---- propagation ------------------------------------------------------------------------------


def propagator(inp: dict) -> WeftPropagator:
    if "propagators" in inp:
        return weft_sdk.propagators.CompositePropagator(inp["propagators"])
    p = inp["propagator"]
    name = p["name"]
    if name == "b3":
        return weft_sdk.propagators.B3MultiPropagator() if p.get("inject_encoding") == "multi" else weft_sdk.propagators.B3Propagator()
    return {
        "tracecontext": weft_sdk.propagators.TraceContextPropagator,
        "baggage": weft_sdk.propagators.BaggagePropagator,
        "b3multi": weft_sdk.propagators.B3MultiPropagator,
        "xray": weft_sdk.propagators.XRayPropagator,
        "jaeger": weft_sdk.propagators.JaegerPropagator,
    }[name]()


class ListGetter:
    """A carrier of header lines (repeated names kept), read like HTTP headers."""

    def get(self, carrier: List[Tuple[str, str]], key: str) -> Optional[List[str]]:
        vals = [v for k, v in carrier if k.lower() == key.lower()]
        return vals or None

    def keys(self, carrier: List[Tuple[str, str]]) -> List[str]:
        return [k for k, _ in carrier]


def baggage_list(context: Context) -> List[dict]:
    """The extracted baggage with metadata, as weft keeps it beside the API baggage."""
    from weft_sdk.propagators import _api_baggage

    return [{"key": k, "value": v, "metadata": m} for k, v, m in _api_baggage(context)]


@pytest.mark.parametrize("file,v", cases(PROPAGATION_FILES))
def test_propagation(file: str, v: dict) -> None:
    inp, exp = v["input"], v["expected"]
    p = propagator(inp)
    if v["operation"] == "extract":
        carrier = [(k, val) for k, vals in inp["headers"].items() for val in vals]
        cx = p.extract(carrier, Context(), getter=ListGetter())
        span = trace.get_current_span(cx)
        sc = span.get_span_context()
        assert sc.is_valid == exp["valid"]
        if sc.is_valid:
            assert isinstance(span, weft_sdk.Span)
            assert f"{sc.trace_id:032x}" == exp["trace_id"]
            assert f"{sc.span_id:016x}" == exp["span_id"]
            assert f"{int(sc.trace_flags):02x}" == exp["trace_flags"]
            assert sc.is_remote == exp.get("is_remote", True)
            b3_debug, jaeger_debug, lineage, tracestate = T.span_extras(span)
            assert tracestate == exp["tracestate"]
            if "b3_debug" in exp:
                assert b3_debug == exp["b3_debug"]
            if "jaeger_debug" in exp:
                assert jaeger_debug == exp["jaeger_debug"]
            assert lineage == exp.get("xray_lineage")
        if exp.get("baggage") is not None:
            assert baggage_list(cx) == exp["baggage"]
            assert dict(otel_baggage.get_all(cx)) == {e["key"]: e["value"] for e in exp["baggage"]}
        if "reinject" in exp:
            out: Dict[str, str] = {}
            p.inject(out, cx)
            assert out == exp["reinject"]
        if all(len(vals) == 1 for vals in inp["headers"].values()):
            # A plain dict with the default getter takes the native fast path: same result.
            fast = p.extract({k: vals[0] for k, vals in inp["headers"].items()}, Context())
            assert trace.get_current_span(fast).get_span_context() == sc
            assert baggage_list(fast) == baggage_list(cx)
    elif v["operation"] == "inject":
        cx = Context()
        c = inp.get("context")
        if c is not None:
            span = T.remote_span(
                int(c["trace_id"], 16),
                int(c["span_id"], 16),
                int(c["trace_flags"], 16),
                c.get("tracestate", ""),
                c.get("b3_debug", False),
                c.get("jaeger_debug", False),
                c.get("xray_lineage"),
            )
            if span.get_span_context().is_valid:
                cx = trace.set_span_in_context(span, cx)
        for e in inp.get("baggage") or []:
            cx = otel_baggage.set_baggage(e["key"], e["value"], cx)
        if inp.get("baggage"):
            from weft_sdk.propagators import _BAGGAGE_KEY
            from opentelemetry.context import set_value

            cx = set_value(_BAGGAGE_KEY, tuple((e["key"], e["value"], e["metadata"]) for e in inp["baggage"]), cx)
        out = {}
        p.inject(out, cx)
        assert out == exp["headers"]
    else:
        pytest.fail(f"unknown operation {v['operation']}")


# ---- IDs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("file,v", cases(["ids.json"]))
def test_ids(file: str, v: dict) -> None:
    inp, exp, op = v["input"], v["expected"], v["operation"]
    if op == "hex_encode":
        assert T.hex_encode(inp["bytes"]) == exp["hex"]
    elif op == "validate":
        parse = T.parse_trace_id if inp["kind"] == "trace_id" else T.parse_span_id
        assert (parse(inp["hex"]) is not None) == exp["valid"]
    elif op == "generate":
        if inp["kind"] == "trace_flags":
            parent = inp.get("parent_trace_flags")
            flags = T.new_span_flags(int(parent, 16) if parent is not None else None, inp["sampled"])
            assert f"{flags:02x}" == exp["trace_flags"]
            return
        hex_id, used = T.id_from_draws(inp["kind"], [int(d, 16) for d in inp["draws"]])
        assert hex_id == exp["id"]
        assert used == exp["draws_used"]
    elif op == "generate_xray":
        hex_id = T.xray_trace_id_from_draws(int(inp["unix_nanos"]), [int(d, 16) for d in inp["draws"]])
        assert hex_id == exp["trace_id"]
        assert f"1-{hex_id[:8]}-{hex_id[8:]}" == exp["xray_root"]
    elif op == "prng_wyrand":
        got = [f"{x:016x}" for x in T.wyrand(int(inp["seed"], 16), inp["count"])]
        assert got == exp["outputs"]
    else:
        pytest.fail(f"unknown operation {op}")


# ---- sampling -------------------------------------------------------------------------------


def sampler(s: dict) -> weft_sdk.sampling.Sampler:
    S = weft_sdk.sampling
    t = s["type"]
    if t == "always_on":
        return S.AlwaysOn()
    if t == "always_off":
        return S.AlwaysOff()
    if t == "trace_id_ratio":
        return _Raw(("trace_id_ratio", float(s["ratio"])))
    if t == "consistent_probability":
        return _Raw(("consistent_probability", float(s["probability"])))
    if t == "rate_limiting":
        return S.RateLimiting(s["spans_per_second"])
    if t == "parent_based":
        slots = [
            sampler(s[k]) if s.get(k) is not None else None
            for k in ("remote_parent_sampled", "remote_parent_not_sampled", "local_parent_sampled", "local_parent_not_sampled")
        ]
        return S.ParentBased(sampler(s["root"]), *slots)
    raise AssertionError(f"unknown sampler {t}")


class _Raw(weft_sdk.sampling.Sampler):
    """Out-of-range ratios (the vectors test the clamping) bypass the Python-side validation."""

    def __init__(self, spec: tuple) -> None:
        self.spec = spec

    def _spec(self) -> tuple:
        return self.spec


def numbers_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(numbers_equal(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


@pytest.mark.parametrize("file,v", cases(["sampling.json"]))
def test_sampling(file: str, v: dict) -> None:
    inp, exp, op = v["input"], v["expected"], v["operation"]
    if op == "trace_id_ratio_bound":
        b = T.ratio_bound(inp["ratio"])
        if b is None:
            assert exp.get("sample_all") is True
        else:
            assert f"{b:016x}" == exp["bound"]
    elif op == "threshold_encode":
        th = T.threshold_for_probability(inp["probability"])
        assert th == exp["th"]
        assert th.ljust(14, "0") == exp["threshold"]
    elif op == "should_sample":
        s = _native.Sampler(sampler(inp["sampler"])._spec())
        parent = None
        if inp.get("parent") is not None:
            c = inp["parent"]
            parent = (int(c["trace_id"], 16), int(c["span_id"], 16), int(c["trace_flags"], 16), bool(c.get("is_remote", False)), c.get("tracestate", ""))
        decision, tracestate = s.should_sample(int(inp["trace_id"], 16), inp["name"], parent)
        assert decision == exp["decision"]
        assert tracestate == exp["tracestate"]
    elif op == "rate_limit_sequence":
        got = T.rate_limit_sequence(inp["spans_per_second"], int(inp["created_ns"]), [int(t) for t in inp["calls_ns"]])
        assert got == exp["sampled"]
    elif op == "jaeger_remote_resolve":
        try:
            resolved = T.jaeger_resolve(inp["body"], inp["operations"])
        except ValueError:
            assert exp["valid"] is False
            return
        assert exp["valid"] is True
        got = {}
        for op_name, t, a, b in resolved:
            if t == "trace_id_ratio":
                got[op_name] = {"type": t, "ratio": a}
            elif t == "rate_limiting":
                got[op_name] = {"type": t, "spans_per_second": a}
            else:
                got[op_name] = {"type": t, "ratio": a, "lower_bound": b}
        assert numbers_equal(got, exp["samplers"]), f"got {got}, want {exp['samplers']}"
    else:
        pytest.fail(f"unknown operation {op}")


# ---- OTLP -----------------------------------------------------------------------------------


@pytest.mark.parametrize("file,v", cases(["otlp.json"]))
def test_otlp(file: str, v: dict) -> None:
    inp, exp, op = v["input"], v["expected"], v["operation"]
    if op == "encode_request":
        got = T.encode_request(json.dumps(inp))
        assert len(got) == exp["length"]
        assert got.hex() == exp["hex"]
    elif op == "decode_response":
        rejected, message, partial = T.decode_response(bytes.fromhex(inp["hex"]))
        assert (rejected, message, partial) == (exp["rejected_spans"], exp["error_message"], exp["partial"])
    elif op == "classify_response":
        if inp["transport"] == "http":
            if inp.get("error") is not None:
                outcome, delay = "retryable", None
            else:
                headers = {k.lower(): vals[0] for k, vals in (inp.get("headers") or {}).items()}
                outcome, delay = T.classify_http(inp["status"], headers.get("retry-after"), inp.get("now"))
        else:
            outcome, delay = T.classify_grpc(inp["code"], inp.get("retry_info_delay_ms"))
        assert outcome == exp["outcome"]
        assert delay == exp.get("delay_ms")
    elif op == "backoff":
        r = T.backoff_range_ms(inp["retry"])
        if r is None:
            assert exp.get("give_up") is True
        else:
            assert r == (exp["min_ms"], exp["max_ms"])
    elif op == "parse_retry_after":
        assert T.parse_retry_after(inp["value"], inp.get("now")) == exp.get("delay_ms")
    else:
        pytest.fail(f"unknown operation {op}")

