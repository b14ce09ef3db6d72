"""The one wire converter of the tests: a model double's answers as Messages API JSON on an httpx transport.

The real AnthropicClient builds and parses the wire format; the model decides the answers. The JSON is
written as leniently as a hostile or broken endpoint could write it: ``\\ud800``-style escapes for lone
surrogates and ``NaN``/``Infinity`` literals (both parse in Python), so the client sees what such an
endpoint could really send; well-formed answers read the same either way.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from support_agent.errors import ServiceError
from support_agent.llm.base import LlmClient, LlmResponse


class HttpFailure(Exception):
    """A scripted HTTP error response (status, body, headers)."""

    def __init__(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status, self.body, self.headers = status, body or {}, headers or {}


def message_json(resp: LlmResponse, model: str = "claude-test", message_id: str = "msg_test") -> dict[str, Any]:
    """`resp` as the Messages API's ``Message`` body."""
    u = resp.usage
    return {
        "id": message_id,
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


def scripted_transport(model: LlmClient) -> httpx.MockTransport:
    """Each request answered by `model.create`: its `LlmResponse`, or an `httpx.Response` it returns as is.

    Raising `HttpFailure` answers that error, a `ServiceError` a 529 (overloaded); any other exception
    (a timeout, a reset) is passed on to the client, as a transport raises it.
    """

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        system = "".join(b["text"] for b in body.get("system", []))
        try:
            out: Any = model.create(system, body["messages"], body.get("tools", []), body.get("tool_choice"))
        except HttpFailure as f:
            return httpx.Response(f.status, json=f.body, headers=f.headers)
        except ServiceError as e:
            return httpx.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": str(e)}})
        if isinstance(out, httpx.Response):
            return out
        return lenient_json(200, message_json(out, body["model"]))

    return httpx.MockTransport(handle)
