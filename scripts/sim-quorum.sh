#!/usr/bin/env bash
# Runs the quorum's deterministic simulation over many seeds.
#
#   scripts/sim-quorum.sh [SEEDS [FROM]]    # seeds FROM..FROM+SEEDS (default 0..200)
#   TARN_SIM_SEED=N scripts/sim-quorum.sh   # replay one seed
#
# A seed's number fixes its faults, so a later hunt starts where the last
# one stopped (FROM) rather than running seeds 0.. again.
#
# Exits non-zero, naming the failing seed, when any seed fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-200}"
from="${2:-0}"
if [[ -n "${TARN_SIM_SEED:-}" ]]; then
  echo "replaying seed ${TARN_SIM_SEED}" >&2
else
  export TARN_SIM_SEEDS="$seeds" TARN_SIM_SEEDS_FROM="$from"
  echo "running seeds ${from}..$((from + seeds))" >&2
fi
exec cargo test -p tarn-quorum --test sim raft_stays_safe_and_live_under_faults -- --nocapture
