"""A damaged block never takes a tenant's queries down (issue 45).

Regression, one test per row of the issue's table: two blocks of 50 traces, the older one
damaged while weft is stopped. Before the fix a truncated or deleted data.parquet made every
search, tags, metrics and service-graph request of the tenant answer 500 ("range … is outside
object"), on every retry, and trace by ID answered 500 for the damaged block's traces; a zeroed
tail left 50 traces out without saying so; a deleted meta.json was taken for a crashed write
and its block deleted. Now every row answers 200 with the partial flag, the damaged block is
quarantined, and the healthy traces read back — in a local data directory and in an
S3-compatible bucket. A storage that cannot be reached answers 503 with Retry-After and
quarantines nothing. The scrubber finds damage made while weft runs, before any query."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from otlpdata import make_request, make_span, new_trace_id
from weftlib import start_s3, start_sharing, stop_s3, wait_for

PARTIAL = "x-weft-partial-damaged-blocks"
TRACES = 50


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def _zero_tail(path: Path, n: int = 4096) -> None:
    data = bytearray(path.read_bytes())
    data[-n:] = bytes(min(n, len(data)))
    path.write_bytes(bytes(data))


DAMAGE = {
    "data_truncated_to_half": lambda d: _truncate(d / "data.parquet", (d / "data.parquet").stat().st_size // 2),
    "data_truncated_to_100_bytes": lambda d: _truncate(d / "data.parquet", 100),
    "data_deleted": lambda d: (d / "data.parquet").unlink(),
    "data_tail_zeroed": lambda d: _zero_tail(d / "data.parquet"),
    "index_truncated": lambda d: _truncate(d / "index.bin", (d / "index.bin").stat().st_size // 2),
    "index_deleted": lambda d: (d / "index.bin").unlink(),
    "meta_garbage": lambda d: (d / "meta.json").write_bytes(b"{ not json"),
    "meta_deleted": lambda d: (d / "meta.json").unlink(),
}


def _block_dirs(root: Path) -> list[Path]:
    """Block folders under `root` (any folder holding data.parquet), oldest first: block IDs are
    UUIDv7s, which sort by creation time."""
    return sorted({p.parent for p in root.rglob("data.parquet") if "quarantine" not in p.parts},
                  key=lambda p: p.name)


def _write_two_blocks(srv, blocks_root: Path) -> tuple[list[bytes], list[bytes]]:
    groups = []
    for g, service in enumerate(["older", "newer"]):
        tids = [new_trace_id() for _ in range(TRACES)]
        now = time.time_ns()
        srv.send(make_request([
            make_span(t, name=f"op-{service}", start=now - 2 * 10**9, end=now - 10**9)
            for t in tids for _ in range(2)
        ], service=service))
        groups.append(tids)
        wait_for(lambda: len([d for d in _block_dirs(blocks_root) if (d / "meta.json").exists()]) >= g + 1,
                 30, f"block {g + 1} written")
    return groups[0], groups[1]


def _spans(srv, tid: bytes) -> int:
    td = srv.fetch_trace(tid)
    return 0 if td is None else sum(len(ss.spans) for rs in td.resource_spans for ss in rs.scope_spans)


def _assert_partial_everywhere(srv, older: list[bytes], newer: list[bytes]) -> None:
    now = int(time.time())
    for path, params in [
        ("/api/search", {"q": "{ }", "limit": "1000"}),
        ("/api/search", {"tags": "service.name=older", "limit": "1000"}),
        ("/api/search/tags", {}),
        ("/api/v2/search/tags", {"scope": "span"}),
        ("/api/search/tag/name/values", {}),
        ("/api/v2/search/tag/name/values", {}),
        ("/api/v2/search/tag/resource.service.name/values", {"q": '{ name = "op-older" }'}),
        ("/api/metrics/query_range", {"q": "{ } | rate() by (resource.service.name)",
                                      "start": str(now - 600), "end": str(now + 60), "step": "60s"}),
        ("/api/metrics/query", {"q": "{ } | count_over_time()", "start": str(now - 600), "end": str(now + 60)}),
        ("/api/service-graph", {"since": "1h"}),
    ]:
        for attempt in range(2):  # the first query may be the one that finds the damage
            r = srv.get(path, params=params)
            assert r.status_code == 200, (path, attempt, r.status_code, r.text[:300])
            assert int(r.headers.get(PARTIAL, "0")) >= 1, (path, attempt, dict(r.headers))
    r = srv.get("/api/search", params={"q": "{ }", "limit": "1000"})
    found = {t["traceID"].rjust(32, "0") for t in r.json()["traces"]}
    assert {t.hex() for t in newer} <= found, "the healthy block was not searched whole"
    assert not ({t.hex() for t in older} & found), "a trace of the damaged block was served"
    # Jaeger's and Zipkin's APIs say it too.
    r = requests_get(f"{srv.jaeger}/api/traces", {"service": "newer", "lookback": "1h", "limit": "100"})
    assert r.status_code == 200 and int(r.headers.get(PARTIAL, "0")) >= 1, (r.status_code, dict(r.headers))
    assert len(r.json()["data"]) == TRACES
    # Trace by ID: the healthy traces whole; the damaged block's traces 404 with the flag.
    for t in newer[:10]:
        assert _spans(srv, t) == 2
    for t in older[:5]:
        for v in ("/api/traces/", "/api/v2/traces/"):
            r = srv.get(v + t.hex())
            assert r.status_code == 404, (v, r.status_code, r.text[:200])
            assert int(r.headers.get(PARTIAL, "0")) >= 1, (v, dict(r.headers))
            assert "damaged" in r.text
    r = requests_get(f"{srv.jaeger}/api/traces/{older[0].hex()}", {})
    assert r.status_code == 404 and int(r.headers.get(PARTIAL, "0")) >= 1


def requests_get(url: str, params: dict) -> requests.Response:
    return requests.get(url, params=params, timeout=30)


def _quarantined(srv) -> set[str]:
    return {l["block"] for n, l, v in srv.metrics() if n == "weft_block_quarantined"}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_older_block_leaves_every_query_answering(weft_factory, damage):
    srv = weft_factory("--block-max-age", "1", "--compaction-interval", "0")
    blocks_root = srv.data_dir / "blocks"
    older, newer = _write_two_blocks(srv, blocks_root)
    assert srv.stop() == 0
    dirs = _block_dirs(blocks_root)
    assert len(dirs) == 2, dirs
    victim = dirs[0]
    DAMAGE[damage](victim)

    srv.start()
    _assert_partial_everywhere(srv, older, newer)
    assert victim.name in _quarantined(srv), srv.metrics()
    qdir = srv.data_dir / "quarantine" / "single-tenant" / victim.name
    wait_for(lambda: qdir.exists() and not (victim / "meta.json").exists(), 10, "the block moved to quarantine/")
    assert "damaged block" in srv.stderr_path.read_text()

    # A restart keeps saying it: the block is still listed under quarantine/.
    srv.restart()
    r = srv.get("/api/search", params={"q": "{ }", "limit": "1000"})
    assert r.status_code == 200 and int(r.headers.get(PARTIAL, "0")) >= 1, dict(r.headers)
    assert victim.name in _quarantined(srv)


def test_the_scrubber_finds_damage_before_a_query_does(weft_factory):
    srv = weft_factory("--block-max-age", "1", "--compaction-interval", "0",
                       "--scrub-interval", "0.5", "--scrub-rate", "1000000000", "--scrub-period", "1s")
    blocks_root = srv.data_dir / "blocks"
    older, newer = _write_two_blocks(srv, blocks_root)
    wait_for(lambda: (srv.metric("weft_scrub_blocks_total") or 0) >= 2, 30, "both blocks scrubbed")
    assert not _quarantined(srv)
    # Flipped bytes in the middle of the older block's data, and the newer block's meta.json
    # deleted, while weft runs and nobody queries.
    dirs = _block_dirs(blocks_root)
    data = bytearray((dirs[0] / "data.parquet").read_bytes())
    data[len(data) // 2] ^= 0x40
    (dirs[0] / "data.parquet").write_bytes(bytes(data))
    (dirs[1] / "meta.json").unlink()
    wait_for(lambda: _quarantined(srv) >= {dirs[0].name, dirs[1].name}, 30, "the scrubber quarantining both")
    assert (srv.metric("weft_blocks") or 0) == 0
    r = srv.get("/api/search", params={"q": "{ }", "limit": "1000"})
    assert r.status_code == 200 and int(r.headers.get(PARTIAL, "0")) >= 1


# ------------------------------------------------------------------------------------------------
# The same in an S3-compatible bucket
# ------------------------------------------------------------------------------------------------


def _s3_args(port: int) -> tuple[str, ...]:
    return ("--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{port}", "--s3-bucket", "weft",
            "--s3-access-key-id", "weft", "--s3-secret-access-key", "weft-secret", "--s3-prefix", "team-a",
            "--block-max-age", "1", "--compaction-interval", "0")


@pytest.mark.parametrize("damage", ["data_truncated_to_half", "data_deleted", "data_tail_zeroed",
                                    "index_deleted", "meta_garbage", "meta_deleted"])
def test_a_damaged_older_block_in_s3_leaves_every_query_answering(weft_factory, tmp_path, damage):
    d, port = start_s3(tmp_path)
    try:
        srv = weft_factory(*_s3_args(port))
        bucket = d / "data"
        older, newer = _write_two_blocks(srv, bucket)
        assert srv.stop() == 0
        dirs = _block_dirs(bucket)
        assert len(dirs) == 2, dirs
        victim = dirs[0]
        DAMAGE[damage](victim)  # out of band, in the bucket's own files

        srv.start()
        _assert_partial_everywhere(srv, older, newer)
        assert victim.name in _quarantined(srv)
        wait_for(lambda: any(p.parent.name == victim.name and "quarantine" in p.parts for p in bucket.rglob("*")
                             if p.is_file()), 10, "the block listed under quarantine/ in the bucket")
    finally:
        stop_s3(d)


def test_an_unreachable_bucket_answers_503_and_quarantines_nothing(weft_factory, tmp_path):
    d, port = start_s3(tmp_path)
    try:
        srv = weft_factory(*_s3_args(port))
        older, newer = _write_two_blocks(srv, d / "data")
        stop_s3(d)
        for path, params in [("/api/search", {"q": "{ }", "limit": "1000"}),
                             ("/api/v2/search/tags", {"scope": "span"}),
                             ("/api/service-graph", {"since": "1h"}),
                             (f"/api/traces/{older[0].hex()}", {})]:
            r = srv.get(path, params=params, timeout=120)
            assert r.status_code == 503, (path, r.status_code, r.text[:300])
            assert r.headers.get("Retry-After"), dict(r.headers)
            assert "unavailable" in r.text
        assert not _quarantined(srv)
        start_s3(tmp_path, port)
        r = srv.get("/api/search", params={"q": "{ }", "limit": "1000"})
        assert r.status_code == 200 and PARTIAL not in r.headers, (r.status_code, dict(r.headers))
        assert len(r.json()["traces"]) == 2 * TRACES
        assert _spans(srv, older[0]) == 2
    finally:
        stop_s3(d)


# ------------------------------------------------------------------------------------------------
# Separate roles on one data directory
# ------------------------------------------------------------------------------------------------


def test_with_separate_roles_the_querier_reports_and_the_compactor_quarantines(weft_factory, tmp_path):
    """The querier, which maintains nothing, takes a damaged block out of service and says its
    answers are partial; the compactor's scrubber moves it to quarantine/; a querier started
    later learns of it from quarantine/ and still says so."""
    data = tmp_path / "shared-data"
    ingester = start_sharing(weft_factory, "ingester", "--target", "ingester", "--block-max-age", "1",
                             data_dir=data)
    querier = start_sharing(weft_factory, "querier", "--target", "querier", "--blocklist-poll", "0.2",
                            data_dir=data)
    older, newer = _write_two_blocks(ingester, data / "blocks")
    wait_for(lambda: len(querier.get("/api/search", params={"q": "{ }", "limit": "1000"}).json()["traces"])
             == 2 * TRACES, 30, "the querier seeing both blocks")
    victim = _block_dirs(data / "blocks")[0]
    DAMAGE["data_truncated_to_half"](victim)

    r = querier.get("/api/search", params={"q": "{ }", "limit": "1000"})
    assert r.status_code == 200 and int(r.headers.get(PARTIAL, "0")) >= 1, (r.status_code, dict(r.headers))
    assert {t["traceID"].rjust(32, "0") for t in r.json()["traces"]} == {t.hex() for t in newer}
    assert victim.name in _quarantined(querier)
    assert (victim / "meta.json").exists(), "only the maintaining process moves a block"

    compactor = start_sharing(weft_factory, "compactor", "--target", "compactor", "--blocklist-poll", "0.2",
                              "--scrub-interval", "0.5", "--scrub-rate", "1000000000", data_dir=data)
    qdir = data / "quarantine" / "single-tenant" / victim.name
    wait_for(lambda: qdir.exists() and not (victim / "meta.json").exists(), 30, "the compactor quarantining it")
    assert victim.name in _quarantined(compactor)

    later = start_sharing(weft_factory, "querier2", "--target", "querier", "--blocklist-poll", "0.2",
                          data_dir=data)
    r = later.get("/api/search", params={"q": "{ }", "limit": "1000"})
    assert r.status_code == 200 and int(r.headers.get(PARTIAL, "0")) >= 1, dict(r.headers)
    assert len(r.json()["traces"]) == TRACES
    r = later.get(f"/api/traces/{older[0].hex()}")
    assert r.status_code == 404 and int(r.headers.get(PARTIAL, "0")) >= 1
