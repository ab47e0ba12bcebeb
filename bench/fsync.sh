#!/usr/bin/env bash
# fsync cost: 150,000 records x 300 B, batch.size=65536, one partition, acks=1,
# through rdperf (librdkafka), with flush.messages = default (never), 1, 10,
# 100, 1000, 10000; RUNS runs each, with one producer and with PRODUCERS
# concurrent producers (each sending 150,000 / PRODUCERS records to the same
# partition; the rate is total records / wall time of the slowest).
#
#   gcc -O2 -o /tmp/rdperf ../shared/bench/rdperf.c -lrdkafka   # apt-get install librdkafka-dev
#   cargo build --release -p tarn-cli
#   bench/fsync.sh [TARN_BIN]                 # default target/release/tarn
#   RDPERF=/tmp/rdperf RUNS=2 PRODUCERS=4 bench/fsync.sh
#
# Prints a markdown table (records/s); RECORD=1 appends it to bench/RESULTS-storage.md.
set -euo pipefail
cd "$(dirname "$0")/.."
TARN=${1:-target/release/tarn}
RDPERF=${RDPERF:-/tmp/rdperf}
RUNS=${RUNS:-2}
PRODUCERS=${PRODUCERS:-4}
RECORDS=${RECORDS:-150000}
PORT=${PORT:-19094}
SETTINGS=${SETTINGS:-"default 1 10 100 1000 10000"}
[ -x "$TARN" ] || { echo "no tarn binary at $TARN" >&2; exit 1; }
[ -x "$RDPERF" ] || { echo "no rdperf at $RDPERF (see the header of this script)" >&2; exit 1; }

DATA=$(mktemp -d /var/tmp/tarn-fsync-XXXXXX)
LOG="$DATA.broker.log"
: >"$LOG.out"
"$TARN" serve --data-dir "$DATA" --listen "127.0.0.1:$PORT" --log-level warn >"$LOG.out" 2>"$LOG" &
PID=$!
cleanup() { kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$DATA" "$LOG" "$LOG.out" "$LOG".rdperf.*; }
trap cleanup EXIT
for _ in $(seq 100); do grep -q "listening on" "$LOG.out" && break; sleep 0.1; done
grep -q "listening on" "$LOG.out" || { echo "broker did not start:" >&2; cat "$LOG" >&2; exit 1; }
BOOT="127.0.0.1:$PORT"

# produce TOPIC N -> prints records/s of one rdperf run
produce() {
  local out err="$LOG.rdperf.$BASHPID"
  if ! out=$("$RDPERF" produce -b "$BOOT" -t "$1" -n "$2" -s 300 -B 65536 -a 1 2>"$err"); then
    echo "fsync: rdperf produce to $1 failed:" >&2; cat "$err" >&2; exit 1
  fi
  grep '^RESULT' <<<"$out" | sed -E 's/.* rps=([0-9.]+).*/\1/'
}

run_case() { # SETTING RUN PRODUCERS
  local topic="fsync-$1-$2-p$3" args=()
  [ "$1" != default ] && args=(--config "flush.messages=$1")
  "$TARN" topics create --bootstrap-server "$BOOT" --topic "$topic" --partitions 1 \
    --replication-factor 1 "${args[@]}" >/dev/null
  if [ "$3" = 1 ]; then
    produce "$topic" "$RECORDS"
  else
    local start end n=$((RECORDS / $3)) pids=()
    start=$(date +%s.%N)
    for _ in $(seq "$3"); do produce "$topic" "$n" >/dev/null & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p" || { echo "a producer failed" >&2; exit 1; }; done
    end=$(date +%s.%N)
    echo "$(( n * $3 )) / ($end - $start)" | bc -l | xargs printf '%.1f\n'
  fi
}

cpu_ticks() { sed -E 's/^.*\) //' "/proc/$PID/stat" | awk '{print $12 + $13}'; }
CPU0=$(cpu_ticks)
HEADER="| flush.messages | producers | $(for r in $(seq "$RUNS"); do printf "run %s (rec/s) | " "$r"; done)median | median vs default |"
SEP="| --- | --- | $(for r in $(seq "$RUNS"); do printf -- "--- | "; done)--- | --- |"
echo "$HEADER"; echo "$SEP"
# Rounds go through every case once, so load that drifts during the
# benchmark spreads over all cases instead of biasing one.
declare -A RATES BASE
for run in $(seq "$RUNS"); do
  for producers in 1 "$PRODUCERS"; do
    for setting in $SETTINGS; do
      RATES[$setting,$producers]+="$(run_case "$setting" "$run" "$producers") "
    done
  done
done
OUT=""
for producers in 1 "$PRODUCERS"; do
  for setting in $SETTINGS; do
    read -r -a rates <<<"${RATES[$setting,$producers]}"
    median=$(printf '%s\n' "${rates[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f\n", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
    [ "$setting" = default ] && BASE[$producers]=$median
    ratio=$(echo "$median / ${BASE[$producers]}" | bc -l | xargs printf '%.2f')
    line="| $setting | $producers | $(printf '%s | ' "${rates[@]}")$median | ${ratio}x |"
    echo "$line"
    OUT+="$line"$'\n'
  done
done
CPU1=$(cpu_ticks)
CPU_LINE="broker CPU: $(echo "($CPU1 - $CPU0) / $(getconf CLK_TCK)" | bc -l | xargs printf '%.1f') s for all runs"
echo "$CPU_LINE"
if [ "${RECORD:-0}" = 1 ]; then printf '%s\n%s\n%s\n%s\n' "$HEADER" "$SEP" "$OUT" "$CPU_LINE" >> bench/RESULTS-storage.md; fi
