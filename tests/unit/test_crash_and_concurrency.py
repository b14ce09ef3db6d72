"""A crash at any step of a turn: the next turn repairs the history and no refund happens twice."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from support_agent.agent import history as hist
from support_agent.errors import Conflict
from tests.support.harness import Crash, Harness
from tests.support.scripted import answer, tool_use, tools

STEPS = ["after_model_call", "after_write_ahead", "after_tool:0", "after_results_write"]


def approvals(h: Harness) -> list[dict[str, Any]]:
    return h.ddb.scan(TableName=h.settings.approvals_table)["Items"]


def tool_calls(h: Harness) -> int:
    msgs = [m.as_message() for cid in conversation_ids(h) for m in h.conversations.load(cid)]
    return sum(len(hist.tool_uses(m)) for m in msgs)


def conversation_ids(h: Harness) -> list[str]:
    items = h.ddb.scan(TableName=h.settings.conversations_table)["Items"]
    return sorted({i["conversation_id"]["S"] for i in items})


def audit_tool_rows(h: Harness) -> int:
    return sum(1 for cid in conversation_ids(h) for r in h.audit.list_stream(cid) if r["action"] == "tool_call")


@pytest.mark.parametrize("release_lease", [True, False], ids=["process-alive", "process-died"])
@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize(("order", "amount", "direct"), [(1042, 18900, False), (1043, 2500, True)])
def test_crash_then_next_turn_repairs_without_double_refund(
    harness: Harness,
    step: str,
    release_lease: bool,
    order: int,
    amount: int,
    direct: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = harness
    refund = tool_use("request_refund", {"order_id": order, "amount_cents": amount, "reason": "broken"})
    h.model.script = [answer("Hello!")]
    cid = h.turn("hi").conversation_id
    h.model.script = [tools(refund), answer("Your refund is on its way.")]
    h.crash_at = {step}
    if not release_lease:
        monkeypatch.setattr(h.conversations, "release_lease", lambda *_a: None)
    with pytest.raises(Crash):
        h.turn(f"refund {order}", cid)
    monkeypatch.undo()
    if not release_lease:
        h.model.script = [answer("unused")]
        with pytest.raises(Conflict):
            h.turn("again?", cid)  # the dead turn's lease still holds
        h.clock.advance(h.settings.lease_seconds + 1)
        h.model.script = []
    # The client resends. Where the refund never ran, the model (told "not executed") proposes it again.
    ran = step in ("after_tool:0", "after_results_write")
    again = tool_use("request_refund", {"order_id": order, "amount_cents": amount, "reason": "broken"})
    h.model.script = [answer("Done, see above.")] if ran else [tools(again), answer("Done.")]
    r = h.turn(f"refund {order}", cid)
    assert r.stop_reason == "end_turn"
    msgs = [m.as_message() for m in h.conversations.load(cid)]
    assert hist.problems(msgs) == []
    o = h.order(order)
    assert o.available_cents + o.reserved_cents + o.refunded_cents == o.total_cents
    if direct:
        assert o.refunded_cents == amount and o.reserved_cents == 0
    else:
        assert o.reserved_cents == amount and len(approvals(h)) == 1
    assert audit_tool_rows(h) == tool_calls(h)
    # What the model saw for a refund that ran before the crash is its recorded outcome.
    if step in ("after_tool:0",):
        repaired = [b for b in msgs[-3]["content"] if b.get("type") == "tool_result"]
        assert repaired and repaired[0]["is_error"] is False


def test_crash_after_read_only_tool_settles_as_not_executed(harness: Harness) -> None:
    h = harness
    h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042}))]
    h.crash_at = {"after_tool:0"}
    with pytest.raises(Crash):
        h.turn("where is 1042")
    cid = conversation_ids(h)[0]
    h.model.script = [answer("Let me check again.")]
    h.turn("hello?", cid)
    msgs = [m.as_message() for m in h.conversations.load(cid)]
    settled = msgs[2]["content"][0]
    assert settled["is_error"] is True and "not executed" in settled["content"]
    assert msgs[3]["content"][-1]["text"] == "hello?"  # new text follows the results in the request
    assert hist.problems(msgs) == []


def test_concurrent_turns_one_wins_other_409_before_any_tool(harness: Harness) -> None:
    h = harness
    h.model.script = [answer("Hello!")]
    cid = h.turn("hi").conversation_id
    entered, release = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        assert release.wait(10)

    h.model.on_call = block
    h.model.script = [
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 100, "reason": "x"})),
        answer("ok"),
    ]
    outcome: dict[str, Any] = {}

    def first() -> None:
        outcome["first"] = h.turn("refund 100", cid)

    t = threading.Thread(target=first)
    t.start()
    assert entered.wait(10)
    h.model.on_call = None
    calls_before = len(h.model.requests)
    with pytest.raises(Conflict):
        h.turn("refund again", cid)
    assert len(h.model.requests) == calls_before  # refused before any model call or tool
    release.set()
    t.join(10)
    assert outcome["first"].stop_reason == "end_turn"
    assert h.order(1043).refunded_cents == 100


def test_other_customers_conversation_is_not_found(harness: Harness) -> None:
    from support_agent.errors import NotFound

    h = harness
    h.model.script = [answer("Hello!")]
    cid = h.turn("hi").conversation_id
    with pytest.raises(NotFound):
        h.turn("hi", cid, customer_id=8)
    with pytest.raises(NotFound):
        h.turn("hi", "conv_01JF3Q0000000000000000000Z")
