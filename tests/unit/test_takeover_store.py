"""store/takeover.py on the turn harness: each change of owner, who may make it, and what it leaves behind.

Every change is checked for its whole footprint: the hand-off's fields, the conversation header (``open_handoff_id``,
``answerer``, the hand-back note), exactly one audit row on ``handoff#<id>`` with the stream still verifying, and
exactly one ``handoff.*`` notification of the right type; a refused change leaves all of them as they were.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest

from support_agent.agent.history import for_model, problems
from support_agent.agent.loop import KeptForPerson, TurnResult
from support_agent.auth import Principal
from support_agent.clock import iso
from support_agent.errors import Conflict, IdempotencyKeyReused, LeaseHeld, NotPermitted
from support_agent.mcp.our_tools import call_tool
from support_agent.store.audit import AuditStore
from support_agent.store.erasure import ERASED, ConversationEraser
from support_agent.store.handoffs import Handoff, HandoffConflict, HandoffStore
from support_agent.store.notifications import NotificationStore
from support_agent.store.takeover import Takeover
from support_agent.wiring import build_mcp_services
from tests.reliability.checks import World
from tests.support.harness import Crash, Harness
from tests.support.scripted import answer, tool_use, tools

DANA = Principal("agent-1", "support_staff", None, name="Dana")
SAM = Principal("agent-2", "support_staff", None, name="Sam")
LEAD = Principal("lead-1", "support_lead", None, name="Lee")
SECRET = "Your parcel goes to 12 Elm Street tomorrow"


def _now(h: Harness) -> str:
    """The harness's fake time, as the store stamps it (a reply's lease check compares it with the lease)."""
    return iso(datetime.fromtimestamp(h.clock(), UTC))


@dataclass
class World32:
    """A conversation with one hand-off, and what to read back after each change."""

    h: Harness
    t: Takeover
    cid: str
    hid: str

    @property
    def audit(self) -> AuditStore:
        s = self.h.settings
        return AuditStore(self.h.ddb, s.audit_table, s.conversations_table, s.approvals_table, s.customer_data_table)

    def rows(self) -> list[dict[str, Any]]:
        return self.audit.list_stream(f"handoff#{self.hid}")

    def notes(self) -> list[tuple[str, dict[str, Any]]]:
        store = NotificationStore(self.h.ddb, self.h.settings.conversations_table)
        return [(n.type, n.data) for n in store.of(self.cid)]

    def ticket(self) -> Handoff:
        s = self.h.settings
        found = HandoffStore(self.h.ddb, s.approvals_table, s.conversations_table, s.audit_table).get(self.hid)
        assert found is not None
        return found

    def header(self) -> Any:
        header = self.h.conversations.get_header(self.cid)
        assert header is not None
        return header

    def changes(self, change: Callable[[], Any], action: str, note: str) -> tuple[Any, dict[str, Any]]:
        """Run ``change``: exactly one new audit row (``action``) on the hand-off's stream, which verifies, and
        exactly one new notification (``note``) naming the hand-off."""
        rows, notes = self.rows(), self.notes()
        out = change()
        after_rows, after_notes = self.rows(), self.notes()
        assert len(after_rows) == len(rows) + 1
        new = [r for r in after_rows if r["event_id"] not in {x["event_id"] for x in rows}]
        assert new[0]["action"] == action and new[0]["handoff_id"] == self.hid
        assert after_notes[: len(notes)] == notes and len(after_notes) == len(notes) + 1
        assert after_notes[-1][0] == note and after_notes[-1][1]["handoffId"] == self.hid
        assert self.audit.verify_trail(f"handoff#{self.hid}")["status"] == "ok"
        return out, new[0]

    def refused(self, change: Callable[[], Any], error: type[Exception]) -> Exception:
        """``change`` fails with ``error`` and writes nothing: no row, no notification, the same records."""
        before = (self.rows(), self.notes(), self.ticket(), self.header())
        with pytest.raises(error) as caught:
            change()
        assert (self.rows(), self.notes(), self.ticket(), self.header()) == before
        return caught.value


def escalated(h: Harness) -> World32:
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "wants a person"})), answer("A teammate.")]
    r = h.turn("I want a human")
    assert isinstance(r, TurnResult)
    hid = r.trace[0]["toolCalls"][0]["result"]["handoff_id"]
    s = h.settings
    return World32(h, Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table), r.conversation_id, hid)


@pytest.fixture
def w(harness: Harness) -> World32:
    return escalated(harness)


# -- claim ------------------------------------------------------------------------------------------------------


def test_claim_takes_an_open_handoff_only(w: World32) -> None:
    now = _now(w.h)
    assert w.notes() == [("handoff.opened", {"handoffId": w.hid})]
    assert w.header().open_handoff_id == w.hid and w.header().answerer is None
    claimed, row = w.changes(lambda: w.t.claim(w.hid, DANA, now), "handoff_claimed", "handoff.assigned")
    assert (claimed.status, claimed.assignee, claimed.assignee_name, claimed.assigned_at) == (
        "ASSIGNED",
        "agent-1",
        "Dana",
        now,
    )
    assert (row["actor"], row["outcome"]) == ("agent-1", "ASSIGNED")
    assert w.notes()[-1][1] == {"handoffId": w.hid, "by": "Dana"}
    assert (w.header().open_handoff_id, w.header().answerer) == (w.hid, "person:agent-1")
    # The losers: another agent, the holder again, a lead; each a 409 naming the winner.
    for who in (SAM, DANA, LEAD):
        lost = w.refused(partial(w.t.claim, w.hid, who, now), HandoffConflict)
        assert isinstance(lost, HandoffConflict) and lost.current.assignee == "agent-1"


def test_a_closed_handoff_cannot_be_claimed(w: World32) -> None:
    w.t.close(w.hid, LEAD, _now(w.h))
    lost = w.refused(lambda: w.t.claim(w.hid, DANA, _now(w.h)), HandoffConflict)
    assert isinstance(lost, HandoffConflict) and lost.current.status == "CLOSED"


# -- release ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", [DANA, LEAD], ids=["holder", "lead"])
def test_release_by_the_holder_or_a_lead_queues_it_again(w: World32, by: Principal) -> None:
    w.t.claim(w.hid, DANA, _now(w.h))
    w.refused(lambda: w.t.release(w.hid, SAM, _now(w.h)), NotPermitted)
    released, row = w.changes(lambda: w.t.release(w.hid, by, _now(w.h)), "handoff_released", "handoff.released")
    assert (released.status, released.assignee, released.assignee_name, released.assigned_at) == (
        "OPEN",
        None,
        None,
        None,
    )
    assert (row["actor"], row["outcome"]) == (by.sub, "OPEN")
    # Queued again: the bot stays paused (the hand-off is still named), nobody answers.
    assert (w.header().open_handoff_id, w.header().answerer) == (w.hid, None)
    w.refused(lambda: w.t.release(w.hid, LEAD, _now(w.h)), HandoffConflict)  # OPEN: nothing to release
    # Anyone may claim it now.
    assert w.t.claim(w.hid, SAM, _now(w.h)).assignee == "agent-2"


# -- reassign ---------------------------------------------------------------------------------------------------


def test_only_a_lead_reassigns_an_open_or_assigned_handoff(w: World32) -> None:
    now = _now(w.h)
    w.refused(lambda: w.t.reassign(w.hid, DANA, "agent-1", "Dana", now), NotPermitted)
    given, row = w.changes(
        lambda: w.t.reassign(w.hid, LEAD, "agent-1", "Dana", now), "handoff_reassigned", "handoff.assigned"
    )
    assert (given.status, given.assignee, given.assignee_name) == ("ASSIGNED", "agent-1", "Dana")
    assert (row["actor"], json.loads(row["input"])) == ("lead-1", {"to": "agent-1"})
    w.refused(lambda: w.t.reassign(w.hid, DANA, "agent-2", "Sam", now), NotPermitted)  # the holder neither
    moved, _ = w.changes(
        lambda: w.t.reassign(w.hid, LEAD, "agent-2", None, now), "handoff_reassigned", "handoff.assigned"
    )
    assert (moved.assignee, moved.assignee_name) == ("agent-2", "agent-2")  # no name given: the sub
    assert w.header().answerer == "person:agent-2"
    assert w.notes()[-1][1] == {"handoffId": w.hid, "by": "agent-2"}
    # The one who lost it can no longer act as its holder; the new holder can.
    w.refused(lambda: w.t.reply(w.hid, DANA, "still me", now), NotPermitted)
    w.refused(lambda: w.t.hand_back(w.hid, DANA, now), NotPermitted)
    assert w.t.reply(w.hid, SAM, "Sam here", now).message.author == "agent-2"
    w.t.close(w.hid, LEAD, now)
    w.refused(lambda: w.t.reassign(w.hid, LEAD, "agent-1", "Dana", now), HandoffConflict)


# -- hand back --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", [DANA, LEAD], ids=["holder", "lead"])
def test_hand_back_returns_the_conversation_to_the_bot_with_the_note(w: World32, by: Principal) -> None:
    w.refused(lambda: w.t.hand_back(w.hid, by, _now(w.h), "note"), HandoffConflict)  # OPEN: held by no one
    w.t.claim(w.hid, DANA, _now(w.h))
    w.refused(lambda: w.t.hand_back(w.hid, SAM, _now(w.h), "note"), NotPermitted)
    note = "Refunded 12.00 by hand."
    back, row = w.changes(
        lambda: w.t.hand_back(w.hid, by, _now(w.h), note), "handoff_returned", "handoff.returned_to_bot"
    )
    assert (back.status, back.closed_as, back.closed_by) == ("CLOSED", "returned_to_bot", by.sub)
    header = w.header()
    assert (header.open_handoff_id, header.answerer) == (None, None)
    assert (header.handback_note, header.handback_by) == (note, by.display_name)
    # The row keeps the note's hash and length, not its words.
    assert json.loads(row["input"]) == {
        "note": {"sha256": hashlib.sha256(note.encode()).hexdigest(), "length": len(note)}
    }
    assert note not in json.dumps(w.rows())
    w.refused(lambda: w.t.hand_back(w.hid, by, _now(w.h)), HandoffConflict)  # CLOSED


@pytest.mark.parametrize("end", ["hand_back", "close"])
def test_the_next_handoff_ends_an_earlier_hand_back_note(harness: Harness, end: str) -> None:
    """A hand-back without a note, or a close, after a later escalation: the bot no longer gets the old note."""
    first = escalated(harness)
    first.t.claim(first.hid, DANA, _now(harness))
    first.t.hand_back(first.hid, DANA, _now(harness), "first note")
    harness.model.script = [tools(tool_use("escalate_to_human", {"reason": "again"})), answer("A teammate.")]
    again = harness.turn("a person again please", first.cid)
    assert isinstance(again, TurnResult)
    assert "first note" in harness.model.requests[-1].system  # still context while the bot answers
    second = again.trace[0]["toolCalls"][0]["result"]["handoff_id"]
    assert second != first.hid
    first.t.claim(second, SAM, _now(harness))
    if end == "hand_back":
        first.t.hand_back(second, SAM, _now(harness))
    else:
        first.t.close(second, SAM, _now(harness))
    header = first.header()
    assert (header.open_handoff_id, header.handback_note, header.handback_by) == (None, None, None)
    harness.model.script = [answer("Hi.")]
    assert isinstance(harness.turn("hello", first.cid), TurnResult)
    assert "first note" not in harness.model.requests[-1].system


# -- close ------------------------------------------------------------------------------------------------------


def test_an_open_handoff_is_closed_by_a_lead_only(w: World32) -> None:
    w.refused(lambda: w.t.close(w.hid, DANA, _now(w.h)), NotPermitted)
    note = "duplicate of an email thread"
    closed, row = w.changes(lambda: w.t.close(w.hid, LEAD, _now(w.h), note), "handoff_closed", "handoff.closed")
    assert (closed.status, closed.closed_as, closed.closed_by) == ("CLOSED", "closed", "lead-1")
    # A close's note is audited as a person's words are: by hash and length.
    digest = {"sha256": hashlib.sha256(note.encode()).hexdigest(), "length": len(note)}
    assert (row["outcome"], json.loads(row["input"])) == ("CLOSED", {"note": digest})
    assert note not in json.dumps(w.rows())
    assert (w.header().open_handoff_id, w.header().answerer) == (None, None)
    w.refused(lambda: w.t.close(w.hid, LEAD, _now(w.h)), HandoffConflict)
    # The customer may write again, to the bot.
    w.h.model.script = [answer("The bot again.")]
    assert isinstance(w.h.turn("anyone?", w.cid), TurnResult)


@pytest.mark.parametrize("by", [DANA, LEAD], ids=["holder", "lead"])
def test_an_assigned_handoff_is_closed_by_its_holder_or_a_lead(w: World32, by: Principal) -> None:
    w.t.claim(w.hid, DANA, _now(w.h))
    w.refused(lambda: w.t.close(w.hid, SAM, _now(w.h)), NotPermitted)
    closed, row = w.changes(lambda: w.t.close(w.hid, by, _now(w.h)), "handoff_closed", "handoff.closed")
    assert (closed.status, closed.closed_as, closed.closed_by, row["actor"]) == ("CLOSED", "closed", by.sub, by.sub)
    assert (w.header().open_handoff_id, w.header().answerer, w.header().handback_note) == (None, None, None)
    w.h.model.script = [answer("The bot again.")]
    assert isinstance(w.h.turn("anyone?", w.cid), TurnResult)


def test_an_mcp_ticket_is_never_taken_over_but_closes(harness: Harness) -> None:
    h, s = harness, harness.settings
    mcp = build_mcp_services(s, h.ddb, h.sqs)
    opened = call_tool(mcp, Principal("customer-7", "customer", 7), "escalate_to_human", {"reason": "x"}, None, "c")
    hid = opened.result["handoff_id"]
    t = Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
    tickets = HandoffStore(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
    audit = AuditStore(h.ddb, s.audit_table, s.conversations_table, s.approvals_table, s.customer_data_table)
    now = _now(h)
    for change in (
        lambda: t.claim(hid, DANA, now),
        lambda: t.reassign(hid, LEAD, "agent-1", "Dana", now),
        lambda: t.release(hid, LEAD, now),
        lambda: t.hand_back(hid, LEAD, now),
        lambda: t.reply(hid, DANA, "hello", now),
    ):
        with pytest.raises(Conflict) as caught:
            change()
        assert type(caught.value) is Conflict  # not HandoffConflict: there is nothing to take over
    with pytest.raises(NotPermitted):
        t.close(hid, DANA, now)
    assert len(audit.list_stream(f"handoff#{hid}")) == 1  # the opening row only
    closed = t.close(hid, LEAD, now, "answered by email")
    assert (closed.status, closed.closed_as) == ("CLOSED", "closed")
    rows = audit.list_stream(f"handoff#{hid}")
    assert [r["action"] for r in rows][-1] == "handoff_closed" and len(rows) == 2
    assert audit.verify_trail(f"handoff#{hid}")["status"] == "ok"
    notes = World(h.ddb, s.conversations_table, "", "", "").scan(s.conversations_table)
    assert not [n for n in notes if str(n["conversation_id"]).startswith("note#")]  # no feed to tell
    # The customer's holder item is free: a new escalation opens a new ticket.
    again = call_tool(mcp, Principal("customer-7", "customer", 7), "escalate_to_human", {"reason": "y"}, None, "c")
    assert again.result["status"] == "HANDOFF_OPENED" and again.result["handoff_id"] != hid
    assert tickets.get(hid) == closed


# -- a person's reply -------------------------------------------------------------------------------------------


def test_a_reply_is_stored_in_order_and_audited_by_hash_and_length(w: World32) -> None:
    w.t.claim(w.hid, DANA, _now(w.h))
    w.refused(lambda: w.t.reply(w.hid, SAM, SECRET, _now(w.h)), NotPermitted)
    w.refused(lambda: w.t.reply(w.hid, LEAD, SECRET, _now(w.h)), NotPermitted)  # a lead replies by holding it
    before = w.header().next_seq
    rows = len(w.rows())
    sent = w.t.reply(w.hid, DANA, SECRET, _now(w.h), key="k-1")
    m = sent.message
    assert not sent.replayed and (m.seq, m.role, m.author, m.author_name) == (before, "person", "agent-1", "Dana")
    assert w.h.conversations.load(w.cid)[-1] == m and w.header().next_seq == before + 1
    new = w.rows()[rows:]
    assert [r["action"] for r in new] == ["handoff_reply"]
    assert json.loads(new[0]["input"]) == {
        "sha256": hashlib.sha256(SECRET.encode()).hexdigest(),
        "length": len(SECRET),
        "seq": before,
    }
    assert SECRET not in json.dumps(World.of_settings(w.h.ddb, w.h.settings).scan(w.h.settings.audit_table))
    assert w.audit.verify_trail(f"handoff#{w.hid}")["status"] == "ok"
    # A resend: the first reply again, nothing new written; the key with another text: 422.
    again = w.t.reply(w.hid, DANA, SECRET, _now(w.h), key="k-1")
    assert again.replayed and again.message == m
    w.refused(lambda: w.t.reply(w.hid, DANA, "another text", _now(w.h), key="k-1"), IdempotencyKeyReused)
    # The key is the hand-off's: the same key on the next message is a new reply.
    assert w.t.reply(w.hid, DANA, "second", _now(w.h), key="k-2").message.seq == before + 1


def test_a_reply_waits_for_a_turn_holding_the_lease(w: World32) -> None:
    """A claim lands during a model call: the reply is refused (LeaseHeld) while that turn holds the lease, the
    model's answer is dropped, and the reply goes through once the turn has stopped."""
    h = w.h
    w.t.close(w.hid, LEAD, _now(h))
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "again"})), answer("dropped")]
    refused: list[Exception] = []
    seen: dict[str, str] = {}
    first = len(h.model.requests)

    def during() -> None:
        if len(h.model.requests) != first + 2:  # the turn's second call: after the escalation
            return
        hid = HandoffStore(h.ddb, *_tables(h)).open_for(w.cid)
        assert hid is not None
        seen["hid"] = hid.handoff_id
        w.t.claim(hid.handoff_id, DANA, _now(h))
        try:
            w.t.reply(hid.handoff_id, DANA, "too early", _now(h))
        except LeaseHeld as exc:
            refused.append(exc)

    h.model.on_call = during
    r = h.turn("a person please", w.cid)
    assert isinstance(r, TurnResult) and r.stop_reason == "handed_to_person"
    assert len(refused) == 1
    stored = h.conversations.load(w.cid)
    assert "dropped" not in json.dumps([m.content for m in stored]) and "too early" not in json.dumps(
        [m.content for m in stored]
    )
    sent = w.t.reply(seen["hid"], DANA, "now", _now(h))
    assert sent.message.seq == stored[-1].seq + 1


