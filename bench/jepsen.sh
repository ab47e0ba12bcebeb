#!/usr/bin/env bash
# bench/jepsen.sh: the fault runs of tests/tests/faults.rs, longer than CI's:
# every seed of SEEDS (comma-separated) with ROUNDS faults each, on a
# three-broker and on a five-broker cluster of real processes, and on a
# three-node dynamic quorum whose voters are removed and re-added every
# other round; writes bench/RESULTS-jepsen.md with
# each seed's fault schedule and anomaly counts (lost, duplicated,
# divergent reads and replicas, backwards, skipped, failed but read, the group's
# lost commits and skipped records, readers that stall, group members whose client never closes).
#
# env: SEEDS=1,2,3,4,5 ROUNDS=8
# Exits non-zero if the build fails or any seed finds an anomaly (the
# results file is written either way).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-1,2,3,4,5}
rounds=${ROUNDS:-8}
log=$(mktemp /tmp/tarn-jepsen.XXXXXX)
# Kept when a seed fails: the nodes' and clients' logs are the evidence.
keep=0
trap '[ "$keep" = 1 ] || rm -f "$log"' EXIT
# The commit the binary is built from (the tree may move on while it runs).
commit=$(git rev-parse --short HEAD)
if ! git diff --quiet HEAD; then
  commit="$commit with uncommitted changes"
fi
started=$(date -u +%s)
cargo build -p tarn-cli
status=0
TARN_FAULT_SEEDS=$seeds TARN_FAULT_ROUNDS=$rounds \
  cargo test -p tarn-e2e --test faults -- --nocapture --test-threads=1 >"$log" 2>&1 || status=$?
{
  echo "# Jepsen-style fault runs"
  echo
  echo "Written by \`bench/jepsen.sh\` (SEEDS=$seeds ROUNDS=$rounds) on $(date -u '+%Y-%m-%d %H:%M UTC'),"
  echo "commit $commit, debug build, $(nproc) cores, $(( $(date -u +%s) - started )) s in all. Three brokers, then five (each also a"
  echo "controller), topic of 3 partitions, replication factor 3, min.insync.replicas=2; an"
  echo "idempotent acks=all producer and a reader of every partition run throughout while each"
  echo "round SIGKILLs a partition leader or the active controller, SIGSTOPs a broker, partitions"
  echo "the network (each node in a network namespace; a cut loses packets both ways: one node cut"
  echo "off, a minority holding a leader split off, one leader-follower link cut, or a bridge), or"
  echo "strands a leader (pauses its followers, kills it, resumes them), for 2-5 s, then heals;"
  echo "or fills a broker's disk (each broker's data on a tmpfs of its own), waits for the broker"
  echo "to stop for it, frees the space and starts it again 2-5 s later."
  echo "A consumer group of two members commits as it goes. After the last round the readers must"
  echo "read everything within a minute (reader_behind, group_behind), each member's client must close (members_stuck), and no send may fail"
  echo "(failed_sends: the producer's message timeout, 120 s, outlasts every fault). A seed fixes the schedule."
  echo "Then three nodes of a dynamic quorum (KIP-853, formatted with --initial-controllers): every"
  echo "other round removes a voter (the active controller half the time; it goes on as a broker)"
  echo "and adds it back after the hold, the other rounds inject the faults above but the full"
  echo "disk (a stranded leader instead: those nodes' data is not on disks of their own)."
  echo
  echo "Test exit status: $status (0: every seed had zero anomalies)."
  echo
  echo '```'
  # grep exits 1 when nothing matched (a run that died early): not an error here.
  grep -E '^seed |^  (healed|partition|failed send|split|cut|readers|Remove|Add|broker|\[)|read at' "$log" || [ $? -eq 1 ]
  echo '```'
} >bench/RESULTS-jepsen.md
echo "bench: wrote bench/RESULTS-jepsen.md" >&2
if [ "$status" -ne 0 ]; then
  tail -50 "$log" >&2
  keep=1
  echo "bench: the whole log stays in $log" >&2
fi
exit "$status"
