#!/usr/bin/env bash
# Runs the JMH benchmarks (benchmarks/, JMH 1.37 with the GC profiler) with weft beside the
# OpenTelemetry Java SDK 1.68.0 and the AWS X-Ray SDK for Java 2.18.2 in the same run, and prints
# one table: scenario, weft ns/op, the other SDK's ns/op, the ratio, and B/op of each.
# Short runs by default (1 fork, 2 x 1 s warm-up, 3 x 1 s measurement: the machine has 2 cores and
# is shared); JMH_ARGS overrides them, and extra arguments are JMH benchmark filters.
set -euo pipefail
cd "$(dirname "$0")"
mvn -B -ntp -q package -DskipTests -pl benchmarks -am
mkdir -p target
out=target/jmh.json
# shellcheck disable=SC2086
java -jar benchmarks/target/benchmarks.jar ${JMH_ARGS:--f 1 -wi 2 -w 1s -i 3 -r 1s} -prof gc \
    -rf json -rff "$out" "$@" | tee target/jmh.log | grep -E '^(Benchmark|[A-Z][A-Za-z]+Bench\.)' \
    | grep -v -E 'gc\.(count|time|churn)' || true
python3 - "$out" <<'PY'
import json, sys
rows = {}
for r in json.load(open(sys.argv[1])):
    name = r["benchmark"].rsplit(".", 1)[1]
    ns = r["primaryMetric"]["score"]
    b = r.get("secondaryMetrics", {}).get("gc.alloc.rate.norm", {}).get("score")
    rows[name] = (ns, b)
pairs = []
for name in rows:
    for suffix, other in (("_weft", "_otel"), ("_weft_api", "_otel"), ("_weft", "_aws"),
                          ("_weft_header", "_aws"), ("_weft_buffer", "_aws")):
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            o = base + other
            if o in rows:
                label = base + ("" if suffix == "_weft" else " (" + suffix[1:] + ")")
                pairs.append((label, other[1:], rows[name], rows[o]))
head = ("scenario", "vs", "weft ns/op", "other ns/op", "ratio", "weft B/op", "other B/op")
fmt_b = lambda b: "-" if b is None else f"{b:.0f}"
table = [(l, vs, f"{w[0]:.1f}", f"{o[0]:.1f}", f"{w[0] / o[0]:.3f}", fmt_b(w[1]), fmt_b(o[1]))
         for l, vs, w, o in pairs]
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
PY
