"""An httpx transport that answers Messages API requests from a ScriptedModel.

The real AnthropicClient builds and parses the wire format; the script decides the answers.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from support_agent.errors import ServiceError
from tests.support.scripted import ScriptedModel


class HttpFailure(Exception):
    """A scripted HTTP error response (status, body, headers)."""

    def __init__(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status, self.body, self.headers = status, body or {}, headers or {}


def scripted_transport(model: ScriptedModel) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        system = "".join(b["text"] for b in body.get("system", []))
        try:
            resp = model.create(system, body["messages"], body.get("tools", []), body.get("tool_choice"))
        except HttpFailure as f:
            return httpx.Response(f.status, json=f.body, headers=f.headers)
        except ServiceError as e:
            return httpx.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": str(e)}})
        u = resp.usage
        return httpx.Response(
            200,
            json={
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": resp.content,
                "stop_reason": resp.stop_reason,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": u.input_tokens,
                    "output_tokens": u.output_tokens,
                    "cache_read_input_tokens": u.cache_read_input_tokens,
                    "cache_creation_input_tokens": u.cache_creation_input_tokens,
                },
            },
        )

    return httpx.MockTransport(handle)
