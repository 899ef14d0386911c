"""Checks template.yaml's key settings, which neither cfn-lint nor `sam validate --lint`
catches (a misspelt ReportBatchItemFailures passes both). Run with the tools venv's python
(it has cfn-lint's YAML decoder, which understands !Ref and !GetAtt)."""
import sys

from cfnlint.decode import decode

problems = []


def check(condition, message):
    if not condition:
        problems.append(message)


template, matches = decode(sys.argv[1] if len(sys.argv) > 1 else "template.yaml")
if matches:
    sys.exit(f"template.yaml does not parse: {matches}")
resources = template["Resources"]


def of_type(kind):
    return {name: r for name, r in resources.items() if r["Type"] == kind}


functions = of_type("AWS::Serverless::Function")
by_binary = {f.get("Metadata", {}).get("BuildProperties", {}).get("Binary"): f for f in functions.values()}
check(set(by_binary) == {"order-consumer", "payments-api", "stream-consumer"},
      f"one function per example binary: {sorted(map(str, by_binary))}")


def common(binary):
    """The settings every example function has; answers its properties and environment."""
    function = by_binary.get(binary, {"Metadata": {}, "Properties": {}})
    props = function["Properties"]
    check(function["Metadata"].get("BuildMethod") == "rust-cargolambda", f"{binary}: BuildMethod rust-cargolambda")
    check(props.get("Runtime") == "provided.al2023", f"{binary}: Runtime provided.al2023")
    check(props.get("Architectures") == ["arm64"], f"{binary}: Architectures [arm64]")
    check(props.get("Handler") == "bootstrap", f"{binary}: Handler bootstrap")
    check(isinstance(props.get("Timeout"), int), f"{binary}: an explicit function Timeout")
    env = props.get("Environment", {}).get("Variables", {})
    check(env.get("IDEMPOTENCY_TABLE") == {"Ref": "IdempotencyTable"}, f"{binary}: IDEMPOTENCY_TABLE refers to IdempotencyTable")
    check(env.get("LEDGER_TABLE") == {"Ref": "LedgerTable"}, f"{binary}: LEDGER_TABLE refers to LedgerTable")
    check("IDEMPOTENCY_MODE" in env, f"{binary}: IDEMPOTENCY_MODE is set")
    return props, env


def iam(binary, props, expected):
    """The function's inline statements grant exactly `expected` (table -> actions)."""
    granted = {}
    for policy in props.get("Policies", []):
        check(isinstance(policy, dict) and "Statement" in policy, f"{binary}: policies are inline statements only")
        for statement in policy.get("Statement", []):
            target = statement["Resource"]["Fn::GetAtt"][0]
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            check(all("*" not in a for a in actions), f"{binary}: no wildcard actions")
            granted.setdefault(target, set()).update(actions)
    check(granted == expected, f"{binary}: IAM is limited to the actions used: {granted} != {expected}")


# Observability: JSON logs and X-Ray for every function (Globals), and an alarm on the
# depth of every queue where failed records end (dead-letter and on-failure queues).
function_globals = template.get("Globals", {}).get("Function", {})
logging = function_globals.get("LoggingConfig", {})
check(logging.get("LogFormat") == "JSON", "Globals: LoggingConfig LogFormat JSON")
check(logging.get("ApplicationLogLevel") in ("INFO", "WARN", "ERROR"), "Globals: an ApplicationLogLevel")
check(function_globals.get("Tracing") == "Active", "Globals: Tracing Active (X-Ray)")
alarmed = set()
for alarm in of_type("AWS::CloudWatch::Alarm").values():
    a = alarm["Properties"]
    if a.get("Namespace") == "AWS/SQS" and a.get("MetricName") == "ApproximateNumberOfMessagesVisible" \
            and a.get("ComparisonOperator") == "GreaterThanThreshold" and a.get("Threshold") == 0 \
            and a.get("AlarmActions"):
        for d in a.get("Dimensions", []):
            if d.get("Name") == "QueueName":
                alarmed.add(d["Value"]["Fn::GetAtt"][0])
