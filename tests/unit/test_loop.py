"""The loop with a scripted model, on real stores in moto (tables from template.yaml)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from support_agent.agent import history as hist
from support_agent.agent.untrusted import unfence
from support_agent.errors import ModelUnavailable, TokenBudgetExhausted
from support_agent.messages import Usage
from tests.support.harness import Harness
from tests.support.scripted import answer, reply, seed_scenario, text, tool_use, tools

# TOOL_MODE=mcp too: the same turns, history, audit rows and money effects over the MCP protocol (tests/conftest.py).
BOTH_TOOL_MODES = True


def stored(h: Harness, cid: str) -> list[dict[str, Any]]:
    return [m.as_message() for m in h.conversations.load(cid)]


def results(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message["content"] if b.get("type") == "tool_result"]


def tool_audit(h: Harness, cid: str) -> list[dict[str, Any]]:
    return [r for r in h.audit.list_stream(cid) if r["action"] == "tool_call"]


def test_seed_transcript_three_iterations_usage_summed(harness: Harness) -> None:
    h = harness
    h.model.script = seed_scenario(
        "customer request",
        "Order 1042 was delivered. The refund of 189.00 needs a teammate's approval.",
        (Usage(1000, 50, 0, 700), Usage(1100, 60, 700, 0), Usage(210, 77, 700, 0)),
    )
    r = h.turn("Where is my order 1042? Also refund it.")
    assert r.stop_reason == "end_turn" and r.iterations == 3
    assert r.usage == Usage(2310, 187, 1400, 700)
    assert r.reply.startswith("Order 1042 was delivered")
    first = r.trace[0]["toolCalls"][0]
    assert first["result"]["status"] == "DELIVERED" and first["result"]["total_cents"] == 18900
    refund = r.trace[1]["toolCalls"][0]["result"]
    assert refund["status"] == "PENDING_APPROVAL" and refund["approval_id"].startswith("apr_")
    order = h.order(1042)
    assert (order.available_cents, order.reserved_cents, order.refunded_cents) == (0, 18900, 0)
    assert h.queued() == [{"approvalId": refund["approval_id"]}]
    msgs = stored(h, r.conversation_id)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert hist.problems(msgs) == []
    assert len(tool_audit(h, r.conversation_id)) == 2
    header = h.conversations.get_header(r.conversation_id)
    assert header is not None and header.usage == r.usage
    # The second request replays the first exchange verbatim; the tool result is fenced data.
    second = h.model.requests[1].messages
    fenced = results(second[-1])[0]["content"]
    assert fenced.startswith("<untrusted-data-") and unfence(fenced)["order_id"] == 1042


def test_history_replays_across_turns(harness: Harness) -> None:
    h = harness
    h.model.script = [answer("Hi Dana!")]
    r1 = h.turn("hello")
    h.model.script = [answer("Sure.")]
    r2 = h.turn("and again", r1.conversation_id)
    assert r2.conversation_id == r1.conversation_id
    sent = h.model.requests[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"][0]["text"] == "hello" and sent[2]["content"][0]["text"] == "and again"


def test_direct_refund_under_threshold(harness: Harness) -> None:
    h = harness
    h.model.script = [
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 2500, "reason": "damaged"})),
        answer("Refunded."),
    ]
    r = h.turn("refund 1043")
    assert r.trace[0]["toolCalls"][0]["result"]["status"] == "REFUNDED"
    o = h.order(1043)
    assert (o.available_cents, o.reserved_cents, o.refunded_cents) == (0, 0, 2500)
    assert h.queued() == []
    rows = h.audit.conversation_trail(r.conversation_id)
    # The request with its reservation, the provider call (with its attempt key), the tool call.
    assert [(a["action"], a["outcome"]) for a in rows] == [
        ("refund", "REQUESTED"),
        ("payment_refund", "SUCCEEDED"),
        ("tool_call", "ok"),
    ]
    call = json.loads(rows[1]["output"])
    assert call["attempt_key"].endswith("#1") and call["refund_id"] == r.trace[0]["toolCalls"][0]["result"]["refund_id"]


def test_threshold_counts_earlier_refunds(harness: Harness) -> None:
    h = harness
    uses = [tool_use("request_refund", {"order_id": 1044, "amount_cents": 3000, "reason": "r"}) for _ in range(2)]
    h.model.script = [tools(uses[0]), tools(uses[1]), answer("done")]
    r = h.turn("refund twice")
    statuses = [it["toolCalls"][0]["result"]["status"] for it in r.trace[:2]]
    assert statuses == ["REFUNDED", "PENDING_APPROVAL"]  # 3000 + 3000 > 5000
    o = h.order(1044)
    assert (o.available_cents, o.reserved_cents, o.refunded_cents) == (10000, 3000, 3000)


@pytest.mark.parametrize(
    ("call", "expect"),
    [
        (tool_use("lookup_order", {"order_id": 2001}), "not found"),  # customer 8's order
        (tool_use("lookup_order", {"order_id": 9999}), "not found"),
        (tool_use("lookup_order", {"order_id": 1042, "customer_id": 8}), "invalid input"),
        (tool_use("lookup_order", {"order_id": "1042"}), "invalid input"),
        (tool_use("delete_everything", {}), "unknown tool"),
        (tool_use("request_refund", {"order_id": 1045, "amount_cents": 100, "reason": "x"}), "PROCESSING"),
        (tool_use("request_refund", {"order_id": 1043, "amount_cents": 2501, "reason": "x"}), "too much"),
        (tool_use("request_refund", {"order_id": 1043, "amount_cents": -5, "reason": "x"}), "invalid input"),
        (tool_use("request_refund", {"order_id": 2001, "amount_cents": 100, "reason": "x"}), "not found"),
    ],
)
def test_tool_errors_become_is_error_and_loop_goes_on(harness: Harness, call: dict[str, Any], expect: str) -> None:
    h = harness
    h.model.script = [tools(call), answer("Sorry about that.")]
    r = h.turn("do it")
    result = r.trace[0]["toolCalls"][0]
    assert result["isError"] is True and expect in result["result"]["error"]
    assert r.stop_reason == "end_turn" and r.iterations == 2
    sent = results(h.model.requests[1].messages[-1])[0]
    assert sent["is_error"] is True
    assert "Sam" not in str(r.trace) and "2001" not in str(result["result"]).replace("order 2001", "")
    for o in (2001, 2002):
        assert h.order(o, 8).available_cents == h.order(o, 8).total_cents


def test_missing_and_foreign_orders_answer_the_same(harness: Harness) -> None:
    h = harness
    h.model.script = [
        tools(tool_use("lookup_order", {"order_id": 2001}), tool_use("lookup_order", {"order_id": 2999})),
        answer("no"),
    ]
    r = h.turn("x")
    a, b = (c["result"]["error"] for c in r.trace[0]["toolCalls"])
    assert a.replace("2001", "N") == b.replace("2999", "N")


def test_two_tool_uses_one_user_message(harness: Harness) -> None:
    h = harness
    h.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042}), tool_use("list_invoices", {"order_id": 1042})),
        answer("ok"),
    ]
    r = h.turn("x")
    msgs = stored(h, r.conversation_id)
    assert len(results(msgs[2])) == 2 and msgs[3]["role"] == "assistant"
    assert len(tool_audit(h, r.conversation_id)) == 2


def test_cap_and_last_iteration_tool_ban(aws: None) -> None:
    from tests.support.harness import make_harness

    h = make_harness(MAX_ITERATIONS="3")
    h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})) for _ in range(3)]
    r = h.turn("loop forever")
    assert r.stop_reason == "max_iterations" and r.iterations == 3
    assert [q.tool_choice for q in h.model.requests] == [None, None, {"type": "none"}]
    assert r.trace[2]["toolCalls"][0]["isError"] is True  # the model ignored the ban: not run
    msgs = stored(h, r.conversation_id)
    assert hist.problems(msgs) == []
    h.model.script = [answer("continuing")]
    assert h.turn("go on", r.conversation_id).reply == "continuing"
    assert hist.problems(stored(h, r.conversation_id)) == []


def test_tool_calls_per_turn_capped(aws: None) -> None:
    from tests.support.harness import make_harness

    h = make_harness(MAX_TOOL_CALLS_PER_TURN="2")
    h.model.script = [tools(*[tool_use("lookup_order", {"order_id": 1042}) for _ in range(3)]), answer("ok")]
    r = h.turn("x")
    flags = [c["isError"] for c in r.trace[0]["toolCalls"]]
    assert flags == [False, False, True]
    assert "at most 2" in r.trace[0]["toolCalls"][2]["result"]["error"]
    assert len(tool_audit(h, r.conversation_id)) == 3


@pytest.mark.parametrize("reason", ["end_turn", "stop_sequence", "refusal", "max_tokens", "weird_new_reason"])
def test_answering_stop_reasons(harness: Harness, reason: str) -> None:
    harness.model.script = [reply(reason, text("partial answer"))]
    r = harness.turn("x")
    assert r.iterations == 1
    assert r.stop_reason == (reason if reason != "weird_new_reason" else "end_turn")
    assert hist.problems(stored(harness, r.conversation_id)) == []


def test_refusal_without_text_gets_a_clear_reply(harness: Harness) -> None:
    harness.model.script = [reply("refusal")]
    r = harness.turn("x")
    assert r.stop_reason == "refusal" and "can't help" in r.reply
    assert hist.problems(stored(harness, r.conversation_id)) == []


def test_max_tokens_never_runs_a_truncated_tool_use(harness: Harness) -> None:
    h = harness
    cut = tool_use("request_refund", {"order_id": 1043})
    h.model.script = [reply("max_tokens", text("Let me"), cut), answer("ok")]
    r = h.turn("refund 1043")
    call = r.trace[0]["toolCalls"][0]
    assert call["isError"] and "cut off" in call["result"]["error"]
    assert h.order(1043).refunded_cents == 0
    assert hist.problems(stored(h, r.conversation_id)) == []


def test_unknown_stop_reason_with_tool_use_does_not_run_it(harness: Harness) -> None:
    h = harness
    h.model.script = [
        reply("surprise", tool_use("request_refund", {"order_id": 1043, "amount_cents": 100, "reason": "x"}))
    ]
    r = h.turn("x")
    assert r.stop_reason == "end_turn" and h.order(1043).refunded_cents == 0
    assert hist.problems(stored(h, r.conversation_id)) == []


def test_pause_turn_continues(harness: Harness) -> None:
    harness.model.script = [reply("pause_turn", text("thinking...")), answer("done")]
    r = harness.turn("x")
    assert r.iterations == 2 and r.reply == "done"
    assert harness.model.requests[1].messages[-1]["role"] == "assistant"


def test_deadline_ends_turn_with_valid_history(harness: Harness) -> None:
    h = harness

    def slow_lookup(_messages: Any) -> Any:
        h.clock.advance(20)
        return tools(tool_use("lookup_order", {"order_id": 1042}))

    h.model.script = [slow_lookup, slow_lookup, answer("never")]
    r = h.turn("x", seconds=27)
    assert r.stop_reason == "deadline" and r.iterations == 2
    assert "ran out of time" in r.reply
    assert hist.problems(stored(h, r.conversation_id)) == []


def test_no_time_for_the_first_call_stores_nothing(harness: Harness) -> None:
    with pytest.raises(ModelUnavailable):
        harness.turn("x", seconds=0.5)
    assert harness.model.requests == []


def test_model_failure_before_anything_stored_stores_nothing(harness: Harness) -> None:
    h = harness
    h.model.script = [answer("first")]
    cid = h.turn("hello").conversation_id
    h.model.script = [ModelUnavailable("down", retry_after=5)]
    with pytest.raises(ModelUnavailable):
        h.turn("again", cid)
    assert len(stored(h, cid)) == 2
    h.model.script = [answer("back")]
    assert h.turn("again", cid).reply == "back"  # the lease was released


def test_token_budget(aws: None) -> None:
    from tests.support.harness import make_harness

    h = make_harness(CONVERSATION_TOKEN_BUDGET="1000")
    h.model.script = [answer("big", Usage(900, 200))]
    cid = h.turn("hello").conversation_id
    with pytest.raises(TokenBudgetExhausted):
        h.turn("more", cid)
    assert len(h.model.requests) == 1


def test_cache_control_never_stored_and_history_verbatim(harness: Harness) -> None:
    h = harness
    blocks = [text("Checking."), tool_use("lookup_order", {"order_id": 1042})]
    h.model.script = [reply("tool_use", *blocks), answer("ok")]
    r = h.turn("x")
    msgs = stored(h, r.conversation_id)
    assert msgs[1]["content"] == blocks
    assert "cache_control" not in str(msgs)


def test_escalate_to_human_one_open_ticket_per_conversation(harness: Harness) -> None:
    from support_agent.agent.loop import KeptForPerson
    from support_agent.auth import Principal
    from support_agent.store.takeover import Takeover

    h = harness
    h.model.script = [
        tools(tool_use("escalate_to_human", {"reason": "wants a person"})),
        tools(tool_use("escalate_to_human", {"reason": "again"})),
        answer("A teammate will follow up."),
    ]
    r = h.turn("I want to talk to a human")
    first = r.trace[0]["toolCalls"][0]["result"]
    assert first["status"] == "HANDOFF_OPENED" and first["handoff_id"].startswith("hof_")
    again = r.trace[1]["toolCalls"][0]["result"]
    assert again == {**first, "status": "HANDOFF_ALREADY_OPEN"}
    # While it is open the model is not called: the customer's message is kept for the person.
    calls = len(h.model.requests)
    kept = h.turn("hello??", r.conversation_id)
    assert isinstance(kept, KeptForPerson) and kept.handoff_id == first["handoff_id"] and not kept.assigned
    assert len(h.model.requests) == calls
    s = h.settings
    takeover = Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
    closed = takeover.close(first["handoff_id"], Principal("lead-1", "support_lead"), "2026-12-02T12:00:00Z")
    assert closed.status == "CLOSED" and closed.closed_as == "closed"
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "new issue"})), answer("ok")]
    third = h.turn("one more thing", r.conversation_id).trace[0]["toolCalls"][0]["result"]
    assert third["status"] == "HANDOFF_OPENED" and third["handoff_id"] != first["handoff_id"]
    actions = [a["action"] for a in h.audit.conversation_trail(r.conversation_id)]
    assert actions.count("handoff_opened") == 2 and actions.count("handoff_closed") == 1


def test_new_conversation_whose_first_call_fails_leaves_no_trace(harness: Harness) -> None:
    harness.model.script = [ModelUnavailable("down", retry_after=5)]
    with pytest.raises(ModelUnavailable):
        harness.turn("hello")
    assert harness.ddb.scan(TableName=harness.settings.conversations_table)["Count"] == 0
