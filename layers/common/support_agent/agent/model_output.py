"""What of a model's answer is stored: only blocks the Messages API accepts back, within DynamoDB's limits.

The assistant content is written ahead before any tool runs and replayed in every later request, so a
malformed block from a broken or hostile endpoint would poison the conversation for good (every later
call refused), and an oversized answer would make the write itself fail on every retry. Hence:

* each kept block is rebuilt from the fields the API defines for its type (a stray ``citations`` or an
  unsigned ``thinking`` block is not replayed); unknown block types are dropped;
* tool_use blocks need a usable id, unique in the whole conversation (the API refuses a request in
  which any tool_use id repeats, in any message), and a tool-like name; at most `MAX_TOOL_USES` are
  kept, so the results message, the header and one audit row per call fit one TransactWriteItems;
* strings are made valid Unicode (lone surrogates cannot be encoded as UTF-8) and non-finite numbers
  are dropped (the API takes strict JSON only);
* the whole content stays under `MAX_CONTENT_BYTES` (a DynamoDB item holds 400 KB): an oversized tool
  input is replaced by ``{}`` (the call then fails validation instead of running), long texts are cut.

A real Claude response passes through unchanged.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from typing import Any

from support_agent.messages import Block

TOOL_USE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
MAX_TOOL_USES = 64
MAX_CONTENT_BYTES = 256 * 1024
MAX_INPUT_BYTES = 16 * 1024
CUT_MARK = " […]"
NO_ANSWER: Block = {"type": "text", "text": "(no answer)"}


def clean(value: Any) -> Any:
    """JSON-safe: valid Unicode strings, no NaN or infinities (replaced by None)."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {clean(str(k)): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _block(block: Any, seen: set[str], taken: Collection[str]) -> Block | None:
    """The block as the API defines it, or None when it cannot be replayed."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return {"type": "text", "text": text} if isinstance(text, str) and text.strip() else None
    if kind == "tool_use":
        tid, name = block.get("id"), block.get("name")
        if not (isinstance(tid, str) and TOOL_USE_ID.match(tid) and tid not in seen and tid not in taken):
            return None
        if not (isinstance(name, str) and TOOL_NAME.match(name)) or len(seen) >= MAX_TOOL_USES:
            return None
        seen.add(tid)
        raw = block.get("input")
        args = raw if isinstance(raw, dict) else {}
        return {"type": "tool_use", "id": tid, "name": name, "input": {} if _size(args) > MAX_INPUT_BYTES else args}
    if kind == "thinking":
        thinking, signature = block.get("thinking"), block.get("signature")
        if isinstance(thinking, str) and isinstance(signature, str) and signature:
            return {"type": "thinking", "thinking": thinking, "signature": signature}
        return None
    if kind == "redacted_thinking":
        data = block.get("data")
        return {"type": "redacted_thinking", "data": data} if isinstance(data, str) and data else None
    return None


def _fit(blocks: list[Block]) -> list[Block]:
    """Cut the longest texts (then drop thinking) until the content fits `MAX_CONTENT_BYTES`."""
    while _size(blocks) > MAX_CONTENT_BYTES:
        texts = [b for b in blocks if b["type"] == "text" and len(b["text"]) > 256]
        if texts:
            longest = max(texts, key=lambda b: len(b["text"]))
            longest["text"] = longest["text"][: len(longest["text"]) // 2] + CUT_MARK
            continue
        thinking = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
        if not thinking:
            break  # only tool_uses (each input <= MAX_INPUT_BYTES, at most MAX_TOOL_USES) and short texts
        blocks.remove(thinking[0])
    return blocks


def sanitize_content(content: Any, taken: Collection[str] = frozenset()) -> list[Block]:
    """What of the model's content can be stored and replayed as a valid assistant message.

    `taken`: the tool_use ids already in the conversation; a tool_use reusing one is dropped, not run.
    """
    seen: set[str] = set()
    raws = content if isinstance(content, list) else []
    kept = [b for b in (_block(clean(raw), seen, taken) for raw in raws) if b]
    return _fit(kept) or [dict(NO_ANSWER)]
