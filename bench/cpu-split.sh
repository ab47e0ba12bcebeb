#!/usr/bin/env bash
# bench/cpu-split.sh: where each broker's CPU goes, user space or the
# kernel, for the same records. Tarn, then Apache Kafka (scripts/kafka.sh),
# each fresh: for one and for six partitions, REPS times, a new topic is
# created, the page cache written back and dropped (bench/rdperf-created.sh,
# as the matrix does: on this kind of VM, page cache memory used for the
# first time costs several times the CPU), N records of SIZE bytes
# produced (rdperf, acks=1, batch.size=65536, linger.ms=5) and
# then read back (librdkafka's fetch-queue bounds lifted, as
# bench/vs-kafka.sh's reads do); the broker's user and system CPU ticks
# (/proc/PID/stat, 1/CLK_TCK s each) over each step are printed as
#
#   SPLIT broker=tarn parts=6 rep=1 step=consume user_ticks=3 sys_ticks=25
#
# Why: on loopback a broker's kernel time includes the receiving side of
# every byte it sends (the consumer's TCP receive path runs in the sender's
# softirq), so a broker that spends little in user space cannot go below
# the kernel time both brokers pay for the same bytes.
#
# env: N=1000000 SIZE=1024 REPS=3 KAFKA_PORT=19192 TARN_BIN=... SHARED=../shared/bench
# Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
shared=$(cd "${SHARED:-../shared/bench}" && pwd)
n=${N:-1000000}
size=${SIZE:-1024}
reps=${REPS:-3}
kafka_port=${KAFKA_PORT:-19192}
work=$(mktemp -d /tmp/tarn-cpu-split.XXXXXX)
pids=()
cleanup() {
  if [ -s "$work/kafka/kafka.pid" ]; then "$repo/scripts/kafka.sh" stop "$work/kafka" || true; fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
source "$repo/bench/lib.sh"

ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }

# Prints one SPLIT line for the command after BROKER PID PARTS REP STEP.
measured() {
  local broker=$1 pid=$2 parts=$3 rep=$4 name=$5 u0 s0 u1 s1
  shift 5
  read -r u0 s0 < <(ticks "$pid")
  "$@" | grep -q '^RESULT'
  read -r u1 s1 < <(ticks "$pid")
  echo "SPLIT broker=$broker parts=$parts rep=$rep step=$name user_ticks=$((u1 - u0)) sys_ticks=$((s1 - s0))"
}

run() { # BROKER ADDR PID
  local parts rep topic
  for parts in 1 6; do
    for rep in $(seq 1 "$reps"); do
      topic="split-$parts-$rep"
      "$RDPERF" create -b "$2" -t "$topic" -p "$parts" -r 1 >/dev/null
      measured "$1" "$3" "$parts" "$rep" produce \
        "$RDPERF" produce -b "$2" -t "$topic" -n "$n" -s "$size" -a 1 -B 65536 -l 5 -c none
      measured "$1" "$3" "$parts" "$rep" consume \
        "$RDPERF" consume -b "$2" -t "$topic" -n "$n" \
        -X queued.min.messages=10000000 -X queued.max.messages.kbytes=2097151
    done
  done
}

build_clients
export RDPERF_REAL=$RDPERF RDPERF=$repo/bench/rdperf-created.sh
build_tarn
echo "SPLIT host cores=$(nproc) tick_s=$(awk -v t="$tick" 'BEGIN { print 1 / t }') n=$n size=$size commit=$(git rev-parse --short HEAD)"
start_tarn
run tarn "$tarn_addr" "$tarn_pid"
stop "$tarn_pid"
start_kafka "$kafka_port"
run kafka "$kafka_addr" "$kafka_pid"
"$repo/scripts/kafka.sh" stop "$work/kafka"
