"""weft's own WSGI instrumentation (`weft_sdk.wsgi`): Flask served by a real werkzeug server,
plain WSGI apps, propagators, errors; and the trace read back from a real weft."""

from __future__ import annotations

import threading
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import requests
from flask import Flask
from opentelemetry import baggage, propagate, trace
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.propagators.textmap import TextMapPropagator
from werkzeug.serving import make_server

import weft_sdk
from conftest import Weft, flushed, wait_for

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"


@pytest.fixture
def global_provider(provider: weft_sdk.TracerProvider) -> Iterator[weft_sdk.TracerProvider]:
    """`provider` as the global provider (what `trace.get_tracer` in the app uses), resettable."""
    old = trace._TRACER_PROVIDER  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = provider  # type: ignore[attr-defined]
    yield provider
    trace._TRACER_PROVIDER = old  # type: ignore[attr-defined]


def make_app(tp: weft_sdk.TracerProvider) -> Tuple[Flask, Dict[str, str]]:
    app = Flask("shop")
    state = {"base": ""}

    @app.route("/checkout/<int:cart>")
    def checkout(cart: int) -> str:
        trace.get_current_span().set_attribute("cart.items", 3)
        r = requests.get(state["base"] + "/inventory", timeout=10)
        return f"ok:{cart}:" + r.text

    @app.route("/inventory")
    def inventory() -> str:
        with trace.get_tracer("shop").start_as_current_span("db.query") as s:
            s.set_attribute("db.system", "sqlite")
        return "in stock"

    @app.route("/boom")
    def boom() -> str:
        raise ValueError("out of stock")

    @app.route("/unavailable")
    def unavailable() -> Tuple[str, int]:
        return "later", 503

    weft_sdk.wsgi.instrument_flask(app, tracer_provider=tp)
    return app, state


def serve(app: Flask, state: Dict[str, str]) -> Any:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["base"] = f"http://127.0.0.1:{server.server_port}"
    return server


def by_name(spans: List[dict]) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for s in spans:
        out.setdefault(s["name"], []).append(s)
    return out


def checkout_request(tp: weft_sdk.TracerProvider) -> None:
    app, state = make_app(tp)
    RequestsInstrumentor().instrument(tracer_provider=tp)
    server = serve(app, state)
    try:
        # From outside (urllib: not instrumented): an incoming traceparent.
        req = urllib.request.Request(
            state["base"] + "/checkout/42?coupon=x",
            headers={"traceparent": TRACEPARENT, "User-Agent": "shop-test/1.0"},
        )
        exported = tp.stats()["exported"]
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200 and r.read() == b"ok:42:in stock"
        # The server span ends when the server closes the response, just after the client
        # has read it.
        wait_for(lambda: tp.force_flush(1000) and tp.stats()["exported"] >= exported + 4, what="4 spans exported")
    finally:
        RequestsInstrumentor().uninstrument()
        server.shutdown()


def check_checkout_tree(spans: List[dict]) -> None:
    by = by_name(spans)
    assert {s["trace_id"] for s in spans} == {TRACE_ID}
    (checkout,) = by["GET /checkout/<int:cart>"]
    (inventory,) = by["GET /inventory"]
    (db,) = by["db.query"]
    (client,) = by["GET"]
    assert checkout["kind"] == 1 and checkout["parent_span_id"] == PARENT_ID and checkout["parent_is_remote"]
    assert client["kind"] == 2
    assert inventory["kind"] == 1 and inventory["parent_span_id"] == client["span_id"]
    assert db["parent_span_id"] == inventory["span_id"]
    a = checkout["attributes"]
    port = a["server.port"]
    assert a == {
        "http.request.method": "GET",
        "url.scheme": "http",
        "server.address": "127.0.0.1",
        "server.port": port,
        "url.path": "/checkout/42",
        "url.query": "coupon=x",
        "client.address": "127.0.0.1",
        "client.port": a["client.port"],
        "user_agent.original": "shop-test/1.0",
        "network.protocol.version": "1.1",
        "cart.items": 3,
        "http.route": "/checkout/<int:cart>",
        "http.response.status_code": 200,
    }
    assert isinstance(port, int) and isinstance(a["client.port"], int)
    assert checkout["status_code"] == 0 and inventory["attributes"]["http.route"] == "/inventory"


def test_flask_request_tree_in_memory(global_provider: weft_sdk.TracerProvider) -> None:
    checkout_request(global_provider)
    spans = flushed(global_provider)
    check_checkout_tree([s for s in spans if s["trace_id"] == TRACE_ID])


@pytest.fixture(params=["official-propagators", "weft-propagators"])
def propagators(request: pytest.FixtureRequest) -> Iterator[str]:
    old = propagate.get_global_textmap()
    if request.param == "weft-propagators":
        propagate.set_global_textmap(weft_sdk.propagators.from_env())
    yield request.param
    propagate.set_global_textmap(old)


