"""A person takes a conversation over, on the turn harness: the model is never called while a person answers."""

from __future__ import annotations

import pytest

from support_agent.agent.loop import KeptForPerson, TurnResult
from support_agent.auth import Principal
from support_agent.errors import NotPermitted
from support_agent.store.handoffs import HandoffConflict
from support_agent.store.notifications import NotificationStore
from support_agent.store.takeover import Takeover
from tests.support.harness import Harness
from tests.support.scripted import answer, tool_use, tools

NOW = "2026-12-04T12:00:00Z"
DANA = Principal("agent-1", "support_staff", None, name="Dana")
SAM = Principal("agent-2", "support_staff", None, name="Sam")
LEAD = Principal("lead-1", "support_lead", None)


def _takeover(h: Harness) -> Takeover:
    s = h.settings
    return Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)


def _escalated(h: Harness) -> tuple[str, str]:
    h.model.script = [
        tools(tool_use("escalate_to_human", {"reason": "wants a person"})),
        answer("A teammate will follow up."),
    ]
    r = h.turn("I want a human")
    assert isinstance(r, TurnResult)
    return r.conversation_id, r.trace[0]["toolCalls"][0]["result"]["handoff_id"]


def test_round_trip_never_calls_the_model_while_a_person_answers(harness: Harness) -> None:
    h = harness
    cid, hid = _escalated(h)
    calls = len(h.model.requests)
    queued = h.turn("hello??", cid)  # OPEN: queued, no model call
    assert isinstance(queued, KeptForPerson) and not queued.assigned
    t = _takeover(h)
    claimed = t.claim(hid, DANA, NOW)
    assert claimed.status == "ASSIGNED" and claimed.assignee == "agent-1"
    with pytest.raises(HandoffConflict):
        t.claim(hid, SAM, NOW)
    reply = t.reply(hid, DANA, "Hi, Dana here. Let me look.", NOW, key="k1")
    again = t.reply(hid, DANA, "Hi, Dana here. Let me look.", NOW, key="k1")
    assert again.replayed and again.message.seq == reply.message.seq
    kept = h.turn("thanks Dana", cid)
    assert isinstance(kept, KeptForPerson) and kept.assigned
    assert len(h.model.requests) == calls
    with pytest.raises(NotPermitted):
        t.hand_back(hid, SAM, NOW)
    t.hand_back(hid, DANA, NOW, note="Refunded by hand; do not offer more.")
    h.model.script = [answer("Happy to help.")]
    back = h.turn("one more question", cid)
    assert isinstance(back, TurnResult) and back.reply == "Happy to help."
    request = h.model.requests[-1]
    assert "Refunded by hand; do not offer more." in request.system and "handback_note" in request.system
    assert "Refunded by hand" not in str(request.messages)
    said = [m for m in request.messages if "(support teammate Dana wrote:) Hi, Dana here." in str(m)]
    assert len(said) == 1 and said[0]["role"] == "assistant"
    assert {m["role"] for m in request.messages} == {"user", "assistant"}
    assert "thanks Dana" in str(request.messages) and "hello??" in str(request.messages)
    notes = [n.type for n in NotificationStore(h.ddb, h.settings.conversations_table).of(cid)]
    assert notes == ["handoff.opened", "handoff.assigned", "handoff.returned_to_bot"]
    stored = h.conversations.load(cid)
    assert [m.role for m in stored].count("person") == 1


def test_a_claim_during_a_model_call_drops_its_answer_and_keeps_the_customers_message(harness: Harness) -> None:
    """The in-flight rule: the answer of a call that was running when the claim landed is not stored, no tool of it
    runs, the customer's message is kept, and the turn ends ``handed_to_person`` without another call."""
    h = harness
    cid, hid = _escalated(h)
    t = _takeover(h)
    t.close(hid, LEAD, NOW)  # the bot answers again
    calls = len(h.model.requests)

    def claim_now() -> None:  # while the model answers: a hand-off opened and claimed (as by another tab's turn)
        h.model.on_call = None
        ticket, _ = t._tickets.open(cid, 99, 7, "racing", "customer-7", "toolu_race", "r", NOW)
        t.claim(ticket.handoff_id, DANA, NOW)

    h.model.on_call = claim_now
    h.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("unused")]
    raced = h.turn("where is my order?", cid)
    assert isinstance(raced, TurnResult) and raced.stop_reason == "handed_to_person"
    assert len(h.model.requests) == calls + 1  # the call that was running; none after it
    stored = h.conversations.load(cid)
    assert stored[-1].role == "user" and stored[-1].content == [{"type": "text", "text": "where is my order?"}]
    assert not any(b.get("name") == "lookup_order" for m in stored for b in m.content)  # its answer was dropped
    kept = h.turn("hello?", cid)
    assert isinstance(kept, KeptForPerson) and kept.assigned
    assert len(h.model.requests) == calls + 1
