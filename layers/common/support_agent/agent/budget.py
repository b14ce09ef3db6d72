"""The history budget: which stored turns go into a model request once a conversation grows long.

Only the request is trimmed; the stored history is never rewritten (rule 5). A request is cut only
at the start of a turn — a user message holding no ``tool_result`` — so a ``tool_use`` is never
separated from its result and the request still starts with a user message. The current turn is
always kept whole.

Tokens are estimated as characters / 4 of each message's JSON. The estimate is deliberately a fixed
function of the stored messages, not the last response's usage: a cut computed that way only moves
when the history grows past the budget, and then it jumps forward by a fixed chunk (half the
budget), so between jumps every request starts at the same message and the prompt-cache prefix
survives (docs/PERFORMANCE.md, "Long conversations").
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from support_agent.messages import Message

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4  # role and framing, per message


def estimate_tokens(message: Message) -> int:
    """A cheap, deterministic estimate of one message's input tokens."""
    text = json.dumps(message.get("content"), ensure_ascii=False, separators=(",", ":"))
    return len(text) // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS


def opens_turn(message: Message) -> bool:
    """A user message holding no ``tool_result``: where a request may start."""
    content = message.get("content")
    if message.get("role") != "user":
        return False
    if isinstance(content, str):
        return True
    return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content or [])


def cut_index(
    messages: Sequence[Message],
    budget_tokens: int,
    sizes: Sequence[int] | None = None,
    opens: Sequence[bool] | None = None,
) -> int:
    """Index of the first message to send: 0 while everything fits, otherwise a turn start.

    The cut starts at 0 and, while what is left is over the budget, jumps to the first turn start at
    least half a budget further on (or the last turn start, if none is that far). Each jump depends
    only on the messages it skips, so a growing history moves the cut rarely and by whole chunks.
    ``sizes`` and ``opens``: each message's `estimate_tokens` and `opens_turn`, if the caller keeps them
    (history.RequestHistory does, so a turn's iterations do not recompute them for the whole history).
    """
    if sizes is None:
        sizes = [estimate_tokens(m) for m in messages]
    if opens is None:
        opens = [opens_turn(m) for m in messages]
    starts = [i for i, is_start in enumerate(opens) if is_start]
    if not starts:
        return 0
    suffix = [0] * (len(sizes) + 1)
    for i in range(len(sizes) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + sizes[i]
    chunk = max(1, budget_tokens // 2)
    cut = 0
    while suffix[cut] > budget_tokens:
        skipped = 0
        nxt = cut
        for start in starts:
            if start <= cut:
                continue
            nxt = start
            skipped = suffix[cut] - suffix[start]
            if skipped >= chunk:
                break
        if nxt == cut:  # the current turn alone is over budget: it is sent whole anyway
            break
        cut = nxt
    return cut


def fit(
    messages: list[Message],
    budget_tokens: int | None,
    sizes: Sequence[int] | None = None,
    opens: Sequence[bool] | None = None,
) -> list[Message]:
    """The request's messages within ``budget_tokens`` (None or 0: no budget); a new list if trimmed."""
    if not budget_tokens or not messages:
        return messages
    cut = cut_index(messages, budget_tokens, sizes, opens)
    return messages if cut == 0 else messages[cut:]
