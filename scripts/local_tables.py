"""Creates template.yaml's DynamoDB tables in DynamoDB Local, seeds and checks ledger balances.

    python3 scripts/local_tables.py create IdempotencyTable=NAME LedgerTable=NAME
    python3 scripts/local_tables.py balances TABLE
    python3 scripts/local_tables.py seed TABLE ACCOUNT=BALANCE...
    python3 scripts/local_tables.py expect TABLE ACCOUNT=BALANCE...

The table definitions (keys, billing mode, TTL) are read from template.yaml, so the local
tables have the deployed schema. `expect` prints each balance against the expected one and
exits 1 when any differs (or the table holds an account not expected). The endpoint comes
from AWS_ENDPOINT_URL_DYNAMODB. Run with the tools venv's python (`tools_install tables`:
boto3 and PyYAML).
"""
import os
import sys

import boto3
import yaml


class TemplateLoader(yaml.SafeLoader):
    """Reads CloudFormation's short forms (!Ref, !GetAtt, !Sub, ...) as plain values."""


def _intrinsic(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node, deep=True)}
    return {suffix: loader.construct_mapping(node, deep=True)}


TemplateLoader.add_multi_constructor("!", _intrinsic)


def client():
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.client("dynamodb", region_name=region)


def create(template_path, names):
    with open(template_path) as f:
        template = yaml.load(f, Loader=TemplateLoader)
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


def read_balances(table_name):
    items = client().scan(TableName=table_name, ConsistentRead=True)["Items"]
    return {item["account"]["S"]: int(item["balance"]["N"]) for item in items}


def balances(table_name):
    for account, balance in sorted(read_balances(table_name).items()):
        print(f"  {account:<12} {balance:>6}")


def parse(pairs):
    return {account: int(balance) for account, balance in (p.split("=", 1) for p in pairs)}


def seed(table_name, pairs):
    dynamodb = client()
    for account, balance in parse(pairs).items():
        dynamodb.put_item(TableName=table_name,
                          Item={"account": {"S": account}, "balance": {"N": str(balance)}})
        print(f"  seeded {account} with {balance}")


def expect(table_name, pairs):
    expected = parse(pairs)
    actual = read_balances(table_name)
    wrong = 0
    for account in sorted(set(expected) | set(actual)):
        want, got = expected.get(account), actual.get(account)
        ok = want == got
        wrong += not ok
        mark = "ok" if ok else f"WRONG (expected {want})"
        print(f"  {account:<12} {got if got is not None else '-':>6}  {mark}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    command, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "create":
        create("template.yaml", dict(arg.split("=", 1) for arg in args))
    elif command == "balances" and len(args) == 1:
        balances(args[0])
    elif command == "seed" and len(args) >= 2:
        seed(args[0], args[1:])
    elif command == "expect" and len(args) >= 2:
        expect(args[0], args[1:])
    else:
        sys.exit(__doc__)
