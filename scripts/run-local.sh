#!/usr/bin/env bash
# The Quickstart's main job: runs the real example functions locally.
#
# Installs what is missing (DynamoDB Local, cargo-lambda), starts DynamoDB Local on a free
# loopback port, creates the idempotency and ledger tables with template.yaml's schema,
# runs order-consumer under `cargo lambda watch`, invokes the sample events (a batch, its
# redelivery, a producer retry, a poison record, a tampered duplicate, a FIFO batch), then the
# payments-api's HTTP requests (a payment, its retry, a reused key, an invalid body, no key, a
# Function URL request), then the stream-consumer's Kinesis and DynamoDB Streams batches, prints
# each response and the ledger balances, and stops everything it started.
#
#   IDEMPOTENCY_MODE=lease scripts/run-local.sh     # the other commit mode
set -euo pipefail
cd "$(dirname "$0")/.."
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

tools_install
echo "== building order-consumer, payments-api and stream-consumer"
cargo build --quiet --bin order-consumer --bin payments-api --bin stream-consumer
ddb_start
python3 scripts/local_tables.py create "IdempotencyTable=$IDEMPOTENCY_TABLE" "LedgerTable=$LEDGER_TABLE"

PORT="$(ddb_free_port)"
LOG="$(mktemp -t order-consumer-watch.XXXXXX)"
echo "== cargo lambda watch on 127.0.0.1:$PORT (IDEMPOTENCY_MODE=$MODE, log: $LOG)"
setsid cargo lambda watch --invoke-address 127.0.0.1 --invoke-port "$PORT" \
  --env-var "IDEMPOTENCY_TABLE=$IDEMPOTENCY_TABLE" \
  --env-var "LEDGER_TABLE=$LEDGER_TABLE" \
  --env-var "IDEMPOTENCY_MODE=$MODE" \
  --env-var "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB" \
  --env-var "RUST_LOG=info" >"$LOG" 2>&1 &
WATCH_PID=$!
for _ in $(seq 1 120); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break
  kill -0 "$WATCH_PID" 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.25
done

invoke() {
  local file="$1" what="$2" function="${3:-order-consumer}" seen
  seen=$(wc -l <"$LOG")
  echo
  echo "== events/$file: $what"
  echo -n "response: "
  cargo lambda invoke "$function" --invoke-address 127.0.0.1 --invoke-port "$PORT" \
    --data-file "events/$file"
  echo
  sleep 0.3
  # Each record's outcome, from the function's log.
  tail -n +"$((seen + 1))" "$LOG" | tr -d '\000' | sed 's/\x1b\[[0-9;]*m//g' \
    | sed -n 's/.*record [a-z ]* item_identifier="\([^"]*\)" outcome=\([a-z_]*\).*/  \1  \2/p'
}
invoke batch.json "a fresh batch: alice +25, bob +40, alice -5"
invoke batch_redelivered.json "the same batch delivered again: replayed, nothing applied"
invoke producer_retry.json "the producer sent evt-1002 again under a new messageId: replayed"
invoke poison.json "carol +10, a body that is not JSON, carol +7: only the poison record is reported"
invoke tampered.json "evt-1002's key with another amount: rejected and reported, never applied"
invoke fifo.json "a FIFO batch: dave +5, a poison record, then erin +8 and dave +9 wait their turn"

# An HTTP request to payments-api: its status, whether it was replayed, and its body.
invoke_http() {
  local file="$1" what="$2"
  echo
  echo "== events/$file: $what"
  cargo lambda invoke payments-api --invoke-address 127.0.0.1 --invoke-port "$PORT" \
    --data-file "events/$file" --output-format json | python3 -c '
import json, sys
response = json.load(sys.stdin)
headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
replayed = "(replayed)" if headers.get("idempotent-replayed") == "true" else "-"
print("response:", response["statusCode"], replayed, response.get("body") or "")'
}
invoke_http payments_post.json "POST /payments, frank +25: 201 with the balance after it"
invoke_http payments_retry.json "the client retries with the same key: the stored 201, nothing applied"
invoke_http payments_reused_key.json "the same key with another amount: 422, nothing applied"
invoke_http payments_invalid.json "an amount that is not an integer: 400, nothing applied"
invoke_http payments_missing_key.json "no Idempotency-Key: 400"
invoke_http payments_function_url.json "through the Function URL, frank +5: 201, balance 30"

invoke kinesis.json "a Kinesis shard: alice +10, data that is not an order, bob +5: the shard stops at the poison record, the rest wait" stream-consumer
invoke kinesis.json "the same records again (a retry from before the checkpoint): alice replayed, the poison record still holds the shard" stream-consumer
invoke dynamodb_stream.json "INSERTs into the orders table: alice +10, an amount that is not a number, bob +5: stops at the second" stream-consumer

echo
echo "== ledger balances (expected: acct-alice 40, acct-bob 40, acct-carol 17, acct-dave 5, acct-frank 30)"
python3 scripts/local_tables.py balances "$LEDGER_TABLE"
echo
echo "Each record's outcome is in the function's log: $LOG"
