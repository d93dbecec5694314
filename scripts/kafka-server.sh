#!/usr/bin/env bash
# Starts and stops a real single-node Apache Kafka broker for weft's tests: Kafka in KRaft mode
# (one process is both broker and controller), its jars from Maven Central (scripts/kafka/pom.xml).
#
#   scripts/kafka-server.sh start DIR PORT              # broker on 127.0.0.1:PORT, data and logs in DIR
#   scripts/kafka-server.sh stop DIR                    # stops the broker started with DIR
#   scripts/kafka-server.sh status DIR                  # exit 0 if it runs
#   scripts/kafka-server.sh topic DIR NAME PARTITIONS   # creates topic NAME (replication 1) if missing
#   scripts/kafka-server.sh fetch                       # only fetches the jars
#   scripts/kafka-server.sh cluster DIR N               # N brokers (KRaft, each also a controller) in
#                                                       # DIR/node-1..N: replication N, min.insync.replicas 2
# A node of a cluster stops with `stop DIR/node-I` and starts again, with its configuration
# and data, with `start DIR/node-I PORT` (its port is in DIR/node-I/kafka.port); `stop DIR`
# stops them all.
#
# On success `start` prints the environment the tests read: WEFT_KAFKA_BROKERS=127.0.0.1:PORT.
# The broker is ready when it has logged "Kafka Server started" (after it is unfenced, so it
# answers metadata and produce requests) and accepts connections on PORT. Topics are not created
# on first use (auto.create.topics.enable=false): create them with `topic`.
# Idempotent: `start` with a broker already running on DIR and PORT prints the same and does
# nothing else; `stop` without a broker does nothing; `topic` on an existing topic does nothing.
# The jars are fetched once into .tools/kafka/VERSION/libs (again when the pom changes). The
# controller listens on a second free port, chosen at each start.
# With KAFKA_SERVER_OWNER_PID=PID, `start` also leaves a watcher that stops the broker and removes
# DIR/data once process PID has exited (tests use this so that no broker outlives them).
# `start` exits non-zero, with the end of the broker's log, if the broker is not ready in 90 s.
#
# With KAFKA_SERVER_SECURE=1, `start` also opens two secured listeners, on free ports:
#   SASL_SSL: TLS, then SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (unsecured JWTs,
#             alg "none", checked for sub and exp: a stand-in for an identity provider);
#             user `weft`, password `weft-secret` for PLAIN and both SCRAMs;
#   SSL:      TLS with a client certificate required (mTLS).
# Their certificates are scripts/test-certs.sh's, in DIR/tls: ca.pem (the CA that signs the
# broker's certificate, for 127.0.0.1 and localhost), client.pem and client-key.pem (a client
# certificate from that CA), other-ca.pem (a CA that signed nothing here: an untrusted one).
# KAFKA_SERVER_REAUTH_MS, if set, is the broker's connections.max.reauth.ms. Besides
# WEFT_KAFKA_BROKERS, it then prints WEFT_KAFKA_SASL_SSL_BROKERS, WEFT_KAFKA_SSL_BROKERS and
# WEFT_KAFKA_TLS_DIR, one per line.
# Files in DIR: server.properties, log4j2.properties, kafka.log (the broker's log), kafka.out
# (the JVM's own output), kafka.pid, kafka.port, kafka.controller-port, data/ (log.dirs).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/$(basename "${BASH_SOURCE[0]}")"
VERSION="4.3.1" # keep in step with kafka.version in scripts/kafka/pom.xml
POM="$ROOT/scripts/kafka/pom.xml"
TOOLS="$ROOT/.tools/kafka/$VERSION"
LIBS="$TOOLS/libs"
STAMP="$TOOLS/pom.sha256"
HEAP="-Xmx512m -Xms512m"

log() { echo "[kafka-server] $*" >&2; }
die() { log "$*"; exit 1; }

usage() { die "usage: $0 start DIR PORT | cluster DIR N | stop DIR | status DIR | topic DIR NAME PARTITIONS | fetch"; }

