#!/usr/bin/env bash
# The Rust SDK is its own Cargo workspace (sdk/rust). This runs its lint and tests, or its
# benchmarks, from the repository root.
#   scripts/sdk-rust.sh lint    rustfmt and clippy, warnings are errors
#   scripts/sdk-rust.sh test    lint, every test, and a build check of the fuzz targets; with WEFT_BIN set (make test sets it to
#                               the debug build) the backend interop test exports to that binary
#   scripts/sdk-rust.sh bench   criterion benchmarks beside opentelemetry_sdk (sdk/rust/bench.sh)
set -euo pipefail
cd "$(dirname "$0")/../sdk/rust"
case "${1:-test}" in
    lint)
        cargo fmt --all -- --check
        cargo clippy --all-targets -- -D warnings
        ;;
    test)
        cargo fmt --all -- --check
        # make test compiles with clippy as the wrapper (scripts/test.sh): the build lints.
        if [[ "${RUSTC_WORKSPACE_WRAPPER:-}" != *clippy-driver ]]; then
            cargo clippy --all-targets -- -D warnings
        fi
        cargo test --all-targets --no-run
        cargo test
        # Fuzzing needs nightly; CI at least builds every fuzz target (STYLE.md).
        (cd fuzz && cargo check --bins)
        ;;
    build) # compiles what `test` runs, without running it
        cargo test --all-targets --no-run
        (cd fuzz && cargo check --bins)
        ;;
    bench)
        bash bench.sh
        ;;
    *)
        echo "usage: scripts/sdk-rust.sh lint|build|test|bench" >&2
        exit 2
        ;;
esac
