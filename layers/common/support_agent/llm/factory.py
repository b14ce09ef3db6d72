"""Build the configured `LlmClient` from `Settings`: `LLM_PROVIDER` names a row of `ADAPTERS`.

Every adapter gets the same `RetryPolicy` (attempts, backoff, timeouts, the breaker) and the same
`Seams`; what else it needs it reads from `Settings` itself (`from_settings`), so a new provider is
one adapter file and one row here. An adapter is imported only when chosen: a cold start pays for
one, and Bedrock's imports no HTTP client. API keys: `secrets.py`; Bedrock uses the function's IAM role
instead.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from support_agent.config import Settings
from support_agent.llm.base import LlmClient, Seams
from support_agent.llm.breaker import CircuitBreaker
from support_agent.llm.retry import RetryPolicy

if TYPE_CHECKING:
    import httpx

# httpx imports its command-line client whenever click is installed, and gives that up without rich:
# the MCP SDK brings click into the layer, so every first model call paid ~20 ms for a CLI no function
# runs. An entry of None makes that import fail at once, and httpx goes on without its CLI.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

ADAPTERS = {
    "anthropic": "support_agent.llm.anthropic:AnthropicClient",
    "openai": "support_agent.llm.openai:OpenAIClient",
    "bedrock": "support_agent.llm.bedrock:BedrockClient",
}


class Adapter(Protocol):
    @classmethod
    def from_settings(cls, settings: Settings, policy: RetryPolicy, seams: Seams) -> LlmClient: ...


def llm_client_from_settings(
    settings: Settings,
    *,
    breaker: CircuitBreaker | None = None,
    transport: httpx.BaseTransport | None = None,
    secrets_client: Any = None,
    bedrock_client: Any = None,
) -> LlmClient:
    """The client `settings.llm_provider` names; pass a shared `breaker` to keep its state across calls.

    `transport` (httpx) serves the HTTP providers, `bedrock_client` (a bedrock-runtime client) Bedrock.
    """
    module, name = ADAPTERS[settings.llm_provider].split(":")
    adapter: Adapter = getattr(import_module(module), name)
    return adapter.from_settings(
        settings, RetryPolicy.from_settings(settings, breaker), Seams(transport, secrets_client, bedrock_client)
    )
