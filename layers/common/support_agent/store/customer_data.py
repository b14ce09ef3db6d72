"""The CustomerData table: orders, invoices, refund rows and proposals, all under the customer's partition.

Every read takes the customer id from the verified principal, so an order id guessed from another
account is simply not there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from support_agent.refunds.keys import requests_prefix
from support_agent.store.dynamo import DynamoDBClient, from_item, to_item, to_values
from support_agent.store.records import Record


@dataclass(frozen=True, kw_only=True)
class Order(Record):
    """An order (``ORDER#<id>``). Its money moves only by the conditional updates of refunds/requests.py,
    the refund ledger (refunds/ledger.py) and store/approvals.py: ``available + reserved + refunded = total``.
    Its status and address move only by a confirmed action (actions/cancel.py, actions/address.py): a cancelled
    order names the proposal that cancelled it (``cancelled_by``), which alone may refund it."""

    KIND: ClassVar[str] = "order"

    customer_id: int
    order_id: int
    status: str
    total_cents: int
    currency: str
    available_cents: int = 0
    reserved_cents: int = 0
    refunded_cents: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    placed_at: str = ""
    note: str = ""
    payment_intent: str = ""  # the card payment a refund goes back to (none: not refundable at a provider)
    sk: str = ""
    # Where it ships: name, line1, line2, city, region, postal_code, country (actions/address.py's model).
    shipping_address: dict[str, Any] | None = None
    cancelled_by: str | None = None  # the proposal that cancelled it (actions/cancel.py)


def order_key(customer_id: int, order_id: int) -> dict[str, Any]:
    return to_item({"customer_id": customer_id, "sk": f"ORDER#{order_id}"})


def status_in(statuses: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """A condition that an order's status (``#st``) is still one of ``statuses``, and its values: what a confirmed
    action's write is conditioned on (the proposal's terms, actions/)."""
    values = {f":s{i}": s for i, s in enumerate(statuses)}
    return f"#st IN ({', '.join(values)})", values


def order_move(
    table: str, customer_id: int, order_id: int, amount_cents: int, expression: str, source: str = "reserved_cents"
) -> dict[str, Any]:
    """A TransactWriteItems Update of an order moving ``amount_cents`` (``:a`` in ``expression``) out of its
    ``source`` field, conditioned on that field holding it: a reservation released, a refund made or failed."""
    return {
        "Update": {
            "TableName": table,
            "Key": order_key(customer_id, order_id),
            "UpdateExpression": expression,
            "ConditionExpression": f"{source} >= :a",
            "ExpressionAttributeValues": to_values({":a": amount_cents}),
        }
    }


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

    def get_order(self, customer_id: int, order_id: int) -> Order | None:
        item = self.get(customer_id, f"ORDER#{order_id}")
        return Order.from_item(item) if item is not None else None

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
        return self.query_prefix(customer_id, requests_prefix(conversation_id))

    def put(self, values: dict[str, Any]) -> None:
        self._db.put_item(TableName=self.table, Item=to_item(values))
