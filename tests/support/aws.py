"""AWS in tests is moto, shaped by our real template.yaml."""

from __future__ import annotations

from typing import Any

from devstack.stack import load_template

TABLE_KEYS = ("AttributeDefinitions", "KeySchema", "GlobalSecondaryIndexes")


def create_tables(ddb: Any) -> dict[str, str]:
    """Create every DynamoDB table of template.yaml (named by logical id); returns logical -> name."""
    names = {}
    for logical_id, res in load_template()["Resources"].items():
        if res["Type"] != "AWS::DynamoDB::Table":
            continue
        props = {k: v for k, v in res["Properties"].items() if k in TABLE_KEYS}
        ddb.create_table(TableName=logical_id, BillingMode="PAY_PER_REQUEST", **props)
        names[logical_id] = logical_id
    return names
