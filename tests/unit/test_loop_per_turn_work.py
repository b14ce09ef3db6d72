"""Work done once per turn, not once per call or per iteration (issue 21, "The loop").

Metrics are tallied and added to the EMF set when the turn ends, with what CloudWatch reads unchanged
(Sum of counts, every ModelLatency value); the request history is merged, scanned for tool_use ids and
estimated incrementally, and sends exactly what re-merging the whole history each time sent. No timing
here: the assertions count calls and compare outputs, so they hold on any machine.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent import observability as obs
from support_agent.agent import budget
from support_agent.agent import history as hist
from support_agent.errors import ModelUnavailable
from support_agent.messages import Usage
from tests.support.harness import Harness
from tests.support.scripted import answer, tool_use, tools
from tests.support.stored_turns import Message, stored_turn


def _turn(n: int, calls: int, size: int) -> list[Message]:
    return stored_turn(n, calls, size, ("q", "a"))


@settings(max_examples=80, deadline=None)
@given(
    shape=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1200)), min_size=1, max_size=8),
    open_results=st.booleans(),
    stored=st.integers(0, 40),
    cap=st.sampled_from([0, 300, 2_000, 24_000]),
    pending=st.booleans(),
)
def test_the_incremental_request_is_the_re_merged_one(
    shape: list[tuple[int, int]], open_results: bool, stored: int, cap: int, pending: bool
) -> None:
    """Loaded at once or added message by message, with or without a pending message that merges into
    stored tool results: the same request as ``fit(for_request(...))`` and the same tool_use ids."""
    msgs = [m for n, (calls, size) in enumerate(shape) for m in _turn(n, calls, size)]
    if open_results:  # a previous turn ended on tool results: the next user text merges into them
        msgs = msgs[:-1]
        msgs += _turn(len(shape), 1, 10)[:-1]
    stored = min(stored, len(msgs))
    before = copy.deepcopy(msgs)
    history = hist.RequestHistory(msgs[:stored])
    for i in range(stored, len(msgs)):
        # the loop asks between additions: a request must not disturb what comes after it
        history.request(None, cap)
        history.add(msgs[i])
    user = {"role": "user", "content": [{"type": "text", "text": "next"}]} if pending else None
    sent = history.request(user, cap)
    assert sent == budget.fit(hist.for_request(msgs + ([user] if user else [])), cap)
    assert history.tool_use_ids == {b["id"] for m in msgs for b in hist.tool_uses(m)}
    assert msgs == before  # the stored history is never changed
    assert history.request(user, cap) == sent  # asking again gives the same request


def _stored_history(harness: Harness) -> str:
    """A conversation of two turns with a tool call each: four stored messages per turn."""
    cid = None
    for n in range(2):
        harness.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer(f"answer {n}")]
        cid = harness.turn(f"question {n}", cid).conversation_id
    return cid


def test_each_message_is_estimated_once_per_turn(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-estimating the whole history per iteration made the budget's cost grow with iterations times length."""
    cid = _stored_history(harness)
    estimated: list[Message] = []
    real = budget.estimate_tokens

    def counting(message: Message) -> int:
        estimated.append(message)
        return real(message)

    monkeypatch.setattr(budget, "estimate_tokens", counting)
    harness.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042})),
        tools(tool_use("list_invoices", {})),
        answer("done"),
    ]
    result = harness.turn("and the invoices?", cid)
    assert result.iterations == 3
    # 8 stored + the new question, then 3 and 2 new merged messages; re-estimating all would be 9 + 11 + 13
    assert len(estimated) == 8 + 1 + 3 + 2
    assert len(harness.model.requests[-1].messages) == 8 + 5  # and the whole history was still sent


def _added(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    calls: list[tuple[str, float]] = []
    real = obs.metrics.add_metric

    def spy(*, name: str, unit: Any, value: float, **kw: Any) -> None:
        calls.append((name, value))
        real(name=name, unit=unit, value=value, **kw)

    monkeypatch.setattr(obs.metrics, "add_metric", spy)
    return calls


def test_a_turn_adds_each_count_once_and_every_latency(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    obs.metrics.clear_metrics()
    calls = _added(monkeypatch)
    harness.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042}), tool_use("nope", {}), usage=Usage(1000, 40, 0, 900)),
        tools(tool_use("list_invoices", {}), usage=Usage(1100, 30, 900, 0)),
        answer("Delivered.", Usage(1200, 20, 900, 0)),
    ]
    assert harness.turn("Where is order 1042?").iterations == 3
    names = [name for name, _ in calls]
    # one add per count, three latencies (one per model call), one iterations value (the scripted model
    # has no price, so no cost value)
    assert sorted(names) == sorted(
        [
            obs.MODEL_CALLS,
            obs.INPUT_TOKENS,
            obs.OUTPUT_TOKENS,
            obs.CACHE_READ_TOKENS,
            obs.CACHE_WRITE_TOKENS,
            obs.TOOL_CALLS,
            obs.TOOL_ERRORS,
            obs.TURNS,
            obs.ITERATIONS,
        ]
        + [obs.MODEL_LATENCY] * 3
    )
    values = {name: list(m["Value"]) for name, m in obs.metrics.metric_set.items()}
    assert values[obs.MODEL_CALLS] == [3] and values[obs.TOOL_CALLS] == [3] and values[obs.TOOL_ERRORS] == [1]
    assert values[obs.INPUT_TOKENS] == [3300] and values[obs.OUTPUT_TOKENS] == [90]
    assert values[obs.CACHE_READ_TOKENS] == [1800] and values[obs.CACHE_WRITE_TOKENS] == [900]
    assert len(values[obs.MODEL_LATENCY]) == 3  # percentiles see every call, not a per-turn total
    assert values[obs.ITERATIONS] == [3] and values[obs.TURNS] == [1]


def test_a_failed_turn_still_sends_what_it_tallied(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tally is flushed when the turn raises: a model outage mid-turn still shows in the alarms' metric."""
    obs.metrics.clear_metrics()
    harness.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042}), usage=Usage(500, 10, 0, 0)),
        ModelUnavailable("down", retry_after=5),
    ]
    with pytest.raises(ModelUnavailable):
        harness.turn("Where is order 1042?")
    values = {name: list(m["Value"]) for name, m in obs.metrics.metric_set.items()}
    assert values[obs.MODEL_CALLS] == [2] and values[obs.LLM_UNAVAILABLE] == [1]
    assert values[obs.TOOL_CALLS] == [1] and len(values[obs.MODEL_LATENCY]) == 2


def test_flush_empties_the_tally() -> None:
    obs.metrics.clear_metrics()
    tally = obs.TurnMetrics()
    tally.count(obs.TOOL_CALLS)
    tally.count(obs.TOOL_CALLS, 2)
    tally.sample(obs.MODEL_LATENCY, 5)
    tally.flush()
    tally.flush()
    values = {name: list(m["Value"]) for name, m in obs.metrics.metric_set.items()}
    assert values == {obs.TOOL_CALLS: [3], obs.MODEL_LATENCY: [5]}
    obs.metrics.clear_metrics()
