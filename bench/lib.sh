# bench/lib.sh: what the benchmark scripts share. Source it after setting
# `work` (a scratch directory), `csv` (the kbench CSV), `repo` and `shared`
# (../shared/bench), and an array `pids` that the caller's EXIT trap kills.
#
#   build_clients             librdkafka-dev, rdperf and mockbroker into $work
#   build_tarn                target/release/tarn (or $TARN_BIN as it is); sets tarn
#   start_mock                sets mock_pid, mock_addr
#   start_tarn [SETTING...]   fresh data dir, --set each; sets tarn_pid, tarn_addr
#   start_kafka PORT          fresh Apache Kafka node (scripts/kafka.sh);
#                             sets kafka_pid, kafka_addr
#   mock_produce LABEL        the kbench produce cases against the mock
#   rss_mb PID / hwm_mb PID / cpu_s PID / fds PID

step() { printf '\n==> %s\n' "$*" >&2; }

build_clients() {
  step "client build (librdkafka-dev, rdperf, mockbroker)"
  if ! [ -f /usr/include/librdkafka/rdkafka_mock.h ]; then
    if [ "$(id -u)" -ne 0 ]; then echo "bench: librdkafka-dev is missing; install it or run as root" >&2; exit 1; fi
    apt-get update && apt-get install -y librdkafka-dev
  fi
  gcc -O2 -Wall -Wextra -o "$work/rdperf" "$shared/rdperf.c" -lrdkafka
  gcc -O2 -Wall -o "$work/mockbroker" "$shared/mockbroker.c" -lrdkafka
  export RDPERF=$work/rdperf
}

build_tarn() {
  if [ -n "${TARN_BIN:-}" ]; then
    tarn=$TARN_BIN
    step "tarn: $tarn (TARN_BIN, not rebuilt)"
    return
  fi
  step "cargo build --release -p tarn-cli"
  (cd "$repo" && cargo build --release -p tarn-cli)
  tarn=$repo/target/release/tarn
}

tick=$(getconf CLK_TCK)
rss_mb() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
hwm_mb() { awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
cpu_s() { awk -v t="$tick" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }
busy_s() { awk -v t="$tick" '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / t }' /proc/stat; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
field() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k { print $2 }'; }

# Size, codec and rdperf flags of a kbench case: sets size, codec, extra.
case_params() {
  case $1 in
    p100) size=100 codec=none extra=() ;;
    p200) size=200 codec=none extra=() ;;
    lz4)  size=100 codec=lz4 extra=() ;;
    lz4r) size=100 codec=lz4 extra=(-R) ;;
    zstdr) size=100 codec=zstd extra=(-R) ;;
    p1k)  size=1024 codec=none extra=() ;;
    *) echo "bench: unknown case $1" >&2; exit 1 ;;
  esac
}

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

# Starts tarn on a fresh data directory, with `--set` for each argument;
# sets tarn_pid and tarn_addr.
start_tarn() {
  local settings=()
  for s in "$@"; do settings+=(--set "$s"); done
  rm -rf "$work/data"
  "$tarn" serve --data-dir "$work/data" --listen 127.0.0.1:0 --http-listen off --log-level warn \
    "${settings[@]}" >"$work/tarn.out" 2>"$work/tarn.log" &
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
  local c rep res b0 b1 h0 h1
  for c in $CASES; do
    case_params "$c"
    for rep in $(seq 1 "$REPS"); do
      b0=$(cpu_s "$mock_pid") h0=$(busy_s)
      res=$("$RDPERF" produce -b "$mock_addr" -t "mock-$c-$rep-$1-$$" -n "$N" -s "$size" -a 1 \
            -B 65536 -l 5 -c "$codec" "${extra[@]}" | tee -a /dev/stderr | grep '^RESULT')
      b1=$(cpu_s "$mock_pid") h1=$(busy_s)
      [ -s "$csv" ] || echo "label,case,rep,mode,records,size,codec,secs,rate_per_s,mb_per_s,avg_ms,p50_ms,p95_ms,p99_ms,p999_ms,max_ms,client_cpu_s,broker_cpu_s,host_busy_cpu_s,broker_rss_mb" >"$csv"
      echo "$1,$c,$rep,produce,$N,$size,$codec,$(field secs "$res"),$(field rps "$res"),$(field mbps "$res"),$(field avg_ms "$res"),$(field p50_ms "$res"),$(field p95_ms "$res"),$(field p99_ms "$res"),$(field p999_ms "$res"),$(field max_ms "$res"),$(field cpu_s "$res"),$(minus "$b0" "$b1"),$(minus "$h0" "$h1"),$(rss_mb "$mock_pid")" >>"$csv"
    done
  done
}

# Starts a fresh Apache Kafka node (scripts/kafka.sh) on PORT and PORT+1;
# sets kafka_pid and kafka_addr.
start_kafka() { # PORT
  rm -rf "$work/kafka"
  local line
  line=$("$repo/scripts/kafka.sh" start "$work/kafka" "$1")
  kafka_pid=${line##*pid }
  kafka_addr=127.0.0.1:$1
  pids+=("$kafka_pid")
}
