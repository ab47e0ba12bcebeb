#!/usr/bin/env bash
# bench/vs-kafka.sh: Tarn side by side with Apache Kafka (4.4.0, from Maven
# Central through scripts/kafka.sh, one KRaft node with a fixed heap) and
# librdkafka's mock broker, all measured with the neutral librdkafka client
# (../shared/bench/rdperf) in one run; writes bench/RESULTS-vs-kafka.md and
# bench/results-vs-kafka.csv.
#
#   bench/vs-kafka.sh [SECTION...]   # matrix sustained partitions flush (all by default)
#
# Sections:
#   matrix      kbench cases (CASES, default p100 p200 p1k lz4r zstdr) with 1
#               and 6 partitions (PARTS_LIST): N records produced (acks=1,
#               batch.size=65536, linger.ms=5) to a fresh topic, then consumed;
#               the mock broker produces only (it stores nothing)
#   sustained   SUSTAINED_M (20) million 100 B records into one topic of
#               SUSTAINED_PARTS (1000) partitions, produced in steps of one
#               million: rate, broker CPU and p99 per step as the data grows
#   partitions  topics of 100 partitions each, up to 2,000 and then 10,000
#               empty partitions: broker RSS, open files, creation time
#   flush       p100 produce to a topic with flush.messages=1 and to one with
#               the default, alternately, REPS times each after FLUSH_WARMUP
#               (3) unreported rounds
#   reads       consumes only (not in the default list): N records of
#               100 B sent one per batch (batch.size=1, linger.ms=0, as a
#               synchronous or low-rate producer sends them) into one
#               partition, and N in 64 KiB batches into 1,000 partitions
#               (READS_SHAPES="onebatch wide"); each read REPS times after
#               one unreported read, with librdkafka's fetch queue bounds
#               lifted (see RESULTS-vs-kafka.md on its queue's sleeps)
#
# env: N=1000000 REPS=2 FLUSH_WARMUP=3 KAFKA_HEAP=1g KAFKA_PORT=19192 SHARED=../shared/bench
#      KEEP=1 keeps the scratch directory (data dirs, logs, raw CSV)
#      OUT=FILE.md writes the report there and the raw CSVs beside it
#      (FILE.csv, FILE-extra.csv) instead of bench/RESULTS-vs-kafka.md
#      and bench/results-vs-kafka*.csv
# Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
shared=$(cd "${SHARED:-../shared/bench}" && pwd)
export N=${N:-1000000} REPS=${REPS:-2}
export CASES=${CASES:-p100 p200 p1k lz4r zstdr}
parts_list=${PARTS_LIST:-1 6}
kafka_port=${KAFKA_PORT:-19192}
sections=("$@")
((${#sections[@]})) || sections=(matrix sustained partitions flush)
work=$(mktemp -d /tmp/tarn-vs-kafka.XXXXXX)
csv=$work/results.csv
extra_csv=$work/extra.csv
pids=()
cleanup() {
  if [ -s "$work/kafka/kafka.pid" ]; then "$repo/scripts/kafka.sh" stop "$work/kafka" || true; fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "bench: scratch kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
source "$repo/bench/lib.sh"

echo "section,broker,step,records,secs,rate_per_s,p99_ms,broker_cpu_s,broker_rss_mb,open_fds,partitions" >"$extra_csv"

stop_kafka() { "$repo/scripts/kafka.sh" stop "$work/kafka"; }

# Runs the kbench matrix against one broker for each partition count.
matrix() { # LABEL ADDR PID
  local parts
  for parts in $parts_list; do
    step "$1 ($2), $parts partition(s)"
    PARTS=$parts BROKER_PID=$3 "$shared/kbench.sh" "$1-p$parts" "$2" "$csv"
  done
}

# Produces SUSTAINED_M million 100 B records to one topic in one-million
# steps and records each step.
sustained() { # LABEL ADDR PID
  local topic="sustained-$$" m res b0 b1
  local parts=${SUSTAINED_PARTS:-1000}
  step "$1: ${SUSTAINED_M:-20} M x 100 B into $parts partitions"
  "$RDPERF" create -b "$2" -t "$topic" -p "$parts" -r 1 >/dev/null
  for m in $(seq 1 "${SUSTAINED_M:-20}"); do
    b0=$(cpu_s "$3")
    res=$("$RDPERF" produce -b "$2" -t "$topic" -n 1000000 -s 100 -a 1 -B 65536 -l 5 -c none |
          tee -a /dev/stderr | grep '^RESULT')
    b1=$(cpu_s "$3")
    echo "sustained,$1,$m,1000000,$(field secs "$res"),$(field rps "$res"),$(field p99_ms "$res"),$(minus "$b0" "$b1"),$(rss_mb "$3"),$(fds "$3"),$parts" >>"$extra_csv"
  done
}

# Creates topics of 100 partitions until the broker holds 2,000 and then
# 10,000 empty partitions; records RSS, open files and creation time.
partitions() { # LABEL ADDR PID
  local made=0 target t0 t1 i
  step "$1: empty partitions"
  echo "partitions,$1,0,0,0,0,,$(cpu_s "$3"),$(rss_mb "$3"),$(fds "$3"),0" >>"$extra_csv"
  for target in 2000 10000; do
    t0=$(date +%s.%N)
    while ((made < target)); do
      "$RDPERF" create -b "$2" -t "empty-$made" -p 100 -r 1 >/dev/null
      made=$((made + 100))
    done
    t1=$(date +%s.%N)
    # Let the broker settle (Kafka creates partitions asynchronously).
    sleep 10
    echo "partitions,$1,$target,0,$(minus "$t0" "$t1"),,,$(cpu_s "$3"),$(rss_mb "$3"),$(fds "$3"),$target" >>"$extra_csv"
  done
}

# p100 produce to a topic with flush.messages=1 and to a default one,
# alternately. Kafka's topic config is set with kafka-configs. The first
# FLUSH_WARMUP rounds are recorded as warmup-* steps and left out of the
# report's medians: Kafka's default rate grows round by round while its JIT
# compiles the produce path (0.21, 0.34, 0.54 M/s in three rounds on the
# AMD host), and its flush.messages=1 rate, held by fsyncs, does not, so a
# cold first round measures start-up rather than what flushing costs.
flush() { # LABEL ADDR PID
  local rep mode topic res b0 b1 step
  local warmup=${FLUSH_WARMUP:-3}
  for rep in $(seq 1 $((warmup + REPS))); do
    for mode in default flush1; do
      step=$mode-$((rep - warmup))
      ((rep > warmup)) || step=warmup-$mode-$rep
      topic="flush-$mode-$rep-$$"
      "$RDPERF" create -b "$2" -t "$topic" -p 1 -r 1 >/dev/null
      if [ "$mode" = flush1 ]; then
        "$repo/scripts/kafka.sh" tool kafka-configs --bootstrap-server "$2" --alter \
          --entity-type topics --entity-name "$topic" --add-config flush.messages=1 >/dev/null
      fi
      b0=$(cpu_s "$3")
      res=$("$RDPERF" produce -b "$2" -t "$topic" -n "$N" -s 100 -a 1 -B 65536 -l 5 -c none |
            tee -a /dev/stderr | grep '^RESULT')
      b1=$(cpu_s "$3")
      echo "flush,$1,$step,$N,$(field secs "$res"),$(field rps "$res"),$(field p99_ms "$res"),$(minus "$b0" "$b1"),$(rss_mb "$3"),$(fds "$3"),1" >>"$extra_csv"
    done
  done
}

# Consume-only reads of two shapes of data: records sent one per batch,
# and a topic of 1,000 partitions.
reads() { # LABEL ADDR PID
  local shape n parts batch linger topic rep res b0 b1 step
  for shape in ${READS_SHAPES:-onebatch wide}; do
    n=$N
    case $shape in
      onebatch) parts=1 batch=1 linger=0 ;;
      wide) parts=1000 batch=65536 linger=5 ;;
      *) echo "bench: unknown reads shape $shape" >&2; exit 1 ;;
    esac
    topic="reads-$shape-$$"
    step "$1: $n x 100 B records ($shape: batch.size=$batch, $parts partitions), then read"
    "$RDPERF" create -b "$2" -t "$topic" -p "$parts" -r 1 >/dev/null
    "$RDPERF" produce -b "$2" -t "$topic" -n "$n" -s 100 -a 1 -B "$batch" -l "$linger" -c none |
      tee -a /dev/stderr | grep -q '^RESULT'
    for rep in $(seq 0 "$REPS"); do
      b0=$(cpu_s "$3")
      res=$("$RDPERF" consume -b "$2" -t "$topic" -n "$n" \
              -X queued.min.messages=10000000 -X queued.max.messages.kbytes=2097151 |
            tee -a /dev/stderr | grep '^RESULT')
      b1=$(cpu_s "$3")
      step=$shape-$rep
      ((rep > 0)) || step=warmup-$shape
      echo "reads,$1,$step,$n,$(field secs "$res"),$(field msgps "$res"),,$(minus "$b0" "$b1"),$(rss_mb "$3"),$(fds "$3"),$parts" >>"$extra_csv"
    done
  done
}

build_clients
export RDPERF_REAL=$RDPERF RDPERF=$repo/bench/rdperf-created.sh
build_tarn
step "Apache Kafka (scripts/kafka.sh classpath)"
"$repo/scripts/kafka.sh" classpath >/dev/null

rss_after_matrix=()
for section in "${sections[@]}"; do
  case $section in
    matrix)
      start_mock
      for parts in $parts_list; do
        step "mock broker ($mock_addr), produce only"
        mock_produce "mock-p$parts"
      done
      stop "$mock_pid"
      start_tarn
      matrix tarn "$tarn_addr" "$tarn_pid"
      rss_after_matrix+=("tarn=$(rss_mb "$tarn_pid")")
      stop "$tarn_pid"
      start_kafka "$kafka_port"
      matrix kafka "$kafka_addr" "$kafka_pid"
      rss_after_matrix+=("kafka=$(rss_mb "$kafka_pid")")
      stop_kafka
      ;;
    sustained | partitions | flush | reads)
      start_tarn
      "$section" tarn "$tarn_addr" "$tarn_pid"
      stop "$tarn_pid"
      start_kafka "$kafka_port"
      "$section" kafka "$kafka_addr" "$kafka_pid"
      stop_kafka
      ;;
    *) echo "bench: unknown section $section" >&2; exit 1 ;;
  esac
