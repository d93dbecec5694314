"""weft: OpenTelemetry tracing for Python on a native core.

    from opentelemetry import trace
    import weft_sdk

    trace.set_tracer_provider(weft_sdk.TracerProvider())

That is the only change an application makes: code written against `opentelemetry-api`, and the
official instrumentation packages, then record spans through weft. Spans, IDs, sampling,
attributes, the export queue and the OTLP exporter live in Rust (`sdk/rust`); export runs on its
own thread and never holds the GIL.
"""

from __future__ import annotations

from opentelemetry import context as _context
from opentelemetry import trace as _trace
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext as _CVRC
from opentelemetry.trace.propagation import _SPAN_KEY

from . import _api, _native

_rt = getattr(_context, "_RUNTIME_CONTEXT", None)
_native.init(
    span_key=_SPAN_KEY,
    # Read the ContextVar directly only when it is the API's default runtime context.
    current_var=_rt._current_context if isinstance(_rt, _CVRC) and type(_rt) is _CVRC else None,
    get_current=_context.get_current,
    attach=_context.attach,
    detach=_context.detach,
    set_span_in_context=_trace.set_span_in_context,
    make_span_context=_api.make_span_context,
    exception_attributes=_api.exception_attributes,
    decorate=_api.decorate,
    warn=_api.warn,
    log=_api.log_native,
    span_kind=_trace.SpanKind,
    context_cls=_context.Context,
)
# The native types implement the API's abstract classes; registering them makes isinstance
# checks in the API and in instrumentation libraries (e.g. `use_span`) see them as such.
_trace.Span.register(_native.Span)
_trace.Tracer.register(_native.Tracer)

from ._provider import InMemoryExporter, NoopExporter, OTLPExporter, SpanLimits, TracerProvider  # noqa: E402
from . import asgi, propagators, sampling, wsgi  # noqa: E402

Span = _native.Span
Tracer = _native.Tracer
__version__: str = _native.__version__

__all__ = [
    "TracerProvider",
    "Tracer",
    "Span",
    "OTLPExporter",
    "InMemoryExporter",
    "NoopExporter",
    "SpanLimits",
    "propagators",
    "sampling",
    "wsgi",
    "asgi",
    "new_trace_id",
    "new_span_id",
]


def new_trace_id() -> int:
    """A random 128-bit trace ID (the thread-local PRNG of the native core)."""
    return _native.new_trace_id()


def new_span_id() -> int:
    """A random 64-bit span ID."""
    return _native.new_span_id()
