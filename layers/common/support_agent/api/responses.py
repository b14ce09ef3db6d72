"""The response shapes of the HTTP API: the OpenAPI document's, and the lead routes' bodies themselves.

A lead route returns its model, built from the stored record by the model's ``of`` (an approval's from
store/approvals.py `Approval`, a hand-off's, an audit row's), and Powertools validates and serialises what it
returns: one declaration is the document and the body. The chat and events routes name their models
(api/route_docs.py) and build dicts, so their functions never import this module (docs/PERFORMANCE.md); the
integration tests validate their answers against the generated document. ``extra="forbid"`` makes that strict.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from support_agent.refunds.vocabulary import CustomerRefundStatus, LedgerStatus
from support_agent.store import approvals
from support_agent.store.approvals import ApprovalStatus

# A proposal's states (the core's `Proposal.status`, actions/proposals.py): the customer's word for them too.
ProposalStatus = Literal["PROPOSED", "CONFIRMING", "CONFIRMED", "DECLINED", "EXPIRED"]


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


class _Shape(BaseModel):
    # Built when the OpenAPI document is, not at import: no request ever validates against these,
    # and building ~20 schemas cost every cold start ~20 ms (docs/PERFORMANCE.md).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    @classmethod
    def of(cls, source: Any, **given: Any) -> Self:
        """The body for a stored record (or a report): each field is the source's attribute of the same name in
        snake_case (``approvalId`` ← ``approval_id``), or ``given``. A field the source lacks is an error here,
        not a silently missing key."""
        fields = {name: given[name] if name in given else getattr(source, _snake(name)) for name in cls.model_fields}
        return cls(**fields)


# ------------------------------------------------------------------ errors


class ErrorDetail(_Shape):
    code: str = Field(..., description="Machine-readable: bad_request, unauthorized, forbidden, not_found, …")
    message: str


class ErrorBody(_Shape):
    error: ErrorDetail


# ------------------------------------------------------------------ customer


class ToolCallTrace(_Shape):
    id: str
    name: str
    input: Any = Field(..., description="The tool input the model gave (snake_case)")
    result: Any = Field(..., description="The tool's result (or error) as the model saw it, unfenced")
    isError: bool


class TraceIteration(_Shape):
    iteration: int = Field(..., ge=1)
    stopReason: str
    toolCalls: list[ToolCallTrace]


class ChatResponse(_Shape):
    conversationId: str
    turnId: str = Field(..., description="The turn's record: GET /api/conversations/{id}/turns/{turnId}")
    reply: str
    stopReason: Literal[
        "end_turn", "stop_sequence", "refusal", "max_tokens", "max_iterations", "deadline", "handed_to_person"
    ] = Field(
        ...,
        description="`handed_to_person`: a person claimed the conversation's hand-off while the turn ran; the "
        "model's answer after the claim was dropped and `reply` says a teammate has joined",
    )
    iterations: int = Field(..., ge=0)
    inputTokens: int = Field(..., ge=0, description="Uncached input tokens, summed over the turn")
    outputTokens: int = Field(..., ge=0)
    cacheReadInputTokens: int = Field(..., ge=0)
    cacheCreationInputTokens: int = Field(..., ge=0)
    trace: list[TraceIteration] | None = Field(None, description="Every tool call; only when TRANSPARENCY=verbose")
    traceOmitted: bool | None = Field(
        None, description="A replayed answer whose trace was too large to keep (the reply itself is kept)"
    )


class TurnRunning(_Shape):
    """202: the turn runs on (a resend while it runs); ``Location`` names its record."""

    conversationId: str
    turnId: str
    status: Literal["running"]
    eventsUrl: str = Field(..., description="The conversation's event feed: the turn's steps as they are stored")


class KeptForPerson(_Shape):
    """202: a person answers the conversation (its hand-off is open): the message is stored for them and no turn
    ran, so there is no ``turnId`` and no ``Location``; their reply arrives in the event feed."""

    conversationId: str
    owner: Literal["person"]
    status: Literal["queued", "assigned"] = Field(
        ..., description="queued: no one has claimed the hand-off yet; assigned: a person holds it"
    )
    eventsUrl: str = Field(..., description="The conversation's event feed, where the person's reply shows")


ChatAccepted = TurnRunning | KeptForPerson
"""POST /api/chat's 202: a turn going on in the worker, or a message kept for a person."""


class TurnError(_Shape):
    code: str
    message: str


class TurnView(_Shape):
    turnId: str
    conversationId: str
    status: Literal["running", "completed", "failed"]
    response: ChatResponse | None = Field(..., description="The 200 body, once completed")
    error: TurnError | None = Field(..., description="Why it failed (a refused or interrupted turn is failed)")


