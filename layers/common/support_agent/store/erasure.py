"""Erasure of a customer's conversations: tombstones in place, the audit trail untouched.

Why tombstones (UpdateItem) rather than DeleteItem: no role in the stack holds DeleteItem (the
template test forbids it), the header's sequence and token totals stay true, and the history stays
a valid Messages API sequence, so the customer can keep using the conversation. Text becomes
``[erased]``, tool inputs ``{}``, tool results ``[erased]``; block types, ids and order are kept,
so every ``tool_use`` is still answered. Thinking blocks are dropped (their signatures would no
longer match). Audit rows are never touched (the writing roles cannot).

Each conversation is erased under its turn lease, so a turn in progress is never erased
underneath (it is skipped and reported; calling again finishes the job — erasure is idempotent).
Tombstones are written in chunks, each one transaction with the header's lease check (renewing
it) and a ``conversation_erased`` audit row naming the lead, the request and the chunk's seqs: a
throttle or a crash between chunks leaves no tombstone without its row. One ``customer_erased``
row then sums up the call (``partial`` when something was skipped).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import boto3
from botocore.exceptions import ClientError

from support_agent.config import Settings
from support_agent.messages import Block
from support_agent.store.audit import AuditRecord
from support_agent.store.conversations import ConversationStore
from support_agent.store.dynamo import (
    DynamoDBClient,
    cancellation_codes,
    dumps,
    error_code,
    from_item,
    is_conditional_failure,
    to_item,
    to_values,
)

ERASED = "[erased]"
ACTION = "customer_erased"
CONVERSATION_ACTION = "conversation_erased"
TRANSACTION_ITEMS = 100  # DynamoDB's TransactWriteItems limit
# Each chunk's transaction also carries the header's lease update and the chunk's audit row.
CHUNK_MESSAGES = TRANSACTION_ITEMS - 2


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


@dataclass(frozen=True)
class _Request:
    """Who erases whose conversations, and why: what every audit row of the call names."""

    customer_id: int
    actor: str
    request_id: str
    reason: str | None

    @property
    def owner(self) -> str:
        return f"erasure:{self.request_id}"

    def record(
        self, action: str, outcome: str, now: str, output: Any, conversation_id: str | None = None
    ) -> AuditRecord:
        return AuditRecord(
            stream=conversation_id or f"customer#{self.customer_id}",
            action=action,
            actor=self.actor,
            outcome=outcome,
            customer_id=self.customer_id,
            created_at=now,
            input={"reason": self.reason} if self.reason else None,
            output=output,
            conversation_id=conversation_id,
            request_id=self.request_id,
        )


class LeaseLost(Exception):
    """A turn took the conversation's lease mid-erasure (ours expired); ``written`` tombstones were stored."""

    def __init__(self, written: int) -> None:
        super().__init__("erasure lease lost")
        self.written = written


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
        request = _Request(customer_id, actor, request_id, reason)
        erased = messages = 0
        skipped: list[str] = []
        for conversation_id in self._conversation_ids(customer_id):
            if not self._lease(conversation_id, customer_id, request.owner):
                skipped.append(conversation_id)
                continue
            try:
                count = self._tombstone_messages(conversation_id, request)
            except LeaseLost as lost:
                messages += lost.written
                skipped.append(conversation_id)
                continue
            except BaseException:
                # Unfinished: no erased_at on the header; the chunks written are audited, calling again resumes.
                self._release(conversation_id, request.owner)
                raise
            self._finish(conversation_id, request.owner)
            messages += count
            erased += 1
        record = request.record(
            ACTION,
            "erased" if not skipped else "partial",
            self._now(),
            {"conversations": erased, "messages": messages, "skipped": skipped},
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

    def _chunk_items(
        self, conversation_id: str, request: _Request, chunk: list[tuple[int, list[Block]]]
    ) -> tuple[list[dict[str, Any]], AuditRecord]:
        """One chunk's TransactItems: its tombstones, the header (still our lease: renewed), its audit row."""
        now = self._now()
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": self._key(conversation_id, seq),
                    "UpdateExpression": "SET content = :content, erased_at = :now",
                    "ConditionExpression": "attribute_exists(seq)",
                    "ExpressionAttributeValues": to_values({":content": dumps(content), ":now": now}),
                }
            }
            for seq, content in chunk
        ]
        items.append(
            {
                "Update": {
                    "TableName": self._table,
                    "Key": self._key(conversation_id),
                    "UpdateExpression": "SET lease_expires_at = :until REMOVE title",
                    "ConditionExpression": "lease_owner = :owner",
                    "ExpressionAttributeValues": to_values(
                        {":owner": request.owner, ":until": int(self._clock()) + self._lease_seconds}
                    ),
                }
            }
        )
        seqs = [seq for seq, _ in chunk]
        record = request.record(
            CONVERSATION_ACTION, "erased", now, {"messages": len(seqs), "seqs": seqs}, conversation_id
        )
        items.append(record.put(self._audit))
        return items, record

    def _tombstone_messages(self, conversation_id: str, request: _Request) -> int:
        """Tombstone what is not yet erased, chunk by chunk, each chunk audited in its own transaction."""
        pending = [
            (m.seq, erased)
            for m in ConversationStore(self._db, self._table).load(conversation_id)
            if (erased := tombstone(m.content)) != m.content  # unchanged: erased before
        ]
        for start in range(0, len(pending), CHUNK_MESSAGES):
            chunk = pending[start : start + CHUNK_MESSAGES]
            items, record = self._chunk_items(conversation_id, request, chunk)
            try:
                # The token makes botocore's retry of a lost answer a no-op, not a duplicate-row cancel.
                self._db.transact_write_items(TransactItems=items, ClientRequestToken=record.event_id)  # type: ignore[arg-type]
            except ClientError as exc:
                header = cancellation_codes(exc)[len(chunk) : len(chunk) + 1]  # the item after the tombstones
                if error_code(exc) == "TransactionCanceledException" and header == ["ConditionalCheckFailed"]:
                    raise LeaseLost(start) from None
                raise
        return len(pending)

    def _release(self, conversation_id: str, owner: str) -> None:
        """Best effort: if this fails too, the lease simply expires."""
        with contextlib.suppress(ClientError):
            self._db.update_item(
                TableName=self._table,
                Key=self._key(conversation_id),
                UpdateExpression="REMOVE lease_owner, lease_expires_at",
                ConditionExpression="lease_owner = :owner",
                ExpressionAttributeValues=to_values({":owner": owner}),
            )

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
