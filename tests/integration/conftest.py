"""Fixtures for weft's integration tests.

Each test gets real weft processes on free ports, with a fresh data dir under pytest's tmp_path.
The binary is $WEFT_BIN (default target/debug/weft, relative to the repository root). Nothing is
skipped: a missing binary or tool fails the test with a message saying how to get it.

Environment:
  WEFT_BIN              the weft binary (default target/debug/weft)
  TELEMETRYGEN          the telemetrygen binary (default .tools/bin/telemetrygen)
  WEFT_TEST_EXTRA_ARGS  extra flags for every weft started (e.g. ports of receivers added later)
Other WEFT_* variables of the caller are not passed on to the servers under test.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from weftlib import REPO_ROOT, WeftError, WeftServer  # noqa: E402


def _resolve(path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else REPO_ROOT / p


@pytest.fixture(scope="session")
def weft_bin() -> Path:
    p = _resolve(os.environ.get("WEFT_BIN", "target/debug/weft"))
    if not p.is_file() or not os.access(p, os.X_OK):
        pytest.fail(f"weft binary not found or not executable at {p}: build it with `cargo build` "
                    f"or point WEFT_BIN at it", pytrace=False)
    return p


@pytest.fixture(scope="session")
def telemetrygen_bin() -> Path:
    env = os.environ.get("TELEMETRYGEN")
    p = _resolve(env) if env else REPO_ROOT / ".tools" / "bin" / "telemetrygen"
    if not p.is_file() or not os.access(p, os.X_OK):
        found = shutil.which("telemetrygen")
        if env is None and found:
            return Path(found)
        pytest.fail(f"telemetrygen not found at {p}: run scripts/test-deps.sh (or set TELEMETRYGEN)",
                    pytrace=False)
    return p


@pytest.fixture
def weft_factory(weft_bin, tmp_path):
    """make(*args, env=None, start=True, name=...) -> a WeftServer, stopped at the end of the test.

    Teardown fails the test if a server died on its own during the test (a crash), or if it does
    not exit within 10 s of SIGTERM."""
    servers: list[WeftServer] = []

    def make(*args: str, env: dict[str, str] | None = None, start: bool = True,
             name: str | None = None, use_flags: bool = True) -> WeftServer:
        name = name or f"weft{len(servers)}"
        srv = WeftServer(weft_bin, tmp_path / name, args, env=env, name=name, use_flags=use_flags)
        servers.append(srv)
        if start:
            srv.start()
        return srv

    yield make

    problems = []
    for srv in servers:
        if srv.proc is None:
            continue
        if srv.proc.poll() is not None and not srv.stopped_by_us:
            problems.append(f"{srv.name} died during the test with exit code {srv.proc.returncode}\n"
                            f"{srv.describe()}")
            continue
        try:
            srv.stop()
        except WeftError as e:
            problems.append(str(e))
        srv.http.close()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def weft(weft_factory) -> WeftServer:
    """A weft with default settings."""
    return weft_factory()
