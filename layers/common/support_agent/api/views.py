"""Reader's views of stored data: what a person reads, not the raw blocks (fences removed)."""

from __future__ import annotations

from typing import Any

from support_agent.agent.untrusted import unfence
from support_agent.store.conversations import Header, StoredMessage
from support_agent.store.ratings import Ratings
from support_agent.store.turns import Turn

# What TRANSPARENCY=quiet hides (QUIET_HIDES) is declared once, in feed.py, beside the feed that applies it field by
# field; the conversation view leaves a tool call out whole.


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
    header: Header,
    messages: list[StoredMessage],
    refunds: list[dict[str, Any]],
    *,
    tools: bool,
    proposals: list[dict[str, Any]] | None = None,
    ratings: Ratings | None = None,
) -> dict[str, Any]:
    """The conversation as its owner reads it. ``tools`` (TRANSPARENCY=verbose) adds each message's tool calls
    with their name, input and result; quiet leaves them out (a call is QUIET_HIDES and isError), as the chat
    answer leaves out its trace. The refunds and the proposals (`proposal_view`) stay either way: they are the
    customer's own money and decisions, not tool data. ``ratings`` (store/ratings.py `Ratings`): the customer's own
    thumbs and closing rating, so a page opened again shows what was given (each message names its turn)."""
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
        if m.turn_id:
            entry["turnId"] = m.turn_id
        if m.role == "person":  # a support teammate's reply (store/takeover.py): who wrote it, as the customer sees it
            entry["author"] = m.author_name or m.author
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
        "proposals": proposals or [],
        "ratings": _ratings(ratings),
    }


def _ratings(ratings: Ratings | None) -> dict[str, Any]:
    closing = ratings.closing if ratings is not None else None
    return {
        "thumbs": dict(ratings.thumbs) if ratings is not None else {},
        "closing": {"score": closing.score, "comment": closing.comment} if closing is not None else None,
    }


def proposal_view(proposal: Any, now: str, *, tools: bool) -> dict[str, Any]:
    """A proposal (actions/proposals.py `Proposal`) as its customer reads it. One still PROPOSED past its expiry
    reads EXPIRED (no Confirm can take it any more; the core marks it so on the next touch). The action's input is
    tool data: only with ``tools`` (TRANSPARENCY=verbose), as a tool call's is; the summary says what it does."""
    status = proposal.status
    if status == "PROPOSED" and proposal.expires_at < now:
        status = "EXPIRED"
    view: dict[str, Any] = {
        "proposalId": proposal.proposal_id,
        "conversationId": proposal.conversation_id,
        "action": proposal.action,
        "orderId": (proposal.input or {}).get("order_id"),
        "summary": proposal.summary,
        "status": status,
        "createdAt": proposal.created_at,
        "expiresAt": proposal.expires_at,
        "policyVersion": proposal.policy_version,
        "decidedAt": proposal.decided_at,
        "decidedPolicyVersion": proposal.decided_policy_version,
        "outcome": proposal.outcome,
    }
    if tools:
        view["input"] = proposal.input
    return view


def conversation_summary(header: Header) -> dict[str, Any]:
    return {
        "conversationId": header.conversation_id,
        "createdAt": header.created_at,
        "updatedAt": header.updated_at,
        "title": header.title,
    }


def turn_view(turn: Turn, now_epoch: int) -> dict[str, Any]:
    """A turn record as its owner reads it: a refused or interrupted turn reads as failed, with why. A completed
    turn's ``response`` is its stored answer, the very body the chat function sends (agent/finish.py renders
    both)."""
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
