#!/usr/bin/env bash
# bench/cluster.sh: what running as a three-node cluster costs and how fast
# it heals, side by side with a single node in one run; writes
# bench/RESULTS-cluster.md (and keeps the raw RESULT lines in
# bench/results-cluster.txt).
#
#   bench/cluster.sh [SECTION...]     # commits fencing failover startup (all by default)
#   OUT=bench/RESULTS-failover.md bench/cluster.sh leaders
#
# Sections (bench/cluster.py does the work, with its own small Kafka client
# on the wire protocol so that each request goes to the broker chosen):
#   commits   one-partition topics created one per CreateTopics request, one
#             at a time and INFLIGHT at a time: single node vs a three-node
#             quorum, sent to the active controller and to another broker
#             (forwarded); target 3-node >= 0.5 x single node
#   fencing   SIGKILL a non-controller broker, poll Metadata on every
#             survivor until it is absent; target <= session timeout + 2 s
#   failover  SIGKILL the active controller, CreateTopics on a survivor until
#             one succeeds; target <= 3 s; then the same with SIGTERM (the
#             controller hands its leadership over as it stops)
#   startup   10,000 partitions (STARTUP_TOPICS x STARTUP_PARTS): restart a
#             single node, and one node of a cluster; time to the ready line
#             and to a full Metadata answer; target < 2 s; the single node's
#             clean stop before each restart is timed too (STARTUP_DATA=1: a
#             record in every partition first, so the stop flushes them all)
#   leaders   (not in the default set) SIGKILL a broker leading 1, 1,000 and
#             10,000 partitions of replication factor 3 (LEADER_COUNTS); time
#             to its fence and to new leaders for all (LEADER_DATA=1: a record in
#             every partition first); target <= 1 s after
#             the fence
#   kafka     (not in the default set) the commits section's single node and
#             three-node quorum for Tarn and for Apache Kafka (scripts/kafka.sh,
#             needs Java and Maven), interleaved: Kafka's own ratio beside Tarn's
#   idle      (not in the default set) the three nodes' CPU per second while
#             1,000 and 10,000 partitions of replication factor 3 sit idle
#             (IDLE_COUNTS); IDLE_COMPARE=/other/tarn runs another binary
#             beside it, interleaved
#
# env: TARN_BIN (default: cargo build --release -p tarn-cli, target/release/tarn)
#      COMMITS_N INFLIGHT FENCE_REPS FAILOVER_REPS STARTUP_REPS STARTUP_TOPICS
#      STARTUP_PARTS LEADER_COUNTS LOG_LEVEL (see bench/cluster.py); OUT (the
#      results file, bench/RESULTS-cluster.md); KEEP=1 keeps the scratch
#      directory (data dirs and every node's stderr)
# Needs python3 (and Java and Maven for the kafka section). Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
sections=("$@")
((${#sections[@]})) || sections=(commits fencing failover startup)
work=$(mktemp -d /tmp/tarn-cluster.XXXXXX)
shared=${SHARED:-../shared/bench}
csv=$work/unused.csv
pids=()
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then echo "bench: scratch kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
source "$repo/bench/lib.sh"

build_tarn
load=$(cut -d' ' -f1-3 /proc/loadavg)
step "cluster.py ${sections[*]} ($work)"
python3 "$repo/bench/cluster.py" "$tarn" "$work" "${sections[@]}" | tee "$work/raw.txt"

out=${OUT:-bench/RESULTS-cluster.md}
raw_out=$(dirname "$out")/$(basename "$out" .md | sed 's/^RESULTS/results/' | tr 'A-Z' 'a-z').txt
# Before the raw figures are copied in: they are not a change to what ran.
commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (with uncommitted changes)" || true)
cp "$work/raw.txt" "$raw_out"
{
  if [ -n "${OUT:-}" ]; then echo "# Tarn as a three-node cluster: ${sections[*]}"; else echo "# Tarn as a three-node cluster vs a single node"; fi
  echo
  echo "Written by \`bench/cluster.sh ${sections[*]}\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit$dirty,"
  echo "release build. Machine: $(nproc) cores ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)),"
  echo "$(awk '/^MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo) RAM, $(uname -sr), data in $(df -T /tmp | awk 'NR == 2 { print $2 }') on /tmp;"
  echo "load average before the run: $load. Every node runs on this machine with"
  echo "its client, so absolute rates move with the machine's load: read the ratios. Raw figures: $raw_out."
} >"$work/header.md"
python3 "$repo/bench/cluster.py" --report "$work/raw.txt" "$out" "$work/header.md"
step "wrote $out"
