#!/usr/bin/env bash
# The short fuzz pass of the test command: every target for a fixed number
# of runs with a fixed seed, from a copy of the committed corpus, so a run
# is reproducible. Longer runs that grow the corpus: fuzz/run.sh.
set -euo pipefail
cd "$(dirname "$0")"
# The targets keep broker data in temporary directories; on a tmpfs their
# fsyncs cost nothing, so a busy disk cannot push an input past -timeout.
if [[ -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
declare -A runs=([record_batch]=200000 [request_dispatch]=40000 [segment_recovery]=300 [produce_append]=100000 [decompress]=50000)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
source ./toolchain.sh
fuzz build
for target in $(fuzz list); do
    n=${runs[$target]:-20000}
    echo "==> fuzz $target: $n runs, seed 1"
    cp -r "corpus/$target" "$scratch/$target"
    log="$scratch/$target.log"
    if ! fuzz run "$target" "$scratch/$target" -- \
        -seed=1 -runs="$n" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz target $target failed; its input is under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E '^(Done|stat::number_of_executed_units)' "$log"
done
