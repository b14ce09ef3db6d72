"""Reader's views of stored data: what a person reads, not the raw blocks (fences removed)."""

from __future__ import annotations

from typing import Any

from support_agent.agent.untrusted import unfence
from support_agent.store.conversations import Header, StoredMessage


def _text(content: list[dict[str, Any]]) -> str:
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def conversation_view(header: Header, messages: list[StoredMessage], refunds: list[dict[str, Any]]) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for m in messages:
        for b in m.content:
            if b.get("type") == "tool_result":
                results[str(b.get("tool_use_id"))] = b
    out = []
    for m in messages:
        calls = []
        for b in m.content:
            if b.get("type") == "tool_use":
                res = results.get(str(b.get("id")), {})
                calls.append(
                    {
                        "name": b.get("name"),
                        "input": b.get("input"),
                        "result": unfence(res.get("content")) if res else None,
                        "isError": bool(res.get("is_error", False)),
                    }
                )
        text = _text(m.content)
        if m.role == "user" and not text:
            continue  # a message of tool results only: shown with the calls it answers
        out.append({"seq": m.seq, "role": m.role, "createdAt": m.created_at, "text": text, "toolCalls": calls})
    return {
        "conversationId": header.conversation_id,
        "createdAt": header.created_at,
        "messages": out,
        "refunds": refunds,
    }


def conversation_summary(header: Header) -> dict[str, Any]:
    return {
        "conversationId": header.conversation_id,
        "createdAt": header.created_at,
        "updatedAt": header.updated_at,
        "title": header.title,
    }
