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

# Compiling runs beside test-deps, which mostly waits on downloads, at the lowest CPU priority.
# A background job logs to target/bg-NAME.log, printed if it fails.
mkdir -p target
declare -A bg=()
background() { # NAME COMMAND...
    local name=$1; shift
    rm -f "target/bg-$name.end"
    # The job notes when it ended (seconds into this script), for the stage times.
    END_FILE="target/bg-$name.end" setsid -w nice -n 19 \
        bash -c '"$@"; rc=$?; echo "$(( $(date +%s) - START ))" > "$END_FILE"; exit $rc' _ "$@" \
        > "target/bg-$name.log" 2>&1 &
    bg[$name]=$!
}
export START=$(date +%s)
# A failing stage stops the background jobs too (each leads its own process group).
trap 'for p in "${bg[@]}"; do kill -- "-$p" 2>/dev/null || true; done' EXIT
await() { # NAME
    if wait "${bg[$1]}"; then
        local end; end=$(cat "target/bg-$1.end" 2>/dev/null || echo 0)
        printf '(%s: done; it ended at %dm%02ds)\n' "$1" $((end / 60)) $((end % 60))
    else
        cat "target/bg-$1.log"
        echo "$1: FAILED (target/bg-$1.log)"
        exit 1
    fi
}

# Clippy lints the workspace while it is compiled for the tests, instead of checking it a second
# time: it is the rustc wrapper of the workspace's own crates, as `cargo clippy` makes it, with
# warnings denied. Every cargo command below keeps it, so nothing is compiled twice.
export RUSTC_WORKSPACE_WRAPPER="$(dirname "$(rustup which rustc)")/clippy-driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

stage "formatting (rustfmt)"
cargo fmt --all -- --check
(cd sdk/rust && cargo fmt --all -- --check)

stage "install test dependencies; beside it, build the web UI, compile and lint the Rust tests, build the fuzz targets"
# test-deps goes first for disk: building Jaeger takes about 3.7 GB of caches for a few minutes
# (removed after), and CI machines can be short of disk. The compile fills the downloads' waits.
# `--all-targets` compiles (and so lints) the benches and examples too. This also builds the
# weft binary the end-to-end tests run, with the features of this build: a separate
# `cargo build -p weft-server` would compile the dependency graph again (about 2 minutes on
# CI's 2 cores). Fuzzing itself needs nightly: cargo +nightly fuzz run <target>.
background build bash -c 'bash scripts/build_ui.sh && cargo test --workspace --all-targets --no-run \
    && for c in weft-otlp weft-translate weft-kafka weft-engine; do \
         (cd crates/$c/fuzz && CARGO_TARGET_DIR="$PWD/../../../target/fuzz" cargo check --bins) || exit 1; done'
bash scripts/test-deps.sh
await build

stage "rust tests"
# The WAL's disk-full and direct-I/O tests mount a tmpfs and a loop-mounted ext4 (as root).
if ! command -v mkfs.ext4 >/dev/null; then
    SUDO=""; [[ "$(id -u)" != 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends e2fsprogs >/dev/null
fi
# The SDKs' compiles and the UI tests' setup run beside the Rust tests, which mostly wait on
# brokers and disks; the end-to-end suite then runs with nothing beside it.
background sdks bash -c 'bash scripts/sdk-rust.sh build && bash scripts/sdk-java.sh build \
    && bash scripts/sdk-go.sh build && bash scripts/test-ui.sh --prepare && bash scripts/sdk-python.sh build'
cargo test --workspace
await sdks
export WEFT_BIN="$PWD/target/debug/weft"

stage "end-to-end tests"
# The slowest tests are listed at the end, to keep `make test` within its 40-minute budget.
# test_sampling.py runs beside the rest: its fleets of remote samplers wait on sampling
# intervals for most of its two minutes, and it uses ports, servers and a Kafka broker of its own.
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
stage "sdk/python: API, vector, property, OTLP HTTP/gRPC interop, fork/thread/asyncio, Flask and W3C service tests (exports to the weft binary too)"
bash scripts/sdk-python.sh test
stage "done"
