"""The `LlmClient` interface, the request it is asked and the provider-neutral response.

Content is kept as Anthropic content blocks (plain dicts) because that is the canonical stored
history: blocks must round-trip unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from support_agent.messages import Block, Deadline, Message, Usage

if TYPE_CHECKING:
    import httpx

__all__ = ["Block", "Deadline", "LlmClient", "LlmRequest", "LlmResponse", "Message", "Seams", "TextSink", "Usage"]


@dataclass(frozen=True)
class LlmResponse:
    stop_reason: str
    content: list[Block]
    usage: Usage = field(default_factory=Usage)
    model: str = ""  # the model that answered, as the provider names it
    retries: int = 0  # how often the adapter tried again before this answer

    def tool_uses(self) -> list[Block]:
        return [b for b in self.content if isinstance(b, dict) and b.get("type") == "tool_use"]

    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.content if isinstance(b, dict) and b.get("type") == "text")


@dataclass(frozen=True)
class LlmRequest:
    """What one model call asks, whatever the provider: each adapter encodes it in its own wire format."""

    system: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    tool_choice: dict[str, Any] | None = None


class TextSink(Protocol):
    """Where the reply's text goes while the model writes it (docs/MODEL.md, "Streaming").

    The pieces only show progress: the `LlmResponse` stays the truth. `restart` says the pieces so far are
    void: a retried attempt writes the reply again from its start. A sink that raises is dropped for the
    rest of the call, never allowed to fail it (`llm/streaming.py`).
    """

    def delta(self, piece: str) -> None: ...

    def restart(self) -> None: ...


class LlmClient:
    """One call to the model. Raises `ModelUnavailable` (retryable) or `ModelRefused`; the answer, or the
    error, says how often the adapter retried (`retries`), so a shared client keeps no per-call state.

    The loop calls `create`; an adapter (or a test's double) answers the one `LlmRequest` it makes of it.
    With a `text` sink, an adapter that can stream feeds it the reply's text as it arrives and answers
    the same `LlmResponse` as without one.
    """

    def create(
        self,
        system: str,
        messages: list[Message],
        tools: list[dict[str, Any]],
        tool_choice: dict[str, Any] | None = None,
        *,
        deadline: Deadline | None = None,
        text: TextSink | None = None,
    ) -> LlmResponse:
        request = LlmRequest(system, messages, tools, tool_choice)
        if text is None:  # a double written before sinks existed answers `answer(request, deadline)`
            return self.answer(request, deadline)
        return self.answer(request, deadline, text)

    def answer(self, request: LlmRequest, deadline: Deadline | None, text: TextSink | None = None) -> LlmResponse:
        raise NotImplementedError


@dataclass(frozen=True)
class Seams:
    """What the composition root hands an adapter besides settings and policy; tests pass in-process ones."""

    transport: httpx.BaseTransport | None = None  # the HTTP providers' (None: the network)
    secrets_client: Any = None  # Secrets Manager, for an API key kept there (None: built on first read)
    sdk_client: Any = None  # a ready provider SDK client, e.g. bedrock-runtime (None: built on first use)
