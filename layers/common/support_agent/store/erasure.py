"""Erasure of a customer's conversations: tombstones in place, the audit trail untouched.

Why tombstones (UpdateItem) rather than DeleteItem: no role in the stack holds DeleteItem (the
template test forbids it), the header's sequence and token totals stay true, and the history stays
a valid Messages API sequence, so the customer can keep using the conversation. Text becomes
``[erased]``, tool inputs ``{}``, tool results ``[erased]``; block types, ids and order are kept,
so every ``tool_use`` is still answered. Thinking blocks are dropped (their signatures would no
longer match). Audit rows are never touched (the writing roles cannot). A conversation's proposals lose their
input and summary (an address they would have set), its turn records and notifications their data, its ratings
their thumbs, score and comment, and its stored outcome its rating figures (zeroed, ``ratings_erased_at``).

Each conversation is erased under its lease, taken through ``ConversationStore`` as a turn takes
it, so a turn in progress is never erased underneath (``LeaseHeld``: it is skipped and reported;
calling again finishes the job — erasure is idempotent).
Tombstones are written in chunks, each one transaction with the header's lease check (renewing
it) and a ``conversation_erased`` audit row naming the lead, the request and the chunk's seqs: a
throttle or a crash between chunks leaves no tombstone without its row. One ``customer_erased``
row then sums up the call (``partial`` when something was skipped).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from support_agent.audit.chain import Head
from support_agent.errors import LeaseHeld
from support_agent.ids import ulid
from support_agent.messages import Block
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite
from support_agent.store.conversations import ConversationStore
from support_agent.store.dynamo import CONDITION_FAILED, DynamoDBClient, cancellation_as, to_item, to_values, update_if
from support_agent.store.notifications import NotificationStore
from support_agent.store.proposals import ProposalStore
from support_agent.store.ratings import RatingStore
from support_agent.store.turns import TurnStore

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
    run_id: str = field(default_factory=ulid)

    @property
    def owner(self) -> str:
        return f"erasure:{self.request_id}"

    def record(
        self, action: str, outcome: str, now: str, output: Any, conversation_id: str | None = None
    ) -> AuditRecord:
        """A row of the conversation's stream (under its lease), or else of this run's own ``erasure#<id>``."""
        return AuditRecord(
            stream=conversation_id or f"erasure#{self.run_id}",
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


@dataclass
class ConversationEraser:
    """Erases under the conversation store's own lease: the lease, its conditions and the key are the
    store's, so a turn and an erasure can never both hold a conversation."""

    client: DynamoDBClient
    conversations_table: str
    audit_table: str
    clock: Callable[[], float]  # epoch seconds, for the lease
    now: Callable[[], str]  # the ISO time stamped on tombstones and audit rows
    lease_seconds: int = 40
    # The CustomerData table, where a conversation's proposals are (their input and summary erased too); "": none.
    customer_data_table: str = ""
    store: ConversationStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = ConversationStore(self.client, self.conversations_table)

    def erase_customer(self, customer_id: int, actor: str, request_id: str, reason: str | None = None) -> ErasureReport:
        request = _Request(customer_id, actor, request_id, reason)
        erased = messages = 0
        skipped: list[str] = []
        for conversation_id in self.store.conversation_ids(customer_id):
            now = int(self.clock())
            try:
                header = self.store.acquire_lease(
                    conversation_id, customer_id, request.owner, now, now + self.lease_seconds
                )
            except LeaseHeld:  # a turn is in progress: not erased underneath it
                skipped.append(conversation_id)
                continue
            try:
                count = self._tombstone_messages(conversation_id, request, header.audit)
            except LeaseLost as lost:
                messages += lost.written
                skipped.append(conversation_id)
                continue
            except BaseException:
                # Unfinished: no erased_at on the header; the chunks written are audited, calling again resumes.
                with contextlib.suppress(ClientError):  # best effort: if this fails too, the lease expires
                    self.store.release_lease(conversation_id, request.owner)
                raise
            # Turn records hold the message and the answer's text: removed too, still under the lease.
            turns = TurnStore(self.client, self.conversations_table)
            for turn in turns.turns_of(conversation_id):
                self.client.update_item(**turns.erasure_update(turn, self.now()))
            # So do its notifications (orders and amounts of a lead's decision, a failed turn's error).
            notes = NotificationStore(self.client, self.conversations_table)
            for note in notes.of(conversation_id):
                self.client.update_item(**notes.erasure_update(conversation_id, note.n, self.now()))
            self._erase_proposals(customer_id, conversation_id)
            self._erase_ratings(conversation_id)
            # The header loses its title (it quotes the first message) and is marked erased as the lease goes.
            self.store.release_lease(conversation_id, request.owner, erased_at=self.now())
            messages += count
            erased += 1
        record = request.record(
            ACTION,
            "erased" if not skipped else "partial",
            self.now(),
            {"conversations": erased, "messages": messages, "skipped": skipped},
        )
        # The run's stream (``erasure#<run>``) and its record item: a key of the Conversations table that is no
        # conversation (no customer_id, no updated_at: the by_customer index never lists it), holding the head.
        write = AuditedWrite.of(self.audit_table, Head(), [record])
        items = write.update(
            self.conversations_table,
            {"conversation_id": record.stream, "seq": 0},
            ["erased_customer = :c", "created_at = :now"],
            values={":c": customer_id, ":now": record.created_at},
        )
        event_id = write.rows[0].event_id
        self.client.transact_write_items(TransactItems=items, ClientRequestToken=event_id)  # type: ignore[arg-type]
        return ErasureReport(customer_id, erased, messages, skipped, event_id)

    def _erase_proposals(self, customer_id: int, conversation_id: str) -> None:
        """A conversation's proposed actions lose what they would have changed (an address), still under the lease."""
        if not self.customer_data_table:
            return
        proposals = ProposalStore(self.client, self.customer_data_table, self.audit_table, self.conversations_table)
        for item in proposals.list(customer_id, conversation_id):
            if item.summary != ERASED:
                self.client.update_item(**proposals.erasure_update(item, ERASED, self.now()))

    def _erase_ratings(self, conversation_id: str) -> None:
        """The customer's thumbs, score and comment go, and so do the stored outcome's rating figures (later rollups
        count no rating of an erased customer); still under the lease. An outcome not stored yet is derived later,
        from the erased ratings."""
        now = self.now()
        RatingStore(self.client, self.conversations_table).erase(conversation_id, now)
        update_if(
            self.client,
            TableName=self.conversations_table,
            Key=to_item({"conversation_id": f"outcome#{conversation_id}", "seq": 0}),
            UpdateExpression="SET thumbs_up = :zero, thumbs_down = :zero, score = :zero, ratings_erased_at = :now",
            ConditionExpression="attribute_exists(conversation_id)",
            ExpressionAttributeValues=to_values({":zero": 0, ":now": now}),
        )

    def _chunk_items(
        self, conversation_id: str, request: _Request, chunk: list[tuple[int, list[Block]]], head: Head
    ) -> tuple[list[dict[str, Any]], AuditRecord, Head]:
        """One chunk's TransactItems: its tombstones, the header (still our lease: renewed, the audit head
        advanced), its audit row on the conversation's stream."""
        now = self.now()
        items = [self.store.content_replacement(conversation_id, seq, content, now) for seq, content in chunk]
        seqs = [seq for seq, _ in chunk]
        record = request.record(
            CONVERSATION_ACTION, "erased", now, {"messages": len(seqs), "seqs": seqs}, conversation_id
        )
        write = AuditedWrite.of(self.audit_table, head, [record])
        until = int(self.clock()) + self.lease_seconds
        items.extend(self.store.lease_renewal(conversation_id, request.owner, until, write, drop_title=True))
        return items, write.rows[0], write.head

    def _tombstone_messages(self, conversation_id: str, request: _Request, head: Head) -> int:
        """Tombstone what is not yet erased, chunk by chunk, each chunk audited in its own transaction."""
        pending = [
            (m.seq, erased)
            for m in self.store.load(conversation_id)
            if (erased := tombstone(m.content)) != m.content  # unchanged: erased before
        ]
        for start in range(0, len(pending), CHUNK_MESSAGES):
            chunk = pending[start : start + CHUNK_MESSAGES]
            items, record, head = self._chunk_items(conversation_id, request, chunk, head)

            def lease_lost(codes: list[str], header: int = len(chunk), written: int = start) -> LeaseLost | None:
                # The header's lease check is the item after the tombstones.
                return LeaseLost(written) if codes[header : header + 1] == [CONDITION_FAILED] else None

            with cancellation_as(lease_lost):
                # The token makes botocore's retry of a lost answer a no-op, not a duplicate-row cancel.
                self.client.transact_write_items(TransactItems=items, ClientRequestToken=record.event_id)  # type: ignore[arg-type]
        return len(pending)
