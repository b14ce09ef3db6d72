"""The OpenAI-compatible face: ``POST /v1/chat/completions`` in front of the same brain.

The request is checked the way OpenAI checks what matters to a client (tool messages answer the
preceding ``tool_calls``, ``tool_choice`` only with tools...), turned into a Messages request
(``canonical_messages``: the inverse of the agent's ``llm/translate.py``), decided by
``build_message``, and the answer turned back into a ``chat.completion`` (``openai_completion``:
the inverse of ``parse_openai_response``). Errors have OpenAI's shape: ``{"error": {"message",
"type", "param", "code"}}``. With ``"stream": true`` the same completion goes out as OpenAI streams it
(``completion_chunks``): ``chat.completion.chunk`` events with content deltas, tool call fragments by
index, the ``finish_reason``, a usage chunk when ``stream_options.include_usage`` asks for it, ``[DONE]``.

The two inverses live here, not in the deployed layer: only the local stack (and the round-trip
tests of ``llm/translate.py``) needs them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from devstack.simulated_model.message import build_message, chunks, dumps, text_pieces
from devstack.simulated_model.wire import ApiError, Json
from support_agent.llm.anthropic import parse_response
from support_agent.llm.base import LlmResponse
from support_agent.llm.translate import (
    ERROR_PREFIX,
    flat_text,
    openai_tool_call,
    text_blocks,
    tool_use_block,
)
from support_agent.messages import Message

OPENAI_DEFAULT_MAX_TOKENS = 4096
_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
# Canonical stop reason → finish_reason; `FINISH_REASONS` in llm/translate.py reads them back.
STOP_REASONS = {
    "tool_use": "tool_calls",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "refusal": "content_filter",
}


class OpenAIError(ApiError):
    def __init__(self, status: int, message: str, error_type: str = "invalid_request_error", param: str = "") -> None:
        super().__init__(status, error_type, message)
        self.param = param

    def body(self) -> Json:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param or None, "code": None}}


def check_openai_headers(headers: Mapping[str, str]) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    scheme, _, token = lowered.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise OpenAIError(401, "You didn't provide an API key (Authorization: Bearer).", "invalid_request_error")


def _openai_text_ok(content: Any) -> bool:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    )


def parse_openai_body(raw: bytes) -> Json:
    """The request body, parsed and validated (`validate_openai`); `OpenAIError` as OpenAI answers it."""
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise OpenAIError(400, f"We could not parse the JSON body of your request: {exc}") from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "The request body must be a JSON object.")
    validate_openai(body)
    return body


def validate_openai(body: Json) -> None:
    """OpenAI's checks that matter for a client of it; 400 on the first failure."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise OpenAIError(400, "you must provide a model parameter", param="model")
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise OpenAIError(400, "max_tokens and max_completion_tokens cannot both be set", param="max_tokens")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if name in body and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise OpenAIError(400, f"{name} must be an integer >= 1", param=name)
    if not isinstance(body.get("stream", False), bool):
        raise OpenAIError(400, "stream must be a boolean", param="stream")
    if body.get("stream_options") is not None:
        if not body.get("stream"):
            raise OpenAIError(
                400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", param="stream_options"
            )
        if not isinstance(body["stream_options"], dict):
            raise OpenAIError(400, "stream_options must be an object", param="stream_options")
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            raise OpenAIError(400, "tools must be a non-empty array", param="tools")
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type") != "function" or not function.get("name"):
                raise OpenAIError(400, f"tools[{i}] must be {{type: function, function: {{name}}}}", param="tools")
            if not isinstance(function.get("parameters", {}), dict):
                raise OpenAIError(400, f"tools[{i}].function.parameters must be an object", param="tools")
            names.add(str(function["name"]))
    choice = body.get("tool_choice")
    if choice is not None:
        if not tools:
            raise OpenAIError(400, "tool_choice is only allowed when tools are specified", param="tool_choice")
        named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if choice not in ("none", "auto", "required") and named not in names:
            raise OpenAIError(400, "tool_choice must be none, auto, required or a known function", param="tool_choice")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "messages must be a non-empty array", param="messages")
    waiting: list[str] = []  # tool_call ids of the last assistant message not yet answered
    answerable: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _OPENAI_ROLES:
            raise OpenAIError(400, f"messages[{i}].role must be one of {', '.join(_OPENAI_ROLES)}", param="messages")
        assert isinstance(m, dict)
        if role != "tool" and waiting:
            raise OpenAIError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(waiting)}",
                param=f"messages.[{i}].role",
            )
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise OpenAIError(400, f"messages[{i}].tool_calls must be an array", param="messages")
            if m.get("content") is None and not calls:
                raise OpenAIError(400, f"messages[{i}]: content is required without tool_calls", param="messages")
            if m.get("content") is not None and not _openai_text_ok(m["content"]):
                raise OpenAIError(400, f"messages[{i}].content must be a string or text parts", param="messages")
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    not isinstance(call.get("id"), str)
                    or call.get("type") != "function"
                    or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)
                    or not isinstance(function.get("arguments"), str)
                ):
                    raise OpenAIError(400, f"messages[{i}].tool_calls: invalid tool call", param="messages")
            waiting = [str(c["id"]) for c in calls]
            answerable = set(waiting)
        elif role == "tool":
            tid = m.get("tool_call_id")
            if tid not in answerable:
                raise OpenAIError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            if not _openai_text_ok(m.get("content")):
                raise OpenAIError(400, f"messages[{i}].content must be a string or text parts", param="messages")
            waiting = [w for w in waiting if w != tid]
        elif not _openai_text_ok(m.get("content")):
            raise OpenAIError(400, f"messages[{i}].content must be a string or text parts", param="messages")
    if waiting:
        raise OpenAIError(400, f"tool_call_ids without response messages: {', '.join(waiting)}", param="messages")