def test_a_reply_waits_for_an_unexpired_lease_and_not_an_expired_one(w: World32) -> None:
    h = w.h
    w.t.claim(w.hid, DANA, _now(h))
    h.conversations.acquire_lease(w.cid, 7, "req-crashed", int(h.clock()), int(h.clock()) + 40)
    w.refused(lambda: w.t.reply(w.hid, DANA, "hi", _now(h)), LeaseHeld)
    h.clock.advance(41)  # the crashed turn's lease ran out
    assert w.t.reply(w.hid, DANA, "hi", _now(h)).message.role == "person"


def test_a_reply_that_lost_its_seq_to_the_customer_is_retried(w: World32, monkeypatch: pytest.MonkeyPatch) -> None:
    """The customer's message lands between the reply's read of the header and its transaction: the reply's
    transaction is cancelled on ``next_seq`` and is tried again, after the customer's message."""
    w.t.claim(w.hid, DANA, _now(w.h))
    store = w.t._conversations
    read = store.get_header
    raced: list[Any] = []

    def header_then_customer(cid: str) -> Any:
        header = read(cid)
        if not raced:
            raced.append(w.h.turn("are you there?", w.cid))
        return header

    monkeypatch.setattr(store, "get_header", header_then_customer)
    rows = len(w.rows())
    sent = w.t.reply(w.hid, DANA, "yes, here", _now(w.h), key="k")
    assert isinstance(raced[0], KeptForPerson) and raced[0].assigned
    stored = w.h.conversations.load(w.cid)
    assert [(m.role, m.content[0]["text"]) for m in stored[-2:]] == [
        ("user", "are you there?"),
        ("person", "yes, here"),
    ]
    assert sent.message == stored[-1]
    assert [r["action"] for r in w.rows()[rows:]] == ["handoff_reply"]  # the cancelled try wrote nothing
    assert w.audit.verify_trail(f"handoff#{w.hid}")["status"] == "ok"


