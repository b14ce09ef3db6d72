"""A minimal support agent on langgraph's prebuilt ReAct agent with langchain-anthropic + boto3."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import peer_common as common
from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

lookup_order, list_invoices = tool(common.lookup_order), tool(common.list_invoices)


llm = ChatAnthropic(model=common.MODEL, base_url=common.BASE_URL, api_key=common.API_KEY, max_tokens=1024)
graph = create_react_agent(llm, [lookup_order, list_invoices], prompt=common.SYSTEM)


def run(message: str) -> str:
    out = graph.invoke({"messages": [("user", message)]})
    return str(out["messages"][-1].content)


def handler(event: dict, context: object) -> dict:
    return common.ok(run(common.message_of(event)))
