"""The Python baseline for the benchmarks: the order-consumer written with Powertools for
AWS Lambda (Python), `BatchProcessor` with `idempotent_function` on DynamoDB, against the
same DynamoDB Local, tables and events as the Rust toolkit.

    python bench_powertools.py worker    # JSON lines on stdin: {"event": {...}}; answers
                                         # {"ms": ..., "failures": n, "calls": n, "wcu": x,
                                         #  "refused_wcu": x, "rcu": x, "cpu_ms": x,
                                         #  "operations": ["PutItem", ...]}
    python bench_powertools.py runtime   # a Lambda-style process polling AWS_LAMBDA_RUNTIME_API
                                         # (for the cold start and memory figures)

Environment: IDEMPOTENCY_TABLE, LEDGER_TABLE, AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION.
Powertools cannot commit the ledger write with the idempotency record, so the handler
writes the ledger itself (one more call per fresh record, and no exactly-once effect).
"""
import json
import os
import sys
import time
import urllib.request

import boto3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

REGION = os.environ.get("AWS_REGION", "us-east-1")
client = boto3.client("dynamodb", region_name=REGION)
LEDGER = os.environ["LEDGER_TABLE"]

# Count calls and consumed capacity, as the Rust side's SDK interceptor does: write and read
# units as DynamoDB Local reports them, and the units DynamoDB charges for a write refused by
# its condition (which DynamoDB Local does not report): 1 per refused item write.
stats = {"calls": 0, "wcu": 0.0, "refused_wcu": 0.0, "rcu": 0.0}
operations = set()  # the operations sent (PutItem, ...), per batch
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}
READS = {"GetItem", "BatchGetItem"}


def _count(model, params, **_):
    stats["calls"] += 1
    operations.add(model.name)
    if model.name in WRITES or model.name in READS:
        params["ReturnConsumedCapacity"] = "TOTAL"


def _capacity(http_response, parsed, model, **_):
    if parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
        stats["refused_wcu"] += 1.0
    consumed = parsed.get("ConsumedCapacity")
    units = 0.0
    if isinstance(consumed, dict):
        units = consumed.get("CapacityUnits", 0.0)
    elif isinstance(consumed, list):
        units = sum(c.get("CapacityUnits", 0.0) for c in consumed)
    stats["rcu" if model.name in READS else "wcu"] += units


client.meta.events.register("provide-client-params.dynamodb.*", _count)
client.meta.events.register("after-call.dynamodb.*", _capacity)

persistence = DynamoDBPersistenceLayer(
    table_name=os.environ["IDEMPOTENCY_TABLE"], boto3_client=client
)
config = IdempotencyConfig(
    event_key_jmespath='messageAttributes."Idempotency-Key".stringValue || powertools_json(body).eventId',
    payload_validation_jmespath="powertools_json(body)",
    expires_after_seconds=3600,
    raise_on_no_idempotency_key=True,
)
processor = BatchProcessor(event_type=EventType.SQS)


@idempotent_function(data_keyword_argument="record", config=config, persistence_store=persistence)
def apply_order(record):
    order = json.loads(record["body"])
    if not isinstance(order.get("amount"), int) or not order.get("account"):
        raise ValueError("not an order")
    client.update_item(
        TableName=LEDGER,
        Key={"account": {"S": order["account"]}},
        UpdateExpression="ADD #b :a",
        ExpressionAttributeNames={"#b": "balance"},
        ExpressionAttributeValues={":a": {"N": str(order["amount"])}},
    )
    return {"account": order["account"], "amount": order["amount"]}


def record_handler(record):
    return apply_order(record=record.raw_event)


class Context:
    """The parts of the Lambda context Powertools reads."""

    function_name = "order-consumer-python"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:order-consumer-python"
    memory_limit_in_mb = 128
    aws_request_id = "bench"
    log_group_name = "/aws/lambda/order-consumer-python"
    log_stream_name = "bench"

    def __init__(self, deadline_ms):
        self.deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self):
        return max(0, int(self.deadline_ms - time.time() * 1000))


def handler(event, context):
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )


def worker():
    for line in sys.stdin:
        request = json.loads(line)
        if "event" not in request:
            break
        stats.update(calls=0, wcu=0.0, refused_wcu=0.0, rcu=0.0)
        operations.clear()
        started, cpu = time.perf_counter(), time.process_time()
        response = handler(request["event"], Context(time.time() * 1000 + 30_000))
        ms = (time.perf_counter() - started) * 1000
        cpu_ms = (time.process_time() - cpu) * 1000
        print(json.dumps({"ms": ms, "cpu_ms": cpu_ms,
                          "failures": len(response["batchItemFailures"]),
                          "operations": sorted(operations), **stats}), flush=True)


def runtime():
    api = "http://" + os.environ["AWS_LAMBDA_RUNTIME_API"] + "/2018-06-01/runtime/invocation/"
    while True:
        with urllib.request.urlopen(api + "next") as reply:
            request_id = reply.headers["Lambda-Runtime-Aws-Request-Id"]
            deadline_ms = int(reply.headers["Lambda-Runtime-Deadline-Ms"])
            event = json.loads(reply.read())
        response = handler(event, Context(deadline_ms))
        body = json.dumps(response).encode()
        urllib.request.urlopen(urllib.request.Request(api + request_id + "/response", data=body, method="POST")).read()


if __name__ == "__main__":
    {"worker": worker, "runtime": runtime}[sys.argv[1]]()