class FeedEvent(_Shape):
    """One event of a conversation's feed; the fields after ``turnId`` depend on ``type``."""

    cursor: str = Field(..., description="Opaque: the feed resumes right after this event (`after=`)")
    type: Literal[
        "turn.started",
        "tool.requested",
        "tool.finished",
        "message",
        "turn.completed",
        "turn.failed",
        "approval.decided",
        "refund.settled",
        "handoff.opened",
        "handoff.assigned",
        "handoff.released",
        "handoff.closed",
        "handoff.returned_to_bot",
        "proposal.created",
        "proposal.confirmed",
        "proposal.declined",
        "proposal.expired",
    ]
    at: str = Field(..., description="When it was stored (ISO 8601, UTC)")
    turnId: str | None = Field(..., description="The turn it belongs to (none for a lead's decision or a refund)")
    role: Literal["user", "assistant", "person"] | None = Field(
        None, description="message: who wrote it (person: a support teammate)"
    )
    author: str | None = Field(None, description="message of role person: the teammate's display name")
    text: str | None = Field(None, description="message")
    toolUseId: str | None = Field(None, description="tool.requested, tool.finished: pairs the two")
    name: str | None = Field(
        None, description="tool.requested, tool.finished: the tool (left out when TRANSPARENCY=quiet)"
    )
    input: Any = Field(None, description="tool.requested: the tool's input (left out when TRANSPARENCY=quiet)")
    result: Any = Field(None, description="tool.finished: the tool's result (left out when TRANSPARENCY=quiet)")
    isError: bool | None = Field(None, description="tool.finished")
    stopReason: str | None = Field(None, description="turn.completed")
    iterations: int | None = Field(None, description="turn.completed")
    inputTokens: int | None = Field(None, description="turn.completed")
    outputTokens: int | None = Field(None, description="turn.completed")
    cacheReadInputTokens: int | None = Field(None, description="turn.completed")
    cacheCreationInputTokens: int | None = Field(None, description="turn.completed")
    error: TurnError | None = Field(None, description="turn.failed")
    approvalId: str | None = Field(None, description="approval.decided")
    orderId: int | None = Field(None, description="approval.decided, refund.settled, proposal.*")
    amountCents: int | None = Field(None, description="approval.decided, refund.settled")
    status: CustomerRefundStatus | ProposalStatus | None = Field(
        None, description="approval.decided, refund.settled (the customers' word for a refund); proposal.*"
    )
    handoffId: str | None = Field(None, description="handoff.*: the hand-off")
    by: str | None = Field(None, description="handoff.assigned: the display name of the person who answers now")
    proposalId: str | None = Field(None, description="proposal.*: the proposal")
    action: str | None = Field(None, description="proposal.*: the declared action (cancel_order, …)")
    summary: str | None = Field(None, description="proposal.*: what it does, in the customer's words")
    expiresAt: str | None = Field(None, description="proposal.*: until when the customer may confirm it")
    policyVersion: int | None = Field(
        None, description="proposal.created: the policy version it was proposed under; the others: the decision's"
    )
    outcome: Any = Field(None, description="proposal.confirmed, .declined, .expired: what came of it")


class FeedPage(_Shape):
    events: list[FeedEvent] = Field(..., description="In order; empty when nothing happened within waitSeconds")
    nextCursor: str = Field(..., description="Opaque: where the next request resumes (`after=`)")


class ConversationSummary(_Shape):
    conversationId: str
    createdAt: str
    updatedAt: str
    title: str


class ConversationList(_Shape):
    conversations: list[ConversationSummary]
    nextToken: str | None


class MessageToolCall(_Shape):
    name: str
    input: Any
    result: Any
    isError: bool


class ConversationMessage(_Shape):
    seq: int
    role: Literal["user", "assistant", "person"] = Field(..., description="person: a support teammate's reply")
    author: str | None = Field(None, description="role person: the teammate's display name")
    createdAt: str
    text: str
    turnId: str | None = Field(None, description="The turn that stored it (a thumb names it); absent on older ones")
    toolCalls: list[MessageToolCall] | None = Field(None, description="Only when TRANSPARENCY=verbose")


class RefundSummary(_Shape):
    approvalId: str | None = Field(..., description="null for a direct refund (within the threshold)")
    refundId: str | None = Field(..., description="The payment provider's refund id, once it has one")
    orderId: int | None
    amountCents: int | None
    currency: str | None
    status: CustomerRefundStatus | None = Field(..., description="The customers' vocabulary, not the approval's")