done

[ -s "$csv" ] || echo "label,case,rep,mode,records,size,codec,secs,rate_per_s,mb_per_s,avg_ms,p50_ms,p95_ms,p99_ms,p999_ms,max_ms,client_cpu_s,broker_cpu_s,host_busy_cpu_s,broker_rss_mb" >"$csv"
report=${OUT:-bench/RESULTS-vs-kafka.md}
if [ -n "${OUT:-}" ]; then
  cp "$csv" "${OUT%.md}.csv"
  cp "$extra_csv" "${OUT%.md}-extra.csv"
else
  cp "$csv" bench/results-vs-kafka.csv
  cp "$extra_csv" bench/results-vs-kafka-extra.csv
fi
step "writing $report"
python3 bench/report_vs_kafka.py "$csv" "$extra_csv" \
  --machine "$(nproc) cores; $(free -m | awk '/^Mem:/ { print $2 " MiB memory" }'); $(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
  --commit "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')" \
  --env "N=$N REPS=$REPS FLUSH_WARMUP=${FLUSH_WARMUP:-3} CASES=\"$CASES\" PARTS_LIST=\"$parts_list\" KAFKA_HEAP=${KAFKA_HEAP:-1g} sections=\"${sections[*]}\"" \
  --rss-after-matrix "${rss_after_matrix[*]}" >"$report"
echo "bench: wrote $report" >&2
