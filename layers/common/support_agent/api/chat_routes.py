"""Customer routes: a chat turn, the customer's own conversations, and their Confirm or Decline of a proposed action.

A turn's route keeps only HTTP (the body, the token, the Idempotency-Key and Prefer headers, the status and the
body of the answer); its lifecycle, claim to end, is agent/lifecycle.py's, as the worker's is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from support_agent.agent.lifecycle import Answered, Ask, Kept, Running, TurnLifecycle
from support_agent.api import pagination
from support_agent.api.http import json_response
from support_agent.api.route_docs import json_body, responses
from support_agent.api.views import conversation_summary, conversation_view, proposal_view, turn_view
from support_agent.auth import require_customer
from support_agent.clock import utc_now
from support_agent.errors import InvalidRequest, NotFound, TooLarge
from support_agent.ids import CONVERSATION_ID
from support_agent.messages import NOT_BLANK, Deadline
from support_agent.refunds.vocabulary import customer_status
from support_agent.store.ratings import COMMENT_MAX_CHARS
from support_agent.store.turns import IDEMPOTENCY_KEY, TURN_ID, Turn
from support_agent.wiring import ChatServices, chat_services

router = APIGatewayHttpRouter()


class ChatRequest(BaseModel):
    # Identity never comes from the body: unknown fields such as customerId are refused.
    model_config = ConfigDict(extra="forbid")
    conversationId: str | None = Field(None, pattern=CONVERSATION_ID.pattern)
    # Not blank, stated in the schema: at least one character that str.strip() would keep.
    message: str = Field(..., min_length=1, pattern=NOT_BLANK)


READS = "At most READS_PER_MINUTE reads of conversations per customer per minute (429 `rate_limited`)."
_Route = TypeVar("_Route", bound=Callable[..., Any])


def _read(path: str, summary: str, model: str, errors: tuple[int, ...], more: str = "") -> Callable[[_Route], _Route]:
    """GET ``path``, a customer's read (counted against READS_PER_MINUTE); ``more`` adds to its description."""
    return router.get(
        path, summary=summary, description=READS + more, responses=responses(model, *errors), tags=["customer"]
    )


def _principal() -> Any:
    from support_agent.api.http import principal

    return principal(router)  # type: ignore[arg-type]


def _deadline(context: Any, limit: float, reserve: float) -> Deadline:
    seconds = limit
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining_ms):
        seconds = min(seconds, remaining_ms() / 1000)
    return Deadline.after(seconds - reserve)


