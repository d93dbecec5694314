"""Multi-tenancy: tenants come from X-Scope-OrgID, and no tenant reads another's data."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import requests

from otlpdata import canon_spans, make_request, make_span, new_trace_id
from weftlib import block_metas, wait_for_block_spans

A, B = "tenant-a", "tenant-b"


def one_trace(service: str, n: int = 3):
    tid = new_trace_id()
    now = time.time_ns()
    return tid, make_request([make_span(tid, name=f"{service}-{i}", start=now + i) for i in range(n)],
                             service=service)


def assert_isolated(srv, tid_a, req_a, tid_b, req_b, stage):
    for tenant, tid, req, other, other_tid in ((A, tid_a, req_a, B, tid_b), (B, tid_b, req_b, A, tid_a)):
        for version in (1, 2):
            td = srv.fetch_trace(tid, tenant=tenant, version=version)
            assert td is not None, f"{stage}: {tenant} cannot read its own trace (v{version})"
            assert canon_spans(td)[0] == canon_spans(req)[0], f"{stage}: {tenant}'s trace differs"
            assert srv.fetch_trace(tid, tenant=other, version=version) is None, \
                f"{stage}: {other} can read {tenant}'s trace (v{version})"
            assert srv.fetch_trace(other_tid, tenant=other, version=version) is not None
        r = srv.get(f"/api/traces/{tid.hex()}")
        assert r.status_code == 401, f"{stage}: read without X-Scope-OrgID -> {r.status_code}"
        r = srv.get(f"/api/v2/traces/{tid.hex()}")
        assert r.status_code == 401, f"{stage}: v2 read without X-Scope-OrgID -> {r.status_code}"


def test_tenants_are_isolated(weft_factory):
    srv = weft_factory("--multitenancy", "--block-max-age", "1")
    tid_a, req_a = one_trace("svc-a")
    tid_b, req_b = one_trace("svc-b", 4)

    r = srv.post_otlp(req_a)
    assert r.status_code == 401, f"write without X-Scope-OrgID -> {r.status_code} {r.content[:200]!r}"
    with pytest.raises(grpc.RpcError) as e:
        srv.grpc_export(req_a)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value
    assert srv.fetch_trace(tid_a, tenant=A) is None, "a refused write was stored"

    srv.send(req_a, tenant=A)
    srv.grpc_export(req_b, tenant=B)
    assert_isolated(srv, tid_a, req_a, tid_b, req_b, "from the head")

    wait_for_block_spans(srv, 3, tenant=A)
    wait_for_block_spans(srv, 4, tenant=B)
    assert [m["tenant"] for _, m in block_metas(srv.data_dir, A)] == [A]
    assert [m["tenant"] for _, m in block_metas(srv.data_dir, B)] == [B]
    assert not block_metas(srv.data_dir, "single-tenant")
    assert_isolated(srv, tid_a, req_a, tid_b, req_b, "from blocks")

    assert srv.metric("weft_spans_received_total", tenant=A) == 3
    assert srv.metric("weft_spans_received_total", tenant=B) == 4

    srv.restart()
    assert_isolated(srv, tid_a, req_a, tid_b, req_b, "after a restart")


def test_same_trace_id_in_two_tenants(weft_factory):
    srv = weft_factory("--multitenancy")
    tid = new_trace_id()
    now = time.time_ns()
    req_a = make_request([make_span(tid, name="a-only", start=now)], service="a")
    req_b = make_request([make_span(tid, name="b-only", start=now)], service="b")
    srv.send(req_a, tenant=A)
    srv.send(req_b, tenant=B, json_body=True)
    got_a = canon_spans(srv.fetch_trace(tid, tenant=A))[0]
    got_b = canon_spans(srv.fetch_trace(tid, tenant=B))[0]
    assert got_a == canon_spans(req_a)[0]
    assert got_b == canon_spans(req_b)[0]


def test_single_tenant_ignores_header(weft_factory):
    """With multi-tenancy off, everything is `single-tenant`, whatever the header says."""
    srv = weft_factory("--block-max-age", "1")
    tid, req = one_trace("svc")
    srv.send(req, tenant="someone")
    assert srv.fetch_trace(tid) is not None
    assert srv.fetch_trace(tid, tenant="someone-else") is not None
    assert srv.metric("weft_spans_received_total", tenant="single-tenant") == 3
    wait_for_block_spans(srv, 3, tenant="single-tenant")


def test_bearer_tokens_map_to_tenants_and_guard_metrics(weft_factory, tmp_path):
    """Tokens decide the tenant; the scheme is case-insensitive (`BEARER` was refused);
    /metrics needs a token too and shows only that token's tenant (it showed every tenant's
    name and counts to anyone)."""
    cfg = tmp_path / "weft.yaml"
    cfg.write_text('auth_tokens:\n  "tok-a": "team-a"\n  "tok-b": "team-b"\n')
    srv = weft_factory("--config", str(cfg))
    req = make_request([make_span(new_trace_id(), start=time.time_ns())])
    assert srv.post_otlp(req).status_code == 401
    for i, scheme in enumerate(["Bearer", "bearer", "BEARER"]):
        tok = "tok-a" if i % 2 == 0 else "tok-b"
        r = srv.post_otlp(req, headers={"Authorization": f"{scheme} {tok}"})
        assert r.status_code == 200, (scheme, r.status_code, r.text)
    assert srv.get("/metrics").status_code == 401
    text = srv.get("/metrics", headers={"Authorization": "Bearer tok-a"}).text
    assert 'tenant="team-a"' in text
    assert "team-b" not in text, "another tenant is visible in /metrics"
    assert "weft_wal_bytes_written_total" in text


def test_one_tenants_heavy_queries_do_not_hold_up_anothers(weft_factory, weft_bin):
    """Tenant A fills the only query slot (`--max-concurrent-queries 1`) and the only core of
    the query workers with heavy metrics queries, more queued behind. Tenant B's small query
    must not wait for them: a tenant running no query is lent a slot, and the workers hand a
    freed core to the tenant holding the fewest. Before, B's query waited in line until A's
    first query ended."""
    srv = weft_factory("--multitenancy", "--max-concurrent-queries", "1", "--query-parallelism", "1")
    subprocess.run([str(weft_bin), "loadgen", "--endpoint", srv.grpc_target, "--realistic", "--tenant", A,
                    "--max-spans", "200000", "--seed", "7", "--duration", "300"],
                   check=True, capture_output=True, timeout=300)
    tid_b, req_b = one_trace("light", 5)
    srv.send(req_b, tenant=B)
    now = int(time.time())
    heavy = {"q": '{ resource.service.name != "x" } >> { status = error } | rate() by (resource.service.name)',
             "start": now - 7200, "end": now + 60, "step": "60"}
    light = {"q": "{ } | count_over_time() by (resource.service.name)", "start": now - 600, "end": now + 60,
             "step": "60"}

    def query(tenant: str, params: dict) -> tuple[float, dict]:
        r = requests.get(f"{srv.api}/api/metrics/query_range", params=params,
                         headers={"X-Scope-OrgID": tenant}, timeout=120)
        assert r.status_code == 200, f"{tenant}: {r.status_code} {r.text[:300]}"
        return time.monotonic(), r.json()

    t0 = time.monotonic()
    _, alone = query(A, heavy)
    heavy_alone = time.monotonic() - t0
    assert alone["series"], "the heavy query finds A's spans"
    t0 = time.monotonic()
    _, b_alone = query(B, light)
    light_alone = time.monotonic() - t0
    assert [s["samples"] for s in b_alone["series"]] and \
        sum(float(x["value"]) for s in b_alone["series"] for x in s["samples"]) == 5, b_alone
    # The comparison below needs A's query to last well beyond B's.
    assert heavy_alone > 5 * light_alone, (heavy_alone, light_alone)

    with ThreadPoolExecutor(4) as pool:
        a_done = [pool.submit(query, A, heavy) for _ in range(3)]
        time.sleep(heavy_alone / 4)
        assert not any(f.done() for f in a_done), "A's queries ended before B's began: too little data"
        b_done, b = query(B, light)
        a_first = min(f.result()[0] for f in a_done)
    assert b == b_alone, "B's answer is the same under A's load"
    assert b_done < a_first, (
        f"B's query ended {b_done - a_first:.2f} s after A's first heavy query "
        f"(A alone {heavy_alone:.2f} s, B alone {light_alone:.3f} s): it waited for A's queries")
