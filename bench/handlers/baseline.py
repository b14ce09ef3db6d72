"""The floor of a Python Lambda that touches DynamoDB: import boto3, a client at module level, one GetItem."""

import json
import os

import boto3

ddb = boto3.client("dynamodb")
TABLE = os.environ["CUSTOMER_DATA_TABLE"]


def handler(event: dict, context: object) -> dict:
    key = {"customer_id": {"N": "7"}, "sk": {"S": "ORDER#1042"}}
    item = ddb.get_item(TableName=TABLE, Key=key).get("Item", {})
    return {"statusCode": 200, "body": json.dumps({"status": item.get("status", {}).get("S")})}