def test_flask_errors(global_provider: weft_sdk.TracerProvider, propagators: str) -> None:
    app, state = make_app(global_provider)
    server = serve(app, state)
    try:
        assert requests.get(state["base"] + "/boom", headers={"traceparent": TRACEPARENT}, timeout=10).status_code == 500
        assert requests.get(state["base"] + "/unavailable", timeout=10).status_code == 503
        assert requests.get(state["base"] + "/missing", timeout=10).status_code == 404
        wait_for(lambda: len(flushed(global_provider)) >= 3, what="3 server spans")
    finally:
        server.shutdown()
    by = by_name(flushed(global_provider))
    (boom,) = by["GET /boom"]
    assert boom["trace_id"] == TRACE_ID and boom["parent_span_id"] == PARENT_ID
    assert boom["status_code"] == 2 and boom["status_description"] == "ValueError: out of stock"
    assert boom["attributes"]["error.type"] == "ValueError"
    assert boom["attributes"]["http.response.status_code"] == 500
    (event,) = boom["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "out of stock"
    assert "raise ValueError" in event["attributes"]["exception.stacktrace"]
    (unavailable,) = by["GET /unavailable"]
    assert unavailable["status_code"] == 2 and unavailable["attributes"]["error.type"] == "503"
    assert unavailable["events"] == []
    (missing,) = by["GET"]  # no route matched: the name is the method alone
    assert missing["status_code"] == 0 and "http.route" not in missing["attributes"]
    assert missing["attributes"]["http.response.status_code"] == 404


def call(app: Callable[..., Any], environ: Dict[str, Any]) -> Tuple[List[str], bytes]:
    """A minimal WSGI server: calls the app, reads the body, closes the response."""
    status: List[str] = []

    def start_response(s: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        status.append(s)
        return lambda b: None

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return status, body


def environ(**extra: Any) -> Dict[str, Any]:
    e: Dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "/api",
        "PATH_INFO": "/orders",
        "QUERY_STRING": "",
        "SERVER_NAME": "backend.internal",
        "SERVER_PORT": "8080",
        "SERVER_PROTOCOL": "HTTP/1.0",
        "wsgi.url_scheme": "https",
        "HTTP_HOST": "[::1]:8443",
    }
    e.update(extra)
    return e


def test_plain_wsgi_app(provider: weft_sdk.TracerProvider) -> None:
    seen: List[Any] = []

    class Body:
        """A response iterable with close(), as PEP 3333 allows."""

        closed = False

        def __iter__(self) -> Iterator[bytes]:
            yield b"created"

        def close(self) -> None:
            Body.closed = True

    def app(env: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        seen.append(trace.get_current_span())
        start_response("201 Created", [("Content-Type", "text/plain")])
        return Body()

    mw = weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=provider)
    assert mw.wsgi_app is app
    status, body = call(mw, environ(REQUEST_METHOD="post", HTTP_TRACEPARENT=TRACEPARENT))
    assert status == ["201 Created"] and body == b"created" and Body.closed
    (s,) = flushed(provider)
    assert s["name"] == "POST" and s["kind"] == 1 and s["parent_span_id"] == PARENT_ID
    assert seen[0].get_span_context().span_id == s["span_id"]  # current inside the app
    assert s["attributes"] == {
        "http.request.method": "POST",
        "http.request.method_original": "post",
        "url.scheme": "https",
        "server.address": "::1",
        "server.port": 8443,
        "url.path": "/api/orders",
        "network.protocol.version": "1.0",
        "http.response.status_code": 201,
    }
    provider.clear_exported_spans()
    # An unknown method: `_OTHER`, and the span is named `HTTP`.
    call(mw, environ(REQUEST_METHOD="PURGE", HTTP_HOST=""))
    (s,) = flushed(provider)
    assert s["name"] == "HTTP" and s["attributes"]["http.request.method"] == "_OTHER"
    assert s["attributes"]["http.request.method_original"] == "PURGE"
    assert s["attributes"]["server.address"] == "backend.internal" and s["attributes"]["server.port"] == 8080
    assert trace.get_current_span() is trace.INVALID_SPAN  # detached after the call


def test_exception_out_of_the_app(provider: weft_sdk.TracerProvider) -> None:
    def app(env: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        raise KeyError("cart")

    mw = weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=provider)
    with pytest.raises(KeyError):
        call(mw, environ())
    (s,) = flushed(provider)
    assert s["status_code"] == 2 and s["attributes"]["error.type"] == "KeyError"
    assert [e["name"] for e in s["events"]] == ["exception"]
    assert trace.get_current_span() is trace.INVALID_SPAN


class _Custom(TextMapPropagator):
    """A propagator weft has no native equivalent for: extract goes through its Python code."""

    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        v = getter.get(carrier, "x-custom-parent")
        if not v:
            return context
        sc = trace.SpanContext(TRACE_ID, int(v[0], 16), is_remote=True, trace_flags=trace.TraceFlags(1))
        return trace.set_span_in_context(trace.NonRecordingSpan(sc), context)

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        pass

    @property
    def fields(self) -> set:  # type: ignore[type-arg]
        return {"x-custom-parent"}


def test_propagators(provider: weft_sdk.TracerProvider) -> None:
    got: List[Any] = []

    def app(env: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        got.append(baggage.get_all())
        start_response("200 OK", [])
        return [b""]

    # A propagator given to the middleware: B3, native.
    mw = weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=provider, propagator=weft_sdk.propagators.B3Propagator())
    call(mw, environ(HTTP_B3=f"{TRACE_ID:032x}-{PARENT_ID:016x}-1"))
    # A Python propagator: the general path through its getter.
    mw = weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=provider, propagator=_Custom())
    call(mw, environ(HTTP_X_CUSTOM_PARENT="00000000000000aa"))
    # The global textmap, looked up per request; with baggage, the app sees it.
    mw = weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=provider)
    call(mw, environ(HTTP_TRACEPARENT=TRACEPARENT, HTTP_BAGGAGE="user=alice"))
    old = propagate.get_global_textmap()
    propagate.set_global_textmap(weft_sdk.propagators.from_env())
    try:
        call(mw, environ(HTTP_TRACEPARENT=TRACEPARENT, HTTP_BAGGAGE="user=bob;meta"))
        call(mw, environ(HTTP_TRACEPARENT=TRACEPARENT))
    finally:
        propagate.set_global_textmap(old)
    spans = flushed(provider)
    assert [s["parent_span_id"] for s in spans] == [PARENT_ID, 0xAA, PARENT_ID, PARENT_ID, PARENT_ID]
    assert all(s["trace_id"] == TRACE_ID for s in spans)
    assert got[2] == {"user": "alice"} and got[3] == {"user": "bob"} and got[4] == {}


