"""weft's ASGI instrumentation (`weft_sdk.asgi`) on a Starlette app (Starlette's TestClient)."""

from __future__ import annotations

from typing import Any, Iterator, List

import pytest
import warnings
from opentelemetry import trace
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient on httpx: "install httpx2 instead"
    from starlette.testclient import TestClient

import weft_sdk
from conftest import flushed

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"


@pytest.fixture
def global_provider(provider: weft_sdk.TracerProvider) -> Iterator[weft_sdk.TracerProvider]:
    old = trace._TRACER_PROVIDER  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = provider  # type: ignore[attr-defined]
    yield provider
    trace._TRACER_PROVIDER = old  # type: ignore[attr-defined]


def make_app(tp: weft_sdk.TracerProvider) -> Any:
    seen: List[Any] = []

    async def order(request: Request) -> JSONResponse:
        seen.append(trace.get_current_span())
        with trace.get_tracer("shop").start_as_current_span("db.query"):
            pass
        return JSONResponse({"order": request.path_params["n"]})

    async def boom(request: Request) -> PlainTextResponse:
        raise ValueError("out of stock")

    async def unavailable(request: Request) -> PlainTextResponse:
        return PlainTextResponse("later", status_code=503)

    app = Starlette(routes=[Route("/orders/{n:int}", order), Route("/boom", boom), Route("/unavailable", unavailable)])
    return weft_sdk.asgi.WeftASGIMiddleware(app, tracer_provider=tp), seen


def test_starlette_request(global_provider: weft_sdk.TracerProvider) -> None:
    app, seen = make_app(global_provider)
    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/orders/7?x=1", headers={"traceparent": TRACEPARENT, "user-agent": "shop-test/1.0"})
    assert r.status_code == 200 and r.json() == {"order": 7}
    spans = flushed(global_provider)
    by = {s["name"]: s for s in spans}
    server, db = by["GET /orders/{n:int}"], by["db.query"]
    assert server["kind"] == 1 and server["trace_id"] == TRACE_ID and server["parent_span_id"] == PARENT_ID
    assert server["parent_is_remote"] and db["parent_span_id"] == server["span_id"]
    assert seen[0].get_span_context().span_id == server["span_id"]
    assert server["attributes"] == {
        "http.request.method": "GET",
        "url.scheme": "http",
        "server.address": "testserver",
        "server.port": 80,
        "url.path": "/orders/7",
        "url.query": "x=1",
        "client.address": "testclient",
        "client.port": 50000,
        "user_agent.original": "shop-test/1.0",
        "network.protocol.version": "1.1",
        "http.response.status_code": 200,
        "http.route": "/orders/{n:int}",
    }
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_starlette_errors(global_provider: weft_sdk.TracerProvider) -> None:
    app, _ = make_app(global_provider)
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/boom").status_code == 500
    assert client.get("/unavailable").status_code == 503
    assert client.get("/missing").status_code == 404
    by = {s["name"]: s for s in flushed(global_provider)}
    boom = by["GET /boom"]
    assert boom["status_code"] == 2 and boom["status_description"] == "ValueError: out of stock"
    assert boom["attributes"]["error.type"] == "ValueError"
    assert [e["name"] for e in boom["events"]] == ["exception"]
    unavailable = by["GET /unavailable"]
    assert unavailable["status_code"] == 2 and unavailable["attributes"]["error.type"] == "503"
    missing = by["GET"]
    assert missing["status_code"] == 0 and missing["attributes"]["http.response.status_code"] == 404


def test_baggage_and_lifespan(global_provider: weft_sdk.TracerProvider) -> None:
    from opentelemetry import baggage

    got: List[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # passes through the middleware untouched
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        got.append(baggage.get_all())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with TestClient(weft_sdk.asgi.WeftASGIMiddleware(app, tracer_provider=global_provider)) as client:
        assert client.get("/", headers={"traceparent": TRACEPARENT, "baggage": "user=alice"}).status_code == 204
    (s,) = flushed(global_provider)
    assert s["name"] == "GET" and s["parent_span_id"] == PARENT_ID and got == [{"user": "alice"}]
