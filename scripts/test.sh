#!/usr/bin/env bash
# The project's test command (README Quickstart, and CI through .ci/run):
# starts DynamoDB Local (installing it if missing), then runs the format check, clippy,
# the docs build and every test, the DynamoDB Local ones included, and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/dynamodb-local.sh
source scripts/dynamodb-local.sh
trap 'status=$?; ddb_stop; exit $status' EXIT

ddb_start
# Tests that need DynamoDB Local fail, rather than skip, when it is unreachable.
export LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB=1

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings
echo "== cargo doc --no-deps (warnings denied)"
RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps --quiet
echo "== cargo test (DynamoDB Local at $AWS_ENDPOINT_URL_DYNAMODB)"
cargo test
