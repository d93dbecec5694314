"""weft as a cluster on a real Kafka broker (scripts/kafka-server.sh): distributors, block builders,
queriers and a compactor as separate processes (ADR 0008).

- The distributor's records, read back with kafka-python (a client nobody here wrote): every
  acknowledged span is in exactly one record, in the partition its trace ID routes to, under the
  request's own resource and scope; one record per partition per request; keys name the tenant and
  a header names the record format (spec/kafka-record.md). With --kafka-compression none, lz4
  and zstd, read back by kafka-python's own decompressors; and records kafka-python's producer
  wrote in gzip, LZ4 and zstd batches are read by a block builder and a live store.
- The whole write path: distributor → Kafka → two block builders (two partitions each) → blocks
  → a querier, with block builders killed with SIGKILL and restarted under load, and a
  compactor merging their blocks: every acknowledged span is readable exactly once.
- The read path split (issue 47): a query-frontend, its queriers and live stores answer every
  query form of Tempo's, Jaeger's and Zipkin's APIs as the single binary does."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest
import requests
import warnings

import xxhash

with warnings.catch_warnings():
    # kafka-python 3.0 reads its protocol schemas through a deprecated importlib call.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import random
import time

from otlpdata import make_request, make_span, new_trace_id
from weftlib import free_ports, start_sharing, wait_for

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4


class Broker(str):
    """The address weft's roles use: the broker's SASL_SSL listener. They connect over TLS (the
    test CA) and authenticate with SCRAM-SHA-512 (`weft_args`), as on a managed Kafka. The test's
    own Kafka tools (kafka-python) use the plaintext listener, `plain`."""
    plain: str
    tls_dir: Path
    ssl: str
    weft_args: list[str]


def _kafka_flags(brokers: str) -> list[str]:
    return ["--kafka-brokers", str(brokers), *getattr(brokers, "weft_args", [])]


def _plain(brokers: str) -> str:
    return getattr(brokers, "plain", brokers)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory) -> Broker:
    d = tmp_path_factory.mktemp("kafka")
    port = free_ports(1)[0]
    r = subprocess.run(["bash", str(REPO / "scripts" / "kafka-server.sh"), "start", str(d), str(port)],
                       capture_output=True, text=True, timeout=180,
                       env={**os.environ, "KAFKA_SERVER_OWNER_PID": str(os.getpid()), "KAFKA_SERVER_SECURE": "1"})
    assert r.returncode == 0, f"could not start Kafka (scripts/kafka-server.sh):\n{r.stderr[-3000:]}"
    env = dict(line.split("=", 1) for line in r.stdout.split())
    brokers = Broker(env["WEFT_KAFKA_SASL_SSL_BROKERS"])
    brokers.plain = env["WEFT_KAFKA_BROKERS"]
    brokers.ssl = env["WEFT_KAFKA_SSL_BROKERS"]
    brokers.tls_dir = Path(env["WEFT_KAFKA_TLS_DIR"])
    (brokers.tls_dir / "password").write_text("weft-secret\n")
    brokers.weft_args = ["--kafka-tls", "--kafka-tls-ca", str(brokers.tls_dir / "ca.pem"),
                         "--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-username", "weft",
                         "--kafka-sasl-password-file", str(brokers.tls_dir / "password")]
    yield brokers
    subprocess.run(["bash", str(REPO / "scripts" / "kafka-server.sh"), "stop", str(d)],
                   capture_output=True, timeout=60)


def _partition(trace_id: bytes, n: int = PARTITIONS) -> int:
    return xxhash.xxh3_64_intdigest(trace_id) % n


def _records(brokers: str, topic: str) -> list:
    consumer = KafkaConsumer(bootstrap_servers=_plain(brokers), enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    assert len(parts) == PARTITIONS, f"topic {topic} has partitions {parts}"
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    out = []
    while any(consumer.position(p) < ends[p] for p in parts):
        for recs in consumer.poll(timeout_ms=1000).values():
            out.extend(recs)
    consumer.close()
    return out


def _distributor(weft_factory, brokers: str, topic: str, *extra: str, name: str | None = None):
    return weft_factory("--target", "distributor", *_kafka_flags(brokers), "--kafka-topic", topic,
                        "--kafka-partitions", str(PARTITIONS), *extra, name=name or f"distributor-{topic}")


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_every_acknowledged_span_is_in_one_record_of_its_partition(weft_factory, kafka, compression):
    # kafka-python decompresses LZ4 and zstd batches with the lz4 and zstandard packages (C
    # libraries of their own), so compressed batches are read back by code weft did not write.
    topic = f"spans-{compression}-{uuid.uuid4().hex[:8]}"
    d = _distributor(weft_factory, kafka, topic, "--multitenancy", "--kafka-compression", compression)
    assert d.get("/ready").status_code == 200
    r = d.get("/api/search", params={"q": "{}"})
    assert r.status_code == 404, "a distributor answers no queries"

    sent: dict[bytes, tuple[str, str]] = {}  # span id -> (tenant, service)
    requests_partitions = []
    for i in range(12):
        # Several traces per request, two resources: the request is split by partition.
        traces = [new_trace_id() for _ in range(1 + i % 5)]
        spans_a = [make_span(t, name=f"a{i}.{k}", start=1_700_000_000_000_000_000 + k, attributes={"k": k})
                   for k, t in enumerate(traces) for _ in range(2)]
        spans_b = [make_span(t, name=f"b{i}", start=1_700_000_000_000_000_000) for t in traces[:1]]
        req = make_request(spans_a, service=f"svc-a{i}")
        req.resource_spans.extend(make_request(spans_b, service=f"svc-b{i}").resource_spans)
        tenant = "acme" if i % 2 else "globex"
        if i % 3 == 0:
            d.grpc_export(req, tenant=tenant)
        else:
            d.send(req, tenant=tenant, json_body=(i % 3 == 2))
        for s in spans_a:
            sent[bytes(s.span_id)] = (tenant, f"svc-a{i}")
        for s in spans_b:
            sent[bytes(s.span_id)] = (tenant, f"svc-b{i}")
        requests_partitions.append(len({_partition(t) for t in traces}))

    records = _records(kafka, topic)
    assert len(records) == sum(requests_partitions), "one record per partition per request"
    seen = Counter()
    for rec in records:
        assert dict(rec.headers).get("weft-format") == b"1", rec.headers
        tenant = rec.key.decode()
        msg = ExportTraceServiceRequest.FromString(rec.value)
        assert msg.resource_spans, "no empty records"
        for rs in msg.resource_spans:
            service = next(a.value.string_value for a in rs.resource.attributes if a.key == "service.name")
            assert rs.scope_spans and all(ss.scope.name == "weft.tests" for ss in rs.scope_spans)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    assert _partition(bytes(s.trace_id)) == rec.partition, "span in the wrong partition"
                    assert sent[bytes(s.span_id)] == (tenant, service), "span under another tenant or resource"
                    seen[bytes(s.span_id)] += 1
    assert set(seen) == set(sent), f"{len(set(sent) - set(seen))} acknowledged spans missing from Kafka"
    assert max(seen.values()) == 1, "a span written twice"

    # Zipkin in: converted once at the receiver, then routed the same way.
    tid = "5b8efbf5035f4b5e8f6e2b272b6a9001"
    z = [{"traceId": tid, "id": "0000000000000abc", "name": "get /", "timestamp": 1_700_000_000_000_000,
          "duration": 5, "localEndpoint": {"serviceName": "zipkin-svc"}}]
    r = requests.post(f"{d.zipkin}/api/v2/spans", data=json.dumps(z),
                      headers={"Content-Type": "application/json", "X-Scope-OrgID": "acme"})
    assert r.status_code == 202, r.text
    zrecs = [rec for rec in _records(kafka, topic) if b"zipkin-svc" in rec.value]
    assert len(zrecs) == 1 and zrecs[0].partition == _partition(bytes.fromhex(tid))

    assert d.metric("weft_kafka_records_total") == len(records) + 1
    assert d.metric("weft_spans_received_total", tenant="acme") + d.metric(
        "weft_spans_received_total", tenant="globex") == len(sent) + 1
    assert d.metric("weft_distributor_partitions") == PARTITIONS


def test_bad_requests_are_refused_and_nothing_is_written(weft_factory, kafka):
    topic = f"bad-{uuid.uuid4().hex[:8]}"
    d = _distributor(weft_factory, kafka, topic)
    r = d.post_otlp(b"\x0a\x05\x0a\x03\x0a", headers={"X-Scope-OrgID": "acme"})
    assert r.status_code == 400, r.text
    assert "invalid" in r.text.lower()
    span = make_span(new_trace_id(), start=1)
    span.trace_id = b"\x01" * 15
    r = d.post_otlp(make_request([span]))
    assert r.status_code == 400 and "trace" in r.text.lower(), r.text
    assert _records(kafka, topic) == []
    assert d.metric("weft_spans_refused_total", reason="invalid") >= 2


def test_a_distributor_without_a_reachable_broker_does_not_start(weft_factory):
    port = free_ports(1)[0]
    for args, names in [
        (["--kafka-brokers", f"127.0.0.1:{port}"], f"127.0.0.1:{port}"),
        ([], "--kafka-brokers"),
    ]:
        srv = weft_factory("--target", "distributor", *args, start=False, name=f"no-kafka-{len(args)}")
        r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=60, env=srv.process_env())
        assert r.returncode != 0 and names in r.stderr, r.stderr[-2000:]


def test_kafka_security_mistakes_stop_the_start_naming_the_cause(weft_factory, kafka, tmp_path):
    """A wrong password, an untrusted CA, a missing client certificate, an expired token or a
    plaintext port each stop a distributor at start with an error that names the cause, and
    the password appears in no output."""
    tls = kafka.tls_dir
    expired = tmp_path / "expired.jwt"
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()  # noqa: E731
    expired.write_text(b64(b'{"alg":"none"}') + "." + b64(json.dumps(
        {"sub": "weft", "iat": int(time.time()) - 600, "exp": int(time.time()) - 300}).encode()) + ".")
    scram = ["--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-username", "weft"]
    cases = [
        ("wrong-password", [kafka, "--kafka-tls", "--kafka-tls-ca", tls / "ca.pem", *scram,
                            "--kafka-sasl-password", "not-the-secret"],
         ["SASL SCRAM-SHA-512 authentication with Kafka broker", "invalid credentials"]),
        ("untrusted-ca", [kafka, "--kafka-tls", "--kafka-tls-ca", tls / "other-ca.pem", *scram,
                          "--kafka-sasl-password", "weft-secret"],
         ["TLS handshake with Kafka broker", "not signed by the CAs of", "other-ca.pem"]),
        ("no-client-cert", [kafka.ssl, "--kafka-tls", "--kafka-tls-ca", tls / "ca.pem"],
         ["refused this client's certificate or wants one"]),
        ("expired-token", [kafka, "--kafka-tls", "--kafka-tls-ca", tls / "ca.pem",
                           "--kafka-sasl-mechanism", "oauthbearer", "--kafka-sasl-token-file", expired],
         ["OAUTHBEARER", "expired", str(expired)]),
        ("tls-to-plaintext", [kafka.plain, "--kafka-tls", "--kafka-tls-ca", tls / "ca.pem"],
         ["is this port a TLS listener?"]),
        ("cert-without-key", [kafka.ssl, "--kafka-tls", "--kafka-tls-cert", tls / "client.pem"],
         ["kafka_tls_cert and kafka_tls_key go together"]),
    ]
    for name, (brokers, *rest), wants in cases:
        srv = weft_factory("--target", "distributor", "--kafka-brokers", str(brokers), *map(str, rest),
                           start=False, name=f"insecure-{name}")
        r = subprocess.run(srv.command(), capture_output=True, text=True, timeout=60, env=srv.process_env())
        out = r.stdout + r.stderr
        assert r.returncode != 0, f"{name}: started\n{out[-2000:]}"
        for want in wants:
            assert want in out, f"{name}: {want!r} not in\n{out[-2000:]}"
        assert "weft-secret" not in out and "not-the-secret" not in out, f"{name}: a password was printed"
    # With the right client certificate the mTLS listener takes spans (the other tests use SCRAM).
    d = weft_factory("--target", "distributor", "--kafka-brokers", kafka.ssl, "--kafka-tls",
                     "--kafka-tls-ca", str(tls / "ca.pem"), "--kafka-tls-cert", str(tls / "client.pem"),
                     "--kafka-tls-key", str(tls / "client-key.pem"), "--kafka-topic", "mtls-topic",
                     "--kafka-partitions", str(PARTITIONS), name="mtls-distributor")
    tid = new_trace_id()
    assert d.post_otlp(make_request([make_span(tid, start=time.time_ns())])).status_code == 200
    assert any(bytes(tid) in rec.value for rec in _records(kafka, "mtls-topic"))



def _span_ids(querier, tid: bytes, tenant: str) -> list[bytes]:
    t = querier.fetch_trace(tid, tenant=tenant)
    if t is None:
        return []
    return [bytes(s.span_id) for rs in t.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _metas(data, storage_args) -> list[dict]:
    root = data if not storage_args else data / "data" / "weft" / "cluster"
    # A folder with the retirement marker is a retired block even while its meta.json is
    # still there (the store failed between the two).
    return [json.loads(p.read_text()) for p in root.glob("blocks/*/*/meta.json")
            if not (p.parent / "retired").exists()]


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_acknowledged_spans_survive_crashes_exactly_once(weft_factory, kafka, tmp_path, storage):
    """The issue's cluster test: 2 distributors, 2 block builders, a querier and a compactor as
    separate processes. Under load, one at a time: a block builder is killed with SIGKILL
    (three times), a distributor is killed with SIGKILL, the compactor is killed with SIGKILL,
    and (on S3) the object store is stopped for a few seconds. Afterwards every span that got a
    success response is readable exactly once through the querier, search finds it, and the
    blocks hold no duplicates."""
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "bucket"
    storage_args: tuple[str, ...] = ()
    s3_dir = s3_port = None
    if storage == "s3":
        s3_dir, s3_port = tmp_path / "s3", free_ports(1)[0]
        _s3("start", s3_dir, s3_port)
        storage_args = ("--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{s3_port}", "--s3-bucket", "weft",
                        "--s3-access-key-id", "weft", "--s3-secret-access-key", "weft-secret",
                        "--s3-prefix", "cluster")
        data = s3_dir
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
    distributors = [
        weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     "--multitenancy", name=f"distributor-{i}")
        for i in range(2)
    ]
    builders = [
        start_sharing(weft_factory, f"builder-{i}", "--target", "block-builder", *kafka_args, *storage_args,
                "--block-builder-partitions", parts, "--block-max-age", "0.5",
                data_dir=data if storage == "local" else tmp_path / f"b{i}")
        for i, parts in enumerate(["0,1", "2,3"])
    ]
    # Local storage: every process on one data directory. S3: each its own, blocks in the bucket.
    shared = tmp_path / "shared" if storage == "s3" else data
    querier = start_sharing(weft_factory, "querier", "--target", "querier", "--blocklist-poll", "0.2",
                      "--multitenancy", *kafka_args, *storage_args, data_dir=shared)
    compactor = start_sharing(weft_factory, "compactor", "--target", "compactor", "--compaction-interval", "0.5",
                        "--compaction-max-inputs", "2", *storage_args, data_dir=shared)
    assert builders[0].get("/ready").status_code == 200

    sent: dict[tuple[str, bytes], set[bytes]] = {}
    rng = random.Random(7)

    def send_round(n: int):
        for i in range(n):
            tenant = rng.choice(["acme", "globex"])
            traces = [new_trace_id() for _ in range(rng.randint(1, 4))]
            spans = [make_span(t, name=f"op{k}", start=time.time_ns() - 10**9, attributes={"round": n})
                     for t in traces for k in range(rng.randint(1, 3))]
            d = distributors[i % 2]
            if not d.running:
                d = distributors[(i + 1) % 2]
            if i % 3:
                d.send(make_request(spans, service=f"svc-{tenant}"), tenant=tenant)
            else:
                d.grpc_export(make_request(spans, service=f"svc-{tenant}"), tenant=tenant)
            for s in spans:
                sent.setdefault((tenant, bytes(s.trace_id)), set()).add(bytes(s.span_id))

    send_round(40)
    for round_no in range(3):
        victim = builders[round_no % 2]
        send_round(20)
        time.sleep(rng.uniform(0.2, 1.0))
        victim.kill9()
        send_round(20)
        victim.start()
    distributors[0].kill9()
    send_round(20)
    distributors[0].start()
    compactor.kill9()
    send_round(20)
    compactor.start()
    if storage == "s3":
        _s3("stop", s3_dir)
        send_round(20)  # acknowledged by Kafka; blocks wait for the store
        wait_for(lambda: sum(b.metric("weft_block_write_errors_total") or 0 for b in builders) >= 1, 30,
                 "a block write to fail while the store is down", 0.3)
        time.sleep(2)
        _s3("start", s3_dir, s3_port)
    send_round(20)

    def missing():
        return [k for k, ids in sent.items() if set(_span_ids(querier, k[1], k[0])) != ids]
    wait_for(lambda: not missing(), 120, "every acknowledged trace through the querier", 0.3)
    for (tenant, tid), ids in sent.items():
        got = _span_ids(querier, tid, tenant)
        assert sorted(got) == sorted(ids), f"trace {tid.hex()} of {tenant}: {len(got)} spans, sent {len(ids)}"

    # No span is in two live blocks: count spans over the metas not replaced by a compaction.
    def live_metas():
        metas = _metas(data, storage_args)
        replaced = {i for m in metas for i in m.get("compacted_from", [])}
        return [m for m in metas if m["block_id"] not in replaced]
    metas = live_metas()
    assert metas, "the block builders wrote no blocks"
    assert all(m["kafka"] for m in metas), "every block records the Kafka offsets it covers"
    for tenant in ("acme", "globex"):
        stored = sum(m["span_count"] for m in metas if m["tenant"] == tenant)
        want = sum(len(ids) for (t, _), ids in sent.items() if t == tenant)
        assert stored == want, f"{tenant}: blocks hold {stored} spans, {want} were acknowledged"
    assert sum(b.metric("weft_block_builder_records_refused_total", partition=p) or 0
               for b, parts in zip(builders, ["01", "23"]) for p in parts) == 0

    # Span metrics count each acknowledged span once over the live store and the blocks.
    for tenant in ("acme", "globex"):
        want = sum(len(ids) for (t, _), ids in sent.items() if t == tenant)
        assert _count_spans(querier, tenant) == want, f"{tenant}: span count over live store and blocks"

    # Search finds them, from the querier, per tenant.
    r = querier.get("/api/search", params={"q": '{ resource.service.name = "svc-acme" }', "limit": 1000,
                                           "start": int(time.time()) - 3600, "end": int(time.time()) + 60},
                    headers={"X-Scope-OrgID": "acme"})
    assert r.status_code == 200, r.text
    found = {t["traceID"].rjust(32, "0") for t in r.json()["traces"]}
    assert found == {tid.hex() for (t, tid) in sent if t == "acme"}

    # The compactor merged the builders' blocks, keeping the offsets of every partition.
    wait_for(lambda: (compactor.metric("weft_compactions_total") or 0) >= 1, 90, "a compaction", 0.3)
    wait_for(lambda: any(m.get("compacted_from") for m in live_metas()), 90, "a merged block", 0.3)
    for (tenant, tid), ids in sent.items():
        got = _span_ids(querier, tid, tenant)
        assert sorted(got) == sorted(ids), f"after compaction, trace {tid.hex()} of {tenant}"


def _s3(cmd: str, d, port=None):
    args = ["bash", str(REPO / "scripts" / "s3-server.sh"), cmd, str(d)] + ([str(port)] if port else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "S3_SERVER_OWNER_PID": str(os.getpid())})
    assert r.returncode == 0, f"scripts/s3-server.sh {cmd} failed:\n{r.stderr[-3000:]}"


def _count_spans(querier, tenant: str) -> float:
    now = int(time.time())
    r = querier.get("/api/metrics/query", params={"q": "{ } | count_over_time()", "start": now - 3600,
                                                  "end": now + 60}, headers={"X-Scope-OrgID": tenant})
    assert r.status_code == 200, r.text
    series = r.json()["series"]
    return sum(s["value"] for s in series)


def test_a_querier_sees_spans_within_a_second_of_their_ack(weft_factory, kafka, tmp_path):
    """The live store: a querier with --kafka-brokers tails the topic, so an acknowledged span is
    found by trace ID, search and metrics within a second, long before its block is written; once
    the block is listed, it is counted once, not twice."""
    topic = f"live-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "shared"
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
    d = weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     name="live-distributor")
    querier = start_sharing(weft_factory, "live-querier", "--target", "querier", "--blocklist-poll", "0.2",
                      *kafka_args, data_dir=data)
    builder = start_sharing(weft_factory, "live-builder", "--target", "block-builder", *kafka_args,
                      "--block-max-age", "4", data_dir=data)
    sent = 0
    worst = 0.0
    for i in range(10):
        tid = new_trace_id()
        spans = [make_span(tid, name=f"live-{i}-{k}", start=time.time_ns() - 10**8) for k in range(3)]
        d.send(make_request(spans, service="live-svc"))
        acked = time.monotonic()
        got = _span_ids(querier, tid, "single-tenant")
        while len(got) < 3 and time.monotonic() - acked < 5:
            time.sleep(0.02)
            got = _span_ids(querier, tid, "single-tenant")
        seen = time.monotonic() - acked
        worst = max(worst, seen)
        assert sorted(got) == sorted(bytes(s.span_id) for s in spans), f"trace {i} not visible after {seen:.2f}s"
        sent += 3
    assert worst < 1.0, f"a span became visible {worst:.2f}s after its acknowledgement"
    assert not list(data.glob("blocks/*/*/meta.json")), "the test needs spans not yet in blocks"
    now = int(time.time())
    r = querier.get("/api/search", params={"q": '{ resource.service.name = "live-svc" }', "limit": 100,
                                           "start": now - 3600, "end": now + 60})
    assert r.status_code == 200 and len(r.json()["traces"]) == 10, r.text[:500]
    assert _count_spans(querier, "single-tenant") == sent

    # The block builder writes its block; the querier lists it and drops its live copy: each
    # span is still counted once.
    wait_for(lambda: list(data.glob("blocks/*/*/meta.json")), 30, "the block", 0.3)
    wait_for(lambda: (querier.metric("weft_blocks") or 0) >= 1, 90, "the querier to list it", 0.3)
    for _ in range(10):
        assert _count_spans(querier, "single-tenant") == sent
        time.sleep(0.2)
    assert builder.metric("weft_block_builder_committed_offset", partition="0") is not None


def test_block_builders_read_records_that_kafka_python_wrote_in_every_codec(weft_factory, kafka, tmp_path):
    """The record format is the contract (spec/kafka-record.md), not weft's producer: records
    written by kafka-python's own producer, in batches of several records compressed with gzip,
    snappy (in the xerial framing Kafka's Java producer writes), LZ4 and zstd by libraries weft
    does not use (zlib, python-snappy, the C lz4 and zstandard packages), are read by a block
    builder and a querier's live store, and every span is found exactly once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaProducer
        from kafka.admin import KafkaAdminClient, NewTopic
    topic = f"foreign-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=_plain(kafka))
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    admin.close()
    sent: dict[bytes, tuple[str, list[bytes]]] = {}  # trace id -> (tenant, span ids)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        producer = KafkaProducer(bootstrap_servers=_plain(kafka), compression_type=codec, linger_ms=200,
                                 acks="all")
        for i in range(6):
            tid = new_trace_id()
            tenant = "acme" if i % 2 else "globex"
            spans = [make_span(tid, name=f"{codec}-{i}-{k}", start=time.time_ns() - 10**9) for k in range(4)]
            producer.send(topic, key=tenant.encode(), value=make_request(spans, service=f"svc-{codec}")
                          .SerializeToString(), headers=[("weft-format", b"1")], partition=_partition(tid))
            sent[tid] = (tenant, sorted(bytes(s.span_id) for s in spans))
        producer.flush()
        producer.close()

    data = tmp_path / "shared"
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}",
                  "--multitenancy")
    live = weft_factory("--target", "querier", *kafka_args, name="foreign-live")
    for tid, (tenant, span_ids) in sent.items():
        assert sorted(_span_ids(live, tid, tenant)) == span_ids, "the live store misread a record"
    start_sharing(weft_factory, "foreign-builder", "--target", "block-builder", *kafka_args,
                  "--block-max-age", "1", data_dir=data)
    querier = start_sharing(weft_factory, "foreign-querier", "--target", "querier", "--blocklist-poll", "0.2",
                            "--multitenancy", data_dir=data)
    wait_for(lambda: all(_span_ids(querier, tid, tenant) for tid, (tenant, _) in sent.items()), 60,
             "every trace in blocks", 0.3)
    for tid, (tenant, span_ids) in sent.items():
        assert sorted(_span_ids(querier, tid, tenant)) == span_ids, "a block builder misread a record"


