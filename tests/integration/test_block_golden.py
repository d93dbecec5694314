"""The committed golden v1 blocks read the same in DuckDB, whichever writer produced them.

crates/weft-block/testdata/golden holds one v1 block from the first writer (Parquet's own column
writer) and one from the writer that encodes its column chunks itself (`parquet_spans::chunk`),
both from the same 200 spans. A reader that is not ours must see identical rows in both.
"""
import pathlib

import duckdb

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "crates/weft-block/testdata/golden/blocks/golden"

SUMMARY = """
SELECT count(*), count(DISTINCT trace_id), count(parent_span_id), sum(duration_nano),
       sum(start_time_unix_nano), count(DISTINCT name), sum(kind), sum(status_code),
       count(status_message), count(attributes), count(events), count(links), count(extra),
       md5(string_agg(hex(trace_id) || hex(span_id) || coalesce(hex(parent_span_id), '-') || name
                      || coalesce(status_message, '-') || service_name || hex(resource) || hex(scope)
                      || coalesce(hex(attributes), '-') || coalesce(hex(events), '-')
                      || coalesce(hex(links), '-') || coalesce(hex(extra), '-'),
                      ',' ORDER BY trace_id, span_id))
FROM read_parquet('{path}')
"""


def test_golden_blocks_read_identically_in_duckdb():
    files = sorted(GOLDEN.glob("*/data.parquet"))
    assert len(files) >= 2, f"expected the golden blocks of both writers under {GOLDEN}"
    con = duckdb.connect()
    try:
        summaries = [con.execute(SUMMARY.format(path=f)).fetchone() for f in files]
    finally:
        con.close()
    assert summaries[0][0] == 200, summaries[0]
    for f, s in zip(files[1:], summaries[1:]):
        assert s == summaries[0], f"{f} reads differently from {files[0]}:\n{s}\n{summaries[0]}"
