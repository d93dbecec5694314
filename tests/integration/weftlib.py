"""Running a real weft process, and talking to it, for the integration tests."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import grpc
import requests
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from otlpdata import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
    TracesData,
    proto_fields,
    traces_data_from_json,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SINGLE_TENANT = "single-tenant"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = "application/x-protobuf"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0

# Loopback only: never go through a proxy configured in the environment.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"


class WeftError(AssertionError):
    """A failure of the weft process itself (did not start, died, hung)."""


def free_ports(n: int) -> list[int]:
    """n distinct ports on 127.0.0.1 free for both TCP and UDP (all bound at once, so they differ).

    A port the kernel hands out for TCP may still be some client's ephemeral UDP port, and weft
    listens for the Jaeger agent on UDP, so each candidate is bound for both."""
    socks = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            t.bind(("127.0.0.1", 0))
            socks.append(t)
            port = t.getsockname()[1]
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                u.bind(("127.0.0.1", port))
            except OSError:
                u.close()
                continue
            socks.append(u)
            ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: Path | None, limit: int = 6000) -> str:
    if path is None or not path.exists():
        return "<no output file>"
    data = path.read_bytes()
    text = data[-limit:].decode("utf-8", "replace")
    return ("...(truncated)...\n" if len(data) > limit else "") + text


def http_session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # no proxies, no netrc
    return s


class WeftServer:
    """One weft process on free ports with its own data dir; restartable on the same data."""

    def __init__(self, binary: Path, workdir: Path, args: list[str] | tuple[str, ...] = (),
                 env: dict[str, str] | None = None, name: str = "weft",
                 use_flags: bool = True) -> None:
        self.binary = Path(binary)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.name = name
        self.args = list(args)
        self.env = dict(env or {})
        self.use_flags = use_flags
        self._pick_ports()
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.stderr_path: Path | None = None
        self.stdout_path: Path | None = None
        self.exit_codes: list[int] = []
        self.stopped_by_us = False
        self.http = http_session()
        self._channel: grpc.Channel | None = None

    def _pick_ports(self) -> None:
        (self.grpc_port, self.otlp_http_port, self.http_port, self.zipkin_port, self.jaeger_http_port,
         self.jaeger_compact_port, self.jaeger_binary_port, self.jaeger_query_port, self.xray_port,
         self.jaeger_grpc_port, self.sampling_http_port, self.sampling_grpc_port) = free_ports(12)

    # ---- addresses --------------------------------------------------------------------------
    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def otlp_url(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}/v1/traces"

    @property
    def jaeger(self) -> str:
        return f"http://127.0.0.1:{self.jaeger_query_port}"

    @property
    def zipkin(self) -> str:
        return f"http://127.0.0.1:{self.zipkin_port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    # ---- process control --------------------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [str(self.binary)]
        if self.use_flags:
            cmd += [
                "--data-dir", str(self.data_dir),
                "--listen-host", "127.0.0.1",
                "--otlp-grpc-port", str(self.grpc_port),
                "--otlp-http-port", str(self.otlp_http_port),
                "--http-port", str(self.http_port),
            ]
        cmd += self.args
        cmd += os.environ.get("WEFT_TEST_EXTRA_ARGS", "").split()
        return cmd

    def process_env(self) -> dict[str, str]:
        # The caller's own WEFT_* settings must not leak into the server under test.
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
        env.setdefault("RUST_BACKTRACE", "1")
        # Every server gets its own Zipkin port (a variable, so that --config tests keep it).
        env["WEFT_ZIPKIN_PORT"] = str(self.zipkin_port)
        env["WEFT_JAEGER_HTTP_PORT"] = str(self.jaeger_http_port)
        env["WEFT_JAEGER_GRPC_PORT"] = str(self.jaeger_grpc_port)
        env["WEFT_JAEGER_QUERY_PORT"] = str(self.jaeger_query_port)
        env["WEFT_XRAY_PORT"] = str(self.xray_port)
        env["WEFT_JAEGER_COMPACT_PORT"] = str(self.jaeger_compact_port)
        env["WEFT_JAEGER_BINARY_PORT"] = str(self.jaeger_binary_port)
        env["WEFT_SAMPLING_HTTP_PORT"] = str(self.sampling_http_port)
        env["WEFT_SAMPLING_GRPC_PORT"] = str(self.sampling_grpc_port)
        env.update(self.env)
        return env

    def describe(self) -> str:
        return (f"command: {' '.join(self.command())}\n"
                f"--- stderr ({self.stderr_path}) ---\n{tail(self.stderr_path)}\n"
                f"--- stdout ({self.stdout_path}) ---\n{tail(self.stdout_path, 2000)}")

    def start(self, timeout: float = START_TIMEOUT) -> "WeftServer":
        # A free port can be taken by another process between the pick and weft's bind. On the
        # first start nothing knows the ports yet, so pick new ones and try again; a restart keeps
        # its ports, as the test's clients hold them.
        for attempt in range(3):
            try:
                return self._start(timeout)
            except WeftError:
                taken = "Address already in use" in tail(self.stderr_path)
                if self.starts > 1 or not taken or attempt == 2:
                    raise
                if self.exit_codes:
                    self.exit_codes.pop()
                self.starts = 0
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> "WeftServer":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        self.stopped_by_us = False
        self.stderr_path = self.workdir / f"{self.name}-stderr-{self.starts}.log"
        self.stdout_path = self.workdir / f"{self.name}-stdout-{self.starts}.log"
        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.command(), cwd=self.workdir, env=self.process_env(),
                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            )
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.exit_codes.append(rc)
                raise WeftError(f"weft exited with code {rc} before becoming ready\n{self.describe()}")
            try:
                r = self.http.get(f"{self.api}/ready", timeout=2)
                last = f"GET /ready -> {r.status_code} {r.text[:200]!r}"
                if r.status_code == 200 and (not self.receives or (
                        _port_open(self.grpc_port) and _port_open(self.otlp_http_port))):
                    return
            except requests.RequestException as e:
                last = f"GET /ready -> {type(e).__name__}"
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        raise WeftError(f"weft did not become ready within {timeout:.0f}s ({last})\n{self.describe()}")

    @property
    def target(self) -> str:
        """The --target this server runs (all unless the arguments say otherwise)."""
        args = self.args + os.environ.get("WEFT_TEST_EXTRA_ARGS", "").split()
        for i, a in enumerate(args):
            if a == "--target" and i + 1 < len(args):
                return args[i + 1]
            if a.startswith("--target="):
                return a.split("=", 1)[1]
        return "all"

    @property
    def receives(self) -> bool:
        """Whether this server's roles listen for OTLP."""
        return self.target in ("all", "ingester", "distributor")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Send sig, wait up to timeout; on a hang kill -9 and raise. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is not None:
            return self.proc.returncode
        self._close_channel()
        self.stopped_by_us = True
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise WeftError(f"weft did not exit within {timeout:.0f}s of {signal.Signals(sig).name}\n"
                            f"{self.describe()}")
        self.exit_codes.append(rc)
        return rc

    def kill9(self) -> None:
        assert self.proc is not None
        self._close_channel()
        self.stopped_by_us = True
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> "WeftServer":
        rc = self.stop()
        if rc != 0:
            raise WeftError(f"weft exited with {rc} on SIGTERM during restart\n{self.describe()}")
        return self.start()

    def assert_alive(self) -> None:
        if not self.running:
            raise WeftError(f"weft is not running (exit code {self.proc.returncode if self.proc else None})\n"
                            f"{self.describe()}")

    # ---- OTLP HTTP ----------------------------------------------------------------------------
    def post_otlp(self, body: bytes | ExportTraceServiceRequest | dict, *, content_type: str | None = None,
                  gzip_body: bool = False, headers: dict[str, str] | None = None,
                  timeout: float = 15) -> requests.Response:
        if isinstance(body, ExportTraceServiceRequest):
            data = body.SerializeToString()
            content_type = content_type or PROTOBUF
        elif isinstance(body, dict):
            data = json.dumps(body).encode()
            content_type = content_type or "application/json"
        else:
            data = body
            content_type = content_type or PROTOBUF
        h = {"Content-Type": content_type}
        if gzip_body:
            data = gzip.compress(data)
            h["Content-Encoding"] = "gzip"
        h.update(headers or {})
        return self.http.post(self.otlp_url, data=data, headers=h, timeout=timeout)

    def send(self, req: ExportTraceServiceRequest, *, tenant: str | None = None,
             json_body: bool = False, gzip_body: bool = False) -> ExportTraceServiceResponse:
        """Post over OTLP/HTTP and require a full success (200, no rejected spans)."""
        headers = {"X-Scope-OrgID": tenant} if tenant else None
        if json_body:
            from otlpdata import to_otlp_json
            r = self.post_otlp(to_otlp_json(req), headers=headers, gzip_body=gzip_body)
        else:
            r = self.post_otlp(req, headers=headers, gzip_body=gzip_body)
        assert r.status_code == 200, f"OTLP/HTTP export: {r.status_code} {r.content[:500]!r}"
        resp = parse_export_response(r)
        assert resp.partial_success.rejected_spans == 0, f"spans rejected: {resp}"
        return resp

    # ---- OTLP gRPC ----------------------------------------------------------------------------
    @property
    def channel(self) -> grpc.Channel:
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                self.grpc_target,
                options=[("grpc.enable_http_proxy", 0),
                         ("grpc.max_send_message_length", 64 << 20),
                         ("grpc.max_receive_message_length", 64 << 20)],
            )
        return self._channel

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def grpc_export(self, req: ExportTraceServiceRequest, *, tenant: str | None = None,
                    compression: grpc.Compression | None = None,
                    timeout: float = 15) -> ExportTraceServiceResponse:
        stub = trace_service_pb2_grpc.TraceServiceStub(self.channel)
        md = [("x-scope-orgid", tenant)] if tenant else None
        return stub.Export(req, metadata=md, compression=compression, timeout=timeout)

    def grpc_export_raw(self, body: bytes, *, timeout: float = 15) -> bytes:
        call = self.channel.unary_unary(EXPORT_METHOD, request_serializer=None,
                                        response_deserializer=None)
        return call(body, timeout=timeout)

    # ---- query API ----------------------------------------------------------------------------
    def get(self, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 15)
        return self.http.get(f"{self.api}{path}", **kw)

    def fetch_trace(self, trace_id: bytes | str, *, version: int = 1, protobuf: bool = True,
                    tenant: str | None = None, params: dict | None = None) -> TracesData | None:
        """GET the trace; None on 404; TracesData otherwise (strictly validated when JSON)."""
        tid = trace_id.hex() if isinstance(trace_id, bytes) else trace_id
        path = f"/api/traces/{tid}" if version == 1 else f"/api/v2/traces/{tid}"
        headers = {"Accept": "application/protobuf" if protobuf else "application/json"}
        if tenant:
            headers["X-Scope-OrgID"] = tenant
        r = self.get(path, headers=headers, params=params)
        if r.status_code == 404:
            return None
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.content[:300]!r}"
        return decode_trace_response(r, version=version, protobuf=protobuf)

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        r = self.get("/metrics")
        assert r.status_code == 200, f"/metrics: {r.status_code}"
        return parse_prometheus(r.text)

    def metric(self, name: str, **labels: str) -> float | None:
        return metric_value(self.metrics(), name, **labels)


