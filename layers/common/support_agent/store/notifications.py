"""Notifications: what writers other than the turn say about a conversation (its event feed's second source).

A lead's decision, a refund settling, the turn sweep failing a turn, a proposal made or decided: each is one item
``note#<conversation id>`` / ``seq`` = n (1, 2, …), numbered by a counter item of its own (``note#<conversation
id>`` / 0), never the conversation's header, so a notification never cancels a running turn's transaction. The
notification is written in the same transaction as the change it announces (the writer appends ``items`` to its
own), conditioned on the counter still holding the number read: notifications are committed in the order of
their numbers, which is what lets a reader's cursor stop at "n" and never miss one committed later with a
smaller number. A transaction cancelled by the counter alone (another notification won the number) is retried
with the counter read again (``transact``).

No item here carries ``customer_id`` or ``updated_at`` (``by_customer`` never lists them); the owner is the
conversation's. Erasure removes a notification's data with the conversation (``erasure_update``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from botocore.exceptions import ClientError

from support_agent.store.dynamo import (
    CONDITION_FAILED,
    DynamoDBClient,
    cancellation_codes,
    dumps,
    error_code,
    from_item,
    to_item,
    to_values,
)
from support_agent.store.records import Codec, Record, stored

NoteType = Literal[
    "approval.decided",
    "refund.settled",
    "turn.failed",
    # who answers changed (store/takeover.py)
    "handoff.opened",
    "handoff.assigned",
    "handoff.released",
    "handoff.closed",
    "handoff.returned_to_bot",
    # an action waiting for the customer's Confirm or Decline (store/proposals.py)
    "proposal.created",
    "proposal.confirmed",
    "proposal.declined",
    "proposal.expired",
]
ATTEMPTS = 8  # numbers lost to concurrent notifications before the writer gives up (and its own retry applies)


JSON = Codec(json.loads, dumps)


@dataclass(frozen=True, kw_only=True)
class Notification(Record):
    """One notification (the feed's stored event). ``data`` holds the event's own fields, camelCase as the feed
    shows them: ``approval.decided`` {approvalId, orderId, amountCents, status}; ``refund.settled`` {orderId,
    amountCents, status}; ``turn.failed`` {error: {code, message}} (statuses in the customers' vocabulary);
    ``handoff.assigned`` {handoffId, by: the person's display name}; the other ``handoff.*`` {handoffId};
    ``proposal.created`` {proposalId, action, orderId, summary, expiresAt, policyVersion}; ``proposal.confirmed``,
    ``proposal.declined``, ``proposal.expired`` {proposalId, action, orderId, status, outcome, policyVersion}."""

    KIND: ClassVar[str] = "notification"

    conversation_id: str = stored("conversation")  # the key's ``conversation_id`` is ``note#<id>``
    type: NoteType
    at: str
    data: dict[str, Any] = stored(codec=JSON, default_factory=dict)  # removed by erasure
    turn_id: str | None = None
    n: int = stored("seq", default=0)  # its number (the key's ``seq``), once stored


def partition(conversation_id: str) -> str:
    return f"note#{conversation_id}"


class NotificationStore:
    """``table`` empty: a writer that announces nowhere (a reader's ledger, a test of one store alone), whose
    `transact` writes the items alone."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table

    def count(self, conversation_id: str) -> int:
        """How many notifications the conversation has (its counter; 0 before the first)."""
        out = self._db.get_item(
            TableName=self._table,
            Key=to_item({"conversation_id": partition(conversation_id), "seq": 0}),
            ConsistentRead=True,
        )
        return int(from_item(out["Item"]).get("n", 0)) if "Item" in out else 0

    def items(self, note: Notification, count: int) -> list[dict[str, Any]]:
        """The two TransactWriteItems actions that store ``note`` as number ``count + 1``: the counter's move
        (conditioned on still being ``count``) first, then the notification itself."""
        key = partition(note.conversation_id)
        number = count + 1
        return [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"conversation_id": key, "seq": 0}),
                    "UpdateExpression": "SET n = :next",
                    "ConditionExpression": "(attribute_not_exists(n) AND :count = :zero) OR n = :count",
                    "ExpressionAttributeValues": to_values({":next": number, ":count": count, ":zero": 0}),
                }
            },
            {
                "Put": {
                    "TableName": self._table,
                    "Item": to_item({"conversation_id": key, **replace(note, n=number).item()}),
                    "ConditionExpression": "attribute_not_exists(conversation_id)",
                }
            },
        ]

    def transact(self, items: list[dict[str, Any]], note: Notification | None) -> None:
        """TransactWriteItems of ``items`` with ``note`` in the same transaction (or ``items`` alone when there is
        nothing to announce, or no table to announce in). Retried, counter read again, while the counter alone
        cancelled it; any other cancellation reaches the caller as it came (its own ``cancellation_as`` maps it)."""
        note = note if self._table else None
        for attempt in range(ATTEMPTS):
            extra = self.items(note, self.count(note.conversation_id)) if note is not None else []
            try:
                self._db.transact_write_items(TransactItems=[*items, *extra])  # type: ignore[list-item]
                return
            except ClientError as exc:
                if note is None or attempt == ATTEMPTS - 1 or not counter_only(exc, len(items)):
                    raise

    def since(self, conversation_id: str, after: int, limit: int = 100) -> list[Notification]:
        """The conversation's notifications numbered above ``after``, in order (one strongly consistent Query)."""
        out = self._db.query(
            TableName=self._table,
            KeyConditionExpression="conversation_id = :c AND seq > :after",
            ExpressionAttributeValues=to_values({":c": partition(conversation_id), ":after": max(after, 0)}),
            ConsistentRead=True,
            Limit=limit,
        )
        return [Notification.from_item(from_item(i)) for i in out.get("Items", [])]

    def of(self, conversation_id: str) -> list[Notification]:
        """Every notification of the conversation (erasure), page after page."""
        out: list[Notification] = []
        after = 0
        while page := self.since(conversation_id, after, 100):
            out.extend(page)
            after = page[-1].n
        return out

    def erasure_update(self, conversation_id: str, n: int, erased_at: str) -> dict[str, Any]:
        """The UpdateItem that removes a notification's data (erasure): its type, time and number stay."""
        return {
            "TableName": self._table,
            "Key": to_item({"conversation_id": partition(conversation_id), "seq": n}),
            "UpdateExpression": "SET erased_at = :now REMOVE #data",
            "ExpressionAttributeNames": {"#data": "data"},
            "ExpressionAttributeValues": to_values({":now": erased_at}),
        }


def counter_only(exc: ClientError, counter_index: int) -> bool:
    """A cancelled transaction that only lost the notification's number: the counter's condition failed (at
    ``counter_index``; the notification's own put after it fails too when the winner stored that number), and
    every item of the writer's own passed."""
    if error_code(exc) != "TransactionCanceledException":
        return False
    codes = cancellation_codes(exc)
    if len(codes) <= counter_index or codes[counter_index] != CONDITION_FAILED:
        return False
    passed = ("None", "")
    return all(code in passed for code in codes[:counter_index]) and all(
        code in (*passed, CONDITION_FAILED) for code in codes[counter_index + 1 :]
    )
