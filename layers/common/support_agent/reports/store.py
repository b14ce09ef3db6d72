"""The stored rollups: ``rollup#daily`` / ``seq = YYYYMMDD`` items of ConversationsTable, counts only.

Each run updates a day's ``figures`` (the whole DayRollup as a map) in place, so the flag that says its metrics went
out (``metrics_emitted_at``) survives the recomputations; claiming that flag is conditional, so a completed day's
metrics are emitted once however many runs see it. A range is one Query on the partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from support_agent.reports.rollup import DayRollup
from support_agent.store.dynamo import DynamoDBClient, from_item, to_item, to_values, update_if

PARTITION = "rollup#daily"


def seq_of(day: date) -> int:
    return int(day.strftime("%Y%m%d"))


def rollup_key(day: date) -> dict[str, Any]:
    return {"conversation_id": PARTITION, "seq": seq_of(day)}


@dataclass(frozen=True)
class StoredDay:
    rollup: DayRollup
    computed_at: str
    complete: bool


class RollupStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table

    def save(self, rollup: DayRollup, computed_at: str, complete: bool) -> None:
        self._db.update_item(
            TableName=self._table,
            Key=to_item(rollup_key(date.fromisoformat(rollup.day))),
            UpdateExpression="SET figures = :f, computed_at = :at, complete = :done",
            ExpressionAttributeValues=to_values({":f": rollup.model_dump(), ":at": computed_at, ":done": complete}),
        )

    def claim_metrics(self, day: date, now: str) -> bool:
        """True once per day, for the run that may emit a completed day's metrics."""
        return update_if(
            self._db,
            TableName=self._table,
            Key=to_item(rollup_key(day)),
            UpdateExpression="SET metrics_emitted_at = :now",
            ConditionExpression="complete = :yes AND attribute_not_exists(metrics_emitted_at)",
            ExpressionAttributeValues=to_values({":now": now, ":yes": True}),
        )

    def between(self, first: date, last: date) -> list[StoredDay]:
        """The stored days from ``first`` to ``last`` inclusive, oldest first (days never computed are absent)."""
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "conversation_id = :p AND seq BETWEEN :a AND :b",
            "ExpressionAttributeValues": to_values({":p": PARTITION, ":a": seq_of(first), ":b": seq_of(last)}),
        }
        days: list[StoredDay] = []
        while True:
            out = self._db.query(**query)
            for item in (from_item(i) for i in out.get("Items", [])):
                days.append(StoredDay(DayRollup.model_validate(item["figures"]), item["computed_at"], item["complete"]))
            if "LastEvaluatedKey" not in out:
                return days
            query["ExclusiveStartKey"] = out["LastEvaluatedKey"]
