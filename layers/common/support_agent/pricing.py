"""Estimated cost of a turn: token counts times a price table, for the dashboard's cost widget.

Prices are USD per million tokens, per model family. ``PRICE_TABLE`` (JSON, same shape) overrides
or extends the defaults below, so a deployment fixes a price or adds a model without a code change:
``{"claude-sonnet-4-5": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}``.
A model id matches the longest key it contains, so dated ids, Bedrock ids
(``us.anthropic.claude-sonnet-4-5-20250929-v1:0``) and gateways' prefixes find their family.
A model with no price has no estimate (no metric), rather than a wrong one.

The estimate is list price, uncached input + output + cache reads + cache writes (5-minute TTL);
batch or negotiated discounts are not modelled.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from support_agent.messages import Usage


class Price(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    input: Annotated[float, Field(ge=0)]
    output: Annotated[float, Field(ge=0)]
    cache_read: Annotated[float, Field(ge=0)] = 0.0
    cache_write: Annotated[float, Field(ge=0)] = 0.0


# List prices (USD / million tokens) as published by the providers; PRICE_TABLE overrides them.
DEFAULT_PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(input=5, output=25, cache_read=0.5, cache_write=6.25),
    "claude-opus-4-1": Price(input=15, output=75, cache_read=1.5, cache_write=18.75),
    "claude-opus-4": Price(input=15, output=75, cache_read=1.5, cache_write=18.75),
    "claude-sonnet-4-5": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-sonnet-4": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-3-7-sonnet": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-haiku-4-5": Price(input=1, output=5, cache_read=0.1, cache_write=1.25),
    "claude-3-5-haiku": Price(input=0.8, output=4, cache_read=0.08, cache_write=1.0),
    "gpt-4o-mini": Price(input=0.15, output=0.6, cache_read=0.075),
    "gpt-4o": Price(input=2.5, output=10, cache_read=1.25),
    "gpt-4.1-mini": Price(input=0.4, output=1.6, cache_read=0.1),
    "gpt-4.1": Price(input=2, output=8, cache_read=0.5),
}

_TABLE = TypeAdapter(dict[str, Price])


@lru_cache(maxsize=8)
def price_table(overrides_json: str = "") -> dict[str, Price]:
    """The defaults with ``PRICE_TABLE`` on top; a malformed table is a configuration error (raises)."""
    table = dict(DEFAULT_PRICES)
    if overrides_json.strip():
        table.update(_TABLE.validate_python(json.loads(overrides_json)))
    return table


def price_for(model: str, table: dict[str, Price]) -> Price | None:
    if model in table:
        return table[model]
    matches = [key for key in table if key and key in model]
    return table[max(matches, key=len)] if matches else None


def estimate_usd(model: str, usage: Usage, table: dict[str, Price]) -> float | None:
    price = price_for(model, table)
    if price is None:
        return None
    cost = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_input_tokens * price.cache_read
        + usage.cache_creation_input_tokens * price.cache_write
    ) / 1_000_000
    return round(cost, 8)
