"""Drives examples/tracecontext_service.py the way the W3C test harness does: POST a list of
callbacks, and check what the callbacks receive."""

from __future__ import annotations

import http.client
import json
import queue
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from conftest import env_without_otel

SERVICE = Path(__file__).resolve().parents[1] / "examples" / "tracecontext_service.py"
Received = List[Tuple[str, str]]


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, str(SERVICE), "0"], stderr=subprocess.PIPE, text=True, env=env_without_otel())
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if "listening on http://127.0.0.1:" not in line:
        proc.kill()
        raise AssertionError(f"service did not start: {line}{proc.stderr.read()}")
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    yield port
    proc.kill()
    proc.wait()


def callbacks(n: int) -> Tuple[List[str], "queue.Queue[Tuple[Received, bytes]]"]:
    q: "queue.Queue[Tuple[Received, bytes]]" = queue.Queue()

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            q.put(([(k.lower(), v) for k, v in self.headers.items()], body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/callback"
    return [url] * n, q


def post(port: int, headers: List[Tuple[str, str]], body: bytes) -> int:
    """POSTs with `headers` as given: a repeated name is sent as several header lines."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.putrequest("POST", "/test")
    for k, v in headers:
        conn.putheader(k, v)
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    status = conn.getresponse().status
    conn.close()
    return status


def call_back(port: int, headers: List[Tuple[str, str]], n: int) -> List[Received]:
    urls, q = callbacks(n)
    body = json.dumps([{"url": u, "arguments": [{"i": i}]} for i, u in enumerate(urls)]).encode()
    assert post(port, headers, body) == 200
    return [q.get(timeout=10)[0] for _ in range(n)]


def header(h: Received, name: str) -> List[str]:
    return [v for k, v in h if k == name]


def test_propagates_traceparent_and_tracestate(service: int) -> None:
    got = call_back(service, [("traceparent", "00-12345678901234567890123456789012-1234567890123456-01"), ("tracestate", "foo=1,bar=2")], 2)
    for h in got:
        (tp,) = header(h, "traceparent")
        assert tp.startswith("00-12345678901234567890123456789012-") and tp.endswith("-01")
        assert tp.split("-")[2] != "1234567890123456"
        assert header(h, "tracestate") == ["foo=1,bar=2"]
    assert len({header(h, "traceparent")[0].split("-")[2] for h in got}) == 2, "a client span per request"


def test_invalid_traceparent_starts_a_new_trace(service: int) -> None:
    (h,) = call_back(service, [("traceparent", "00-12345678901234567890123456789012-1234567890123456-0x"), ("tracestate", "foo=1")], 1)
    (tp,) = header(h, "traceparent")
    assert len(tp) == 55 and "12345678901234567890123456789012" not in tp
    assert header(h, "tracestate") == []


def test_no_traceparent_starts_a_new_trace(service: int) -> None:
    got = call_back(service, [], 3)
    ids = {header(h, "traceparent")[0].split("-")[1] for h in got}
    assert len(ids) == 1 and ids != {"0" * 32}


def test_duplicated_tracestate_headers_are_combined(service: int) -> None:
    got = call_back(service, [("traceparent", "00-12345678901234567890123456789012-1234567890123456-01"), ("tracestate", "foo=1,bar=2"), ("tracestate", "baz=4,foo=3")], 1)
    assert header(got[0], "tracestate") == ["foo=1,bar=2,baz=4"]


def test_higher_version_is_accepted(service: int) -> None:
    (h,) = call_back(service, [("traceparent", "cc-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like")], 1)
    (tp,) = header(h, "traceparent")
    assert tp.startswith("00-12345678901234567890123456789012-")


def test_bad_body_is_400(service: int) -> None:
    assert post(service, [], b"{not json") == 400

