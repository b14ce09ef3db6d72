"""The Messages API's stream (`"stream": true`) assembled into the message the plain call answers.

Events: `message_start` (the message without content, its usage so far), per block `content_block_start`,
`content_block_delta` (text, a tool input's JSON fragments, thinking and its signature, citations) and
`content_block_stop`, then `message_delta` (stop reason, final usage) and `message_stop`; `ping` is a
keep-alive; `error` is a failure inside the 200 (overloaded mid-stream), raised as `StreamFault` with the
status its type has outside a stream, so it is retried or refused exactly as an HTTP error would be.
The assembled message goes through the same `parse_response` as a plain answer.
"""

from __future__ import annotations

import json
from typing import Any

from support_agent.llm.base import LlmResponse
from support_agent.llm.messages_api import parse_response
from support_agent.llm.streaming import StreamFault
from support_agent.messages import Block

# An error event's type → the HTTP status the API gives it outside a stream (docs.anthropic.com, "Errors").
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
# Which field of its block each delta type adds to.
_APPENDS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}


class MessageStream:
    """Feed it each event (`feed` answers the text piece to show, if any); `result` once the stream ended."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.blocks: dict[int, Block] = {}
        self.json_parts: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stopped = False

    def feed(self, event: str, data: str) -> str:
        payload = json.loads(data)
        if not isinstance(payload, dict):
            raise ValueError(f"{event} event is not an object")
        kind = str(payload.get("type") or event)
        if kind == "error":
            raise StreamFault(_error_status(payload), payload)
        if kind == "message_start":
            message = payload.get("message")
            if not isinstance(message, dict):
                raise ValueError("message_start without a message")
            self.message = dict(message)
            self.usage.update(_counts(message.get("usage")))
        elif kind == "content_block_start":
            block = payload.get("content_block")
            if not isinstance(block, dict):
                raise ValueError("content_block_start without a block")
            self.blocks[_index(payload)] = dict(block)
        elif kind == "content_block_delta":
            return self._delta(_index(payload), payload.get("delta"))
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and self.message is not None:
                self.message.update({k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")})
            self.usage.update(_counts(payload.get("usage")))
        elif kind == "message_stop":
            self.stopped = True
        return ""  # ping, content_block_stop, and event types added later

    def _delta(self, index: int, delta: Any) -> str:
        block = self.blocks.get(index)
        if block is None or not isinstance(delta, dict):
            raise ValueError(f"delta for block {index} that never started")
        kind = delta.get("type")
        if kind == "input_json_delta":
            self.json_parts.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        elif kind in _APPENDS:
            field = _APPENDS[kind]
            piece = str(delta.get(field) or "")
            block[field] = str(block.get(field) or "") + piece
            return piece if kind == "text_delta" else ""
        return ""

    def result(self) -> LlmResponse:
        """The message as the plain call answers it; `ValueError` for a stream that ended early."""
        if self.message is None or not self.stopped:
            raise ValueError("the stream ended before message_stop")
        stop_reason = self.message.get("stop_reason")
        content = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if index in self.json_parts:
                block["input"] = _tool_input("".join(self.json_parts[index]), block, stop_reason)
            content.append(block)
        return parse_response({**self.message, "content": content, "usage": self.usage})


def _index(payload: dict[str, Any]) -> int:
    index = payload.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError("event without a block index")
    return index


def _counts(usage: Any) -> dict[str, Any]:
    """A usage object's counts; a later event's (message_delta's) replace the earlier ones."""
    return {k: v for k, v in usage.items() if v is not None} if isinstance(usage, dict) else {}


def _tool_input(raw: str, block: Block, stop_reason: Any) -> Any:
    """A tool input from its JSON fragments; cut by the output limit, it keeps what it had (never run)."""
    if not raw.strip():
        return block.get("input", {})
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        if stop_reason == "max_tokens":
            return block.get("input", {})
        raise


def _error_status(payload: dict[str, Any]) -> int:
    error = payload.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return ERROR_STATUS.get(str(kind), 500)  # an unknown failure mid-stream: the server's, worth retrying