failure_queues = set()
for q in of_type("AWS::SQS::Queue").values():
    target = q["Properties"].get("RedrivePolicy", {}).get("deadLetterTargetArn", {}).get("Fn::GetAtt", [None])[0]
    if target:
        failure_queues.add(target)
for f in functions.values():
    for e in f["Properties"].get("Events", {}).values():
        target = e["Properties"].get("DestinationConfig", {}).get("OnFailure", {}).get("Destination", {})
        if isinstance(target, dict) and "Fn::GetAtt" in target:
            failure_queues.add(target["Fn::GetAtt"][0])
check(failure_queues and failure_queues <= alarmed,
      f"an alarm with actions on the depth (> 0) of every failure queue: {sorted(failure_queues - alarmed)} have none")

RECORDS = {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}

# order-consumer: an SQS event source with partial batch responses, and a window that
# outlives the queues.
props, env = common("order-consumer")
timeout = props.get("Timeout")
events = [e for e in props.get("Events", {}).values() if e["Type"] == "SQS"]
check(len(events) == 1, "one SQS event source")
sqs = events[0]["Properties"]
check(sqs.get("FunctionResponseTypes") == ["ReportBatchItemFailures"],
      "the SQS event source has FunctionResponseTypes: [ReportBatchItemFailures], spelt exactly")
check(isinstance((sqs.get("ScalingConfig") or {}).get("MaximumConcurrency"), int),
      "the SQS event source caps its concurrency (ScalingConfig: MaximumConcurrency)")
queue_name = sqs["Queue"]["Fn::GetAtt"][0]
queue = resources[queue_name]["Properties"]
check(queue.get("VisibilityTimeout", 30) >= 6 * timeout,
      f"queue VisibilityTimeout ({queue.get('VisibilityTimeout')}) is at least 6 x the function Timeout ({timeout})")
redrive = queue.get("RedrivePolicy", {})
# The idempotency window must outlive every way back of a message: its retention in the
# queue, then in the dead-letter queue (a FIFO queue's DLQ restarts the clock; a standard
# one counts from the first enqueue: the sum covers both), then the queue's retention again
# after a redrive. Shorter, a message redriven late (or a tampered duplicate) runs again.
window = env.get("IDEMPOTENCY_EXPIRES_AFTER_SECS")
check(isinstance(window, int), "IDEMPOTENCY_EXPIRES_AFTER_SECS is set, in seconds")
check("deadLetterTargetArn" in redrive and redrive.get("maxReceiveCount", 0) >= 1, "the queue has a redrive policy")
dlq = redrive.get("deadLetterTargetArn", {}).get("Fn::GetAtt", [None])[0]
check(resources.get(dlq, {}).get("Type") == "AWS::SQS::Queue", "the dead-letter queue is an SQS queue")
DEFAULT_RETENTION = 345600  # SQS's default MessageRetentionPeriod: 4 days
queue_retention = queue.get("MessageRetentionPeriod", DEFAULT_RETENTION)
dlq_retention = resources.get(dlq, {}).get("Properties", {}).get("MessageRetentionPeriod", DEFAULT_RETENTION)
needed = queue_retention + dlq_retention + queue_retention
if isinstance(window, int):
    check(window > needed,
          f"IDEMPOTENCY_EXPIRES_AFTER_SECS ({window}) must outlive the queues: the queue's retention "
          f"({queue_retention}), the dead-letter queue's ({dlq_retention}) and the queue's again after a "
          f"redrive = {needed}; shorter, a message redriven from the dead-letter queue runs again")


def table(name, key):
    t = resources[name]["Properties"]
    check(t.get("KeySchema") == [{"AttributeName": key, "KeyType": "HASH"}], f"{name}: partition key {key} only")
    check(t.get("AttributeDefinitions") == [{"AttributeName": key, "AttributeType": "S"}], f"{name}: {key} is a string")
    check(t.get("BillingMode") == "PAY_PER_REQUEST", f"{name}: on-demand")
    return t


