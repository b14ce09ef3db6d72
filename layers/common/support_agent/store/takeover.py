"""Who answers a conversation: the bot, or the person holding its hand-off. This file is where that changes.

The conversation's header says who answers. No ``open_handoff_id``: the bot. ``open_handoff_id`` set: a person —
queued while the hand-off is OPEN, and ``answerer`` = ``person:<sub>`` once someone holds it (ASSIGNED). Every
change of owner (claim, release, reassign, hand back, close) is one TransactWriteItems of three parts: the
hand-off's update conditioned on its status (and on its holder), with its audit row on the hand-off's own stream;
the header's update conditioned on naming this hand-off; and the ``handoff.*`` notification in the customer's
event feed. Two claims race on the hand-off's status: one wins, the other is a 409.

The bot's side of the rule is kept by the turn (agent/loop.py) with this header: a turn runs the model only when
the header names no hand-off (else the customer's message is kept for the person, conditioned on the hand-off still
being open), asks `ConversationStore.answerer` before every model call, and conditions its write-ahead on
`BOT_ANSWERS`, so a model answer arriving after a claim is dropped, not stored.

A person's reply (`Takeover.reply`) is a message of role ``person`` appended to the conversation, conditioned on
the header (the replier answers, the next seq, no turn holding the lease) and on the hand-off (ASSIGNED to the
replier), audited on the hand-off's stream by hash and length, never its text. Its Idempotency-Key is an item
``idem#handoff#<handoff id>#<SHA-256 of the key>`` / 0 of the Conversations table (its TTL, 25 hours on).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from support_agent.auth import Principal
from support_agent.clock import parse_iso
from support_agent.errors import Conflict, IdempotencyKeyReused, LeaseHeld, NotFound, NotPermitted
from support_agent.store.audited_write import AuditedWrite
from support_agent.store.conversations import LEASE_FREE, QUIET_SECONDS, ConversationStore, StoredMessage, quiet_marks
from support_agent.store.dynamo import (
    DynamoDBClient,
    cancellation_codes,
    error_code,
    from_item,
    put_new,
    to_item,
    to_values,
)
from support_agent.store.handoffs import Handoff, HandoffConflict, HandoffStore
from support_agent.store.notifications import NoteType, Notification, NotificationStore

KEY_SECONDS = 25 * 3600  # a reply's Idempotency-Key is kept at least 24 hours, as /api/chat's
REPLY_ATTEMPTS = 5  # a reply loses its seq to a customer's message at once: read again and retry


def person(sub: str) -> str:
    """The header's ``answerer`` for a person."""
    return f"person:{sub}"


def digest(text: str) -> dict[str, Any]:
    """What the audit trail keeps of a person's words: their hash and length, so erasure leaves the chain whole."""
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "length": len(text)}


@dataclass(frozen=True)
class Reply:
    """A person's stored message, and whether it was a resend answered from its Idempotency-Key."""

    handoff: Handoff
    message: StoredMessage
    replayed: bool = False


@dataclass(frozen=True)
class _Move:
    """One change of owner: the hand-off's new fields, its audit row's action, the header's update, the note."""

    action: str
    ticket_sets: dict[str, Any]
    ticket_removes: tuple[str, ...]
    header_update: str
    header_values: dict[str, Any]
    note: NoteType | None
    note_data: dict[str, Any]
    audit_input: Any = None


