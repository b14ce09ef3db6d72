"""A streamed chat completion (`"stream": true`) assembled into the completion the plain call answers.

Each `data:` line is a `chat.completion.chunk`: the first choice's `delta` carries pieces of `content` (and of
`refusal`), `tool_calls` fragments keyed by `index` (the id, type and name come once, `arguments` in pieces),
and its last chunk a `finish_reason`; with `stream_options.include_usage` a final chunk with no choices carries
`usage`; `data: [DONE]` ends it. A chunk with an `error` object is a failure inside the 200 (some compatible
servers send one): raised as `StreamFault` with a 5xx, so it is retried as the HTTP error would be. The
assembled completion goes through the same `parse_openai_response` as a plain answer.
"""

from __future__ import annotations

import json
from typing import Any

from support_agent.llm.base import LlmResponse
from support_agent.llm.streaming import StreamFault
from support_agent.llm.translate import parse_openai_response

DONE = "[DONE]"


class CompletionStream:
    """Feed it each event (`feed` answers the text piece to show, if any; the event name is always "message"
    here); `result` once the stream ended."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}  # id, model: the same in every chunk
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: Any = None
        self.usage: Any = None
        self.done = False

    def feed(self, event: str, data: str) -> str:
        if data.strip() == DONE:
            self.done = True
            return ""
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError("chunk is not an object")
        if chunk.get("error") is not None:
            raise StreamFault(500, chunk)
        for key in ("id", "model"):
            if chunk.get(key) and key not in self.head:
                self.head[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        first = (
            [c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0] if isinstance(choices, list) else []
        )
        return "".join(self._choice(c) for c in first)

    def _choice(self, choice: dict[str, Any]) -> str:
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        for fragment in delta.get("tool_calls") or []:
            if isinstance(fragment, dict):
                self._call(fragment)
        piece = delta.get("content")
        if isinstance(piece, str):
            self.content.append(piece)
            return piece
        return ""

    def _call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = len(self.calls)  # a server that numbers nothing sends each call whole
        call = self.calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if fragment.get("id"):
            call["id"] = fragment["id"]
        function = fragment.get("function")
        if not isinstance(function, dict):
            return
        if function.get("name") and not call["function"]["name"]:
            call["function"]["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["function"]["arguments"] += arguments
        elif arguments is not None:  # some compatible servers send the object whole
            call["function"]["arguments"] = arguments

    def result(self) -> LlmResponse:
        """The completion as the plain call answers it; `ValueError` for a stream that ended early."""
        if self.finish_reason is None and not self.done:
            raise ValueError("the stream ended before a finish_reason")
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content) if self.content else None,
            "refusal": "".join(self.refusal) if self.refusal else None,
        }
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish_reason}
        return parse_openai_response({**self.head, "choices": [choice], "usage": self.usage})