def test_native_environ_extract_matches_the_dict_extract() -> None:
    p = weft_sdk.propagators.from_env()
    span, bag = p._native.extract_wsgi_environ({"HTTP_TRACEPARENT": TRACEPARENT, "HTTP_TRACESTATE": "a=1"})
    assert span is not None and span.span_id == PARENT_ID and not bag
    span2, _ = p._native.extract_dict({"traceparent": TRACEPARENT, "tracestate": "a=1"})
    assert repr(span) == repr(span2)
    j = weft_sdk.propagators.JaegerPropagator()._native
    span, bag = j.extract_wsgi_environ({"HTTP_UBER_TRACE_ID": f"{TRACE_ID:x}:{PARENT_ID:x}:0:1", "HTTP_UBERCTX_USER": "x"})
    assert span is not None and bag


def test_unsampled_and_non_weft_provider(provider: weft_sdk.TracerProvider) -> None:
    def app(env: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        start_response("200 OK", [])
        return [b"ok"]

    off = weft_sdk.TracerProvider(sampler=weft_sdk.sampling.ALWAYS_OFF, exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False)
    assert call(weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=off), environ())[1] == b"ok"
    assert flushed(off) == []
    off.shutdown()
    # No weft provider configured globally (the API's proxy): requests pass through untraced.
    assert not isinstance(trace.get_tracer_provider(), weft_sdk.TracerProvider)
    assert call(weft_sdk.wsgi.WeftMiddleware(app), environ())[1] == b"ok"
    with pytest.raises(TypeError):
        weft_sdk.wsgi.WeftMiddleware(app, tracer_provider=object())  # type: ignore[arg-type]


def test_flask_trace_reads_back_whole_from_weft(weft: Weft) -> None:
    tp = weft_sdk.TracerProvider(
        resource={"service.name": "py-flask-weft-middleware"},
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=weft_sdk.OTLPExporter(endpoint=weft.otlp_http),
        shutdown_on_exit=False,
    )
    old = trace._TRACER_PROVIDER  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = tp  # type: ignore[attr-defined]
    try:
        checkout_request(tp)
    finally:
        trace._TRACER_PROVIDER = old  # type: ignore[attr-defined]
    assert tp.shutdown(timeout_millis=10_000)
    got = weft.read_trace(TRACE_ID, 4)

    def value(v: Any) -> Any:
        return v.int_value if v.HasField("int_value") else v.string_value

    spans = [
        {
            "name": s.name,
            "trace_id": int.from_bytes(s.trace_id, "big"),
            "span_id": int.from_bytes(s.span_id, "big"),
            "parent_span_id": int.from_bytes(s.parent_span_id or b"\0", "big"),
            "kind": s.kind - 1,
            "parent_is_remote": bool(s.flags & 0x200),
            "status_code": s.status.code,
            "attributes": {kv.key: value(kv.value) for kv in s.attributes},
        }
        for _, _, s in got
    ]
    assert len(spans) == 4, [s["name"] for s in spans]
    check_checkout_tree(spans)
    assert {rs.resource.attributes[0].key for rs, _, _ in got}  # a resource came back
