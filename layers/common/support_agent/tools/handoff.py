"""escalate_to_human: the customer wants a person. One open ticket per conversation (per customer for MCP calls)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.store.audit import Streams
from support_agent.store.handoffs import HandoffStore
from support_agent.tools.registry import Tool, ToolContext


class EscalateInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(..., min_length=1, max_length=500, description="Why the customer needs a person.")


def _view(handoff_id: str, created: bool, origin: str = "chat") -> dict[str, Any]:
    # An MCP call has no conversation of ours to follow up in: the ticket names the customer.
    where = "with the customer" if origin == "mcp" else "with the customer in this conversation"
    return {
        "status": "HANDOFF_OPENED" if created else "HANDOFF_ALREADY_OPEN",
        "handoff_id": handoff_id,
        "message": f"A support teammate will follow up {where}.",
    }


def _streams(result: dict[str, Any], ctx: ToolContext) -> Streams:
    """The ticket's stream (``handoff#<id>``): the one this call opened, or the one already open."""
    return Streams(handoff_id=result["handoff_id"])


def handoff_tools(store: HandoffStore) -> list[Tool[Any]]:
    def recorded(ctx: ToolContext) -> dict[str, Any] | None:
        # The per-call record, not the open ticket: a lead may have closed it since.
        handoff_id = store.opened_by(ctx.conversation_id, ctx.seq, ctx.tool_use_id)
        return None if handoff_id is None else _view(handoff_id, True, ctx.origin)

    def escalate(args: EscalateInput, ctx: ToolContext) -> dict[str, Any]:
        prior = recorded(ctx)
        if prior is not None:
            return prior
        ticket, created = store.open(
            ctx.conversation_id,
            ctx.seq,
            ctx.customer_id,
            args.reason,
            ctx.principal.sub,
            ctx.tool_use_id,
            ctx.request_id,
            ctx.now,
            holder=f"mcp#{ctx.customer_id}" if ctx.origin == "mcp" else None,  # no conversation: the customer's
        )
        return _view(ticket.handoff_id, created, ctx.origin)

    return [
        Tool(
            "escalate_to_human",
            "Hand the conversation to a human support teammate. Use it when the customer asks for a "
            "person, or when you cannot resolve the request with the other tools. Then tell the "
            "customer a teammate will follow up.",
            EscalateInput,
            escalate,
            recorded=recorded,
            streams=_streams,
        )
    ]
