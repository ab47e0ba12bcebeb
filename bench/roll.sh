#!/usr/bin/env bash
# bench/roll.sh: what a segment roll costs producers. Produces N records of
# 1 KiB (about 2.5 segments of the default segment.bytes, 1 GiB) to one
# partition with the neutral client and prints, per run, the produce rate
# and latency and the broker's slowest fsyncs (from its /metrics
# histogram): the fsync of each segment a roll closes (run in the
# background since 4710451, while the partition's appends go on; before,
# the append that rolled waited for it).
#
#   bench/roll.sh                      # the release build of this tree
#   TARN_BINS="/tmp/a /tmp/b" bench/roll.sh   # several builds, interleaved
#
# env: N=2500000 RUNS=3 SHARED=../shared/bench. Each run starts the broker
# on a fresh data directory after `sync` and dropping the page cache (needs
# root; skipped otherwise), so one run's writeback does not slow the next.
# Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=$(cd "${SHARED:-../shared/bench}" && pwd)
n=${N:-2500000}
runs=${RUNS:-3}
work=$(mktemp -d /tmp/tarn-roll.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
gcc -O2 -Wall -Wextra -o "$work/rdperf" "$shared/rdperf.c" -lrdkafka
if [ -z "${TARN_BINS:-}" ]; then
  cargo build --release -p tarn-cli
  TARN_BINS=$PWD/target/release/tarn
fi
field() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k { print $2 }'; }

printf '| binary | run | rec/s | MB/s | p99 ms | max ms | rolls | fsyncs > 100 ms | slowest fsync bucket (s) |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for run in $(seq 1 "$runs"); do
  for bin in $TARN_BINS; do
    sync
    if [ "$(id -u)" -eq 0 ]; then echo 3 >/proc/sys/vm/drop_caches; fi
    rm -rf "$work/data"
    "$bin" serve --data-dir "$work/data" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
      --log-level info >"$work/out" 2>"$work/err" &
    pid=$!
    addr= http=
    for _ in $(seq 1 300); do
      addr=$(sed -n 's/^tarn: listening on \([^,]*\),.*/\1/p' "$work/out")
      http=$(sed -n 's/^tarn: http on //p' "$work/out")
      [ -n "$addr" ] && [ -n "$http" ] && break
      kill -0 "$pid"
      sleep 0.1
    done
    [ -n "$addr" ] || { cat "$work/err" >&2; exit 1; }
    "$work/rdperf" create -b "$addr" -t roll -p 1 -r 1 >/dev/null
    res=$("$work/rdperf" produce -b "$addr" -t roll -n "$n" -s 1024 -a 1 -B 65536 -l 5 -c none | grep '^RESULT')
    metrics=$(curl -sf "http://$http/metrics")
    # Cumulative buckets: fsyncs above 0.1 s = total - bucket{le="0.1"}.
    total=$(awk '/^tarn_fsync_duration_seconds_count/ { print $2 }' <<<"$metrics")
    fast=$(awk -F'[{}" ]' '/^tarn_fsync_duration_seconds_bucket\{le="0.1"\}/ { print $NF }' <<<"$metrics")
    slowest=$(awk -F'"' -v total="$total" '/^tarn_fsync_duration_seconds_bucket/ { split($0, a, " "); if (a[2] + 0 >= total + 0 && !found) { print $2; found = 1 } }' <<<"$metrics")
    rolls=$(grep -c 'rolled new segment' "$work/err" || true)
    kill "$pid"
    wait "$pid"
    pid=
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(basename "$bin")" "$run" \
      "$(field rps "$res")" "$(field mbps "$res")" "$(field p99_ms "$res")" "$(field max_ms "$res")" \
      "$rolls" "$((total - fast))" "$slowest"
  done
done
