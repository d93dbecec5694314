"""telemetrygen (the OpenTelemetry collector's load generator) writes traces; the blocks it ends up
in are read with DuckDB and the traces through the query API."""

from __future__ import annotations

import os
import subprocess
import time

import duckdb

from weftlib import SINGLE_TENANT, block_metas, wait_for_block_spans

TRACES_GRPC = 50
TRACES_HTTP = 20
SPANS_PER_TRACE = 10  # telemetrygen's root "lets-go" plus 9 "okey-dokey-N" children


def run_telemetrygen(binary, workdir, *args: str) -> None:
    cmd = [str(binary), "traces", "--otlp-insecure", "--rate", "0", "--workers", "1",
           "--child-spans", str(SPANS_PER_TRACE - 1), *args]
    log = workdir / f"telemetrygen-{int(time.time() * 1000)}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with open(log, "wb") as out:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=60, env=env).returncode
        except subprocess.TimeoutExpired:
            raise AssertionError(f"telemetrygen hung: {' '.join(cmd)}\n{log.read_text()[-3000:]}")
    text = log.read_text(errors="replace")
    # Without --allow-export-failures, telemetrygen stops with an error on a failed export.
    assert rc == 0, f"telemetrygen exited {rc}: {' '.join(cmd)}\n{text[-3000:]}"


def parquet_info(path):
    con = duckdb.connect()
    try:
        cols = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()
        types = {c[0]: c[1] for c in cols}
        rows = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0]
        tids = [r[0] for r in con.execute(f"SELECT trace_id FROM read_parquet('{path}')").fetchall()] \
            if "trace_id" in types else None
        distinct = con.execute(f"SELECT DISTINCT trace_id FROM read_parquet('{path}')").fetchall() \
            if "trace_id" in types else None
        return types, rows, tids, distinct
    finally:
        con.close()


def test_telemetrygen_blocks_duckdb_and_api(weft_factory, telemetrygen_bin, tmp_path):
    srv = weft_factory("--block-max-age", "1")
    t0 = time.time_ns()
    run_telemetrygen(telemetrygen_bin, tmp_path, "--otlp-endpoint", srv.grpc_target,
                     "--traces", str(TRACES_GRPC))
    run_telemetrygen(telemetrygen_bin, tmp_path, "--otlp-http", "--otlp-endpoint",
                     f"127.0.0.1:{srv.otlp_http_port}", "--traces", str(TRACES_HTTP))
    t1 = time.time_ns()
    total = (TRACES_GRPC + TRACES_HTTP) * SPANS_PER_TRACE

    assert srv.metric("weft_spans_received_total", tenant=SINGLE_TENANT) == total
    metas = wait_for_block_spans(srv, total)
    # No further block may appear with the same spans again.
    time.sleep(1.5)
    metas = block_metas(srv.data_dir, SINGLE_TENANT)
    assert sum(int(m["span_count"]) for _, m in metas) == total, \
        f"blocks hold {[m['span_count'] for _, m in metas]} spans, sent {total}"

    all_trace_ids: set[bytes] = set()
    for block_dir, meta in metas:
        for f in ("data.parquet", "meta.json", "index.bin"):
            assert (block_dir / f).is_file(), f"{block_dir} lacks {f}"
        for key in ("version", "tenant", "block_id", "span_count", "trace_count",
                    "min_start_unix_nano", "max_end_unix_nano", "size_bytes"):
            assert key in meta, f"meta.json of {block_dir.name} lacks {key!r}: {meta}"
        assert meta["tenant"] == SINGLE_TENANT
        assert meta["block_id"] == block_dir.name
        assert block_dir.parent.name == SINGLE_TENANT
        assert isinstance(meta["version"], int) and meta["version"] >= 1
        assert meta["size_bytes"] == (block_dir / "data.parquet").stat().st_size
        assert t0 - 5_000_000_000 <= meta["min_start_unix_nano"] <= meta["max_end_unix_nano"] \
            <= t1 + 5_000_000_000, f"time range of {block_dir.name} is off: {meta}"

        types, rows, tids, distinct = parquet_info(block_dir / "data.parquet")
        assert "trace_id" in types, f"data.parquet has no trace_id column; columns: {types}"
        assert types["trace_id"] == "BLOB", f"trace_id is {types['trace_id']}, expected BLOB"
        assert rows == meta["span_count"], f"{block_dir.name}: {rows} rows, meta says {meta['span_count']}"
        assert all(len(t) == 16 for t in tids), "trace_id values are not 16 bytes"
        assert tids == sorted(tids), f"rows of {block_dir.name} are not sorted by trace id"
        assert len(distinct) == meta["trace_count"]
        all_trace_ids |= {bytes(r[0]) for r in distinct}

    assert len(all_trace_ids) == TRACES_GRPC + TRACES_HTTP

    expected_children = {f"okey-dokey-{i}" for i in range(SPANS_PER_TRACE - 1)}
    for tid in sorted(all_trace_ids):
        td = srv.fetch_trace(tid)
        assert td is not None, f"trace {tid.hex()} (in a block) not found through the API"
        spans = [(rs, sp) for rs in td.resource_spans for ss in rs.scope_spans for sp in ss.spans]
        assert len(spans) == SPANS_PER_TRACE, f"trace {tid.hex()} has {len(spans)} spans"
        assert len({sp.span_id for _, sp in spans}) == SPANS_PER_TRACE
        assert all(sp.trace_id == tid for _, sp in spans)
        roots = [sp for _, sp in spans if not sp.parent_span_id]
        assert len(roots) == 1, f"trace {tid.hex()} has {len(roots)} roots"
        root = roots[0]
        assert root.name == "lets-go"
        children = [sp for _, sp in spans if sp.parent_span_id]
        assert {sp.name for sp in children} == expected_children
        assert all(sp.parent_span_id == root.span_id for sp in children)
        assert root.kind == 3 and all(sp.kind == 2 for sp in children)  # client root, server children
        for rs, _ in spans:
            svc = [kv.value.string_value for kv in rs.resource.attributes if kv.key == "service.name"]
            assert svc == ["telemetrygen"], f"service.name of trace {tid.hex()}: {svc}"