def _tables(h: Harness) -> tuple[str, str, str]:
    s = h.settings
    return s.approvals_table, s.conversations_table, s.audit_table


# -- erasure ----------------------------------------------------------------------------------------------------


def test_erasure_removes_a_persons_words_and_the_note_and_the_chain_verifies(w: World32) -> None:
    h, s = w.h, w.h.settings
    w.t.claim(w.hid, DANA, _now(h))
    w.t.reply(w.hid, DANA, SECRET, _now(h), key="k-secret")
    assert isinstance(h.turn("thanks", w.cid), KeptForPerson)
    note = "Customer lives at 12 Elm Street; refunded by hand."
    w.t.hand_back(w.hid, DANA, _now(h), note)
    assert w.header().handback_note == note
    eraser = ConversationEraser(h.ddb, s.conversations_table, s.audit_table, h.clock, lambda: _now(h))
    report = eraser.erase_customer(7, "lead-1", "req-erase", "request #32")
    assert report.complete and report.conversations == 1
    people = [m for m in h.conversations.load(w.cid) if m.role == "person"]
    assert [m.content for m in people] == [[{"type": "text", "text": ERASED}]]
    assert people[0].author == "agent-1"  # who wrote it stays; what they wrote goes
    header = w.header()
    assert header.handback_note is None
    everything = json.dumps(World.of_settings(h.ddb, s).scan(s.conversations_table))
    assert "Elm Street" not in everything
    # The audit rows keep who did what (the reply's hash and length), and every chain still verifies.
    actions = [r["action"] for r in w.rows()]
    assert actions == ["handoff_opened", "handoff_claimed", "handoff_reply", "handoff_returned"]
    trail = w.audit.verify_trail(w.cid)  # the conversation's stream and every stream it names (the hand-off's)
    assert trail["status"] == "ok" and not trail["redacted"]
    assert {a["stream"] for a in trail["streams"]} >= {w.cid, f"handoff#{w.hid}"}
    assert "conversation_erased" in [r["action"] for r in w.audit.list_stream(w.cid)]
    assert w.audit.verify_trail(f"handoff#{w.hid}")["status"] == "ok"
    # The bot answers the next message with the erased history: a valid request.
    h.model.script = [answer("Hello again.")]
    assert isinstance(h.turn("new question", w.cid), TurnResult)


