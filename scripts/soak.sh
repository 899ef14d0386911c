#!/usr/bin/env bash
# A longer chaos run (the soak), reproducible from its seed:
#   CHAOS_SEED=7 CHAOS_EVENTS=400 CHAOS_CONTAINERS=4 scripts/soak.sh
# Settings (environment): CHAOS_SEED, CHAOS_EVENTS, CHAOS_CONTAINERS, CHAOS_KILL_RATE,
# CHAOS_FREEZE_RATE, CHAOS_DUPLICATE_RATE, CHAOS_LOST_ACK_RATE (FIFO),
# CHAOS_MODES (optimistic,lease,sequenced), CHAOS_TIME_LIMIT_SECS.
# See examples/order-consumer/tests/chaos.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/dynamodb-local.sh
source scripts/dynamodb-local.sh
trap 'status=$?; ddb_stop; exit $status' EXIT
ddb_start
export LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB=1
export CHAOS_SEED="${CHAOS_SEED:-7}" CHAOS_EVENTS="${CHAOS_EVENTS:-400}"
export CHAOS_CONTAINERS="${CHAOS_CONTAINERS:-4}" CHAOS_TIME_LIMIT_SECS="${CHAOS_TIME_LIMIT_SECS:-1800}"
cargo test -p order-consumer --test chaos -- --nocapture
