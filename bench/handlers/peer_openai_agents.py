"""A minimal support agent on openai-agents, talking to Claude through the OpenAI-compatible endpoint, + boto3.

(openai-agents reaches Anthropic either through LiteLLM or through Anthropic's OpenAI SDK
compatibility endpoint; the latter is used here: no extra dependency, the same instant server.)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import peer_common as common
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)  # its exporter would call out to OpenAI


lookup_order, list_invoices = function_tool(common.lookup_order), function_tool(common.list_invoices)


client = AsyncOpenAI(base_url=common.BASE_URL + "/v1", api_key=common.API_KEY)
agent = Agent(
    name="support",
    instructions=common.SYSTEM,
    model=OpenAIChatCompletionsModel(model=common.MODEL, openai_client=client),
    tools=[lookup_order, list_invoices],
)


def run(message: str) -> str:
    return str(Runner.run_sync(agent, message).final_output)


def handler(event: dict, context: object) -> dict:
    return common.ok(run(common.message_of(event)))
