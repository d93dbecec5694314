"""The native core's warnings go through Python `logging` (logger `weft_sdk`), from a thread
that holds the GIL, never from the export thread."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

import weft_sdk
from conftest import env_without_otel


def test_native_warning_is_logged_at_the_next_call_into_the_sdk(
    caplog: pytest.LogCaptureFixture, provider: weft_sdk.TracerProvider
) -> None:
    caplog.set_level(logging.WARNING, logger="weft_sdk")
    # A Rust thread without the GIL warns: nothing reaches logging from that thread.
    weft_sdk._native.testing.warn_from_native_thread("export failed: test message 1")
    assert not [r for r in caplog.records if "test message 1" in r.getMessage()]
    # The next span start (a call that holds the GIL anyway) logs it.
    provider.get_tracer("t").start_span("s").end()
    (rec,) = [r for r in caplog.records if "test message 1" in r.getMessage()]
    assert rec.name == "weft_sdk" and rec.levelno == logging.WARNING
    # So do stats(), force_flush() and shutdown(), and the explicit safe point.
    weft_sdk._native.testing.warn_from_native_thread("export failed: test message 2")
    provider.stats()
    assert [r for r in caplog.records if "test message 2" in r.getMessage()]
    weft_sdk._native.testing.warn_from_native_thread("export failed: test message 3")
    weft_sdk._native.flush_warnings()
    assert [r for r in caplog.records if "test message 3" in r.getMessage()]


def test_queue_full_drop_is_logged_once_through_logging() -> None:
    """In a fresh process (the drop warning is rate-limited per process, once a minute): a
    full queue drops spans, and the warning arrives through logging, once."""
    code = textwrap.dedent(
        """
        import logging, sys
        logging.basicConfig(stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
        import weft_sdk
        # An exporter that never drains quickly (nothing listens there), a queue of 4.
        p = weft_sdk.TracerProvider(
            sampler=weft_sdk.sampling.ALWAYS_ON,
            exporter=weft_sdk.OTLPExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=0.5),
            max_queue_size=4, schedule_delay=60, shutdown_on_exit=False,
        )
        t = p.get_tracer("t")
        for _ in range(1000):
            t.start_span("s").end()
        print("dropped", p.stats()["dropped_queue_full"] > 0)
        """
    )
    env = env_without_otel()
    env.pop("WEFT_SDK_QUIET", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if "queue is full" in line]
    assert len(lines) == 1, r.stdout
    assert lines[0].startswith("weft_sdk WARNING span queue is full, dropping spans")
    assert "dropped True" in r.stdout
    assert "weft-sdk: warn" not in r.stderr  # not on stderr any more
