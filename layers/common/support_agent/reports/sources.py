"""What a day's rollup is computed from, each read by a time-ordered index (no Scan).

* the outcome items that went quiet that day: ConversationsTable's sparse ``outcomes_by_day`` (hash ``quiet_day``);
* the refund ledger rows created that day: CustomerDataTable's ``ledger_by_created`` (``ledger = LEDGER``);
* the approvals and the hand-off tickets created that day: ApprovalsTable's ``by_created`` (``entity``).

Times are stored as ISO strings in UTC (clock.iso), so a day's are those that begin with ``YYYY-MM-DD``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from support_agent.refunds.ledger_row import LEDGER_INDEX, LEDGER_INDEX_KEY
from support_agent.store.approvals import ENTITY as APPROVAL_ENTITY
from support_agent.store.dynamo import DynamoDBClient, from_item, to_values
from support_agent.store.handoffs import ENTITY as HANDOFF_ENTITY

OUTCOMES_INDEX = "outcomes_by_day"
APPROVALS_INDEX = "by_created"


@dataclass(frozen=True)
class DayInputs:
    outcomes: list[dict[str, Any]]
    ledger_rows: list[dict[str, Any]]
    approvals: list[dict[str, Any]]
    handoffs: list[dict[str, Any]]


class DaySources:
    def __init__(
        self, client: DynamoDBClient, conversations_table: str, customer_data_table: str, approvals_table: str
    ) -> None:
        self._db = client
        self._conversations = conversations_table
        self._customer_data = customer_data_table
        self._approvals = approvals_table

    def _all(self, **query: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while True:
            out = self._db.query(**query)
            items.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return items
            query["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def _created_on(self, table: str, index: str, hash_name: str, hash_value: str, day: str) -> list[dict[str, Any]]:
        return self._all(
            TableName=table,
            IndexName=index,
            KeyConditionExpression="#h = :h AND begins_with(created_at, :day)",
            ExpressionAttributeNames={"#h": hash_name},
            ExpressionAttributeValues=to_values({":h": hash_value, ":day": day}),
        )

    def outcomes(self, day: str) -> list[dict[str, Any]]:
        return self._all(
            TableName=self._conversations,
            IndexName=OUTCOMES_INDEX,
            KeyConditionExpression="quiet_day = :day",
            ExpressionAttributeValues=to_values({":day": day}),
        )

    def day(self, day: str) -> DayInputs:
        """Everything the rollup of ``day`` (YYYY-MM-DD) reads: four Queries, each paged to its end."""
        return DayInputs(
            outcomes=self.outcomes(day),
            ledger_rows=self._created_on(self._customer_data, LEDGER_INDEX, "ledger", LEDGER_INDEX_KEY, day),
            approvals=self._created_on(self._approvals, APPROVALS_INDEX, "entity", APPROVAL_ENTITY, day),
            handoffs=self._created_on(self._approvals, APPROVALS_INDEX, "entity", HANDOFF_ENTITY, day),
        )
