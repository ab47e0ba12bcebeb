#!/usr/bin/env bash
# bench/replication.sh: what replication costs, on one three-node cluster
# and with the neutral librdkafka client (../shared/bench/rdperf), in one
# run: N records of SIZE bytes produced with acks=1 to a topic of
# replication factor 1, and with acks=all to one of replication factor 3
# and min.insync.replicas=2, alternately, REPS times each. Writes
# bench/RESULTS-replication.md (raw lines in bench/results-replication.csv).
#
# Targets (issue 14): acks=all/RF3 keeps >= 80% of acks=1/RF1's rate, p99
# <= 30 ms, and the three brokers' CPU per million replicated records is
# at most 3.5 times their CPU per million unreplicated ones.
#
# env: N=2000000 SIZE=100 REPS=3 PARTS=6 TARN_BIN SHARED=../shared/bench
#      QUEUE_MAX: the client's queue.buffering.max.messages (librdkafka's
#        default, 100000, when unset). rdperf is a closed loop: once the
#        brokers are the bottleneck its latency is mostly this queue's
#        depth divided by the rate, so a run with a smaller queue shows
#        the brokers' latency rather than the client's backlog.
#      OUT=bench/RESULTS-replication.md (raw lines go beside it, .csv)
#      KEEP=1 keeps the scratch directory (data dirs, every node's log)
# Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
shared=$(cd "${SHARED:-../shared/bench}" && pwd)
N=${N:-2000000} SIZE=${SIZE:-100} REPS=${REPS:-3} PARTS=${PARTS:-6}
OUT=${OUT:-bench/RESULTS-replication.md}
raw=${OUT%.md}.csv
raw=$(dirname "$raw")/$(basename "$raw" | sed 's/^RESULTS-/results-/')
# Before each run the page cache is written back and dropped (when this
# runs as root): on this kind of VM, writing into guest memory the page
# cache has not used before costs several times the CPU (the kernel's copy
# into the page cache took half the brokers' time once a run's data
# pushed the cache into fresh memory), which fell on whichever run came
# later.
drop_caches=0
if [ -w /proc/sys/vm/drop_caches ]; then drop_caches=1; fi
settle() {
  sync
  if [ "$drop_caches" = 1 ]; then echo 1 >/proc/sys/vm/drop_caches; fi
}
queue_opts=()
if [ -n "${QUEUE_MAX:-}" ]; then queue_opts=(-X "queue.buffering.max.messages=$QUEUE_MAX"); fi
work=$(mktemp -d /tmp/tarn-replication.XXXXXX)
csv=$work/unused.csv
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "bench: scratch kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
source "$repo/bench/lib.sh"

build_clients
build_tarn

# Three nodes, each broker and controller, on fixed loopback ports.
voters="1@127.0.0.1:29193,2@127.0.0.1:29293,3@127.0.0.1:29393"
bootstrap="127.0.0.1:29192,127.0.0.1:29292,127.0.0.1:29392"
for i in 1 2 3; do
  "$tarn" serve --data-dir "$work/d$i" --http-listen off --log-level warn \
    --set node.id=$i --set process.roles=broker,controller \
    --set listeners=PLAINTEXT://127.0.0.1:29${i}92,CONTROLLER://127.0.0.1:29${i}93 \
    --set controller.listener.names=CONTROLLER \
    --set controller.quorum.voters=$voters >"$work/n$i.out" 2>"$work/n$i.log" &
  pids+=($!)
done
step "waiting for the cluster"
for attempt in $(seq 1 120); do
  if "$tarn" topics create --bootstrap-server 127.0.0.1:29192 --topic rf1 \
       --partitions "$PARTS" --replication-factor 1 >/dev/null 2>"$work/create.err"; then
    break
  fi
  [ "$attempt" -lt 120 ] || { cat "$work/create.err" >&2; exit 1; }
  sleep 0.5
done
"$tarn" topics create --bootstrap-server 127.0.0.1:29192 --topic rf3 \
  --partitions "$PARTS" --replication-factor 3 --config min.insync.replicas=2 >/dev/null
