#!/usr/bin/env bash
# Installs what the Python integration tests (tests/integration) need:
#   - a virtualenv in .venv with the pinned packages of tests/integration/requirements.txt, and
#     .venv-jaeger with the Jaeger clients (tests/integration/requirements-jaeger.txt)
#   - telemetrygen in .tools/bin (built from the Go module proxy)
#   - the real Zipkin server (io.zipkin:zipkin-server exec jar, Maven Central) in .tools/zipkin,
#     and Brave and the OpenTelemetry Java Zipkin exporter (tests/zipkin-brave, Maven) and JS
#     Zipkin exporter (tests/zipkin-js, npm), for the differential tests of the Zipkin receiver
#     and query API
#   - the real Jaeger v2 (built from the Go module proxy) in .tools/jaeger-bin, for the Jaeger
#     differential tests, and Jaeger's own gRPC client (tests/jaeger-grpc) in .tools/bin
#   - the OpenTelemetry Go contrib Jaeger remote sampler (tests/jaeger-remote) in .tools/bin, and
#     the OpenTelemetry Java and JS ones (tests/jaeger-remote-java, Maven; tests/jaeger-remote-js, npm)
#   - the jars of a real Apache Kafka broker (Maven Central, scripts/kafka/pom.xml) in
#     .tools/kafka, which scripts/kafka-server.sh runs for the Kafka tests
# Idempotent: work already done is skipped, so a second run takes about a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
REQS="tests/integration/requirements.txt"
VENV=".venv"
STAMP="$VENV/.requirements.sha256"
TELEMETRYGEN_VERSION="v0.161.0"
TOOLS_BIN="$ROOT/.tools/bin"
TG_STAMP="$ROOT/.tools/telemetrygen.version"

log() { echo "[test-deps] $*" >&2; }

# --- Python virtualenv -------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi

want_hash="$(sha256sum "$REQS" | cut -d' ' -f1)"
have_hash="$(cat "$STAMP" 2>/dev/null || true)"
if [[ "$want_hash" != "$have_hash" ]] || ! "$VENV/bin/python" -c 'import pytest, requests, duckdb, grpc, google.protobuf, opentelemetry.sdk, opentelemetry.proto, opentelemetry.exporter.otlp.proto.grpc.trace_exporter, opentelemetry.exporter.otlp.proto.http.trace_exporter' 2>/dev/null; then
    log "installing Python packages from $REQS"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
    echo "$want_hash" > "$STAMP"
else
    log "Python packages already installed"
fi

# --- Jaeger clients (their own virtualenv: they need an older OpenTelemetry SDK) ----
JREQS="tests/integration/requirements-jaeger.txt"
JVENV=".venv-jaeger"
JSTAMP="$JVENV/.requirements.sha256"
if [[ ! -x "$JVENV/bin/python" ]]; then
    log "creating $JVENV with $PYTHON"
    "$PYTHON" -m venv "$JVENV"
fi
want_hash="$(sha256sum "$JREQS" | cut -d' ' -f1)"
if [[ "$want_hash" != "$(cat "$JSTAMP" 2>/dev/null || true)" ]]; then
    log "installing the Jaeger clients from $JREQS"
    "$JVENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$JREQS"
    echo "$want_hash" > "$JSTAMP"
else
    log "Jaeger clients already installed"
fi

# --- telemetrygen ------------------------------------------------------------
if [[ -x "$TOOLS_BIN/telemetrygen" && "$(cat "$TG_STAMP" 2>/dev/null || true)" == "$TELEMETRYGEN_VERSION" ]]; then
    log "telemetrygen $TELEMETRYGEN_VERSION already installed"
else
    command -v go >/dev/null || { log "go is not on PATH; cannot install telemetrygen"; exit 1; }
    log "building telemetrygen $TELEMETRYGEN_VERSION into $TOOLS_BIN (takes a few minutes on a cold cache)"
    mkdir -p "$TOOLS_BIN"
    GOBIN="$TOOLS_BIN" \
        go install "github.com/open-telemetry/opentelemetry-collector-contrib/cmd/telemetrygen@${TELEMETRYGEN_VERSION}"
    echo "$TELEMETRYGEN_VERSION" > "$TG_STAMP"
fi

# --- Zipkin server -----------------------------------------------------------
ZIPKIN_VERSION="3.5.1"
ZIPKIN_JAR="$ROOT/.tools/zipkin/zipkin-server-$ZIPKIN_VERSION-exec.jar"
if [[ -s "$ZIPKIN_JAR" ]]; then
    log "zipkin-server $ZIPKIN_VERSION already fetched"
else
    command -v mvn >/dev/null || { log "mvn is not on PATH; cannot fetch zipkin-server"; exit 1; }
    log "fetching io.zipkin:zipkin-server:$ZIPKIN_VERSION (exec jar) into .tools/zipkin"
    mkdir -p "$ROOT/.tools/zipkin"
    mvn -q -B -Dstyle.color=never dependency:copy \
        -Dartifact="io.zipkin:zipkin-server:$ZIPKIN_VERSION:jar:exec" \
        -DoutputDirectory="$ROOT/.tools/zipkin" -Dmdep.overWriteIfNewer=true >&2
    [[ -s "$ZIPKIN_JAR" ]] || { log "mvn ran but $ZIPKIN_JAR is missing"; exit 1; }
fi

