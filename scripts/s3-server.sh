#!/usr/bin/env bash
# Starts and stops a local S3-compatible server for weft's tests: s3proxy (org.gaul:s3proxy,
# jar-with-dependencies from Maven Central) with its filesystem-nio2 provider.
#
#   scripts/s3-server.sh start DIR PORT   # serves bucket `weft` from DIR/data on 127.0.0.1:PORT
#   scripts/s3-server.sh stop DIR         # stops the server started with DIR
#   scripts/s3-server.sh status DIR       # exit 0 if it runs
#
# Credentials: access key `weft`, secret `weft-secret`, region `us-east-1` (s3proxy accepts any
# region). On success `start` prints the environment the tests read, e.g.
#   WEFT_S3_ENDPOINT=http://127.0.0.1:PORT WEFT_S3_BUCKET=weft ...
# Idempotent: `start` with a server already running on DIR and PORT prints the same and does
# nothing else; `stop` without a server does nothing. The jar is fetched once into .tools/s3proxy.
# With S3_SERVER_OWNER_PID=PID, `start` also leaves a watcher that stops the server and removes
# DIR/data once process PID has exited (tests use this so that no server outlives them).
# `start` exits non-zero, with the end of the server's log, if the server is not ready in 60 s.
# With S3_SERVER_TLS=1, `start` serves HTTPS instead, with a certificate from a private test CA
# (scripts/test-certs.sh, in DIR/tls; ca.pem is the CA): the endpoint printed is https:// and
# WEFT_S3_CA_FILE=DIR/tls/ca.pem is printed too.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/$(basename "${BASH_SOURCE[0]}")"
VERSION="4.1.0"
TOOLS="$ROOT/.tools/s3proxy"
JAR="$TOOLS/s3proxy-$VERSION-jar-with-dependencies.jar"
BUCKET="weft"
ACCESS_KEY="weft"
SECRET_KEY="weft-secret"
REGION="us-east-1"

log() { echo "[s3-server] $*" >&2; }
die() { log "$*"; exit 1; }

usage() { die "usage: $0 start DIR PORT | stop DIR | status DIR"; }

fetch_jar() {
    [[ -s "$JAR" ]] && return 0
    command -v mvn >/dev/null || die "mvn is not on PATH; cannot fetch s3proxy $VERSION"
    command -v java >/dev/null || die "java is not on PATH; cannot run s3proxy"
    log "fetching org.gaul:s3proxy:$VERSION (jar-with-dependencies) into $TOOLS"
    mkdir -p "$TOOLS"
    mvn -q -B -Dstyle.color=never dependency:copy \
        -Dartifact="org.gaul:s3proxy:$VERSION:jar:jar-with-dependencies" \
        -DoutputDirectory="$TOOLS" -Dmdep.overWriteIfNewer=true >&2 \
        || die "mvn could not fetch org.gaul:s3proxy:$VERSION"
    [[ -s "$JAR" ]] || die "mvn ran but $JAR is missing"
}

