#!/usr/bin/env bash
# bench/run.sh: measure the release broker with the neutral librdkafka client
# (../shared/bench/kbench.sh + rdperf) side by side with librdkafka's
# in-memory mock broker (the client's ceiling on this machine), then write
# bench/RESULTS.md.
#
#   bench/run.sh            # the standard matrix, about 10 minutes on 2 cores
#
# env: N=1000000 REPS=2 CASES="p100 p200 p1k lz4 zstdr" PARTS_LIST="1 6"
#      SHARED=../shared/bench (where kbench.sh, rdperf.c, mockbroker.c live)
#      KEEP=1 keeps the scratch directory (data dir, logs, raw CSV)
# For each partition count the mock broker runs first (produce only: it keeps
# just 100,000 records per partition), then Tarn; each case produces N
# records (acks=1, batch.size=65536, linger.ms=5) to a fresh topic and, for
# Tarn, consumes them from the beginning. Tarn runs on a fresh data directory
# with default settings. Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
shared=$(cd "${SHARED:-../shared/bench}" && pwd)
export N=${N:-1000000} REPS=${REPS:-2}
export CASES=${CASES:-p100 p200 p1k lz4 zstdr}
parts_list=${PARTS_LIST:-1 6}
work=$(mktemp -d /tmp/tarn-bench.XXXXXX)
csv=$work/results.csv
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "bench: scratch kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

step() { printf '\n==> %s\n' "$*" >&2; }

step "client build (librdkafka-dev, rdperf, mockbroker)"
if ! [ -f /usr/include/librdkafka/rdkafka_mock.h ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "bench: librdkafka-dev is missing; install it or run as root" >&2; exit 1; fi
  apt-get update && apt-get install -y librdkafka-dev
fi
gcc -O2 -Wall -Wextra -o "$work/rdperf" "$shared/rdperf.c" -lrdkafka
gcc -O2 -Wall -o "$work/mockbroker" "$shared/mockbroker.c" -lrdkafka
export RDPERF=$work/rdperf

step "cargo build --release -p tarn-cli"
cargo build --release -p tarn-cli
tarn=$repo/target/release/tarn

# Starts the mock broker; sets mock_pid and mock_addr.
start_mock() {
  "$work/mockbroker" >"$work/mock.out" 2>"$work/mock.log" &
  mock_pid=$!
  pids+=("$mock_pid")
  for _ in $(seq 1 100); do
    mock_addr=$(head -n1 "$work/mock.out" 2>/dev/null || true)
    [ -n "$mock_addr" ] && return 0
    sleep 0.1
  done
  echo "bench: mock broker printed no address; its log:" >&2; cat "$work/mock.log" >&2; exit 1
}

# Starts tarn on a fresh data directory; sets tarn_pid and tarn_addr.
start_tarn() {
  rm -rf "$work/data"
  "$tarn" serve --data-dir "$work/data" --listen 127.0.0.1:0 --log-level warn \
    >"$work/tarn.out" 2>"$work/tarn.log" &
  tarn_pid=$!
  pids+=("$tarn_pid")
  for _ in $(seq 1 300); do
    line=$(grep -m1 '^tarn: listening on ' "$work/tarn.out" 2>/dev/null || true)
    if [ -n "$line" ]; then
      tarn_addr=${line#tarn: listening on }
      tarn_addr=${tarn_addr%%, data in *}
      return 0
    fi
    kill -0 "$tarn_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench: tarn did not start; its log:" >&2; cat "$work/tarn.log" >&2; exit 1
}

stop() { kill "$1" && wait "$1" 2>/dev/null || true; }

# The mock broker keeps at most 100,000 records per partition and cannot
# create topics (it auto-creates them with 4 partitions), so it serves as
# the produce ceiling only: the same rdperf produce runs as kbench.sh's,
# appended to the CSV in kbench.sh's format.
mock_produce() { # LABEL
  local c size codec extra rep res b0 b1 h0 h1
  local tick; tick=$(getconf CLK_TCK)
  cpu() { awk -v t="$tick" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$mock_pid/stat"; }
  busy() { awk -v t="$tick" '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / t }' /proc/stat; }
  field() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k { print $2 }'; }
  for c in $CASES; do
    case $c in
      p100) size=100 codec=none extra=() ;;
      p200) size=200 codec=none extra=() ;;
      lz4)  size=100 codec=lz4 extra=() ;;
      lz4r) size=100 codec=lz4 extra=(-R) ;;
      zstdr) size=100 codec=zstd extra=(-R) ;;
      p1k)  size=1024 codec=none extra=() ;;
      *) echo "bench: unknown case $c" >&2; exit 1 ;;
    esac
    for rep in $(seq 1 "$REPS"); do
      b0=$(cpu) h0=$(busy)
      res=$("$RDPERF" produce -b "$mock_addr" -t "mock-$c-$rep-$1-$$" -n "$N" -s "$size" -a 1 \
            -B 65536 -l 5 -c "$codec" "${extra[@]}" | tee -a /dev/stderr | grep '^RESULT')
      b1=$(cpu) h1=$(busy)
      [ -s "$csv" ] || echo "label,case,rep,mode,records,size,codec,secs,rate_per_s,mb_per_s,avg_ms,p50_ms,p95_ms,p99_ms,p999_ms,max_ms,client_cpu_s,broker_cpu_s,host_busy_cpu_s,broker_rss_mb" >"$csv"
      echo "$1,$c,$rep,produce,$N,$size,$codec,$(field secs "$res"),$(field rps "$res"),$(field mbps "$res"),$(field avg_ms "$res"),$(field p50_ms "$res"),$(field p95_ms "$res"),$(field p99_ms "$res"),$(field p999_ms "$res"),$(field max_ms "$res"),$(field cpu_s "$res"),$(awk -v a="$b0" -v b="$b1" 'BEGIN { printf "%.2f", b - a }'),$(awk -v a="$h0" -v b="$h1" 'BEGIN { printf "%.2f", b - a }'),$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$mock_pid/status")" >>"$csv"
    done
  done
}

start_mock
start_tarn
for parts in $parts_list; do
  step "mock broker ($mock_addr), produce only, auto-created 4-partition topics"
  mock_produce "mock-p$parts"
  step "tarn ($tarn_addr), $parts partition(s)"
  PARTS=$parts BROKER_PID=$tarn_pid "$shared/kbench.sh" "tarn-p$parts" "$tarn_addr" "$csv"
done
tarn_rss_end=$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$tarn_pid/status")
tarn_hwm=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$tarn_pid/status")
stop "$tarn_pid"
stop "$mock_pid"
cp "$csv" bench/results.csv

step "writing bench/RESULTS.md"
python3 bench/report.py "$csv" \
  --machine "$(nproc) cores; $(free -m | awk '/^Mem:/ { print $2 " MiB memory" }'); $(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
  --kernel "$(uname -r)" \
  --commit "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')" \
  --env "N=$N REPS=$REPS CASES=\"$CASES\" PARTS_LIST=\"$parts_list\"" \
  --rss-end "$tarn_rss_end" --rss-peak "$tarn_hwm" >bench/RESULTS.md
echo "bench: wrote bench/RESULTS.md and bench/results.csv" >&2
