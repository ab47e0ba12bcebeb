#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 600) with a fixed seed,
# starting from the committed corpus. Needs cargo-fuzz (`cargo install
# cargo-fuzz`); toolchain.sh picks nightly, or stable with RUSTC_BOOTSTRAP=1.
# A crash leaves its input under fuzz/artifacts/TARGET/; turn it into a
# regression test before fixing.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
source ./toolchain.sh
# The targets keep broker data in temporary directories; on a tmpfs their
# fsyncs cost nothing, so a busy disk cannot push an input past -timeout.
if [[ -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
seconds=${1:-600}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(fuzz list)
fi
for target in "${targets[@]}"; do
    echo "==> fuzz $target for ${seconds}s (seed 1)"
    mkdir -p "corpus/$target"
    # -rss_limit_mb bounds every allocation a request can cause.
    fuzz run "$target" "corpus/$target" -- \
        -seed=1 -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
done
