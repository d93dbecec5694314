"""Blocks in an S3-compatible bucket (--storage s3): a real s3proxy started by
scripts/s3-server.sh; weft writes its blocks there, answers from them, survives a restart and a
kill -9 with nothing lost, and counts its storage requests in /metrics. The WAL stays local."""

from __future__ import annotations

import subprocess
import time

from otlpdata import make_request, make_span, new_trace_id
from weftlib import start_s3, stop_s3


def _start_s3(tmp_path):
    return start_s3(tmp_path)


def test_blocks_in_s3_survive_restarts(weft_factory, tmp_path):
    d, port = _start_s3(tmp_path)
    try:
        args = ("--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{port}", "--s3-bucket", "weft",
                "--s3-access-key-id", "weft", "--s3-secret-access-key", "weft-secret",
                "--s3-prefix", "team-a", "--block-max-age", "1")
        srv = weft_factory(*args)
        now = time.time_ns()
        ids = []
        for i in range(20):
            tid = new_trace_id()
            srv.send(make_request([make_span(tid, name=f"op-{i}", start=now - 10**9 + i),
                                   make_span(tid, name="child", start=now - 10**9 + i + 5)]))
            ids.append(tid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (srv.metric("weft_block_spans_written_total") or 0) < 40:
            time.sleep(0.2)
        assert (srv.metric("weft_blocks") or 0) >= 1, "no block was written to the bucket"
        objects = [p for p in (d / "data").rglob("*") if p.is_file() and p.name == "meta.json"]
        assert objects, f"no block in the bucket's files under {d / 'data'}"
        assert not (srv.data_dir / "blocks").exists(), "blocks went to the local data dir"
        assert (srv.metric("weft_storage_requests_total", op="put") or 0) >= 3
        assert srv.metric("weft_storage_errors_total", op="put", kind="backend") in (None, 0)

        srv.restart()
        for tid in ids:
            td = srv.fetch_trace(tid)
            assert td is not None and sum(len(ss.spans) for rs in td.resource_spans for ss in rs.scope_spans) == 2
        r = srv.get("/api/search", params={"q": '{ name = "op-7" }'})
        assert r.status_code == 200 and len(r.json()["traces"]) == 1, r.text[:300]

        # Acknowledged spans still in the head (WAL) when killed come back too.
        tid = new_trace_id()
        srv.send(make_request([make_span(tid, name="late", start=now)]))
        srv.kill9()
        srv.start()
        assert srv.fetch_trace(tid) is not None, "an acknowledged span was lost with S3 storage"
    finally:
        stop_s3(d)


def test_a_wrong_bucket_fails_at_start_naming_it(weft_factory, tmp_path):
    d, port = _start_s3(tmp_path)
    try:
        srv = weft_factory("--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{port}",
                           "--s3-bucket", "no-such-bucket", "--s3-access-key-id", "weft",
                           "--s3-secret-access-key", "weft-secret", start=False)
        try:
            srv.start(timeout=60)
            raise AssertionError("weft started on a bucket that does not exist")
        except AssertionError as e:
            if "started on a bucket" in str(e):
                raise
            srv.stopped_by_us = True  # it exited by itself, as it should
            err = srv.describe()
            assert "no-such-bucket" in err and "NoSuchBucket" in err, err
        srv = weft_factory("--storage", "s3", start=False, name="nobucket")
        r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=30, env=srv.process_env())
        assert r.returncode != 0 and "--s3-bucket" in r.stderr, r.stderr
    finally:
        stop_s3(d)
