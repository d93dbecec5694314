"""Python helpers the native core calls back into (off the hot path only).

`weft_sdk._native` calls these when an application asks for something that has to be a Python
object of `opentelemetry-api` (a `SpanContext`), for exception details, for the decorator form
of `start_as_current_span`, and to log.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import traceback
from typing import Any, Callable, Dict, Mapping, Optional, TypeVar

from opentelemetry.trace import SpanContext, TraceFlags, TraceState

_logger = logging.getLogger("weft_sdk")

F = TypeVar("F", bound=Callable[..., Any])


def make_span_context(trace_id: int, span_id: int, is_remote: bool, flags: int, tracestate: str) -> SpanContext:
    """Builds the API `SpanContext` of a weft span (called once per span, when asked for)."""
    state = _trace_state(tracestate) if tracestate else TraceState()
    return SpanContext(trace_id, span_id, is_remote, TraceFlags(flags), state)


def _trace_state(header: str) -> TraceState:
    pairs = []
    for member in header.split(","):
        key, sep, value = member.strip().partition("=")
        if sep and key:
            pairs.append((key, value))
    # The API drops (with a warning) the keys its Level 1 grammar rejects; weft keeps the full
    # Level 2 tracestate on its own span and propagates that one.
    return TraceState(pairs)


def exception_attributes(exception: BaseException, attributes: Optional[Mapping[str, Any]], escaped: bool) -> Dict[str, Any]:
    """The semantic-convention attributes of an `exception` event, as the official SDK sets them."""
    stacktrace = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    module = type(exception).__module__
    qualname = type(exception).__qualname__
    exc_type = f"{module}.{qualname}" if module and module != "builtins" else qualname
    attrs: Dict[str, Any] = {
        "exception.type": exc_type,
        "exception.message": str(exception),
        "exception.stacktrace": stacktrace,
        "exception.escaped": str(escaped),
    }
    if attributes:
        attrs.update(attributes)
    return attrs


def decorate(tracer: Any, kwargs: Dict[str, Any], func: F) -> F:
    """`@tracer.start_as_current_span(...)`: one new span per call of `func`."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kw: Any) -> Any:
            with tracer.start_as_current_span(**kwargs):
                return await func(*args, **kw)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(func)
    def wrapper(*args: Any, **kw: Any) -> Any:
        with tracer.start_as_current_span(**kwargs):
            return func(*args, **kw)

    return wrapper  # type: ignore[return-value]


class _RateLimitedLog:
    """At most one warning per `interval` seconds; the suppressed count goes with the next one."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._last = 0.0
        self._suppressed = 0
        self._lock = threading.Lock()

    def warn(self, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            if self._last and now - self._last < self._interval:
                self._suppressed += 1
                return
            suppressed, self._suppressed, self._last = self._suppressed, 0, now
        if suppressed:
            message = f"{message} ({suppressed} similar warnings suppressed)"
        _logger.warning(message)


_WARN = _RateLimitedLog(10.0)


def warn(message: str) -> None:
    """Logs a warning through `logging` (logger `weft_sdk`), rate-limited."""
    _WARN.warn(message)


def log_native(message: str) -> None:
    """Logs a warning of the native core (`sdk/rust`: dropped spans, failed exports), already
    rate-limited there, through `logging` (logger `weft_sdk`)."""
    _logger.warning(message)
