"""The `LlmClient` protocol and the provider-neutral response.

Content is kept as Anthropic content blocks (plain dicts) because that is the canonical stored
history: blocks must round-trip unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from support_agent.messages import Block, Deadline, Message, Usage

__all__ = ["Block", "Deadline", "LlmClient", "LlmResponse", "Message", "Usage"]


@dataclass(frozen=True)
class LlmResponse:
    stop_reason: str
    content: list[Block]
    usage: Usage = field(default_factory=Usage)
    model: str = ""

    def tool_uses(self) -> list[Block]:
        return [b for b in self.content if isinstance(b, dict) and b.get("type") == "tool_use"]

    def text(self) -> str:
        return "".join(str(b.get("text", "")) for b in self.content if isinstance(b, dict) and b.get("type") == "text")


class LlmClient(Protocol):
    """One call to the model. Raises `ModelUnavailable` (retryable, 503) or `ModelRefused` (502)."""

    def create(
        self,
        system: str,
        messages: list[Message],
        tools: list[dict[str, Any]],
        tool_choice: dict[str, Any] | None = None,
        *,
        deadline: Deadline | None = None,
    ) -> LlmResponse: ...
