"""One binary, many roles: --target ingester, querier and compactor as separate processes on one
data directory.

The ingester receives and writes blocks; a querier process, which writes nothing, reads every
acknowledged trace back from those blocks (re-reading the block list as it changes); a compactor
process merges the blocks, and the querier still answers every trace, once, from the merged
block."""

from __future__ import annotations

import time

import requests

from otlpdata import (
    assert_same_spans,
    canon_spans,
    make_request,
    make_span,
    new_trace_id,
)
from weftlib import SINGLE_TENANT, start_sharing

BASE = time.time_ns() - 60_000_000_000


def _traces(n: int, spans: int) -> list[tuple[bytes, object]]:
    out = []
    for i in range(n):
        tid = new_trace_id()
        req = make_request(
            [make_span(tid, name=f"op-{i}-{k}", start=BASE + i * 1_000_000 + k, attributes={"k": k})
             for k in range(spans)],
            service=f"svc-{i % 3}",
        )
        out.append((tid, req))
    return out


def _wait_for(what: str, ok, timeout: float = 60.0, every: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = ok()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")



def test_ingester_querier_and_compactor_processes_share_one_data_dir(weft_factory, tmp_path):
    data = tmp_path / "shared-data"
    ingester = start_sharing(weft_factory, "ingester", "--target", "ingester", "--block-max-age", "0.5",
                       data_dir=data)
    querier = start_sharing(weft_factory, "querier", "--target", "querier", "--blocklist-poll", "0.2",
                      data_dir=data)

    # Each process serves only its roles: no OTLP on the querier, no queries on the ingester.
    assert not querier.receives
    for port in (querier.grpc_port, querier.otlp_http_port):
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=2)
            raise AssertionError(f"the querier listens on OTLP port {port}")
        except requests.ConnectionError:
            pass
    r = ingester.get("/api/search", params={"q": "{}"})
    assert r.status_code == 404, f"the ingester answered a query: {r.status_code} {r.text[:200]}"
    for srv in (ingester, querier):
        assert srv.get("/ready").status_code == 200
        assert srv.metric("process_resident_memory_bytes"), f"{srv.name} serves no /metrics"

    # Acknowledged over every transport and encoding the ingester takes, in three batches, each
    # read back through the querier from the blocks the ingester writes (so several blocks).
    traces = _traces(30, 4)
    for batch in range(3):
        sent = traces[batch * 10:(batch + 1) * 10]
        for i, (tid, req) in enumerate(sent):
            if i % 3 == 0:
                resp = ingester.grpc_export(req)
                assert resp.partial_success.rejected_spans == 0, resp
            elif i % 3 == 1:
                ingester.send(req)
            else:
                ingester.send(req, json_body=True)

        def all_readable():
            missing = [tid.hex() for tid, _ in sent if querier.fetch_trace(tid) is None]
            return not missing or None

        _wait_for(f"the querier to read batch {batch + 1} of acknowledged traces", all_readable)
    for tid, req in traces:
        expected, _ = canon_spans(req, tid)
        got, dups = canon_spans(querier.fetch_trace(tid))
        assert not dups, f"trace {tid.hex()} read with duplicate spans {dups}"
        assert_same_spans(expected, got, f"trace {tid.hex()} through the querier")

    # Search and tags are served by the querier from the same blocks.
    r = querier.get("/api/search", params={"q": '{ resource.service.name = "svc-1" }', "limit": "100"})
    assert r.status_code == 200, r.text[:300]
    found = {t["traceID"].rjust(32, "0") for t in r.json()["traces"]}
    want = {tid.hex() for i, (tid, _) in enumerate(traces) if i % 3 == 1}
    assert want <= found, f"search through the querier missed {sorted(want - found)}"

    blocks_before = _wait_for("blocks on disk", lambda: sorted(p.parent.name for p in
                                                               data.glob("blocks/*/*/meta.json")))
    assert len(blocks_before) >= 2, f"expected several blocks to compact, got {blocks_before}"

    # A compactor process merges them; the querier drops the merged-away blocks and answers
    # every trace, once, from the new block.
    compactor = start_sharing(weft_factory, "compactor", "--target", "compactor", "--compaction-max-inputs", "2",
                        "--compaction-interval",
                        "0.5", data_dir=data)
    _wait_for("a compaction", lambda: (compactor.metric("weft_compactions_total") or 0) >= 1)
    _wait_for("the querier to see the compacted block list",
              lambda: querier.metric("weft_blocks") == compactor.metric("weft_blocks"))
    assert querier.metric("weft_blocks") < len(blocks_before)
    for tid, req in traces:
        expected, _ = canon_spans(req, tid)
        got, dups = canon_spans(querier.fetch_trace(tid))
        assert not dups, f"trace {tid.hex()} read twice after compaction: {dups}"
        assert_same_spans(expected, got, f"trace {tid.hex()} after compaction")

    # New spans keep flowing through while the roles run apart.
    tid, req = _traces(1, 3)[0]
    ingester.send(req)
    _wait_for("a trace sent after compaction", lambda: querier.fetch_trace(tid) is not None)
    assert (ingester.metric("weft_spans_received_total", tenant=SINGLE_TENANT) or 0) >= 30 * 4 + 3


