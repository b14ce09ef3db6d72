"""Translation at the edge: the canonical history (Anthropic content blocks) <-> each wire format.

The stored conversation has one format whatever the provider, so a conversation can continue on
another one after a configuration change. Adapters translate per request, both ways, losslessly
for what the loop uses: text, tool_use ids/names/inputs, tool_result ids/contents/is_error.

OpenAI chat completions, by canonical element:

* system prompt → the first message, `{"role": "system"}`.
* user text blocks → one `user` message (a string for one block, text parts for several).
* assistant text → `content`; assistant `tool_use` → `tool_calls` with `arguments` as a JSON string.
  Text is sent before the calls (OpenAI has one content field), so only the order of text relative
  to tool calls within one message is not kept. `thinking` blocks have no OpenAI field: dropped.
* `tool_result` → one `{"role": "tool", "tool_call_id"}` message each, before the user's text,
  content as a string. OpenAI has no error flag: an error result's content starts with
  `ERROR_PREFIX` ("ERROR: "), and reading it back sets `is_error`. (Our results are fenced data,
  so a successful one never starts with that prefix.)
* `tool_choice`: none → "none", auto → "auto", any → "required", tool → the named function.

From OpenAI back: `finish_reason` → stop reason (`FINISH_REASONS`; tool calls with "stop" or no
reason, as some compatible servers send, count as tool_use). Usage: `prompt_tokens` includes the
cached tokens, so input = prompt_tokens - cached_tokens and cache reads = cached_tokens.
**Invalid JSON arguments** never crash the turn: the call becomes a `tool_use` whose input is
`{INVALID_ARGUMENTS: "<what was wrong>; raw: <the arguments as sent>"}`. No tool accepts that key
(every input model forbids extra properties), so the registry answers an `is_error` result and the
model sees both the raw text and why it was refused; the loop needs no special case.

The opposite directions (a chat completions request → canonical, a response → a chat completion)
serve only the local stack's simulated model: `devstack/simulated_model/openai_facade.py`, never
deployed.

Bedrock `InvokeModel` takes the Anthropic Messages body itself, minus `model` (the model id is a
request parameter) and with `anthropic_version: bedrock-2023-05-31`: the translation is the
identity on the history, `cache_control` breakpoints included.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from support_agent.llm.base import LlmRequest, LlmResponse
from support_agent.llm.messages_api import build_body
from support_agent.messages import Block, Message, Usage

ERROR_PREFIX = "ERROR: "
INVALID_ARGUMENTS = "invalid_json_arguments"
RAW_ARGUMENTS_MAX_CHARS = 1000
BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
TOOL_CALL_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

FINISH_REASONS = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _blocks(message: Message) -> list[Block]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


def _texts(blocks: list[Block]) -> list[str]:
    return [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]


def _text_content(texts: list[str]) -> str | list[dict[str, str]]:
    """One text → a string (what every compatible server reads); several → text parts (kept apart)."""
    if len(texts) == 1:
        return texts[0]
    return [{"type": "text", "text": t} for t in texts]


def flat_text(content: Any) -> str:
    """Text of a string or of a list of text blocks/parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


# -- canonical → OpenAI -------------------------------------------------------------------------


def openai_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for t in tools
    ]


def openai_tool_choice(choice: dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind == "none":
        return "none"
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name", "")}}
    return "auto"


def openai_tool_call(block: Block) -> dict[str, Any]:
    """A `tool_use` block as a `tool_calls` entry: `arguments` is the input as a JSON string."""
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": _dumps(block.get("input", {}))},
    }


def tool_result_text(block: Block) -> str:
    text = flat_text(block.get("content"))
    return ERROR_PREFIX + text if block.get("is_error") else text


def openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The chat completions `messages` for a canonical (request-merged) history."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        blocks = _blocks(message)
        if message.get("role") == "assistant":
            texts = [t for t in _texts(blocks) if t]
            calls = [openai_tool_call(b) for b in blocks if b.get("type") == "tool_use"]
            assistant: dict[str, Any] = {"role": "assistant", "content": _text_content(texts) if texts else None}
            if calls:
                assistant["tool_calls"] = calls
            elif not texts:
                assistant["content"] = ""
            out.append(assistant)
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                out.append(
                    {"role": "tool", "tool_call_id": str(block.get("tool_use_id")), "content": tool_result_text(block)}
                )
        texts = _texts(blocks)
        if texts:
            out.append({"role": "user", "content": _text_content(texts)})
    return out