class _Cluster:
    """A cluster seen as one server by the single binary's end-to-end checks: spans go to the
    distributor, queries to the querier."""

    def __init__(self, distributor, querier):
        self.distributor, self.querier = distributor, querier

    @property
    def otlp_url(self) -> str:
        return self.distributor.otlp_url

    def get(self, *args, **kw):
        return self.querier.get(*args, **kw)


def test_the_single_binary_search_tags_metrics_and_graph_checks_pass_on_the_cluster(weft_factory, kafka, tmp_path):
    """test_search.py's scene, sent by the OpenTelemetry SDK's exporter to a distributor, and its
    checks (TraceQL searches, tags, metrics, the service graph) answered by a querier: first from
    the live store, then from the blocks a block builder wrote."""
    from test_search import check_searches, check_service_graph, check_tags_and_metrics, send_scene

    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "shared"
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
    d = weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     name="e2e-distributor")
    querier = start_sharing(weft_factory, "e2e-querier", "--target", "querier", "--blocklist-poll", "0.2",
                            *kafka_args, data_dir=data)
    cluster = _Cluster(d, querier)
    ids = send_scene(cluster)
    check_searches(cluster, ids, "cluster, from the live store")
    check_tags_and_metrics(cluster, ids)
    check_service_graph(cluster, "cluster, from the live store")

    builder = start_sharing(weft_factory, "e2e-builder", "--target", "block-builder", *kafka_args,
                            "--block-max-age", "1", data_dir=data)
    wait_for(lambda: (builder.metric("weft_block_spans_written_total") or 0) >= 5, 60, "the scene's blocks")
    wait_for(lambda: (querier.metric("weft_blocks") or 0) >= 1, 60, "the querier to list them")
    check_searches(cluster, ids, "cluster, from blocks")
    check_tags_and_metrics(cluster, ids)
    check_service_graph(cluster, "cluster, from blocks")


