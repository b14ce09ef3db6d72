"""One real call to the Anthropic API through `AnthropicClient` (opt-in: needs ANTHROPIC_API_KEY).

Run with `pytest -m live tests/live`. Proves the request shape the unit tests validate offline is
also accepted by the real service, cache breakpoints included.
"""

from __future__ import annotations

import os

import pytest

from support_agent.llm.anthropic import AnthropicClient
from support_agent.llm.retry import RetryPolicy
from support_agent.messages import Deadline

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="ANTHROPIC_API_KEY is not set"),
]

TOOL = {
    "name": "lookup_order",
    "description": "Look up one of the signed-in customer's orders by its numeric id.",
    "input_schema": {
        "type": "object",
        "properties": {"order_id": {"type": "integer", "description": "The order number."}},
        "required": ["order_id"],
    },
}


def test_a_tiny_tool_call_round_trip() -> None:
    client = AnthropicClient(
        api_key=os.environ["ANTHROPIC_API_KEY"],
        model=os.environ.get("LIVE_MODEL_ID", "claude-haiku-4-5"),
        max_tokens=200,
        base_url=os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
        policy=RetryPolicy(max_retries=2),
    )
    try:
        response = client.create(
            "You are a customer-support agent. Use the tools to answer.",
            [{"role": "user", "content": "Where is my order 1042?"}],
            [TOOL],
            {"type": "any"},
            deadline=Deadline.after(60.0),
        )
    finally:
        client.close()
    assert response.stop_reason == "tool_use"
    (use,) = [b for b in response.tool_uses() if b["name"] == "lookup_order"][:1]
    assert use["id"].startswith("toolu_")
    assert use["input"] == {"order_id": 1042}
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.model
