"""A DynamoDB client stand-in for unit tests of the write builders: canned reads, recorded writes.

It stores nothing and checks no condition: it exists to see exactly which TransactItems the code
builds (their number, their conditions), not what DynamoDB would make of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from support_agent.store.dynamo import from_item, to_item


def cancelled(codes: list[str]) -> ClientError:
    """The error DynamoDB raises when a transaction is cancelled, with its per-item reasons."""
    response: Any = {
        "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
        "CancellationReasons": [{"Code": c} for c in codes],
    }
    return ClientError(response, "TransactWriteItems")


@dataclass
class RecordingDynamo:
    """``items``: what get_item (and an update asking for ALL_NEW) answers, by table; ``queries``: what
    query answers, by index or table."""

    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    queries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    transactions: list[list[dict[str, Any]]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    puts: list[dict[str, Any]] = field(default_factory=list)
    fail: Callable[[list[dict[str, Any]]], ClientError | None] = lambda _items: None

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        item = self.items.get(kwargs["TableName"])
        return {"Item": to_item(item)} if item else {}

    def query(self, **kwargs: Any) -> dict[str, Any]:
        items = self.queries.get(kwargs.get("IndexName") or kwargs["TableName"], [])
        # The partition key's equality (``name = :value``, the first clause) is honoured: a canned item of
        # another partition (a conversation's messages, asked for its turn records) is not returned.
        first = str(kwargs.get("KeyConditionExpression", "")).split(" AND ")[0].split(" = ")
        values = kwargs.get("ExpressionAttributeValues") or {}
        if len(first) == 2 and first[0].strip() in {k for i in items for k in i} and first[1].strip() in values:
            name, wanted = first[0].strip(), from_item({"v": values[first[1].strip()]})["v"]
            items = [i for i in items if i.get(name) == wanted]
        return {"Items": [to_item(i) for i in items]}

    def update_item(self, **kwargs: Any) -> dict[str, Any]:
        self.updates.append(kwargs)
        item = self.items.get(kwargs["TableName"]) if kwargs.get("ReturnValues") == "ALL_NEW" else None
        return {"Attributes": to_item(item) if item else {}}

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        self.puts.append(kwargs)
        return {}

    def transact_write_items(self, **kwargs: Any) -> dict[str, Any]:
        items = list(kwargs["TransactItems"])
        error = self.fail(items)
        if error is not None:
            raise error
        self.transactions.append(items)
        return {}
