#!/usr/bin/env bash
# The project's test command (README "Try the examples", and CI through .ci/run):
# installs what is missing (DynamoDB Local, the Python-packaged tools), lints template.yaml,
# starts DynamoDB Local, Redis (one server and a cluster of three) and PostgreSQL (Debian's
# packages, installed if missing) and
# moto's SQS server (PyPI), then runs
# the module import-circle check, the format check, clippy, the docs build and every test of
# the workspace (the library, the examples, the CLI, bench, tests/support), the DynamoDB
# Local ones included, and stops it; then runs scripts/run-local.sh, which must PASS, and
# again against a corrupted ledger, where it must FAIL. The bench smoke between them installs
# valgrind (Debian's package) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/dynamodb-local.sh
source scripts/dynamodb-local.sh
# shellcheck source=scripts/redis.sh
source scripts/redis.sh
# shellcheck source=scripts/postgres.sh
source scripts/postgres.sh
# shellcheck source=scripts/sqs-local.sh
source scripts/sqs-local.sh
# shellcheck source=scripts/tools.sh
source scripts/tools.sh
trap 'status=$?; ddb_stop; redis_stop; redis_cluster_stop; postgres_stop; sqs_stop; exit $status' EXIT
# No incremental compilation caches: this script builds every crate once, and the caches
# only cost disk.
export CARGO_INCREMENTAL=0

tools_install cargo-lambda sam
echo "== template.yaml: cfn-lint, sam validate --lint, key settings"
cfn-lint template.yaml
sam validate --lint --template template.yaml
python3 scripts/check_template.py template.yaml
# The check must refuse an idempotency window shorter than the queues' retention.
short_window="$(mktemp --suffix=.yaml)"
sed 's/IDEMPOTENCY_EXPIRES_AFTER_SECS: [0-9]*/IDEMPOTENCY_EXPIRES_AFTER_SECS: 3600/' template.yaml >"$short_window"
if python3 scripts/check_template.py "$short_window" >/dev/null; then
  echo "check_template.py accepted a 1-hour window with a 14-day dead-letter queue" >&2
  exit 1
fi
rm -f "$short_window"

ddb_start
redis_start
redis_cluster_start
postgres_start
sqs_start
# Tests that need DynamoDB Local, Redis or PostgreSQL fail, rather than skip, when it is
# unreachable.
export LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB=1
export LAMBDA_IDEMPOTENCY_REQUIRE_REDIS=1
export LAMBDA_IDEMPOTENCY_REQUIRE_POSTGRES=1
export LAMBDA_IDEMPOTENCY_REQUIRE_SQS=1
# The interoperability test runs the real Powertools for AWS Lambda (Python) beside the
# order-consumer; it fails, rather than skips, without it.
powertools_install
export LAMBDA_IDEMPOTENCY_POWERTOOLS_PYTHON="$POWERTOOLS_PYTHON"
export LAMBDA_IDEMPOTENCY_REQUIRE_POWERTOOLS=1

echo "== the library with the DynamoDB feature alone compiles neither the Redis, the PostgreSQL nor the SQS client"
if cargo tree -p lambda-idempotency --no-default-features --features dynamodb -e normal --prefix none \
  | grep -E '^(redis|tokio-postgres|deadpool-postgres|aws-sdk-sqs) '; then
  echo "a store client is compiled without its feature" >&2
  exit 1
fi
echo "== rust-version covers every dependency of the library"
python3 scripts/check_msrv.py
echo "== no import circle between sibling modules of a folder of src/"
python3 scripts/module_cycles.py src
circle_dir=$(mktemp -d)
mkdir -p "$circle_dir/outer"
printf 'mod outer;\n' >"$circle_dir/lib.rs"
printf 'mod a;\nmod b;\n' >"$circle_dir/outer/mod.rs"
printf 'use super::b::{self, B};\npub struct A;\n' >"$circle_dir/outer/a.rs"
printf 'pub struct B;\nfn f() -> crate::outer::a::A { crate::outer::a::A }\n' >"$circle_dir/outer/b.rs"
if python3 scripts/module_cycles.py "$circle_dir" >/dev/null; then
  echo "module_cycles.py does not see an import circle" >&2
  exit 1
fi
# The same circle through a parent's re-export (`crate::outer::A` is `outer::a::A`).
printf 'mod a;\nmod b;\npub use a::A;\n' >"$circle_dir/outer/mod.rs"
printf 'pub struct B;\nfn f() -> crate::outer::A { crate::outer::A }\n' >"$circle_dir/outer/b.rs"
if python3 scripts/module_cycles.py "$circle_dir" >/dev/null; then
  echo "module_cycles.py does not see an import circle through a re-export" >&2
  exit 1
fi
rm -r "$circle_dir"
echo "== every public item's docs start with one plain sentence"
python3 scripts/check_doc_summaries.py
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== the library without the DynamoDB store, with HTTP alone, with the test helpers, with Redis alone, with PostgreSQL alone"
cargo clippy -p lambda-idempotency --no-default-features --quiet -- -D warnings
cargo clippy -p lambda-idempotency --no-default-features --features http --quiet -- -D warnings
cargo clippy -p lambda-idempotency --features testing --quiet -- -D warnings
cargo clippy -p lambda-idempotency --no-default-features --features redis --quiet -- -D warnings
cargo clippy -p lambda-idempotency --no-default-features --features postgres --quiet -- -D warnings
cargo clippy -p lambda-idempotency --features sqs-visibility --all-targets --quiet -- -D warnings
echo "== cargo doc --workspace --no-deps (warnings denied)"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
echo "== cargo package -p lambda-idempotency (the library as it would be published builds on its own)"
cargo package -p lambda-idempotency --locked --quiet
echo "== cargo test --workspace (DynamoDB Local at $AWS_ENDPOINT_URL_DYNAMODB)"
cargo test --workspace
echo "== retry shaping with the visibility timeout (feature sqs-visibility) against moto's SQS server at $LAMBDA_IDEMPOTENCY_SQS_URL"
RUSTDOCFLAGS=-Dwarnings cargo doc -p lambda-idempotency --no-deps --all-features --quiet
cargo test -p lambda-idempotency --features sqs-visibility --lib --test visibility_sqs
echo "== scripts/bench.sh smoke (debug build, a few batches, fresh-10's instructions under callgrind (valgrind installed if missing), report written to a temporary file)"
BENCH_SMOKE=1 scripts/bench.sh
echo "== scripts/run-local.sh (the README's first command) ends with PASS"
run_local="$(mktemp -t run-local.XXXXXX)"
scripts/run-local.sh >"$run_local" 2>&1 || { tail -40 "$run_local" >&2; echo "scripts/run-local.sh did not pass" >&2; exit 1; }
tail -1 "$run_local"
echo "== scripts/run-local.sh against a ledger that is not empty ends with FAIL and a non-zero exit"
corrupted="$(mktemp -t run-local-corrupted.XXXXXX)"
if LEDGER_SEED=acct-alice=1 scripts/run-local.sh >"$corrupted" 2>&1; then
  echo "scripts/run-local.sh passed with a wrong balance" >&2
  exit 1
fi
grep -q '^FAIL$' "$corrupted" && grep -q 'acct-alice *41 *WRONG' "$corrupted" \
  || { echo "scripts/run-local.sh did not report the wrong balance:" >&2; cat "$corrupted" >&2; exit 1; }
