"""History validity and repair.

The stored history is append-only and always a valid Messages API sequence once repaired: every
``tool_use`` is answered by exactly one ``tool_result`` in the next (user) message. Writes are
atomic per step, so the only gap a crash can leave is an assistant message whose tool calls have
no results yet: `unanswered_tool_uses` finds it. `RequestHistory` keeps a turn's request merged as
messages arrive.

A decision the customer made outside the chat (Confirm or Decline of a proposed action, api/chat_routes.py) reaches
the model as a `Note`: text from the system, never the customer's words, placed in the first user message after the
point it was decided (`with_notes`), rebuilt the same way every turn so the cached prefix stays put.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from support_agent.agent import budget
from support_agent.agent.untrusted import unfence
from support_agent.messages import Block, Message
from support_agent.store.conversations import StoredMessage


def for_model(message: StoredMessage) -> Message:
    """A stored message as the model's request carries it. A person's (role ``person``, store/takeover.py) is the
    support side's words to the customer: an assistant message, marked with its author (agent/prompt.py says what
    the mark means), so every wire format (Anthropic, OpenAI, Bedrock) sees only user and assistant."""
    if message.role != "person":
        return message.as_message()
    text = "".join(str(b.get("text", "")) for b in message.content if b.get("type") == "text")
    mark = f"(support teammate {message.author_name or message.author or 'unnamed'} wrote:)"
    return {"role": "assistant", "content": [{"type": "text", "text": f"{mark} {text}"}]}


NOTE_MARK = "(note from the system, not the customer:"  # agent/prompt.py tells the model what it means
NOTE_OUTCOME_CHARS = 1000  # an outcome longer than this is cut: the note is a summary, the audit has the rest


@dataclass(frozen=True)
class Note:
    """System text for the model: goes into the first user message stored after message ``after_seq``."""

    after_seq: int
    text: str


def _data(value: Any, limit: int) -> str:
    """``value`` as one line of JSON in which nothing looks like a tag (as a fence's payload), at most ``limit``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e")
    return text if len(text) <= limit else text[:limit] + "…(cut)"


def decision_notes(proposals: Iterable[Any]) -> list[Note]:
    """One note per decided proposal (actions/proposals.py `Proposal`, with its ``after_seq``): what the customer
    decided and what came of it. A proposal not decided yet has none: the model must not learn of a decision
    that was not made."""
    notes = []
    for p in proposals:
        if p.after_seq is None or p.status == "PROPOSED":
            continue
        what = f"proposal {p.proposal_id} ({_data(p.summary, 300)})"
        if p.status == "EXPIRED":
            said = f"{what} EXPIRED without the customer's confirmation; nothing was done"
        elif p.status == "DECLINED":
            said = f"the customer DECLINED {what}; nothing was done"
        elif p.status == "CONFIRMING":
            said = f"the customer CONFIRMED {what}; outcome: not known yet (still being carried out)"
        else:
            said = f"the customer CONFIRMED {what}; outcome: {_data(p.outcome, NOTE_OUTCOME_CHARS)}"
        notes.append(Note(int(p.after_seq), f"{NOTE_MARK} {said})"))
    return notes


def proposed_in(history: Iterable[StoredMessage]) -> bool:
    """Whether a tool result of this conversation proposed an action (``status`` PROPOSED): only then can the
    customer have decided one, so only then are the decisions read (a conversation without one costs no read)."""
    for stored in history:
        message = stored.as_message()
        if message["role"] != "user":
            continue
        for block in blocks(message):
            if block.get("type") == "tool_result" and "PROPOSED" in str(block.get("content", "")):
                payload = unfence(block.get("content"))
                if isinstance(payload, dict) and payload.get("status") == "PROPOSED":
                    return True
    return False


def _with_text(message: Message, texts: list[str]) -> Message:
    """``message`` with ``texts`` as text blocks after its tool results (which must come first) and before the rest."""
    content = blocks(message)
    results = [b for b in content if b.get("type") == "tool_result"]
    rest = [b for b in content if b.get("type") != "tool_result"]
    return {"role": message["role"], "content": [*results, *({"type": "text", "text": t} for t in texts), *rest]}


def with_notes(history: Sequence[StoredMessage], notes: Sequence[Note]) -> tuple[list[Message], Message | None]:
    """The history as the model's request carries it (`for_model`), each note in the first user message stored
    after its ``after_seq``; and a user message of the notes no stored message follows yet (None: no such note),
    which the caller adds after any repair so that the customer's new message joins it."""
    waiting = sorted(notes, key=lambda n: n.after_seq)
    out: list[Message] = []
    for stored in history:
        message = for_model(stored)
        due = [n.text for n in waiting if n.after_seq < stored.seq] if message["role"] == "user" else []
        if due:
            waiting = waiting[len(due) :]
            message = _with_text(message, due)
        out.append(message)
    if not waiting:
        return out, None
    return out, {"role": "user", "content": [{"type": "text", "text": n.text} for n in waiting]}


def blocks(message: Message) -> list[Block]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def tool_uses(message: Message) -> list[Block]:
    return [b for b in blocks(message) if b.get("type") == "tool_use"]


def unanswered_tool_uses(history: list[StoredMessage]) -> tuple[StoredMessage, list[Block]] | None:
    if not history or history[-1].role != "assistant":
        return None
    uses = tool_uses(history[-1].as_message())
    return (history[-1], uses) if uses else None


def for_request(messages: list[Message]) -> list[Message]:
    """Merge consecutive same-role messages (e.g. stored tool results + a new user message)."""
    out: list[Message] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            out[-1] = {"role": message["role"], "content": blocks(out[-1]) + blocks(message)}
        else:
            out.append({"role": message["role"], "content": blocks(message)})
    return out


class RequestHistory:
    """A turn's history as its model requests see it, kept up to date message by message.

    Each iteration adds only its new messages: the history is not re-merged (`for_request`), its
    tool_use ids not re-collected and its messages not re-serialised for the budget's estimate on
    every model call — only the merged message that changed is estimated again.
    """

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._merged: list[Message] = []  # for_request of everything added
        # budget.estimate_tokens and budget.opens_turn of a prefix of _merged, filled on demand
        self._sizes: list[int] = []
        self._opens: list[bool] = []
        self.tool_use_ids: set[str] = set()  # every tool_use id added: a new one may not repeat them
        for message in messages:
            self.add(message)

    def add(self, message: Message) -> None:
        content = blocks(message)
        self.tool_use_ids.update(b["id"] for b in content if b.get("type") == "tool_use")
        merged = self._merged
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = {"role": message["role"], "content": merged[-1]["content"] + content}
            del self._sizes[len(merged) - 1 :], self._opens[len(merged) - 1 :]  # the last one changed
        else:
            merged.append({"role": message["role"], "content": content})

    def request(self, pending: Message | None, budget_tokens: int | None) -> list[Message]:
        """``for_request`` of everything added plus ``pending`` (not kept), within ``budget_tokens``."""
        out = list(self._merged)
        if pending is not None:
            if out and out[-1]["role"] == pending["role"]:
                out[-1] = {"role": pending["role"], "content": out[-1]["content"] + blocks(pending)}
            else:
                out.append({"role": pending["role"], "content": blocks(pending)})
        if not budget_tokens or not out:
            return out
        sizes, opens = self._sizes, self._opens
        new = self._merged[len(sizes) :]
        sizes.extend(budget.estimate_tokens(m) for m in new)
        opens.extend(budget.opens_turn(m) for m in new)
        if len(out) > len(sizes) or out[-1] is not self._merged[-1]:  # pending added or merged into the last
            sizes = [*sizes[: len(out) - 1], budget.estimate_tokens(out[-1])]
            opens = [*opens[: len(out) - 1], budget.opens_turn(out[-1])]
        if sum(sizes) <= budget_tokens:  # everything fits (a short conversation): nothing to cut
            return out
        return budget.fit(out, budget_tokens, sizes, opens)


def problems(messages: list[Message]) -> list[str]:
    """Why a history is not a valid Messages API sequence; empty when it is."""
    found: list[str] = []
    merged = for_request(messages)
    if merged and merged[0]["role"] != "user":
        found.append("history does not start with a user message")
    for i, message in enumerate(merged):
        if message["role"] not in ("user", "assistant"):
            found.append(f"message {i} has role {message['role']!r}")
        content = blocks(message)
        if not content:
            found.append(f"message {i} is empty")
        results = [b for b in content if b.get("type") == "tool_result"]
        if results and message["role"] != "user":
            found.append(f"message {i}: tool_result outside a user message")
        if message["role"] == "assistant":
            uses = [b["id"] for b in content if b.get("type") == "tool_use"]
            if len(set(uses)) != len(uses):
                found.append(f"message {i}: duplicate tool_use ids")
            if uses:
                nxt: list[dict[str, Any]] = blocks(merged[i + 1]) if i + 1 < len(merged) else []
                answered = [str(b.get("tool_use_id")) for b in nxt if b.get("type") == "tool_result"]
                if sorted(answered) != sorted(uses):
                    found.append(f"message {i}: tool_use ids {uses} answered by {answered}")
                leading = [b.get("type") for b in nxt[: len(answered)]]
                if any(t != "tool_result" for t in leading):
                    found.append(f"message {i + 1}: tool_result blocks must come first")
        elif i > 0 and results:
            prev = [b["id"] for b in blocks(merged[i - 1]) if b.get("type") == "tool_use"]
            stray = [b.get("tool_use_id") for b in results if b.get("tool_use_id") not in prev]
            if stray:
                found.append(f"message {i}: tool_result for unknown tool_use {stray}")
    ids = [b["id"] for m in merged if m["role"] == "assistant" for b in tool_uses(m)]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:  # the API refuses the whole request: "tool_use ids must be unique"
        found.append(f"tool_use ids repeated across the conversation: {repeated}")
    return found