# ------------------------------------------------------------------------------------------------
# Responses
# ------------------------------------------------------------------------------------------------


def parse_export_response(r: requests.Response) -> ExportTraceServiceResponse:
    ctype = r.headers.get("Content-Type", "")
    if "json" in ctype:
        from google.protobuf import json_format
        d = r.json()
        return json_format.ParseDict(d, ExportTraceServiceResponse())
    return ExportTraceServiceResponse.FromString(r.content)


def decode_trace_response(r: requests.Response, *, version: int, protobuf: bool) -> TracesData:
    if protobuf:
        ctype = r.headers.get("Content-Type", "")
        assert "json" not in ctype, f"asked for protobuf, got Content-Type {ctype!r}"
        if version == 1:
            return TracesData.FromString(r.content)
        inner = [v for f, wt, v in proto_fields(r.content) if f == 1 and wt == 2]
        assert len(inner) <= 1, "v2 protobuf answer has field 1 more than once"
        return TracesData.FromString(inner[0] if inner else b"")
    body = r.json()
    if version == 1:
        assert isinstance(body, dict) and "batches" in body, f"v1 JSON without 'batches': {str(body)[:300]}"
        return traces_data_from_json(body["batches"], "batches")
    assert isinstance(body, dict) and isinstance(body.get("trace"), dict), \
        f"v2 JSON without 'trace': {str(body)[:300]}"
    return traces_data_from_json(body["trace"].get("resourceSpans", []), "trace.resourceSpans")


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group(2) or "")}
        try:
            out.append((m.group(1), labels, float(m.group(3))))
        except ValueError:
            continue
    return out


