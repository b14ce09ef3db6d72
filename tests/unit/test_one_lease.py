"""A turn and an erasure take one lease, through ConversationStore: each keeps the other out.

Erasure once re-implemented the lease; these pin that both go through the store's methods, so
changing the lease in one place cannot let an erasure write under a live turn (or the reverse).
"""

from __future__ import annotations

import pytest

from support_agent.clock import utc_now
from support_agent.contract import status_and_code
from support_agent.errors import LeaseHeld, NotFound
from support_agent.store.erasure import ConversationEraser
from tests.support.harness import Harness
from tests.support.scripted import answer


def a_conversation(h: Harness) -> str:
    h.model.script = [answer("Hello.")]
    return h.turn("Hi, my address is 12 Elm Street.").conversation_id


def eraser(h: Harness) -> ConversationEraser:
    s = h.settings
    return ConversationEraser(h.ddb, s.conversations_table, s.audit_table, h.clock, utc_now, s.lease_seconds)


def take(h: Harness, cid: str, owner: str, customer_id: int = 7) -> None:
    now = int(h.clock())
    h.conversations.acquire_lease(cid, customer_id, owner, now, now + h.settings.lease_seconds)


def test_an_erasure_skips_a_conversation_whose_lease_a_turn_holds(harness: Harness) -> None:
    cid = a_conversation(harness)
    take(harness, cid, "req-live")
    report = eraser(harness).erase_customer(7, "lead-1", "r1")
    assert (report.skipped, report.conversations, report.messages) == ([cid], 0, 0)
    assert "12 Elm Street" in str(harness.conversations.load(cid)[0].content)

    harness.clock.advance(harness.settings.lease_seconds + 1)  # the turn's lease expired: erasure may take it
    report = eraser(harness).erase_customer(7, "lead-1", "r2")
    assert (report.skipped, report.conversations, report.messages) == ([], 1, 2)
    assert "12 Elm Street" not in str(harness.conversations.load(cid)[0].content)


def test_a_turn_finds_an_erasures_lease_held_and_someone_elses_conversation_not_found(harness: Harness) -> None:
    cid = a_conversation(harness)
    take(harness, cid, "erasure:r3")
    with pytest.raises(LeaseHeld) as held:
        take(harness, cid, "req-next")
    assert status_and_code(held.value) == (409, "conflict")  # the contract's answer is unchanged
    with pytest.raises(NotFound):  # not LeaseHeld: whose conversation it is must not leak
        take(harness, cid, "req-other", customer_id=8)
    harness.conversations.release_lease(cid, "erasure:r3")
    take(harness, cid, "req-next")