def test_two_compactors_on_one_storage_never_merge_the_same_blocks(weft_factory, tmp_path):
    """Two compactor processes share the data directory with an ingester that keeps cutting small
    blocks. Each tenant is merged by the compactor holding its lease (an object created with a
    create-only put), so no block is merged twice: the live blocks hold every acknowledged span
    exactly once, and leases change hands as periods end."""
    data = tmp_path / "shared-data"
    ingester = start_sharing(weft_factory, "ingester", "--target", "ingester", "--block-max-age", "0.2",
                       "--multitenancy", data_dir=data)
    compactors = [
        start_sharing(weft_factory, f"compactor-{i}", "--target", "compactor", "--compaction-interval", "0.2",
                "--compaction-max-inputs", "2", "--compaction-lease", "2", data_dir=data)
        for i in range(2)
    ]
    sent: dict[str, int] = {}
    deadline = time.monotonic() + 10
    i = 0
    while time.monotonic() < deadline:
        tenant = f"team-{i % 3}"
        tid, req = _traces(1, 3)[0]
        ingester.send(req, tenant=tenant)
        sent[tenant] = sent.get(tenant, 0) + 3
        i += 1
        time.sleep(0.02)

    def live():
        metas = [__import__("json").loads(p.read_text()) for p in data.glob("blocks/*/*/meta.json")]
        replaced = {b for m in metas for b in m.get("compacted_from", [])}
        return [m for m in metas if m["block_id"] not in replaced]

    def settled():
        counts: dict[str, int] = {}
        for m in live():
            counts[m["tenant"]] = counts.get(m["tenant"], 0) + m["span_count"]
        return counts == sent or counts

    _wait_for("the blocks to hold every span once", lambda: settled() is True, timeout=60)
    merges = [c.metric("weft_compactions_total") or 0 for c in compactors]
    skips = [c.metric("weft_compaction_lease_skips_total") or 0 for c in compactors]
    assert sum(merges) >= 3, f"compactions: {merges}"
    # No client retried, so a duplicate dropped by a merge means two compactors merged the
    # same blocks (and a later merge healed it).
    dups = [c.metric("weft_compaction_duplicate_spans_removed_total") or 0 for c in compactors]
    assert sum(dups) == 0, f"blocks were merged twice: duplicates removed {dups}"
    assert sum(skips) >= 1, f"neither compactor ever found a tenant leased by the other: {skips}"
    # And it stays so while the compactors keep running over periods changing hands.
    time.sleep(3)
    assert settled() is True
    assert sum(c.metric("weft_compaction_duplicate_spans_removed_total") or 0 for c in compactors) == 0
