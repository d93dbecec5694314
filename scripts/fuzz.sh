#!/usr/bin/env bash
# Runs every cargo-fuzz target (the backend's decoders, the Kafka record reader and the Rust
# SDK's propagators) for FUZZ_SECONDS each (default 60), one at a time, with overflow checks on.
# Needs a nightly toolchain (`rustup toolchain install nightly`); installs cargo-fuzz if missing.
# Corpora, logs and crash inputs go under fuzz-out/ (ignored by git), so the tree is unchanged
# and a later run starts from the corpora an earlier one grew.
# Exits non-zero if a target crashed or did not build, naming where its inputs and log are.
# First, the querier's model test at more cases than `make test` runs (WEFT_MODEL_CASES,
# default 256; `make test` runs 16).
# Usage: make fuzz [FUZZ_SECONDS=<n>] [WEFT_MODEL_CASES=<n>]
set -euo pipefail
cd "$(dirname "$0")/.."
WEFT_MODEL_CASES="${WEFT_MODEL_CASES:-256}" cargo test --release -q -p weft-querier --test search_model
secs="${FUZZ_SECONDS:-60}"
out="$PWD/fuzz-out"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export CARGO_TARGET_DIR="$out/target"
failed=0
for dir in crates/weft-translate/fuzz crates/weft-otlp/fuzz crates/weft-kafka/fuzz crates/weft-engine/fuzz sdk/rust/fuzz; do
    case "$dir" in
        sdk/*) group=sdk ;;
        *) group="$(basename "$(dirname "$dir")")" ;;
    esac
    for f in "$dir"/fuzz_targets/*.rs; do
        t="$(basename "$f" .rs)"
        name="$group-$t"
        mkdir -p "$out/corpus/$name" "$out/crashes/$name" "$out/logs"
        log="$out/logs/$name.log"
        # -a: debug assertions and overflow checks, so an overflow is a crash, not a wrap.
        if (cd "$dir" && cargo +nightly fuzz run -a --sanitizer none "$t" "$out/corpus/$name" -- \
            -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
            -artifact_prefix="$out/crashes/$name/") >"$log" 2>&1; then
            echo "ok    $name: $(grep -a '^Done' "$log" | tail -1)"
        else
            echo "FAIL  $name: log $log, inputs $out/crashes/$name"
            grep -aE "panicked at|ERROR:|^error" "$log" | head -3 | sed 's/^/      /'
            failed=1
        fi
    done
done
exit "$failed"
