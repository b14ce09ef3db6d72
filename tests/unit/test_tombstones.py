"""Tombstones: content erased, structure kept, so any valid history stays valid."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.agent.history import problems
from support_agent.store.erasure import ERASED, tombstone

SECRET = "Dana, 12 Elm Street"


def test_each_block_kind() -> None:
    content = [
        {"type": "thinking", "thinking": SECRET, "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": SECRET},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_order", "input": {"order_id": 1042, "note": SECRET}},
    ]
    assert tombstone(content) == [
        {"type": "text", "text": ERASED},
        {"type": "tool_use", "id": "toolu_01", "name": "lookup_order", "input": {}},
    ]
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": f"<data>{SECRET}</data>", "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": [{"type": "text", "text": SECRET}]},
    ]
    assert tombstone(results) == [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": ERASED, "is_error": True},
        {"type": "tool_result", "tool_use_id": "toolu_02", "content": ERASED},
    ]


def test_a_message_is_never_left_empty_and_tombstones_are_fixed_points() -> None:
    only_thinking = [{"type": "thinking", "thinking": SECRET, "signature": "s"}]
    assert tombstone(only_thinking) == [{"type": "text", "text": ERASED}]
    once = tombstone([{"type": "text", "text": SECRET}, {"type": "image", "source": {"data": SECRET}}])
    assert SECRET not in json.dumps(once)
    assert tombstone(once) == once  # erasing again changes nothing: the eraser counts only new work


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid Messages API sequences: user text, then assistant turns with tool calls answered in the next message."""
    words = st.text(min_size=1, max_size=20)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": draw(words)}]}]
    n = 0
    for _ in range(draw(st.integers(0, 5))):
        uses = []
        for _ in range(draw(st.integers(0, 3))):
            n += 1
            use = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "lookup_order", "input": {"q": draw(words)}}
            uses.append(use)
        thinking = [{"type": "thinking", "thinking": draw(words), "signature": "s"}] if draw(st.booleans()) else []
        messages.append({"role": "assistant", "content": [*thinking, {"type": "text", "text": draw(words)}, *uses]})
        results = [
            {"type": "tool_result", "tool_use_id": u["id"], "content": draw(words), "is_error": draw(st.booleans())}
            for u in uses
        ]
        follow_up = [{"type": "text", "text": draw(words)}] if draw(st.booleans()) or not results else []
        messages.append({"role": "user", "content": results + follow_up})
    return messages


@settings(max_examples=60, deadline=None)
@given(histories())
def test_tombstoned_valid_histories_stay_valid(history: list[dict[str, Any]]) -> None:
    assert problems(history) == []
    erased = [{"role": m["role"], "content": tombstone(m["content"])} for m in history]
    assert problems(erased) == []
    for before, after in zip(history, erased, strict=True):
        ids = [(b.get("id"), b.get("tool_use_id")) for b in before["content"] if b["type"].startswith("tool_")]
        assert ids == [(b.get("id"), b.get("tool_use_id")) for b in after["content"] if b["type"].startswith("tool_")]
        assert all(b.get("text", ERASED) == ERASED for b in after["content"])
