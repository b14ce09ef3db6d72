"""The Conversations table: a header item (seq 0) and one item per stored message.

The header carries the owner, the lease that serialises writers (a turn, or an erasure), the next
sequence number and the token totals. Every append is one TransactWriteItems conditioned on holding
the lease and on the expected sequence, so two writers can never interleave and a lost lease is
noticed at once. The lease's conditions live here only: whoever writes under it uses these methods.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from support_agent.audit.chain import Head
from support_agent.clock import parse_iso
from support_agent.errors import Conflict, LeaseHeld, NotFound
from support_agent.messages import Block, Message, Usage
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite
from support_agent.store.dynamo import (
    DynamoDBClient,
    cancellation_as,
    dumps,
    from_item,
    is_conditional_failure,
    put_new,
    to_item,
    to_values,
    update_if,
)

LEASE_FREE = "(attribute_not_exists(lease_owner) OR lease_expires_at < :now)"
"""The lease may be taken: nobody holds it, or its holder's time (``:now``, epoch seconds) ran out."""
LEASE_HELD = "lease_owner = :owner"
"""The lease is ``:owner``'s: the condition of every write made under it."""
BOT_ANSWERS = "attribute_not_exists(answerer)"
"""No person answers the conversation (store/takeover.py): the condition of a turn's write-ahead, so a model's
answer that arrives after a claim is never stored."""
QUIET_SECONDS = 1800
"""How long a conversation stays without activity before its outcome is derived (OUTCOME_QUIET_MINUTES)."""


def quiet_marks(now: str, quiet_seconds: int) -> dict[str, Any]:
    """The header's marks of activity at ``now``: its outcome is due once it has been quiet for ``quiet_seconds``
    (the sparse ``outcomes_due`` index, docs/OUTCOMES.md). Every write that is activity sets them."""
    return {"outcome_due": "1", "quiet_check_at": int(parse_iso(now).timestamp()) + quiet_seconds}


@dataclass(frozen=True)
class Header:
    conversation_id: str
    customer_id: int
    created_at: str
    updated_at: str
    next_seq: int
    usage: Usage
    title: str = ""
    audit: Head = field(default_factory=Head)  # its audit stream head, advanced under the lease
    lease_owner: str = ""
    lease_expires_at: int = 0  # epoch seconds
    # Who answers (store/takeover.py): a hand-off open (queued or held) stops the bot; ``answerer`` is
    # ``person:<sub>`` while a person holds it. ``handback_note``: what the last person to hand back told the bot.
    open_handoff_id: str | None = None
    answerer: str | None = None
    handback_note: str | None = None
    handback_by: str | None = None
    # Its outcome (docs/OUTCOMES.md): every hand-off it ever had, when its outcome is next checked (epoch seconds,
    # 0 when none is due) and when one was first stored.
    handoff_ids: tuple[str, ...] = ()
    quiet_check_at: int = 0
    outcome_at: str | None = None


@dataclass(frozen=True)
class StoredMessage:
    seq: int
    role: str  # user, assistant, or person (a support teammate's reply: store/takeover.py)
    content: list[dict[str, Any]]
    created_at: str
    turn_id: str | None = None  # the turn that stored it (the event feed's attribution); None before turns had ids
    author: str | None = None  # a person's message: their sub, and the name the customer is shown
    author_name: str | None = None

    def as_message(self) -> Message:
        return {"role": self.role, "content": self.content}


def _header(values: dict[str, Any]) -> Header:
    return Header(
        conversation_id=values["conversation_id"],
        customer_id=int(values["customer_id"]),
        created_at=values.get("created_at", ""),
        updated_at=values.get("updated_at", ""),
        next_seq=int(values.get("next_seq", 1)),
        usage=Usage(
            int(values.get("input_tokens", 0)),
            int(values.get("output_tokens", 0)),
            int(values.get("cache_read_input_tokens", 0)),
            int(values.get("cache_creation_input_tokens", 0)),
        ),
        title=values.get("title", ""),
        audit=Head.of(values),
        lease_owner=str(values.get("lease_owner") or ""),
        lease_expires_at=int(values.get("lease_expires_at") or 0),
        open_handoff_id=values.get("open_handoff_id"),
        answerer=values.get("answerer"),
        handback_note=values.get("handback_note"),
        handback_by=values.get("handback_by"),
        handoff_ids=tuple(sorted(values.get("handoff_ids") or ())),
        quiet_check_at=int(values.get("quiet_check_at") or 0) if values.get("outcome_due") else 0,
        outcome_at=values.get("outcome_at"),
    )


