#!/usr/bin/env bash
# The first command of the README's "Try the examples": runs the real example functions locally and checks them.
#
# Checks its prerequisites up front, installs what is missing (DynamoDB Local; cargo-lambda,
# boto3 and PyYAML into a venv; not the SAM CLI, which it does not use), builds the three
# binaries, starts DynamoDB Local on a free loopback port, creates the idempotency and ledger
# tables with template.yaml's schema, and runs the functions under `cargo lambda watch` with
# JSON logs. Then it invokes the sample events of events/: order-consumer's batches (a fresh
# batch, its redelivery, a producer retry, a poison record, a tampered duplicate, a FIFO
# batch), payments-api's HTTP requests (a payment, its retry, a reused key, an invalid body,
# no key, a Function URL request), and stream-consumer's Kinesis and DynamoDB Streams batches.
# Each response, each record's outcome (read from the function's JSON log) and the final
# ledger balances are checked against what each event should give. It ends with PASS (exit
# 0) or FAIL (exit 1, saying what differed) and stops everything it started.
#
#   IDEMPOTENCY_MODE=lease scripts/run-local.sh      # every function under a lease
#   LEDGER_SEED=acct-alice=1 scripts/run-local.sh    # a ledger that is not empty: FAIL
set -euo pipefail
cd "$(dirname "$0")/.."

RUN_START=$SECONDS
STEP_START=$SECONDS
step() {
  echo
  echo "== $*"
  STEP_START=$SECONDS
}
took() {
  echo "   done in $((SECONDS - STEP_START)) s"
}

