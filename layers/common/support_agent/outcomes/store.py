"""The outcome item (``outcome#<conversation id>`` / 0 of the Conversations table) and the header's follow-up.

The item is put whole on each derivation; what the first derivation fixed stays (``quiet_at``, ``quiet_day``,
``derived_at``), a derivation that changed anything stamps ``revised_at``, and an erased customer's ratings stay 0
(``ratings_erased_at``, set by store/erasure.py). The put is conditioned on the item as read, so an erasure landing
in between is read again, never overwritten. The header's follow-up then says when to look again: never (final),
in an hour (something is pending), or never again, 7 days after the conversation went quiet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from botocore.exceptions import ClientError

from support_agent.clock import iso, parse_iso
from support_agent.outcomes.rules import Facts, HandoffFacts, Outcome
from support_agent.store.dynamo import DynamoDBClient, from_item, is_conditional_failure, to_item, to_values, update_if

DUE_INDEX = "outcomes_due"
BY_DAY_INDEX = "outcomes_by_day"
RECHECK_SECONDS = 3600  # a non-final outcome is derived again this often
RECHECK_FOR = timedelta(days=7)  # and for this long after the conversation went quiet
PUT_ATTEMPTS = 3
# What a later derivation compares to decide whether it revised the outcome (times of derivation aside).
_KEPT = ("conversation_id", "seq", "quiet_day", "quiet_at", "derived_at", "revised_at", "ratings_erased_at")
_RATINGS = ("thumbs_up", "thumbs_down", "score")


def outcome_key(conversation_id: str) -> dict[str, Any]:
    return {"conversation_id": f"outcome#{conversation_id}", "seq": 0}


@dataclass(frozen=True)
class Due:
    """A header whose outcome is due: its conversation and the check time the index showed."""

    conversation_id: str
    quiet_check_at: int


def figures(facts: Facts, outcome: Outcome) -> dict[str, Any]:
    """The outcome item's attributes from the facts: states, codes, counts and times, never a customer's words."""
    first: HandoffFacts | None = facts.handoffs[0] if facts.handoffs else None
    values = asdict(outcome) | {
        "turns": facts.turns,
        "input_tokens": facts.input_tokens,
        "output_tokens": facts.output_tokens,
        "model_cost_micros": facts.model_cost_micros,
        "aws_cost_micros": facts.aws_cost_micros,
        "thumbs_up": sum(1 for t in facts.thumbs.values() if t == "up"),
        "thumbs_down": sum(1 for t in facts.thumbs.values() if t == "down"),
        "score": facts.score,
        "actions": dict(facts.actions),
        "handoffs": len(facts.handoffs),
        "pending_approvals": facts.pending_approvals,
    }
    if first is not None:
        values |= {
            "handoff_opened_at": first.opened_at,
            "handoff_claimed_at": first.claimed_at,
            "handoff_closed_at": first.closed_at,
        }
    return values


class OutcomeStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table

    def get(self, conversation_id: str) -> dict[str, Any] | None:
        out = self._db.get_item(TableName=self._table, Key=to_item(outcome_key(conversation_id)), ConsistentRead=True)
        return from_item(out["Item"]) if out.get("Item") else None

    def due(self, now_epoch: int, limit: int) -> list[Due]:
        """Headers whose check time has come, earliest first (the sparse ``outcomes_due`` index; no Scan)."""
        query: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DUE_INDEX,
            "KeyConditionExpression": "outcome_due = :one AND quiet_check_at <= :now",
            "ExpressionAttributeValues": to_values({":one": "1", ":now": now_epoch}),
            "Limit": limit,
        }
        found: list[Due] = []
        while len(found) < limit:
            out = self._db.query(**query)
            found.extend(Due(str(i["conversation_id"]), int(i["quiet_check_at"])) for i in map(from_item, out["Items"]))
            if "LastEvaluatedKey" not in out:
                break
            query["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        return found[:limit]

    def put(self, conversation_id: str, derived: dict[str, Any], quiet_at: str, now: str) -> dict[str, Any]:
        """Store ``derived`` (`figures`) as the conversation's outcome at ``now``; the item as stored."""
        for _ in range(PUT_ATTEMPTS):
            before = self.get(conversation_id)
            item = _next(conversation_id, before, derived, quiet_at, now)
            if before is not None and _same(before, item):
                return before
            if self._put_if_unchanged(item, before):
                return item
        raise RuntimeError(f"the outcome of {conversation_id} kept changing under its derivation")

    def _put_if_unchanged(self, item: dict[str, Any], before: dict[str, Any] | None) -> bool:
        if before is None:
            condition, values = "attribute_not_exists(conversation_id)", {}
        elif "ratings_erased_at" in before:
            condition, values = "derived_at = :d AND ratings_erased_at = :e", {":e": before["ratings_erased_at"]}
        else:
            condition, values = "derived_at = :d AND attribute_not_exists(ratings_erased_at)", {}
        if before is not None:
            values[":d"] = before["derived_at"]
        put: dict[str, Any] = {"TableName": self._table, "Item": to_item(item), "ConditionExpression": condition}
        if values:
            put["ExpressionAttributeValues"] = to_values(values)
        return _put_item(self._db, put)

    def follow_up(self, conversation_id: str, read_check_at: int, final: bool, quiet_at: str, now: str) -> bool:
        """The header after a derivation: no more checks when ``final`` (or 7 days after ``quiet_at``), else one in
        an hour; ``outcome_at`` set the first time. Conditioned on the check time the sweep read: activity in
        between (a message, a rating's request) wins, and its own check comes. False when it did."""
        now_epoch = int(parse_iso(now).timestamp())
        next_check = now_epoch + RECHECK_SECONDS
        give_up = next_check > int((parse_iso(quiet_at) + RECHECK_FOR).timestamp())
        if final or give_up:
            update = "SET outcome_at = if_not_exists(outcome_at, :now) REMOVE outcome_due, quiet_check_at"
            values: dict[str, Any] = {":now": now}
        else:
            update = "SET outcome_at = if_not_exists(outcome_at, :now), quiet_check_at = :next"
            values = {":now": now, ":next": next_check}
        return self._header_update(conversation_id, read_check_at, update, values)

    def postpone(self, conversation_id: str, read_check_at: int, until_epoch: int) -> bool:
        """Look again at ``until_epoch`` (a turn still holds the conversation's lease)."""
        return self._header_update(conversation_id, read_check_at, "SET quiet_check_at = :next", {":next": until_epoch})

    def _header_update(self, conversation_id: str, read_check_at: int, update: str, values: dict[str, Any]) -> bool:
        return update_if(
            self._db,
            TableName=self._table,
            Key=to_item({"conversation_id": conversation_id, "seq": 0}),
            UpdateExpression=update,
            ConditionExpression="outcome_due = :one AND quiet_check_at = :read",
            ExpressionAttributeValues=to_values({":one": "1", ":read": read_check_at, **values}),
        )