class ConversationStore:
    def __init__(
        self, client: DynamoDBClient, table: str, audit_table: str = "", quiet_seconds: int = QUIET_SECONDS
    ) -> None:
        self._db = client
        self._table = table
        self._audit_table = audit_table  # where `append`'s audit rows go
        self._quiet_seconds = quiet_seconds  # a stored message marks the conversation active (`quiet_marks`)

    def _key(self, conversation_id: str, seq: int = 0) -> dict[str, Any]:
        return to_item(self._plain_key(conversation_id, seq))

    @staticmethod
    def _plain_key(conversation_id: str, seq: int = 0) -> dict[str, Any]:
        return {"conversation_id": conversation_id, "seq": seq}

    @staticmethod
    def new_header(conversation_id: str, customer_id: int, now: str) -> Header:
        """A conversation not stored yet: its header is written with its first messages (see append)."""
        return Header(conversation_id, customer_id, now, now, 1, Usage())

    # -- the lease: one writer at a time (a turn, or an erasure), named by its owner ---------------

    def acquire_lease(
        self, conversation_id: str, customer_id: int, owner: str, now_epoch: int, lease_until: int
    ) -> Header:
        """Take the lease for ``owner`` until ``lease_until`` (epoch seconds); the header as it now stands.

        NotFound when the conversation is missing or someone else's (the same answer, so ids cannot be
        probed); LeaseHeld while another owner's lease has not expired.
        """
        try:
            out = self._db.update_item(
                TableName=self._table,
                Key=self._key(conversation_id),
                UpdateExpression="SET lease_owner = :owner, lease_expires_at = :until",
                ConditionExpression=f"attribute_exists(conversation_id) AND customer_id = :cid AND {LEASE_FREE}",
                ExpressionAttributeValues=to_values(
                    {":owner": owner, ":until": lease_until, ":cid": customer_id, ":now": now_epoch}
                ),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            old = from_item(exc.response.get("Item") or {})  # type: ignore[arg-type]
            if not old or int(old.get("customer_id", -1)) != customer_id:
                raise NotFound("conversation not found") from None
            raise LeaseHeld("another turn is in progress on this conversation") from None
        return _header(from_item(out["Attributes"]))

    def lease_renewal(
        self, conversation_id: str, owner: str, lease_until: int, audit: AuditedWrite, *, drop_title: bool = False
    ) -> list[dict[str, Any]]:
        """TransactWriteItems actions extending ``owner``'s lease with ``audit``'s rows on the conversation's
        stream (its head advanced): the caller's transaction fails unless the lease is still theirs. The header's
        update comes first, then the rows. ``drop_title`` removes the header's title too (it quotes the first
        message)."""
        return audit.update(
            self._table,
            self._plain_key(conversation_id),
            ["lease_expires_at = :until"],
            LEASE_HELD,
            {":owner": owner, ":until": lease_until},
            then="REMOVE title" if drop_title else "",
        )

    def lease_check(self, conversation_id: str, owner: str, now_epoch: int) -> dict[str, Any]:
        """A TransactWriteItems ConditionCheck that ``owner`` still holds the lease, unexpired at ``now_epoch``: the
        fence every money write of a turn carries, so a turn whose lease lapsed or was taken over (its tool calls
        repaired as "not executed" by the next turn) cannot still move money."""
        return {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": self._key(conversation_id),
                "ConditionExpression": f"{LEASE_HELD} AND lease_expires_at > :now",
                "ExpressionAttributeValues": to_values({":owner": owner, ":now": now_epoch}),
            }
        }

    def pass_lease(self, conversation_id: str, owner: str, to: str, lease_until: int) -> None:
        """Hand ``owner``'s lease to ``to`` (a turn handed to the worker); Conflict if it is no longer ours."""
        update = "SET lease_owner = :to, lease_expires_at = :until"
        if not update_if(self._db, **self._held(conversation_id, owner, update, {":to": to, ":until": lease_until})):
            raise Conflict("the conversation's lease was lost before the hand-over")

    def renew_lease(self, conversation_id: str, owner: str, lease_until: int) -> bool:
        """Extend ``owner``'s lease (the worker, while a model call runs); False once it is someone else's."""
        update = "SET lease_expires_at = :until"
        return update_if(self._db, **self._held(conversation_id, owner, update, {":until": lease_until}))

    def release_lease(self, conversation_id: str, owner: str, *, erased_at: str | None = None) -> None:
        """Give the lease up, if it is still ``owner``'s. With ``erased_at`` the header is marked erased and
        loses its title in the same write."""
        update, values = "REMOVE lease_owner, lease_expires_at", {}
        if erased_at is not None:
            update = "SET erased_at = :now REMOVE title, handback_note, lease_owner, lease_expires_at"
            values = {":now": erased_at}
        update_if(self._db, **self._held(conversation_id, owner, update, values))  # no longer ours: nothing to do

    def _held(self, conversation_id: str, owner: str, update: str, values: dict[str, Any]) -> dict[str, Any]:
        """An update of the header that applies only while ``owner`` holds the lease."""
        return {
            "TableName": self._table,
            "Key": self._key(conversation_id),
            "UpdateExpression": update,
            "ConditionExpression": LEASE_HELD,
            "ExpressionAttributeValues": to_values({":owner": owner, **values}),
        }

    def content_replacement(
        self, conversation_id: str, seq: int, content: list[Block], erased_at: str
    ) -> dict[str, Any]:
        """A TransactWriteItems action replacing a stored message's content (erasure's tombstone)."""
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(conversation_id, seq),
                "UpdateExpression": "SET content = :content, erased_at = :now",
                "ConditionExpression": "attribute_exists(seq)",
                "ExpressionAttributeValues": to_values({":content": dumps(content), ":now": erased_at}),
            }
        }

    def answerer(self, conversation_id: str) -> str | None:
        """Who answers now, read strongly: None for the bot, ``person:<sub>`` while a person holds the hand-off (the
        loop asks before every model call: a claim may have landed since the turn began)."""
        out = self._db.get_item(
            TableName=self._table,
            Key=self._key(conversation_id),
            ConsistentRead=True,
            ProjectionExpression="answerer",
        )
        return from_item(out.get("Item") or {}).get("answerer")

    def get_header(self, conversation_id: str) -> Header | None:
        out = self._db.get_item(TableName=self._table, Key=self._key(conversation_id), ConsistentRead=True)
        item = out.get("Item")
        return _header(from_item(item)) if item else None

    def load(self, conversation_id: str, from_seq: int = 1) -> list[StoredMessage]:
        """All messages in order (from ``from_seq``): one strongly consistent query, paginated only when long."""
        query = {
            "TableName": self._table,
            "KeyConditionExpression": "conversation_id = :c AND seq >= :from",
            "ExpressionAttributeValues": to_values({":c": conversation_id, ":from": max(from_seq, 1)}),
            "ConsistentRead": True,
        }
        return [
            StoredMessage(
                seq=int(item["seq"]),
                role=item["role"],
                content=json.loads(item["content"]),
                created_at=item.get("created_at", ""),
                turn_id=item.get("turn_id"),
                author=item.get("author"),
                author_name=item.get("author_name"),
            )
            for item in self._every_item(query)
        ]

    def _every_item(self, query: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """What ``query`` matches, page after page."""
        while True:
            out = self._db.query(**query)
            yield from (from_item(raw) for raw in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return
            query = {**query, "ExclusiveStartKey": out["LastEvaluatedKey"]}

    def append(
        self,
        conversation_id: str,
        owner: str,
        expected_seq: int,
        messages: list[Message],
        *,
        now: str,
        usage: Usage | None = None,
        audit: list[AuditRecord] | None = None,
        title: str | None = None,
        create: Header | None = None,
        lease_until: int = 0,
        audit_head: Head | None = None,
        turn_id: str | None = None,
        only_if: tuple[str, dict[str, Any]] = ("", {}),
    ) -> tuple[list[StoredMessage], Head]:
        """Store messages and their audit rows atomically; returns the messages with their seqs, and the head of
        the conversation's audit stream after the rows.

        Conditioned on holding the lease and on ``next_seq == expected_seq``: a writer that lost the
        lease, or raced another, gets Conflict and stores nothing. With ``create``, the header is
        written here too, leased to ``owner``: a new conversation exists only once it has messages.
        The audit rows are chained after ``audit_head`` (the head the caller read) and the header's head
        advances with them, conditioned on it. Each message names ``turn_id``, the turn that stored it: the
        event feed reads a turn's events from its messages. ``only_if``: a further condition on the header and its
        values (who answers: `BOT_ANSWERS` for a write-ahead, the hand-off for a message kept for a person).
        """
        write = AuditedWrite.of(self._audit_table, audit_head or Head(), audit or [])
        stored = [
            StoredMessage(expected_seq + offset, message["role"], message["content"], now, turn_id)
            for offset, message in enumerate(messages)
        ]
        items = [self.message_put(conversation_id, m) for m in stored]
        usage = usage or Usage()
        next_seq = expected_seq + len(messages)
        if create is not None:
            header = self._new_header(conversation_id, create, owner, lease_until, next_seq, usage, now, title)
            items.extend(write.put(self._table, header, "conversation_id"))
        else:
            advance = self._advance(write, conversation_id, owner, expected_seq, next_seq, usage, now, title, only_if)
            items.extend(advance)
        with cancellation_as(lambda _codes: Conflict("the conversation changed under this turn; please resend")):
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        return stored, write.head

    def message_put(self, conversation_id: str, message: StoredMessage) -> dict[str, Any]:
        """A stored message, written once."""
        item = {
            "conversation_id": conversation_id,
            "seq": message.seq,
            "role": message.role,
            "content": dumps(message.content),
            "created_at": message.created_at,
            "turn_id": message.turn_id,
        }
        if message.author is not None:
            item.update(author=message.author, author_name=message.author_name)
        return put_new(self._table, item, "seq")

    def _new_header(
        self,
        conversation_id: str,
        create: Header,
        owner: str,
        lease_until: int,
        next_seq: int,
        usage: Usage,
        now: str,
        title: str | None,
    ) -> dict[str, Any]:
        """A new conversation's header, leased to ``owner``, as its first messages are stored."""
        return {
            "conversation_id": conversation_id,
            "seq": 0,
            "customer_id": create.customer_id,
            "created_at": create.created_at,
            "updated_at": now,
            "next_seq": next_seq,
            "lease_owner": owner,
            "lease_expires_at": lease_until,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "title": title,
            **quiet_marks(now, self._quiet_seconds),
        }

    def _advance(
        self,
        write: AuditedWrite,
        conversation_id: str,
        owner: str,
        expected_seq: int,
        next_seq: int,
        usage: Usage,
        now: str,
        title: str | None,
        only_if: tuple[str, dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """The header's update under the lease (the next seq, the token totals, a first title) with ``write``'s
        rows on the conversation's stream."""
        sets = ["next_seq = :next", "updated_at = :now", "outcome_due = :due", "quiet_check_at = :quiet"]
        marks = quiet_marks(now, self._quiet_seconds)
        values: dict[str, Any] = {
            ":due": marks["outcome_due"],
            ":quiet": marks["quiet_check_at"],
            ":owner": owner,
            ":next": next_seq,
            ":now": now,
            ":expected": expected_seq,
            ":i": usage.input_tokens,
            ":o": usage.output_tokens,
            ":cr": usage.cache_read_input_tokens,
            ":cc": usage.cache_creation_input_tokens,
        }
        if title is not None:
            sets.insert(0, "title = if_not_exists(title, :title)")
            values[":title"] = title
        extra, extra_values = only_if
        values.update(extra_values)
        return write.update(
            self._table,
            self._plain_key(conversation_id),
            sets,
            f"{LEASE_HELD} AND next_seq = :expected" + (f" AND {extra}" if extra else ""),
            values,
            then="ADD input_tokens :i, output_tokens :o, cache_read_input_tokens :cr, cache_creation_input_tokens :cc",
        )

    def list_for_customer(
        self, customer_id: int, limit: int = 20, start_key: dict[str, Any] | None = None
    ) -> tuple[list[Header], dict[str, Any] | None]:
        kwargs = self._by_customer(customer_id, ScanIndexForward=False, Limit=limit)
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        out = self._db.query(**kwargs)
        return [_header(from_item(i)) for i in out.get("Items", [])], out.get("LastEvaluatedKey")

    def conversation_ids(self, customer_id: int) -> list[str]:
        """Every conversation of the customer, in id order (all pages of the by_customer index)."""
        return sorted({str(item["conversation_id"]) for item in self._every_item(self._by_customer(customer_id))})

    def _by_customer(self, customer_id: int, **options: Any) -> dict[str, Any]:
        """The query of the customer's headers: the by_customer index holds nothing else (no counter, no message)."""
        return {
            "TableName": self._table,
            "IndexName": "by_customer",
            "KeyConditionExpression": "customer_id = :cid",
            "ExpressionAttributeValues": to_values({":cid": customer_id}),
            **options,
        }
