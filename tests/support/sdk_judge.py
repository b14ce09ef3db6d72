"""The official ``anthropic`` SDK's request types as the judge of a Messages API request body.

A body is good when the SDK's TypedDicts accept it and validating it changes nothing (no stray or coerced
field). Used on what our clients send (Anthropic, Bedrock's body) and on the next request a history makes.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pydantic
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming


@cache
def sdk_params() -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(MessageCreateParamsNonStreaming)


def _force(value: Any) -> Any:
    """pydantic validates `Iterable[...]` fields lazily; consume them so every item is checked."""
    if isinstance(value, dict):
        return {k: _force(v) for k, v in value.items()}
    if value is None or isinstance(value, str | bytes | int | float | bool):
        return value
    return [_force(v) for v in value]


def sdk_validated(body: dict[str, Any]) -> Any:
    """``body`` as the SDK's request types read it, every item consumed (raises pydantic's ValidationError)."""
    return _force(sdk_params().validate_python(body))


def assert_sdk_valid(body: dict[str, Any]) -> None:
    """Valid per the SDK's TypedDicts, and unchanged by validation (so no extra or coerced field)."""
    assert sdk_validated(body) == body


def sdk_problems(body: dict[str, Any]) -> list[str]:
    """Why the SDK's request types refuse (or would change) a request body; empty when they accept it."""
    try:
        validated = sdk_validated(body)
    except pydantic.ValidationError as exc:
        return [f"SDK rejects the request: {exc.errors()[:3]}"]
    return [] if validated == body else ["SDK validation changed the request (stray or coerced field)"]