# Prerequisites, each with one clear message, before anything is installed or started.
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need cargo "cargo: Rust 1.94.1 or newer (https://rustup.rs)"
need cc "cc: a C compiler, for the AWS SDK's crypto (Debian: apt-get install build-essential)"
need java "java: a JDK 17 or newer, for DynamoDB Local (Debian: apt-get install openjdk-17-jdk-headless)"
need javac "javac: a full JDK 17 or newer, not only a JRE, to compile DynamoDB Local's launcher"
need npm "npm: Node.js's package manager, to install DynamoDB Local (Debian: apt-get install npm)"
need curl "curl: to wait for the local Lambda runtime"
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=("python3 with venv: for cargo-lambda and boto3 (Debian: apt-get install python3-venv)")
fi
if ((${#missing[@]})); then
  printf 'missing prerequisite: %s\n' "${missing[@]}" >&2
  echo "FAIL: install the prerequisites above, then run $0 again" >&2
  exit 1
fi

# shellcheck source=scripts/dynamodb-local.sh
source scripts/dynamodb-local.sh
# shellcheck source=scripts/tools.sh
source scripts/tools.sh

WATCH_PID=
cleanup() {
  local status=$?
  if [ -n "$WATCH_PID" ]; then
    kill -- "-$WATCH_PID" 2>/dev/null || kill "$WATCH_PID" 2>/dev/null || true
    wait "$WATCH_PID" 2>/dev/null || true
  fi
  ddb_stop
  exit "$status"
}
trap cleanup EXIT

MODE="${IDEMPOTENCY_MODE:-optimistic}"
IDEMPOTENCY_TABLE=order-consumer-idempotency
LEDGER_TABLE=order-consumer-ledger
FAILURES=()
fail() { FAILURES+=("$1"); }

step "tools: cargo-lambda, boto3, PyYAML (the first time: a minute or two)"
tools_install cargo-lambda tables
took
step "building order-consumer, payments-api and stream-consumer (the first time: several minutes)"
cargo build --quiet --bin order-consumer --bin payments-api --bin stream-consumer
took
step "DynamoDB Local (the first time: installed from npm, about a minute) and the tables"
ddb_start
python3 scripts/local_tables.py create "IdempotencyTable=$IDEMPOTENCY_TABLE" "LedgerTable=$LEDGER_TABLE"
if [ -n "${LEDGER_SEED:-}" ]; then
  # shellcheck disable=SC2086 # one ACCOUNT=BALANCE per word
  python3 scripts/local_tables.py seed "$LEDGER_TABLE" $LEDGER_SEED
fi
took

PORT="$(ddb_free_port)"
LOG="$(mktemp -t lambda-idempotency-watch.XXXXXX)"
step "cargo lambda watch on 127.0.0.1:$PORT (IDEMPOTENCY_MODE=$MODE, JSON log: $LOG)"
setsid cargo lambda watch --invoke-address 127.0.0.1 --invoke-port "$PORT" \
  --env-var "IDEMPOTENCY_TABLE=$IDEMPOTENCY_TABLE" \
  --env-var "LEDGER_TABLE=$LEDGER_TABLE" \
  --env-var "IDEMPOTENCY_MODE=$MODE" \
  --env-var "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB" \
  --env-var "AWS_LAMBDA_LOG_FORMAT=JSON" \
  --env-var "RUST_LOG=info" >"$LOG" 2>&1 &
WATCH_PID=$!
for _ in $(seq 1 240); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break
  kill -0 "$WATCH_PID" 2>/dev/null || { cat "$LOG"; echo "FAIL: cargo lambda watch stopped"; exit 1; }
  sleep 0.25
done
took

# A batch event: the response, then each record's outcome from the function's JSON log,
# checked against OUTCOME... (one per record, in the event's order).
batch() {
  local file="$1" what="$2" function="$3" seen response
  shift 3
  echo
  echo "== events/$file ($function): $what"
  seen=$(wc -l <"$LOG")
  if ! response=$(cargo lambda invoke "$function" --invoke-address 127.0.0.1 \
    --invoke-port "$PORT" --data-file "events/$file" --output-format json); then
    fail "events/$file: the invocation failed"
    return
  fi
  echo "response: $response"
  python3 scripts/check_outcomes.py "$LOG" "$seen" "events/$file" "$response" "$@" \
    || fail "events/$file: outcomes or batchItemFailures differ (see above)"
}

# An HTTP request to payments-api: its status and whether it was replayed, checked.
http() {
  local file="$1" what="$2" status="$3" replayed="$4" response got
  echo
  echo "== events/$file (payments-api): $what"
  if ! response=$(cargo lambda invoke payments-api --invoke-address 127.0.0.1 \
    --invoke-port "$PORT" --data-file "events/$file" --output-format json); then
    fail "events/$file: the invocation failed"
    return
  fi
  got=$(python3 -c '
import json, sys
response = json.loads(sys.argv[1])
headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
replayed = "replayed" if headers.get("idempotent-replayed") == "true" else "fresh"
print(response["statusCode"], replayed, response.get("body") or "")' "$response")
  echo "response: $got"
  case "$got" in
    "$status $replayed"*) ;;
    *) fail "events/$file: expected $status ($replayed), got ${got%% *} ($(echo "$got" | cut -d' ' -f2))" ;;
  esac
}

batch batch.json "a fresh batch: alice +25, bob +40, alice -5" order-consumer \
  executed executed executed
batch batch_redelivered.json "the same batch delivered again: replayed, nothing applied" order-consumer \
  replayed replayed replayed
batch producer_retry.json "the producer sent evt-1002 again under a new messageId: replayed" order-consumer \
  replayed
batch poison.json "carol +10, a body that is not JSON, carol +7: only the poison record is reported" order-consumer \
  executed rejected executed
batch tampered.json "evt-1002's key with another amount: rejected and reported, never applied" order-consumer \
  rejected
batch fifo.json "a FIFO batch: dave +5, a poison record in dave's group, erin +8 (another group: runs), dave +9 waits its turn" order-consumer \
  executed rejected executed fifo_skipped

http payments_post.json "POST /payments, frank +25: 201 with the balance after it" 201 fresh
http payments_retry.json "the client retries with the same key: the stored 201, nothing applied" 201 replayed
http payments_reused_key.json "the same key with another amount: 422, nothing applied" 422 fresh
http payments_invalid.json "an amount that is not an integer: 400, nothing applied" 400 fresh
http payments_missing_key.json "no Idempotency-Key: 400" 400 fresh
http payments_function_url.json "through the Function URL, frank +5: 201, balance 30" 201 fresh

batch kinesis.json "a Kinesis shard: alice +10, data that is not an order, bob +5: the shard stops at the poison record, the rest wait" stream-consumer \
  executed rejected fifo_skipped
batch kinesis.json "the same records again (a retry from before the checkpoint): alice replayed, the poison record still holds the shard" stream-consumer \
  replayed rejected fifo_skipped
batch dynamodb_stream.json "INSERTs into the orders table: alice +10, an amount that is not a number, bob +5: stops at the second" stream-consumer \
  executed failed fifo_skipped

echo
echo "== ledger balances"
python3 scripts/local_tables.py expect "$LEDGER_TABLE" \
  acct-alice=40 acct-bob=40 acct-carol=17 acct-dave=5 acct-erin=8 acct-frank=30 \
  || fail "ledger balances differ from what the events should give (see above)"

echo
echo "Each record's outcome is in the function's JSON log: $LOG"
echo "Total time: $((SECONDS - RUN_START)) s"
if ((${#FAILURES[@]})); then
  printf '  - %s\n' "${FAILURES[@]}"
  echo "FAIL"
  exit 1
fi
echo "PASS"
