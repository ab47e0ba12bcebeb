#!/usr/bin/env bash
# bench/topics.sh: what creating one more topic costs as topics pile up.
# Creates BLOCKS x 1000 single-partition topics, one CreateTopics request
# each (kafka-python's admin client, from the test suite's .venv), and
# prints per block of 1000 the creates per second and the broker's CPU
# seconds (user+sys, from /proc).
#
#   bench/topics.sh                          # the release build of this tree
#   TARN_BINS="/tmp/a /tmp/b" bench/topics.sh  # several builds, one after another
#
# env: BLOCKS=5 DATA_ROOT=/tmp (put it on a tmpfs to leave the file
# system's inode allocation out of the figures). Needs .venv (scripts/test.sh
# makes it). Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
blocks=${BLOCKS:-5}
[ -x .venv/bin/python ] || { echo "topics.sh: no .venv (run scripts/test.sh once)" >&2; exit 1; }
work=$(mktemp -d "${DATA_ROOT:-/tmp}/tarn-topics.XXXXXX")
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${TARN_BINS:-}" ]; then
  cargo build --release -p tarn-cli
  TARN_BINS=$PWD/target/release/tarn
fi
for bin in $TARN_BINS; do
  rm -rf "$work/data"
  "$bin" serve --data-dir "$work/data" --listen 127.0.0.1:0 --log-level warn >"$work/out" 2>"$work/err" &
  pid=$!
  addr=
  for _ in $(seq 1 300); do
    addr=$(sed -n 's/^tarn: listening on \([^,]*\),.*/\1/p' "$work/out")
    [ -n "$addr" ] && break
    kill -0 "$pid"
    sleep 0.1
  done
  [ -n "$addr" ] || { cat "$work/err" >&2; exit 1; }
  echo "== $bin"
  .venv/bin/python - "$addr" "$pid" "$blocks" <<'PY'
import sys, time
from kafka.admin import KafkaAdminClient, NewTopic
addr, pid, blocks = sys.argv[1], sys.argv[2], int(sys.argv[3])
def cpu():
    f = open(f"/proc/{pid}/stat").read().split()
    return (int(f[13]) + int(f[14])) / 100.0
admin = KafkaAdminClient(bootstrap_servers=addr)
n = 0
for _ in range(blocks):
    t0, c0 = time.time(), cpu()
    for _ in range(1000):
        admin.create_topics([NewTopic(f"t{n}", 1, 1)])
        n += 1
    print(f"topics {n - 1000:>6}-{n:<6} {1000 / (time.time() - t0):7.0f} creates/s, "
          f"broker CPU {cpu() - c0:.2f} s per 1000", flush=True)
admin.close()
PY
  kill "$pid"
  wait "$pid"
  pid=
done
