"""A fleet of real remote samplers for the adaptive-sampling tests: processes of the OpenTelemetry
Go contrib `jaegerremote` sampler (tests/jaeger-remote), each polling one weft for its strategy
and exporting what it samples to that weft over OTLP/HTTP, while the test reads weft's
`/api/sampling/operations`."""

import subprocess
import time
from pathlib import Path


def start_fleet(binary: Path, servers: list, per_server: int, service: str, rates: dict[str, float],
                seconds: float, step: tuple[str, float, float] | None = None) -> list[subprocess.Popen]:
    """`per_server` processes for each server, sharing `rates` (root spans a second of each
    operation, for the whole fleet) equally; `step` = (operation, after seconds, factor)."""
    n = len(servers) * per_server
    procs = []
    for srv in servers:
        for _ in range(per_server):
            cmd = [str(binary), "-url", f"http://127.0.0.1:{srv.sampling_http_port}/sampling", "-service", service,
                   "-export", srv.otlp_url, "-seconds", str(seconds)]
            for op, rate in rates.items():
                cmd += ["-op", f"{op}={rate / n}"]
            if step:
                cmd += ["-step-op", step[0], "-step-after", str(step[1]), "-step-factor", str(step[2])]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err


def operations(srv, service: str) -> dict:
    r = srv.http.get(f"{srv.api}/api/sampling/operations", timeout=10)
    assert r.status_code == 200, r.text
    return {o["operation"]: o for o in r.json()["operations"] if o["service"] == service}


def average(servers: list, service: str, seconds: float, every: float = 1.0) -> list[dict[str, dict[str, float]]]:
    """Each server's figures of each operation, averaged over polls of all of them, `every`
    seconds for `seconds`."""
    sums: list[dict[str, dict[str, float]]] = [{} for _ in servers]
    polls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for srv, acc in zip(servers, sums):
            for op, o in operations(srv, service).items():
                s = acc.setdefault(op, {"sampledTracesPerSecond": 0.0, "probability": 0.0, "rootSpansPerSecond": 0.0})
                for k in s:
                    s[k] += o[k]
        polls += 1
        time.sleep(every)
    return [{op: {k: v / polls for k, v in s.items()} for op, s in acc.items()} for acc in sums]
