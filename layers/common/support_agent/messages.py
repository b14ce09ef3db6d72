"""The shared kernel: the canonical message shapes, token usage and the turn's deadline.

Every layer speaks these: the store persists them, tools and the loop pass them, model adapters
translate them at the edge. They live here, not in ``llm/``, so nothing that stores or runs tools
depends on the model package. Content is kept as Anthropic content blocks (plain dicts) because
that is the canonical stored history: blocks must round-trip unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Block = dict[str, Any]
Message = dict[str, Any]


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )

    @property
    def total(self) -> int:
        """What the conversation budget counts: all four fields."""
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True)
class Deadline:
    """An absolute point on a monotonic clock; the clock is injectable so tests control time."""

    at: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    @classmethod
    def of_lambda(cls, context: Any, margin_seconds: float) -> Deadline | None:
        """Lambda's remaining time less ``margin_seconds`` (left to record and answer); None when the context
        cannot tell (tests, scripts)."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if remaining is None:
            return None
        return cls.after(max(0.0, remaining() / 1000 - margin_seconds))

    def remaining(self) -> float:
        return self.at - self.clock()

    def expired(self) -> bool:
        return self.remaining() <= 0


# A message a person writes (a customer's, or a support teammate's reply) is not blank, said in the schema: at least
# one character that str.strip() would keep — exactly the characters str.isspace() counts as whitespace excluded.
NOT_BLANK = "[^\\t\\n\\v\\f\\r \\x1c-\\x1f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
