#!/usr/bin/env bash
# The Go SDK is its own Go module (sdk/go). This runs its checks and tests, or its benchmarks,
# from the repository root. Go fetches the modules from the module proxy on first use.
#   scripts/sdk-go.sh test    gofmt and go vet, then every test under the race detector: unit,
#                             spec/vectors, the fuzz targets' seed corpora, OTLP HTTP/gRPC interop
#                             (decoded with go.opentelemetry.io/proto/otlp), the W3C service; with
#                             WEFT_BIN set (make test sets it to the debug build) the end-to-end
#                             tests export to that binary, otherwise they are reported as skipped
#   scripts/sdk-go.sh bench   go test -bench beside the OpenTelemetry Go SDK (sdk/go/bench.sh;
#                             results in sdk/go/BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/../sdk/go"
case "${1:-test}" in
    test)
        unformatted=$(gofmt -l .)
        if [[ -n "$unformatted" ]]; then
            echo "gofmt: these files need formatting:" >&2
            echo "$unformatted" >&2
            exit 1
        fi
        go vet ./...
        go vet -tags weftbench .   # the network benchmarks, which only bench.sh builds
        if [[ -z "${WEFT_BIN:-}" ]]; then
            echo "sdk/go: WEFT_BIN is not set: the end-to-end tests against the weft binary are skipped" >&2
        fi
        go test -race -count=1 ./...
        ;;
    build) # compiles what `test` runs (with -race), without running a test
        go vet ./...
        go test -race -count=1 -run '^$' ./... >/dev/null
        ;;
    bench)
        bash bench.sh
        ;;
    *)
        echo "usage: scripts/sdk-go.sh build|test|bench" >&2
        exit 2
        ;;
esac
