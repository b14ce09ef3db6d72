"""A crashed call's recorded effect is found by the call's key alone, so it never runs twice.

The stored ``tool_use.input`` is not the call's identity: erasure blanks it to ``{}`` and a deploy may
make the input model stricter. Either used to make the repair answer "not executed" for a refund that
had been made, and the model (told to call again) refunded a second time.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import Field

from support_agent.agent import history as hist
from support_agent.agent.loop import KeptForPerson
from support_agent.auth import Principal
from support_agent.clock import utc_now
from support_agent.llm.base import LlmResponse
from support_agent.messages import Message
from support_agent.store.dynamo import from_item
from support_agent.store.erasure import ConversationEraser
from support_agent.store.handoffs import HandoffStore
from support_agent.store.takeover import Takeover
from support_agent.tools import refunds
from support_agent.tools.refunds import RequestRefundInput
from support_agent.wiring import build_registry
from tests.support.harness import Crash, Harness
from tests.support.scripted import Step, answer, tool_use, tools

ORDER, AMOUNT = 1042, 2000  # a direct refund, and a second one would still fit under the threshold


class RefundInputV2(RequestRefundInput):
    """A later, stricter input model: the stored input of an earlier call no longer validates."""

    channel: Literal["chat", "email"] = Field(..., description="Where the customer asked.")


def erase(h: Harness, customer_id: int = 7) -> None:
    eraser = ConversationEraser(h.ddb, h.settings.conversations_table, h.settings.audit_table, h.clock, utc_now)
    assert eraser.erase_customer(customer_id, "lead-1", "req-erase").complete


def stricter_refund_model(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deploy a registry whose request_refund input model refuses the stored input."""
    monkeypatch.setattr(refunds, "RequestRefundInput", RefundInputV2)
    h.agent.tools = build_registry(h.settings, h.ddb, h.sqs)
    spec = next(s for s in h.agent.tools.specs if s["name"] == "request_refund")
    assert "channel" in spec["input_schema"]["required"]


def told(messages: list[Message], tool_use_id: str) -> dict[str, Any]:
    """The tool_result the model was sent for one call."""
    results = [
        b
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("tool_use_id") == tool_use_id
    ]
    assert len(results) == 1, results
    return results[0]


def asks_again_if_not_executed(tool_use_id: str, again: dict[str, Any], seen: list[dict[str, Any]]) -> Step:
    """A model that does what the repair tells it: call the tool again if it was 'not executed'."""

    def step(messages: list[Message]) -> LlmResponse:
        result = told(messages, tool_use_id)
        seen.append(result)
        return tools(again) if "not executed" in str(result["content"]) else answer("That is already done.")

    return step


def crash_after_tool(h: Harness, call: dict[str, Any]) -> str:
    h.model.script = [answer("Hello!")]
    cid = h.turn("hi").conversation_id
    h.model.script = [tools(call), answer("unused")]
    h.crash_at = {"after_tool:0"}  # the effect is written, its tool_result never is
    with pytest.raises(Crash):
        h.turn("please", cid)
    return cid


def call_audit(h: Harness, cid: str, tool_use_id: str) -> list[tuple[str, str]]:
    trail = h.audit.conversation_trail(cid)  # the conversation's rows and its refund keys' streams
    return sorted((r["action"], r["outcome"]) for r in trail if r.get("tool_use_id") == tool_use_id)


def assert_history_and_audit_agree(h: Harness, cid: str) -> None:
    msgs = [m.as_message() for m in h.conversations.load(cid)]
    assert hist.problems(msgs) == []
    calls = sum(len(hist.tool_uses(m)) for m in msgs)
    assert sum(1 for r in h.audit.list_stream(cid) if r["action"] == "tool_call") == calls


