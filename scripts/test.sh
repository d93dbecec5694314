#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests, then the end-to-end suite that drives the
# real `weft` binary with real OpenTelemetry clients, telemetrygen and DuckDB, and the web UI's
# tests in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's header says when it starts, so a log shows where the time goes.
SECONDS=0
stage() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
export CARGO_TERM_COLOR=never

stage "spec vectors are well-formed and self-consistent"
python3 scripts/check_vectors.py

stage "install test dependencies"
# First, while nothing else is built: building Jaeger takes about 3.7 GB of caches for a few
# minutes (removed after), and CI machines can be short of disk.
bash scripts/test-deps.sh

stage "build the web UI (embedded into the weft binary)"
bash scripts/build_ui.sh

stage "lint"
bash scripts/lint.sh

stage "backend fuzz targets build (fuzzing itself needs nightly: cargo +nightly fuzz run <target>)"
(cd crates/weft-otlp/fuzz && CARGO_TARGET_DIR="$PWD/../../../target/fuzz" cargo check --bins)
(cd crates/weft-translate/fuzz && CARGO_TARGET_DIR="$PWD/../../../target/fuzz" cargo check --bins)
(cd crates/weft-kafka/fuzz && CARGO_TARGET_DIR="$PWD/../../../target/fuzz" cargo check --bins)
(cd crates/weft-engine/fuzz && CARGO_TARGET_DIR="$PWD/../../../target/fuzz" cargo check --bins)

stage "rust tests"
# The WAL's disk-full and direct-I/O tests mount a tmpfs and a loop-mounted ext4 (as root).
if ! command -v mkfs.ext4 >/dev/null; then
    SUDO=""; [[ "$(id -u)" != 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends e2fsprogs >/dev/null
fi
# This also builds the weft binary the end-to-end tests run (crates/weft-server/tests/binary.rs
# needs it), with the features of this build: a separate `cargo build -p weft-server` would
# compile the dependency graph again (about 2 minutes on CI's 2 cores).
cargo test --workspace
export WEFT_BIN="$PWD/target/debug/weft"

stage "end-to-end tests"
# The slowest tests are listed at the end, to keep `make test` within its 40-minute budget.
# test_sampling.py runs beside the rest: its fleets of remote samplers wait on sampling
# intervals for most of its two minutes, and it uses ports, servers and a Kafka broker of its own.
mkdir -p target
.venv/bin/python -m pytest tests/integration/test_sampling.py -q -p no:cacheprovider \
    --basetemp=target/pytest-sampling > target/e2e-sampling.log 2>&1 &
sampling=$!
rest=0
.venv/bin/python -m pytest tests/integration -q -p no:cacheprovider --durations=15 \
    --ignore=tests/integration/test_sampling.py || rest=$?
wait "$sampling" && echo "test_sampling.py: passed" || { cat target/e2e-sampling.log; echo "test_sampling.py: FAILED"; exit 1; }
tail -1 target/e2e-sampling.log
[[ "$rest" == 0 ]] || exit "$rest"

stage "Tempo conformance: Go clients decode every reply strictly and drive the gRPC streaming API"
(cd tests/tempo-conformance && go test -count=1 ./...)

stage "web UI end-to-end tests (headless Chromium, the debug binary; make bench times the 100,000-span trace)"
bash scripts/test-ui.sh

stage "sdk/rust: lint, unit, vector, property and interop tests (exports to the weft binary too)"
bash scripts/sdk-rust.sh test
stage "sdk/java: unit, vector, property, OTLP interop and W3C service tests (exports to the weft binary too)"
bash scripts/sdk-java.sh test
stage "sdk/go: gofmt, vet, unit, vector, fuzz-seed, OTLP interop and W3C service tests under -race (exports to the weft binary too)"
bash scripts/sdk-go.sh test
stage "done"
