"""The Audit table: append-only rows with server-generated, time-ordered keys.

Rows are only ever written as part of the transaction that does the audited thing, with
``attribute_not_exists`` so no row is overwritten; the writing roles hold PutItem and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from support_agent.ids import ulid
from support_agent.store.dynamo import DynamoDBClient, dumps, from_item, put_new, to_values

AUDIT_PAYLOAD_MAX_CHARS = 4000


def _clip(value: Any) -> str:
    text = dumps(value)
    return text if len(text) <= AUDIT_PAYLOAD_MAX_CHARS else text[:AUDIT_PAYLOAD_MAX_CHARS] + "…[truncated]"


@dataclass(frozen=True)
class AuditRecord:
    stream: str
    action: str
    actor: str
    outcome: str
    customer_id: int | None
    created_at: str
    tool: str | None = None
    input: Any = None
    output: Any = None
    conversation_id: str | None = None
    approval_id: str | None = None
    request_id: str | None = None
    tool_use_id: str | None = None
    event_id: str = field(default_factory=ulid)

    def put(self, table: str) -> dict[str, Any]:
        """The TransactWriteItems element that writes this row exactly once."""
        return put_new(
            table,
            {
                "stream": self.stream,
                "event_id": self.event_id,
                "action": self.action,
                "actor": self.actor,
                "outcome": self.outcome,
                "customer_id": self.customer_id,
                "created_at": self.created_at,
                "tool": self.tool,
                "input": None if self.input is None else _clip(self.input),
                "output": None if self.output is None else _clip(self.output),
                "conversation_id": self.conversation_id,
                "approval_id": self.approval_id,
                "request_id": self.request_id,
                "tool_use_id": self.tool_use_id,
            },
            "event_id",
        )


class AuditStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self.table = table

    def list_stream(self, stream: str) -> list[dict[str, Any]]:
        return self._query(
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "stream"},
            ExpressionAttributeValues=to_values({":s": stream}),
        )

    def list_customer(self, customer_id: int) -> list[dict[str, Any]]:
        return self._query(
            IndexName="by_customer",
            KeyConditionExpression="customer_id = :c",
            ExpressionAttributeValues=to_values({":c": customer_id}),
        )

    def conversation_trail(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's rows and those of the approvals raised in it, oldest first."""
        rows = self.list_stream(conversation_id)
        for approval_id in sorted({r["approval_id"] for r in rows if r.get("approval_id")}):
            rows.extend(self.list_stream(f"approval#{approval_id}"))
        return sorted(rows, key=lambda r: str(r["event_id"]))

    def page_customer(
        self, customer_id: int, start_key: dict[str, Any] | None = None, limit: int = 100
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_customer",
            "KeyConditionExpression": "customer_id = :c",
            "ExpressionAttributeValues": to_values({":c": customer_id}),
            "Limit": limit,
        }
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        out = self._db.query(**kwargs)
        return [from_item(i) for i in out.get("Items", [])], out.get("LastEvaluatedKey")

    def _query(self, **kwargs: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            out = self._db.query(TableName=self.table, **kwargs)
            rows.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return rows
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
