"""Hand-off tickets: a customer asked for a person.

Tickets live in the Approvals table as ``entity = HANDOFF`` items (id ``hof_`` + ULID), so leads
list them through the same ``by_created``/``by_status`` indexes. At most one is open per
conversation: the conversation header's ``open_handoff_id`` is set in the same transaction that
creates the ticket, conditioned on being absent, and removed when a lead closes it.

The same transaction writes an immutable per-call record, ``call#<conversation>#<seq>#<tool_use_id>``
(``entity = HANDOFF_CALL``, no ``status``/``created_at``, so neither index lists it): the repair of a
crashed turn finds what the call did by its key alone, even once the ticket is closed or the
conversation erased, and never opens a second ticket for it.

An MCP call has no conversation: its customer's open MCP ticket is named by a per-customer item of the
Conversations table instead, ``mcp#<customer_id>`` / 0 (the ``holder``; it also holds the customer's MCP audit
stream's head, mcp/our_tools.py, and never carries ``customer_id`` or ``updated_at``), created by the first open;
the ticket records its ``holder`` and no ``conversation_id``, and closing it frees the holder the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from support_agent.audit.chain import Head
from support_agent.errors import Conflict, NotFound
from support_agent.ids import ulid
from support_agent.store.approvals import Page, query_page
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite, StreamOwner
from support_agent.store.dynamo import DynamoDBClient, cancellation_as, from_item, put_new, to_item, to_values
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.records import Record

ENTITY = "HANDOFF"
CALL_ENTITY = "HANDOFF_CALL"
HandoffStatus = Literal["OPEN", "ASSIGNED", "CLOSED"]
ClosedAs = Literal["closed", "returned_to_bot"]


@dataclass(frozen=True, kw_only=True)
class Handoff(StreamOwner):
    """A ticket, keyed ``approval_id`` as the table is (``handoff_id`` is the same id); it owns the hand-off's
    audit stream (``handoff#<id>``: `StreamOwner`). The lead's view (api/responses.py ``Handoff.of``) is built
    from it."""

    KIND: ClassVar[str] = "hand-off"

    approval_id: str
    status: HandoffStatus
    customer_id: int
    created_at: str
    entity: str = ENTITY
    conversation_id: str | None = None  # none for an MCP call's ticket: its ``holder`` names it
    holder: str | None = None
    reason: str = ""
    tool_use_id: str = ""
    requested_by: str = ""
    closed_by: str | None = None
    closed_at: str | None = None
    # A person holding it (ASSIGNED; store/takeover.py): their sub and the name the customer is shown.
    assignee: str | None = None
    assignee_name: str | None = None
    assigned_at: str | None = None
    closed_as: ClosedAs | None = None  # how it ended: closed, or handed back to the bot
    last_reply_at: str | None = None  # its holder's last reply (store/takeover.py)

    @property
    def handoff_id(self) -> str:
        return self.approval_id

    @property
    def has_conversation(self) -> bool:
        """An MCP call's ticket has none (its ``holder`` names the customer): it stays a ticket, never taken over."""
        return self.conversation_id is not None

    def audit_row(
        self, action: str, actor: str, outcome: str, now: str, input: Any, request_id: str | None = None
    ) -> AuditRecord:
        """A row of this ticket's own stream (``handoff#<id>``). With ``request_id``: the row of the tool call
        that opened it, naming the tool and the call (none for a ticket a lead's decision opened)."""
        opening = request_id is not None and not self.tool_use_id.startswith(DECISION_CALL)
        return AuditRecord(
            f"handoff#{self.handoff_id}",
            action,
            actor,
            outcome,
            self.customer_id,
            now,
            tool="escalate_to_human" if opening else None,
            input=input,
            output={"handoff_id": self.handoff_id},
            conversation_id=self.conversation_id,
            request_id=request_id,
            tool_use_id=self.tool_use_id if opening else None,
            handoff_id=self.handoff_id,
        )


@dataclass(frozen=True, kw_only=True)
class HandoffCall(Record):
    """The per-call record: which ticket one tool call opened, whatever has happened to it since."""

    KIND: ClassVar[str] = "hand-off call"

    approval_id: str  # `call_key`
    handoff_id: str
    customer_id: int
    seq: int
    tool_use_id: str
    recorded_at: str
    entity: str = CALL_ENTITY
    conversation_id: str | None = None


DECISION_CALL = "decision-"  # the "tool_use_id" of a ticket a decision opened: ``decision-<approval id>``


def call_key(conversation_id: str, seq: int, tool_use_id: str) -> str:
    """The per-call record's id: server-side values only, like a refund request's key."""
    return f"call#{conversation_id}#{seq}#{tool_use_id}"


class HandoffConflict(Conflict):
    """The ticket is not OPEN (closed already, or by a lead at the same moment); ``current`` is what it is."""

    def __init__(self, current: Handoff) -> None:
        super().__init__(f"hand-off is {current.status}")
        self.current = current


def _conflict(current: Handoff | None) -> HandoffConflict | NotFound:
    return NotFound("hand-off not found") if current is None else HandoffConflict(current)


class HandoffStore:
    def __init__(self, client: DynamoDBClient, table: str, conversations_table: str, audit_table: str) -> None:
        self._db = client
        self.table = table
        self._conversations = conversations_table
        self._audit = audit_table
        self._notes = NotificationStore(client, conversations_table)

    def get(self, handoff_id: str) -> Handoff | None:
        out = self._db.get_item(TableName=self.table, Key=to_item({"approval_id": handoff_id}), ConsistentRead=True)
        item = out.get("Item")
        return Handoff.from_item(from_item(item)) if item and item.get("entity", {}).get("S") == ENTITY else None

    def list(
        self,
        status: HandoffStatus,
        limit: int = 25,
        start_key: dict[str, Any] | None = None,
        assignee: str | None = None,
    ) -> Page[Handoff]:
        """Newest first, by_status (no approval has a hand-off's status; the filter holds it to that); with
        ``assignee``, only those that person holds (a page may then hold fewer than ``limit``: follow its key)."""
        items, next_key = query_page(self._db, self.table, status, ENTITY, limit, start_key)
        tickets = [Handoff.from_item(i) for i in items if i.get("entity") == ENTITY]
        return Page([t for t in tickets if assignee is None or t.assignee == assignee], next_key)

    def oldest_open(self) -> Handoff | None:
        """The ticket queued longest (OldestOpenHandoffAge): by_status, oldest first, past any approval."""
        out = self._db.query(
            TableName=self.table,
            IndexName="by_status",
            KeyConditionExpression="#st = :s",
            FilterExpression="entity = :e",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=to_values({":s": "OPEN", ":e": ENTITY}),
            ScanIndexForward=True,
            Limit=50,
        )
        items = [from_item(i) for i in out.get("Items", [])]
        return Handoff.from_item(items[0]) if items else None

    def open_for(self, conversation_id: str) -> Handoff | None:
        """The open ticket the conversation header (or an MCP holder item) names."""
        out = self._db.get_item(
            TableName=self._conversations,
            Key=to_item({"conversation_id": conversation_id, "seq": 0}),
            ConsistentRead=True,
            ProjectionExpression="open_handoff_id",
        )
        hid = from_item(out.get("Item") or {}).get("open_handoff_id")
        return self.get(hid) if hid else None

    def opened_by(self, conversation_id: str, seq: int, tool_use_id: str) -> str | None:
        """The id of the hand-off this tool call opened, whatever has happened to it since."""
        out = self._db.get_item(
            TableName=self.table,
            Key=to_item({"approval_id": call_key(conversation_id, seq, tool_use_id)}),
            ConsistentRead=True,
        )
        item = from_item(out.get("Item") or {})
        return HandoffCall.from_item(item).handoff_id if item.get("entity") == CALL_ENTITY else None

    def open(
        self,
        conversation_id: str,
        seq: int,
        customer_id: int,
        reason: str,
        actor: str,
        tool_use_id: str,
        request_id: str,
        now: str,
        holder: str | None = None,
    ) -> tuple[Handoff, bool]:
        """Open a ticket unless one is open for the conversation; returns (ticket, created).

        ``holder`` (an MCP call): the per-customer item naming the open ticket, in place of a conversation
        header; ``conversation_id`` then only keys the per-call record.

        Only a created ticket gets a per-call record: "already open" changes nothing, so a crashed
        call that got that answer is safely repaired as "not executed" and may simply run again.
        """
        ticket = Handoff(
            approval_id=f"hof_{ulid()}",
            status="OPEN",
            customer_id=customer_id,
            conversation_id=None if holder else conversation_id,
            holder=holder,
            reason=reason,
            tool_use_id=tool_use_id,
            requested_by=actor,
            created_at=now,
        )
        record = HandoffCall(
            approval_id=call_key(conversation_id, seq, tool_use_id),
            handoff_id=ticket.handoff_id,
            customer_id=customer_id,
            conversation_id=ticket.conversation_id,
            seq=seq,
            tool_use_id=tool_use_id,
            recorded_at=now,
        )
        # The hand-off's own stream starts here: the ticket is written holding its head.
        write = AuditedWrite.of(self._audit, Head(), [_opened(ticket, request_id)])
        items = [
            *write.put(self.table, ticket.item(), "approval_id"),
            put_new(self.table, record.item(), "approval_id"),
            {
                "Update": {
                    "TableName": self._conversations,
                    "Key": to_item({"conversation_id": holder or conversation_id, "seq": 0}),
                    # A conversation's header keeps every hand-off it ever had (its outcome reads them:
                    # outcomes/facts.py); an MCP holder names the open one only.
                    "UpdateExpression": "SET open_handoff_id = :h" + ("" if holder else " ADD handoff_ids :ids"),
                    # the conversation's header must exist; an MCP holder is created by its first ticket
                    "ConditionExpression": "attribute_not_exists(open_handoff_id)"
                    if holder
                    else "attribute_exists(conversation_id) AND attribute_not_exists(open_handoff_id)",
                    "ExpressionAttributeValues": to_values(
                        {":h": ticket.handoff_id} | ({} if holder else {":ids": {ticket.handoff_id}})
                    ),
                }
            },
        ]

        def already_open(_codes: list[str]) -> HandoffConflict | None:
            """Whichever item failed, the conversation's open ticket is the answer; none open: the error stands."""
            current = self.open_for(holder or conversation_id)
            return None if current is None else HandoffConflict(current)

        # In a conversation, the customer's feed hears of it in the same transaction (store/notifications.py).
        note = None
        if ticket.conversation_id is not None:
            data = {"handoffId": ticket.handoff_id}
            note = Notification(conversation_id=ticket.conversation_id, type="handoff.opened", at=now, data=data)
        try:
            with cancellation_as(already_open):
                self._notes.transact(items, note)
        except HandoffConflict as exc:
            return exc.current, False
        return replace(ticket, **write.head.attributes()), True

    def open_for_decision(
        self, approval_id: str, conversation_id: str | None, customer_id: int, reason: str, actor: str, now: str
    ) -> Handoff:
        """The ticket a lead's decision opens (a cancellation's refund rejected: approvals/decisions.py), once per
        approval: its per-call record is keyed by the approval, so a repeated decision finds it, whatever became of
        it; a ticket already open for the conversation is the answer. An MCP call's approval: its customer's."""
        scope, call = conversation_id or "mcp", f"{DECISION_CALL}{approval_id}"
        opened = self.opened_by(scope, 0, call)
        if opened is not None:
            existing = self.get(opened)
            assert existing is not None
            return existing
        holder = None if conversation_id else f"mcp#{customer_id}"
        ticket, _created = self.open(scope, 0, customer_id, reason, actor, call, approval_id, now, holder=holder)
        return ticket


def _opened(ticket: Handoff, request_id: str) -> AuditRecord:
    """The first row of a ticket's stream: the tool call that opened it."""
    reason = {"reason": ticket.reason}
    return ticket.audit_row("handoff_opened", ticket.requested_by, "OPEN", ticket.created_at, reason, request_id)