alive() { # DIR
    local pid
    pid="$(cat "$1/s3proxy.pid" 2>/dev/null)" || return 1
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

# http or https, as the server in DIR was started.
scheme() { # DIR
    if [[ -s "$1/tls/server.p12" && "$(cat "$1/s3proxy.scheme" 2>/dev/null)" == https ]]; then
        echo https
    else
        echo http
    fi
}

# Any HTTP answer on / means the server listens (unsigned requests get 403).
answers() { # PORT [SCHEME]
    local code
    code="$(curl -s -k -o /dev/null -w '%{http_code}' --max-time 2 "${2:-http}://127.0.0.1:$1/" || true)"
    [[ -n "$code" && "$code" != "000" ]]
}

print_env() { # PORT DIR
    local sch
    sch="$(scheme "$2")"
    echo "WEFT_S3_ENDPOINT=$sch://127.0.0.1:$1 WEFT_S3_BUCKET=$BUCKET WEFT_S3_REGION=$REGION" \
        "WEFT_S3_ACCESS_KEY_ID=$ACCESS_KEY WEFT_S3_SECRET_ACCESS_KEY=$SECRET_KEY" \
        "$([[ "$sch" == https ]] && echo "WEFT_S3_CA_FILE=$2/tls/ca.pem")"
}

start() { # DIR PORT
    local dir="$1" port="$2"
    [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$port'"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if alive "$dir"; then
        local have
        have="$(cat "$dir/s3proxy.port" 2>/dev/null || true)"
        [[ "$have" == "$port" ]] || die "a server for $dir already runs on port $have, not $port"
        answers "$port" "$(scheme "$dir")" || die "server for $dir runs (pid $(cat "$dir/s3proxy.pid")) but does not answer on $port"
        log "already running on 127.0.0.1:$port"
        print_env "$port" "$dir"
        return 0
    fi
    if answers "$port" || answers "$port" https; then
        die "port $port on 127.0.0.1 is taken by another process"
    fi
    fetch_jar
    # The filesystem provider maps buckets to directories under basedir.
    mkdir -p "$dir/data/$BUCKET"
    local listen="s3proxy.endpoint=http://127.0.0.1:$port" sch=http
    if [[ "${S3_SERVER_TLS:-}" == 1 ]]; then
        bash "$ROOT/scripts/test-certs.sh" "$dir/tls" || die "could not make test certificates in $dir/tls"
        # Jetty's key store: the server's key and chain as PKCS#12.
        openssl pkcs12 -export -in "$dir/tls/server.pem" -inkey "$dir/tls/server-key.pem" \
            -certfile "$dir/tls/ca.pem" -name s3proxy -passout pass:weft-secret \
            -out "$dir/tls/server.p12" 2>/dev/null || die "openssl could not write $dir/tls/server.p12"
        listen="s3proxy.secure-endpoint=https://127.0.0.1:$port
s3proxy.keystore-path=$dir/tls/server.p12
s3proxy.keystore-password=weft-secret"
        sch=https
    fi
    echo "$sch" >"$dir/s3proxy.scheme"
    cat >"$dir/s3proxy.conf" <<EOF
$listen
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$ACCESS_KEY
s3proxy.credential=$SECRET_KEY
jclouds.provider=filesystem-nio2
jclouds.filesystem.basedir=$dir/data
EOF
    log "starting s3proxy $VERSION on 127.0.0.1:$port, data in $dir/data"
    # setsid: the server outlives the shell that started it (a test harness, say).
    setsid java -Xmx256m -jar "$JAR" --properties "$dir/s3proxy.conf" \
        >"$dir/s3proxy.log" 2>&1 </dev/null &
    echo $! >"$dir/s3proxy.pid"
    echo "$port" >"$dir/s3proxy.port"
    for _ in $(seq 1 120); do
        if ! alive "$dir"; then
            tail -n 30 "$dir/s3proxy.log" >&2 || true
            rm -f "$dir/s3proxy.pid"
            die "s3proxy exited during start; log above ($dir/s3proxy.log)"
        fi
        if answers "$port" "$sch"; then
            log "ready"
            watch_owner "$dir"
            print_env "$port" "$dir"
            return 0
        fi
        sleep 0.5
    done
    tail -n 30 "$dir/s3proxy.log" >&2 || true
    stop "$dir"
    die "s3proxy did not answer on 127.0.0.1:$port within 60 s; log above"
}

watch_owner() { # DIR
    local owner="${S3_SERVER_OWNER_PID:-}"
    [[ -n "$owner" ]] || return 0
    kill -0 "$owner" 2>/dev/null || die "S3_SERVER_OWNER_PID $owner is not a running process"
    log "will stop when process $owner exits"
    # Detached, with no inherited pipes: whoever reads this script's output must see EOF.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3"; rm -rf "$3/data"' \
        _ "$owner" "$SELF" "$1" >"$1/watch.log" 2>&1 </dev/null &
}

stop() { # DIR
    local dir="$1" pid
    pid="$(cat "$dir/s3proxy.pid" 2>/dev/null || true)"
    if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
        rm -f "$dir/s3proxy.pid"
        log "not running"
        return 0
    fi
    log "stopping s3proxy (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still running after 10 s; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/s3proxy.pid"
}

case "${1:-}" in
start) [[ $# -eq 3 ]] || usage; start "$2" "$3" ;;
stop) [[ $# -eq 2 ]] || usage; stop "$2" ;;
status) [[ $# -eq 2 ]] || usage; alive "$2" ;;
fetch) fetch_jar ;;
*) usage ;;
esac
