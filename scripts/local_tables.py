"""Creates template.yaml's DynamoDB tables in DynamoDB Local, and prints ledger balances.

    python3 scripts/local_tables.py create IdempotencyTable=NAME LedgerTable=NAME
    python3 scripts/local_tables.py balances TABLE

The table definitions (keys, billing mode, TTL) are read from template.yaml, so the local
tables have the deployed schema. The endpoint comes from AWS_ENDPOINT_URL_DYNAMODB. Run with
the tools venv's python (it has boto3 and cfn-lint's YAML decoder).
"""
import os
import sys

import boto3
from cfnlint.decode import decode


def client():
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.client("dynamodb", region_name=region)


def create(template_path, names):
    template, matches = decode(template_path)
    if matches:
        sys.exit(f"{template_path} does not parse: {matches}")
    dynamodb = client()
    existing = set(dynamodb.list_tables()["TableNames"])
    for logical_id, table_name in names.items():
        props = template["Resources"][logical_id]["Properties"]
        if table_name in existing:
            dynamodb.delete_table(TableName=table_name)
            dynamodb.get_waiter("table_not_exists").wait(TableName=table_name)
        dynamodb.create_table(
            TableName=table_name,
            AttributeDefinitions=props["AttributeDefinitions"],
            KeySchema=props["KeySchema"],
            BillingMode=props["BillingMode"],
        )
        dynamodb.get_waiter("table_exists").wait(TableName=table_name)
        ttl = props.get("TimeToLiveSpecification")
        if ttl:
            dynamodb.update_time_to_live(TableName=table_name, TimeToLiveSpecification=ttl)
        print(f"created {table_name} ({logical_id} in {template_path})")


def balances(table_name):
    items = client().scan(TableName=table_name, ConsistentRead=True)["Items"]
    for item in sorted(items, key=lambda i: i["account"]["S"]):
        print(f"  {item['account']['S']:<12} {int(item['balance']['N']):>6}")


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "create":
        create("template.yaml", dict(arg.split("=", 1) for arg in sys.argv[2:]))
    elif command == "balances" and len(sys.argv) == 3:
        balances(sys.argv[2])
    else:
        sys.exit(__doc__)
