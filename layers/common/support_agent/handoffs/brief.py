"""A hand-off's brief: what the person picking it up reads first, built by code from what is stored, never by
the model (a model's summary could leave out, or make up, the one refund that matters).

A feature of its own, not a view in api/: it reads three stores (the conversation, the customer's refund rows,
their approvals) and the tool calls' fenced results (agent/untrusted.py), and decides what a conversation
"touched": the orders named in its tool inputs and refunds, and the invoices its ``list_invoices`` calls
returned. api/staff_routes.py renders it (api/responses.py ``HandoffBrief``) and reads the transcript with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from support_agent.agent.untrusted import unfence
from support_agent.refunds.vocabulary import CustomerRefundStatus, customer_status
from support_agent.store.approvals import ApprovalStore
from support_agent.store.conversations import ConversationStore, Header, StoredMessage
from support_agent.store.customer_data import CustomerDataStore
from support_agent.store.handoffs import Handoff

LAST_MESSAGES = 6  # the last messages with text a brief quotes
MESSAGE_CHARS = 500  # each cut to this many characters: the transcript has the rest


@dataclass(frozen=True)
class RefundLine:
    """One refund the conversation raised, as its request row and (held for a lead) its approval say now."""

    order_id: int | None
    amount_cents: int | None
    currency: str | None
    status: CustomerRefundStatus | None  # the customers' word: the person answers in it
    approval_id: str | None
    approval_status: str | None  # the approval's own state (PENDING, APPROVED, …); None for a direct refund
    refund_id: str | None  # the payment provider's, once it has one


@dataclass(frozen=True)
class BriefMessage:
    seq: int
    role: str  # user, assistant or person
    text: str
    created_at: str
    author: str | None = None  # a person's display name


@dataclass(frozen=True)
class Brief:
    customer_id: int
    reason: str
    orders: list[int]
    invoices: list[int | str]  # as the customer's data keys them
    refunds: list[RefundLine]
    last_messages: list[BriefMessage]


@dataclass(frozen=True)
class Transcript:
    """What the person holding a hand-off reads of its conversation (api/views.py renders it)."""

    header: Header
    messages: list[StoredMessage]
    refunds: list[RefundLine]


class Briefs:
    def __init__(
        self, conversations: ConversationStore, customer_data: CustomerDataStore, approvals: ApprovalStore
    ) -> None:
        self._conversations = conversations
        self._customer_data = customer_data
        self._approvals = approvals

    def of(self, ticket: Handoff) -> Brief:
        """The brief of ``ticket``; an MCP call's (no conversation) has the customer and the reason only."""
        if not ticket.conversation_id:
            return brief(ticket, [], [])
        cid = ticket.conversation_id
        return brief(ticket, self._conversations.load(cid), self.refunds(ticket.customer_id, cid))

    def transcript(self, ticket: Handoff) -> Transcript | None:
        """The conversation of ``ticket`` whole; None when it has none (or its header is gone)."""
        cid = ticket.conversation_id
        header = self._conversations.get_header(cid) if cid else None
        if header is None or header.customer_id != ticket.customer_id:
            return None
        messages = self._conversations.load(header.conversation_id)
        return Transcript(header, messages, self.refunds(ticket.customer_id, header.conversation_id))

    def refunds(self, customer_id: int, conversation_id: str) -> list[RefundLine]:
        """The conversation's refunds: a held request reads its approval (the request row keeps only what was
        asked), a direct refund is its own row."""
        lines = []
        for row in self._customer_data.refund_requests(customer_id, conversation_id):
            status, refund_id, approval_status = row.get("status"), row.get("refund_id"), None
            approval_id = row.get("approval_id") or None
            if approval_id:
                approval = self._approvals.get(approval_id)
                status = approval_status = approval.status if approval is not None else status
                refund_id = approval.refund_id if approval is not None else None
            lines.append(
                RefundLine(
                    _int(row.get("order_id")),
                    _int(row.get("amount_cents")),
                    row.get("currency"),
                    customer_status(status),
                    approval_id,
                    approval_status,
                    refund_id or None,
                )
            )
        return lines


def brief(ticket: Handoff, messages: list[StoredMessage], refunds: list[RefundLine]) -> Brief:
    """The brief from what is stored: the orders and invoices the tool calls touched, the refunds, the last
    LAST_MESSAGES messages with text (tool-result-only messages have none), each cut to MESSAGE_CHARS."""
    orders: dict[int, None] = {}  # first seen first, once each
    invoices: dict[int | str, None] = {}
    for use, result in _tool_calls(messages):
        order_id = _int((use.get("input") or {}).get("order_id")) if isinstance(use.get("input"), dict) else None
        if order_id is not None:
            orders[order_id] = None
        if use.get("name") == "list_invoices" and result is not None and not result.get("is_error"):
            for invoice in _invoices(unfence(result.get("content"))):
                invoices[invoice] = None
    for line in refunds:
        if line.order_id is not None:
            orders[line.order_id] = None
    quoted = [m for m in messages if _text(m)][-LAST_MESSAGES:]
    return Brief(
        customer_id=ticket.customer_id,
        reason=ticket.reason,
        orders=list(orders),
        invoices=list(invoices),
        refunds=refunds,
        last_messages=[
            BriefMessage(
                m.seq,
                m.role,
                _text(m)[:MESSAGE_CHARS],
                m.created_at,
                (m.author_name or m.author) if m.role == "person" else None,
            )
            for m in quoted
        ],
    )


def _tool_calls(messages: list[StoredMessage]) -> Iterable[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Every tool call of the conversation with its result block (None: never answered)."""
    results: dict[str, dict[str, Any]] = {}
    for m in messages:
        for b in m.content:
            if b.get("type") == "tool_result":
                results[str(b.get("tool_use_id"))] = b
    for m in messages:
        for b in m.content:
            if b.get("type") == "tool_use":
                yield b, results.get(str(b.get("id")))


def _invoices(payload: Any) -> list[int | str]:
    """The invoice ids of a ``list_invoices`` result (anything else, e.g. an erased or cut one: none)."""
    listed = payload.get("invoices") if isinstance(payload, dict) else None
    if not isinstance(listed, list):
        return []
    ids = [i.get("invoice_id") for i in listed if isinstance(i, dict)]
    return [i for i in ids if isinstance(i, int | str) and not isinstance(i, bool)]


def _text(m: StoredMessage) -> str:
    return "".join(str(b.get("text", "")) for b in m.content if b.get("type") == "text")


def _int(value: Any) -> int | None:
    """A stored number (DynamoDB's come back as Decimal) as an int; None when it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
