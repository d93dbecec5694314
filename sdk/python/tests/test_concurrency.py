"""Threads, asyncio and os.fork()."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import List

import pytest
from opentelemetry import trace

import weft_sdk
from conftest import Receiver, flushed


def test_threads_have_their_own_context(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")
    errors: List[BaseException] = []

    def work(i: int) -> None:
        try:
            with tracer.start_as_current_span(f"root-{i}") as root:
                for j in range(50):
                    with tracer.start_as_current_span(f"c-{i}") as c:
                        assert trace.get_current_span() is c
                assert trace.get_current_span() is root
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    spans = flushed(provider)
    assert len(spans) == 4 * 51
    roots = {s["name"]: s for s in spans if s["name"].startswith("root-")}
    for s in spans:
        if s["name"].startswith("c-"):
            r = roots["root-" + s["name"][2:]]
            assert s["trace_id"] == r["trace_id"] and s["parent_span_id"] == r["span_id"]
    assert len({s["span_id"] for s in spans}) == len(spans)


def test_asyncio_tasks_have_their_own_context(provider: weft_sdk.TracerProvider) -> None:
    tracer = provider.get_tracer("t")

    async def handler(i: int) -> None:
        with tracer.start_as_current_span(f"req-{i}") as req:
            await asyncio.sleep(0.001)
            with tracer.start_as_current_span(f"db-{i}"):
                await asyncio.sleep(0.001)
            assert trace.get_current_span() is req

    async def main() -> None:
        await asyncio.gather(*(handler(i) for i in range(20)))

    asyncio.run(main())
    spans = flushed(provider)
    reqs = {s["name"][4:]: s for s in spans if s["name"].startswith("req-")}
    for s in spans:
        if s["name"].startswith("db-"):
            assert s["parent_span_id"] == reqs[s["name"][3:]]["span_id"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() only exists on POSIX")
def test_fork_child_gets_a_fresh_pipeline(receiver: Receiver) -> None:
    """A preloading server (gunicorn --preload, uwsgi) forks after the provider is built and
    used; each worker must export on its own and draw its own IDs."""
    p = weft_sdk.TracerProvider(
        resource={"service.name": "fork"},
        sampler=weft_sdk.sampling.ALWAYS_ON,
        exporter=weft_sdk.OTLPExporter(endpoint=receiver.url),
        schedule_delay=0.05,
        shutdown_on_exit=False,
    )
    tracer = p.get_tracer("fork")
    with tracer.start_as_current_span("parent-before"):
        pass
    assert p.force_flush(10_000)
    r, w = os.pipe()
    children = []
    for k in range(2):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                with tracer.start_as_current_span(f"child-{k}") as s:
                    s.set_attribute("pid", os.getpid())
                ok = p.force_flush(10_000) and p.stats()["exported"] == 1
                os.write(w, f"{k}:{s.trace_id:032x}:{int(ok)}\n".encode())
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    os.close(w)
    lines = os.read(r, 4096).decode().split()
    os.close(r)
    assert len(lines) == 2 and all(line.endswith(":1") for line in lines), lines
    child_trace_ids = {line.split(":")[1] for line in lines}
    assert len(child_trace_ids) == 2, "children must not draw the same IDs"
    with tracer.start_as_current_span("parent-after") as after:
        pass
    assert f"{after.trace_id:032x}" not in child_trace_ids
    assert p.force_flush(10_000)
    names = sorted(s.name for _, _, s in receiver.spans())
    assert names == ["child-0", "child-1", "parent-after", "parent-before"]
    p.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() only exists on POSIX")
def test_fork_while_other_threads_end_spans(provider: weft_sdk.TracerProvider) -> None:
    """Forking while other threads are busy ending spans must not deadlock the child."""
    tracer = provider.get_tracer("t")
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            tracer.start_span("busy", attributes={"x": 1}).end()

    threads = [threading.Thread(target=busy) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                try:
                    for _ in range(100):
                        tracer.start_span("in-child").end()
                    ok = provider.force_flush(5_000)
                    os._exit(0 if ok else 3)
                except BaseException:
                    os._exit(2)
            for _ in range(200):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                import time

                time.sleep(0.05)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung (10 s)")
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        stop.set()
        for t in threads:
            t.join()
    _ = sys


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() only exists on POSIX")
def test_fork_while_native_threads_take_the_registry_lock(provider: weft_sdk.TracerProvider) -> None:
    """Regression: a fork at the instant another thread held sdk/rust's pipeline-registry lock
    left it locked in the child, whose first pipeline then hung. Rust threads (no GIL) switch
    pipelines on every span, so the lock is nearly always held while the parent forks 20 times;
    each child must build its pipeline and export. One more thread holds the lock for 2 ms at
    a time, half the time (a slow first use), so that a fork without the fix would find it held
    (checked: without the `before` hook, a child hangs within a few forks)."""
    import time

    tracer = provider.get_tracer("t")
    weft_sdk._native.testing.start_registry_hammer(2, 2000)
    try:
        time.sleep(0.05)
        for _ in range(20):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                try:
                    tracer.start_span("in-child").end()
                    os._exit(0 if provider.force_flush(5_000) else 3)
                except BaseException:
                    os._exit(2)
            deadline = time.monotonic() + 10
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    pytest.fail("the forked child hung on the pipeline registry lock (10 s)")
                time.sleep(0.01)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        spans = weft_sdk._native.testing.stop_registry_hammer()
    assert spans > 0
