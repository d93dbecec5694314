#!/usr/bin/env bash
# Benchmarks: ingest throughput per core of server CPU, peak RSS, bytes per stored span and
# trace-by-ID latency, driven by `weft loadgen` and confirmed with telemetrygen. The OpenTelemetry
# Collector (OTLP receiver into the `nop` exporter, built by scripts/otelcol.sh) takes the same
# load in the same run, so throughput is also reported as ratio_vs_collector, which the shared
# host's speed drift cancels out of: weft and the Collector run in turn 3 times and the median
# of the 3 pairs' ratios is reported (arguments to this script go to bench_ingest.py and override
# that, e.g. `--rounds 5`). Results go to bench-out/ and are recorded by hand: each run, dated and
# with the method, in docs/benchmarks/, and a changed standing figure in BENCHMARKS.md's table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build_ui.sh
cargo build --release -p weft-server
bash scripts/test-deps.sh
bash scripts/otelcol.sh
mkdir -p bench-out
python3 scripts/bench_ingest.py --weft target/release/weft --telemetrygen .tools/bin/telemetrygen \
    --otelcol .tools/bin/otelcol-bench --rounds 3 --out bench-out/ingest.json "$@"
# What adaptive sampling's counting of root spans costs ingest: the same load with counting on
# and off, in turn (spec/sampling.md, "The server side").
python3 scripts/bench_sampling.py --weft target/release/weft --out bench-out/sampling.json
# The same cost isolated: validating a 512-span request, with and without counting its roots.
cargo run --release -q -p weft-sampling --example count_cost | tee bench-out/sampling_count_cost.json
# All-in cost per span (until quiescent: blocks cut, compactions done) under loadgen,
# telemetrygen and realistic-span loads, beside the Collector into nop
# (docs/benchmarks/all-in-cost-and-compaction.md, "All-in cost per span" and "All-in with
# realistic spans").
.venv/bin/python scripts/bench_allin.py --weft target/release/weft --out bench-out/allin.json
# The CPU of merging head blocks until quiescent, for loadgen's, telemetrygen's and realistic
# spans (docs/benchmarks/all-in-cost-and-compaction.md, "2026-11-26: the merge 3.6× cheaper, and
# all of it counted" and "Compaction of realistic spans"). Pass a BASE binary to compare side by
# side: scripts/bench_compaction.py --weft target/release/weft --base <other weft>.
.venv/bin/python scripts/bench_compaction.py --weft target/release/weft --out bench-out/compaction.json
# Zipkin v2 JSON into weft beside the real Zipkin server and weft's own OTLP/HTTP
# (docs/benchmarks/receivers-zipkin-jaeger-xray.md, "Zipkin receiver beside the real Zipkin
# server" and "The Zipkin benchmark corrected"): fresh trace IDs and current span times
# per request, every window's last traces read back, a 60 s warm-up; spans per CPU-second at 4 and 8
# clients, median of interleaved rounds, pooled and whole-run.
.venv/bin/python scripts/bench_zipkin.py --weft target/release/weft --out bench-out/zipkin.json
# Jaeger thrift over HTTP beside the real Jaeger v2, and X-Ray UDP, each beside weft's own
# OTLP/HTTP with the same spans (docs/benchmarks/receivers-zipkin-jaeger-xray.md, "Jaeger and
# X-Ray receivers").
.venv/bin/python scripts/bench_jaeger_xray.py --weft target/release/weft --out bench-out/jaeger_xray.json
# Cluster mode: distributor, block builder (blocks in s3proxy) and a real Kafka broker beside the
# single binary on the same loadgen load (docs/benchmarks/cluster.md).
# Each round runs the single binary, then a cluster per record-batch compression (none, lz4, zstd);
# in each, a querier tailing the topic and two live stores read the same load (their CPU per span);
# each compression runs again over TLS with SASL SCRAM-SHA-512 (<compression>+tls: TLS's cost).
.venv/bin/python scripts/bench_cluster.py --weft target/release/weft --live-stores --tls --out bench-out/cluster.json
# Compaction's write amplification over an hour of steady load, beside the previous policy
# (docs/benchmarks/all-in-cost-and-compaction.md, "Compaction write amplification";
# docs/adr/0007-size-tiered-compaction.md).
cargo run --release -q -p weft-db --example compaction_sim | tee bench-out/compaction_sim.jsonl
# Per-stage CPU per span (scan, head build, block encode), single-threaded, best of 5.
target/release/weft loadgen --stages | tee bench-out/stages.json
# Rust SDK beside opentelemetry_sdk (results in sdk/rust/BENCHMARKS.md).
bash scripts/sdk-rust.sh bench
bash scripts/sdk-java.sh bench
# Go SDK beside the OpenTelemetry Go SDK (results in sdk/go/BENCHMARKS.md).
bash scripts/sdk-go.sh bench
# Python SDK beside the OpenTelemetry Python SDK (results in sdk/python/BENCHMARKS.md).
bash scripts/sdk-python.sh bench
# Search over 10 million realistic spans (docs/benchmarks/search.md, "Search over 10 million
# spans"): each query's latency over the whole range; a query over 120 s is recorded as a timeout.
python3 scripts/bench_search.py --weft target/release/weft --spans "${SEARCH_SPANS:-10000000}" \
    --out bench-out/search.json
# One query on every core (docs/benchmarks/query-parallelism.md): the same queries on the same
# spans with --query-parallelism 1 and with the machine's cores, alternating.
python3 scripts/bench_parallelism.py --weft target/release/weft --spans "${SEARCH_SPANS:-10000000}" \
    --out bench-out/parallelism.json
# One search over many queriers (docs/benchmarks/query-frontend.md): CPU per querier per search
# with 1, 2 and 4 queriers behind a frontend, against one querier alone; then on the same spans
# with one job at a time over all queriers, which do not then slow each other as queriers
# sharing this machine's cores do (what each would spend on a machine of its own).
python3 scripts/bench_frontend.py --weft target/release/weft --spans "${SEARCH_SPANS:-10000000}" \
    --keep-data --out bench-out/frontend.json
kept="$(python3 -c 'import json; print(json.load(open("bench-out/frontend.json"))["data_dir"])')"
python3 scripts/bench_frontend.py --weft target/release/weft --data-dir "$kept" --one-job-at-a-time \
    --out bench-out/frontend-one-job-at-a-time.json
rm -rf "$kept"
# The web UI opens a 100,000-span trace within 3 seconds on the release binary, and each of its
# views (statistics, flame graph, service graph, zoom) within 1 second (BENCHMARKS.md, "Also
# standing"); the times are printed.
WEFT_BIN="$PWD/target/release/weft" WEFT_UI_OPEN_BUDGET_MS=3000 WEFT_UI_VIEW_BUDGET_MS=1000 \
    bash scripts/test-ui.sh --test-name-pattern="100,000-span" | tee bench-out/ui.tap
# Soak (docs/benchmarks/soak.md): 10 minutes of mixed ingest and queries with kill -9 every 90 s,
# a full disk every 120 s and hostile clients; peak RSS, ingest latency percentiles and
# acknowledged vs read-back spans. Needs root (mounts a tmpfs as the data directory).
.venv/bin/python scripts/bench_soak.py --weft target/release/weft --seconds "${SOAK_SECONDS:-600}" \
    --out bench-out/soak.json
