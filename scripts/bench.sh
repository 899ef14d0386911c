#!/usr/bin/env bash
# The benchmarks: lambda-idempotency against the raw DynamoDB limit and Powertools for AWS
# Lambda (Python), side by side, against DynamoDB Local. Installs the Python baseline (a
# venv with aws-lambda-powertools and boto3, pinned in scripts/bench-requirements.txt),
# starts DynamoDB Local, builds in release mode, prints one JSON line per scenario and
# writes BENCHMARKS.md.
#
#   scripts/bench.sh                  # BENCH_BATCHES=40 batches per scenario; BENCHMARKS.md
#                                     # records how long the build and the run took
#   BENCH_BATCHES=100 scripts/bench.sh
#   BENCH_SMOKE=1 scripts/bench.sh    # CI: a debug build, 3 batches, no Python, a temp file;
#                                     # fails over the allocation budget; instructions of
#                                     # fresh-10 only
#   BENCH_INSTRUCTIONS=fresh-10 scripts/bench.sh   # instructions counted for fewer scenarios
#                                     # (default: all; empty: none)
# Instructions per record are counted under callgrind: valgrind is installed from Debian's
# packages when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/dynamodb-local.sh
source scripts/dynamodb-local.sh
# shellcheck source=scripts/debian-package.sh
source scripts/debian-package.sh
trap 'status=$?; ddb_stop; exit $status' EXIT
# The smoke counts one scenario's instructions (a debug build under callgrind is slow).
export BENCH_INSTRUCTIONS="${BENCH_INSTRUCTIONS-$([ -n "${BENCH_SMOKE:-}" ] && echo fresh-10 || echo all)}"
if [ -n "$BENCH_INSTRUCTIONS" ] && ! command -v valgrind >/dev/null; then
  debian_package_install valgrind "valgrind (to count instructions per record; BENCH_INSTRUCTIONS= skips it)"
fi

if [ -n "${BENCH_SMOKE:-}" ]; then
  # CI's smoke: the whole pipeline on a debug build with a few batches, without the Python
  # baseline and the cold start, written to a temporary file (its figures mean nothing).
  echo "== building (debug, smoke)" >&2
  build_started=$SECONDS
  cargo build --quiet -p bench
  export BENCH_BUILD_SECS=$((SECONDS - build_started))
  ddb_start
  out="$(mktemp -t bench-smoke.XXXXXX.md)"
  # Every scenario, and a failure when a scenario's heap allocations per record are over
  # the budget or were not counted (a debug build counts as a release build does, within
  # about one).
  env -u BENCH_SCENARIOS BENCH_BATCHES="${BENCH_BATCHES:-3}" BENCH_OUT="$out" BENCH_ENFORCE_BUDGET=1 \
    target/debug/bench >/dev/null
  grep -q '^## Ratios and targets' "$out" || { echo "the bench smoke wrote no report" >&2; exit 1; }
  grep -q '^## Allocation budget' "$out" || { echo "the bench smoke counted no allocations" >&2; exit 1; }
  if [ -n "$BENCH_INSTRUCTIONS" ]; then
    grep -q "client work per record within 10% of the raw requests' (optimistic) | instructions " "$out" ||
      { echo "the bench smoke counted no instructions" >&2; exit 1; }
  fi
  echo "bench smoke: $(grep -c '^| ' "$out") table rows in $out"
  exit 0
fi

# shellcheck source=scripts/tools.sh
source scripts/tools.sh
powertools_install

echo "== building (release)" >&2
build_started=$SECONDS
cargo build --release --quiet -p order-consumer -p bench
export BENCH_BUILD_SECS=$((SECONDS - build_started))
ddb_start
BENCH_PYTHON="$POWERTOOLS_PYTHON" \
BENCH_ORDER_CONSUMER="$PWD/target/release/order-consumer" \
BENCH_OUT="${BENCH_OUT:-BENCHMARKS.md}" \
  target/release/bench
