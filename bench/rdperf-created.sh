#!/usr/bin/env bash
# Runs rdperf ($RDPERF_REAL) as it is; after `rdperf create -b B -t T ...`
# also waits until the broker's metadata lists every partition of T with a
# leader. Apache Kafka answers CreateTopics once the controller committed
# the topic, a moment before its broker serves it, and rdperf produce gives
# up at once on an unknown topic; bench/vs-kafka.sh points kbench.sh's
# RDPERF here for every broker, so all of them are measured the same way.
#
# Before `rdperf produce` it also writes back and drops the page cache
# (when it can: root), unless SETTLE_PAGE_CACHE=0. On this kind of VM,
# writing into guest memory the page cache has not used before costs
# several times the CPU (bench/RESULTS-replication.md), and without this
# it falls on whichever broker and case run later in the matrix. The
# consume that follows a produce still finds its records in the cache.
set -euo pipefail
if [ "${1:-}" = produce ] && [ "${SETTLE_PAGE_CACHE:-1}" = 1 ] && [ -w /proc/sys/vm/drop_caches ]; then
  sync
  echo 1 >/proc/sys/vm/drop_caches
fi
"$RDPERF_REAL" "$@"
[ "${1:-}" = create ] || exit 0
shift
bootstrap= topic= partitions=1
while getopts "b:t:p:r:" opt; do
  case $opt in
    b) bootstrap=$OPTARG ;;
    t) topic=$OPTARG ;;
    p) partitions=$OPTARG ;;
    r) ;;
    *) exit 2 ;;
  esac
done
for _ in $(seq 1 300); do
  led=$(kcat -b "$bootstrap" -L -t "$topic" -m 5 | grep -c 'partition [0-9]*, leader [0-9]' || true)
  [ "$led" -ge "$partitions" ] && exit 0
  sleep 0.1
done
echo "rdperf-created: $topic has $led of $partitions partitions with a leader after 30 s" >&2
exit 1
