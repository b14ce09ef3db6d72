"""A Messages API server on an httpx transport, as lenient as a hostile or broken endpoint can be.

Unlike a well-behaved server it writes JSON with ``\\ud800``-style escapes for lone surrogates and with
``NaN``/``Infinity`` literals (both parse in Python), so the real `AnthropicClient` sees what such an
endpoint could really send. `model` is any object with the `LlmClient.create` signature; it may also
return an `httpx.Response` or raise an exception for the transport to pass on (a timeout, a reset).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from support_agent.llm.base import LlmResponse


def message_json(resp: LlmResponse, model: str = "claude-test") -> dict[str, Any]:
    u = resp.usage
    return {
        "id": "msg_wire",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": resp.content,
        "stop_reason": resp.stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
        },
    }


def lenient_json(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    raw = json.dumps(body, ensure_ascii=True, allow_nan=True, default=str).encode()
    return httpx.Response(status, content=raw, headers={"content-type": "application/json", **(headers or {})})


def messages_transport(model: Any) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        system = "".join(b["text"] for b in body.get("system", []))
        out = model.create(system, body["messages"], body.get("tools", []), body.get("tool_choice"))
        if isinstance(out, httpx.Response):
            return out
        return lenient_json(200, message_json(out, body["model"]))

    return httpx.MockTransport(handle)
