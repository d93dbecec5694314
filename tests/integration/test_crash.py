"""kill -9 at random moments while a client writes: every acknowledged span survives, exactly once."""

from __future__ import annotations

import random
import threading
import time

import requests

from otlpdata import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
    canon_spans,
    make_request,
    make_span,
    new_trace_id,
)
from weftlib import PROTOBUF, http_session

TRACES = 6
SPANS_PER_REQUEST = 24
MAX_REQUESTS = 5000  # bounds on the sender loop
MAX_SECONDS = 90
KILLS = 4


class Sender(threading.Thread):
    """Posts batches of new spans; a batch that got no answer is posted again later (same span IDs),
    as a retrying client would, so the server must de-duplicate on read."""

    def __init__(self, url: str, trace_ids: list[bytes], seed: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.trace_ids = trace_ids
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent: dict[str, dict] = {}     # span id -> canonical span, for every span ever posted
        self.acked: dict[str, dict] = {}    # span id -> canonical span, for spans of a 200 answer
        self.retry: list[bytes] = []        # bodies of batches without an answer
        self.requests = 0
        self.statuses: dict[str, int] = {}
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def new_batch(self) -> bytes:
        now = time.time_ns()
        spans = []
        for i in range(SPANS_PER_REQUEST):
            tid = self.rng.choice(self.trace_ids)
            start = now - self.rng.randrange(10**9) + i
            spans.append(make_span(tid, name=f"op-{self.requests}-{i}", start=start,
                                   end=start + self.rng.randrange(1, 10**8),
                                   attributes={"req": self.requests, "i": i}))
        req = make_request(spans, service="crash-test")
        with self.lock:
            self.sent.update(canon_spans(req)[0])
        return req.SerializeToString()

    def post(self, session: requests.Session, body: bytes) -> bool:
        self.requests += 1
        try:
            r = session.post(self.url, data=body, headers={"Content-Type": PROTOBUF}, timeout=10)
        except requests.RequestException as e:
            key = type(e).__name__
            self.statuses[key] = self.statuses.get(key, 0) + 1
            return False
        self.statuses[str(r.status_code)] = self.statuses.get(str(r.status_code), 0) + 1
        if r.status_code != 200:
            if r.status_code not in (429, 503):
                self.errors.append(f"unexpected answer {r.status_code}: {r.content[:200]!r}")
            return False
        resp = ExportTraceServiceResponse.FromString(r.content)
        if resp.partial_success.rejected_spans:
            self.errors.append(f"spans rejected: {resp.partial_success}")
            return False
        with self.lock:
            self.acked.update(canon_spans(ExportTraceServiceRequest.FromString(body))[0])
        return True

    def run(self) -> None:
        session = http_session()
        end = time.monotonic() + MAX_SECONDS
        while not self.stop.is_set() and self.requests < MAX_REQUESTS and time.monotonic() < end:
            if self.retry and self.rng.random() < 0.5:
                body = self.retry.pop(0)
            else:
                body = self.new_batch()
            if not self.post(session, body):
                self.retry.append(body)
                session.close()
                session = http_session()
                time.sleep(0.02)
            else:
                time.sleep(0.01)
        # Drain the retries once the server is up for good (bounded).
        deadline = time.monotonic() + 20
        while self.retry and time.monotonic() < deadline:
            body = self.retry.pop(0)
            if not self.post(session, body):
                self.retry.append(body)
                time.sleep(0.1)
        session.close()


def read_all(srv, trace_ids: list[bytes]) -> tuple[dict[str, dict], list[str]]:
    got: dict[str, dict] = {}
    dups: list[str] = []
    for tid in trace_ids:
        td = srv.fetch_trace(tid)
        if td is None:
            continue
        spans, d = canon_spans(td)
        dups += d
        for sid, c in spans.items():
            assert c["trace_id"] == tid.hex(), f"span {sid} of another trace in trace {tid.hex()}"
            if sid in got:
                dups.append(sid)
            got[sid] = c
    return got, dups


def check_exactly_once(srv, sender: Sender, trace_ids: list[bytes], stage: str) -> None:
    got, dups = read_all(srv, trace_ids)
    assert not dups, f"{stage}: {len(dups)} spans returned more than once, e.g. {dups[:5]}"
    lost = sorted(set(sender.acked) - set(got))
    assert not lost, f"{stage}: {len(lost)} acknowledged spans lost, e.g. {lost[:5]}"
    phantom = sorted(set(got) - set(sender.sent))
    assert not phantom, f"{stage}: spans that were never sent: {phantom[:5]}"
    for sid, c in got.items():
        assert c == sender.sent[sid], f"{stage}: span {sid} differs:\n sent {sender.sent[sid]}\n read {c}"


def test_kill9_while_writing_loses_no_acknowledged_span(weft_factory):
    seed = int(time.time())
    rng = random.Random(seed)
    srv = weft_factory("--block-max-age", "1")
    trace_ids = [new_trace_id() for _ in range(TRACES)]
    sender = Sender(srv.otlp_url, trace_ids, seed)
    sender.start()
    try:
        for k in range(KILLS):
            acked_before = len(sender.acked)
            # Let some requests be acknowledged by this incarnation, then kill at a random moment.
            deadline = time.monotonic() + 15
            while len(sender.acked) == acked_before and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(sender.acked) > acked_before, \
                f"no request was acknowledged after start #{k + 1} (seed {seed}); answers: {sender.statuses}"
            time.sleep(rng.uniform(0.1, 1.6))
            srv.kill9()
            time.sleep(rng.uniform(0.0, 0.3))
            srv.start()
        time.sleep(1.0)
    finally:
        sender.stop.set()
        sender.join(60)
    assert not sender.is_alive(), "sender thread did not finish"
    assert not sender.errors, f"unexpected answers (seed {seed}): {sender.errors[:5]}"
    assert not sender.retry, f"{len(sender.retry)} batches never acknowledged after the last restart"
    assert len(sender.acked) >= 10 * SPANS_PER_REQUEST

    check_exactly_once(srv, sender, trace_ids, f"after {KILLS} kill -9 (seed {seed})")
    # Every span was eventually acknowledged, so all of them must be there.
    assert set(sender.acked) == set(sender.sent)
    srv.restart()
    check_exactly_once(srv, sender, trace_ids, f"after a final graceful restart (seed {seed})")
