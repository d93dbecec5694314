#!/usr/bin/env bash
# Benchmarks weft_sdk beside the official OpenTelemetry Python SDK in the same run (pyperf), on a
# release build of the native core, plus Python heap bytes per operation (tracemalloc).
# Results: target/bench/results.json, target/bench/allocs.json, and the table on stdout
# (copy it into BENCHMARKS.md with the date and machine).
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
[[ -x $VENV/bin/python ]] || { echo "run scripts/sdk-python.sh build first" >&2; exit 1; }
mkdir -p target/bench
nice -n 10 "$VENV/bin/maturin" build --release -q -o target/bench/wheel -i "$VENV/bin/python"
"$VENV/bin/pip" install -q --force-reinstall --no-deps target/bench/wheel/weft_sdk-*.whl
rm -f target/bench/results.json
(cd bench && ../$VENV/bin/python bench.py -o ../target/bench/results.json)
(cd bench && ../$VENV/bin/python allocs.py > ../target/bench/allocs.json)
"$VENV/bin/python" bench/report.py target/bench/results.json target/bench/allocs.json
