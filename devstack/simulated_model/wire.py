"""The Messages API wire, inbound: the headers and body checks the real API makes that matter to a client.

Errors have the API's shape, ``{"type": "error", "error": {"type", "message"}}``; a bad request is a
400 here exactly where the real API would refuse it, so a client that passes locally is not refused
in production for its request's form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_CACHE_CONTROL = 4

Json = dict[str, Any]


# -- errors ------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answer in the Messages API's shape."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def body(self) -> Json:
        return {"type": "error", "error": {"type": self.error_type, "message": self.message}}


def _invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


# -- request validation --------------------------------------------------------------------------


def check_headers(headers: Mapping[str, str]) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    scheme, _, token = lowered.get("authorization", "").partition(" ")
    bearer = scheme.lower() == "bearer" and token.strip()
    if not lowered.get("x-api-key", "").strip() and not bearer:
        raise ApiError(401, "authentication_error", "x-api-key header is required")
    if not lowered.get("anthropic-version", "").strip():
        raise _invalid("anthropic-version: header is required")


def parse_body(raw: bytes) -> Json:
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _invalid(f"There was an issue with your request body: {exc}") from None
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.")
    validate(body)
    return body


def validate(body: Json) -> None:
    """The checks the real API makes that matter for a client of it; 400 on the first failure."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _invalid("max_tokens: Field required (an integer >= 1)")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _invalid("stream: Input should be a valid boolean")
    system = body.get("system")
    system_ok = system is None or isinstance(system, str)
    if not system_ok and isinstance(system, list):
        system_ok = all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system
        )
    if not system_ok:
        raise _invalid("system: Input should be a string or a list of text blocks")
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list):
            raise _invalid("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
                raise _invalid(f"tools.{i}.name: Field required")
            if tool["name"] in names:
                raise _invalid(f"tools: Tool names must be unique (duplicate: {tool['name']})")
            names.add(tool["name"])
            if "type" not in tool and not isinstance(tool.get("input_schema"), dict):
                raise _invalid(f"tools.{i}.input_schema: Field required")
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            raise _invalid("tool_choice: Input tag must be one of 'auto', 'any', 'tool', 'none'")
        if choice["type"] == "tool" and choice.get("name") not in names:
            raise _invalid("tool_choice.name: Tool not found in tools")
    _validate_messages(body.get("messages"))
    marks = sum(_count_cache_marks(body.get(k)) for k in ("system", "tools", "messages"))
    if marks > MAX_CACHE_CONTROL:
        raise _invalid(f"A maximum of {MAX_CACHE_CONTROL} blocks with cache_control may be provided. Found {marks}.")


def _validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages: Field required (a non-empty list)")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        last_assistant = i == len(messages) - 1 and message["role"] == "assistant"
        if isinstance(content, str):
            if not content and not last_assistant:
                raise _invalid(
                    f"messages.{i}: all messages must have non-empty content except for the optional final "
                    "assistant message"
                )
            continue
        if not isinstance(content, list):
            raise _invalid(f"messages.{i}.content: Input should be a valid string or list")
        if not content and not last_assistant:
            raise _invalid(
                f"messages.{i}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        for j, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _invalid(f"messages.{i}.content.{j}: Input should be a content block")
            kind = block["type"]
            if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
                raise _invalid(f"messages.{i}.content.{j}: text content blocks must be non-empty")
            if kind == "tool_use" and (
                message["role"] != "assistant"
                or not isinstance(block.get("id"), str)
                or not isinstance(block.get("name"), str)
                or not isinstance(block.get("input"), dict)
            ):
                raise _invalid(f"messages.{i}.content.{j}: invalid tool_use block")
            if kind == "tool_result" and (message["role"] != "user" or not isinstance(block.get("tool_use_id"), str)):
                raise _invalid(f"messages.{i}.content.{j}: invalid tool_result block")
    # Every tool_use is answered in the next message, and every tool_result answers the one before.
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        if message["role"] == "assistant":
            uses = [b["id"] for b in content if b["type"] == "tool_use"]
            if not uses:
                continue
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in nxt if isinstance(nxt, list) and b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                raise _invalid(
                    f"messages.{i + 1 if i + 1 < len(messages) else i}: `tool_use` ids were found without "
                    f"`tool_result` blocks immediately after: {', '.join(missing)}. Each `tool_use` block must "
                    "have a corresponding `tool_result` block in the next message."
                )
        else:
            prev = messages[i - 1] if i > 0 else None
            prev_content = prev["content"] if prev is not None and isinstance(prev["content"], list) else []
            known = {b.get("id") for b in prev_content if b.get("type") == "tool_use"}
            for j, block in enumerate(content):
                if block["type"] == "tool_result" and block["tool_use_id"] not in known:
                    raise _invalid(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block['tool_use_id']}. Each `tool_result` block must have a corresponding `tool_use` "
                        "block in the previous message."
                    )


def _count_cache_marks(value: Any) -> int:
    if isinstance(value, list):
        return sum(_count_cache_marks(v) for v in value)
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") is not None else 0
        return own + sum(_count_cache_marks(v) for k, v in value.items() if k != "cache_control")
    return 0
