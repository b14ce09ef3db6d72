"""Customer routes: a chat turn and the customer's own conversations."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, ConfigDict, Field

from support_agent.api import pagination
from support_agent.api.responses import ChatResponse, ConversationList, ConversationView, Health, responses
from support_agent.api.views import conversation_summary, conversation_view
from support_agent.auth import require_customer
from support_agent.errors import InvalidRequest, NotFound, TooLarge
from support_agent.ids import CONVERSATION_ID
from support_agent.messages import Deadline
from support_agent.payments.vocabulary import customer_status
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
        "per minute (429 `rate_limited`); one turn at a time per conversation (409)."
    ),
    responses=responses(ChatResponse, 400, 401, 403, 404, 409, 413, 429, 502, 503),
    tags=["customer"],
)
def chat(body: ChatRequest) -> dict[str, Any]:
    services = chat_services()
    s = services.settings
    customer_id = require_customer(_principal())
    if not body.message.strip():
        raise InvalidRequest("message: must not be blank")
    if len(body.message) > s.max_message_chars:
        raise TooLarge(f"message is longer than {s.max_message_chars} characters")
    services.limiter.take(customer_id)  # before the lease and the model: a refused turn costs nothing
    event = router.current_event
    request_id = event.request_context.request_id or "local"
    result = services.agent.run_turn(
        _principal(),
        customer_id,
        body.conversationId,
        body.message,
        request_id,
        _deadline(router.lambda_context, s.turn_deadline_seconds, s.persist_reserve_seconds),
    )
    out: dict[str, Any] = {
        "conversationId": result.conversation_id,
        "reply": result.reply,
        "stopReason": result.stop_reason,
        "iterations": result.iterations,
        "inputTokens": result.usage.input_tokens,
        "outputTokens": result.usage.output_tokens,
        "cacheReadInputTokens": result.usage.cache_read_input_tokens,
        "cacheCreationInputTokens": result.usage.cache_creation_input_tokens,
    }
    if s.transparency == "verbose":
        out["trace"] = result.trace
    return out


READS = "At most READS_PER_MINUTE reads of conversations per customer per minute (429 `rate_limited`)."


def _reader(services: ChatServices) -> int:
    """The customer reading, counted against their read limit before any query runs."""
    customer_id = require_customer(_principal())
    services.read_limiter.take(customer_id)
    return customer_id


@router.get(
    "/api/conversations",
    summary="List my conversations, newest first",
    description=READS,
    responses=responses(ConversationList, 400, 401, 403, 429),
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
    responses=responses(ConversationView, 401, 403, 404, 429),
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
        approval = services.approvals.get(row["approval_id"]) or {}
        status, refund_id = approval.get("status", status), approval.get("refund_id")
    return {
        "approvalId": row.get("approval_id"),
        "refundId": refund_id or None,
        "orderId": row.get("order_id"),
        "amountCents": row.get("amount_cents"),
        "currency": row.get("currency"),
        "status": customer_status(status),
    }


@router.get("/api/health", summary="Liveness", responses=responses(Health), tags=["public"])
def health() -> dict[str, Any]:
    return {"status": "ok"}
