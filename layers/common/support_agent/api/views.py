"""Reader's views of stored data: what a person reads, not the raw blocks (fences removed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from support_agent.agent.untrusted import unfence
from support_agent.store.conversations import Header, StoredMessage
from support_agent.store.turns import Turn

if TYPE_CHECKING:
    from support_agent.agent.loop import TurnResult


# What TRANSPARENCY=quiet keeps out of every body a customer reads: which tool ran, what it was given, what it
# answered. The conversation view leaves out its toolCalls (these and isError), the event feed these fields of its
# tool events, the chat answer its trace. One declaration, so the view and the feed cannot disagree again.
QUIET_HIDES = ("name", "input", "result")


def tool_fields(fields: dict[str, Any], *, verbose: bool) -> dict[str, Any]:
    """A tool call's fields as a customer reads them: all when verbose, none of QUIET_HIDES when quiet."""
    return dict(fields) if verbose else {k: v for k, v in fields.items() if k not in QUIET_HIDES}


def _text(content: list[dict[str, Any]]) -> str:
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")


def _call(use: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": use.get("name"),
        "input": use.get("input"),
        "result": unfence(result.get("content")) if result else None,
        "isError": bool(result.get("is_error", False)),
    }


def conversation_view(
    header: Header, messages: list[StoredMessage], refunds: list[dict[str, Any]], *, tools: bool
) -> dict[str, Any]:
    """The conversation as its owner reads it. ``tools`` (TRANSPARENCY=verbose) adds each message's tool calls
    with their name, input and result; quiet leaves them out (a call is QUIET_HIDES and isError), as the chat
    answer leaves out its trace. The refunds stay either way: they are the customer's own money, not tool data."""
    results: dict[str, dict[str, Any]] = {}
    for m in messages:
        for b in m.content:
            if b.get("type") == "tool_result":
                results[str(b.get("tool_use_id"))] = b
    out = []
    for m in messages:
        text = _text(m.content)
        if m.role == "user" and not text:
            continue  # a message of tool results only: shown with the calls it answers
        entry: dict[str, Any] = {"seq": m.seq, "role": m.role, "createdAt": m.created_at, "text": text}
        if tools:
            entry["toolCalls"] = [
                _call(b, results.get(str(b.get("id")), {})) for b in m.content if b.get("type") == "tool_use"
            ]
        out.append(entry)
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


def turn_view(turn: Turn, now_epoch: int) -> dict[str, Any]:
    """A turn record as its owner reads it: a refused or interrupted turn reads as failed, with why."""
    error: dict[str, Any] | None = None
    status = turn.status
    if turn.interrupted(now_epoch):
        status, error = "failed", {"code": "turn_interrupted", "message": "the turn did not finish; send it again"}
    elif status in ("failed", "refused"):
        status, error = "failed", (turn.response or {}).get("error") or {"code": "internal_error", "message": ""}
    return {
        "turnId": turn.turn_id,
        "conversationId": turn.conversation_id,
        "status": status,
        "response": turn.response if status == "completed" else None,
        "error": error,
    }


def turn_body(result: TurnResult, turn_id: str, verbose: bool) -> dict[str, Any]:
    """A turn's 200 body: the same whether the chat function or the worker finished it."""
    out: dict[str, Any] = {
        "conversationId": result.conversation_id,
        "turnId": turn_id,
        "reply": result.reply,
        "stopReason": result.stop_reason,
        "iterations": result.iterations,
        "inputTokens": result.usage.input_tokens,
        "outputTokens": result.usage.output_tokens,
        "cacheReadInputTokens": result.usage.cache_read_input_tokens,
        "cacheCreationInputTokens": result.usage.cache_creation_input_tokens,
    }
    if verbose:
        out["trace"] = result.trace
    return out
