#!/usr/bin/env bash
# Partition cost: create TOPICS x PARTITIONS empty partitions on a fresh
# broker and report the broker's RSS growth, its open file descriptors and
# how long creation took.
#
#   bench/partitions.sh [TARN_BIN]        # default: target/release/tarn
#   TOPICS=100 PARTITIONS=100 bench/partitions.sh
#
# Prints one result line per run and appends it to bench/RESULTS-storage.md when
# RECORD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
TARN=${1:-target/release/tarn}
TOPICS=${TOPICS:-100}
PARTITIONS=${PARTITIONS:-100}
PORT=${PORT:-19093}
[ -x "$TARN" ] || { echo "no tarn binary at $TARN (cargo build --release -p tarn-cli)" >&2; exit 1; }

DATA=$(mktemp -d /tmp/tarn-partitions-XXXXXX)
LOG="$DATA.broker.log"
: >"$LOG.out"
"$TARN" serve --data-dir "$DATA" --listen "127.0.0.1:$PORT" --log-level warn >"$LOG.out" 2>"$LOG" &
PID=$!
cleanup() { kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$DATA" "$LOG" "$LOG.out"; }
trap cleanup EXIT
for _ in $(seq 100); do grep -q "listening on" "$LOG.out" && break; sleep 0.1; done
grep -q "listening on" "$LOG.out" || { echo "broker did not start:" >&2; cat "$LOG" >&2; exit 1; }

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$PID/status"; }
fds() { ls "/proc/$PID/fd" | wc -l; }

# Warm up the request path so the baseline includes one-time allocations.
"$TARN" topics create --bootstrap-server "127.0.0.1:$PORT" --topic warmup --partitions 1 >/dev/null
sleep 0.5
RSS0=$(rss_kb); FD0=$(fds)
START=$(date +%s.%N)
for t in $(seq 1 "$TOPICS"); do
  "$TARN" topics create --bootstrap-server "127.0.0.1:$PORT" --topic "bench-$t" \
    --partitions "$PARTITIONS" --replication-factor 1 >/dev/null
done
END=$(date +%s.%N)
sleep 1
RSS1=$(rss_kb); FD1=$(fds)
COUNT=$(ls "$DATA" | grep -c '^bench-' || true)
SECS=$(echo "$END - $START" | bc)
# Restart on the same data: time to the ready line, RSS and fds after.
kill -TERM "$PID"; wait "$PID" || true
: >"$LOG.out"
START=$(date +%s.%N)
"$TARN" serve --data-dir "$DATA" --listen "127.0.0.1:$PORT" --log-level warn >"$LOG.out" 2>"$LOG" &
PID=$!
for _ in $(seq 600); do grep -q "listening on" "$LOG.out" && break; sleep 0.05; done
END=$(date +%s.%N)
sleep 1
RESTART=$(echo "$END - $START" | bc)
RSS2=$(rss_kb); FD2=$(fds)
LINE="| $(date -u +%Y-%m-%d) | $((TOPICS * PARTITIONS)) partitions ($TOPICS x $PARTITIONS) | ${SECS}s | $(( (RSS1 - RSS0) / 1024 )) MB ($((RSS0 / 1024)) -> $((RSS1 / 1024)) MB) | $FD0 -> $FD1 | $COUNT dirs | ${RESTART}s, $((RSS2 / 1024)) MB, $FD2 fds |"
echo "| date | created | creation time | RSS growth | open fds (before -> after) | partition dirs | restart: ready in, RSS, fds |"
echo "$LINE"
if [ "${RECORD:-0}" = 1 ]; then echo "$LINE" >> bench/RESULTS-storage.md; fi