class ProposalView(_Shape):
    """An action proposed to the customer (cancel an order, change its address): only their own Confirm or Decline
    (`POST …/proposals/{id}/confirm`, `/decline`, with their token) decides it, never the model."""

    proposalId: str
    conversationId: str
    action: str = Field(..., description="The declared action: cancel_order, update_shipping_address, …")
    orderId: int | None = Field(..., description="The order it acts on")
    summary: str = Field(..., description="What confirming does, in the customer's words")
    status: ProposalStatus = Field(
        ...,
        description="PROPOSED: waiting for the customer until expiresAt (shown EXPIRED after it); CONFIRMING: "
        "confirmed, being carried out; CONFIRMED, DECLINED, EXPIRED: final",
    )
    createdAt: str
    expiresAt: str
    policyVersion: int = Field(..., description="The support policy's version it was proposed under")
    decidedAt: str | None = Field(..., description="When the customer confirmed or declined it")
    decidedPolicyVersion: int | None = Field(
        ..., description="The policy version the decision applied (a confirmation checks the action again under it)"
    )
    outcome: Any = Field(..., description="What the action did once confirmed (or why it could not); else null")
    input: Any = Field(None, description="The action's input (snake_case); only when TRANSPARENCY=verbose")


class ClosingRating(_Shape):
    score: int
    comment: str


class ConversationRatings(_Shape):
    """The customer's own ratings of this conversation (POST …/rating), erased ones left out."""

    thumbs: dict[str, Literal["up", "down"]] = Field(..., description="turn id -> the thumb given its answer")
    closing: ClosingRating | None


class ConversationView(_Shape):
    """A reader's view: text and (verbose only) tool calls, fences removed, with the refunds raised in it and the
    actions proposed in it."""

    conversationId: str
    createdAt: str
    messages: list[ConversationMessage]
    refunds: list[RefundSummary]
    proposals: list[ProposalView]
    ratings: ConversationRatings


class Health(_Shape):
    status: Literal["ok"]


# ------------------------------------------------------------------ support lead


class ApprovalRefund(_Shape):
    """The refund RefundFlow asked the payment provider for: its ledger row's state."""

    provider: str = Field(..., description="The payment provider: stripe, or none (ledger only)")
    refundId: str | None = Field(..., description="The provider's refund id (re_…), once it answered")
    status: LedgerStatus
    failureReason: str | None = Field(
        None, description="Why the provider failed or refused it (its code, e.g. lost_or_stolen_card), when FAILED"
    )
    failedLateAt: str | None = Field(
        None, description="When the provider failed a refund it had already made (failed after succeeded)"
    )

    @classmethod
    def of_approval(cls, a: approvals.Approval) -> ApprovalRefund | None:
        """The refund as its ledger row last recorded it on the approval; None before RefundFlow began it."""
        if not a.refund_provider or a.refund_status is None:
            return None
        return cls(
            provider=a.refund_provider,
            refundId=a.refund_id or None,
            status=a.refund_status,
            failureReason=(a.failure_error or None) if a.refund_status == "FAILED" else None,
            failedLateAt=a.refund_failed_late_at or None,
        )


class Approval(_Shape):
    approvalId: str
    orderId: int | None
    customerId: int | None
    amountCents: int | None
    currency: str | None
    reason: str | None
    status: ApprovalStatus | None
    conversationId: str | None
    createdAt: str | None
    decidedBy: str | None
    decidedAt: str | None
    refund: ApprovalRefund | None = Field(..., description="null until RefundFlow starts the refund")

    @classmethod
    def of(cls, source: Any, **given: Any) -> Self:
        return super().of(source, refund=ApprovalRefund.of_approval(source), **given)


class ApprovalList(_Shape):
    approvals: list[Approval]
    nextToken: str | None


class BriefRefund(_Shape):
    orderId: int | None
    amountCents: int | None
    currency: str | None
    status: CustomerRefundStatus | None = Field(..., description="The customers' word for it, as they read it")
    approvalId: str | None = Field(..., description="null for a direct refund (within the threshold)")
    approvalStatus: ApprovalStatus | None = Field(..., description="The approval's own state, when held for a lead")


class BriefMessage(_Shape):
    seq: int
    role: Literal["user", "assistant", "person"]
    author: str | None = Field(None, description="role person: the teammate's display name")
    text: str = Field(..., max_length=500, description="Cut to 500 characters: the transcript has the rest")
    createdAt: str