@pytest.mark.parametrize("mode", ["peers-tail-kafka", "block-only-peers", "live-stores"])
def test_a_search_split_over_queriers_with_live_stores_answers_as_one_querier(weft_factory, kafka, tmp_path,
                                                                             mode):
    """A frontend and its queriers beside a querier alone: while a block builder cuts blocks out
    of what the live stores hold, every search answers the same traces in the same order on
    both, and span-local metrics, tag names and the service graph count every span once on
    both. Traces are split across Kafka rounds, so across blocks and between blocks and the
    live store. Either the frontend is a querier with --query-peers and every querier tails
    Kafka; or it is a query-frontend, the only one tailing Kafka, and its two queriers read
    blocks only (--querier-live-store false); or (`live-stores`) no querier tails Kafka: two
    live stores hold two partitions each, and a query-frontend asks them for the recent part
    of every query and three block-only queriers for the blocks."""
    peers_tail = mode == "peers-tail-kafka"
    topic = f"fe-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "shared"
    # The live-store cluster keeps its blocks in the S3-compatible server, as production does.
    storage: tuple[str, ...] = ()
    if mode == "live-stores":
        s3_dir, s3_port = tmp_path / "s3", free_ports(1)[0]
        _s3("start", s3_dir, s3_port)
        storage = ("--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{s3_port}", "--s3-bucket", "weft",
                   "--s3-access-key-id", "weft", "--s3-secret-access-key", "weft-secret", "--s3-prefix", "fe")
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}", *storage)
    d = weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     name="fe-distributor")
    builder = start_sharing(weft_factory, "fe-builder", "--target", "block-builder", *kafka_args,
                            "--block-max-age", "2", data_dir=data)
    # The single binary, sent the same requests: every answer of the cluster must be its answer.
    single = weft_factory(name="fe-single")

    def querier(name: str, *args: str):
        return start_sharing(weft_factory, name, "--target", "querier", "--blocklist-poll", "0.2", *kafka_args,
                             *args, data_dir=data)
    alone = querier("fe-alone")
    peers = [querier(f"fe-peer{i}", "--querier-live-store", str(peers_tail).lower())
             for i in range(3 if mode == "live-stores" else 2)]
    peer_list = ",".join(f"127.0.0.1:{p.http_port}" for p in peers)
    live_stores = []
    if peers_tail:
        frontend = querier("fe-frontend", "--query-peers", peer_list)
    elif mode == "block-only-peers":
        frontend = start_sharing(weft_factory, "fe-frontend", "--target", "query-frontend", "--blocklist-poll", "0.2",
                                 *kafka_args, "--query-peers", peer_list, data_dir=data)
    else:
        live_stores = [start_sharing(weft_factory, f"fe-live{i}", "--target", "live-store", "--blocklist-poll", "0.2",
                                     *kafka_args, "--live-store-partitions", parts, data_dir=data)
                       for i, parts in enumerate(["0,1", "2,3"])]
        frontend = start_sharing(weft_factory, "fe-frontend", "--target", "query-frontend", "--blocklist-poll", "0.2",
                                 *storage, "--query-peers", peer_list,
                                 "--live-stores", ",".join(f"127.0.0.1:{s.http_port}" for s in live_stores),
                                 data_dir=data)

    base = time.time_ns() - 600 * 10**9
    held: list = []
    n = 0
    for rnd in range(8):
        spans, held = held, []
        for _ in range(30):
            tid = new_trace_id()
            trace = [make_span(tid, name=f"op-{n % 5}-{k}", start=base + n * 10**6 + k, attributes={"k": k, "n": n})
                     for k in range(4)]
            if n % 2 == 0:
                spans += trace[:2]
                held += trace[2:]
            else:
                spans += trace
            n += 1
        d.send(make_request(spans, service=f"svc-{rnd % 3}"))
        single.send(make_request(spans, service=f"svc-{rnd % 3}"))
        time.sleep(0.7)
    d.send(make_request(held, service="svc-last"))
    single.send(make_request(held, service="svc-last"))
    now = int(time.time())
    searches = [
        {"q": "{ }", "limit": "1000", "spss": "10"},
        {"q": "{ }", "limit": "7"},
        {"q": '{ resource.service.name = "svc-1" }', "limit": "20"},
        {"q": "{ span.k = 3 }", "limit": "15"},
        {"q": "{ } | count() > 3", "limit": "100"},
        {"q": '{ name =~ "op-2-.*" } >> { span.k = 3 }', "limit": "50"},
    ]

    def answer(srv, params):
        r = srv.get("/api/search", params={**params, "start": now - 3600, "end": now + 60})
        assert r.status_code == 200, f"{srv.name}: {r.status_code} {r.text[:300]}"
        return r.json()["traces"]

    metrics = ["{ } | count_over_time() by (resource.service.name)", "{ span.k = 3 } | rate()",
               "{ span.k = 0 } && { span.k = 3 } | count_over_time()"]

    def lookups(srv):
        window = {"start": now - 3600, "end": now + 60}
        r = srv.get("/api/v2/search/tags", params=window)
        g = srv.get("/api/service-graph", params=window)
        assert r.status_code == 200 and g.status_code == 200, f"{srv.name}: {r.text[:200]} {g.text[:200]}"
        services = sorted((s["name"], s["spanCount"]) for s in g.json()["services"])
        # A graph of the traces a whole-trace filter matches (split as a search is).
        fg = srv.get("/api/service-graph", params={**window, "q": "{ span.k = 3 } && { span.k = 0 }"})
        assert fg.status_code == 200, f"{srv.name}: {fg.text[:200]}"
        filtered = sorted((s["name"], s["spanCount"]) for s in fg.json()["services"])
        assert filtered, f"{srv.name}: the filtered graph has services"
        # A filter that needs whole traces (traces split across rounds have 4 spans).
        v = srv.get("/api/v2/search/tag/resource.service.name/values", params={**window, "q": "{ } | count() > 3"})
        assert v.status_code == 200, f"{srv.name}: {v.text[:200]}"
        values = sorted(x["value"] for x in v.json()["tagValues"])
        return sorted((s["name"], sorted(s["tags"])) for s in r.json()["scopes"]), services, values, filtered

    def foreign(srv):
        """Jaeger's and Zipkin's searches: their own rules and order, split as Tempo's is."""
        us = {"start": (now - 3600) * 10**6, "end": (now + 60) * 10**6}
        j = requests.get(f"{srv.jaeger}/api/traces", params={"service": "svc-1", "limit": "12", **us}, timeout=30)
        z = requests.get(f"{srv.zipkin}/api/v2/traces", params={"serviceName": "svc-2", "limit": "9",
                                                                 "endTs": (now + 60) * 1000, "lookback": 3660_000},
                         timeout=30)
        assert j.status_code == 200 and z.status_code == 200, f"{srv.name}: {j.text[:200]} {z.text[:200]}"
        assert j.json()["data"] and z.json(), f"{srv.name}: Jaeger and Zipkin searches match traces"
        return (json.dumps(j.json()["data"], sort_keys=True),
                sorted(sorted(json.dumps(s, sort_keys=True) for s in t) for t in z.json()))

    def series(srv, q):
        r = srv.get("/api/metrics/query_range", params={"q": q, "start": base // 10**9 - 60,
                                                        "end": base // 10**9 + 60, "step": "10s"})
        assert r.status_code == 200, f"{srv.name}: {r.status_code} {r.text[:300]}"
        return sorted((repr(x.get("labels")), [(v.get("timestampMs"), v.get("value")) for v in x.get("samples", [])])
                      for x in r.json()["series"])

    wait_for(lambda: len(answer(alone, searches[0])) == n, 30, "every trace in the lone querier's answer", 0.3)
    # Blocks are cut while this runs (every 2 s): spans move from the live stores to blocks.
    # At least two rounds, however slow the machine.
    deadline = time.monotonic() + 8
    rounds = 0
    while time.monotonic() < deadline or rounds < 2:
        for params in searches:
            want = answer(alone, params)
            got = answer(frontend, params)
            if got != want:
                # The two queriers read at different moments; ask both again once.
                want, got = answer(alone, params), answer(frontend, params)
            assert got == want, f"{params}: frontend {len(got)} traces, alone {len(want)}\n{got[:2]}\n{want[:2]}"
        for q in metrics:
            want, got = series(alone, q), series(frontend, q)
            if got != want:
                want, got = series(alone, q), series(frontend, q)
            # Every span counted once: as many as were sent, on both.
            assert got == want, f"{q}: frontend {got}\nalone {want}"
        want, got = lookups(alone), lookups(frontend)
        if got != want:
            want, got = lookups(alone), lookups(frontend)
        assert got == want, f"tag names and graph services: frontend {got}\nalone {want}"
        want, got = foreign(alone), foreign(frontend)
        if got != want:
            want, got = foreign(alone), foreign(frontend)
        assert got == want, f"Jaeger and Zipkin searches: frontend {str(got)[:600]}\nalone {str(want)[:600]}"
        rounds += 1
    assert rounds >= 2
    assert len(answer(frontend, searches[0])) == n
    total = sum(v for _, samples in series(frontend, metrics[0]) for _, v in samples)
    assert total == 4 * n, f"every span counted once: {total} of {4 * n}"
    assert sum(c for _, c in lookups(frontend)[1]) == 4 * n, "the graph counts every span once"
    assert (frontend.metric("weft_query_jobs_total", outcome="sent") or 0) > 0
    assert (builder.metric("weft_blocks_written_total") or 0) > 0, "blocks were written while the searches ran"
    # The single binary gives every answer the cluster gives: searches (the same traces in the
    # same order), metrics, tag names, the service graph, and traces by ID.
    for params in searches:
        assert answer(frontend, params) == answer(single, params), f"single binary: {params}"
    for q in metrics:
        assert series(frontend, q) == series(single, q), f"single binary: {q}"
    assert lookups(frontend) == lookups(single), "single binary: tag names and graph services"
    for t in answer(single, searches[1]):
        tid = bytes.fromhex(t["traceID"].rjust(32, "0"))
        assert sorted(_span_ids(frontend, tid, None)) == sorted(_span_ids(single, tid, None))
        assert len(_span_ids(single, tid, None)) == 4
    # Jaeger's and Zipkin's trace searches (not split: with live stores, the frontend copies
    # only the recent traces that may match) give the single binary's traces.
    us = 10**6

    def jaeger_search(srv):
        r = requests.get(f"{srv.jaeger}/api/traces", params={
            "service": "svc-1", "limit": "500", "start": (now - 3600) * us, "end": (now + 60) * us}, timeout=60)
        assert r.status_code == 200, f"{srv.name}: {r.status_code} {r.text[:300]}"
        return sorted((t["traceID"], len(t["spans"])) for t in r.json()["data"])

    def zipkin_search(srv):
        r = requests.get(f"{srv.zipkin}/api/v2/traces", params={
            "serviceName": "svc-2", "limit": "500", "endTs": (now + 60) * 1000, "lookback": 3600 * 1000}, timeout=60)
        assert r.status_code == 200, f"{srv.name}: {r.status_code} {r.text[:300]}"
        return sorted((t[0]["traceId"], len(t)) for t in r.json())

    got, want = jaeger_search(frontend), jaeger_search(single)
    assert got == want and want, f"Jaeger search: frontend {len(got)}, single binary {len(want)}"
    got, want = zipkin_search(frontend), zipkin_search(single)
    assert got == want and want, f"Zipkin search: frontend {len(got)}, single binary {len(want)}"
    if not peers_tail:
        assert all(p.metric("weft_query_jobs_total", outcome="served") for p in peers), "the peers answered jobs"
    if storage:
        assert not data.exists(), "roles that keep blocks in S3 and no WAL create no data directory"
    if live_stores:
        assert all(s.metric("weft_query_jobs_total", outcome="served") for s in live_stores), \
            "the live stores answered the recent parts"
        # Trace by ID through the frontend: its recent spans come from the live stores.
        r = frontend.get(f"/api/v2/traces/{answer(alone, searches[1])[0]['traceID']}")
        assert r.status_code == 200, r.text[:300]


def _without_job_counts(x):
    """An answer without what depends on how it was split (job counts, bytes read), and with
    tag value lists in one order (a union has none)."""
    if isinstance(x, dict):
        return {k: _without_job_counts(v) for k, v in x.items() if k not in ("metrics", "inspectedBytes")}
    if isinstance(x, list):
        out = [_without_job_counts(v) for v in x]
        if all(isinstance(v, str) for v in out) or all(isinstance(v, dict) and set(v) == {"type", "value"}
                                                        for v in out):
            out.sort(key=repr)
        return out
    return x


def _first_difference(a, b, at="") -> str:
    if type(a) is not type(b):
        return f"{at}: {str(a)[:300]} | {str(b)[:300]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{at}.{k}")
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{at}: {len(a)} items | {len(b)}: {str(a)[:300]} | {str(b)[:300]}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{at}[{i}]")
    return f"{at}: {str(a)[:300]} | {str(b)[:300]}"


def test_every_query_form_answers_on_the_cluster_as_on_the_single_binary(weft_factory, kafka, tmp_path):
    """The forms Grafana, Jaeger's and Zipkin's UIs and their users send, each answered by a
    query-frontend with three block-only queriers and two live stores (blocks in the
    S3-compatible server) and by the single binary sent the same spans: TraceQL searches of
    every kind at three limits, every metrics function (range and instant, exemplars
    included), tag names and values (v1, v2, scoped, filtered, without a window), traces by
    ID, the service graph, Jaeger's (v1 and v3) and Zipkin's query APIs, and Tempo's streaming gRPC API.
    Every answer is equal, but for its job counts. Traces are split across requests, so across
    blocks and between blocks and the live stores."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
    from test_tempo_streaming import PB, stream

    topic = f"forms-{uuid.uuid4().hex[:8]}"
    s3_dir, s3_port = tmp_path / "s3", free_ports(1)[0]
    _s3("start", s3_dir, s3_port)
    storage = ("--storage", "s3", "--s3-endpoint", f"http://127.0.0.1:{s3_port}", "--s3-bucket", "weft",
               "--s3-access-key-id", "weft", "--s3-secret-access-key", "weft-secret", "--s3-prefix", "forms")
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}", *storage)
    data = tmp_path / "shared"
    d = weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     name="forms-distributor")
    start_sharing(weft_factory, "forms-builder", "--target", "block-builder", *kafka_args, "--block-max-age", "3",
                  data_dir=data)
    single = weft_factory(name="forms-single")
    queriers = [start_sharing(weft_factory, f"forms-q{i}", "--target", "querier", "--blocklist-poll", "0.2",
                              *kafka_args, "--querier-live-store", "false", data_dir=data) for i in range(3)]
    lives = [start_sharing(weft_factory, f"forms-live{i}", "--target", "live-store", "--blocklist-poll", "0.2",
                           *kafka_args, "--live-store-partitions", parts, data_dir=data)
             for i, parts in enumerate(["0,1", "2,3"])]
    fe = start_sharing(weft_factory, "forms-frontend", "--target", "query-frontend", "--blocklist-poll", "0.2",
                       *storage, "--query-peers", ",".join(f"127.0.0.1:{q.http_port}" for q in queriers),
                       "--live-stores", ",".join(f"127.0.0.1:{s.http_port}" for s in lives), data_dir=data)

    # Traces of a frontend calling cart, db and auth (clients, some with a server span below),
    # with errors, durations from 10 µs to 3 s, and attributes of every type. A third of the
    # traces send half their spans one round later.
    rng = random.Random(7)
    base = time.time_ns() - 900 * 10**9
    services = ["frontend", "cart", "db", "auth"]
    held: list = []
    tids = []
    n = 0
    for _ in range(10):
        by_service: dict[str, list] = {s: [] for s in services}
        for s, sp in held:
            by_service[s].append(sp)
        held = []
        for _ in range(40):
            tid = new_trace_id()
            tids.append(tid)
            t0 = base + n * 7 * 10**8 + rng.randrange(10**6)
            root = make_span(tid, name=f"GET /r{n % 6}", kind=Span.SPAN_KIND_SERVER, start=t0,
                             end=t0 + rng.randrange(10**6, 3 * 10**9),
                             attributes={"http.status_code": rng.choice([200, 200, 404, 500]),
                                         "user.id": f"u{rng.randrange(30)}", "ratio": rng.random(),
                                         "cached": rng.random() < 0.5})
            if rng.random() < 0.2:
                root.status.code = Status.STATUS_CODE_ERROR
            spans = [("frontend", root)]
            for k in range(rng.randrange(1, 6)):
                svc = services[1 + k % 3]
                st = t0 + (k + 1) * 10**6
                c = make_span(tid, parent=root.span_id, name=f"{svc}.op{k % 3}", kind=Span.SPAN_KIND_CLIENT,
                              start=st, end=st + rng.randrange(10**5, 10**9), attributes={"k": k, "n": n})
                if rng.random() < 0.1:
                    c.status.code = Status.STATUS_CODE_ERROR
                spans.append((svc, c))
                if rng.random() < 0.5:
                    spans.append((svc, make_span(tid, parent=c.span_id, name=f"{svc}.inner",
                                                 kind=Span.SPAN_KIND_SERVER, start=st + 10,
                                                 end=st + rng.randrange(10**4, 10**8), attributes={"k": k})))
            for i, (s, sp) in enumerate(spans):
                (held.append((s, sp)) if n % 3 == 0 and i % 2 == 1 else by_service[s].append(sp))
            n += 1
        for s, sps in by_service.items():
            if sps:
                d.send(make_request(sps, service=s))
                single.send(make_request(sps, service=s))
        time.sleep(0.8)
    rest: dict[str, list] = {}
    for s, sp in held:
        rest.setdefault(s, []).append(sp)
    for s, sps in rest.items():
        d.send(make_request(sps, service=s))
        single.send(make_request(sps, service=s))

    now = int(time.time())
    window = {"start": now - 3600, "end": now + 60}

    def answer(srv, path, params=None):
        r = srv.get(path, params=params)
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
        return r.status_code, _without_job_counts(body)

    def traces(srv):
        return len(answer(srv, "/api/search", {"q": "{ }", "limit": "10000", **window})[1]["traces"])
    wait_for(lambda: traces(fe) == n and traces(single) == n, 60, "every trace on both", 0.5)
    wait_for(lambda: fe.get("/api/search", params={"q": "{ }", "limit": "1", **window}).json()["metrics"]
             .get("totalBlocks", 0) > 0, 30, "blocks in the cluster", 0.3)

    mstart, mend = base // 10**9 - 60, base // 10**9 + 60 + n
    probes: list = []
    for q in ["{ }", '{ resource.service.name = "cart" }', "{ span.http.status_code = 500 }", "{ status = error }",
              "{ kind = client } >> { kind = server }", "{ } | count() > 5", "{ duration > 500ms }",
              "{ traceDuration > 1s }", '{ rootServiceName = "frontend" }', '{ span.user.id =~ "u1.*" }',
              "{ span.cached = true && span.ratio > 0.5 }", '{ name = "cart.inner" } ~ { name = "db.op1" }',
              "{ } | select(span.k, span.user.id)", "{ } | avg(duration) > 100ms",
              "{ } | by(resource.service.name) | count() > 2", "{ span.k = 1 } !>> { span.k = 0 }",
              '{ resource.service.name = "db" } &>> { }', "{ nestedSetParent = -1 }",
              "{ span.http.status_code != 200 } | max(duration) > 1s"]:
        for limit in ["5", "20", "1000"]:
            probes.append(("/api/search", {"q": q, "limit": limit, "spss": "3", **window}))
    probes += [("/api/search", {"tags": "service.name=cart", "limit": "20", **window}),
               ("/api/search", {"tags": "http.status_code=500", "minDuration": "100ms", "limit": "20", **window}),
               ("/api/search", {"q": "{ }", "limit": "20", "start": now - 600, "end": now + 60}),
               ("/api/search", {"q": "{ }", "limit": "20", "start": now - 700, "end": now - 400}),
               ("/api/search", {"q": "{ } | count() > 2", "limit": "7", "spss": "0", **window}),
               ("/api/search", {"q": "{ }", "limit": "20"}),
               ("/api/search", {"q": '{ rootServiceName = "frontend" && span.k = 2 }', "limit": "20"})]
    for q in ["{ } | quantile_over_time(duration, .5, .9, .99) by (resource.service.name)",
              "{ } | histogram_over_time(duration)", "{ } | avg_over_time(duration) by (name)",
              "{ } | min_over_time(duration)", "{ } | max_over_time(duration) by (span.k)",
              "{ } | sum_over_time(span.n)", "{ } | rate() by (name) | topk(3)",
              "{ } | count_over_time() by (span.user.id) | bottomk(2)", "{ } | compare({ status = error })",
              "{ kind = server } | rate() by (span.http.status_code)",
              "{ resource.service.name = \"frontend\" } >> { status = error } | rate()",
              "{ } | count_over_time() by (resource.service.name) with (exemplars=false)"]:
        probes.append(("/api/metrics/query_range", {"q": q, "start": mstart, "end": mend, "step": "30s"}))
        probes.append(("/api/metrics/query", {"q": q, "start": mstart, "end": mend}))
    probes += [("/api/search/tags", window), ("/api/v2/search/tags", window),
               ("/api/v2/search/tags", {"scope": "span", **window}),
               ("/api/v2/search/tags", {"scope": "intrinsic", **window}),
               ("/api/v2/search/tags", {"q": '{ resource.service.name = "auth" }', **window}),
               ("/api/v2/search/tags", None),
               ("/api/search/tag/service.name/values", window),
               ("/api/search/tag/http.status_code/values", window),
               ("/api/v2/search/tag/span.user.id/values", window), ("/api/v2/search/tag/name/values", window),
               ("/api/v2/search/tag/status/values", window), ("/api/v2/search/tag/name/values", None),
               ("/api/v2/search/tag/span.k/values", {"q": '{ resource.service.name = "db" }', **window}),
               ("/api/v2/search/tag/resource.service.name/values", {"q": "{ span.k = 2 }", **window}),
               ("/api/service-graph", window)]
    for tid in tids[::37]:
        probes += [(f"/api/traces/{tid.hex()}", None), (f"/api/v2/traces/{tid.hex()}", None)]
    diffs = []
    for path, params in probes:
        want, got = answer(single, path, params), answer(fe, path, params)
        if want != got or want[0] != 200:
            # Spans move from the live stores to blocks as this runs: ask both once more.
            want, got = answer(single, path, params), answer(fe, path, params)
            if want != got or want[0] != 200:
                diffs.append(f"{path} {params}: {_first_difference(want, got)}")

    us = 10**6
    jaeger = {"start": (now - 3600) * us, "end": (now + 60) * us}

    def rfc3339(seconds: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    zipkin = {"endTs": (now + 60) * 1000, "lookback": 3600 * 1000}
    for base_url, path, params in [
        ("jaeger", "/api/services", None), ("jaeger", "/api/services/cart/operations", None),
        ("jaeger", "/api/operations", {"service": "db", "spanKind": "server"}),
        ("jaeger", "/api/traces", {"service": "frontend", "limit": "15", **jaeger}),
        ("jaeger", "/api/traces", {"service": "cart", "operation": "cart.op0", "limit": "15", **jaeger}),
        ("jaeger", "/api/traces", {"service": "frontend", "tags": '{"http.status_code":"500"}', "limit": "50",
                                   **jaeger}),
        ("jaeger", "/api/traces", {"service": "db", "minDuration": "100ms", "limit": "50", **jaeger}),
        ("jaeger", "/api/dependencies", {"endTs": (now + 60) * 1000, "lookback": 3600 * 1000}),
        ("jaeger", "/api/v3/services", None), ("jaeger", "/api/v3/operations", {"service": "db"}),
        ("jaeger", "/api/v3/traces", {"query.serviceName": "cart", "query.searchDepth": "10",
                                      "query.startTimeMin": rfc3339(now - 3600),
                                      "query.startTimeMax": rfc3339(now + 60)}),
        ("jaeger", f"/api/v3/traces/{tids[12].hex()}", None),
        ("zipkin", "/api/v2/services", None), ("zipkin", "/api/v2/spans", {"serviceName": "cart"}),
        ("zipkin", "/api/v2/remoteServices", {"serviceName": "cart"}),
        ("zipkin", "/api/v2/traces", {"serviceName": "db", "limit": "10", **zipkin}),
        ("zipkin", "/api/v2/traces", {"annotationQuery": "http.status_code=500", "limit": "10", **zipkin}),
        ("zipkin", "/api/v2/traces", {"minDuration": "500000", "limit": "10", **zipkin}),
        ("zipkin", "/api/v2/dependencies", zipkin),
        *(("jaeger", f"/api/traces/{tid.hex()}", None) for tid in tids[5::97]),
        *(("zipkin", f"/api/v2/trace/{tid.hex()}", None) for tid in tids[5::97]),
    ]:
        want, got = (requests.get(f"{getattr(s, base_url)}{path}", params=params, timeout=30) for s in (single, fe))
        # Zipkin's dependency links and a trace's spans come in no set order.
        order = (lambda x: sorted(x, key=repr)) if "/api/v2/dependencies" in path or "/api/v2/trace/" in path \
            else (lambda x: x)
        if want.status_code != 200 or got.status_code != 200 or order(want.json()) != order(got.json()):
            diffs.append(f"{base_url} {path} {params}: {want.status_code} {want.text[:300]} | "
                         f"{got.status_code} {got.text[:300]}")

    def streamed(method, req, reply):
        want, got = (MessageToDict(stream(s, method, req, reply)[-1]) for s in (single, fe))
        want.pop("metrics", None), got.pop("metrics", None)
        if method.startswith("SearchTagValues"):
            want, got = _without_job_counts(want), _without_job_counts(got)
        if want != got:
            diffs.append(f"stream {method} {req}: {_first_difference(want, got)}")
    for q, limit in [("{ }", 20), ("{ status = error }", 5), ("{ kind = client } >> { kind = server }", 50),
                     ("{ } | count() > 5", 1000)]:
        streamed("Search", PB["SearchRequest"](Query=q, Limit=limit, start=window["start"], end=window["end"],
                                               SpansPerSpanSet=3), "SearchResponse")
    for q in ["{ } | rate() by (resource.service.name)", "{ } | quantile_over_time(duration, .9) by (name)"]:
        streamed("MetricsQueryRange", PB["QueryRangeRequest"](query=q, start=mstart * 10**9, end=mend * 10**9,
                                                              step=30 * 10**9), "QueryRangeResponse")
    for tag, q in [("resource.service.name", ""), ("span.user.id", "{ status = error }")]:
        streamed("SearchTagValuesV2", PB["SearchTagValuesRequest"](tagName=tag, query=q, start=window["start"],
                                                                   end=window["end"]),
                 "SearchTagValuesV2Response")
    assert not diffs, f"{len(diffs)} answers differ (single binary | cluster):\n" + "\n".join(diffs)


def test_a_live_store_killed_or_hung_makes_answers_partial_never_wrong(weft_factory, kafka, tmp_path):
    """A query-frontend, two block-only queriers and two live stores (two partitions each); a
    third of the traces in blocks, the rest held by the live stores (the block builder stopped). A querier killed with
    SIGKILL while searches run: every answer whole. One live store killed with SIGKILL while
    searches run: every search, metrics query and tag lookup still answers 200 within the job
    timeout, whole or marked partial (x-weft-partial-live-stores) with exactly the other live
    store's traces. One hung (SIGSTOP): each
    query answers within a few job timeouts, partial. Restarted, the live store replays from
    the committed offsets and the answers are whole again."""
    import signal

    topic = f"ls-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "shared"
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
    d = weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     name="ls-distributor")
    # The first traces go to blocks; then the builder stops, and the rest stay in the live stores.
    builder = start_sharing(weft_factory, "ls-builder", "--target", "block-builder", *kafka_args,
                            "--block-max-age", "1", data_dir=data)
    live = [start_sharing(weft_factory, f"ls-live{i}", "--target", "live-store", "--blocklist-poll", "0.2",
                          *kafka_args, "--live-store-partitions", parts, data_dir=data)
            for i, parts in enumerate(["0,1", "2,3"])]
    peers = [start_sharing(weft_factory, f"ls-peer{i}", "--target", "querier", "--blocklist-poll", "0.2",
                           "--querier-live-store", "false", *kafka_args, data_dir=data) for i in range(2)]
    frontend = start_sharing(weft_factory, "ls-frontend", "--target", "query-frontend", "--blocklist-poll", "0.2",
                             "--query-job-timeout", "2",
                             "--query-peers", ",".join(f"127.0.0.1:{p.http_port}" for p in peers),
                             "--live-stores", ",".join(f"127.0.0.1:{s.http_port}" for s in live), data_dir=data)
    base = time.time_ns() - 300 * 10**9
    traces: dict[str, int] = {}
    in_blocks: set[str] = set()
    for i in range(90):
        if i == 30:
            wait_for(lambda: (builder.metric("weft_block_spans_written_total") or 0) >= 90, 60, "the first blocks")
            wait_for(lambda: (frontend.metric("weft_blocks") or 0) >= 1, 30, "the frontend to list them")
            builder.stop()
        tid = new_trace_id()
        d.send(make_request([make_span(tid, name=f"op-{i % 3}", start=base + i * 10**6 + k, attributes={"k": k})
                             for k in range(3)], service=f"svc-{i % 2}"))
        traces[tid.hex()] = _partition(tid)
        if i < 30:
            in_blocks.add(tid.hex())
    now = int(time.time())
    window = {"start": now - 3600, "end": now + 60}

    def search(q="{ }"):
        t0 = time.monotonic()
        r = frontend.get("/api/search", params={"q": q, "limit": "1000", **window})
        took = time.monotonic() - t0
        assert r.status_code == 200, f"{r.status_code} {r.text[:300]}"
        return {t["traceID"].rjust(32, "0") for t in r.json()["traces"]}, r.headers.get("x-weft-partial-live-stores"), took

    def count():
        r = frontend.get("/api/metrics/query_range", params={"q": "{ } | count_over_time()", "step": "60s",
                                                              "start": base // 10**9 - 60, "end": base // 10**9 + 120})
        assert r.status_code == 200, f"{r.status_code} {r.text[:300]}"
        total = sum(float(v["value"]) for s in r.json()["series"] for v in s.get("samples", []))
        return total, r.headers.get("x-weft-partial-live-stores")

    def services():
        r = frontend.get("/api/v2/search/tag/resource.service.name/values", params=window)
        assert r.status_code == 200, f"{r.status_code} {r.text[:300]}"
        return {v["value"] for v in r.json()["tagValues"]}, r.headers.get("x-weft-partial-live-stores")

    every = set(traces)
    # A live store serves its jobs on the HTTP port and opens no query port of Jaeger's or
    # Zipkin's (roles share hosts).
    for url in (live[0].jaeger + "/api/services", live[0].zipkin + "/api/v2/services"):
        with pytest.raises(requests.ConnectionError):
            requests.get(url, timeout=5)
    wait_for(lambda: search()[0] == every, 30, "every trace through the live stores", 0.3)
    assert search()[1] is None and count() == (270.0, None) and services() == ({"svc-0", "svc-1"}, None)

    def grpc_answers():
        """A streamed search (its last reply and its trailers) and a streamed range query."""
        import grpc
        from test_tempo_streaming import PB
        channel = grpc.insecure_channel(f"127.0.0.1:{frontend.http_port}")
        try:
            call = channel.unary_stream("/tempopb.StreamingQuerier/Search",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=PB["SearchResponse"].FromString)(
                PB["SearchRequest"](Query="{ }", Limit=1000, start=window["start"], end=window["end"]), timeout=30)
            replies = list(call)
            trailers = dict(call.trailing_metadata() or ())
            rng = list(channel.unary_stream("/tempopb.StreamingQuerier/MetricsQueryRange",
                                            request_serializer=lambda m: m.SerializeToString(),
                                            response_deserializer=PB["QueryRangeResponse"].FromString)(
                PB["QueryRangeRequest"](query="{ } | count_over_time()", start=(base // 10**9 - 60) * 10**9,
                                        end=(base // 10**9 + 120) * 10**9, step=60 * 10**9), timeout=30))
            return replies[-1], trailers, rng[-1]
        finally:
            channel.close()

    whole_reply, whole_trailers, whole_rng = grpc_answers()
    assert len(whole_reply.traces) == len(every) and "x-weft-partial-live-stores" not in whole_trailers
    assert whole_rng.status == 0 and whole_rng.message == ""
    # With live store 0 out: the blocks' traces and live store 1's.
    kept = in_blocks | {t for t, p in traces.items() if p in (2, 3)}
    assert len(in_blocks) < len(kept) < len(every)

    def searching_while(kill, check):
        """Searches over and over for 4 s, running `kill` after 1.5 s; every answer is checked."""
        import threading
        answers, errors = [], []

        def keep():
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                try:
                    answers.append(search())
                except Exception as e:  # noqa: BLE001 (reported below, in the test's thread)
                    errors.append(repr(e))
        t = threading.Thread(target=keep)
        t.start()
        time.sleep(1.5)
        kill()
        t.join()
        assert not errors, f"searches failed: {errors[:3]}"
        assert len(answers) >= 4
        for got, partial, took in answers:
            check(got, partial)
            assert took < 5, f"a search took {took:.1f}s"
        return answers

    # A hung querier (SIGSTOP): a search with a job on it waits one job timeout (2 s) and
    # answers whole; the searches after it leave it out and do not wait.
    peers[1].proc.send_signal(signal.SIGSTOP)
    try:
        first = search()
        assert first[:2] == (every, None) and first[2] < 8, f"{first[1]} {first[2]:.1f}s"
        failed = frontend.metric("weft_query_jobs_total", outcome="failed") or 0
        for _ in range(4):
            got, partial, took = search()
            assert (got, partial) == (every, None)
            assert took < 5, f"a search took {took:.1f}s with a querier hung (after {first[2]:.1f}s)"
        # No job was sent to it again (each would have timed out after 2 s and failed).
        assert (frontend.metric("weft_query_jobs_total", outcome="failed") or 0) == failed, "jobs went to the hung querier"
    finally:
        peers[1].proc.send_signal(signal.SIGCONT)
    # Back: a probe of its /ready gives it jobs again; the answers stay whole.
    wait_for(lambda: search()[:2] == (every, None), 30, "searches with the querier back")

    # A block-only querier killed while searches run: its jobs go to the other; nothing partial.
    def whole(got, partial):
        assert (got, partial) == (every, None)
    searching_while(peers[0].kill9, whole)
    assert (frontend.metric("weft_query_jobs_total", outcome="sent") or 0) > 0, "the queriers read the blocks"

    # A live store killed while searches run: each answer is whole, or partial with exactly
    # the other live store's traces.
    def whole_or_partial(got, partial):
        assert (got, partial) in ((every, None), (kept, "1")), f"{partial}: {len(got)} traces"
    answers = searching_while(live[0].kill9, whole_or_partial)
    assert any(p == "1" for _, p, _ in answers), "searches after the kill say they are partial"
    for _ in range(3):
        got, partial, took = search()
        assert partial == "1", "the answer says a live store did not answer"
        assert got == kept, "the live store still up answers its partitions' traces, and nothing else appears"
        assert took < 5
        total, partial = count()
        assert partial == "1" and total == 3 * len(kept)
        names, partial = services()
        assert partial == "1" and names <= {"svc-0", "svc-1"}
    r = frontend.get(f"/api/v2/traces/{next(iter(kept))}")
    assert r.status_code == 200, "trace by ID from the live store still up"
    # A trace only the dead live store holds is not "not found" without a word: the 404 of
    # every API says a live store did not answer.
    lost = next(iter(every - kept))
    for what, url in (("tempo", f"{frontend.api}/api/traces/{lost}"),
                      ("tempo v2", f"{frontend.api}/api/v2/traces/{lost}"),
                      ("jaeger", f"{frontend.jaeger}/api/traces/{lost}"),
                      ("jaeger api/v3", f"{frontend.jaeger}/api/v3/traces/{lost}"),
                      ("zipkin", f"{frontend.zipkin}/api/v2/trace/{lost}")):
        r = requests.get(url, timeout=30)
        assert r.headers.get("x-weft-partial-live-stores") == "1", f"{what}: {r.status_code} {r.text[:200]}"
        if what.startswith("tempo"):
            assert r.status_code == 404 and "live store did not answer" in r.text, f"{what}: {r.text[:200]}"
    # Tempo's streaming gRPC API says it too: a metrics reply's status is PARTIAL with the
    # message, and a search stream's trailers carry the header.
    search_reply, search_trailers, rng = grpc_answers()
    assert len(search_reply.traces) == len(kept) and search_trailers.get("x-weft-partial-live-stores") == "1"
    assert rng.status == 1 and "live store did not answer" in rng.message, rng
    assert sum(x.value for s in rng.series for x in s.samples) == 3 * len(kept)

    live[1].proc.send_signal(signal.SIGSTOP)
    try:
        got, partial, took = search()
        assert partial == "2" and got == in_blocks, f"both live stores out: {partial} {len(got)}"
        assert took < 12, f"a hung live store held the search {took:.1f}s (job timeout 2 s)"
    finally:
        live[1].proc.send_signal(signal.SIGCONT)

    live[0].start()
    wait_for(lambda: live[0].get("/ready").status_code == 200, 30, "the live store restarted")
    wait_for(lambda: search()[:2] == (every, None), 30, "the restarted live store replays its partitions", 0.3)
    assert count() == (270.0, None)
    assert (frontend.metric("weft_query_jobs_total", outcome="live_unanswered") or 0) >= 3


def test_live_stores_must_hold_each_partition_once(weft_factory, kafka, tmp_path):
    """Live stores whose --live-store-partitions overlap would count the shared partitions'
    spans twice: the frontend refuses the query with an error naming the partition. Live
    stores that leave a partition out: answers are partial."""
    topic = f"lp-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "shared"
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
    d = weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                     name="lp-distributor")
    tid = new_trace_id()
    d.send(make_request([make_span(tid, start=time.time_ns())]))

    def frontend_over(name: str, *partition_sets: str):
        live = [start_sharing(weft_factory, f"{name}-live{i}", "--target", "live-store", *kafka_args,
                              "--live-store-partitions", parts, data_dir=data)
                for i, parts in enumerate(partition_sets)]
        return start_sharing(weft_factory, f"{name}-frontend", "--target", "querier",
                             "--live-stores", ",".join(f"127.0.0.1:{s.http_port}" for s in live), data_dir=data)

    overlapping = frontend_over("lp-overlap", "0,1,2", "2,3")
    r = overlapping.get("/api/search", params={"q": "{ }"})
    assert r.status_code == 500 and "partition 2" in r.text and "exactly one" in r.text, r.text
    r = overlapping.get("/api/metrics/query", params={"q": "{ } | count_over_time()"})
    assert r.status_code == 500 and "partition 2" in r.text, r.text

    gap = frontend_over("lp-gap", "0", "1")
    r = gap.get("/api/search", params={"q": "{ }"})
    assert r.status_code == 200 and r.headers.get("x-weft-partial-live-stores") == "1", (r.status_code, r.text)
    whole = frontend_over("lp-whole", "0,1", "2,3")
    wait_for(lambda: len(whole.get("/api/search", params={"q": "{ }"}).json()["traces"]) == 1, 30, "the trace")
    r = whole.get("/api/search", params={"q": "{ }"})
    assert r.headers.get("x-weft-partial-live-stores") is None


def test_a_second_block_builder_on_taken_partitions_refuses_and_stops_print_no_panic(weft_factory, kafka,
                                                                                      tmp_path):
    """Partitions are leased in the block storage: a builder given a partition a live builder
    holds refuses to start, naming the partition and the holder, and takes none of its others;
    every span is in the blocks exactly once; a clean stop frees the partitions at once; and
    stopping a builder, a distributor or a querier prints no panic."""
    topic = f"fence-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "bucket"
    kafka_args = (*_kafka_flags(kafka), "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
    builder = ("--target", "block-builder", *kafka_args, "--block-max-age", "0.5", "--block-builder-lease", "3")
    d = _distributor(weft_factory, kafka, topic)
    a = start_sharing(weft_factory, "builder-a", *builder, "--block-builder-partitions", "0,1", data_dir=data)
    second = weft_factory(*builder, "--block-builder-partitions", "2,1", name="builder-b", start=False)
    second.data_dir = data
    r = subprocess.run(second.command(), capture_output=True, text=True, timeout=60, env=second.process_env())
    out = r.stdout + r.stderr
    assert r.returncode != 0, f"a second builder of partition 1 started:\n{out[-2000:]}"
    assert f"partition 1 of topic {topic} is being built by another block builder" in out, out[-2000:]
    assert f":{a.http_port})" in out, f"the holder (host:port of builder-a) is named:\n{out[-2000:]}"
    # It released partition 2, which it had leased first: a builder of 2 and 3 starts.
    c = start_sharing(weft_factory, "builder-c", *builder, "--block-builder-partitions", "2,3", data_dir=data)
    assert a.metric("weft_block_builder_lease_held", partition="1") == 1

    sent = set()
    for i in range(30):
        spans = [make_span(new_trace_id(), name=f"fence-{i}-{k}", start=time.time_ns() - 10**9) for k in range(3)]
        d.send(make_request(spans))
        sent.update(bytes(s.span_id) for s in spans)

    def blocks_hold_all():
        n = sum(int(m.get("span_count", 0)) for m in _metas(data, ()))
        return n if n >= len(sent) else None
    assert wait_for(blocks_hold_all, 60, "every span in a block") == len(sent), "a span was written twice"

    # A clean stop releases the leases: a replacement starts at once, not a lease period later.
    procs = {"builder-a": a, "builder-c": c, "distributor": d}
    for name, p in procs.items():
        assert p.stop() == 0, f"{name} did not stop cleanly:\n{p.describe()}"
    replacement = start_sharing(weft_factory, "builder-a2", *builder, "--block-builder-partitions", "0,1,2,3",
                                data_dir=data)
    querier = start_sharing(weft_factory, "querier", "--target", "querier", *kafka_args, data_dir=data)
    for name, p in {**procs, "builder-a2": replacement, "querier": querier}.items():
        if name in ("builder-a2", "querier"):
            assert p.stop() == 0, f"{name} did not stop cleanly:\n{p.describe()}"
        logs = p.stdout_path.read_text() + p.stderr_path.read_text()
        assert "panicked" not in logs, f"{name} panicked:\n{logs[-3000:]}"
        assert "weft stopped cleanly" in logs, f"{name}:\n{logs[-3000:]}"


def _kafka_script(*args: str, timeout: float = 240) -> str:
    r = subprocess.run(["bash", str(REPO / "scripts" / "kafka-server.sh"), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout,
                       env={**os.environ, "KAFKA_SERVER_OWNER_PID": str(os.getpid())})
    assert r.returncode == 0, f"scripts/kafka-server.sh {' '.join(map(str, args))}:\n{r.stderr[-3000:]}"
    return r.stdout.strip()


def test_brokers_restarted_one_at_a_time_under_load_lose_and_duplicate_nothing(weft_factory, tmp_path):
    """Three brokers (KRaft, replication 3, min.insync.replicas 2), each restarted in turn while
    two distributors take spans (leaders move to the others and back), then one stopped for
    good while the load goes on. Every span that got a
    success response is in the blocks exactly once, and the distributors answered no request
    with success that Kafka did not take (what failed during a move was refused, not lost)."""
    brokers_dir = tmp_path / "kafka3"
    brokers = _kafka_script("cluster", brokers_dir, "3").removeprefix("WEFT_KAFKA_BROKERS=")
    try:
        topic = f"rolling-{uuid.uuid4().hex[:8]}"
        data = tmp_path / "bucket"
        kafka_args = ("--kafka-brokers", brokers, "--kafka-topic", topic, "--kafka-group", f"g-{topic}")
        ds = [weft_factory("--target", "distributor", *kafka_args, "--kafka-partitions", str(PARTITIONS),
                           "--kafka-replication", "3", name=f"distributor-{i}") for i in range(2)]
        builder = start_sharing(weft_factory, "builder", "--target", "block-builder", *kafka_args,
                                "--block-max-age", "0.5", data_dir=data)
        acked: dict[bytes, set[bytes]] = {}
        refused = [0]
        stop = threading.Event()

        def load(d, seed):
            rng = random.Random(seed)
            while not stop.is_set():
                tid = new_trace_id()
                spans = [make_span(tid, name=f"op{k}", start=time.time_ns() - 10**9) for k in range(rng.randint(1, 3))]
                try:
                    r = d.post_otlp(make_request(spans), timeout=20)
                except requests.RequestException:
                    refused[0] += 1
                    continue
                if r.status_code == 200:
                    acked.setdefault(tid, set()).update(bytes(s.span_id) for s in spans)
                else:
                    refused[0] += 1
                time.sleep(0.01)
        threads = [threading.Thread(target=load, args=(d, i)) for i, d in enumerate(ds)]
        for t in threads:
            t.start()
        try:
            time.sleep(2)
            for i in (1, 2, 3):
                node = brokers_dir / f"node-{i}"
                port = (node / "kafka.port").read_text().strip()
                _kafka_script("stop", node)
                time.sleep(3)
                _kafka_script("start", node, port)
                time.sleep(2)
            # Then a broker leaves for good: two replicas remain, min.insync.replicas is met.
            _kafka_script("stop", brokers_dir / "node-2")
            time.sleep(5)
        finally:
            stop.set()
            for t in threads:
                t.join()
        sent = sum(len(v) for v in acked.values())
        assert sent > 200, f"only {sent} spans were acknowledged ({refused[0]} requests refused)"

        def stored():
            metas = _metas(data, ())
            n = sum(int(m.get("span_count", 0)) for m in metas)
            return n if n >= sent else None
        n = wait_for(stored, 120, "every acknowledged span in a block", 0.5)
        assert n == sent, f"blocks hold {n} spans, {sent} were acknowledged ({refused[0]} requests refused)"
        querier = start_sharing(weft_factory, "querier", "--target", "querier", "--querier-live-store", "false",
                                "--blocklist-poll", "0.2", data_dir=data)
        for tid, ids in list(acked.items())[:: max(1, len(acked) // 50)]:
            assert sorted(_span_ids(querier, tid, "single-tenant")) == sorted(ids), tid.hex()
        assert builder.metric("weft_block_builder_records_refused_total", partition="0") == 0
    finally:
        _kafka_script("stop", brokers_dir)