def metric_value(samples, name: str, **labels: str) -> float | None:
    """Sum of the samples of `name` whose labels include `labels`; None when there is none."""
    vals = [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]
    return sum(vals) if vals else None


# ------------------------------------------------------------------------------------------------
# Blocks on disk
# ------------------------------------------------------------------------------------------------


def block_metas(data_dir: Path, tenant: str | None = None) -> list[tuple[Path, dict]]:
    """Complete blocks (meta.json present and parseable) as (block dir, meta)."""
    root = Path(data_dir) / "blocks"
    pattern = f"{tenant}/*/meta.json" if tenant else "*/*/meta.json"
    out = []
    for meta_path in sorted(root.glob(pattern)):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue  # being written
        out.append((meta_path.parent, meta))
    return out


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def start_sharing(weft_factory, name: str, *args: str, data_dir: Path) -> "WeftServer":
    """Starts a server of weft_factory on `data_dir`, a data directory other processes share."""
    srv = weft_factory(*args, name=name, start=False)
    srv.data_dir = data_dir
    return srv.start()


def wait_for_block_spans(server: WeftServer, spans: int, tenant: str = SINGLE_TENANT,
                         timeout: float = 30) -> list[tuple[Path, dict]]:
    """Wait until the tenant's blocks hold at least `spans` spans in total."""
    def enough():
        metas = block_metas(server.data_dir, tenant)
        return metas if sum(int(m.get("span_count", 0)) for _, m in metas) >= spans else None
    try:
        return wait_for(enough, timeout, f"blocks of tenant {tenant!r} holding {spans} spans")
    except AssertionError as e:
        found = [(str(d), m.get("span_count")) for d, m in block_metas(server.data_dir)]
        raise AssertionError(f"{e}; blocks found: {found}\n{server.describe()}") from None