@router.post(
    "/api/chat",
    summary="Run one chat turn",
    description=(
        "The customer comes from the token, never the body. At most TURNS_PER_MINUTE turns per customer "
        "per minute (429 `rate_limited`); one turn at a time per conversation (409). With an `Idempotency-Key` "
        "(1 to 255 visible ASCII characters, kept 24 hours per customer) a resent request gets the turn's answer "
        "again (`Idempotent-Replayed: true`; 202 while it still runs) without running it twice; the same key with "
        "another body is a 422 `idempotency_key_reused`. A turn whose next model call would not fit in "
        "SYNC_TURN_SECONDS (or any turn, with `Prefer: respond-async`) goes on in the worker: 202 with `Location`, "
        "the turn's record."
    ),
    responses={
        **responses("ChatResponse", 400, 401, 403, 404, 409, 413, 422, 429, 502, 503),
        202: {
            "description": "The turn goes on in the worker (or a resend while it runs): its record is at Location. "
            "Or no turn ran: a person answers the conversation (`owner: person`, its hand-off is open), the message "
            "is stored for them, and their reply arrives in the event feed (no Location, no turnId)",
            "content": json_body("ChatAccepted"),
        },
    },
    tags=["customer"],
)
def chat(body: ChatRequest) -> Any:
    services = chat_services()
    s = services.settings
    sync = Deadline.after(s.sync_turn_seconds)  # the synchronous part's time, from the request's start
    principal = _principal()
    customer_id = require_customer(principal)
    if not body.message.strip():
        raise InvalidRequest("message: must not be blank")
    if len(body.message) > s.max_message_chars:
        raise TooLarge(f"message is longer than {s.max_message_chars} characters")
    event = router.current_event
    headers = event.headers or {}
    key = headers.get("idempotency-key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise InvalidRequest("Idempotency-Key: 1 to 255 visible ASCII characters")
    prefer = {p.strip().split("=", 1)[0].lower() for p in headers.get("prefer", "").split(",")}
    ask = Ask(
        principal,
        customer_id,
        body.conversationId,
        body.message,
        event.request_context.request_id or "local",
        key=key,
        at_once="respond-async" in prefer,
    )
    deadline = _deadline(router.lambda_context, s.turn_deadline_seconds, s.persist_reserve_seconds)
    started = _lifecycle(services).start(ask, sync, deadline)
    if isinstance(started, Answered):
        return started.body
    if isinstance(started, Kept):  # a person answers: no turn, so no turnId and no Location to poll
        return json_response(202, started.body)
    if isinstance(started, Running):
        return _running(started.turn, {"Preference-Applied": "respond-async"} if started.asked else {})
    return replay(started.turn)


def _lifecycle(svc: ChatServices) -> TurnLifecycle:
    return TurnLifecycle(svc.settings, svc.agent, svc.turns, svc.conversations, limiter=svc.limiter, sqs=svc.sqs)


def _running(turn: Turn, headers: dict[str, str]) -> Response[Any]:
    """202: the turn goes on; ``Location`` is its record, ``eventsUrl`` the feed that shows its steps."""
    body = {
        "conversationId": turn.conversation_id,
        "turnId": turn.turn_id,
        "status": "running",
        "eventsUrl": f"/api/conversations/{turn.conversation_id}/events",
    }
    location = f"/api/conversations/{turn.conversation_id}/turns/{turn.turn_id}"
    return json_response(202, body, {"Location": location, **headers})


def replay(turn: Turn) -> Response[Any]:
    """The answer a resend gets: 202 while its turn runs, else the turn's own answer again."""
    if turn.status == "running":
        return _running(turn, {"Idempotent-Replayed": "true"})
    return json_response(turn.response_status or 500, turn.response or {}, {"Idempotent-Replayed": "true"})


@_read(
    "/api/conversations/<conversation_id>/turns/<turn_id>",
    "A turn's status, and its answer once it completed",
    "TurnView",
    (401, 403, 404, 429),
)
def get_turn(conversation_id: str, turn_id: str) -> dict[str, Any]:
    services = chat_services()
    customer_id = _reader(services)
    turn = services.turns.get(conversation_id, turn_id) if CONVERSATION_ID.match(conversation_id) else None
    if turn is None or turn.customer_id != customer_id:
        raise NotFound("turn not found")
    return turn_view(turn, int(time.time()))


def _reader(services: ChatServices) -> int:
    """The customer reading, counted against their read limit before any query runs."""
    customer_id = require_customer(_principal())
    services.read_limiter.take(customer_id)
    return customer_id


@_read("/api/conversations", "List my conversations, newest first", "ConversationList", (400, 401, 403, 429))
def list_conversations(
    nextToken: Annotated[str | None, Query(max_length=2048)] = None,
) -> dict[str, Any]:
    services = chat_services()
    customer_id = _reader(services)
    headers, last = pagination.page(
        nextToken,
        lambda start: services.conversations.list_for_customer(customer_id, start_key=start),
        lambda k: k.get("customer_id") == {"N": str(customer_id)},
    )
    return {
        "conversations": [conversation_summary(h) for h in headers if h.customer_id == customer_id],
        "nextToken": pagination.encode(last),
    }


@_read(
    "/api/conversations/<conversation_id>",
    "Read one of my conversations",
    "ConversationView",
    (401, 403, 404, 429),
    more=" Tool inputs and results only when TRANSPARENCY=verbose.",
)
def get_conversation(conversation_id: str) -> dict[str, Any]:
    services = chat_services()
    customer_id = _reader(services)
    header = services.conversations.get_header(conversation_id) if CONVERSATION_ID.match(conversation_id) else None
    if header is None or header.customer_id != customer_id:
        raise NotFound("conversation not found")
    messages = services.conversations.load(conversation_id)
    refunds = [
        _refund_summary(services, row) for row in services.customer_data.refund_requests(customer_id, conversation_id)
    ]
    verbose, now = services.settings.transparency == "verbose", utc_now()
    proposals = [proposal_view(p, now, tools=verbose) for p in services.proposals.list(customer_id, conversation_id)]
    ratings = services.ratings.ratings(conversation_id)
    return conversation_view(header, messages, refunds, tools=verbose, proposals=proposals, ratings=ratings)


def _refund_summary(services: ChatServices, row: dict[str, Any]) -> dict[str, Any]:
    """One refund of the conversation in the customers' vocabulary: an approval request reads its approval (the
    request row keeps only what was asked), a direct refund is its own ledger row."""
    status, refund_id = row.get("status"), row.get("refund_id")
    if row.get("approval_id"):
        approval = services.approvals.get(row["approval_id"])
        if approval is not None:
            status, refund_id = approval.status, approval.refund_id
        else:
            refund_id = None
    return {
        "approvalId": row.get("approval_id"),
        "refundId": refund_id or None,
        "orderId": row.get("order_id"),
        "amountCents": row.get("amount_cents"),
        "currency": row.get("currency"),
        "status": customer_status(status),
    }


DECIDE = (
    "The customer's own decision on an action the assistant proposed (docs/API.md, proposals): only this request, "
    "with the customer's token, carries one out; no tool can. Answered with the proposal as it now is; a decided "
    "proposal is answered with its recorded outcome (a second confirm returns the first, nothing runs twice). 404: "
    "unknown, or not the caller's conversation; 409 `conflict`: it expired. Counted against TURNS_PER_MINUTE, as a "
    "message is (429 `rate_limited`)."
)


def _decision(verb: str, summary: str, more: str) -> Callable[[_Route], _Route]:
    return router.post(
        f"/api/conversations/<conversation_id>/proposals/<proposal_id>/{verb}",
        summary=summary,
        description=f"{DECIDE} {more}",
        responses=responses("ProposalView", 401, 403, 404, 409, 429),
        tags=["customer"],
    )


@_decision("confirm", "Confirm an action proposed to me", "Confirming checks it again under the current policy.")
def confirm_proposal(conversation_id: str, proposal_id: str) -> dict[str, Any]:
    return _decide("confirm", conversation_id, proposal_id)


@_decision("decline", "Decline an action proposed to me", "Declining changes nothing.")
def decline_proposal(conversation_id: str, proposal_id: str) -> dict[str, Any]:
    return _decide("decline", conversation_id, proposal_id)


def _decide(verb: str, conversation_id: str, proposal_id: str) -> dict[str, Any]:
    """The customer's Confirm or Decline, through the proposals desk: the caller must own the conversation (another
    customer's reads as unknown), and the desk checks the proposal is of it and theirs."""
    services = chat_services()
    principal = _principal()
    customer_id = require_customer(principal)
    services.limiter.take(customer_id)
    header = services.conversations.get_header(conversation_id) if CONVERSATION_ID.match(conversation_id) else None
    if header is None or header.customer_id != customer_id:
        raise NotFound("proposal not found")
    desk, now = services.proposals, utc_now()
    decide = desk.confirm if verb == "confirm" else desk.decline
    proposal = decide(principal, conversation_id, proposal_id, now)  # ProposalNotFound: 404, ProposalExpired: 409
    return proposal_view(proposal, now, tools=services.settings.transparency == "verbose")


class ThumbBody(BaseModel):
    """A thumb on one answer of the conversation, named by its turn id."""

    model_config = ConfigDict(extra="forbid")
    turnId: str = Field(..., pattern=TURN_ID.pattern)
    thumb: Literal["up", "down"]


def _whole(value: Any) -> Any:
    """JSON Schema's integer: 4.0 is one (a client's float formatting), 4.5 is not; true and "4" stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class ClosingBody(BaseModel):
    """The closing rating: a score 1..5 and an optional short comment (stripped)."""

    model_config = ConfigDict(extra="forbid")
    score: Annotated[int, BeforeValidator(_whole), Field(ge=1, le=5, strict=True)]
    comment: Annotated[str, StringConstraints(strip_whitespace=True, max_length=COMMENT_MAX_CHARS)] = ""


class RatingView(BaseModel):
    """What is stored: a thumb (turnId, thumb) or the closing rating (score, comment)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    conversationId: str
    turnId: str | None = Field(None, description="A thumb's answer; null for the closing rating")
    thumb: Literal["up", "down"] | None = None
    score: int | None = Field(None, description="The closing rating's score, 1..5; null for a thumb")
    comment: str | None = Field(None, description='The closing rating\'s comment ("" when none); null for a thumb')
    ratedAt: str


RATE = (
    "The customer's thumb on one answer (`turnId` of a turn of this conversation that completed with an answer) "
    "or their closing rating of the conversation (`score` 1..5, `comment` of at most 500 characters, stripped): "
    "exactly one of the two forms, no other property (400). Idempotent per turn: the same thumb again leaves one "
    "rating, a changed one replaces it; a second closing rating replaces the first. 404: not the caller's "
    "conversation, or an unknown or unanswered turn. At most RATINGS_PER_MINUTE per customer per minute "
    "(429 `rate_limited`). Erased with the conversation."
)


@router.post(
    "/api/conversations/<conversation_id>/rating",
    summary="Rate an answer (thumb) or the whole conversation (score)",
    description=RATE,
    responses=responses(RatingView, 400, 401, 403, 404, 429),
    tags=["customer"],
)
def rate(conversation_id: str, body: ThumbBody | ClosingBody) -> dict[str, Any]:
    """Counted before any read, as a read is."""
    services = chat_services()
    customer_id = require_customer(_principal())
    services.rating_limiter.take(customer_id)
    header = services.conversations.get_header(conversation_id) if CONVERSATION_ID.match(conversation_id) else None
    if header is None or header.customer_id != customer_id:
        raise NotFound("conversation not found")
    store, now = services.ratings, utc_now()
    view: dict[str, Any] = {"conversationId": conversation_id, "turnId": None, "thumb": None, "score": None}
    if isinstance(body, ThumbBody):
        turn = services.turns.get(conversation_id, body.turnId)
        if turn is None or turn.customer_id != customer_id or turn.status != "completed":
            raise NotFound("turn not found, or it has no answer")
        thumb = store.put_thumb(conversation_id, body.turnId, body.thumb, now)
        view.update(turnId=thumb.turn_id, thumb=thumb.thumb, comment=None, ratedAt=thumb.rated_at)
    else:
        closing = store.put_closing(conversation_id, body.score, body.comment, now)
        view.update(score=closing.score, comment=closing.comment, ratedAt=closing.rated_at)
    store.request_revision(conversation_id, int(time.time()))  # the outcome, if stored already, is derived again
    return view


@router.get("/api/health", summary="Liveness", responses=responses("Health"), tags=["public"])
def health() -> dict[str, Any]:
    return {"status": "ok"}
