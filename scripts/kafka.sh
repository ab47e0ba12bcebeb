#!/usr/bin/env bash
# Apache Kafka beside Tarn, as the reference for behaviour (differential
# tests) and speed (benchmarks in one run). Resolves Kafka (default 4.4.0)
# and its dependencies from Maven Central into ~/.m2 once, then:
#
#   scripts/kafka.sh classpath              print the classpath file's path
#   scripts/kafka.sh start DIR [PORT]       format DIR as a single KRaft node
#                                           (broker and controller in one
#                                           process) on 127.0.0.1:PORT (9192)
#                                           and start it; prints
#                                           "kafka: listening on HOST:PORT,
#                                           pid PID" once it answers
#   scripts/kafka.sh stop DIR               SIGTERM the node started in DIR
#   scripts/kafka.sh tool NAME [ARGS...]    run one of Kafka's command-line
#                                           tools (kafka-topics, kafka-configs,
#                                           kafka-dump-log, ... as the .sh
#                                           scripts are named), e.g.
#                                           scripts/kafka.sh tool kafka-topics \
#                                             --bootstrap-server 127.0.0.1:9092 --list
#
# KAFKA_VERSION picks another version; KAFKA_HEAP (default 1g) the server's
# fixed heap; KAFKA_START_TIMEOUT_S (default 90) how long start waits.
#
# One node of a cluster: KAFKA_NODE_ID (default 1), KAFKA_CONTROLLER_PORT
# (default PORT+1), KAFKA_VOTERS (controller.quorum.voters, default this
# node alone) and KAFKA_CLUSTER_ID (the same for every node; default a new
# one). Start a cluster's nodes at once: each start waits for a quorum.
# KAFKA_EXTRA_PROPERTIES: more server.properties lines (`key=value`, one per
# line), appended after the ones above. KAFKA_RELEASE_VERSION formats a new
# node at that metadata.version (e.g. 3.3-IV3, the one Tarn runs at)
# instead of the release's own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${KAFKA_VERSION:-4.4.0}
cache="$root/target/kafka-$version"
classpath_file="$cache/classpath.txt"
self="$root/scripts/kafka.sh"

die() { echo "kafka.sh: $*" >&2; exit 1; }

resolve() {
    if [[ -s "$classpath_file" ]]; then
        return
    fi
    mkdir -p "$cache"
    echo "kafka.sh: resolving Apache Kafka $version from Maven Central" >&2
    mvn -B -q -ntp -f "$root/scripts/kafka/pom.xml" -Dkafka.version="$version" \
        dependency:build-classpath -Dmdep.outputFile="$classpath_file.tmp" >&2
    mv "$classpath_file.tmp" "$classpath_file"
}

# The main class behind each of Kafka's bin/*.sh scripts that we run.
main_class() {
    case "$1" in
        kafka-server-start) echo kafka.Kafka ;;
        kafka-storage) echo kafka.tools.StorageTool ;;
        kafka-topics) echo org.apache.kafka.tools.TopicCommand ;;
        kafka-configs) echo org.apache.kafka.tools.ConfigCommand ;;
        kafka-consumer-groups) echo org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
        kafka-console-producer) echo org.apache.kafka.tools.ConsoleProducer ;;
        kafka-console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
        kafka-get-offsets) echo org.apache.kafka.tools.GetOffsetShell ;;
        kafka-delete-records) echo org.apache.kafka.tools.DeleteRecordsCommand ;;
        kafka-log-dirs) echo org.apache.kafka.tools.LogDirsCommand ;;
        kafka-producer-perf-test) echo org.apache.kafka.tools.ProducerPerformance ;;
        kafka-consumer-perf-test) echo org.apache.kafka.tools.ConsumerPerformance ;;
        kafka-dump-log) echo org.apache.kafka.tools.DumpLogSegments ;;
        kafka-leader-election) echo org.apache.kafka.tools.LeaderElectionCommand ;;
        kafka-reassign-partitions) echo org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
        kafka-transactions) echo org.apache.kafka.tools.TransactionsCommand ;;
        kafka-features) echo org.apache.kafka.tools.FeatureCommand ;;
        kafka-metadata-quorum) echo org.apache.kafka.tools.MetadataQuorumCommand ;;
        kafka-broker-api-versions) echo org.apache.kafka.tools.BrokerApiVersionsCommand ;;
        kafka-cluster) echo org.apache.kafka.tools.ClusterTool ;;
        kafka-groups) echo org.apache.kafka.tools.GroupsCommand ;;
        kafka-acls) echo org.apache.kafka.tools.AclCommand ;;
        kafka-client-metrics) echo org.apache.kafka.tools.ClientMetricsCommand ;;
        kafka-e2e-latency) echo org.apache.kafka.tools.EndToEndLatency ;;
        kafka-verifiable-producer) echo org.apache.kafka.tools.VerifiableProducer ;;
        kafka-verifiable-consumer) echo org.apache.kafka.tools.VerifiableConsumer ;;
        *) die "unknown tool $1" ;;
    esac
}