class Takeover:
    def __init__(
        self,
        client: DynamoDBClient,
        approvals_table: str,
        conversations_table: str,
        audit_table: str,
        quiet_seconds: int = QUIET_SECONDS,
    ) -> None:
        self._db = client
        self._tickets = HandoffStore(client, approvals_table, conversations_table, audit_table)
        self._conversations = ConversationStore(client, conversations_table, audit_table)
        self._quiet_seconds = quiet_seconds  # a reply is activity: the conversation's outcome waits (quiet_marks)
        self._notes = NotificationStore(client, conversations_table)
        self._approvals = approvals_table
        self._table = conversations_table
        self._audit = audit_table

    # -- who may ---------------------------------------------------------------------------------------------

    def held(self, handoff_id: str, actor: Principal) -> Handoff:
        """The hand-off ``actor`` may read the conversation of: one they hold, or any with a conversation for a
        lead. Anything else is a 404, as a conversation that is not theirs (ids cannot be probed)."""
        ticket = self._tickets.get(handoff_id)
        if ticket is None or not ticket.has_conversation:
            raise NotFound("hand-off not found")
        if actor.role != "support_lead" and not (ticket.status == "ASSIGNED" and ticket.assignee == actor.sub):
            raise NotFound("hand-off not found")
        return ticket

    # -- the changes of owner --------------------------------------------------------------------------------

    def claim(self, handoff_id: str, actor: Principal, now: str) -> Handoff:
        """OPEN → ASSIGNED to ``actor``: they answer the conversation from now on. One winner; 409 for the rest."""
        ticket = self._taking(handoff_id, {"OPEN"})
        return self._apply(ticket, self._assign("handoff_claimed", actor.sub, actor.display_name, now), actor, now)

    def reassign(self, handoff_id: str, lead: Principal, to: str, name: str | None, now: str) -> Handoff:
        """A lead gives an OPEN or ASSIGNED hand-off to ``to`` (a staff member's sub)."""
        _lead(lead)
        ticket = self._taking(handoff_id, {"OPEN", "ASSIGNED"})
        move = self._assign("handoff_reassigned", to, name or to, now, audit={"to": to})
        return self._apply(ticket, move, lead, now)

    def release(self, handoff_id: str, actor: Principal, now: str) -> Handoff:
        """ASSIGNED → OPEN: back to the queue (its holder, or a lead); the bot stays paused."""
        ticket = self._holding(handoff_id, actor)
        move = _Move(
            "handoff_released",
            {"status": "OPEN"},
            ("assignee", "assignee_name", "assigned_at"),
            "REMOVE answerer",
            {},
            "handoff.released",
            {"handoffId": handoff_id},
        )
        return self._apply(ticket, move, actor, now)

    def hand_back(self, handoff_id: str, actor: Principal, now: str, note: str | None = None) -> Handoff:
        """ASSIGNED → CLOSED with the bot answering again; ``note`` is context for the bot's next turns (in its
        system prompt, never as the customer's words), kept on the header until erased or replaced."""
        ticket = self._holding(handoff_id, actor)
        if note:
            update, values = (
                "SET handback_note = :note, handback_by = :by REMOVE open_handoff_id, answerer",
                {
                    ":note": note,
                    ":by": actor.display_name,
                },
            )
        else:
            update, values = "REMOVE open_handoff_id, answerer, handback_note, handback_by", {}
        move = _Move(
            "handoff_returned",
            {"status": "CLOSED", "closed_as": "returned_to_bot", "closed_by": actor.sub, "closed_at": now},
            (),
            update,
            values,
            "handoff.returned_to_bot",
            {"handoffId": handoff_id},
            audit_input={"note": digest(note)} if note else None,
        )
        return self._apply(ticket, move, actor, now)

    def close(self, handoff_id: str, actor: Principal, now: str, note: str | None = None) -> Handoff:
        """OPEN (a lead) or ASSIGNED (its holder, or a lead) → CLOSED; the customer's next message goes to the bot,
        without any earlier hand-back note. An MCP call's ticket (no conversation) closes the same way and frees its
        customer's holder item. A note is audited as a person's words are: by hash and length."""
        ticket = self._tickets.get(handoff_id)
        if ticket is None:
            raise NotFound("hand-off not found")
        if ticket.status == "ASSIGNED":
            ticket = self._holding(handoff_id, actor)
        elif ticket.status == "OPEN":
            _lead(actor)
        else:
            raise HandoffConflict(ticket)
        move = _Move(
            "handoff_closed",
            {"status": "CLOSED", "closed_as": "closed", "closed_by": actor.sub, "closed_at": now},
            (),
            # an earlier hand-back's note ends with the hand-off that follows it
            "REMOVE open_handoff_id, answerer, handback_note, handback_by",
            {},
            "handoff.closed" if ticket.has_conversation else None,
            {"handoffId": handoff_id},
            audit_input={"note": digest(note)} if note else None,
        )
        return self._apply(ticket, move, actor, now)

    # -- a person's reply --------------------------------------------------------------------------------------

    def reply(self, handoff_id: str, actor: Principal, text: str, now: str, key: str | None = None) -> Reply:
        """Store ``text`` as the holder's message in the conversation, in order with the customer's. A resend with
        the same Idempotency-Key and text is answered from the first (``replayed``); another text: 422."""
        print_ = hashlib.sha256(json.dumps({"handoffId": handoff_id, "text": text}).encode()).hexdigest()
        for _ in range(REPLY_ATTEMPTS):
            if key is not None:
                earlier = self._replayed(handoff_id, key, print_)
                if earlier is not None:
                    return earlier
            ticket = self._holding(handoff_id, actor, lead_may=False)
            header = self._conversations.get_header(str(ticket.conversation_id))
            if header is None or header.open_handoff_id != handoff_id:
                raise HandoffConflict(ticket)
            if header.lease_owner and header.lease_expires_at >= _epoch(now):
                raise LeaseHeld("the assistant is finishing a turn on this conversation; try again in a moment")
            self._not_after_open_calls(str(ticket.conversation_id), header.next_seq)
            message = StoredMessage(
                header.next_seq,
                "person",
                [{"type": "text", "text": text}],
                now,
                None,
                author=actor.sub,
                author_name=actor.display_name,
            )
            items = self._reply_items(ticket, message, header.next_seq, now, key, print_)
            try:
                self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                continue  # the seq, the lease, the hand-off or the key moved: read them all again
            return Reply(ticket, message)
        raise Conflict("the conversation kept changing; send the reply again")

    def _not_after_open_calls(self, conversation_id: str, next_seq: int) -> None:
        """A reply never lands after tool calls a crashed turn left unanswered: the history would stop being valid
        (a tool_use must be followed by its result). Only that turn's repair may answer them (it knows what they
        did); it runs when the customer next writes (agent/loop.py, before keeping the message) or when the turn
        sweep resumes a handed-over turn."""
        last = self._conversations.load(conversation_id, from_seq=next_seq - 1)
        if last and last[-1].role == "assistant" and any(b.get("type") == "tool_use" for b in last[-1].content):
            raise Conflict(
                "the assistant's last step was interrupted and is not repaired yet; it is, when the customer next "
                "writes — try again then"
            )

    def _reply_items(
        self, ticket: Handoff, message: StoredMessage, seq: int, now: str, key: str | None, print_: str
    ) -> list[dict[str, Any]]:
        cid = str(ticket.conversation_id)
        marks = quiet_marks(now, self._quiet_seconds)
        row = ticket.audit_row(
            "handoff_reply", message.author or "", "SENT", now, {**digest(_text(message)), "seq": seq}
        )
        items = [
            *AuditedWrite.of(self._audit, ticket.head, [row]).update(
                self._approvals,
                {"approval_id": ticket.handoff_id},
                ["last_reply_at = :now"],
                "#st = :assigned AND assignee = :me",
                {":now": now, ":assigned": "ASSIGNED", ":me": message.author},
                {"#st": "status"},
            ),
            self._conversations.message_put(cid, message),
            {
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"conversation_id": cid, "seq": 0}),
                    "UpdateExpression": "SET next_seq = :next, updated_at = :at, outcome_due = :due, "
                    "quiet_check_at = :quiet",
                    # no turn holds the lease: a reply never lands between a turn's steps
                    "ConditionExpression": f"next_seq = :seq AND answerer = :p AND open_handoff_id = :h AND "
                    f"{LEASE_FREE}",
                    "ExpressionAttributeValues": to_values(
                        {
                            ":next": seq + 1,
                            ":at": now,
                            ":seq": seq,
                            ":p": person(message.author or ""),
                            ":h": ticket.handoff_id,
                            ":now": _epoch(now),  # LEASE_FREE's: epoch seconds
                            ":due": marks["outcome_due"],
                            ":quiet": marks["quiet_check_at"],
                        }
                    ),
                }
            },
        ]
        if key is not None:
            record = {
                "conversation_id": _key_partition(ticket.handoff_id, key),
                "seq": 0,
                "fingerprint": print_,
                "message_seq": seq,
                "conversation": cid,
                "created_at": now,
                "expires_at": _epoch(now) + KEY_SECONDS,
            }
            items.append(put_new(self._table, record, "conversation_id"))
        return items

    def _replayed(self, handoff_id: str, key: str, print_: str) -> Reply | None:
        """The reply a live Idempotency-Key names, or None when the key is new (or expired)."""
        out = self._db.get_item(
            TableName=self._table,
            Key=to_item({"conversation_id": _key_partition(handoff_id, key), "seq": 0}),
            ConsistentRead=True,
        )
        record = from_item(out.get("Item") or {})
        if not record:
            return None
        if record["fingerprint"] != print_:
            raise IdempotencyKeyReused("this Idempotency-Key was used with another reply")
        ticket = self._tickets.get(handoff_id)
        stored = self._conversations.load(record["conversation"], from_seq=int(record["message_seq"]))
        if ticket is None or not stored or stored[0].seq != int(record["message_seq"]):
            raise NotFound("hand-off not found")
        return Reply(ticket, stored[0], replayed=True)

    # -- the one transaction of a change -------------------------------------------------------------------------

    def _taking(self, handoff_id: str, allowed: set[str]) -> Handoff:
        ticket = self._tickets.get(handoff_id)
        if ticket is None:
            raise NotFound("hand-off not found")
        if not ticket.has_conversation:
            raise Conflict("an MCP hand-off has no conversation to take over: close it when done")
        if ticket.status not in allowed:
            raise HandoffConflict(ticket)
        return ticket

    def _holding(self, handoff_id: str, actor: Principal, *, lead_may: bool = True) -> Handoff:
        """The ASSIGNED hand-off ``actor`` holds (or, ``lead_may``, any ASSIGNED one for a lead)."""
        ticket = self._taking(handoff_id, {"ASSIGNED"})
        if ticket.assignee != actor.sub and not (lead_may and actor.role == "support_lead"):
            raise NotPermitted("only the person holding this hand-off (or a lead) may do that")
        return ticket

    @staticmethod
    def _assign(action: str, sub: str, name: str, now: str, audit: Any = None) -> _Move:
        return _Move(
            action,
            {"status": "ASSIGNED", "assignee": sub, "assignee_name": name, "assigned_at": now},
            (),
            "SET answerer = :p",
            {":p": person(sub)},
            "handoff.assigned",
            {"by": name},
            audit_input=audit,
        )

    def _apply(self, ticket: Handoff, move: _Move, actor: Principal, now: str) -> Handoff:
        """The hand-off, its audit row and the header in one transaction, with the notification: conditioned on the
        hand-off being as read (status, holder, head) and on the header naming it."""
        row = ticket.audit_row(move.action, actor.sub, str(move.ticket_sets["status"]), now, move.audit_input)
        sets = [f"#f_{k} = :f_{k}" for k in move.ticket_sets]
        values = {f":f_{k}": v for k, v in move.ticket_sets.items()}
        names = {f"#f_{k}": k for k in move.ticket_sets} | {"#st": "status"}
        condition = "#st = :was" + (
            " AND assignee = :holder" if ticket.assignee else " AND attribute_not_exists(assignee)"
        )
        values |= {":was": ticket.status} | ({":holder": ticket.assignee} if ticket.assignee else {})
        removes = f"REMOVE {', '.join(move.ticket_removes)}" if move.ticket_removes else ""
        items = AuditedWrite.of(self._audit, ticket.head, [row]).update(
            self._approvals, {"approval_id": ticket.handoff_id}, sets, condition, values, names, then=removes
        )
        holder = ticket.holder or str(ticket.conversation_id)
        items.append(
            {
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"conversation_id": holder, "seq": 0}),
                    "UpdateExpression": move.header_update,
                    "ConditionExpression": "open_handoff_id = :h",
                    "ExpressionAttributeValues": to_values({":h": ticket.handoff_id, **move.header_values}),
                }
            }
        )
        note = None
        if move.note is not None and ticket.conversation_id:
            note = Notification(
                conversation_id=ticket.conversation_id,
                type=move.note,
                at=now,
                data={"handoffId": ticket.handoff_id, **move.note_data},
                turn_id=None,
            )
        try:
            self._notes.transact(items, note)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            current = self._tickets.get(ticket.handoff_id)
            if current is None:
                raise NotFound("hand-off not found") from None
            if _ticket_failed(cancellation_codes(exc)) or current != ticket:
                raise HandoffConflict(current) from None
            raise Conflict("the conversation does not name this hand-off") from None
        changed = self._tickets.get(ticket.handoff_id)
        assert changed is not None
        return changed


def _ticket_failed(codes: list[str]) -> bool:
    """The hand-off's own update (the transaction's first item) is what failed: someone changed it first."""
    return bool(codes) and codes[0] == "ConditionalCheckFailed"


def _lead(actor: Principal) -> None:
    if actor.role != "support_lead":
        raise NotPermitted("only a support lead may do that")


def _text(message: StoredMessage) -> str:
    return "".join(str(b.get("text", "")) for b in message.content if b.get("type") == "text")


def _key_partition(handoff_id: str, key: str) -> str:
    return f"idem#handoff#{handoff_id}#{hashlib.sha256(key.encode()).hexdigest()}"


def _epoch(iso_time: str) -> int:
    return int(parse_iso(iso_time).timestamp())
