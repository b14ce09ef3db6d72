"""The deployed chat function with LLM_PROVIDER=openai or bedrock, against the simulated model over real HTTP.

The local stack's simulated model also speaks OpenAI chat completions and Bedrock's InvokeModel, so the whole path — the
template's environment, the factory, the OpenAI adapter, the translation, the loop, the stores —
runs with no key and no network. A conversation then continues on the Anthropic Messages API of the
same server: the stored history is one format whatever the provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devstack.simulated_model import LABEL, SimulatedModelServer, start
from support_agent import wiring
from support_agent.agent import history as hist
from support_agent.config import get_settings
from support_agent.store.conversations import ConversationStore
from tests.integration.conftest import Api


@pytest.fixture(scope="module")
def model() -> Iterator[SimulatedModelServer]:
    server = start(port=0)
    yield server
    server.stop()


def use_provider(api: Api, **env: str) -> None:
    api.transport = None  # real HTTP to the simulated model
    api.overrides = dict(env)
    api.current = ""  # re-apply the function's environment with the overrides
    api.use_function("ChatFunction")


def chat(api: Api, message: str, cid: str | None = None) -> dict[str, Any]:
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": cid, "message": message})
    assert status == 200, body
    return dict(body)


def stored(api: Api, cid: str) -> list[dict[str, Any]]:
    store = ConversationStore(boto3.client("dynamodb"), get_settings().conversations_table)
    return [m.as_message() for m in store.load(cid)]


def test_the_local_stack_runs_with_the_openai_provider(api: Api, model: SimulatedModelServer) -> None:
    openai = {"LLM_PROVIDER": "openai", "OPENAI_BASE_URL": f"{model.url}/v1", "OPENAI_API_KEY": "sim-key"}
    use_provider(api, **openai)
    assert type(wiring.chat_services().agent.llm).__name__ == "OpenAIClient"
    first = chat(api, "Where is my order 1043? Also refund it.")
    assert first["stopReason"] == "end_turn" and first["reply"].startswith(LABEL)
    calls = [c for it in first["trace"] for c in it["toolCalls"]]
    assert [c["name"] for c in calls] == ["lookup_order", "request_refund"]
    assert calls[1]["result"]["status"] == "REFUNDED" and not calls[1]["isError"]
    assert "refunded 25.00 USD on order 1043" in first["reply"]
    assert first["inputTokens"] > 0 and first["outputTokens"] > 0
    cid = first["conversationId"]
    msgs = stored(api, cid)
    assert hist.problems(msgs) == []
    uses = [b for m in msgs for b in m["content"] if b["type"] == "tool_use"]
    assert uses and all(u["id"].startswith("call_sim_") for u in uses)  # OpenAI's ids, Anthropic's blocks

    # A configuration change: the same conversation continues on the Messages API.
    use_provider(api, ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="sim-key")
    assert type(wiring.chat_services().agent.llm).__name__ == "AnthropicClient"
    second = chat(api, "What are the invoices for it?", cid)
    assert second["conversationId"] == cid and second["reply"].startswith(LABEL)
    assert [c["name"] for it in second["trace"] for c in it["toolCalls"]] == ["list_invoices"]
    assert "#5002" in second["reply"]  # "it" still means order 1043, read from the OpenAI-era history

    # And back: the OpenAI adapter replays Anthropic-era tool calls as tool messages.
    use_provider(api, **openai)
    third = chat(api, "thanks!", cid)
    assert third["stopReason"] == "end_turn" and "welcome" in third["reply"]
    assert hist.problems(stored(api, cid)) == []


def test_the_openai_provider_maps_errors_to_the_contract(api: Api, model: SimulatedModelServer) -> None:
    # No key: the simulated server answers 401 like OpenAI; a 4xx is a 502 model_error, nothing stored.
    use_provider(api, LLM_PROVIDER="openai", OPENAI_BASE_URL=f"{model.url}/v1", OPENAI_API_KEY="")
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "hello"})
    assert (status, body["error"]["code"]) == (502, "model_error")
    status, listing, _ = api.call("GET", "/api/conversations")
    assert status == 200 and all(c.get("title") != "hello" for c in listing["conversations"])


def test_the_bedrock_provider_runs_through_boto3_against_the_simulated_model(
    api: Api, model: SimulatedModelServer
) -> None:
    """``LLM_PROVIDER=bedrock make dev``'s path: boto3's signed InvokeModel, sent to the simulated model by
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME while every other client stays on moto."""
    profile = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    use_provider(api, LLM_PROVIDER="bedrock", BEDROCK_MODEL_ID=profile, AWS_ENDPOINT_URL_BEDROCK_RUNTIME=model.url)
    assert type(wiring.chat_services().agent.llm).__name__ == "BedrockClient"
    before = model.model.requests
    first = chat(api, "Where is my order 1043?")
    assert model.model.requests - before == len(first["trace"]) == 2  # both calls reached the simulated model
    assert first["stopReason"] == "end_turn" and first["reply"].startswith(LABEL)
    calls = [c for it in first["trace"] for c in it["toolCalls"]]
    assert [c["name"] for c in calls] == ["lookup_order"] and not calls[0]["isError"]
    assert "1043" in first["reply"]
    assert first["inputTokens"] > 0 and first["outputTokens"] > 0
    assert hist.problems(stored(api, first["conversationId"])) == []
