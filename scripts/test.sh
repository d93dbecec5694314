#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests, then the end-to-end suite that drives the
# real `weft` binary with real OpenTelemetry clients, telemetrygen and DuckDB.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

echo "== spec vectors are well-formed and self-consistent"
python3 scripts/check_vectors.py

echo "== lint"
bash scripts/lint.sh

echo "== rust tests"
cargo test --workspace

echo "== build the weft binary for end-to-end tests"
cargo build -p weft-server
export WEFT_BIN="$PWD/target/debug/weft"

echo "== install test dependencies"
bash scripts/test-deps.sh

echo "== end-to-end tests"
.venv/bin/python -m pytest tests/integration -q -p no:cacheprovider

echo "== sdk/rust: lint, unit, vector, property and interop tests (exports to the weft binary too)"
bash scripts/sdk-rust.sh test
