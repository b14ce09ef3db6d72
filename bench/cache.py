"""How much of a turn's input Anthropic's prompt cache would serve, estimated from our exact requests.

The requests are the real `AnthropicClient` bodies of real turns (the `Agent` on the in-memory
store, a scripted model behind an httpx MockTransport). The cache model follows Anthropic's rules:

* the prefix is tools → system → messages, in blocks; a breakpoint is a block with ``cache_control``
  (at most 4; we send 3: the last tool, the system block, the newest message's last block);
* a request writes, at each breakpoint, the prefix up to it — only if that prefix is at least the
  minimum cacheable length (1024 tokens for Sonnet/Opus, 2048 for Haiku);
* a request reads the longest previously written prefix that it repeats exactly, looked up at its
  breakpoints and up to 20 blocks before each;
* a different ``tool_choice`` invalidates the cached messages (tools and system survive).

Tokens are estimated as characters / 4 of each block's JSON, without the tool-use system prompt the
API adds; the shares, not the absolute counts, are the point.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import httpx

LOOKBACK_BLOCKS = 20
MIN_CACHEABLE = {"sonnet": 1024, "haiku": 2048}


def blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """(canonical json, has breakpoint) per block, in cache order; message blocks carry tool_choice."""
    out: list[tuple[str, bool]] = []

    def add(block: dict[str, Any], scope: str = "") -> None:
        marked = "cache_control" in block
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        out.append((scope + json.dumps(clean, sort_keys=True), marked))

    for tool in body.get("tools", []):
        add(tool)
    for block in body.get("system", []):
        add(block)
    scope = json.dumps(body.get("tool_choice"))
    for message in body.get("messages", []):
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content:
            add(block, scope + message["role"])
    return out


@dataclass
class Usage:
    read: int = 0
    written: int = 0
    uncached: int = 0

    @property
    def total(self) -> int:
        return self.read + self.written + self.uncached


def simulate(bodies: list[dict[str, Any]], min_tokens: int) -> list[Usage]:
    """Per request: tokens read from cache, written to it, and neither."""
    cache: set[str] = set()
    out = []
    for body in bodies:
        bs = blocks(body)
        tokens = [max(1, len(text) // 4) for text, _ in bs]
        prefix_tokens, keys, h = [], [], hashlib.sha256()
        running = 0
        for (text, _), t in zip(bs, tokens, strict=True):
            h.update(text.encode())
            keys.append(h.copy().hexdigest())
            running += t
            prefix_tokens.append(running)
        breakpoints = [i for i, (_, marked) in enumerate(bs) if marked]
        assert len(breakpoints) <= 4
        hit = -1
        for b in breakpoints:
            for i in range(b, max(-1, b - LOOKBACK_BLOCKS), -1):
                if keys[i] in cache:
                    hit = max(hit, i)
                    break
        read = prefix_tokens[hit] if hit >= 0 else 0
        last = breakpoints[-1] if breakpoints else -1
        upto = prefix_tokens[last] if last >= 0 else 0
        writable = [b for b in breakpoints if prefix_tokens[b] >= min_tokens]
        written = max(0, prefix_tokens[writable[-1]] - read) if writable and writable[-1] > hit else 0
        cache.update(keys[b] for b in writable)
        out.append(Usage(read, written, prefix_tokens[-1] - read - written if bs else 0))
        assert out[-1].uncached >= prefix_tokens[-1] - upto
    return out


def captured_turns(turns: list[tuple[str, list[list[dict[str, Any]]]]], **settings: str) -> list[list[dict[str, Any]]]:
    """Run turns through the real Agent and AnthropicClient; the JSON bodies sent, per turn.

    ``turns``: (user message, [content blocks the model answers, per iteration]).
    """
    from bench.loop import our_agent
    from support_agent.llm.anthropic import AnthropicClient

    sent: list[dict[str, Any]] = []
    script: list[list[dict[str, Any]]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        content = script.pop(0)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        return httpx.Response(
            200, json={"content": content, "stop_reason": stop, "usage": {"input_tokens": 1, "output_tokens": 1}}
        )

    services, _ = our_agent("http://unused", **settings)
    services.agent.llm = AnthropicClient(api_key="k", model="claude-sonnet-4-5", transport=httpx.MockTransport(answer))
    from support_agent.auth import Principal
    from support_agent.messages import Deadline

    cid = None
    per_turn = []
    for n, (message, replies) in enumerate(turns):
        script[:] = [list(r) for r in replies]
        start = len(sent)
        result = services.agent.run_turn(
            Principal("c7", "customer", 7), 7, cid, message, f"cache-{n}", Deadline.after(27)
        )
        cid = result.conversation_id
        per_turn.append(sent[start:])
    return per_turn


def five_iteration_turn(tag: str) -> tuple[str, list[list[dict[str, Any]]]]:
    def use(i: int, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "tool_use", "id": f"toolu_{tag}{i}", "name": name, "input": args}]

    return (
        f"Tell me everything about orders 1042 and 1043 and their invoices ({tag}).",
        [
            use(1, "lookup_order", {"order_id": 1042}),
            use(2, "list_invoices", {"order_id": 1042}),
            use(3, "lookup_order", {"order_id": 1043}),
            use(4, "list_invoices", {"order_id": 1043}),
            [{"type": "text", "text": "Both orders arrived; both invoices are paid."}],
        ],
    )


def measure() -> dict[str, Any]:
    """Cache shares for a 5-iteration turn: alone, as the third turn, and without the final tool ban."""
    out: dict[str, Any] = {}
    for label, max_iterations in (
        ("tool_choice none on iteration 5 (MAX_ITERATIONS=5)", "5"),
        ("no tool_choice change (MAX_ITERATIONS=8)", "8"),
    ):
        turns = captured_turns([five_iteration_turn(t) for t in "abc"], MAX_ITERATIONS=max_iterations)
        for model, minimum in MIN_CACHEABLE.items():
            for which, index in (("first turn", 0), ("third turn", 2)):
                flat = [b for t in turns for b in t]
                start = sum(len(t) for t in turns[:index])
                usage = simulate(flat, minimum)[start : start + len(turns[index])]
                out[f"{label} | {model} | {which}"] = usage
    return out