@contextlib.contextmanager
def peer_process(cmd: list[str], log: Path, ready: Callable[[], bool], what: str, *,
                 env: dict[str, str] | None = None, timeout: float = 90):
    """Runs a peer server (a real Zipkin or Jaeger to compare against) until the block ends:
    waits until `ready()` is true, failing with the end of its log if it exits or times out,
    and stops it after (SIGTERM, then SIGKILL after 10 s)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def up():
        if proc.poll() is not None:
            raise WeftError(f"{what} exited with {proc.returncode}:\n{tail(log)}")
        try:
            return ready()
        except requests.RequestException:
            return False

    try:
        wait_for(up, timeout, f"{what} to start")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()



# ------------------------------------------------------------------------------------------------
# The S3-compatible server (scripts/s3-server.sh)
# ------------------------------------------------------------------------------------------------


def start_s3(tmp_path: Path, port: int | None = None) -> tuple[Path, int]:
    """Starts s3proxy serving bucket `weft` from tmp_path/s3/data on `port` (a free one by
    default), stopped at the latest when this test process exits. Returns (dir, port)."""
    port = port or free_ports(1)[0]
    d = Path(tmp_path) / "s3"
    r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "s3-server.sh"), "start", str(d), str(port)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "S3_SERVER_OWNER_PID": str(os.getpid())})
    assert r.returncode == 0, f"could not start the S3 server (scripts/s3-server.sh):\n{r.stderr[-3000:]}"
    return d, port


def stop_s3(d: Path) -> None:
    """Stops the s3proxy started on `d`, keeping its files."""
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "s3-server.sh"), "stop", str(d)],
                   capture_output=True, timeout=60)
