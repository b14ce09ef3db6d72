"""A minimal support agent on strands-agents (Anthropic model provider) + boto3."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import peer_common as common
from strands import Agent, tool
from strands.models.anthropic import AnthropicModel

lookup_order, list_invoices = tool(common.lookup_order), tool(common.list_invoices)


model = AnthropicModel(
    client_args={"api_key": common.API_KEY, "base_url": common.BASE_URL}, model_id=common.MODEL, max_tokens=1024
)


def run(message: str) -> str:
    agent = Agent(model=model, tools=[lookup_order, list_invoices], system_prompt=common.SYSTEM, callback_handler=None)
    return str(agent(message))


def handler(event: dict, context: object) -> dict:
    return common.ok(run(common.message_of(event)))
