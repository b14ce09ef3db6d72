"""A conversation's stored turns, shaped as the loop stores them, for the tests of the request history (its budget,
its incremental merge): user text, tool rounds each answered, then the assistant's text."""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def stored_turn(n: int, calls: int, size: int, words: tuple[str, str] = ("question ", "answer ")) -> list[Message]:
    """Turn ``n``: its question, ``calls`` tool rounds, its answer; each text and result ``size`` characters long
    past its label (``words``, then the turn's number)."""
    question, answer = words
    out: list[Message] = [{"role": "user", "content": [{"type": "text", "text": f"{question}{n} " + "q" * size}]}]
    for c in range(calls):
        tid = f"toolu_{n}_{c}"
        out.append({"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "t", "input": {}}]})
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": "r" * size}]})
    out.append({"role": "assistant", "content": [{"type": "text", "text": f"{answer}{n} " + "a" * size}]})
    return out
