#!/usr/bin/env bash
# Runs the deterministic cluster simulations over many seeds: the
# quorum's (scripts/sim-quorum.sh: Raft's safety and liveness under
# faults), the cluster metadata's (crates/metadata/tests/cluster_sim.rs:
# every node's image a prefix of the committed log, and the same on every
# node once the faults heal) and data replication's
# (crates/replication/tests/replication_sim.rs: no acknowledged record lost
# and replicas identical after crashes, power cuts and a cut-off leader).
#
#   scripts/sim-cluster.sh [SEEDS [FROM]]    # seeds FROM..FROM+SEEDS (default 0..200)
#   TARN_SIM_SEED=N scripts/sim-cluster.sh   # replay one seed
#
# Exits non-zero, naming the failing seed, when any seed fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds="${1:-200}"
from="${2:-0}"
scripts/sim-quorum.sh "$seeds" "$from"
if [[ -z "${TARN_SIM_SEED:-}" ]]; then
  export TARN_SIM_SEEDS="$seeds" TARN_SIM_SEEDS_FROM="$from"
fi
cargo test -p tarn-metadata --test cluster_sim -- --nocapture
if [[ -n "${TARN_SIM_SEED:-}" ]]; then
  export TARN_REPLICATION_SIM_SEED="$TARN_SIM_SEED"
else
  export TARN_REPLICATION_SIM_SEEDS="$seeds" TARN_REPLICATION_SIM_SEEDS_FROM="$from"
fi
exec cargo test -p tarn-replication --test replication_sim -- --nocapture