# -- a crashed turn's open tool call, then a person's reply -------------------------------------------------------


def test_a_reply_after_a_crashed_turn_leaves_a_history_the_next_turn_repairs(harness: Harness) -> None:
    """A turn escalates and dies before storing the tool's result. Once its lease expired, the person who claimed
    the hand-off may not reply after the open call (409, nothing written) until the customer's next message has
    repaired it; then the reply, the hand-back and the bot's next turn keep a valid history."""
    h = harness
    h.model.script = [answer("Hello.")]
    first = h.turn("hi")
    assert isinstance(first, TurnResult)
    cid = first.conversation_id
    h.model.script = [tools(tool_use("escalate_to_human", {"reason": "a person"}))]
    h.crash_at = {"after_tool:0"}
    with pytest.raises(Crash):
        h.turn("I want a human", cid)
    s = h.settings
    hid = HandoffStore(h.ddb, *_tables(h)).open_for(cid)
    assert hid is not None
    t = Takeover(h.ddb, s.approvals_table, s.conversations_table, s.audit_table)
    t.claim(hid.handoff_id, DANA, _now(h))
    h.clock.advance(s.lease_seconds + 1)  # the dead turn's lease ran out
    w = World32(h, t, cid, hid.handoff_id)
    refused = w.refused(lambda: t.reply(hid.handoff_id, DANA, "Dana here.", _now(h), key="k"), Conflict)
    assert type(refused) is Conflict
    assert isinstance(h.turn("hello?", cid), KeptForPerson)  # repairs the open call, then keeps the message
    t.reply(hid.handoff_id, DANA, "Dana here.", _now(h), key="k")  # the refused key was not spent
    roles = [m.role for m in h.conversations.load(cid)]
    assert roles[-4:] == ["assistant", "user", "user", "person"]  # tool_use, its repaired result, hello?, Dana
    t.hand_back(hid.handoff_id, DANA, _now(h))
    h.model.script = [answer("Back to the bot.")]
    assert isinstance(h.turn("one more thing", cid), TurnResult)
    assert problems([for_model(m) for m in h.conversations.load(cid)]) == []
    assert problems(h.model.requests[-1].messages) == []
