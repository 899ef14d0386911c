"""The Powertools side of the interoperability test (examples/order-consumer/tests/
powertools_interop.rs): the order-consumer written with Powertools for AWS Lambda (Python),
as a team migrating to Rust would have it, on the same DynamoDB Local tables.

    @idempotent_function(data_keyword_argument="order", config=IdempotencyConfig(
        event_key_jmespath="key", payload_validation_jmespath="body"))
    def apply(order): ...   # order={"key": <Idempotency-Key attribute, else eventId>,
                            #        "body": <the parsed body>}

Its records are keyed `<AWS_LAMBDA_FUNCTION_NAME>.__main__.apply#<md5>` (Powertools' default
prefix: no key_prefix is set). JSON lines on stdin, one answer each on stdout:

    {"event": {...}}                 -> {"failures": [messageId, ...], "applied": n}
                                        (every record when Powertools fails the invocation)
    {"event": {...}, "hold": true}   -> {"held": true} once the first record's handler runs
                                        (its INPROGRESS record is written); it then waits
    {"release": true}                -> the held batch's {"failures": [...], "applied": n}

`applied` counts the handler's runs (each one credits the ledger).

Environment: IDEMPOTENCY_TABLE, LEDGER_TABLE, AWS_ENDPOINT_URL_DYNAMODB, AWS_REGION,
AWS_LAMBDA_FUNCTION_NAME.
"""
import json
import os
import sys
import threading
import time

import boto3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

client = boto3.client("dynamodb", region_name=os.environ.get("AWS_REGION", "us-east-1"))
LEDGER = os.environ["LEDGER_TABLE"]
persistence = DynamoDBPersistenceLayer(table_name=os.environ["IDEMPOTENCY_TABLE"], boto3_client=client)
config = IdempotencyConfig(event_key_jmespath="key", payload_validation_jmespath="body")
processor = BatchProcessor(event_type=EventType.SQS)

runs = {"applied": 0}
hold = {"on": False, "entered": threading.Event(), "release": threading.Event()}


@idempotent_function(data_keyword_argument="order", config=config, persistence_store=persistence)
def apply(order):
    if hold["on"]:
        hold["entered"].set()
        hold["release"].wait()
    body = order["body"]
    runs["applied"] += 1
    client.update_item(
        TableName=LEDGER,
        Key={"account": {"S": body["account"]}},
        UpdateExpression="ADD #b :a",
        ExpressionAttributeNames={"#b": "balance"},
        ExpressionAttributeValues={":a": {"N": str(body["amount"])}},
    )
    return {"account": body["account"], "amount": body["amount"]}


def record_handler(record):
    body = json.loads(record.body)
    attribute = record.raw_event.get("messageAttributes", {}).get("Idempotency-Key", {})
    key = attribute.get("stringValue") or body["eventId"]
    return apply(order={"key": key, "body": body})


class Context:
    """The parts of the Lambda context Powertools reads: 60 s left."""

    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "orders-python")
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:orders-python"
    memory_limit_in_mb = 128
    aws_request_id = "interop"
    log_group_name = "/aws/lambda/orders-python"
    log_stream_name = "interop"

    def __init__(self):
        self.deadline_ms = time.time() * 1000 + 60_000

    def get_remaining_time_in_millis(self):
        return max(0, int(self.deadline_ms - time.time() * 1000))


def handle(event):
    context = Context()
    config.register_lambda_context(context)
    runs["applied"] = 0
    try:
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
        failures = [f["itemIdentifier"] for f in response["batchItemFailures"]]
    except BatchProcessingError:
        # Every record failed: Powertools fails the invocation, so Lambda retries them all.
        failures = [record["messageId"] for record in event["Records"]]
    return {"failures": failures, "applied": runs["applied"]}


def answer(value):
    print(json.dumps(value), flush=True)


def main():
    held = None
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("release"):
            hold["release"].set()
            held["thread"].join()
            hold["on"] = False
            answer(held["answer"])
            held = None
        elif request.get("hold"):
            hold["on"] = True
            hold["entered"].clear()
            hold["release"].clear()
            held = {}

            def run(event=request["event"], held=held):
                held["answer"] = handle(event)

            held["thread"] = threading.Thread(target=run)
            held["thread"].start()
            hold["entered"].wait()
            answer({"held": True})
        else:
            answer(handle(request["event"]))


if __name__ == "__main__":
    main()
