"""Shared fixtures: in-memory providers, a real weft process (when `WEFT_BIN` is set) and local
OTLP receivers."""

from __future__ import annotations

import gzip
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import pytest

import weft_sdk

REPO = Path(__file__).resolve().parents[3]
VECTORS = REPO / "spec" / "vectors"

# Loopback only: never through a proxy from the environment.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
os.environ.setdefault("WEFT_SDK_QUIET", "1")


@pytest.fixture
def provider() -> Iterator[weft_sdk.TracerProvider]:
    """A provider that samples everything into an in-memory exporter, flushed quickly."""
    p = weft_sdk.TracerProvider(
        resource={"service.name": "weft-python-test"},
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=weft_sdk.InMemoryExporter(),
        schedule_delay=0.05,
        shutdown_on_exit=False,
    )
    yield p
    p.shutdown(timeout_millis=2000)


def flushed(p: weft_sdk.TracerProvider) -> List[dict]:
    assert p.force_flush(5000), "force_flush timed out"
    return p.exported_spans()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- a real weft process -------------------------------------------------------------------


class Weft:
    def __init__(self, binary: str, workdir: Path, extra_env: Optional[dict] = None) -> None:
        self.ports = {k: free_port() for k in ("http", "grpc", "otlp_http")}
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
        for name in (
            "ZIPKIN",
            "JAEGER_HTTP",
            "JAEGER_GRPC",
            "JAEGER_QUERY",
            "XRAY",
            "JAEGER_COMPACT",
            "JAEGER_BINARY",
            "SAMPLING_HTTP",
            "SAMPLING_GRPC",
        ):
            env[f"WEFT_{name}_PORT"] = "0"
        env.update(extra_env or {})
        self.log = open(workdir / "weft.log", "wb")
        self.proc = subprocess.Popen(
            [
                binary,
                "--data-dir",
                str(workdir / "data"),
                "--listen-host",
                "127.0.0.1",
                "--http-port",
                str(self.ports["http"]),
                "--otlp-grpc-port",
                str(self.ports["grpc"]),
                "--otlp-http-port",
                str(self.ports["otlp_http"]),
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"weft exited ({self.proc.returncode}) before it was ready: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.api}/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise AssertionError(f"weft did not become ready in 60 s: {self.tail()}")
            time.sleep(0.1)

    def tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_bytes()[-4000:].decode("utf-8", "replace")

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.ports['http']}"

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.ports['otlp_http']}/v1/traces"

    @property
    def otlp_grpc(self) -> str:
        return f"http://127.0.0.1:{self.ports['grpc']}"

    def read_trace(self, trace_id: int, n: int, timeout: float = 30.0) -> list:
        """Polls GET /api/traces/<id> (protobuf TracesData) until it holds `n` spans."""
        from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

        deadline = time.time() + timeout
        spans: list = []
        while True:
            req = urllib.request.Request(
                f"{self.api}/api/traces/{trace_id:032x}", headers={"Accept": "application/protobuf"}
            )
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    td = TracesData()
                    td.ParseFromString(r.read())
                    spans = [(rs, ss.scope, s) for rs in td.resource_spans for ss in rs.scope_spans for s in ss.spans]
                    if len(spans) >= n:
                        return spans
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise AssertionError(f"GET /api/traces: {e.code} {e.read()!r}")
            if time.time() > deadline:
                raise AssertionError(f"trace {trace_id:032x}: {len(spans)} of {n} spans readable after {timeout} s")
            time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def weft() -> Iterator[Weft]:
    binary = os.environ.get("WEFT_BIN")
    if not binary:
        pytest.skip("WEFT_BIN is not set: not running the end-to-end tests against the weft binary")
    if not Path(binary).exists():
        raise AssertionError(f"WEFT_BIN={binary} does not exist")
    d = Path(tempfile.mkdtemp(prefix="weft-py-e2e-"))
    w = Weft(binary, d)
    yield w
    w.stop()
    shutil.rmtree(d, ignore_errors=True)


# ---- a local OTLP/HTTP receiver --------------------------------------------------------------


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1 that keeps every request body (gunzipped) and answers
    from a script of (status, headers) replies, then 200."""

    def __init__(self, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.bodies: List[bytes] = []
        self.requests: List[Tuple[float, dict]] = []
        self.script: List[Tuple[int, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with outer.lock:
                    outer.requests.append((time.monotonic(), {k.lower(): v for k, v in self.headers.items()}))
                    status, headers = outer.script.pop(0) if outer.script else (200, {})
                    if status == 200:
                        outer.bodies.append(body)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def spans(self) -> list:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        out = []
        with self.lock:
            bodies = list(self.bodies)
        for b in bodies:
            req = ExportTraceServiceRequest()
            req.ParseFromString(b)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        out.append((rs, ss, s))
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def python_exe() -> str:
    import sys

    return sys.executable


def env_without_otel(extra: Optional[dict] = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra or {})
    return env
