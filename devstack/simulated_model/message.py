"""The Messages API wire, outbound: the ``Message`` for the brain's decision, and the same message as the
server-sent events ``"stream": true`` asks for.

Ids are hashes of the request and a per-server call counter (unique per call, reproducible), token
counts are about four characters a token, and ``max_tokens`` cuts the content where the real API
would stop (stop reason ``max_tokens``).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from devstack.simulated_model.brain import decide
from devstack.simulated_model.wire import Json


def dumps(value: Any) -> str:
    """Compact JSON, as the API writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _canonical(body: Json) -> str:
    return dumps({k: v for k, v in body.items() if k != "stream"})


def digest(*parts: str) -> str:
    """A short stable hash: ids that differ per request and per call, never random."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _fit(content: list[Json], max_tokens: int) -> tuple[list[Json], bool]:
    """The content cut to ``max_tokens`` (about 4 characters a token); True when it had to be cut.

    A text block is cut mid-sentence; a tool_use that does not fit is kept with the input it had
    so far (none), as the API does when it stops in the middle of the arguments.
    """
    if _tokens(dumps(content)) <= max_tokens:
        return content, False
    budget = max_tokens * 4
    out: list[Json] = []
    for block in content:
        size = len(block["text"]) if block["type"] == "text" else len(dumps(block["input"]))
        if size <= budget:
            out.append(block)
            budget -= size
            continue
        if block["type"] == "text":
            out.append({"type": "text", "text": block["text"][: max(1, budget)]})
        else:
            out.append({**block, "input": {}})
        break
    return out, True


def build_message(body: Json, sequence: int) -> Json:
    """The full Message for a validated request; ``sequence`` makes the ids unique per call."""
    canonical = _canonical(body)
    message_id = "msg_sim_" + digest(canonical, str(sequence))
    text, calls = decide(body)
    content: list[Json] = [{"type": "text", "text": text}]
    for index, call in enumerate(calls):
        content.append(
            {
                "type": "tool_use",
                "id": "toolu_sim_" + digest(message_id, str(index)),
                "name": call.name,
                "input": call.input,
            }
        )
    max_tokens = int(body["max_tokens"])
    content, cut = _fit(content, max_tokens)
    stop_reason = "max_tokens" if cut else ("tool_use" if calls else "end_turn")
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": _tokens(canonical),
            "output_tokens": max_tokens if cut else _tokens(dumps(content)),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def text_pieces(text: str) -> list[str]:
    """A few words per delta, as the real API streams them."""
    words = re.findall(r"\S+\s*|\s+", text)
    return ["".join(words[i : i + 4]) for i in range(0, len(words), 4)] or [""]


def stream_events(message: Json) -> list[tuple[str, Json]]:
    """The SSE events that stream ``message``: the same content, usage and stop reason."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[tuple[str, Json]] = [("message_start", {"type": "message_start", "message": start})]
    events.append(("ping", {"type": "ping"}))
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                )
            )
            for piece in text_pieces(block["text"]):
                delta = {"type": "text_delta", "text": piece}
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
            )
            arguments = dumps(block["input"])
            for piece in [""] + (chunks(arguments, 12) if block["input"] else []):
                delta = {"type": "input_json_delta", "partial_json": piece}
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
                "usage": dict(usage),
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def sse_frames(events: list[tuple[str, Json]]) -> list[bytes]:
    """Each event as its own frame, so a paced stream can write them one by one."""
    return [f"event: {name}\ndata: {dumps(data)}\n\n".encode() for name, data in events]


def is_text_event(event: tuple[str, Json]) -> bool:
    """A piece of the reply's text: what a paced stream spreads its delay over."""
    delta = event[1].get("delta")
    return event[0] == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta"