def _put_item(db: DynamoDBClient, put: dict[str, Any]) -> bool:
    """One conditional PutItem; False when its condition did not hold."""
    try:
        db.put_item(**put)
    except ClientError as exc:
        if is_conditional_failure(exc):
            return False
        raise
    return True


def _next(
    conversation_id: str, before: dict[str, Any] | None, derived: dict[str, Any], quiet_at: str, now: str
) -> dict[str, Any]:
    """The item to store: ``derived`` on top of what the first derivation fixed."""
    first_quiet = str(before["quiet_at"]) if before else quiet_at
    item: dict[str, Any] = {
        **outcome_key(conversation_id),
        **{k: v for k, v in derived.items() if v is not None},
        "quiet_at": first_quiet,
        "quiet_day": first_quiet[:10],
        "derived_at": str(before["derived_at"]) if before else now,
    }
    if before and "ratings_erased_at" in before:
        item |= {"ratings_erased_at": before["ratings_erased_at"], **dict.fromkeys(_RATINGS, 0)}
    if before is not None:
        if not _same(before, item):
            item["revised_at"] = now
        elif "revised_at" in before:
            item["revised_at"] = before["revised_at"]
    return item


def _same(before: dict[str, Any], item: dict[str, Any]) -> bool:
    """The same outcome and figures (what the first derivation fixed, and when it was revised, aside)."""

    def compared(values: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in values.items() if k not in _KEPT}

    return compared(before) == compared(item)


def quiet_at_of(updated_at: str, quiet_seconds: int) -> str:
    """When the conversation went quiet: its last activity and the quiet time after it."""
    return iso(parse_iso(updated_at) + timedelta(seconds=quiet_seconds))
