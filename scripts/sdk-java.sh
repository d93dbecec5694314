#!/usr/bin/env bash
# The Java SDK is its own Maven project (sdk/java). This runs its tests or its benchmarks from the
# repository root. Maven fetches the dependencies from Maven Central on first use.
#   scripts/sdk-java.sh test    compile every module and run every test: unit, spec/vectors, jqwik
#                               property, OTLP HTTP/gRPC interop, the W3C test service; with WEFT_BIN
#                               set (make test sets it to the debug build) the end-to-end tests export
#                               to that binary, otherwise they are reported as skipped
#   scripts/sdk-java.sh bench   JMH benchmarks beside the OpenTelemetry Java SDK and the AWS X-Ray
#                               SDK (sdk/java/bench.sh; results in sdk/java/BENCHMARKS.md)
set -euo pipefail
cd "$(dirname "$0")/../sdk/java"
case "${1:-test}" in
    test)
        mvn -B -ntp test
        ;;
    build) # compiles what `test` runs, without running it
        mvn -B -ntp -q test-compile
        ;;
    bench)
        bash bench.sh
        ;;
    *)
        echo "usage: scripts/sdk-java.sh build|test|bench" >&2
        exit 2
        ;;
esac