# --- Kafka broker (scripts/kafka-server.sh starts it; it fetches the jars itself too) ---------
# A no-op once the jars are there and scripts/kafka/pom.xml is unchanged.
bash "$ROOT/scripts/kafka-server.sh" fetch
log "Kafka broker jars in .tools/kafka"

# --- Java clients: Brave and the OpenTelemetry Zipkin exporter, the AWS X-Ray SDK for Java, the
# OpenTelemetry Java Jaeger remote sampler ---
# Each is a small Maven project, compiled again when a source or its pom changes; the tests run
# its main classes with the classpath Maven resolved.
build_java_client() { # DIR CLASS-PATH WHAT
    local dir="$ROOT/$1" class="$ROOT/$1/target/classes/$2.class"
    # Built when the classpath and the main class exist and no source or the pom is newer.
    if [[ -s "$dir/target/classpath.txt" && -f "$class" \
          && -z "$(find "$dir/src" "$dir/pom.xml" -newer "$dir/target/classpath.txt" -print -quit)" ]]; then
        log "$3 already built"
    else
        log "building $3 ($1) with Maven"
        (cd "$dir" && mvn -q -B -Dstyle.color=never compile dependency:build-classpath \
            -Dmdep.outputFile=target/classpath.txt >&2)
        # Maven leaves an unchanged classpath file as it was: its time marks this build.
        touch "$dir/target/classpath.txt"
    fi
}
build_java_client tests/zipkin-brave weft/brave/Report "the Zipkin Java clients"
build_java_client tests/xray-java weft/xray/Report "the X-Ray Java client"
build_java_client tests/jaeger-remote-java weft/sampling/Remote "the OpenTelemetry Java Jaeger remote sampler"

# --- The OpenTelemetry JS Jaeger remote sampler (tests/jaeger-remote-js, pinned npm packages) ---
jrstamp="tests/jaeger-remote-js/node_modules/.weft-package-lock.json"
if [[ -f "$jrstamp" ]] && cmp -s tests/jaeger-remote-js/package-lock.json "$jrstamp"; then
    log "the JS Jaeger remote sampler already installed"
else
    log "installing the JS Jaeger remote sampler's npm packages (tests/jaeger-remote-js)"
    (cd tests/jaeger-remote-js && npm ci --no-audit --no-fund --loglevel=error >&2)
    cp tests/jaeger-remote-js/package-lock.json "$jrstamp"
fi

# --- The OpenTelemetry JS SDK's Zipkin exporter (tests/zipkin-js, pinned npm packages) ---
jsstamp="tests/zipkin-js/node_modules/.weft-package-lock.json"
if [[ -f "$jsstamp" ]] && cmp -s tests/zipkin-js/package-lock.json "$jsstamp"; then
    log "the Zipkin JS client already installed"
else
    log "installing the Zipkin JS client's npm packages (tests/zipkin-js)"
    (cd tests/zipkin-js && npm ci --no-audit --no-fund --loglevel=error >&2)
    cp tests/zipkin-js/package-lock.json "$jsstamp"
fi

# --- Jaeger v2 (the real server for the Jaeger differential tests) -------------------
# `go install ...@v1.76.0` refuses the module (its go.mod has replace directives), so the
# module is downloaded from the proxy and built as the main module. About 6 minutes on 2 cores.
JAEGER_VERSION="v1.76.0"
JAEGER_BIN="$ROOT/.tools/jaeger-bin/jaeger"
JAEGER_STAMP="$ROOT/.tools/jaeger-bin/version"
if [[ -x "$JAEGER_BIN" && "$(cat "$JAEGER_STAMP" 2>/dev/null || true)" == "$JAEGER_VERSION" ]]; then
    log "jaeger $JAEGER_VERSION already built"
else
    command -v go >/dev/null || { log "go is not on PATH; cannot build jaeger"; exit 1; }
    log "building jaeger $JAEGER_VERSION (v2) into .tools/jaeger-bin (takes minutes)"
    # Its modules and build cache (about 3 GB) serve nothing else, so they live in a directory
    # of their own that goes once the binary is built: CI machines can be short of disk.
    build="$ROOT/.tools/jaeger-build"
    rm -rf "$build"
    (
        export GOMODCACHE="$build/mod" GOCACHE="$build/cache" GOFLAGS=-modcacherw
        dir="$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" \
            | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
        mkdir -p "$ROOT/.tools/jaeger-bin"
        cd "$dir" && go build -o "$JAEGER_BIN" ./cmd/jaeger
    )
    rm -rf "$build"
    echo "$JAEGER_VERSION" > "$JAEGER_STAMP"
fi

# Jaeger's own gRPC client (jaeger-idl's generated CollectorService client and model), for the
# collector gRPC port's tests. Rebuilt every run: a few seconds from the module cache.
log "building tests/jaeger-grpc into .tools/bin/jaeger-grpc"
mkdir -p "$ROOT/.tools/bin"
(cd "$ROOT/tests/jaeger-grpc" && go build -mod=readonly -o "$ROOT/.tools/bin/jaeger-grpc" .)

# The OpenTelemetry Go contrib Jaeger remote sampler (tests/jaeger-remote), for the sampling
# tests: a remote sampler nobody here wrote, polling weft's /sampling.
log "building tests/jaeger-remote into .tools/bin/jaeger-remote"
(cd "$ROOT/tests/jaeger-remote" && go build -mod=readonly -o "$ROOT/.tools/bin/jaeger-remote" .)

log "done"
