#!/usr/bin/env bash
# Runs the weft vs opentelemetry_sdk benchmarks (benches/sdk.rs) and prints one table:
# scenario, weft ns/op, otel ns/op, ratio weft/otel, allocations per op of each.
# ns/op is criterion's median estimate: thread CPU time for the single-thread scenarios (so other
# load on the machine does not skew them), wall-clock time for the two export_queue scenarios;
# WEFT_BENCH_CLOCK=wall times everything in wall-clock time. Allocations are counted on the
# benchmark thread by the bench's counting global allocator. Extra arguments go to criterion
# (e.g. a name filter).
set -euo pipefail
cd "$(dirname "$0")"
log=target/bench-sdk.log
mkdir -p target
nice -n 15 cargo bench --bench sdk -- "$@" 2>&1 | tee "$log" | grep -E '^(ALLOCS|WEFT_STATS)|time:' || true
python3 - "$log" <<'PY'
import json, os, sys, re
allocs = {}
for line in open(sys.argv[1]):
    m = re.match(r"ALLOCS (\S+)/(\S+) ([0-9.]+)", line)
    if m:
        allocs[(m.group(1), m.group(2))] = float(m.group(3))
root = "target/criterion"
def median(group, impl):
    p = os.path.join(root, group, impl, "new", "estimates.json")
    if not os.path.exists(p):
        return None
    return json.load(open(p))["median"]["point_estimate"]
order = ["id_trace_id", "traceparent_extract", "traceparent_inject", "span_unsampled",
         "span_sampled_0_attrs", "span_sampled_4_attrs", "span_sampled_10_attrs_1_event",
         "export_queue_1_thread", "export_queue_2_thread"]
rows = []
for g in order:
    for impl in ["weft", "weft_api"]:
        w, o = median(g, impl), median(g, "otel")
        if w is None or o is None:
            continue
        name = g if impl == "weft" else g + " (TextMapPropagator)"
        a = lambda k: "-" if k not in allocs else f"{allocs[k]:.2f}"
        rows.append((name, f"{w:.1f}", f"{o:.1f}", f"{w / o:.2f}", a((g, impl)), a((g, "otel"))))
head = ("scenario", "weft ns/op", "otel ns/op", "ratio", "weft allocs/op", "otel allocs/op")
widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
fmt = lambda r: "| " + " | ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)) + " |"
print()
print("clock:", "wall-clock" if os.environ.get("WEFT_BENCH_CLOCK") == "wall" else "thread CPU time (export_queue_*: wall-clock)")
print(fmt(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in rows:
    print(fmt(r))
PY
