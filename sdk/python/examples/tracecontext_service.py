"""The service the W3C trace-context test harness drives (github.com/w3c/trace-context, test/).

It accepts `POST /test` with a JSON array of `{"url", "arguments"}`, extracts
`traceparent`/`tracestate` from the request and starts a server span under them (a new trace
when they are absent or invalid), and for each element POSTs `arguments` to `url` under a new
client span of its own, whose context (so a parent-id of its own) is injected into that request.

    python examples/tracecontext_service.py 5000     # port; 0 picks a free one
    # in a checkout of the harness:
    STRICT_LEVEL=2 SPEC_LEVEL=2 python test/test.py http://127.0.0.1:5000/test
"""

from __future__ import annotations

import json
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import weft_sdk

provider = weft_sdk.TracerProvider(
    resource={"service.name": "tracecontext-service"},
    exporter=weft_sdk.InMemoryExporter(),  # the harness checks headers only
)
tracer = provider.get_tracer("tracecontext-service")
propagator = weft_sdk.propagators.TraceContextPropagator()


class HeaderLines:
    """Reads the request's header lines (a repeated header is several values)."""

    def get(self, carrier: List[Tuple[str, str]], key: str) -> Optional[List[str]]:
        vals = [v for k, v in carrier if k.lower() == key]
        return vals or None

    def keys(self, carrier: List[Tuple[str, str]]) -> List[str]:
        return [k for k, _ in carrier]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        cx = propagator.extract(list(self.headers.items()), getter=HeaderLines())
        server = tracer.start_span("tracecontext-service", context=cx, kind=SpanKind.SERVER)
        try:
            calls = json.loads(body)
            if not isinstance(calls, list):
                raise ValueError("expected a JSON array")
        except ValueError:
            server.end()
            self._reply(400, b"expected a JSON array\n")
            return
        server_cx = trace.set_span_in_context(server)
        for call in calls:
            url = call.get("url") if isinstance(call, dict) else None
            if not isinstance(url, str):
                continue
            data = json.dumps(call.get("arguments")).encode()
            client = tracer.start_span("POST", context=server_cx, kind=SpanKind.CLIENT, attributes={"url.full": url})
            headers = {"Content-Type": "application/json"}
            propagator.inject(headers, trace.set_span_in_context(client))
            try:
                urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method="POST"), timeout=10).read()
            except OSError as e:
                print(f"tracecontext-service: calling {url} failed: {e}", file=sys.stderr, flush=True)
                client.set_status(StatusCode.ERROR, str(e))
            client.end()
        server.end()
        self._reply(200, b"")

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"tracecontext-service listening on http://127.0.0.1:{httpd.server_address[1]}/test", file=sys.stderr, flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
