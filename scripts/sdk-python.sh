#!/usr/bin/env bash
# The Python SDK is a maturin package (sdk/python: a PyO3 extension on sdk/rust plus the
# weft_sdk package). This builds it, runs its tests, or its benchmarks, from the repository root.
# Everything lives in sdk/python/.venv (created here from python3, packages pinned in
# sdk/python/requirements.txt from PyPI) and, for Cargo, sdk/rust/target: the extension's
# dependencies are sdk/rust's (rustls and aws-lc among them), built once for both.
#   scripts/sdk-python.sh build   venv + pinned requirements; rustfmt and clippy (warnings are
#                                 errors) on the extension crate; mypy --strict; then the wheel,
#                                 built from source with maturin (debug profile) and installed
#                                 into the venv
#   scripts/sdk-python.sh test    pytest: API, spec/vectors, Hypothesis properties, OTLP HTTP/gRPC
#                                 interop (decoded with opentelemetry-proto), TLS export,
#                                 fork/threads/asyncio, warnings through logging, Flask + requests
#                                 under the official instrumentation and under weft_sdk.wsgi,
#                                 Starlette under weft_sdk.asgi, the W3C service; with WEFT_BIN set (make test sets it to the debug build)
#                                 the end-to-end tests export to that binary, otherwise they are
#                                 reported as skipped
#   scripts/sdk-python.sh bench   pyperf beside the OpenTelemetry Python SDK on a release build
#                                 (sdk/python/bench.sh; results in sdk/python/BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/../sdk/python"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/../rust/target}"
VENV=.venv
PY=${PYTHON:-python3}
case "${1:-test}" in
    build)
        if ! command -v cargo >/dev/null; then
            echo "sdk/python: building the native core needs the Rust toolchain (cargo, rustc $(sed -n 's/channel = "\(.*\)"/\1/p' rust-toolchain.toml)); see sdk/python/README.md" >&2
            exit 1
        fi
        [[ -x $VENV/bin/python ]] || "$PY" -m venv "$VENV"
        "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt
        cargo fmt --all -- --check
        # make test compiles with clippy as the wrapper (scripts/test.sh): the build lints.
        if [[ "${RUSTC_WORKSPACE_WRAPPER:-}" != *clippy-driver ]]; then
            cargo clippy --all-targets -- -D warnings
        fi
        "$VENV/bin/mypy" --strict python/weft_sdk
        rm -rf target/wheels
        "$VENV/bin/maturin" build -q -o target/wheels -i "$VENV/bin/python"
        "$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps target/wheels/weft_sdk-*.whl
        ;;
    test)
        [[ -x $VENV/bin/python ]] || { echo "sdk/python: run scripts/sdk-python.sh build first" >&2; exit 1; }
        if [[ -z "${WEFT_BIN:-}" ]]; then
            echo "sdk/python: WEFT_BIN is not set: the end-to-end tests against the weft binary are skipped" >&2
        fi
        "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests
        ;;
    bench)
        [[ -x $VENV/bin/python ]] || bash "$0" build
        bash bench.sh
        ;;
    *)
        echo "usage: scripts/sdk-python.sh build|test|bench" >&2
        exit 2
        ;;
esac
