#!/usr/bin/env bash
# Benchmarks of the Go SDK beside the OpenTelemetry Go SDK, in one `go test -bench` run
# (bench_test.go): every benchmark has a /weft and an /otel variant doing the same work through
# the go.opentelemetry.io/otel/trace API. The test binary is built once and run COUNT times
# (default 5), each run going through every benchmark once (BENCHTIME each, default 2 s), so
# that weft and OpenTelemetry alternate within minutes of each other on a shared machine; the table printed at the end has
# the median ns/op, B/op and allocs/op of each, and weft's time as a ratio of OpenTelemetry's.
# Raw output goes to ../../bench-out/sdk-go.txt. Record results in BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")"
out=../../bench-out/sdk-go.txt
mkdir -p ../../bench-out
bin=$(mktemp -d)/sdk-go.test
# The weftbench tag adds the network benchmarks (bench_network_test.go), which need the
# OpenTelemetry OTLP exporters; the test stage does not build them.
go test -tags weftbench -c -o "$bin" .
: > "$out"
for i in $(seq "${COUNT:-5}"); do
    echo "== round $i" | tee -a "$out"
    "$bin" -test.run '^$' -test.bench 'IDGeneration|Traceparent|SpanStartEnd|SpanToExporter|SpanToNetwork|OTLPEncode|HandleShape' \
        -test.benchtime "${BENCHTIME:-2s}" -test.benchmem -test.timeout 60m | tee -a "$out"
    # Loopback HTTP is noisy on a shared machine: 3 s per SDK instead of 1 s.
    "$bin" -test.run '^$' -test.bench 'OtelhttpHandler' -test.benchtime 3s -test.benchmem \
        -test.timeout 60m | tee -a "$out"
done
rm -rf "$(dirname "$bin")"
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$', line)
    if not m:
        continue
    fields = m.group(3).split()
    vals = {fields[i + 1]: float(fields[i]) for i in range(0, len(fields) - 1, 2)}
    rows.setdefault(m.group(1), []).append(vals)
def med(name, unit):
    xs = [r[unit] for r in rows.get(name, []) if unit in r]
    return statistics.median(xs) if xs else None
print(f"\n{'benchmark':60} {'ns/op':>10} {'B/op':>7} {'allocs':>7} {'weft/otel':>9}")
for name in rows:
    ns, b, a = med(name, 'ns/op'), med(name, 'B/op'), med(name, 'allocs/op')
    ratio, cpu_ratio = '', ''
    if '/weft' in name:
        for other in ('/otel', '/official-proto'):
            peer = re.sub(r'/weft(?=$|-)', other, name)
            if med(peer, 'ns/op'):
                ratio = f"{ns / med(peer, 'ns/op'):.2f}"
            if med(peer, 'cpu-ns/op') and med(name, 'cpu-ns/op'):
                cpu_ratio = f" cpu-weft/otel={med(name, 'cpu-ns/op') / med(peer, 'cpu-ns/op'):.2f}"
    fmt = lambda v: f"{v:.0f}" if v >= 100 else f"{v:.3g}"
    extra = ' '.join(f"{u}={fmt(med(name, u))}" for u in ('mallocs/op', 'cpu-ns/op', 'dropped', 'dropped/op', 'req/s', 'p99-µs', 'GC/10k-req', 'ns/span', 'gzip-B/span', 'proto-B/span') if med(name, u) is not None)
    print(f"{name:60} {ns:10.1f} {b:7.0f} {a:7.0f} {ratio:>9} {extra}{cpu_ratio}")
PY
