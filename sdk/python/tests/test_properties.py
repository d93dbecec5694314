"""Hypothesis properties: round trips through every format, and no carrier content makes a
propagator raise."""

from __future__ import annotations

from typing import Dict, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import baggage as otel_baggage
from opentelemetry import trace
from opentelemetry.context import Context

import weft_sdk
from weft_sdk import _native
from weft_sdk.propagators import WeftPropagator

P = weft_sdk.propagators
ALL = ["tracecontext", "baggage", "b3", "b3multi", "xray", "jaeger"]

trace_ids = st.integers(min_value=1, max_value=(1 << 128) - 1)
span_ids = st.integers(min_value=1, max_value=(1 << 64) - 1)
flags = st.sampled_from([0, 1])
header_names = st.sampled_from(
    ["traceparent", "tracestate", "baggage", "b3", "X-B3-TraceId", "x-b3-spanid", "x-b3-sampled", "x-b3-flags",
     "X-Amzn-Trace-Id", "uber-trace-id", "uberctx-k", "Traceparent", "other"]
)
header_values = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="0123456789abcdef-=;,:", max_size=80),
    st.from_regex(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-3]", fullmatch=True),
)


def remote(trace_id: int, span_id: int, f: int) -> Context:
    return trace.set_span_in_context(_native.testing.remote_span(trace_id, span_id, f))


@settings(max_examples=150, deadline=None)
@given(trace_id=trace_ids, span_id=span_ids, f=flags, name=st.sampled_from(["tracecontext", "b3", "b3multi", "xray", "jaeger"]))
def test_span_context_round_trip(trace_id: int, span_id: int, f: int, name: str) -> None:
    if name == "xray":
        # X-Ray trace IDs carry epoch seconds in their first 4 bytes; any 128-bit value round-trips.
        pass
    p = WeftPropagator([name])
    carrier: Dict[str, str] = {}
    p.inject(carrier, remote(trace_id, span_id, f))
    sc = trace.get_current_span(p.extract(carrier)).get_span_context()
    assert (sc.trace_id, sc.span_id, int(sc.trace_flags) & 1, sc.is_remote) == (trace_id, span_id, f, True)


# Keys and values the W3C baggage grammar allows (values are percent-encoded on inject).
baggage_keys = st.from_regex(r"[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,20}", fullmatch=True)
baggage_values = st.text(min_size=0, max_size=30)


@settings(max_examples=150, deadline=None)
@given(entries=st.dictionaries(baggage_keys, baggage_values, max_size=8))
def test_baggage_round_trip(entries: Dict[str, str]) -> None:
    cx = Context()
    for k, v in entries.items():
        cx = otel_baggage.set_baggage(k, v, cx)
    carrier: Dict[str, str] = {}
    P.BaggagePropagator().inject(carrier, cx)
    got = otel_baggage.get_all(P.BaggagePropagator().extract(carrier))
    assert dict(got) == entries


@settings(max_examples=400, deadline=None)
@given(headers=st.lists(st.tuples(header_names, header_values), max_size=8), names=st.lists(st.sampled_from(ALL), min_size=1, max_size=4))
def test_extract_never_raises(headers: List[tuple], names: List[str]) -> None:
    p = WeftPropagator(names)
    carrier = dict(headers)
    cx = p.extract(carrier)
    span = trace.get_current_span(cx)
    sc = span.get_span_context()
    if sc.is_valid:
        out: Dict[str, str] = {}
        p.inject(out, cx)  # whatever was accepted can be injected again


@settings(max_examples=200, deadline=None)
@given(value=st.text(max_size=120))
def test_traceparent_agrees_with_the_official_propagator_on_validity(value: str) -> None:
    """Where the official propagator accepts a version-00 traceparent, weft does too (weft is
    stricter only where spec/propagation.md says so)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    official = trace.get_current_span(TraceContextTextMapPropagator().extract({"traceparent": value})).get_span_context()
    ours = trace.get_current_span(P.TraceContextPropagator().extract({"traceparent": value})).get_span_context()
    if official.is_valid and value.startswith("00-") and len(value) == 55:
        assert ours.is_valid and (ours.trace_id, ours.span_id) == (official.trace_id, official.span_id)


class BrokenGetter:
    def get(self, carrier: object, key: str) -> List[str]:
        raise RuntimeError("broken getter")

    def keys(self, carrier: object) -> List[str]:
        raise RuntimeError("broken getter")


def test_a_broken_getter_does_not_raise() -> None:
    cx = Context()
    assert P.from_env().extract({}, cx, getter=BrokenGetter()) is cx
    assert P.JaegerPropagator().extract({"x": "y"}, cx, getter=BrokenGetter()) is cx


@settings(max_examples=100, deadline=None)
@given(attrs=st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=20), st.integers(), st.floats(), st.booleans(), st.none(), st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3)), max_size=6))
def test_attributes_never_raise(attrs: dict) -> None:
    p = _provider()
    s = p.get_tracer("prop").start_span("s", attributes=attrs)
    s.set_attributes(attrs)
    for k, v in attrs.items():
        s.set_attribute(k, v)
    s.end()


_P: List[weft_sdk.TracerProvider] = []


def _provider() -> weft_sdk.TracerProvider:
    if not _P:
        _P.append(weft_sdk.TracerProvider(sampler=weft_sdk.sampling.ALWAYS_ON, exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False))
    return _P[0]


class DictGetter:
    """The default getter's behaviour, but not the DefaultGetter type: takes the Python path."""

    def get(self, carrier: Dict[str, str], key: str) -> Optional[List[str]]:
        v = carrier.get(key)
        return [v] if isinstance(v, str) else v

    def keys(self, carrier: Dict[str, str]) -> List[str]:
        return list(carrier.keys())


@settings(max_examples=300, deadline=None)
@given(headers=st.dictionaries(header_names.map(str.lower), header_values, max_size=6), names=st.lists(st.sampled_from(ALL), min_size=1, max_size=4))
def test_dict_fast_path_agrees_with_the_getter_path(headers: Dict[str, str], names: List[str]) -> None:
    p = WeftPropagator(names)
    fast = p.extract(dict(headers), Context())
    slow = p.extract(dict(headers), Context(), getter=DictGetter())
    assert trace.get_current_span(fast).get_span_context() == trace.get_current_span(slow).get_span_context()
    assert dict(otel_baggage.get_all(fast)) == dict(otel_baggage.get_all(slow))
    out_fast: Dict[str, str] = {}
    out_slow: Dict[str, str] = {}
    p.inject(out_fast, fast)

    class Setter:
        def set(self, carrier: Dict[str, str], key: str, value: str) -> None:
            carrier[key] = value

    p.inject(out_slow, slow, setter=Setter())
    assert out_fast == out_slow