@pytest.mark.parametrize("change", ["erasure", "stricter_input_model"])
def test_crashed_direct_refund_repairs_as_recorded_and_is_not_made_again(
    harness: Harness, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    call = tool_use("request_refund", {"order_id": ORDER, "amount_cents": AMOUNT, "reason": "broken"})
    cid = crash_after_tool(h, call)
    assert h.order(ORDER).refunded_cents == AMOUNT
    if change == "erasure":
        erase(h)
        assert h.conversations.load(cid)[-1].content[0]["input"] == {}
        again_input: dict[str, Any] = {"order_id": ORDER, "amount_cents": AMOUNT, "reason": "broken"}
    else:
        stricter_refund_model(h, monkeypatch)
        again_input = {"order_id": ORDER, "amount_cents": AMOUNT, "reason": "broken", "channel": "chat"}
    seen: list[dict[str, Any]] = []
    h.model.script = [
        asks_again_if_not_executed(call["id"], tool_use("request_refund", again_input), seen),
        answer("Done."),
    ]
    h.turn("did my refund go through?", cid)

    assert seen[0]["is_error"] is False and "REFUNDED" in seen[0]["content"]
    refunds = [r for r in h.customer_data.query_prefix(7, "REFUND#") if int(r["order_id"]) == ORDER]
    assert len(refunds) == 1 and refunds[0]["tool_use_id"] == call["id"]
    o = h.order(ORDER)
    assert o.refunded_cents == AMOUNT
    assert o.available_cents + o.reserved_cents + o.refunded_cents == o.total_cents
    assert call_audit(h, cid, call["id"]) == [
        ("payment_refund", "SUCCEEDED"),
        ("refund", "REQUESTED"),
        ("tool_call", "recorded"),
    ]
    assert_history_and_audit_agree(h, cid)


@pytest.mark.parametrize("erased", [False, True], ids=["closed", "closed-and-erased"])
def test_crashed_hand_off_repairs_as_opened_after_the_lead_closed_it(harness: Harness, erased: bool) -> None:
    h = harness
    call = tool_use("escalate_to_human", {"reason": "wants a person"})
    cid = crash_after_tool(h, call)
    store = HandoffStore(h.ddb, h.settings.approvals_table, h.settings.conversations_table, h.settings.audit_table)
    ticket = store.open_for(cid)
    assert ticket is not None and ticket.tool_use_id == call["id"]
    s = h.settings
    lead = Principal("lead-1", "support_lead")
    Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table).close(
        ticket.handoff_id, lead, "2026-12-02T12:00:00Z"
    )
    if erased:
        erase(h)
    seen: list[dict[str, Any]] = []
    h.model.script = [
        asks_again_if_not_executed(call["id"], tool_use("escalate_to_human", {"reason": "still"}), seen),
        answer("Done."),
    ]
    h.turn("is someone coming?", cid)

    assert seen[0]["is_error"] is False
    assert "HANDOFF_OPENED" in seen[0]["content"] and ticket.handoff_id in seen[0]["content"]
    tickets = [
        i for i in map(from_item, h.ddb.scan(TableName=h.settings.approvals_table)["Items"]) if i["entity"] == "HANDOFF"
    ]
    assert [t["approval_id"] for t in tickets] == [ticket.handoff_id]
    assert store.open_for(cid) is None
    assert call_audit(h, cid, call["id"]) == [("handoff_opened", "OPEN"), ("tool_call", "recorded")]
    assert_history_and_audit_agree(h, cid)


def test_already_open_answer_has_no_record_and_repairs_as_not_executed(harness: Harness) -> None:
    """HANDOFF_ALREADY_OPEN changes nothing, so calling it again is safe: no per-call record is written."""
    h = harness
    call = tool_use("escalate_to_human", {"reason": "again"})
    # One turn asks twice: the second call answers "already open" and the process dies right after it.
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "a person"})), tools(call), answer("unused")]
    h.model.on_call = lambda: h.crash_at.add("after_tool:0") if len(h.model.requests) == 2 else None
    with pytest.raises(Crash):
        h.turn("human please")
    cid = h.conversations.list_for_customer(7)[0][0].conversation_id
    before = h.ddb.scan(TableName=h.settings.approvals_table)["Count"]
    h.model.on_call = None
    # The hand-off is open: the next message is kept for the person, after the crashed call is repaired.
    assert isinstance(h.turn("anyone?", cid), KeptForPerson)
    assert h.ddb.scan(TableName=h.settings.approvals_table)["Count"] == before
    assert call_audit(h, cid, call["id"]) == [("tool_call", "not_executed")]
