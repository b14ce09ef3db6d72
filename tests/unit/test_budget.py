"""The history budget: requests trimmed at turn starts only, stored history untouched, cuts stable."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.agent import budget
from support_agent.agent import history as hist
from tests.support.harness import make_harness
from tests.support.scripted import answer, tool_use, tools
from tests.support.stored_turns import Message, stored_turn


def turn(n: int, calls: int, size: int = 400) -> list[Message]:
    """One stored turn: user text, then `calls` tool rounds, then a text answer."""
    return stored_turn(n, calls, size)


def conversation(shape: list[tuple[int, int]]) -> list[Message]:
    msgs: list[Message] = []
    for n, (calls, size) in enumerate(shape):
        msgs += turn(n, calls, size)
    return msgs


def total(messages: list[Message]) -> int:
    return sum(budget.estimate_tokens(m) for m in messages)


def test_under_budget_is_the_same_list() -> None:
    msgs = conversation([(2, 100)] * 3)
    assert budget.fit(msgs, total(msgs)) is msgs
    assert budget.fit(msgs, 0) is msgs
    assert budget.fit(msgs, None) is msgs


def test_over_budget_drops_oldest_whole_turns_and_stays_valid() -> None:
    msgs = conversation([(2, 400)] * 10)
    before = copy.deepcopy(msgs)
    out = budget.fit(msgs, 1500)
    assert msgs == before  # the caller's (stored) history is never changed
    assert 0 < len(out) < len(msgs) and out == msgs[len(msgs) - len(out) :]
    assert out[0]["role"] == "user" and out[0]["content"][0]["type"] == "text"
    assert hist.problems(out) == []
    assert total(out) <= 1500


def test_current_turn_is_kept_whole_even_over_budget() -> None:
    msgs = conversation([(1, 100), (6, 2000)])
    out = budget.fit(msgs, 500)
    assert out == turn(1, 6, 2000)
    assert hist.problems(out) == []


def test_cut_moves_rarely_and_by_chunks_as_history_grows() -> None:
    """Between jumps every request starts at the same message, so the cached prefix survives."""
    cap = 4000
    msgs: list[Message] = []
    cuts = []
    for n in range(50):
        msgs += turn(n, 2, 300)
        cuts.append(len(msgs) - len(budget.fit(msgs, cap)))
    assert cuts == sorted(cuts)  # never moves back
    changes = [i for i in range(1, len(cuts)) if cuts[i] != cuts[i - 1]]
    assert cuts[-1] > 0 and 0 < len(changes) <= total(msgs) // (cap // 2) + 1
    # every jump skips at least half a budget of history
    for i in changes:
        assert total(msgs[cuts[i - 1] : cuts[i]]) >= cap // 2


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 1500)), min_size=1, max_size=12),
    cap=st.integers(50, 20_000),
    pending_results=st.booleans(),
)
def test_any_conversation_stays_a_valid_suffix(shape: list[tuple[int, int]], cap: int, pending_results: bool) -> None:
    msgs = conversation(shape)
    if pending_results:  # a turn mid-loop: the request ends with tool results, not an answer
        msgs = msgs[:-1] + turn(len(shape), 1, 10)[:-1]
    merged = hist.for_request(msgs)
    out = budget.fit(merged, cap)
    assert out == merged[len(merged) - len(out) :]
    assert hist.problems(out) == []
    assert out[0]["role"] == "user"
    last_start = max(i for i, m in enumerate(merged) if budget.opens_turn(m))
    assert len(out) >= len(merged) - last_start  # the current turn is never cut


def test_the_loop_sends_a_trimmed_request_and_stores_everything(aws: None) -> None:
    h = make_harness(HISTORY_TOKEN_BUDGET="600")
    cid = None
    for n in range(6):
        h.model.script = [
            tools(tool_use("lookup_order", {"order_id": 1042})),
            answer(f"answer {n}: " + "x" * 400),
        ]
        cid = h.turn(f"question {n} about order 1042", cid).conversation_id
    stored = [m.as_message() for m in h.conversations.load(cid)]
    assert len(stored) == 6 * 4 and hist.problems(stored) == []
    last = h.model.requests[-1].messages
    assert len(last) < len(stored)
    assert last[0]["role"] == "user" and last[0]["content"][0]["type"] == "text"
    assert hist.problems(last) == []
    # what was sent is the stored history (less the answer it produced) with the oldest turns left out
    assert last == hist.for_request(stored[:-1])[-len(last) :]