def openai_request(
    model: str, max_tokens: int, request: LlmRequest, *, max_tokens_param: str = "max_tokens"
) -> dict[str, Any]:
    """The request body; `tool_choice` (and `parallel_tool_calls`) only go along with tools."""
    messages = openai_messages(request.system, request.messages)
    body: dict[str, Any] = {"model": model, max_tokens_param: max_tokens, "messages": messages}
    tool_choice = request.tool_choice
    if request.tools:
        body["tools"] = openai_tools(request.tools)
        choice = openai_tool_choice(tool_choice)
        if choice is not None:
            body["tool_choice"] = choice
        if tool_choice and tool_choice.get("disable_parallel_tool_use"):
            body["parallel_tool_calls"] = False
    return body


# -- OpenAI → canonical -------------------------------------------------------------------------


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's `arguments` as a tool input; never raises (see INVALID_ARGUMENTS)."""
    if isinstance(arguments, dict):  # some compatible servers send an object, not a string
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}  # "no arguments", as several servers say it
    raw = arguments if isinstance(arguments, str) else _dumps(arguments)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        why = f"the arguments were not valid JSON ({exc.msg} at position {exc.pos})"
    else:
        if isinstance(value, dict):
            return value
        why = "the arguments were not a JSON object"
    return {INVALID_ARGUMENTS: f"{why}; raw: {raw[:RAW_ARGUMENTS_MAX_CHARS]}"}


def _call_id(value: Any, salt: str, index: int) -> str:
    """The provider's id when it is a valid tool_use id, else a stable stand-in (stored and sent back)."""
    if isinstance(value, str) and TOOL_CALL_ID.match(value):
        return value
    return "call_" + hashlib.sha256(f"{salt}\x1f{index}\x1f{value}".encode()).hexdigest()[:24]


def tool_use_block(call: Any, salt: str, index: int) -> Block | None:
    if not isinstance(call, dict):
        return None
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        return None
    return {
        "type": "tool_use",
        "id": _call_id(call.get("id"), salt, index),
        "name": function["name"],
        "input": tool_input(function.get("arguments")),
    }


def text_blocks(content: Any) -> list[Block]:
    """Text blocks of a message's `content` (a string or text parts), empty texts dropped."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [
            {"type": "text", "text": str(p["text"])}
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and p.get("text")
        ]
    return []


def stop_reason(finish_reason: Any, has_tool_calls: bool) -> str:
    mapped = FINISH_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    if mapped in ("max_tokens", "refusal"):
        return mapped
    return "tool_use" if has_tool_calls else "end_turn"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def openai_usage(raw: Any) -> Usage:
    usage = raw if isinstance(raw, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = _count(usage.get("prompt_tokens"))
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=_count(usage.get("completion_tokens")),
        cache_read_input_tokens=cached,
    )


def parse_openai_response(data: Any) -> LlmResponse:
    """An `LlmResponse` from a chat completion; `ValueError` if the body is not one."""
    if not isinstance(data, dict):
        raise ValueError("body is not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ValueError("no message")
    content = text_blocks(message.get("content"))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip() and not content:
        content = [{"type": "text", "text": refusal}]
    raw_calls = message.get("tool_calls")
    salt = str(data.get("id") or "")
    uses = [tool_use_block(c, salt, i) for i, c in enumerate(raw_calls if isinstance(raw_calls, list) else [])]
    content += [u for u in uses if u is not None]
    reason = stop_reason(choices[0].get("finish_reason"), any(u is not None for u in uses))
    if isinstance(refusal, str) and refusal.strip():
        reason = "refusal"
    return LlmResponse(
        stop_reason=reason, content=content, usage=openai_usage(data.get("usage")), model=str(data.get("model") or "")
    )


# -- canonical → Bedrock InvokeModel -------------------------------------------------------------


def bedrock_body(max_tokens: int, request: LlmRequest) -> dict[str, Any]:
    """The Messages body Bedrock expects: `anthropic_version` in the body, no `model` field."""
    body = build_body("", max_tokens, request)
    del body["model"]
    return {"anthropic_version": BEDROCK_ANTHROPIC_VERSION, **body}
