"""Customer ratings: a thumb per answered turn and one closing score, in the Conversations table.

Items ``rating#<conversation id>``: a thumb at ``seq`` = the turn id's millisecond (``turns.turn_ms``), so a
resent or changed vote is one PutItem over the same item (the last one wins); the closing rating at ``seq`` 0.
One Query of the partition reads both. Neither carries ``customer_id`` or ``updated_at``, so ``by_customer``
never lists them. Erasure REMOVEs the thumb, score and comment and sets ``erased_at`` (no role holds
DeleteItem); an item without a thumb or a score counts for nothing.

A rating that arrives after the conversation's outcome was stored asks for the outcome again
(``request_revision``): the header's ``outcome_due`` and ``quiet_check_at`` are set only when it has
``outcome_at``; otherwise the conversation's pending check reads the rating anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from support_agent.store.dynamo import DynamoDBClient, from_item, to_item, to_values, update_if
from support_agent.store.records import Record, optional
from support_agent.store.turns import turn_ms

PREFIX = "rating#"
CLOSING_SEQ = 0
COMMENT_MAX_CHARS = 500
Thumb = Literal["up", "down"]


def partition(conversation_id: str) -> str:
    return f"rating#{conversation_id}"


@dataclass(frozen=True, kw_only=True)
class ThumbRating(Record):
    """The customer's thumb on one answer; ``thumb`` None once erased."""

    KIND: ClassVar[str] = "thumb rating"

    turn_id: str
    thumb: Thumb | None = None
    rated_at: str
    erased_at: str = optional("")


@dataclass(frozen=True, kw_only=True)
class Closing(Record):
    """The customer's closing rating of the conversation: a score 1..5 and an optional short comment."""

    KIND: ClassVar[str] = "closing rating"

    score: int | None = None
    comment: str = optional("")
    rated_at: str
    erased_at: str = optional("")


@dataclass(frozen=True)
class Ratings:
    """A conversation's ratings as they count: erased ones left out."""

    thumbs: dict[str, str] = field(default_factory=dict)  # turn id -> "up" | "down"
    closing: Closing | None = None


class RatingStore:
    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table

    # -- reads -------------------------------------------------------------------------------------

    def _items(self, conversation_id: str) -> list[dict[str, Any]]:
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "conversation_id = :p",
            "ExpressionAttributeValues": to_values({":p": partition(conversation_id)}),
            "ConsistentRead": True,
        }
        items: list[dict[str, Any]] = []
        while True:
            out = self._db.query(**query)
            items.extend(from_item(i) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return items
            query["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def ratings(self, conversation_id: str) -> Ratings:
        thumbs: dict[str, str] = {}
        closing = None
        for item in self._items(conversation_id):
            if int(item["seq"]) == CLOSING_SEQ:
                found = Closing.from_item(item)
                closing = found if found.score is not None else None
            else:
                thumb = ThumbRating.from_item(item)
                if thumb.thumb is not None:
                    thumbs[thumb.turn_id] = thumb.thumb
        return Ratings(thumbs, closing)

    def thumbs(self, conversation_id: str) -> dict[str, str]:
        return self.ratings(conversation_id).thumbs

    def closing(self, conversation_id: str) -> Closing | None:
        return self.ratings(conversation_id).closing

    # -- writes ------------------------------------------------------------------------------------

    def _put(self, conversation_id: str, seq: int, record: Record) -> None:
        key = {"conversation_id": partition(conversation_id), "seq": seq}
        self._db.put_item(TableName=self._table, Item=to_item({**record.item(), **key}))

    def put_thumb(self, conversation_id: str, turn_id: str, thumb: Thumb, now: str) -> ThumbRating:
        """The thumb on the turn's answer: the same vote again leaves one item, a changed one replaces it."""
        record = ThumbRating(turn_id=turn_id, thumb=thumb, rated_at=now)
        self._put(conversation_id, turn_ms(turn_id), record)
        return record

    def put_closing(self, conversation_id: str, score: int, comment: str, now: str) -> Closing:
        """The closing rating (the last one wins); ``comment`` stripped, empty when none."""
        comment = comment.strip()
        if not 1 <= score <= 5 or len(comment) > COMMENT_MAX_CHARS:
            raise ValueError("a closing rating is a score 1..5 and a comment of at most 500 characters")
        record = Closing(score=score, comment=comment, rated_at=now)
        self._put(conversation_id, CLOSING_SEQ, record)
        return record

    def erasure_updates(self, conversation_id: str, now: str) -> list[dict[str, Any]]:
        """One UpdateItem per rating item still holding something: the thumb, score and comment removed."""
        return [
            {
                "TableName": self._table,
                "Key": to_item({"conversation_id": item["conversation_id"], "seq": int(item["seq"])}),
                "UpdateExpression": "SET erased_at = :now REMOVE thumb, score, #comment",
                "ExpressionAttributeNames": {"#comment": "comment"},
                "ExpressionAttributeValues": to_values({":now": now}),
            }
            for item in self._items(conversation_id)
            if any(k in item for k in ("thumb", "score", "comment"))
        ]

    def erase(self, conversation_id: str, now: str) -> int:
        """Erase the conversation's ratings; returns how many items held one (0 on a second call)."""
        updates = self.erasure_updates(conversation_id, now)
        for update in updates:
            self._db.update_item(**update)
        return len(updates)

    def request_revision(self, conversation_id: str, now_epoch: int) -> bool:
        """Ask for the conversation's outcome again, when one was stored already (the header has ``outcome_at``);
        False (nothing written) while none was: the pending check reads the rating anyway."""
        return update_if(
            self._db,
            TableName=self._table,
            Key=to_item({"conversation_id": conversation_id, "seq": 0}),
            UpdateExpression="SET outcome_due = :one, quiet_check_at = :now",
            ConditionExpression="attribute_exists(outcome_at)",
            ExpressionAttributeValues=to_values({":one": "1", ":now": now_epoch}),
        )
