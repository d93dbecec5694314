"""weft's ASGI server instrumentation: one SERVER span per HTTP request.

    app = weft_sdk.asgi.WeftASGIMiddleware(app)     # Starlette, FastAPI, any ASGI app

As `weft_sdk.wsgi`, with the work in native calls: the incoming context from the scope's
headers (the configured propagators), the SERVER span named `{method} {route}` when the
framework records the matched route in the scope (`scope["route"].path`: Starlette, FastAPI) or
`{method}`, the stable HTTP semantic-convention attributes, the status code from
`http.response.start` (error on 5xx), and exceptions (event, `error.type`, error status). The
span is current while the application runs and ends when it returns. Scopes other than `http`
(websocket, lifespan) pass through.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional

from opentelemetry import propagate as _propagate
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, TextMapPropagator

from . import _native
from ._provider import TracerProvider
from .wsgi import _native_propagator, _tracer_resolver

__all__ = ["WeftASGIMiddleware", "ScopeGetter"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ScopeGetter(Getter[Scope]):
    """Reads HTTP headers from an ASGI scope (`headers`: pairs of lowercase bytes)."""

    def get(self, carrier: Scope, key: str) -> Optional[List[str]]:
        k = key.lower().encode("latin-1")
        out = [v.decode("latin-1") for n, v in carrier.get("headers") or () if n.lower() == k]
        return out or None

    def keys(self, carrier: Scope) -> List[str]:
        return [n.decode("latin-1") for n, _ in carrier.get("headers") or ()]


_GETTER = ScopeGetter()


def _extract_context(textmap: TextMapPropagator, scope: Dict[str, Any]) -> Context:
    return textmap.extract(scope, getter=_GETTER)


class WeftASGIMiddleware:
    """Wraps an ASGI application: a SERVER span per HTTP request (see the module docs).

    `tracer_provider`: a `weft_sdk.TracerProvider`, or `None` for the global one (until that is
    a weft provider, requests pass through untraced). `propagator`: a `TextMapPropagator`, or
    `None` for the global textmap at request time.
    """

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        tracer_provider: Optional[TracerProvider] = None,
        propagator: Optional[TextMapPropagator] = None,
    ) -> None:
        if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
            raise TypeError(f"tracer_provider must be a weft_sdk.TracerProvider, not {type(tracer_provider).__name__}")
        self.app = app
        self._server = _native.AsgiServer(
            _tracer_resolver(tracer_provider),
            propagator,
            _propagate.get_global_textmap,
            _native_propagator,
            _extract_context,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        request = self._server.start(scope)
        if request is None:
            await self.app(scope, receive, send)
            return

        async def send_with_status(message: Message) -> None:
            if message.get("type") == "http.response.start":
                request.status(message.get("status"))
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        except Exception as e:
            request.exception(e)
            raise
        finally:
            request.finish(scope)
