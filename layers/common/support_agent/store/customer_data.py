"""The CustomerData table: orders, invoices and refund rows, all under the customer's partition.

Every read takes the customer id from the verified principal, so an order id guessed from another
account is simply not there.
"""

from __future__ import annotations

from typing import Any

from support_agent.store.dynamo import DynamoDBClient, from_item, to_item, to_values

REFUNDABLE_STATUSES = ("DELIVERED", "SHIPPED")


def order_key(customer_id: int, order_id: int) -> dict[str, Any]:
    return to_item({"customer_id": customer_id, "sk": f"ORDER#{order_id}"})


def refund_request_sk(conversation_id: str, seq: int, tool_use_id: str) -> str:
    """The idempotency key of one refund tool call: server-side values only."""
    return f"REFUND#{conversation_id}#{seq}#{tool_use_id}"


class CustomerDataStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self.table = table

    def get(self, customer_id: int, sk: str) -> dict[str, Any] | None:
        out = self._db.get_item(
            TableName=self.table, Key=to_item({"customer_id": customer_id, "sk": sk}), ConsistentRead=True
        )
        item = out.get("Item")
        return from_item(item) if item else None

    def get_order(self, customer_id: int, order_id: int) -> dict[str, Any] | None:
        return self.get(customer_id, f"ORDER#{order_id}")

    def query_prefix(self, customer_id: int, prefix: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "customer_id = :c AND begins_with(sk, :p)",
            "ExpressionAttributeValues": to_values({":c": customer_id, ":p": prefix}),
        }
        while True:
            out = self._db.query(**kwargs)
            rows.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return rows
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def list_invoices(self, customer_id: int) -> list[dict[str, Any]]:
        return self.query_prefix(customer_id, "INVOICE#")

    def refund_requests(self, customer_id: int, conversation_id: str) -> list[dict[str, Any]]:
        return self.query_prefix(customer_id, f"REFUND#{conversation_id}#")

    def put(self, values: dict[str, Any]) -> None:
        self._db.put_item(TableName=self.table, Item=to_item(values))
