#!/usr/bin/env python3
"""Search benchmark for weft over realistic-cardinality data (stdlib only).

Method:
  1. Start the given `weft` binary on free ports with a fresh data directory (server defaults
     unless --server-arg says otherwise).
  2. Send --spans spans with `weft loadgen --realistic`: 20 services on 50 hosts, 200 span
     names, 15 attributes per span (user.id over 1,000,000 users, http.url with an ID), traces
     of 1-30 spans, log-normal durations, 2% errors, start times spread over --time-range-secs
     ending now. Loadgen plants needles (span k*N gets user.id = "needle-<k>") and writes them
     and a sample of acknowledged trace IDs to files.
  3. Wait until every acknowledged span is in a block (sum of span_count over the blocks'
     meta.json equals the acknowledged count, and the head and flushing gauges are 0).
     Report ingest wall time and rate, server CPU seconds, peak RSS, and disk bytes per span.
  4. Run each query --runs times, one at a time, over the whole time range, and report min,
     p50 and max wall-clock milliseconds and the response's metrics (inspectedBytes,
     inspectedBlocks from weft's x-weft-* headers, ...). A query that takes longer than --timeout seconds is recorded as a
     timeout (and not repeated); the script then waits for the server to go idle.
       needle           { span.user.id = "needle-1" }  (must find the needle's trace)
       needle_narrow    the same with a 10-minute window around the needle (block pruning)
       first_page_all   { }, limit 20: the newest 20 traces (checked: 20, newest first)
       first_page_service  { resource.service.name = "frontend" }, the same
       first_page_status   { span.http.status_code = 500 }, the same
       jaeger_first_page   Jaeger's /api/traces?service=frontend&limit=20 (checked: 20 traces)
       zipkin_first_page   Zipkin's /api/v2/traces?serviceName=frontend&limit=10 (checked: 10)
       duration_gt_1s   { duration > 1s }
       service_error    { resource.service.name = "<service>" } >> { status = error }
       sibling_error    { resource.service.name = "<service>" } ~ { status = error }
       root_errors      {nestedSetParent<0 && status=error}  (Traces Drilldown's list of root spans)
       root_under_root  {nestedSetParent<0} >> {nestedSetParent<0 && status=error}  (matches nothing:
                        every trace's root is a candidate, most of them split over blocks)
       tag_values       /api/v2/search/tag/span.user.id/values
       tag_names        /api/v2/search/tags (every scope)
       tag_services     /api/v2/search/tag/resource.service.name/values
       tag_names_of_service  /api/v2/search/tag/name/values?q={ resource.service.name = "<service>" }
       trace_by_id      `weft loadgen --query-ids` (no time hint), p50/p90/p99
       rate_by_service  { } | rate() by (resource.service.name), /api/metrics/query_range
       errors_rate      { status = error } | rate() by (resource.service.name)
       duration_hist    { } | histogram_over_time(duration)  (Grafana's duration heatmap)
       slow_rate        { duration > 1s } | rate()  (the filter compares the duration with a literal)
       rate_per_count   ({ } | rate() by (service)) / ({ } | count_over_time() by (service))
       route_rate_top5  { } | rate() by (span.http.route) | topk(5)  (a dedicated column)
       user_count       { span.user.id = "user-42" } | count_over_time()  (the attribute blob)
       errors_rate_gt_1 { status = error } | rate() > 1
       root_rate        {nestedSetParent<0 && true} | rate() by(resource.service.name)  (Grafana
                        Traces Drilldown's default view: root spans)
       service_error_rate  { resource.service.name = "<service>" } >> { status = error } | rate()
                        (over whole traces)
       compare_errors   {nestedSetParent<0 && true} | compare({status = error}, 10), one step over
                        the range (Traces Drilldown's comparison tab)
       service_graph    /api/service-graph over the range with the default span budget (the UI's
                        request; "complete" says whether the budget covered the range)
       service_graph_all  the same with maxSpans=50,000,000: every span counted
  5. Print a table and write JSON to --out. Exit 1 if a query answered non-200 or the needle
     was not found (timeouts are reported, not failures, unless --fail-on-timeout).

The server is stopped and its data directory removed on exit, even on failure or Ctrl-C
(--keep-data keeps the directory).
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TENANT = "single-tenant"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


class Server:
    def __init__(self, weft, work_dir, extra, data=None):
        """`data`: an existing data directory to serve (kept by an earlier --keep-data run);
        by default a fresh one in the server's temporary directory."""
        self.dir = tempfile.mkdtemp(prefix="weft-search-bench-", dir=work_dir)
        self.data = data or os.path.join(self.dir, "data")
        self.http, self.grpc, self.otlp_http = free_port(), free_port(), free_port()
        # Jaeger's and Zipkin's query APIs, for their searches.
        self.jaeger_query, self.zipkin = free_port(), free_port()
        self.log_path = os.path.join(self.dir, "weft.log")
        self.log = open(self.log_path, "w")
        cmd = [weft, "--data-dir", self.data, "--listen-host", "127.0.0.1", "--http-port", str(self.http),
               "--otlp-grpc-port", str(self.grpc), "--otlp-http-port", str(self.otlp_http),
               "--jaeger-query-port", str(self.jaeger_query), "--zipkin-port", str(self.zipkin), *extra]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "WEFT_ZIPKIN_PORT": "0", "WEFT_JAEGER_HTTP_PORT": "0", "WEFT_JAEGER_GRPC_PORT": "0", "WEFT_JAEGER_QUERY_PORT": "0", "WEFT_XRAY_PORT": "0",
                                          "WEFT_JAEGER_COMPACT_PORT": "0", "WEFT_JAEGER_BINARY_PORT": "0",
                                          "WEFT_SAMPLING_HTTP_PORT": "0", "WEFT_SAMPLING_GRPC_PORT": "0"})
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weft exited with {self.proc.returncode}:\n{self.tail_log()}")
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ready", timeout=1).status == 200:
                    return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError("weft did not become ready:\n" + self.tail_log())

    def tail_log(self, n=30):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def metric(self, name):
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=30).read().decode()
        total, found = 0.0, False
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
                found = True
        return total if found else None

    def block_metas(self):
        metas = []
        for p in glob.glob(os.path.join(self.data, "blocks", TENANT, "*", "meta.json")):
            try:
                with open(p) as f:
                    metas.append(json.load(f))
            except (OSError, ValueError):
                pass  # being written
        return metas

    def block_spans(self):
        return sum(int(m.get("span_count", 0)) for m in self.block_metas())

    def wait_all_in_blocks(self, spans, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("weft exited while flushing:\n" + self.tail_log())
            if (self.block_spans() >= spans and self.metric("weft_head_spans") == 0
                    and self.metric("weft_flushing_bytes") == 0):
                return True
            time.sleep(0.5)
        return False

    def wait_idle(self, max_wait=600, threshold=0.1):
        """Waits until the server uses less than `threshold` of a core over a second."""
        deadline = time.time() + max_wait
        while time.time() < deadline:
            c0 = cpu_seconds(self.proc.pid)
            time.sleep(1.0)
            if cpu_seconds(self.proc.pid) - c0 < threshold:
                return True
        return False

    def stop(self, keep):
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# What a query inspected: Tempo's `metrics` fields, and weft's block counts from its headers.
WEFT_HEADERS = {"x-weft-inspected-blocks": "inspectedBlocks", "x-weft-skipped-blocks": "skippedBlocks"}


def scan_facts(body, headers):
    """inspectedBytes, inspectedSpans, ... from a reply's `metrics` plus weft's x-weft-* headers."""
    j = json.loads(body)
    j = j if isinstance(j, dict) else {}  # Zipkin's replies are lists
    m = j.get("metrics", {}) or {}
    facts = {k: int(m[k]) for k in ("inspectedBytes", "inspectedSpans", "inspectedTraces", "totalBlocks") if k in m}
    for h, k in WEFT_HEADERS.items():
        if headers.get(h) is not None:
            facts[k] = int(headers[h])
    if "tagValues" in j:
        facts["truncated"] = headers.get("x-weft-tag-values-truncated") == "true"
    return facts


def http_get(url, timeout):
    """GET `url`; returns (status, body bytes or None, wall ms, headers). Raises TimeoutError on
    timeout."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
            return r.status, body, (time.perf_counter() - t0) * 1000, r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), (time.perf_counter() - t0) * 1000, e.headers
    except (socket.timeout, TimeoutError):
        raise TimeoutError()
    except urllib.error.URLError as e:
        if isinstance(e.reason, (socket.timeout, TimeoutError)):
            raise TimeoutError()
        raise


def summarize(ms):
    if not ms:
        return {}
    return {"min_ms": round(min(ms), 1), "p50_ms": round(statistics.median(ms), 1), "max_ms": round(max(ms), 1)}


# Query names to run; empty: all. Others are skipped (no timing). Set by scripts that reuse these
# query lists (bench_parallelism.py --only).
ONLY = set()


def run_query(server, name, path, params, runs, timeout, check=None, measure_timeout=0, port=None):
    """Runs one API query `runs` times (on the HTTP port, or `port`); `check(json)` returns (ok,
    note, facts). After a timeout, with `measure_timeout` > `timeout`, runs it once more with
    that limit to learn how long it takes."""
    if ONLY and name not in ONLY:
        return {"name": name, "path": path, "params": params, "ok": True, "skipped": True}
    url = f"http://127.0.0.1:{port or server.http}{path}?{urllib.parse.urlencode(params)}"
    res = {"name": name, "path": path, "params": params, "runs": [], "status": None, "ok": True}
    ms = []
    for _ in range(runs):
        try:
            status, body, t, headers = http_get(url, timeout)
        except TimeoutError:
            res["timeout"] = True
            res["runs"].append({"timeout_s": timeout})
            print(f"  {name}: timed out after {timeout} s; waiting for the server to go idle", flush=True)
            t0 = time.time()
            res["server_idle_after_timeout"] = server.wait_idle()
            res["server_busy_after_timeout_s"] = round(time.time() - t0, 1)
            if measure_timeout > timeout:
                print(f"  {name}: running it once with a {measure_timeout:.0f} s limit", flush=True)
                try:
                    status, body, t, headers = http_get(url, measure_timeout)
                    once = {"ms": round(t, 1), "status": status}
                    if status == 200:
                        once.update(scan_facts(body, headers))
                    res["untimed_run"] = once
                except TimeoutError:
                    res["untimed_run"] = {"timeout_s": measure_timeout}
                    server.wait_idle()
            break
        res["status"] = status
        run = {"ms": round(t, 1), "status": status}
        if status != 200:
            res["ok"] = False
            res["error"] = body.decode(errors="replace")[:500]
            res["runs"].append(run)
            break
        j = json.loads(body)
        run.update(scan_facts(body, headers))
        if check:
            ok, note, facts = check(j)
            run.update(facts)
            if not ok:
                res["ok"] = False
                res["error"] = note
        res["runs"].append(run)
        ms.append(t)
    res.update(summarize(ms))
    last = next((r for r in reversed(res["runs"]) if "ms" in r), None)
    if last:
        for k, v in last.items():
            if k not in ("ms", "status"):
                res[k] = v
    print(f"  {name}: {fmt_row(res)}", flush=True)
    return res


def fmt_row(r):
    if r.get("timeout") and "p50_ms" not in r:
        return f"TIMEOUT (> {r['runs'][-1]['timeout_s']} s)" + untimed_note(r)
    if not r.get("ok"):
        return f"FAILED ({r.get('status')}): {r.get('error', '')[:120]}"
    s = f"min {r.get('min_ms')} / p50 {r.get('p50_ms')} / max {r.get('max_ms')} ms"
    if "inspectedBytes" in r:
        s += f", inspected {r['inspectedBytes'] / 2**20:.1f} MiB in {r.get('inspectedBlocks')}/{r.get('totalBlocks')} blocks"
    if r.get("timeout"):
        s += " (a later run timed out)"
    return s


def levels(metas):
    """Blocks, spans and bytes per span by compaction level."""
    out = {}
    for m in metas:
        lv = out.setdefault(str(m.get("compaction_level", 0)), {"blocks": 0, "spans": 0, "bytes": 0})
        lv["blocks"] += 1
        lv["spans"] += int(m.get("span_count", 0))
        lv["bytes"] += int(m.get("size_bytes", 0)) + int(m.get("index_bytes", 0))
    for lv in out.values():
        lv["bytes_per_span"] = round(lv["bytes"] / max(1, lv["spans"]), 1)
    return out


def untimed_note(r):
    u = r.get("untimed_run")
    if not u:
        return ""
    if "ms" not in u:
        return f"; also > {u['timeout_s']} s"
    s = f"; once without the limit: {u['ms'] / 1000:.1f} s"
    if "inspectedBytes" in u:
        s += f", inspected {u['inspectedBytes'] / 2**20:.1f} MiB in {u.get('inspectedBlocks')} blocks"
    return s


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024


def parse_args():
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", default=os.path.join(ROOT, "target", "release", "weft"))
    ap.add_argument("--spans", type=int, default=10_000_000)
    ap.add_argument("--out", default="bench-search.json")
    ap.add_argument("--runs", type=int, default=5, help="runs per query (default 5)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds before a query counts as a timeout")
    ap.add_argument("--fail-on-timeout", action="store_true")
    ap.add_argument("--measure-timeouts", type=float, default=0,
                    help="after a timeout, run that query once more with this many seconds allowed (0: don't)")
    ap.add_argument("--time-range-secs", type=int, default=3600)
    ap.add_argument("--needle-every", type=int, default=0,
                    help="span k*N gets user.id=needle-<k> (default: 1,000,000, or spans/10 when fewer)")
    ap.add_argument("--service", default="checkout", help="service of the structural query")
    ap.add_argument("--trace-queries", type=int, default=500, help="trace-by-ID lookups")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--flush-timeout", type=float, default=600)
    ap.add_argument("--work-dir", default=None, help="parent of the temporary data directory")
    ap.add_argument("--keep-data", action="store_true", help="keep the data directory")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra weft server flag (repeatable), e.g. --server-arg=--block-max-bytes=67108864")
    return ap.parse_args()


def describe_run(args, weft, needle_every):
    """The result's header: benchmark, date, machine, configuration, weft version and git state."""
    result = {
        "benchmark": "search over realistic-cardinality spans",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "mem_total_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")},
        "config": {"spans": args.spans, "runs": args.runs, "timeout_s": args.timeout,
                   "time_range_secs": args.time_range_secs, "needle_every": needle_every,
                   "service": args.service, "server_args": args.server_arg, "weft": weft},
    }
    try:
        result["weft_version"] = subprocess.run([weft, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        result["git_rev"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.split("\n")
        result["git_modified_files"] = [line[3:] for line in dirty if line.strip()]
    except Exception:
        pass
    return result


def loadgen_command(args, weft, server, needle_every, ids_path, needles_path):
    """The `weft loadgen --realistic` command that sends the spans, plants the needles and samples
    trace IDs into `ids_path`."""
    spr = 512
    ids_every = max(1, args.spans // spr // 2000)
    load_cmd = [weft, "loadgen", "--realistic", "--endpoint", f"127.0.0.1:{server.grpc}",
                "--max-spans", str(args.spans), "--duration", "86400", "--spans-per-request", str(spr),
                "--concurrency", str(args.concurrency), "--connections", str(args.connections),
                "--time-range-secs", str(args.time_range_secs), "--needle-every", str(needle_every),
                "--needles-out", needles_path, "--ids-out", ids_path, "--ids-every", str(ids_every)]
    if args.seed is not None:
        load_cmd += ["--seed", str(args.seed)]
    return load_cmd


def ingest(server, args, load_cmd, result, failures):
    """Sends the spans, waits until all are in blocks and the server is idle, and records the
    ingest figures in result["ingest"]. Returns when the load started (Unix seconds)."""
    print(f"sending {args.spans:,} spans ...", flush=True)
    load_started = time.time()
    cpu0 = cpu_seconds(server.proc.pid)
    p = subprocess.run(load_cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"loadgen failed ({p.returncode}): {p.stderr.strip()}")
    load = json.loads(p.stdout.strip().splitlines()[-1])
    load_cpu = cpu_seconds(server.proc.pid) - cpu0
    acked = load["spans"]
    print(f"  acknowledged {acked:,} spans in {load['elapsed_s']:.1f} s ({load['spans_per_s']:,.0f} spans/s), "
          f"{load['errors']} errors; waiting for blocks ...", flush=True)
    t_flush = time.time()
    all_in = server.wait_all_in_blocks(acked, args.flush_timeout)
    flush_wait = time.time() - t_flush
    cpu = cpu_seconds(server.proc.pid) - cpu0
    # Let background work (compaction) finish so the disk figures describe settled blocks.
    t_settle = time.time()
    server.wait_idle(max_wait=600)
    settle = time.time() - t_settle
    metas = server.block_metas()
    block_spans = sum(int(m.get("span_count", 0)) for m in metas)
    live_bytes = sum(int(m.get("size_bytes", 0)) + int(m.get("index_bytes", 0)) for m in metas)
    blocks_dir = os.path.join(server.data, "blocks")
    block_bytes = dir_bytes(blocks_dir)
    result["ingest"] = {
        "spans_acknowledged": acked, "load_errors": load["errors"], "load_last_error": load.get("last_error"),
        "load_wall_s": round(load["elapsed_s"], 2), "client_spans_per_s": round(load["spans_per_s"]),
        "request_bytes": load.get("request_bytes"), "otlp_bytes_per_span": load.get("bytes_per_span"),
        "flush_wait_s": round(flush_wait, 1), "all_in_blocks": all_in,
        "ingest_to_blocks_wall_s": round(t_settle - load_started, 1),
        "server_cpu_s_during_load": round(load_cpu, 1), "server_cpu_s_to_blocks": round(cpu, 1),
        "spans_per_server_cpu_s": round(acked / cpu) if cpu else None,
        "settle_wait_s": round(settle, 1),
        "server_cpu_s_incl_settle": round(cpu_seconds(server.proc.pid) - cpu0, 1),
        "peak_rss_mb": round(proc_status(server.proc.pid, "VmHWM") / 2**20, 1),
        "blocks": len(metas), "block_spans": block_spans,
        "spans_per_block_avg": round(block_spans / len(metas)) if metas else 0,
        "live_block_bytes": live_bytes, "blocks_dir_bytes": block_bytes,
        "disk_bytes_per_span": round(live_bytes / max(1, block_spans), 2),
        "blocks_dir_bytes_per_span": round(block_bytes / max(1, acked), 2),
        "wal_bytes_after_settle": dir_bytes(os.path.join(server.data, "wal")),
        "blocks_by_compaction_level": levels(metas),
        "needles": load.get("needles"),
    }
    if not all_in:
        failures.append(f"only {block_spans} of {acked} spans reached blocks within {args.flush_timeout} s")
    i = result["ingest"]
    print(f"  {len(metas)} blocks, {block_spans:,} spans, {human_bytes(live_bytes)} "
          f"({i['disk_bytes_per_span']} B/span), server CPU {i['server_cpu_s_to_blocks']} s, "
          f"peak RSS {i['peak_rss_mb']} MB", flush=True)
    return load_started


def read_needle(needles_path):
    """The needle the queries look for: needle-1 if loadgen planted it, else the first one."""
    needles = []
    with open(needles_path) as f:
        for line in f:
            if line.strip():
                needles.append(json.loads(line))
    if not needles:
        raise RuntimeError("loadgen planted no needles")
    return next((n for n in needles if n["value"] == "needle-1"), needles[0])


def count_traces(j):
    return True, "", {"traces_returned": len(j.get("traces", []))}


def newest_first(j):
    """A first page: `limit` traces, latest start first."""
    traces = j.get("traces", [])
    starts = [int(t.get("startTimeUnixNano", 0)) for t in traces]
    ok = len(traces) == 20 and starts == sorted(starts, reverse=True)
    return ok, f"want 20 traces newest first, got {len(traces)}: {starts[:5]}", {"traces_returned": len(traces)}


def jaeger_first_page(j):
    """Jaeger's search: 20 traces of the service (the UI sorts them itself)."""
    traces = j.get("data") or []
    return len(traces) == 20, f"want 20 traces, got {len(traces)}", {"traces_returned": len(traces)}


def zipkin_first_page(j):
    """Zipkin's search: 10 traces, by trace timestamp, newest first."""
    stamps = [min(s.get("timestamp", 0) for s in t) for t in j]
    ok = len(j) == 10
    return ok, f"want 10 traces, got {len(j)}", {"traces_returned": len(j), "newest_ts": max(stamps, default=0)}


def tag_check(j):
    return True, "", {"values_returned": len(j.get("tagValues", []))}


# What Grafana's query editor asks as it opens and as a filter is typed: every span of
# the range counts (read from columns, weft_engine::tags).
def names_check(j):
    scopes = {s["name"]: len(s.get("tags", [])) for s in j.get("scopes", [])}
    return scopes.get("span", 0) > 0, f"no span attribute names in {scopes}", {"names_per_scope": scopes}


def series_check(j):
    return True, "", {"series_returned": len(j.get("series", []))}


def graph_check(j):
    return (bool(j.get("edges")), "no edges", {"edges": len(j.get("edges", [])), "complete": j.get("complete"),
                                              "calls": sum(e["callCount"] for e in j.get("edges", []))})


def search_queries(server, args, window, needle):
    """The TraceQL searches (needle, structural, root spans) and the tag name and value lookups."""
    queries = []

    def needle_check(j):
        want = needle["trace_id"].lstrip("0")
        got = [t.get("traceID", "").lstrip("0") for t in j.get("traces", [])]
        return want in got, f"needle trace {needle['trace_id']} not in {got[:5]}", {"traces_returned": len(got)}

    q_needle = f'{{ span.user.id = "{needle["value"]}" }}'
    queries.append(run_query(server, "needle", "/api/search", {"q": q_needle, **window, "limit": "20"},
                             args.runs, args.timeout, needle_check, args.measure_timeouts))
    ns = needle["start_unix_nano"] // 10**9
    queries.append(run_query(server, "needle_narrow", "/api/search",
                             {"q": q_needle, "start": str(ns - 300), "end": str(ns + 300), "limit": "20"},
                             args.runs, args.timeout, needle_check, args.measure_timeouts))
    # First pages: what a search with a common match costs before it can show 20 traces.
    for name, q in [("first_page_all", "{ }"), ("first_page_service", '{ resource.service.name = "frontend" }'),
                    ("first_page_status", "{ span.http.status_code = 500 }")]:
        queries.append(run_query(server, name, "/api/search", {"q": q, **window, "limit": "20"},
                                 args.runs, args.timeout, newest_first, args.measure_timeouts))
    # Jaeger's and Zipkin's searches of one service: their own rules and order (Jaeger's newest
    # first by start, so it stops early; Zipkin's by the root span's timestamp, read in full).
    s_us, e_us = int(window["start"]) * 10**6, int(window["end"]) * 10**6
    queries.append(run_query(server, "jaeger_first_page", "/api/traces",
                             {"service": "frontend", "limit": "20", "start": str(s_us), "end": str(e_us)},
                             args.runs, args.timeout, jaeger_first_page, args.measure_timeouts,
                             port=server.jaeger_query))
    queries.append(run_query(server, "zipkin_first_page", "/api/v2/traces",
                             {"serviceName": "frontend", "limit": "10", "endTs": str(e_us // 1000),
                              "lookback": str((e_us - s_us) // 1000)},
                             args.runs, args.timeout, zipkin_first_page, args.measure_timeouts, port=server.zipkin))
    queries.append(run_query(server, "duration_gt_1s", "/api/search",
                             {"q": "{ duration > 1s }", **window, "limit": "20"}, args.runs, args.timeout,
                             count_traces, args.measure_timeouts))
    queries.append(run_query(server, "service_error", "/api/search",
                             {"q": f'{{ resource.service.name = "{args.service}" }} >> {{ status = error }}',
                              **window, "limit": "20"}, args.runs, args.timeout, count_traces, args.measure_timeouts))
    # The sibling operator: error spans next to a span of the service.
    queries.append(run_query(server, "sibling_error", "/api/search",
                             {"q": f'{{ resource.service.name = "{args.service}" }} ~ {{ status = error }}',
                              **window, "limit": "20"}, args.runs, args.timeout, count_traces, args.measure_timeouts))
    # Root spans in error, as Grafana's Traces Drilldown lists them, and a structural query
    # over root spans that matches nothing (every trace's root is a candidate).
    queries.append(run_query(server, "root_errors", "/api/search",
                             {"q": "{nestedSetParent<0 && status=error}", **window, "limit": "20"},
                             args.runs, args.timeout, count_traces, args.measure_timeouts))
    queries.append(run_query(server, "root_under_root", "/api/search",
                             {"q": "{nestedSetParent<0} >> {nestedSetParent<0 && status=error}", **window,
                              "limit": "20"}, args.runs, args.timeout, count_traces, args.measure_timeouts))

    queries.append(run_query(server, "tag_values", "/api/v2/search/tag/span.user.id/values", dict(window),
                             args.runs, args.timeout, tag_check, args.measure_timeouts))
    queries.append(run_query(server, "tag_names", "/api/v2/search/tags", dict(window),
                             args.runs, args.timeout, names_check, args.measure_timeouts))
    queries.append(run_query(server, "tag_services", "/api/v2/search/tag/resource.service.name/values",
                             dict(window), args.runs, args.timeout, tag_check, args.measure_timeouts))
    queries.append(run_query(server, "tag_names_of_service", "/api/v2/search/tag/name/values",
                             {"q": f'{{ resource.service.name = "{args.service}" }}', **window},
                             args.runs, args.timeout, tag_check, args.measure_timeouts))
    return queries


def trace_by_id(server, args, weft, ids_path):
    """Trace by ID, no time hint: `weft loadgen --query-ids` over the sampled IDs."""
    tq = {"name": "trace_by_id", "path": "/api/traces/<id>", "ok": True}
    try:
        p = subprocess.run([weft, "loadgen", "--query-ids", ids_path, "--query-http", f"127.0.0.1:{server.http}",
                            "--queries", str(args.trace_queries)], capture_output=True, text=True,
                           timeout=max(args.timeout, 600))
        if p.returncode != 0:
            tq.update(ok=False, error=p.stderr.strip()[:500])
        else:
            q = json.loads(p.stdout.strip().splitlines()[-1])
            tq.update(q)
            if q.get("not_found"):
                tq.update(ok=False, error=f"{q['not_found']} of {q['queries']} trace IDs not found")
    except subprocess.TimeoutExpired:
        tq.update(timeout=True)
    with open(ids_path) as f:
        tq["ids_sampled"] = sum(1 for line in f if line.strip())
    print(f"  trace_by_id: " + (f"p50 {tq.get('p50_ms', 0):.2f} / p90 {tq.get('p90_ms', 0):.2f} / "
                                 f"p99 {tq.get('p99_ms', 0):.2f} / max {tq.get('max_ms', 0):.2f} ms over "
                                 f"{tq.get('queries')} lookups" if tq["ok"] and not tq.get("timeout")
                                 else f"FAILED {tq.get('error', 'timeout')}"), flush=True)
    return tq


def metrics_queries(server, args, window, start, end):
    """The TraceQL metrics queries (/api/metrics/query_range), about 60 steps over the range."""
    queries = []
    step = max(60, (end - start) // 60)
    queries.append(run_query(server, "rate_by_service", "/api/metrics/query_range",
                             {"q": "{ } | rate() by (resource.service.name)", **window, "step": f"{step}s"},
                             args.runs, args.timeout, series_check, args.measure_timeouts))
    for name, q in [("errors_rate", "{ status = error } | rate() by (resource.service.name)"),
                    ("duration_hist", "{ } | histogram_over_time(duration)"),
                    ("slow_rate", "{ duration > 1s } | rate()"),
                    # Tempo's metrics forms: arithmetic between queries, topk, a comparison.
                    ("rate_per_count", "({ } | rate() by (resource.service.name)) / "
                                       "({ } | count_over_time() by (resource.service.name))"),
                    ("route_rate_top5", "{ } | rate() by (span.http.route) | topk(5)"),
                    # A span attribute kept in the attribute blob (1,000,000 users):
                    # picked out of every span's blob.
                    ("user_count", '{ span.user.id = "user-42" } | count_over_time()'),
                    ("errors_rate_gt_1", "{ status = error } | rate() > 1"),
                    # Grafana Traces Drilldown's default view selects root spans this way.
                    ("root_rate", "{nestedSetParent<0 && true} | rate() by(resource.service.name)"),
                    # Over whole traces: the errors below the service's spans.
                    ("service_error_rate", f'{{ resource.service.name = "{args.service}" }} >> '
                                           '{ status = error } | rate()')]:
        queries.append(run_query(server, name, "/api/metrics/query_range",
                                 {"q": q, **window, "step": f"{step}s"},
                                 args.runs, args.timeout, series_check, args.measure_timeouts))
    # Traces Drilldown's comparison tab: every attribute of every root span counted, in the
    # selection (errors) or the baseline, over one step as wide as the range.
    queries.append(run_query(server, "compare_errors", "/api/metrics/query_range",
                             {"q": "{nestedSetParent<0 && true} | compare({status = error}, 10)", **window,
                              "step": f"{max(1, end - start)}s"},
                             args.runs, args.timeout, series_check, args.measure_timeouts))
    return queries


def graph_queries(server, args, window):
    """The graph page's request (server default span budget), and the whole range counted."""
    return [
        run_query(server, "service_graph", "/api/service-graph", dict(window),
                  args.runs, args.timeout, graph_check, args.measure_timeouts),
        run_query(server, "service_graph_all", "/api/service-graph",
                  {**window, "maxSpans": "50000000"},
                  args.runs, args.timeout, graph_check, args.measure_timeouts),
    ]


def bench(server, args, weft, needle_every, result, failures):
    """Loads the spans into `server`, then runs every query; fills `result` and `failures`."""
    result["config"]["server_cmd"] = server.cmd
    print(f"weft on :{server.http} (grpc :{server.grpc}), data in {server.data}", flush=True)
    ids_path = os.path.join(server.dir, "ids.txt")
    needles_path = os.path.join(server.dir, "needles.jsonl")
    load_cmd = loadgen_command(args, weft, server, needle_every, ids_path, needles_path)
    result["config"]["loadgen_cmd"] = load_cmd

    # ---- ingest ----
    load_started = ingest(server, args, load_cmd, result, failures)
    needle = read_needle(needles_path)
    result["needle"] = needle

    # ---- queries ----
    start = int(load_started) - args.time_range_secs - 120
    end = int(time.time()) + 60
    window = {"start": str(start), "end": str(end)}
    server.wait_idle(max_wait=120)
    result["blocks_before_queries"] = levels(server.block_metas())
    print(f"  blocks by compaction level: {result['blocks_before_queries']}", flush=True)
    print(f"queries over [{start}, {end}] ({end - start} s), {args.runs} runs each:", flush=True)
    queries = []
    queries.extend(search_queries(server, args, window, needle))
    queries.append(trace_by_id(server, args, weft, ids_path))
    queries.extend(metrics_queries(server, args, window, start, end))
    queries.extend(graph_queries(server, args, window))
    result["queries"] = queries
    result["blocks_after_queries"] = levels(server.block_metas())
    result["server_peak_rss_mb_after_queries"] = round(proc_status(server.proc.pid, "VmHWM") / 2**20, 1)

    for q in queries:
        if not q.get("ok"):
            failures.append(f"{q['name']}: {q.get('error') or q.get('status')}")
        elif q.get("timeout") and args.fail_on_timeout:
            failures.append(f"{q['name']}: timeout")


def main():
    args = parse_args()

    weft = os.path.abspath(args.weft)
    if not os.access(weft, os.X_OK):
        sys.exit(f"no weft binary at {weft}; build it with cargo build --release -p weft-server")
    needle_every = args.needle_every or min(1_000_000, max(1, args.spans // 10))

    # SIGTERM/SIGHUP raise SystemExit so the finally clause stops the server.
    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    result = describe_run(args, weft, needle_every)
    failures = []
    server = None
    try:
        server = Server(weft, args.work_dir, args.server_arg)
        bench(server, args, weft, needle_every, result, failures)
    except (Exception, KeyboardInterrupt) as e:
        failures.append(f"{type(e).__name__}: {e}")
        if server:
            result["server_log_tail"] = server.tail_log()
    finally:
        if server:
            server.stop(args.keep_data)
            if args.keep_data:
                result["data_dir"] = server.dir

    result["failures"] = failures
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print_table(result)
    print(f"\nwrote {args.out}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


def print_table(r):
    i = r.get("ingest")
    print()
    if i:
        print(f"Ingest: {i['spans_acknowledged']:,} spans in {i['load_wall_s']} s "
              f"({i['client_spans_per_s']:,} spans/s; {i['ingest_to_blocks_wall_s']} s until all in blocks), "
              f"server CPU {i['server_cpu_s_to_blocks']} s ({i['spans_per_server_cpu_s']:,} spans per CPU s), "
              f"peak RSS {i['peak_rss_mb']} MB")
        print(f"Disk:   {i['blocks']} live blocks, {human_bytes(i['live_block_bytes'])} = {i['disk_bytes_per_span']} B/span "
              f"(blocks dir {i['blocks_dir_bytes_per_span']} B/span); OTLP request {i['otlp_bytes_per_span']} B/span; "
              f"by compaction level {i['blocks_by_compaction_level']}")
    qs = r.get("queries", [])
    if not qs:
        return
    print()
    hdr = f"{'query':<17} {'min ms':>9} {'p50 ms':>9} {'max ms':>9} {'inspected':>11} {'blocks':>9}  result"
    print(hdr)
    print("-" * len(hdr))
    for q in qs:
        if q["name"] == "trace_by_id":
            if q.get("ok") and not q.get("timeout"):
                print(f"{'trace_by_id':<17} {'p50':>9} {q['p50_ms']:>9.2f} {'p99':>9} {q['p99_ms']:>9.2f} ms {'':>5}  "
                      f"{q['queries']} lookups, {q.get('spans_returned', 0):,} spans, max {q['max_ms']:.1f} ms")
            else:
                print(f"{'trace_by_id':<17} FAILED {q.get('error', 'timeout')}")
            continue
        if not q.get("ok"):
            print(f"{q['name']:<17} FAILED ({q.get('status')}) {q.get('error', '')[:80]}")
            continue
        if "p50_ms" not in q:
            print(f"{q['name']:<17} {'TIMEOUT':>9} (> {q['runs'][-1]['timeout_s']} s){untimed_note(q)}")
            continue
        res = ", ".join(f"{k}={q[k]}" for k in ("traces_returned", "values_returned", "truncated", "series_returned")
                        if k in q)
        if q.get("timeout"):
            res += " (a later run timed out)"
        insp = human_bytes(q["inspectedBytes"]) if "inspectedBytes" in q else "-"
        blocks = f"{q.get('inspectedBlocks', '-')}/{q.get('totalBlocks', '-')}"
        print(f"{q['name']:<17} {q['min_ms']:>9.1f} {q['p50_ms']:>9.1f} {q['max_ms']:>9.1f} {insp:>11} {blocks:>9}  {res}")


if __name__ == "__main__":
    main()
