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


agent.tool_plain(common.lookup_order)
agent.tool_plain(common.list_invoices)


def run(message: str) -> str:
    return str(agent.run_sync(message).output)


def handler(event: dict, context: object) -> dict:
    return common.ok(run(common.message_of(event)))