need_java() {
    command -v java >/dev/null || die "java is not on PATH; Kafka $VERSION needs java 17 or newer"
    local v
    v="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)"
    [[ -n "$v" && "$v" -ge 17 ]] || die "Kafka $VERSION needs java 17 or newer; java on PATH is '${v:-unknown}'"
}

fetch_jars() {
    local want
    want="$(sha256sum "$POM" | cut -d' ' -f1)"
    [[ -d "$LIBS" && "$(cat "$STAMP" 2>/dev/null || true)" == "$want" ]] && return 0
    command -v mvn >/dev/null || die "mvn is not on PATH; cannot fetch Kafka $VERSION"
    log "fetching org.apache.kafka:kafka_2.13:$VERSION and kafka-tools with their dependencies into $LIBS"
    mkdir -p "$TOOLS"
    # Into a fresh directory first, so that a failed or concurrent fetch never leaves half a libs/.
    local tmp="$TOOLS/libs.tmp.$$"
    rm -rf "$tmp"
    mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
        -Dkafka.version="$VERSION" -DincludeScope=runtime -DoutputDirectory="$tmp" >&2 \
        || { rm -rf "$tmp"; die "mvn could not fetch Kafka $VERSION (scripts/kafka/pom.xml)"; }
    [[ -s "$tmp/kafka_2.13-$VERSION.jar" && -s "$tmp/kafka-tools-$VERSION.jar" ]] \
        || { rm -rf "$tmp"; die "mvn ran but the Kafka jars are missing from $tmp"; }
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"
    echo "$want" >"$STAMP"
}

alive() { # DIR
    local pid
    pid="$(cat "$1/kafka.pid" 2>/dev/null)" || return 1
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

listens() { # PORT: something accepts TCP connections on 127.0.0.1:PORT
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# Started: the broker logged that it finished starting (KafkaRaftServer does so once the broker
# is unfenced) and takes connections.
ready() { # DIR PORT
    grep -q "Kafka Server started" "$1/kafka.log" 2>/dev/null && listens "$2"
}

free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
        return
    fi
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 12000))
        listens "$p" || { echo "$p"; return; }
    done
    die "cannot find a free port for the controller"
}

print_env() { # PORT [DIR]
    echo "WEFT_KAFKA_BROKERS=127.0.0.1:$1"
    if [[ -n "${2:-}" && -s "$2/kafka.sasl-ssl-port" ]]; then
        echo "WEFT_KAFKA_SASL_SSL_BROKERS=127.0.0.1:$(cat "$2/kafka.sasl-ssl-port")"
        echo "WEFT_KAFKA_SSL_BROKERS=127.0.0.1:$(cat "$2/kafka.ssl-port")"
        echo "WEFT_KAFKA_TLS_DIR=$2/tls"
    fi
}

make_certs() { # DIR
    bash "$ROOT/scripts/test-certs.sh" "$1/tls" || die "could not make test certificates in $1/tls"
    # Kafka's PEM key store: the private key (PKCS#8, unencrypted), then its chain.
    cat "$1/tls/server-key.pem" "$1/tls/server.pem" "$1/tls/ca.pem" >"$1/tls/broker-store.pem"
}

