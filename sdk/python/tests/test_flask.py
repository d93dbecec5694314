"""A Flask app and its outgoing `requests` calls, instrumented by the official OpenTelemetry
instrumentation packages, recording through weft; the whole trace is read back."""

from __future__ import annotations

import threading
from typing import Iterator, List, Tuple

import pytest
import requests
from flask import Flask
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from werkzeug.serving import make_server

import weft_sdk
from conftest import Weft, flushed


def make_app() -> Flask:
    app = Flask("shop")
    state = {"base": ""}

    @app.route("/checkout")
    def checkout() -> str:
        trace.get_current_span().set_attribute("cart.items", 3)
        r = requests.get(state["base"] + "/inventory", timeout=10)
        return "ok:" + r.text

    @app.route("/inventory")
    def inventory() -> str:
        with trace.get_tracer("shop").start_as_current_span("db.query") as s:
            s.set_attribute("db.system", "sqlite")
        return "in stock"

    app.config["STATE"] = state
    return app


def serve(app: Flask) -> Tuple[object, str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    app.config["STATE"]["base"] = base
    return server, base


def run_request(tp: weft_sdk.TracerProvider) -> int:
    """Instruments a fresh app with `tp`, makes one request under a root span, returns the
    trace ID."""
    app = make_app()
    FlaskInstrumentor().instrument_app(app, tracer_provider=tp)
    RequestsInstrumentor().instrument(tracer_provider=tp)
    server, base = serve(app)
    try:
        # The global provider is what `trace.get_tracer` in the app's own code uses.
        with tp.get_tracer("test").start_as_current_span("client-root") as root:
            r = requests.get(base + "/checkout", timeout=10)
            assert r.status_code == 200 and r.text == "ok:in stock"
        return root.trace_id
    finally:
        RequestsInstrumentor().uninstrument()
        FlaskInstrumentor().uninstrument_app(app)
        server.shutdown()  # type: ignore[attr-defined]


@pytest.fixture(params=["official-propagators", "weft-propagators"])
def propagators(request: pytest.FixtureRequest) -> Iterator[str]:
    old = propagate.get_global_textmap()
    if request.param == "weft-propagators":
        propagate.set_global_textmap(weft_sdk.propagators.from_env())
    yield request.param
    propagate.set_global_textmap(old)


def check_tree(spans: List[dict]) -> None:
    by = {}
    for s in spans:
        by.setdefault(s["name"], []).append(s)
    assert len({s["trace_id"] for s in spans}) == 1, "one trace"
    (root,) = by["client-root"]
    gets = sorted(by["GET"], key=lambda s: s["start_time"])
    assert len(gets) == 2, [s["name"] for s in spans]
    (checkout,) = by["GET /checkout"]
    (inventory,) = by["GET /inventory"]
    (db,) = by["db.query"]
    assert gets[0]["parent_span_id"] == root["span_id"] and gets[0]["kind"] == 2
    assert checkout["parent_span_id"] == gets[0]["span_id"] and checkout["kind"] == 1 and checkout["parent_is_remote"]
    assert gets[1]["parent_span_id"] == checkout["span_id"]
    assert inventory["parent_span_id"] == gets[1]["span_id"]
    assert db["parent_span_id"] == inventory["span_id"]
    assert checkout["attributes"]["cart.items"] == 3
    assert checkout["attributes"].get("http.route") == "/checkout"


def test_flask_and_requests_in_memory(propagators: str) -> None:
    tp = weft_sdk.TracerProvider(
        sampler=weft_sdk.sampling.ALWAYS_ON, exporter=weft_sdk.InMemoryExporter(), shutdown_on_exit=False
    )
    old_global = trace._TRACER_PROVIDER  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = tp  # type: ignore[attr-defined]  # what set_tracer_provider does, resettable
    try:
        run_request(tp)
    finally:
        trace._TRACER_PROVIDER = old_global  # type: ignore[attr-defined]
    spans = flushed(tp)
    assert len(spans) == 6, [s["name"] for s in spans]
    check_tree(spans)
    tp.shutdown()


def test_flask_trace_reads_back_whole_from_weft(weft: Weft) -> None:
    tp = weft_sdk.TracerProvider(
        resource={"service.name": "py-flask"},
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=weft_sdk.OTLPExporter(endpoint=weft.otlp_http),
        shutdown_on_exit=False,
    )
    old_global = trace._TRACER_PROVIDER  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = tp  # type: ignore[attr-defined]
    try:
        trace_id = run_request(tp)
    finally:
        trace._TRACER_PROVIDER = old_global  # type: ignore[attr-defined]
    assert tp.shutdown(timeout_millis=10_000)
    got = weft.read_trace(trace_id, 6)
    spans = [
        {
            "name": s.name,
            "trace_id": int.from_bytes(s.trace_id, "big"),
            "span_id": int.from_bytes(s.span_id, "big"),
            "parent_span_id": int.from_bytes(s.parent_span_id or b"\0", "big"),
            "kind": s.kind - 1,
            "start_time": s.start_time_unix_nano,
            "parent_is_remote": bool(s.flags & 0x200),
            "attributes": {kv.key: (kv.value.int_value if kv.value.HasField("int_value") else kv.value.string_value) for kv in s.attributes},
        }
        for _, _, s in got
    ]
    check_tree(spans)