idempotency = table("IdempotencyTable", "id")
check(idempotency.get("TimeToLiveSpecification") == {"AttributeName": "expiration", "Enabled": True},
      "IdempotencyTable: TTL on expiration")
table("LedgerTable", "account")

# The order-consumer's batches also look up redelivered records (the pre-check).
iam("order-consumer", by_binary.get("order-consumer", {}).get("Properties", {}),
    {"IdempotencyTable": RECORDS | {"dynamodb:BatchGetItem"}, "LedgerTable": {"dynamodb:UpdateItem"}})

# payments-api: POST /payments on an HTTP API and a Function URL; it reads the balance it
# conditions its write on.
props, env = common("payments-api")
routes = [e["Properties"] for e in props.get("Events", {}).values() if e["Type"] == "HttpApi"]
check(routes == [{"Path": "/payments", "Method": "POST"}], f"payments-api: one HttpApi route, POST /payments: {routes}")
check(props.get("FunctionUrlConfig", {}).get("AuthType") in ("AWS_IAM", "NONE"), "payments-api: a Function URL")
check(env.get("IDEMPOTENCY_MODE") == "lease", "payments-api: lease mode (a key in flight is answered 409)")
check(props.get("Timeout", 30) < 30, "payments-api: Timeout below API Gateway's 30 s integration timeout")
iam("payments-api", props, {"IdempotencyTable": RECORDS, "LedgerTable": {"dynamodb:GetItem", "dynamodb:UpdateItem"}})

# stream-consumer: a Kinesis and a DynamoDB Streams source, each with partial batch
# responses, bounded retries that isolate a poison record and an on-failure destination,
# and a window that outlives the streams' retention.
props, env = common("stream-consumer")
sources = {e["Type"]: e["Properties"] for e in props.get("Events", {}).values()}
check(set(sources) == {"Kinesis", "DynamoDB"}, f"stream-consumer: a Kinesis and a DynamoDB source: {sorted(sources)}")
retention_hours = 24  # a DynamoDB stream's, fixed
for kind, source in sources.items():
    check(source.get("FunctionResponseTypes") == ["ReportBatchItemFailures"],
          f"stream-consumer: the {kind} source has FunctionResponseTypes: [ReportBatchItemFailures], spelt exactly")
    check(isinstance(source.get("MaximumRetryAttempts"), int), f"stream-consumer: the {kind} source bounds its retries")
    check(source.get("BisectBatchOnFunctionError") is True, f"stream-consumer: the {kind} source isolates a poison record")
    on_failure = source.get("DestinationConfig", {}).get("OnFailure", {})
    target = on_failure.get("Destination", {}).get("Fn::GetAtt", [None])[0]
    check(resources.get(target, {}).get("Type") == "AWS::SQS::Queue", f"stream-consumer: the {kind} source has an on-failure queue")
    if kind == "Kinesis":
        stream = resources[source["Stream"]["Fn::GetAtt"][0]]["Properties"]
        retention_hours = max(retention_hours, stream.get("RetentionPeriodHours", 24))
    else:
        patterns = [f.get("Pattern") for f in source.get("FilterCriteria", {}).get("Filters", [])]
        check(patterns == ['{"eventName": ["INSERT"]}'], f"stream-consumer: only INSERTs: {patterns}")
        table_name = source["Stream"]["Fn::GetAtt"][0]
        view = resources[table_name]["Properties"].get("StreamSpecification", {}).get("StreamViewType")
        check(view in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES"), f"stream-consumer: {table_name}'s stream has the new image")
window = env.get("IDEMPOTENCY_EXPIRES_AFTER_SECS")
check(isinstance(window, int) and window > retention_hours * 3600,
      f"stream-consumer: IDEMPOTENCY_EXPIRES_AFTER_SECS ({window}) must outlive the streams' retention ({retention_hours} h)")
iam("stream-consumer", props, {"IdempotencyTable": RECORDS, "LedgerTable": {"dynamodb:UpdateItem"}})

if problems:
    print("template.yaml check failed:")
    for p in problems:
        print(f"  - {p}")
    sys.exit(1)
print("template.yaml key settings: ok")