"$tarn" topics describe --bootstrap-server 127.0.0.1:29192 >"$work/describe.txt"
cat "$work/describe.txt" >&2

cpu_all() { # the three brokers' CPU seconds together
  local total=0 pid
  for pid in "${pids[@]}"; do total=$(awk -v a="$total" -v b="$(cpu_s "$pid")" 'BEGIN { printf "%.2f", a + b }'); done
  echo "$total"
}

out=$work/results.csv
echo "mode,rep,records,size,secs,rate_per_s,p50_ms,p99_ms,brokers_cpu_s,client_cpu_s" >"$out"
for rep in $(seq 1 "$REPS"); do
  for mode in rf1 rf3; do
    if [ "$mode" = rf1 ]; then acks=1; else acks=-1; fi
    step "rep $rep: $mode (acks=$acks), $N x $SIZE B"
    settle
    c0=$(cpu_all)
    res=$("$RDPERF" produce -b "$bootstrap" -t "$mode" -n "$N" -s "$SIZE" -a "$acks" -B 65536 -l 5 -c none "${queue_opts[@]}" |
          tee -a /dev/stderr | grep '^RESULT')
    c1=$(cpu_all)
    echo "$mode,$rep,$N,$SIZE,$(field secs "$res"),$(field rps "$res"),$(field p50_ms "$res"),$(field p99_ms "$res"),$(minus "$c0" "$c1"),$(field cpu_s "$res")" >>"$out"
  done
done
for pid in "${pids[@]}"; do kill -0 "$pid" || { echo "bench: a node died; logs in $work" >&2; KEEP=1; exit 1; }; done
cp "$out" "$raw"

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
python3 - "$out" >"$OUT" <<EOF
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(mode, key):
    return statistics.median(float(r[key]) for r in rows if r["mode"] == mode)
rate1, rate3 = med("rf1", "rate_per_s"), med("rf3", "rate_per_s")
p99_3 = med("rf3", "p99_ms")
cpu1 = med("rf1", "brokers_cpu_s") / (int(rows[0]["records"]) / 1e6)
cpu3 = med("rf3", "brokers_cpu_s") / (int(rows[0]["records"]) / 1e6)
print("# Replication: acks=all with replication factor 3 against acks=1 with replication factor 1")
print()
print("Written by \`bench/replication.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit$dirty, release build;")
print("$(nproc) cores ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), three nodes (broker and controller each)")
print("and the client on this one machine. N=$N SIZE=$SIZE REPS=$REPS PARTS=$PARTS; rdperf produce -B 65536 -l 5 -c none ${queue_opts[*]}.")
print("Medians over the reps; every rep is in $raw." + (" The page cache was dropped before each run." if "$drop_caches" == "1" else ""))
print()
print("| mode | rate M/s | p50 ms | p99 ms | three brokers' CPU s per M records |")
print("|---|---|---|---|---|")
for mode, label in (("rf1", "acks=1, RF 1"), ("rf3", "acks=all, RF 3, min.insync.replicas=2")):
    print(f"| {label} | {med(mode, 'rate_per_s') / 1e6:.2f} | {med(mode, 'p50_ms'):.1f} | {med(mode, 'p99_ms'):.1f} | {med(mode, 'brokers_cpu_s') / (int(rows[0]['records']) / 1e6):.3f} |")
print()
print("Against the targets:")
print()
ok = lambda b: "meets" if b else "misses"
print(f"- acks=all/RF3 keeps {rate3 / rate1:.2f} of acks=1/RF1's rate: {ok(rate3 / rate1 >= 0.8)} the target of at least 0.80 (Kafka's published figure: about 0.51).")
print(f"- acks=all/RF3 p99 {p99_3:.1f} ms: {ok(p99_3 <= 30)} the target of at most 30 ms.")
print(f"- CPU per million: {cpu3:.3f} s replicated against {cpu1:.3f} s unreplicated, {cpu3 / cpu1:.2f} times: {ok(cpu3 / cpu1 <= 3.5)} the target of at most 3.5.")
EOF
echo "bench: wrote $OUT" >&2
cat "$OUT"