# -- chat completions → canonical, canonical → chat completion (the inverse of llm/translate.py) ---------


def canonical_messages(messages: list[dict[str, Any]]) -> tuple[str, list[Message]]:
    """(system, canonical history) from chat completions messages: the inverse of `openai_messages`.

    Consecutive `tool` messages and the user text after them become one user message, results
    first, as the loop sends them.
    """
    system: list[str] = []
    out: list[Message] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(flat_text(message.get("content")))
        elif role == "assistant":
            blocks = text_blocks(message.get("content"))
            calls = message.get("tool_calls")
            for i, call in enumerate(calls if isinstance(calls, list) else []):
                use = tool_use_block(call, str(index), i)
                if use is not None:
                    blocks.append(use)
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            text = flat_text(message.get("content"))
            is_error = text.startswith(ERROR_PREFIX)
            result = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": text[len(ERROR_PREFIX) :] if is_error else text,
                "is_error": is_error,
            }
            if not (out and out[-1]["role"] == "user"):
                out.append({"role": "user", "content": []})
            out[-1]["content"].append(result)
        elif role == "user":
            if not (out and out[-1]["role"] == "user"):
                out.append({"role": "user", "content": []})
            out[-1]["content"].extend(text_blocks(message.get("content")))
    return "\n\n".join(system), out


def openai_completion(response: LlmResponse, *, completion_id: str, created: int = 0) -> dict[str, Any]:
    """A chat completion carrying `response`: the inverse of `parse_openai_response`.

    Lossy where OpenAI has no field: `stop_sequence` and `pause_turn` read back as end_turn, cache
    writes are counted as plain prompt tokens.
    """
    has_text = any(b.get("type") == "text" for b in response.content)
    calls = [openai_tool_call(b) for b in response.tool_uses()]
    message: dict[str, Any] = {"role": "assistant", "content": response.text() if has_text else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    u = response.usage
    cached = u.cache_read_input_tokens
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": response.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": STOP_REASONS.get(response.stop_reason, "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": u.input_tokens + u.cache_creation_input_tokens + cached,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.cache_creation_input_tokens + cached + u.output_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


# -- the facade ---------------------------------------------------------------------------------------


def anthropic_body_from_openai(body: Json) -> Json:
    """The Messages request the brain reads, from a validated chat completions request."""
    system, messages = canonical_messages(body["messages"])
    out: Json = {
        "model": body["model"],
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or OPENAI_DEFAULT_MAX_TOKENS,
        "system": system,
        "messages": messages,
    }
    tools = body.get("tools")
    if tools:
        out["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object"},
            }
            for t in tools
        ]
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            out["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
        elif choice is not None:
            out["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
        if body.get("parallel_tool_calls") is False:
            out.setdefault("tool_choice", {"type": "auto"})["disable_parallel_tool_use"] = True
    return out


def build_completion(body: Json, sequence: int, created: int) -> Json:
    """The ``chat.completion`` for a validated chat completions request."""
    message = build_message(anthropic_body_from_openai(body), sequence)
    for block in message["content"]:  # OpenAI-style ids, as a real endpoint would send
        if block["type"] == "tool_use":
            block["id"] = "call_" + block["id"].removeprefix("toolu_")
    completion_id = "chatcmpl-sim_" + message["id"].removeprefix("msg_sim_")
    completion = openai_completion(parse_response(message), completion_id=completion_id, created=created)
    completion["system_fingerprint"] = "fp_simulated"
    return completion


# -- the stream ----------------------------------------------------------------------------------------


def _deltas(message: Json) -> list[Json]:
    """The message as OpenAI's deltas: the role, the text a few words at a time, each call's fragments."""
    text = message.get("content")
    deltas: list[Json] = [{"role": "assistant", "content": "" if text else None, "refusal": None}]
    deltas += [{"content": piece} for piece in (text_pieces(text) if text else [])]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {"index": index, "id": call["id"], "type": "function", "function": {**function, "arguments": ""}}
        deltas.append({"tool_calls": [opening]})
        for piece in chunks(function["arguments"], 12) if function["arguments"] else []:
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def completion_chunks(completion: Json, include_usage: bool) -> list[Json]:
    """The ``chat.completion.chunk`` events that stream ``completion``: the same text, calls, finish and usage."""
    head: Json = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint") if k in completion}
    head["object"] = "chat.completion.chunk"
    usage: Json = {"usage": None} if include_usage else {}
    choice = completion["choices"][0]
    out = [
        {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}], **usage}
        for delta in _deltas(choice["message"])
    ]
    closing = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
    out.append({**head, "choices": [closing], **usage})
    if include_usage:
        out.append({**head, "choices": [], "usage": completion["usage"]})
    return out


def chunk_frames(events: list[Json]) -> list[tuple[bool, bytes]]:
    """Each chunk as its ``data:`` frame, then ``[DONE]``; True marks a piece of the reply's text."""
    frames = [(_has_text(c), f"data: {dumps(c)}\n\n".encode()) for c in events]
    return [*frames, (False, b"data: [DONE]\n\n")]


def _has_text(chunk: Json) -> bool:
    return bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
