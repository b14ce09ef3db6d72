"""Customer routes: a chat turn and the customer's own conversations."""

from __future__ import annotations

import time
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, ConfigDict, Field

from support_agent.agent.handover import HandedOver, HandOver
from support_agent.api import pagination
from support_agent.api.contract import error_body, status_and_code
from support_agent.api.http import json_response
from support_agent.api.route_docs import json_body, responses
from support_agent.api.views import conversation_summary, conversation_view, turn_body, turn_view
from support_agent.auth import require_customer
from support_agent.clock import utc_now
from support_agent.errors import Conflict, InvalidRequest, NotFound, ServiceError, TooLarge
from support_agent.ids import CONVERSATION_ID, new_conversation_id
from support_agent.messages import Deadline
from support_agent.payments.vocabulary import customer_status
from support_agent.store.turns import IDEMPOTENCY_KEY, Turn, fingerprint
from support_agent.wiring import ChatServices, chat_services

router = APIGatewayHttpRouter()

# Exactly the characters str.isspace() counts as whitespace, so the schema and the route agree.
NOT_BLANK = "[^\\t\\n\\v\\f\\r \\x1c-\\x1f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"


class ChatRequest(BaseModel):
    # Identity never comes from the body: unknown fields such as customerId are refused.
    model_config = ConfigDict(extra="forbid")
    conversationId: str | None = Field(None, pattern=CONVERSATION_ID.pattern)
    # Not blank, stated in the schema: at least one character that str.strip() would keep.
    message: str = Field(..., min_length=1, pattern=NOT_BLANK)


READS = "At most READS_PER_MINUTE reads of conversations per customer per minute (429 `rate_limited`)."


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
            "description": "The turn goes on in the worker (or a resend while it runs): its record is at Location",
            "content": json_body("TurnRunning"),
        },
    },
    tags=["customer"],
)
def chat(body: ChatRequest) -> Any:
    services = chat_services()
    s = services.settings
    sync = Deadline.after(s.sync_turn_seconds)  # the synchronous part's time, from the request's start
    customer_id = require_customer(_principal())
    if not body.message.strip():
        raise InvalidRequest("message: must not be blank")
    if len(body.message) > s.max_message_chars:
        raise TooLarge(f"message is longer than {s.max_message_chars} characters")
    event = router.current_event
    key = (event.headers or {}).get("idempotency-key")
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise InvalidRequest("Idempotency-Key: 1 to 255 visible ASCII characters")
    print_ = fingerprint(body.conversationId, body.message)
    now_epoch = int(time.time())
    if key is not None:  # before the rate limit: a resend costs no token and runs nothing
        existing = services.turns.by_key(customer_id, key, print_, now_epoch)
        if existing is not None:
            return replay(existing, now_epoch)
    services.limiter.take(customer_id)  # before the lease and the model: a refused turn costs nothing
    request_id = event.request_context.request_id or "local"
    new_id = None if body.conversationId else new_conversation_id()
    claim = services.turns.claim(
        customer_id,
        _principal().sub,
        key,
        print_,
        body.conversationId or str(new_id),
        new_id is not None,
        body.message,
        now=utc_now(),
        now_epoch=now_epoch,
        running_seconds=int(s.turn_deadline_seconds) + s.lease_seconds,
    )
    if claim.turn is None:  # a concurrent request with this key claimed it first
        assert claim.existing is not None
        return replay(claim.existing, now_epoch)
    turn = claim.turn
    stored: list[bool] = []
    handover = _handover(services, turn, sync, event.headers or {})
    try:
        result = services.agent.run_turn(
            _principal(),
            customer_id,
            body.conversationId,
            body.message,
            request_id,
            _deadline(router.lambda_context, s.turn_deadline_seconds, s.persist_reserve_seconds),
            new_id=new_id,
            stored=lambda: stored.append(True),
            handover=handover,
            turn_id=turn.turn_id,
        )
    except HandedOver:  # the worker finishes it: its record says when (Location)
        return _running(turn, {"Preference-Applied": "respond-async"} if handover and handover.at_once else {})
    except ServiceError as exc:
        status, _code = status_and_code(exc)
        if stored:  # the history moved: a resend gets this answer, not a second turn
            services.turns.finish(turn, status, error_body(exc), utc_now())
        else:  # refused before anything was stored: the key is free again
            services.turns.release(turn, key, status, error_body(exc), utc_now())
        raise
    out = turn_body(result, turn.turn_id, s.transparency == "verbose")
    services.turns.finish(turn, 200, out, utc_now())
    return out


def _handover(services: ChatServices, turn: Turn, sync: Deadline, headers: dict[str, str]) -> HandOver | None:
    """How this turn is handed to the worker when its next model call would not fit (None: no queue)."""
    s = services.settings
    if not s.turn_queue_url:
        return None
    prefer = {p.strip().split("=", 1)[0].lower() for p in headers.get("prefer", "").split(",")}
    return HandOver(
        services.turns,
        services.conversations,
        services.sqs,
        s.turn_queue_url,
        turn,
        sync,
        s.model_call_budget_seconds,
        at_once="respond-async" in prefer,
        lease_seconds=s.lease_seconds,
        running_seconds=int(s.turn_max_seconds) + 2 * s.lease_seconds,
    )


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


def replay(turn: Turn, now_epoch: int) -> Response[Any]:
    """The answer a resend gets: the turn's own answer again, or 202 while it runs."""
    if turn.status == "running" and not turn.interrupted(now_epoch):
        return _running(turn, {"Idempotent-Replayed": "true"})
    if turn.status == "running":  # its function died mid-turn; the next turn's repair answers what it left open
        raise Conflict("the turn with this Idempotency-Key was interrupted; send the message again with a new key")
    return json_response(turn.response_status or 500, turn.response or {}, {"Idempotent-Replayed": "true"})


@router.get(
    "/api/conversations/<conversation_id>/turns/<turn_id>",
    summary="A turn's status, and its answer once it completed",
    description=READS,
    responses=responses("TurnView", 401, 403, 404, 429),
    tags=["customer"],
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


@router.get(
    "/api/conversations",
    summary="List my conversations, newest first",
    description=READS,
    responses=responses("ConversationList", 400, 401, 403, 429),
    tags=["customer"],
)
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


@router.get(
    "/api/conversations/<conversation_id>",
    summary="Read one of my conversations",
    description=READS + " Tool inputs and results only when TRANSPARENCY=verbose.",
    responses=responses("ConversationView", 401, 403, 404, 429),
    tags=["customer"],
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
    return conversation_view(header, messages, refunds, tools=services.settings.transparency == "verbose")


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


@router.get("/api/health", summary="Liveness", responses=responses("Health"), tags=["public"])
def health() -> dict[str, Any]:
    return {"status": "ok"}
