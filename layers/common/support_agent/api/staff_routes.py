"""The support inbox: hand-offs listed with their briefs, claimed, answered by a person, handed back or closed.

Served by ApprovalsFunction beside the lead routes (functions/approvals/app.py). Support staff and leads call
these (`require_staff`; a lead has every right staff have, and a few more: reassigning, closing an OPEN
hand-off, reading any hand-off's conversation); a customer gets 403 on every one. Staff see the queue (OPEN)
and the hand-offs they hold, nothing else of customers' data: any other hand-off is a 404 to them, as a
conversation that is not theirs is to a customer. Who may change what is store/takeover.py's to decide; this
module keeps HTTP (the bodies, the Idempotency-Key header, the statuses).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, ConfigDict, Field

from support_agent.api import pagination
from support_agent.api.http import JSON, principal
from support_agent.api.responses import Handoff, HandoffList, PersonReply
from support_agent.api.route_docs import responses
from support_agent.api.views import conversation_view
from support_agent.auth import MAX_NAME_CHARS, Principal, require_role, require_staff
from support_agent.errors import InvalidRequest, NotFound, NotPermitted, TooLarge
from support_agent.messages import NOT_BLANK
from support_agent.store.handoffs import Handoff as Ticket
from support_agent.store.turns import IDEMPOTENCY_KEY
from support_agent.wiring import LeadServices, lead_services

router = APIGatewayHttpRouter()

_STAFF = ["support staff"]
_Route = TypeVar("_Route", bound=Callable[..., Any])
_NextToken = Annotated[str | None, Query(max_length=4096)]


class CloseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(None, max_length=500)


class ReturnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(
        None,
        max_length=2000,
        description="Context for the bot's next turns (its system prompt, never the customer's words)",
    )


class ReassignRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    assignee: str = Field(..., min_length=1, max_length=256, description="The staff member's sub (JWT `sub`)")
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME_CHARS, description="Shown to the customer")


class ReplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(..., min_length=1, pattern=NOT_BLANK)


def _created(model: type[BaseModel], description: str, *errors: int) -> dict[int, Any]:
    """``responses`` with 201 (created) in place of 200."""
    return {
        201 if status == 200 else status: r for status, r in responses(model, *errors, description=description).items()
    }


def _staff() -> Principal:
    p = principal(router)  # type: ignore[arg-type]
    require_staff(p)
    return p


def _view(services: LeadServices, ticket: Ticket) -> Handoff:
    return Handoff.of(ticket, brief=services.briefs.of(ticket))


def _change(verb: str, summary: str, *errors: int, description: str | None = None) -> Callable[[_Route], _Route]:
    """POST /api/handoffs/{id}/<verb>: a change of who answers; answers the hand-off as it is now."""
    return router.post(
        f"/api/handoffs/<handoff_id>/{verb}",
        summary=summary,
        description=description,
        responses=responses(Handoff, 400, 401, 403, 404, *errors),
        tags=_STAFF,
    )


@router.get(
    "/api/handoffs",
    summary="The support inbox: hand-offs with their briefs, newest first",
    description=(
        "`status` OPEN (the queue, the default), ASSIGNED or CLOSED; `assignee=me`: only those the caller holds. "
        "Support staff see the queue and the hand-offs they hold (ASSIGNED is always only theirs); CLOSED is a "
        "lead's list (403 for staff). Each carries its `brief`, built from what is stored, never by the model."
    ),
    responses=responses(HandoffList, 400, 401, 403),
    tags=_STAFF,
)
def list_handoffs(
    status: Annotated[Literal["OPEN", "ASSIGNED", "CLOSED"], Query()] = "OPEN",
    assignee: Annotated[Literal["me"] | None, Query(description="`me`: the hand-offs the caller holds")] = None,
    nextToken: _NextToken = None,
) -> HandoffList:
    p = _staff()
    lead = p.role == "support_lead"
    if status == "CLOSED" and not lead:
        raise NotPermitted("only a support lead lists closed hand-offs")
    holder = p.sub if assignee == "me" or (status == "ASSIGNED" and not lead) else None
    services = lead_services()
    page = pagination.page(nextToken, lambda start: services.handoffs.list(status, start_key=start, assignee=holder))
    return HandoffList(handoffs=[_view(services, t) for t in page.items], nextToken=pagination.encode(page.next_key))


@router.get(
    "/api/handoffs/<handoff_id>",
    summary="A hand-off with its brief",
    description="Staff: an OPEN one, or one they hold (else 404); a lead: any.",
    responses=responses(Handoff, 401, 403, 404),
    tags=_STAFF,
)
def get_handoff(handoff_id: str) -> Handoff:
    p = _staff()
    services = lead_services()
    ticket = services.handoffs.get(handoff_id)
    if ticket is None or not _may_read(p, ticket):
        raise NotFound("hand-off not found")
    return _view(services, ticket)


def _may_read(p: Principal, ticket: Ticket) -> bool:
    """A lead reads any hand-off; staff the queue's and their own."""
    return (
        p.role == "support_lead"
        or ticket.status == "OPEN"
        or (ticket.status == "ASSIGNED" and ticket.assignee == p.sub)
    )


@_change(
    "claim",
    "Take a hand-off: the caller answers its conversation from now on",
    409,
    description="OPEN → ASSIGNED to the caller, the customer's feed says who joined (`handoff.assigned`). Of "
    "concurrent claims one wins; the others, and a claim of a hand-off not OPEN, are 409. An MCP call's hand-off "
    "(no conversation) is a ticket only: 409.",
)
def claim(handoff_id: str) -> Handoff:
    p = _staff()
    services = lead_services()
    return _view(services, services.takeover.claim(handoff_id, p, services.now()))