write_config() { # DIR PORT CONTROLLER-PORT [SASL-SSL-PORT SSL-PORT]
    # NODE_ID, VOTERS and REPLICAS: set by `cluster` for its nodes; one node by default.
    local dir="$1" port="$2" cport="$3" sport="${4:-}" tport="${5:-}"
    local node="${NODE_ID:-1}" voters="${VOTERS:-1@127.0.0.1:$3}" replicas="${REPLICAS:-1}"
    local isr=$(( replicas > 1 ? 2 : 1 ))
    local listeners="PLAINTEXT://127.0.0.1:$port" map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if [[ -n "$sport" ]]; then
        listeners="$listeners,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$tport"
        map="$map,SASL_SSL:SASL_SSL,SSL:SSL"
    fi
    cat >"$dir/server.properties" <<EOF
# Written by scripts/kafka-server.sh at each start.
process.roles=broker,controller
node.id=$node
controller.quorum.voters=$voters
listeners=$listeners,CONTROLLER://127.0.0.1:$cport
advertised.listeners=$listeners
listener.security.protocol.map=$map
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$replicas
min.insync.replicas=$isr
offsets.topic.replication.factor=$replicas
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$isr
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
    if [[ -n "$sport" ]]; then
        local t="$dir/tls"
        cat >>"$dir/server.properties" <<EOF
ssl.keystore.type=PEM
ssl.keystore.location=$t/broker-store.pem
ssl.truststore.type=PEM
ssl.truststore.location=$t/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_weft="weft-secret";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="weft";
EOF
        if [[ -n "${KAFKA_SERVER_REAUTH_MS:-}" ]]; then
            echo "connections.max.reauth.ms=$KAFKA_SERVER_REAUTH_MS" >>"$dir/server.properties"
        fi
    fi
    cat >"$dir/log4j2.properties" <<EOF
# Written by scripts/kafka-server.sh at each start.
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/kafka.log
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
# The line start waits for.
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
# Noisy at INFO: a line per partition and segment, per configuration value, per client.
logger.log.name = kafka.log
logger.log.level = WARN
logger.storage.name = org.apache.kafka.storage
logger.storage.level = WARN
logger.partition.name = kafka.cluster
logger.partition.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.config.name = org.apache.kafka.common.config
logger.config.level = WARN
logger.appinfo.name = org.apache.kafka.common.utils.AppInfoParser
logger.appinfo.level = WARN
logger.coordinator.name = org.apache.kafka.coordinator
logger.coordinator.level = WARN
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.snapshot.name = org.apache.kafka.snapshot
logger.snapshot.level = WARN
EOF
}