class HandoffBrief(_Shape):
    """What the person picking it up reads first, built by code from what is stored (handoffs/brief.py), never by
    the model. An MCP call's hand-off (no conversation) has the customer and the reason only."""

    customerId: int
    reason: str
    orders: list[int] = Field(..., description="The orders the conversation's tool calls and refunds named")
    invoices: list[int | str] = Field(..., description="The invoices its list_invoices calls returned")
    refunds: list[BriefRefund]
    lastMessages: list[BriefMessage] = Field(..., description="The last 6 messages with text, oldest first")

    @classmethod
    def of(cls, source: Any, **given: Any) -> Self:
        return super().of(
            source,
            refunds=[BriefRefund.of(r) for r in source.refunds],
            lastMessages=[BriefMessage.of(m) for m in source.last_messages],
            **given,
        )


class Handoff(_Shape):
    handoffId: str
    status: Literal["OPEN", "ASSIGNED", "CLOSED"] | None
    customerId: int | None
    conversationId: str | None = Field(..., description="null for an MCP call's hand-off: it stays a ticket")
    reason: str | None
    createdAt: str | None
    assignee: str | None = Field(..., description="ASSIGNED: the sub of the person who answers the conversation")
    assigneeName: str | None = Field(..., description="The name the customer is shown for them")
    assignedAt: str | None
    closedBy: str | None
    closedAt: str | None
    closedAs: Literal["closed", "returned_to_bot"] | None = Field(
        ..., description="CLOSED: closed, or handed back to the bot (`POST /api/handoffs/{id}/return`)"
    )
    brief: HandoffBrief

    @classmethod
    def of(cls, source: Any, **given: Any) -> Self:
        """``brief``: the hand-off's `handoffs.brief.Brief`, given (it is read from other stores)."""
        return super().of(source, brief=HandoffBrief.of(given.pop("brief")), **given)


class HandoffList(_Shape):
    handoffs: list[Handoff]
    nextToken: str | None


class PersonReply(_Shape):
    """201: a person's reply, stored in the conversation (and in its event feed) as a message of role person."""

    handoffId: str
    conversationId: str
    seq: int = Field(..., description="Its place in the conversation, in order with the customer's messages")
    role: Literal["person"]
    author: str = Field(..., description="The display name the customer sees")
    text: str
    createdAt: str


class AuditRecord(_Shape):
    eventId: str | None
    stream: str | None = Field(None, description="The row's stream: a conversation, approval#, handoff#, refund#, …")
    n: int | None = Field(None, description="The row's position in its stream's hash chain (null: before the chain)")
    action: str | None
    tool: str | None
    input: Any
    output: Any
    outcome: str | None
    actor: str | None
    conversationId: str | None
    approvalId: str | None
    handoffId: str | None = None
    refundKey: str | None = None
    proposalId: str | None = Field(None, description="An action the customer confirms: its proposal's stream")
    policyVersion: int | None = Field(None, description="The support policy's version the decision applied")
    customerId: int | None
    requestId: str | None
    createdAt: str | None


class AuditPage(_Shape):
    records: list[AuditRecord]
    nextToken: str | None


class AuditBreak(_Shape):
    eventId: str | None = Field(..., description="The row where the chain first fails (null: no row to name)")
    kind: Literal["changed", "missing", "inserted", "reordered"]
    stream: str | None = Field(None, description="Overall answer only: the stream that broke")


class AuditStreamCheck(_Shape):
    stream: str
    rows: int
    status: Literal["ok", "broken"]
    firstBreak: AuditBreak | None
    chainStartsAt: int | None = Field(..., description="n of the stream's first hashed row (null: none)")
    unchained: int = Field(..., description="Rows written before the chain began (not covered by it)")
    sealedAt: str | None = Field(..., description="When the head was last sealed to S3 (null: not sealed)")
    sealedThrough: int | None = Field(
        ..., description="n of the latest sealed head; rows after it rest on the owner's head until sealed"
    )
    redacted: list[str] = Field(
        ...,
        description="Event ids of rows carrying `redacted_at` (overall: of every stream). No redaction record "
        "authorises one yet, so each chained one is also a break (`changed`)",
    )


class AuditVerification(AuditStreamCheck):
    """The stream asked for (its own fields), ``status`` broken when it or any stream it names is, and
    ``firstBreak`` the first break found among them; ``streams`` each stream's own answer, it first."""

    streams: list[AuditStreamCheck]


class ErasureResult(_Shape):
    customerId: int
    conversations: int = Field(..., ge=0, description="Conversations erased by this call")
    messages: int = Field(..., ge=0, description="Messages whose content was replaced by tombstones")
    skipped: list[str] = Field(..., description="Conversations with a turn in progress: call again to finish")
    complete: bool
    auditEventId: str = Field(..., description="The customer_erased audit row")
