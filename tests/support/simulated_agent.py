"""An agent run against the simulated model through the official ``anthropic`` SDK, as the loop runs one.

The shop's tools as offered to the model, and the loop itself: append the assistant's content, answer each
tool_use with a fenced tool_result, ask again until the model stops asking for tools. The tests of the
simulated model (its own flows, and an outside carrier's tracker) share it, so both drive it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anthropic.types import Message

from support_agent.agent.untrusted import fence

LOOKUP_ORDER: dict[str, Any] = {
    "name": "lookup_order",
    "description": "Look up one of the customer's orders.",
    "input_schema": {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]},
}
LIST_INVOICES: dict[str, Any] = {
    "name": "list_invoices",
    "description": "List the customer's invoices.",
    "input_schema": {"type": "object", "properties": {"order_id": {"type": "integer"}}},
}
REQUEST_REFUND: dict[str, Any] = {
    "name": "request_refund",
    "description": "Request a refund.",
    "input_schema": {
        "type": "object",
        "properties": {
            "order_id": {"type": "integer"},
            "amount_cents": {"type": "integer"},
            "reason": {"type": "string"},
        },
        "required": ["order_id", "amount_cents", "reason"],
    },
}
ESCALATE_TO_HUMAN: dict[str, Any] = {
    "name": "escalate_to_human",
    "description": "Hand the conversation to a person.",
    "input_schema": {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]},
}

Call = tuple[str, dict[str, Any]]
# A tool's result as the agent hands it back: (payload, is_error).
ToolRunner = Callable[[str, dict[str, Any]], tuple[Any, bool]]


def tool_uses(message: Message) -> list[Any]:
    return [b for b in message.content if b.type == "tool_use"]


def text_of(message: Message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def as_param(message: Message) -> dict[str, Any]:
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}


def agent_loop(
    ask: Callable[[list[dict[str, Any]]], Message],
    messages: list[dict[str, Any]],
    tools: ToolRunner,
    max_iterations: int = 6,
) -> tuple[list[Message], list[Call]]:
    """The responses and the tool calls in order; ``messages`` grows as history. ``ask`` sends the history."""
    responses: list[Message] = []
    calls: list[Call] = []
    for _ in range(max_iterations):
        response = ask(messages)
        responses.append(response)
        messages.append(as_param(response))
        uses = tool_uses(response)
        if response.stop_reason != "tool_use":
            assert not uses
            return responses, calls
        results = []
        for use in uses:
            calls.append((use.name, dict(use.input)))
            payload, is_error = tools(use.name, dict(use.input))
            results.append(
                {"type": "tool_result", "tool_use_id": use.id, "content": fence(payload, 4000), "is_error": is_error}
            )
        messages.append({"role": "user", "content": results})
    raise AssertionError("the simulated model never stopped calling tools")
