"""weft's WSGI server instrumentation: one SERVER span per request, on a native hot path.

    app.wsgi_app = weft_sdk.wsgi.WeftMiddleware(app.wsgi_app)   # any WSGI app
    weft_sdk.wsgi.instrument_flask(app)                          # Flask: the same, plus routes

Per request, one native call extracts the incoming context (the configured propagators; the
W3C ones, weft's or the official defaults, read the `HTTP_*` environ keys natively), starts the
SERVER span named `{method} {route}` (Flask) or `{method}`, records the stable HTTP semantic
convention attributes, makes the span current while the application runs, and returns the
response iterable; the span ends when the server closes it. 5xx responses and exceptions set the
error status (`error.type`, and an `exception` event for exceptions).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from opentelemetry import propagate as _propagate
from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, TextMapPropagator

from . import _native
from ._provider import TracerProvider, _SDK_VERSION
from .propagators import WeftPropagator

__all__ = ["WeftMiddleware", "instrument_flask", "EnvironGetter"]

_SCOPE = "weft_sdk.wsgi"


class EnvironGetter(Getter[dict]):  # type: ignore[type-arg]
    """Reads HTTP headers from a WSGI environ (`traceparent` is `HTTP_TRACEPARENT`)."""

    def get(self, carrier: dict, key: str) -> Optional[list]:  # type: ignore[type-arg]
        v = carrier.get("HTTP_" + key.upper().replace("-", "_"))
        return [v] if isinstance(v, str) else None

    def keys(self, carrier: dict) -> list:  # type: ignore[type-arg]
        return [k[5:].lower().replace("_", "-") for k in carrier if isinstance(k, str) and k.startswith("HTTP_")]


_GETTER = EnvironGetter()
_NATIVE_DEFAULTS: dict = {}  # type: ignore[type-arg]


def _native_propagator(textmap: TextMapPropagator) -> Optional[_native.Propagator]:
    """The native propagator that extracts what `textmap` extracts, if there is one: weft's own
    propagators, and the official W3C trace-context and baggage propagators (the API's default
    `OTEL_PROPAGATORS=tracecontext,baggage`). `None`: extract through `textmap` in Python."""
    if isinstance(textmap, WeftPropagator):
        return textmap._native
    names = []
    parts = getattr(textmap, "_propagators", None) if type(textmap).__name__ == "CompositePropagator" else [textmap]
    for p in parts or ():
        qual = f"{type(p).__module__}.{type(p).__qualname__}"
        if qual == "opentelemetry.trace.propagation.tracecontext.TraceContextTextMapPropagator":
            names.append("tracecontext")
        elif qual == "opentelemetry.baggage.propagation.W3CBaggagePropagator":
            names.append("baggage")
        elif isinstance(p, WeftPropagator):
            names.extend(p._names)
        else:
            return None
    if not names:
        return None
    key = tuple(names)
    if key not in _NATIVE_DEFAULTS:
        _NATIVE_DEFAULTS[key] = WeftPropagator(names)._native
    native: _native.Propagator = _NATIVE_DEFAULTS[key]
    return native


def _extract_context(textmap: TextMapPropagator, environ: dict) -> Context:  # type: ignore[type-arg]
    """The general path: `textmap.extract` over the environ (baggage, other propagators)."""
    return textmap.extract(environ, getter=_GETTER)


def _tracer_resolver(tracer_provider: Optional[TracerProvider]) -> Callable[[], Any]:
    def resolve() -> Any:
        p = tracer_provider if tracer_provider is not None else _trace.get_tracer_provider()
        if isinstance(p, TracerProvider):
            return p.get_tracer(_SCOPE, _SDK_VERSION)
        return None

    return resolve


class WeftMiddleware(_native.WsgiMiddleware):
    """Wraps a WSGI application: a SERVER span per request (see the module docs).

    `tracer_provider`: a `weft_sdk.TracerProvider`, or `None` for the global one (looked up on
    each request until it is a weft provider; until then requests pass through untraced).
    `propagator`: a `TextMapPropagator`, or `None` for the global textmap at request time.
    `flask`: read the matched Flask rule for the span name and `http.route`
    (`instrument_flask` sets it).
    """

    def __new__(
        cls,
        app: Callable[..., Iterable[bytes]],
        tracer_provider: Optional[TracerProvider] = None,
        propagator: Optional[TextMapPropagator] = None,
        flask: bool = False,
    ) -> "WeftMiddleware":
        if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
            raise TypeError(f"tracer_provider must be a weft_sdk.TracerProvider, not {type(tracer_provider).__name__}")
        mw: WeftMiddleware = super().__new__(
            cls,
            app,
            _tracer_resolver(tracer_provider),
            propagator,
            _propagate.get_global_textmap,
            _native_propagator,
            _extract_context,
            flask,
        )
        return mw


def _on_flask_exception(sender: Any, exception: BaseException, **extra: Any) -> None:
    _native.record_server_exception(exception)


def instrument_flask(
    app: Any,
    tracer_provider: Optional[TracerProvider] = None,
    propagator: Optional[TextMapPropagator] = None,
) -> Any:
    """Instruments a Flask app: `app.wsgi_app = WeftMiddleware(app.wsgi_app, flask=True)`, and
    records the exceptions Flask turns into 500 responses (`got_request_exception`, which runs
    only on an exception). Returns the app."""
    import flask

    app.wsgi_app = WeftMiddleware(app.wsgi_app, tracer_provider, propagator, flask=True)
    flask.got_request_exception.connect(_on_flask_exception, app, weak=False)
    return app
