#!/usr/bin/env bash
# Soak: mixed produce / consume / consumer-group load against the release
# broker for a set time, reporting every 30 s the produce and fetch rates,
# the broker's p99 Produce latency (from its own histogram), total group
# lag and broker RSS. At the end it checks that RSS stayed flat once warm
# (the last sample within 25% + 16 MiB of the first warm one) and exits
# non-zero if it did not.
#
#   bench/soak.sh [SECONDS]          (default 600)
#
# Load: two rdperf producers in a loop (200-byte records, acks=1, lz4 on
# one), two rdperf consumers in one group (subscribe, auto commit) and one
# assign()ed reader from the beginning, all on a 6-partition topic whose
# retention.bytes bounds the disk it uses (about 3 GiB).
# Needs gcc and librdkafka-dev (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
interval=30
here=$PWD
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

if [[ ! -e /usr/include/librdkafka/rdkafka.h ]]; then
    apt-get update && apt-get install -y --no-install-recommends librdkafka-dev
fi
rdperf=$here/target/rdperf
gcc -O2 -Wall -Wextra -o "$rdperf" ../shared/bench/rdperf.c -lrdkafka
cargo build --release -p tarn-cli
tarn=$here/target/release/tarn

"$tarn" serve --data-dir "$work/data" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --set group.initial.rebalance.delay.ms=0 --set log.retention.check.interval.ms=10000 >"$work/serve.out" 2>"$work/serve.err" &
broker=$!
pids+=("$broker")
for _ in $(seq 100); do
    [[ $(wc -l <"$work/serve.out") -ge 2 ]] && break
    sleep 0.1
done
bootstrap=$(sed -n 's/^tarn: listening on \([^,]*\),.*/\1/p' "$work/serve.out")
http=$(sed -n 's/^tarn: http on //p' "$work/serve.out")
[[ -n $bootstrap && -n $http ]] || { cat "$work/serve.err" >&2; echo "soak: broker did not start" >&2; exit 1; }
# Retention keeps the disk bounded however long the soak runs: at most
# about 512 MiB per partition (64 MiB segments), 3 GiB in all.
"$tarn" topics create --bootstrap-server "$bootstrap" --topic soak --partitions 6 \
    --config retention.bytes=536870912 --config segment.bytes=67108864

produce_loop() { # codec
    while :; do
        "$rdperf" produce -b "$bootstrap" -t soak -n 200000 -s 200 -a 1 -c "$1" >>"$work/produce-$1.log" 2>&1 ||
            { echo "soak: producer ($1) failed" >&2; tail -5 "$work/produce-$1.log" >&2; kill $$; }
    done
}
produce_loop none & pids+=($!)
produce_loop lz4 & pids+=($!)
for member in 1 2; do
    "$rdperf" consume -b "$bootstrap" -t soak -n 2000000000 -g soak-group -T 100000 >"$work/group-$member.log" 2>&1 &
    pids+=($!)
done
"$rdperf" consume -b "$bootstrap" -t soak -n 2000000000 -T 100000 >"$work/reader.log" 2>&1 &
pids+=($!)

metric_sum() { # NAME [LABEL-FILTER]: sum of a metric's samples
    awk -v name="$1" -v filter="${2:-}" '
        index($0, name) == 1 && (filter == "" || index($0, filter)) {
            rest = substr($0, length(name) + 1)
            if (rest ~ /^[{ ]/) sum += $NF
        }
        END { printf "%.0f", sum }' "$work/metrics"
}
p99_ms() { # from the delta of the Produce latency histogram
    awk 'FNR == NR { if (index($0, "tarn_request_duration_seconds_bucket{api=\"Produce\"")) prev[$1] = $2; next }
         index($0, "tarn_request_duration_seconds_bucket{api=\"Produce\"") {
             match($1, /le="[^"]*"/); le = substr($1, RSTART + 4, RLENGTH - 5)
             les[++n] = le; counts[n] = $2 - prev[$1]
         }
         END { total = counts[n]; if (total <= 0) { print "n/a"; exit }
               for (i = 1; i <= n; i++) if (counts[i] >= 0.99 * total) { printf "%.1f", les[i] * 1000; exit } }' \
        "$work/metrics.prev" "$work/metrics"
}
rss_mb() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$broker/status"; }

curl -sf "http://$http/metrics" >"$work/metrics"
printf '%6s %12s %12s %12s %10s %8s\n' elapsed produce/s fetch/s p99_ms group_lag rss_mb
elapsed=0 warm_rss= last_rss=
while ((elapsed < duration)); do
    cp "$work/metrics" "$work/metrics.prev"
    in0=$(metric_sum tarn_topic_records_in_total) out0=$(metric_sum tarn_topic_records_out_total)
    sleep "$interval"
    elapsed=$((elapsed + interval))
    kill -0 "$broker" || { echo "soak: broker died" >&2; tail -20 "$work/serve.err" >&2; exit 1; }
    curl -sf "http://$http/metrics" >"$work/metrics"
    in1=$(metric_sum tarn_topic_records_in_total) out1=$(metric_sum tarn_topic_records_out_total)
    last_rss=$(rss_mb)
    # The first minute warms caches and buffers; flatness is judged after.
    if [[ -z $warm_rss && $elapsed -ge 60 ]]; then warm_rss=$last_rss; fi
    printf '%6d %12d %12d %12s %10s %8s\n' "$elapsed" $(((in1 - in0) / interval)) $(((out1 - out0) / interval)) \
        "$(p99_ms)" "$(metric_sum tarn_group_lag)" "$last_rss"
done
warm_rss=${warm_rss:-$last_rss}
limit=$((warm_rss * 125 / 100 + 16))
echo "RSS warm ${warm_rss} MiB, last ${last_rss} MiB, limit ${limit} MiB"
if ((last_rss > limit)); then
    echo "soak: RSS grew beyond the limit" >&2
    exit 1
fi
