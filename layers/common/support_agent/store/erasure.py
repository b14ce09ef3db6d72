"""Erasure of a customer's conversations: tombstones in place, the audit trail untouched.

Why tombstones (UpdateItem) rather than DeleteItem: no role in the stack holds DeleteItem (the
template test forbids it), the header's sequence and token totals stay true, and the history stays
a valid Messages API sequence, so the customer can keep using the conversation. Text becomes
``[erased]``, tool inputs ``{}``, tool results ``[erased]``; block types, ids and order are kept,
so every ``tool_use`` is still answered. Thinking blocks are dropped (their signatures would no
longer match). Audit rows are never touched (the writing roles cannot); one ``customer_erased``
row records who erased what and when.

Each conversation is erased under its turn lease, so a turn in progress is never erased
underneath (it is skipped and reported; calling again finishes the job — erasure is idempotent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import boto3
from botocore.exceptions import ClientError

from support_agent.config import Settings
from support_agent.llm.base import Block
from support_agent.store.audit import AuditRecord
from support_agent.store.conversations import ConversationStore
from support_agent.store.dynamo import DynamoDBClient, dumps, from_item, is_conditional_failure, to_item, to_values

ERASED = "[erased]"
ACTION = "customer_erased"
TRANSACTION_ITEMS = 100  # DynamoDB's TransactWriteItems limit


def tombstone_block(block: Block) -> Block | None:
    """The block with its content erased and its structure (type, ids) kept; None drops it."""
    kind = block.get("type")
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}}
    if kind == "tool_result":
        out: Block = {"type": "tool_result", "tool_use_id": block.get("tool_use_id"), "content": ERASED}
        if "is_error" in block:
            out["is_error"] = block["is_error"]
        return out
    if kind in ("thinking", "redacted_thinking"):
        return None
    return {"type": "text", "text": ERASED}


def tombstone(content: list[Block]) -> list[Block]:
    kept = [b for b in (tombstone_block(b) for b in content if isinstance(b, dict)) if b is not None]
    return kept or [{"type": "text", "text": ERASED}]


@dataclass(frozen=True)
class ErasureReport:
    customer_id: int
    conversations: int
    messages: int
    skipped: list[str]
    audit_event_id: str

    @property
    def complete(self) -> bool:
        return not self.skipped


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ConversationEraser:
    def __init__(
        self,
        client: DynamoDBClient,
        conversations_table: str,
        audit_table: str,
        clock: Callable[[], float],
        now: Callable[[], str],
        lease_seconds: int = 40,
    ) -> None:
        self._db = client
        self._table = conversations_table
        self._audit = audit_table
        self._clock = clock
        self._now = now
        self._lease_seconds = lease_seconds

    def erase_customer(self, customer_id: int, actor: str, request_id: str, reason: str | None = None) -> ErasureReport:
        erased = messages = 0
        skipped: list[str] = []
        owner = f"erasure:{request_id}"
        for conversation_id in self._conversation_ids(customer_id):
            if not self._lease(conversation_id, customer_id, owner):
                skipped.append(conversation_id)
                continue
            try:
                messages += self._tombstone_messages(conversation_id)
                erased += 1
            finally:
                self._finish(conversation_id, owner)
        record = AuditRecord(
            stream=f"customer#{customer_id}",
            action=ACTION,
            actor=actor,
            outcome="erased" if not skipped else "partial",
            customer_id=customer_id,
            created_at=self._now(),
            input={"reason": reason} if reason else None,
            output={"conversations": erased, "messages": messages, "skipped": skipped},
            request_id=request_id,
        )
        self._db.put_item(**record.put(self._audit)["Put"])
        return ErasureReport(customer_id, erased, messages, skipped, record.event_id)

    def _conversation_ids(self, customer_id: int) -> list[str]:
        """Every conversation header of the customer (the by_customer index holds headers only)."""
        ids: list[str] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "by_customer",
            "KeyConditionExpression": "customer_id = :c",
            "ExpressionAttributeValues": to_values({":c": customer_id}),
        }
        while True:
            out = self._db.query(**kwargs)
            ids.extend(str(from_item(i)["conversation_id"]) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return sorted(set(ids))
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def _key(self, conversation_id: str, seq: int = 0) -> dict[str, Any]:
        return to_item({"conversation_id": conversation_id, "seq": seq})

    def _lease(self, conversation_id: str, customer_id: int, owner: str) -> bool:
        """Take the turn lease as a chat turn would; False while a turn holds it."""
        now = int(self._clock())
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key(conversation_id),
                UpdateExpression="SET lease_owner = :owner, lease_expires_at = :until",
                ConditionExpression=(
                    "customer_id = :cid AND (attribute_not_exists(lease_owner) OR lease_expires_at < :now)"
                ),
                ExpressionAttributeValues=to_values(
                    {":owner": owner, ":until": now + self._lease_seconds, ":cid": customer_id, ":now": now}
                ),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return False
        return True

    def _tombstone_messages(self, conversation_id: str) -> int:
        """Replace each message's content, in transactions of up to 100, held to the lease we own."""
        updates: list[dict[str, Any]] = []
        for message in ConversationStore(self._db, self._table).load(conversation_id):
            erased = tombstone(message.content)
            if erased == message.content:
                continue  # erased before
            updates.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": self._key(conversation_id, message.seq),
                        "UpdateExpression": "SET content = :content, erased_at = :now",
                        "ConditionExpression": "attribute_exists(seq)",
                        "ExpressionAttributeValues": to_values({":content": dumps(erased), ":now": self._now()}),
                    }
                }
            )
        for start in range(0, len(updates), TRANSACTION_ITEMS):
            self._db.transact_write_items(TransactItems=updates[start : start + TRANSACTION_ITEMS])  # type: ignore[arg-type]
        return len(updates)

    def _finish(self, conversation_id: str, owner: str) -> None:
        """Drop the header's title (it quotes the first message), mark it erased, release the lease."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key(conversation_id),
                UpdateExpression="SET erased_at = :now REMOVE title, lease_owner, lease_expires_at",
                ConditionExpression="lease_owner = :owner",
                ExpressionAttributeValues=to_values({":now": self._now(), ":owner": owner}),
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise


@lru_cache(maxsize=4)
def conversation_eraser(settings: Settings) -> ConversationEraser:
    """The process-wide eraser for these settings (built on first use, reused while warm)."""
    return ConversationEraser(
        boto3.client("dynamodb"),
        settings.conversations_table,
        settings.audit_table,
        time.time,
        utc_now,
        settings.lease_seconds,
    )