start() { # DIR PORT
    local dir="$1" port="$2"
    [[ "$port" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$port'"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    if alive "$dir"; then
        local have
        have="$(cat "$dir/kafka.port" 2>/dev/null || true)"
        [[ "$have" == "$port" ]] || die "a broker for $dir already runs on port $have, not $port"
        # Another start may still be waiting for it: wait too, without stopping it on failure.
        for _ in $(seq 1 180); do
            if ready "$dir" "$port"; then
                log "already running on 127.0.0.1:$port"
                print_env "$port" "$dir"
                return 0
            fi
            alive "$dir" || break
            sleep 0.5
        done
        show_logs "$dir"
        die "broker for $dir (pid $(cat "$dir/kafka.pid" 2>/dev/null)) runs but is not ready on $port"
    fi
    if listens "$port"; then
        die "port $port on 127.0.0.1 is taken by another process"
    fi
    need_java
    fetch_jars
    if [[ -f "$dir/cluster-node" ]]; then
        # A node of `cluster`, started again: same configuration, same storage.
        [[ "$(cat "$dir/kafka.port")" == "$port" ]] || die "node $dir listens on $(cat "$dir/kafka.port"), not $port"
        launch "$dir" "$port" "$(cat "$dir/kafka.controller-port")"
        wait_ready "$dir" "$port"
        return
    fi
    local cport sport="" tport="" scram=()
    cport="$(free_port)"
    [[ "$cport" != "$port" ]] || cport="$(free_port)"
    rm -f "$dir/kafka.sasl-ssl-port" "$dir/kafka.ssl-port"
    if [[ "${KAFKA_SERVER_SECURE:-}" == 1 ]]; then
        make_certs "$dir"
        sport="$(free_port)"
        tport="$(free_port)"
        while [[ "$sport" == "$port" || "$sport" == "$cport" ]]; do sport="$(free_port)"; done
        while [[ "$tport" == "$port" || "$tport" == "$cport" || "$tport" == "$sport" ]]; do tport="$(free_port)"; done
        # SCRAM credentials live in the cluster metadata: written when the storage is formatted.
        scram=(--add-scram "SCRAM-SHA-256=[name=weft,password=weft-secret]"
               --add-scram "SCRAM-SHA-512=[name=weft,password=weft-secret]")
    fi
    mkdir -p "$dir/data"
    write_config "$dir" "$port" "$cport" "$sport" "$tport"
    rm -f "$dir/kafka.out"
    if [[ ! -s "$dir/data/meta.properties" ]]; then
        format "$dir" "$(cluster_id)" ${scram[@]+"${scram[@]}"}
    fi
    launch "$dir" "$port" "$cport"
    if [[ -n "$sport" ]]; then
        echo "$sport" >"$dir/kafka.sasl-ssl-port"
        echo "$tport" >"$dir/kafka.ssl-port"
    fi
    wait_ready "$dir" "$port"
}

# A random cluster id: 16 bytes, base64url without padding (as kafka-storage random-uuid).
# Like Kafka's Uuid.randomUuid, draw again while it starts with '-': the storage tool's
# argument parser would read such an id as an option (one CI run in 64 failed that way).
cluster_id() {
    local cluster="-"
    while [[ "$cluster" == -* ]]; do
        cluster="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
    done
    echo "$cluster"
}

format() { # DIR CLUSTER-ID [STORAGE-TOOL OPTIONS]
    local dir="$1" cluster="$2"
    shift 2
    log "formatting $dir/data for cluster $cluster"
    java -Xmx256m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$dir/log4j2.properties" \
        -cp "$LIBS/*" kafka.tools.StorageTool format -t "$cluster" -c "$dir/server.properties" "$@" \
        >"$dir/kafka.out" 2>&1 </dev/null \
        || { cat "$dir/kafka.out" >&2; die "formatting the storage in $dir/data failed; output above"; }
}

launch() { # DIR PORT CONTROLLER-PORT: starts the JVM, without waiting for it
    local dir="$1" port="$2" cport="$3"
    rm -f "$dir/kafka.log"
    log "starting Kafka $VERSION on 127.0.0.1:$port (controller on $cport), data in $dir/data"
    # setsid: the broker outlives the shell that started it (a test harness, say).
    # shellcheck disable=SC2086 # HEAP is two options
    # log4j2.shutdownHookEnabled=false: else Log4j closes its logging context when the JVM starts
    # shutting down, Kafka's own shutdown hook then logs into a new one, and the log of the
    # shutdown is lost (the file appender writes through, so nothing is lost without the hook).
    setsid java $HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -Dlog4j2.shutdownHookEnabled=false \
        -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
        >>"$dir/kafka.out" 2>&1 </dev/null &
    echo $! >"$dir/kafka.pid"
    echo "$port" >"$dir/kafka.port"
    echo "$cport" >"$dir/kafka.controller-port"
}

wait_ready() { # DIR PORT
    local dir="$1" port="$2"
    for _ in $(seq 1 180); do
        if ! alive "$dir"; then
            show_logs "$dir"
            rm -f "$dir/kafka.pid"
            die "Kafka exited during start; log above ($dir/kafka.log, $dir/kafka.out)"
        fi
        if ready "$dir" "$port"; then
            log "ready"
            watch_owner "$dir"
            print_env "$port" "$dir"
            return 0
        fi
        sleep 0.5
    done
    show_logs "$dir"
    stop "$dir"
    die "Kafka was not ready on 127.0.0.1:$port within 90 s; log above"
}

watch_owner() { # DIR
    local owner="${KAFKA_SERVER_OWNER_PID:-}"
    [[ -n "$owner" ]] || return 0
    kill -0 "$owner" 2>/dev/null || die "KAFKA_SERVER_OWNER_PID $owner is not a running process"
    log "will stop when process $owner exits"
    # Detached, with no inherited pipes: whoever reads this script's output must see EOF.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3"; rm -rf "$3/data"' \
        _ "$owner" "$SELF" "$1" >"$1/watch.log" 2>&1 </dev/null &
}

stop() { # DIR
    local dir="$1" pid
    pid="$(cat "$dir/kafka.pid" 2>/dev/null || true)"
    if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
        rm -f "$dir/kafka.pid"
        log "not running"
        return 0
    fi
    log "stopping Kafka (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 75); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still running after 15 s; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/kafka.pid"
}

topic() { # DIR NAME PARTITIONS
    local dir="$1" name="$2" partitions="$3" port
    [[ "$partitions" =~ ^[1-9][0-9]*$ ]] || die "PARTITIONS must be a positive number, got '$partitions'"
    alive "$dir" || die "no broker runs for $dir; start one first"
    port="$(cat "$dir/kafka.port")"
    [[ -d "$LIBS" ]] || die "the Kafka jars are missing from $LIBS; run '$0 fetch'"
    cat >"$dir/tools-log4j2.properties" <<EOF
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
EOF
    java -Xmx256m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$dir/tools-log4j2.properties" \
        -cp "$LIBS/*" org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
        --create --if-not-exists --topic "$name" --partitions "$partitions" --replication-factor 1 \
        >&2 </dev/null || die "could not create topic $name on 127.0.0.1:$port"
    log "topic $name ($partitions partitions) exists on 127.0.0.1:$port"
}

cluster() { # DIR N: N brokers, each also a controller, on free ports
    local dir="$1" n="$2" i voters="" ports=() cports=() brokers=""
    [[ "$n" =~ ^[1-9]$ ]] || die "N must be 1 to 9, got '$n'"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    need_java
    fetch_jars
    local taken=" "
    for i in $(seq 1 "$n"); do
        local p c
        p="$(free_port)"; while [[ "$taken" == *" $p "* ]]; do p="$(free_port)"; done; taken="$taken$p "
        c="$(free_port)"; while [[ "$taken" == *" $c "* ]]; do c="$(free_port)"; done; taken="$taken$c "
        ports+=("$p"); cports+=("$c")
        voters="$voters${voters:+,}$i@127.0.0.1:$c"
        brokers="$brokers${brokers:+,}127.0.0.1:$p"
    done
    local id
    id="$(cluster_id)"
    for i in $(seq 1 "$n"); do
        local d="$dir/node-$i"
        mkdir -p "$d/data"
        NODE_ID="$i" VOTERS="$voters" REPLICAS="$n" write_config "$d" "${ports[i-1]}" "${cports[i-1]}"
        touch "$d/cluster-node"
        rm -f "$d/kafka.out"
        [[ -s "$d/data/meta.properties" ]] || format "$d" "$id"
    done
    # A controller quorum needs a majority: start every node, then wait for each.
    for i in $(seq 1 "$n"); do
        launch "$dir/node-$i" "${ports[i-1]}" "${cports[i-1]}"
    done
    for i in $(seq 1 "$n"); do
        wait_ready "$dir/node-$i" "${ports[i-1]}" >/dev/null
    done
    echo "WEFT_KAFKA_BROKERS=$brokers"
}

case "${1:-}" in
start) [[ $# -eq 3 ]] || usage; start "$2" "$3" ;;
cluster) [[ $# -eq 3 ]] || usage; cluster "$2" "$3" ;;
stop)
    [[ $# -eq 2 ]] || usage
    if [[ -d "$2/node-1" && ! -f "$2/kafka.pid" ]]; then
        # All at once: stopped one by one, the last nodes wait out their lost quorum.
        for d in "$2"/node-*; do stop "$d" & done
        wait
    else
        stop "$2"
    fi
    ;;
status) [[ $# -eq 2 ]] || usage; alive "$2" ;;
topic) [[ $# -eq 4 ]] || usage; topic "$2" "$3" "$4" ;;
fetch) [[ $# -eq 1 ]] || usage; fetch_jars ;;
*) usage ;;
esac