# Runs a main class with the resolved classpath; extra JVM flags first.
run_java() {
    resolve
    local jvm=()
    while [[ $# -gt 0 && $1 == -* ]]; do
        jvm+=("$1")
        shift
    done
    exec java "${jvm[@]}" \
        -Dlog4j2.configurationFile="$root/scripts/kafka/log4j2.properties" \
        -cp "$(cat "$classpath_file")" "$@"
}

start() {
    local dir=${1:?usage: kafka.sh start DIR [PORT]}
    local port=${2:-9192}
    local controller_port=${KAFKA_CONTROLLER_PORT:-$((port + 1))}
    local node_id=${KAFKA_NODE_ID:-1}
    local voters=${KAFKA_VOTERS:-$node_id@127.0.0.1:$controller_port}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [[ -s "$dir/kafka.pid" ]] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null; then
        die "a Kafka node already runs in $dir (pid $(cat "$dir/kafka.pid"))"
    fi
    resolve
    cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
    if [[ -n ${KAFKA_EXTRA_PROPERTIES:-} ]]; then
        printf '%s\n' "$KAFKA_EXTRA_PROPERTIES" >>"$dir/server.properties"
    fi
    if [[ ! -e "$dir/data/meta.properties" ]]; then
        local cluster_id=${KAFKA_CLUSTER_ID:-}
        if [[ -z $cluster_id ]]; then
            cluster_id=$("$self" tool kafka-storage random-uuid)
        fi
        local release=()
        if [[ -n ${KAFKA_RELEASE_VERSION:-} ]]; then
            release=(--release-version "$KAFKA_RELEASE_VERSION")
        fi
        "$self" tool kafka-storage format -t "$cluster_id" -c "$dir/server.properties" \
            "${release[@]}" >"$dir/format.log"
    fi
    local heap=${KAFKA_HEAP:-1g}
    # Emptied here, before the start: the started process's own redirect
    # may come after the wait below has read the last start's "started".
    : >"$dir/server.log"
    (
        cd "$dir"
        "$self" java "-Xms$heap" "-Xmx$heap" -XX:+UseG1GC -Dkafka.log.level=INFO \
            kafka.Kafka "$dir/server.properties" >"$dir/server.log" 2>&1 &
        echo $! >"$dir/kafka.pid"
    )
    local pid
    pid=$(cat "$dir/kafka.pid")
    local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT_S:-90}))
    until grep -q "Kafka Server started" "$dir/server.log"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$dir/server.log" >&2
            die "Kafka exited during start-up (log: $dir/server.log)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 40 "$dir/server.log" >&2
            die "Kafka did not start within ${KAFKA_START_TIMEOUT_S:-90}s (log: $dir/server.log)"
        fi
        sleep 0.5
    done
    echo "kafka: listening on 127.0.0.1:$port, pid $pid"
}

stop() {
    local dir=${1:?usage: kafka.sh stop DIR}
    local pid
    pid=$(cat "$dir/kafka.pid") || die "no kafka.pid in $dir"
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "kafka.sh: pid $pid in $dir is not running" >&2
        rm -f "$dir/kafka.pid"
        return
    fi
    kill -TERM "$pid"
    local deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            kill -KILL "$pid"
            die "Kafka (pid $pid) did not stop within 60s of SIGTERM; killed"
        fi
        sleep 0.2
    done
    rm -f "$dir/kafka.pid"
}

command=${1:-}
shift || true
case "$command" in
    classpath) resolve; echo "$classpath_file" ;;
    start) start "$@" ;;
    stop) stop "$@" ;;
    tool)
        name=${1:?usage: kafka.sh tool NAME [ARGS...]}
        shift
        run_java -Xmx512m "$(main_class "$name")" "$@"
        ;;
    java) run_java "$@" ;;
    *) sed -n '2,24p' "$self" >&2; exit 2 ;;
esac
