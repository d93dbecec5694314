"""Small HTTP endpoints, trace ID parsing, configuration through WEFT_* variables, shutdown."""

from __future__ import annotations

import signal
import time

import pytest

from otlpdata import canon_spans, make_request, make_span, new_trace_id
from weftlib import SINGLE_TENANT, WeftServer, parse_prometheus


def sample_trace(tid: bytes | None = None, n: int = 3):
    tid = tid or new_trace_id()
    now = time.time_ns()
    return tid, make_request([make_span(tid, name=f"misc-{i}", start=now + i * 1000) for i in range(n)])


def test_echo_ready_buildinfo(weft):
    r = weft.get("/api/echo")
    assert (r.status_code, r.text.strip()) == (200, "echo")
    r = weft.get("/ready")
    assert (r.status_code, r.text.strip()) == (200, "ready")
    r = weft.get("/api/status/buildinfo")
    assert r.status_code == 200
    info = r.json()
    assert isinstance(info.get("version"), str) and info["version"], info


@pytest.mark.parametrize("bad_id", [
    "xyz", "g" * 32, "0123456789abcdef0123456789abcdeg", "0" * 33, "1" * 64, "12-34", "0x1234",
])
def test_malformed_trace_id_is_400(weft, bad_id):
    for path in (f"/api/traces/{bad_id}", f"/api/v2/traces/{bad_id}"):
        for accept in ("application/json", "application/protobuf"):
            r = weft.get(path, headers={"Accept": accept})
            assert r.status_code == 400, f"GET {path} ({accept}) -> {r.status_code} {r.content[:200]!r}"


def test_unknown_trace_is_404(weft):
    tid, req = sample_trace()
    weft.send(req)
    for other in (new_trace_id().hex(), "1", "ab" * 16):
        for path in (f"/api/traces/{other}", f"/api/v2/traces/{other}"):
            for accept in ("application/json", "application/protobuf"):
                r = weft.get(path, headers={"Accept": accept})
                assert r.status_code == 404, f"GET {path} ({accept}) -> {r.status_code}"


def test_short_and_uppercase_ids(weft):
    tid = bytes(13) + b"\x0a\xbc\xde"
    _, req = sample_trace(tid)
    weft.send(req)
    expected = canon_spans(req)[0]
    for spelled in ("abcde", "0abcde", "000abcde", tid.hex(), tid.hex().upper(), "ABCDE"):
        for version in (1, 2):
            td = weft.fetch_trace(spelled, version=version)
            assert td is not None, f"trace {tid.hex()} not found as {spelled!r} (v{version})"
            assert canon_spans(td)[0] == expected


def test_json_is_the_default(weft):
    tid, req = sample_trace()
    weft.send(req)
    for path, key in ((f"/api/traces/{tid.hex()}", "batches"), (f"/api/v2/traces/{tid.hex()}", "trace")):
        r = weft.get(path)
        assert r.status_code == 200
        assert "application/json" in r.headers.get("Content-Type", ""), r.headers.get("Content-Type")
        assert key in r.json()


def test_hostile_query_parameters_get_a_400_or_the_right_answer(weft):
    """Found by a black-box audit of the query APIs: each of these panicked (the connection
    dropped without a reply), answered 500, or answered 200 with a wrong window."""
    import requests
    tid, req = sample_trace()
    weft.send(req)
    for params in ({"start": "2023-11-14T22:13:20+1\u00e912"},   # a multi-byte character: panicked
                   {"start": "2600-01-01T00:00:00Z"},             # wrapped to 1970: 200 with traces
                   {"start": "2023-13-45T99:99:99Z"},             # normalised: 200
                   {"start": "2023-02-29T00:00:00Z"}):
        r = weft.get("/api/search", params={"q": "{ }", **params})
        assert r.status_code == 400 and "RFC 3339" in r.text, (params, r.status_code, r.text[:200])
    r = weft.get("/api/search/tag/%25a%C3%A9x/values")    # panicked
    assert r.status_code == 200, r.text[:200]
    r = requests.get(f"{weft.jaeger}/api/v3/traces", timeout=15, params={
        "query.startTimeMin": "2023-11-14T22:13:20+1\u00e912", "query.startTimeMax": "2023-11-14T23:13:20Z"})
    assert r.status_code == 400, (r.status_code, r.text[:200])
    # Windows whose end was past u64 nanoseconds wrapped to nothing, where they mean "all".
    r = requests.get(f"{weft.jaeger}/api/dependencies", timeout=15,
                     params={"endTs": 18446744073709, "lookback": 18446744073709})
    assert r.status_code == 200 and r.json()["errors"] is None, r.text[:200]
    assert requests.get(f"{weft.zipkin}/api/v2/traces", timeout=15,
                        params={"endTs": 18446744073709, "lookback": 18446744073709}).json(), \
        "Zipkin's search of all time finds the trace"
    # 130 tags: the chain of conditions passed the nesting limit.
    tags = " ".join(f"k{i}=v{i}" for i in range(130))
    r = weft.get("/api/search", params={"tags": tags})
    assert r.status_code == 200 and r.json()["traces"] == [], r.text[:200]
    assert weft.get("/ready").status_code == 200


