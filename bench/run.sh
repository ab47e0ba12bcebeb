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

source "$repo/bench/lib.sh"
build_clients
build_tarn

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
