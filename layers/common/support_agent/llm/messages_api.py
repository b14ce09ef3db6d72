"""The Anthropic Messages API's wire format: the request body (with its cache breakpoints) and the
response, as pure functions. The Anthropic adapter sends it over httpx, Bedrock's through boto3, and the
OpenAI translation starts from it; here it imports no HTTP client, so a Bedrock function loads none.

`cache_control` breakpoints (last tool, the system block, the newest message's last block) are put
on copies per request; the caller's history is never changed, so they are never stored (rule 5).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from support_agent.llm.base import LlmRequest, LlmResponse
from support_agent.messages import Message, Usage

EPHEMERAL = {"type": "ephemeral"}
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def build_body(model: str, max_tokens: int, request: LlmRequest) -> dict[str, Any]:
    """The request body, with cache breakpoints on copies; the request is left untouched.

    Any `cache_control` already on top-level blocks or tools is dropped from the copies so a request
    never exceeds the API's four breakpoints. `tool_choice` is only sent along with tools.

    Keys are in the prompt cache's order — tools, system, tool_choice (a change to it invalidates
    only the messages' cache), messages — so the bytes up to a request's last breakpoint are a
    prefix of the next request's (tests/unit/test_prompt_cache.py).
    """
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if request.tools:
        body["tools"] = [_without_cache(t) for t in request.tools]
        body["tools"][-1]["cache_control"] = dict(EPHEMERAL)
    body["system"] = [{"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}]
    if request.tools and request.tool_choice is not None:
        body["tool_choice"] = copy.deepcopy(request.tool_choice)
    body["messages"] = [_copy_message(m) for m in request.messages]
    if body["messages"]:
        _mark_last_block(body["messages"][-1])
    return body


def encode_body(body: dict[str, Any]) -> bytes:
    """Deterministic bytes: same input, same request, so the cached prefix matches byte for byte."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _without_cache(block: dict[str, Any]) -> dict[str, Any]:
    """A new top-level dict without `cache_control`. Nested values are shared, not copied: nothing here
    changes them and the body is encoded at once, so a deep copy of the whole history per request
    would only cost time (docs/PERFORMANCE.md, loop overhead)."""
    return {k: v for k, v in block.items() if k != "cache_control"}


def _copy_message(message: Message) -> Message:
    out = {k: v for k, v in message.items() if k != "content"}
    content = message.get("content")
    if isinstance(content, list):
        out["content"] = [_without_cache(b) if isinstance(b, dict) else b for b in content]
    else:
        out["content"] = content
    return out


def _mark_last_block(message: Message) -> None:
    content = message.get("content")
    if isinstance(content, str):
        if content:
            message["content"] = [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]
        return
    if not isinstance(content, list):
        return
    for block in reversed(content):
        if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue  # the API refuses cache_control on empty text
        block["cache_control"] = dict(EPHEMERAL)
        return


def parse_response(data: Any) -> LlmResponse:
    """An `LlmResponse` from a Messages API body; `ValueError` if it is not one."""
    if not isinstance(data, dict):
        raise ValueError("body is not an object")
    content, stop_reason = data.get("content"), data.get("stop_reason")
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise ValueError("no content list")
    if not isinstance(stop_reason, str):
        raise ValueError("no stop_reason")
    raw = data.get("usage")
    usage = raw if isinstance(raw, dict) else {}
    return LlmResponse(
        stop_reason=stop_reason,
        content=content,
        usage=Usage(
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cache_read_input_tokens=_int(usage.get("cache_read_input_tokens")),
            cache_creation_input_tokens=_int(usage.get("cache_creation_input_tokens")),
        ),
        model=str(data.get("model") or ""),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
