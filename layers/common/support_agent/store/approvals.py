"""The Approvals table: one item per refund that waits for a support lead."""

from __future__ import annotations

from typing import Any

from support_agent.store.dynamo import DynamoDBClient, from_item, to_item


class ApprovalStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self.table = table

    def get(self, approval_id: str) -> dict[str, Any] | None:
        out = self._db.get_item(TableName=self.table, Key=to_item({"approval_id": approval_id}), ConsistentRead=True)
        item = out.get("Item")
        return from_item(item) if item else None