@_change(
    "release",
    "Put a held hand-off back in the queue",
    409,
    description="ASSIGNED → OPEN, by its holder or a lead (else 403); the bot stays paused until someone claims "
    "it and hands it back, or it is closed.",
)
def release(handoff_id: str) -> Handoff:
    p = _staff()
    services = lead_services()
    return _view(services, services.takeover.release(handoff_id, p, services.now()))


@_change(
    "reassign",
    "Give a hand-off to a staff member (a lead only)",
    409,
    description="OPEN or ASSIGNED → ASSIGNED to `assignee` (their sub), shown to the customer as `name` (else the "
    "sub). 403 for anyone but a lead.",
)
def reassign(handoff_id: str, body: ReassignRequest) -> Handoff:
    p = _staff()
    require_role(p, "support_lead")
    services = lead_services()
    return _view(services, services.takeover.reassign(handoff_id, p, body.assignee, body.name, services.now()))


@_change(
    "return",
    "Hand the conversation back to the bot",
    409,
    description="ASSIGNED → CLOSED (`closedAs` returned_to_bot), by its holder or a lead: the bot answers the "
    "customer's next message, with the person's replies in its history and `note` as staff context in its system "
    "prompt (never as the customer's words).",
)
def hand_back(handoff_id: str, body: ReturnRequest | None = None) -> Handoff:
    p = _staff()
    services = lead_services()
    note = body.note if body else None
    return _view(services, services.takeover.hand_back(handoff_id, p, services.now(), note))


@_change(
    "close",
    "Close a hand-off",
    409,
    description="OPEN (a lead) or ASSIGNED (its holder, or a lead) → CLOSED (`closedAs` closed); the customer's "
    "next message goes to the bot. An MCP call's hand-off (a ticket, no conversation) closes the same way. The "
    "note is audited by its hash and length.",
)
def close_handoff(handoff_id: str, body: CloseRequest | None = None) -> Handoff:
    p = _staff()
    services = lead_services()
    return _view(services, services.takeover.close(handoff_id, p, services.now(), body.note if body else None))


@router.post(
    "/api/handoffs/<handoff_id>/messages",
    summary="Reply to the customer, as the person holding the hand-off",
    description=(
        "Stored in the conversation as a message of role `person` with the author's display name, in order with "
        "the customer's, and in its event feed at once; audited by hash and length, never its text. Only the "
        "person holding it replies (403 for anyone else, a lead included; 409 when it is not ASSIGNED). "
        "The message's limits are /api/chat's: not blank, at most MAX_MESSAGE_CHARS (413). With an "
        "`Idempotency-Key` (1 to 255 visible ASCII characters, kept 24 hours per hand-off) a resend is answered "
        "201 again with `Idempotent-Replayed: true` and stores nothing; the same key with another message is a "
        "422 `idempotency_key_reused`. 409 while a bot turn is finishing on the conversation: send it again."
    ),
    responses=_created(PersonReply, "Stored (or, a resend, stored before)", 400, 401, 403, 404, 409, 413, 422),
    tags=_STAFF,
)
def reply(handoff_id: str, body: ReplyRequest) -> Response[PersonReply]:
    p = _staff()
    services = lead_services()
    if not body.message.strip():
        raise InvalidRequest("message: must not be blank")
    if len(body.message) > services.settings.max_message_chars:
        raise TooLarge(f"message is longer than {services.settings.max_message_chars} characters")
    key = (router.current_event.headers or {}).get("idempotency-key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise InvalidRequest("Idempotency-Key: 1 to 255 visible ASCII characters")
    sent = services.takeover.reply(handoff_id, p, body.message, services.now(), key)
    message = sent.message
    out = PersonReply(
        handoffId=sent.handoff.handoff_id,
        conversationId=str(sent.handoff.conversation_id),
        seq=message.seq,
        role="person",
        author=message.author_name or message.author or p.display_name,
        text="".join(str(b.get("text", "")) for b in message.content if b.get("type") == "text"),
        createdAt=message.created_at,
    )
    headers = {"Idempotent-Replayed": "true"} if sent.replayed else {}
    return Response(201, JSON, out, headers=headers)


@router.get(
    "/api/handoffs/<handoff_id>/conversation",
    summary="The conversation of a hand-off the caller holds",
    description=(
        "The customer's view of it (fences removed; tool inputs and results only when TRANSPARENCY=verbose, as "
        "the customer reads it), with the refunds raised in it. 404 unless the caller holds the hand-off (a lead: "
        "any hand-off with a conversation)."
    ),
    responses=responses("ConversationView", 401, 403, 404),
    tags=_STAFF,
)
def conversation(handoff_id: str) -> dict[str, Any]:
    p = _staff()
    services = lead_services()
    ticket = services.takeover.held(handoff_id, p)
    transcript = services.briefs.transcript(ticket)
    if transcript is None:
        raise NotFound("hand-off not found")
    refunds = [
        {
            "approvalId": r.approval_id,
            "refundId": r.refund_id,
            "orderId": r.order_id,
            "amountCents": r.amount_cents,
            "currency": r.currency,
            "status": r.status,
        }
        for r in transcript.refunds
    ]
    verbose = services.settings.transparency == "verbose"
    return conversation_view(transcript.header, transcript.messages, refunds, tools=verbose)
