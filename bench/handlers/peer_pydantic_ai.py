"""A minimal support agent on pydantic-ai (Anthropic provider) + boto3."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import peer_common as common
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

model = AnthropicModel(common.MODEL, provider=AnthropicProvider(api_key=common.API_KEY, base_url=common.BASE_URL))
agent = Agent(model, system_prompt=common.SYSTEM)


@agent.tool_plain
def lookup_order(order_id: int) -> dict:
    """Look up one of the signed-in customer's orders by its numeric id."""
    return common.lookup_order(order_id)


@agent.tool_plain
def list_invoices(order_id: int | None = None) -> dict:
    """List the signed-in customer's invoices, optionally only those of one order."""
    return common.list_invoices(order_id)


def run(message: str) -> str:
    return str(agent.run_sync(message).output)


def handler(event: dict, context: object) -> dict:
    return common.ok(run(common.message_of(event)))