def test_start_end_params(weft):
    tid, req = sample_trace()
    weft.send(req)
    now = int(time.time())
    td = weft.fetch_trace(tid, params={"start": now - 3600, "end": now + 3600})
    assert td is not None and canon_spans(td)[0] == canon_spans(req)[0]
    td = weft.fetch_trace(tid, version=2, protobuf=False, params={"start": now - 3600, "end": now + 3600})
    assert td is not None and canon_spans(td)[0] == canon_spans(req)[0]


def test_metrics_count_received_spans(weft):
    _, req = sample_trace(n=5)
    weft.send(req)
    _, req2 = sample_trace(n=2)
    weft.grpc_export(req2)
    r = weft.get("/metrics")
    assert r.status_code == 200
    assert "text/plain" in r.headers.get("Content-Type", "") or "openmetrics" in r.headers.get("Content-Type", "")
    samples = parse_prometheus(r.text)
    vals = [v for n, l, v in samples if n == "weft_spans_received_total" and l.get("tenant") == SINGLE_TENANT]
    assert vals == [7.0], f"weft_spans_received_total{{tenant=single-tenant}}: {vals}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown_exits_0_and_keeps_data(weft_factory, sig):
    srv = weft_factory()
    tid, req = sample_trace()
    srv.send(req)
    t = time.monotonic()
    rc = srv.stop(sig)
    assert rc == 0, f"exit code {rc} after {signal.Signals(sig).name}\n{srv.describe()}"
    assert time.monotonic() - t < 10
    srv.start()
    td = srv.fetch_trace(tid)
    assert td is not None and canon_spans(td)[0] == canon_spans(req)[0]
    assert srv.stop() == 0


def test_configuration_from_environment(weft_factory):
    """Every flag can be given as WEFT_<UPPER_SNAKE>; no flags at all on the command line."""
    srv = weft_factory(start=False, use_flags=False)
    srv.env.update({
        "WEFT_DATA_DIR": str(srv.data_dir),
        "WEFT_LISTEN_HOST": "127.0.0.1",
        "WEFT_OTLP_GRPC_PORT": str(srv.grpc_port),
        "WEFT_OTLP_HTTP_PORT": str(srv.otlp_http_port),
        "WEFT_HTTP_PORT": str(srv.http_port),
        "WEFT_BLOCK_MAX_AGE": "0.5",
        "WEFT_MAX_REQUEST_BYTES": "10000",
    })
    srv.start()
    tid, req = sample_trace()
    srv.send(req)
    r = srv.post_otlp(b"\0" * 20000)
    assert r.status_code == 413, f"WEFT_MAX_REQUEST_BYTES ignored: {r.status_code}"
    from weftlib import wait_for_block_spans
    metas = wait_for_block_spans(srv, 3, timeout=15)
    assert metas[0][0].is_relative_to(srv.data_dir), "WEFT_DATA_DIR ignored"
    assert srv.fetch_trace(tid) is not None


def test_fsync_modes_accept_and_serve(weft_factory):
    for mode in ("always", "interval", "never"):
        srv = weft_factory("--fsync", mode, name=f"fsync-{mode}")
        tid, req = sample_trace()
        srv.send(req)
        td = srv.fetch_trace(tid)
        assert td is not None and canon_spans(td)[0] == canon_spans(req)[0], mode
        assert srv.stop() == 0


def test_bad_flag_fails_fast(weft_bin, tmp_path):
    srv = WeftServer(weft_bin, tmp_path, ["--fsync", "sometimes"])
    import subprocess
    p = subprocess.run(srv.command(), cwd=tmp_path, env=srv.process_env(), capture_output=True, timeout=20)
    assert p.returncode != 0, "an invalid --fsync value was accepted"
    assert b"fsync" in p.stderr.lower() or b"fsync" in p.stdout.lower()


def test_logs_to_a_file_carry_no_colour_codes(weft_factory):
    """Regression (issue 46, point 7): text logs written to a file or a pipe (`make run > log`)
    carried ANSI colour codes. Colour is for terminals only."""
    srv = weft_factory()
    tid = new_trace_id()
    srv.send(make_request([make_span(tid, start=time.time_ns())]))
    assert srv.stop() == 0
    log = srv.stderr_path.read_text()
    assert "weft is ready" in log
    assert "\x1b[" not in log, log[:500]
