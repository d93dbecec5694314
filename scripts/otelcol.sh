#!/usr/bin/env bash
# Builds the OpenTelemetry Collector that `make bench` measures beside weft (bench/otelcol: the
# core OTLP receiver into the `nop` exporter) into .tools/bin/otelcol-bench, from the Go module
# proxy. The collector version is pinned in bench/otelcol/go.mod (and go.sum).
# Idempotent: if the binary was built from the same go.mod, go.sum and main.go with the same Go,
# nothing is done, so a second run takes well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SRC="$ROOT/bench/otelcol"
TOOLS_BIN="$ROOT/.tools/bin"
BIN="$TOOLS_BIN/otelcol-bench"
STAMP="$ROOT/.tools/otelcol-bench.version"

log() { echo "[otelcol] $*" >&2; }

command -v go >/dev/null || { log "go is not on PATH; cannot build the collector"; exit 1; }
version="$(sed -n 's/^const version = "\(.*\)"$/\1/p' "$SRC/main.go")"
want="$version $(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"

if [[ -x "$BIN" && "$(cat "$STAMP" 2>/dev/null || true)" == "$want" ]]; then
    log "otelcol-bench $version already built"
else
    log "building otelcol-bench (collector $version) into $TOOLS_BIN (takes a few minutes on a cold cache)"
    mkdir -p "$TOOLS_BIN"
    # -mod=readonly: go.mod and go.sum are the pins; a build that would change them fails instead.
    (cd "$SRC" && go build -mod=readonly -trimpath -o "$BIN.tmp" .)
    mv "$BIN.tmp" "$BIN"
    echo "$want" > "$STAMP"
fi

log "done"
