"""Propagators (spec/propagation.md) as OpenTelemetry `TextMapPropagator`s.

Parsing and formatting run in Rust (the same code as `sdk/rust`); these classes read headers
through the getter, write them through the setter, and move the result into the OTel context.
Invalid headers are ignored exactly as the spec says, and nothing a carrier contains makes
`extract` raise.

    from opentelemetry import propagate
    propagate.set_global_textmap(weft_sdk.propagators.from_env())
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from opentelemetry import baggage as _baggage
from opentelemetry import trace as _trace
from opentelemetry.context import Context, create_key, get_current, get_value, set_value
from opentelemetry.propagators.textmap import (
    CarrierT,
    DefaultGetter,
    DefaultSetter,
    Getter,
    Setter,
    TextMapPropagator,
    default_getter,
    default_setter,
)

from . import _api, _native

__all__ = [
    "WeftPropagator",
    "TraceContextPropagator",
    "BaggagePropagator",
    "B3Propagator",
    "B3MultiPropagator",
    "XRayPropagator",
    "JaegerPropagator",
    "CompositePropagator",
    "from_env",
]

# The full baggage as last extracted (with W3C metadata, which the API's baggage cannot hold),
# reused on inject while the API baggage still has the same members.
_BAGGAGE_KEY = create_key("weft-baggage")
# Where opentelemetry.baggage keeps its dict (private, stable since the API's first release).
_API_BAGGAGE_KEY = getattr(_baggage, "_BAGGAGE_KEY", "baggage")

_EXTRACT_FIELDS = {
    "tracecontext": ("traceparent", "tracestate"),
    "baggage": ("baggage",),
    "b3": ("b3", "x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags", "x-b3-parentspanid"),
    "b3multi": ("b3", "x-b3-traceid", "x-b3-spanid", "x-b3-sampled", "x-b3-flags", "x-b3-parentspanid"),
    "xray": ("x-amzn-trace-id",),
    "jaeger": ("uber-trace-id",),
}
_PREFIXES = {"jaeger": ("uberctx-",)}
_CARRIES_BAGGAGE = {"baggage", "jaeger"}

BaggageList = List[Tuple[str, str, str]]


def _values(carrier: Any, getter: Getter[Any], name: str) -> Optional[Sequence[str]]:
    try:
        v = getter.get(carrier, name)
    except Exception:  # a getter that fails on a missing header is treated as "absent"
        v = None
    if v is None and type(getter) is DefaultGetter and isinstance(carrier, Mapping):
        # HTTP header names are case-insensitive; the default getter is not.
        lname = name.lower()
        for k in carrier:
            if isinstance(k, str) and k.lower() == lname:
                v = getter.get(carrier, k)
                break
    if v is None:
        return None
    if isinstance(v, str):
        return (v,)
    return v


def _read_headers(carrier: Any, getter: Getter[Any], names: Iterable[str], prefixes: Sequence[str]) -> List[Tuple[str, str]]:
    out: List[Tuple[str, str]] = []
    for name in names:
        vals = _values(carrier, getter, name)
        if vals:
            out.extend((name, v) for v in vals if isinstance(v, str))
    if prefixes:
        try:
            keys = list(getter.keys(carrier))
        except Exception:
            keys = []
        for k in dict.fromkeys(keys):
            if isinstance(k, str) and any(k.lower().startswith(p) for p in prefixes):
                vals = _values(carrier, getter, k)
                if vals:
                    out.extend((k.lower(), v) for v in vals if isinstance(v, str))
    return out


def _api_baggage(context: Optional[Context]) -> BaggageList:
    entries = _baggage.get_all(context)
    if not entries:
        return []
    stash = get_value(_BAGGAGE_KEY, context)
    meta: Dict[Tuple[str, str], str] = {}
    if isinstance(stash, tuple):
        meta = {(k, v): m for k, v, m in stash}
    out: BaggageList = []
    for k, v in entries.items():
        sv = v if isinstance(v, str) else str(v)
        out.append((k, sv, meta.get((k, sv), "")))
    return out


class WeftPropagator(TextMapPropagator):
    """A composite of weft formats, in order (a later valid context wins on extract)."""

    def __init__(self, names: Sequence[str]) -> None:
        names = [n.strip().lower() for n in names if n.strip()]
        seen: List[str] = []
        prefixes: List[str] = []
        for n in names:
            for f in _EXTRACT_FIELDS.get(n, ()):
                if f not in seen:
                    seen.append(f)
            prefixes.extend(_PREFIXES.get(n, ()))
        self._native = _native.Propagator(list(names), seen, prefixes)
        self._names = tuple(names)
        self._extract_fields = tuple(seen)
        self._prefixes = tuple(prefixes)
        self._baggage = any(n in _CARRIES_BAGGAGE for n in names)
        self._fields = set(self._native.fields())

    def extract(
        self,
        carrier: CarrierT,
        context: Optional[Context] = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        if context is None:
            context = get_current()
        if not self._baggage and type(carrier) is dict and isinstance(carrier, dict) and type(getter) is DefaultGetter:
            try:
                cx = self._native.extract_dict_context(carrier, context)
                if cx is not None:
                    return cx
            except Exception as e:  # never raise out of extract
                _api.warn(f"weft propagator {self._names}: could not read the carrier: {e!r}")
                return context
        try:
            if type(carrier) is dict and isinstance(carrier, dict) and type(getter) is DefaultGetter:
                # The common case, read in one native call (same result as the loop below).
                span, bag = self._native.extract_dict(carrier)
            else:
                headers = _read_headers(carrier, getter, self._extract_fields, self._prefixes)
                if not headers:
                    return context
                span, bag = self._native.extract(headers)
        except Exception as e:  # a broken carrier or getter: keep the context, never raise
            _api.warn(f"weft propagator {self._names}: could not read the carrier: {e!r}")
            return context
        if span is not None:
            context = _trace.set_span_in_context(span, context)
        if bag:
            # One new context for all members (set_baggage per member copies the dict each time).
            merged = dict(_baggage.get_all(context))
            merged.update((k, v) for k, v, _m in bag)
            context = set_value(_API_BAGGAGE_KEY, merged, context)
            context = set_value(_BAGGAGE_KEY, tuple(bag), context)
        return context

    def inject(
        self,
        carrier: CarrierT,
        context: Optional[Context] = None,
        setter: Setter[CarrierT] = default_setter,
    ) -> None:
        if not self._baggage and type(carrier) is dict and isinstance(carrier, dict) and type(setter) is DefaultSetter:
            # The common case, in one native call (same result as below).
            self._native.inject_span_dict(carrier, context)
            return
        span = _trace.get_current_span(context)
        arg: Any
        if isinstance(span, _native.Span):
            arg = span
        else:
            sc = span.get_span_context()
            arg = (sc.trace_id, sc.span_id, int(sc.trace_flags), sc.is_remote, sc.trace_state.to_header()) if sc.is_valid else None
        bag = _api_baggage(context) if self._baggage else []
        if arg is None and not bag:
            return
        if type(carrier) is dict and isinstance(carrier, dict) and type(setter) is DefaultSetter:
            self._native.inject_dict(carrier, arg, bag)
            return
        for k, v in self._native.inject(arg, bag):
            setter.set(carrier, k, v)

    @property
    def fields(self) -> Set[str]:
        return set(self._fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({','.join(self._names)})"


class TraceContextPropagator(WeftPropagator):
    """W3C `traceparent`/`tracestate`, Level 2."""

    def __init__(self) -> None:
        super().__init__(["tracecontext"])


class BaggagePropagator(WeftPropagator):
    """W3C `baggage` (metadata kept across a weft extract/inject)."""

    def __init__(self) -> None:
        super().__init__(["baggage"])


class B3Propagator(WeftPropagator):
    """B3: extracts single and multi headers, injects the single `b3` header."""

    def __init__(self) -> None:
        super().__init__(["b3"])


class B3MultiPropagator(WeftPropagator):
    """B3: extracts single and multi headers, injects `X-B3-*`."""

    def __init__(self) -> None:
        super().__init__(["b3multi"])


class XRayPropagator(WeftPropagator):
    """AWS X-Ray `X-Amzn-Trace-Id` (Root, Parent, Sampled; Lineage passed through)."""

    def __init__(self) -> None:
        super().__init__(["xray"])


class JaegerPropagator(WeftPropagator):
    """Jaeger `uber-trace-id` and `uberctx-*` baggage."""

    def __init__(self) -> None:
        super().__init__(["jaeger"])


class CompositePropagator(WeftPropagator):
    """Several weft formats by `OTEL_PROPAGATORS` names, run as one native composite."""


def from_env() -> WeftPropagator:
    """The composite named by `OTEL_PROPAGATORS` (default `tracecontext,baggage`), with weft's
    implementation of each name (`tracecontext`, `baggage`, `b3`, `b3multi`, `xray`, `jaeger`,
    `none`). Unknown names are skipped with a warning, as the API does."""
    value = os.environ.get("OTEL_PROPAGATORS", "tracecontext,baggage")
    names: List[str] = []
    known = set(_EXTRACT_FIELDS) | {"none"}
    for n in value.split(","):
        n = n.strip().lower()
        if not n:
            continue
        if n not in known:
            _api.warn(f"OTEL_PROPAGATORS: unknown propagator {n!r} skipped")
            continue
        names.append(n)
    return CompositePropagator(names)
