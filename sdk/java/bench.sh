#!/usr/bin/env bash
# Runs the JMH benchmarks (benchmarks/, JMH 1.37 with the GC profiler) with weft beside the
# OpenTelemetry Java SDK 1.68.0 and the AWS X-Ray SDK for Java 2.18.2 in the same run, and prints
# one table: scenario, weft ns/op, the other SDK's ns/op, the ratio, B/op of each, the target and
# whether it is met, and the spans the export queue dropped per op. Below it, FloorBench's lower
# bound for each sampled span scenario as a fraction of OpenTelemetry's time in the same run.
#
# Two passes: the headline rows (the scenarios with a target) with 2 forks x 5 x 1 s measurement
# after 3 x 1 s warm-up (HEADLINE_ARGS), and the other rows with 1 fork x 3 x 1 s after 2 x 1 s
# (JMH_ARGS): the machine has 2 cores and is shared. Extra arguments are JMH benchmark filters
# and run a single pass with JMH_ARGS.
set -euo pipefail
cd "$(dirname "$0")"
mvn -B -ntp -q package -DskipTests -pl benchmarks -am
mkdir -p target
rm -f target/jmh-*.json target/jmh-*.log
headline='SpanBench\.(span_sampled|export_queue)|FloorBench|TraceparentBench\.traceparent_extract|XrayBench\.xray_parse'
run() { # name, args, filters...
    local name=$1 args=$2
    shift 2
    # shellcheck disable=SC2086
    java -jar benchmarks/target/benchmarks.jar $args -prof gc -rf json -rff "target/jmh-$name.json" \
        "$@" | tee "target/jmh-$name.log" | grep -E '^(Benchmark|[A-Z][A-Za-z]+Bench\.)' \
        | grep -v -E 'gc\.(count|time|churn)|gc\.alloc\.rate  ' || true
}
if [ $# -gt 0 ]; then
    run filtered "${JMH_ARGS:--f 1 -wi 2 -w 1s -i 3 -r 1s}" "$@"
else
    run headline "${HEADLINE_ARGS:--f 2 -wi 3 -w 1s -i 5 -r 1s}" "$headline"
    run other "${JMH_ARGS:--f 1 -wi 2 -w 1s -i 3 -r 1s}" -e "$headline"
fi
python3 - target/jmh-*.json <<'PY'
import json, re, sys
rows = {}
drops = {}
for path in sys.argv[1:]:
    for r in json.load(open(path)):
        name = r["benchmark"].rsplit(".", 1)[1]
        pm = r["primaryMetric"]
        b = r.get("secondaryMetrics", {}).get("gc.alloc.rate.norm", {}).get("score")
        err = pm.get("scoreError")
        rows[name] = (pm["score"], b, err if isinstance(err, float) else float("nan"))
    # SPAN_DROPS lines follow the "# Benchmark:" header of the fork that printed them
    current = None
    for line in open(path[:-4] + "log", errors="replace"):
        m = re.match(r"# Benchmark: \S+\.(\w+)$", line.strip())
        if m:
            current = m.group(1)
        m = re.match(r"SPAN_DROPS (\d+) (\d+)", line.strip())
        if m and current:
            d, s = drops.get(current, (0, 0))
            drops[current] = (d + int(m.group(1)), s + int(m.group(2)))
targets = {"span_sampled_0_attrs": 1 / 3, "span_sampled_4_attrs": 1 / 3,
           "span_sampled_10_attrs_1_event": 1 / 3, "traceparent_extract": 1 / 3,
           "traceparent_extract (weft_api)": 1 / 2, "xray_parse": 1 / 3,
           "xray_parse (weft_header)": 1 / 3}
pairs = []
for name in rows:
    for suffix, other in (("_weft", "_otel"), ("_weft_api", "_otel"), ("_weft", "_aws"),
                          ("_weft_header", "_aws"), ("_weft_header", "_aws_header"),
                          ("_weft_buffer", "_aws")):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            o = base + other
            if o in rows:
                label = base + ("" if suffix == "_weft" else " (" + suffix[1:] + ")")
                if other == "_aws_header":
                    label = base + " (header vs header)"
                pairs.append((label, other[1:], name, o))
def fmt_drops(n):
    if n not in drops:
        return "-"
    d, s = drops[n]
    return "0" if d == 0 else f"{d / max(s, 1):.2g}"
head = ("scenario", "vs", "weft ns/op", "other ns/op", "ratio", "weft B/op", "other B/op",
        "target", "met", "drops/op weft", "drops/op other")
fmt_b = lambda b: "-" if b is None else f"{b:.0f}"
table = []
for label, vs, wn, on in sorted(pairs):
    w, o = rows[wn], rows[on]
    ratio = w[0] / o[0]
    t = targets.get(label)
    met = "-" if t is None else ("yes" if ratio <= t else "no")
    ns = lambda x: f"{x[0]:.1f}" if x[2] != x[2] else f"{x[0]:.1f} ± {x[2]:.1f}"
    table.append((label, vs, ns(w), ns(o),
                  f"{ratio:.2f}", fmt_b(w[1]), fmt_b(o[1]), "-" if t is None else f"≤ {t:.2f}",
                  met, fmt_drops(wn), fmt_drops(on)))
widths = [max(len(r[i]) for r in table + [head]) for i in range(len(head))]
line = lambda r: "| " + " | ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i])
                                   for i, c in enumerate(r)) + " |"
print()
print(line(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in table:
    print(line(r))
for name in ("clock_nano_time", "lock_uncontended"):
    if name in rows:
        print(f"{name}: {rows[name][0]:.1f} ns/op")
# FloorBench: what any SDK must do for a sampled span scenario, beside OpenTelemetry's time
for name in sorted(rows):
    if name.startswith("floor_") and name[len("floor_"):] + "_otel" in rows:
        scenario = name[len("floor_"):]
        f, o = rows[name][0], rows[scenario + "_otel"][0]
        w = rows.get(scenario + "_weft", (float("nan"),))[0]
        print(f"{name}: {f:.1f} ns/op = {f / o:.2f} of OpenTelemetry's {scenario} "
              f"(weft {w / o:.2f}, {w - f:.1f} ns above it)")
PY
