"""A turn that lost its conversation's lease runs no tool, and its money write is fenced (second review, finding 2).

Turn A stores its ``tool_use`` (write-ahead), then its lease lapses and turn B takes the lease and answers A's
call "not executed" (the repair). Before the fix A's refund still landed: a refund the history says never ran,
and the model, told so, could ask again. Now every money transaction of a turn carries a ConditionCheck that the
conversation's lease is still this turn's (`ConversationStore.lease_check`, `ToolContext.fence`), and a turn whose
lease may be gone (the worker's keeper said so, or the synchronous path's lease expired) runs no further tool.
Both paths: the synchronous one (`Agent.run_turn`) and the worker's (`TurnWorker`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from support_agent.agent import lifecycle
from support_agent.errors import LeaseLost
from support_agent.refunds.requests import RefundWriter
from tests.reliability.checks import World, check_turn
from tests.reliability.test_crash_everywhere import RefundModel
from tests.reliability.test_worker_crashes import CID, hand_over, rig
from tests.support.harness import Harness

ORDER, AMOUNT = 1043, 2500


def _answered_not_executed(world: World, cid: str) -> list[dict[str, Any]]:
    """Every tool_result of the conversation, as stored."""
    results = []
    for m in world.conversation(cid)[1]:
        for block in m["content"] if isinstance(m["content"], list) else []:
            if block.get("type") == "tool_result":
                results.append(block)
    return results


def _refund_rows(world: World) -> list[dict[str, Any]]:
    return [r for r in world.customer_rows(7, "REFUND#") if int(r["order_id"]) == ORDER]


def _after(h: Harness, world: World, cid: str) -> None:
    """The history is valid, one audit row per tool_use, the money invariant; and no refund of the call B
    answered "not executed"."""
    check_turn(world, cid, h.agent.tools.specs)
    results = _answered_not_executed(world, cid)
    assert results and all(r["is_error"] for r in results), results
    assert _refund_rows(world) == [] and h.order(ORDER).refunded_cents == 0 and h.order(ORDER).reserved_cents == 0


def _greeted(h: Harness) -> tuple[str, World]:
    """A conversation whose first turn asked for nothing (the model refunds when asked): its id, and the world."""
    h.agent.llm = RefundModel(ORDER, AMOUNT, greet=True)
    cid = h.turn("hello").conversation_id
    return cid, World.of_settings(h.ddb, h.settings)


def _after_write_ahead(h: Harness, meanwhile: Callable[[], None]) -> None:
    """``meanwhile`` runs once, as the next turn has stored its tool_use (write-ahead) and not yet run the tool."""
    checkpoint = h.agent.checkpoint

    def hook(step: str) -> None:
        if step == "after_write_ahead":
            h.agent.checkpoint = checkpoint
            meanwhile()
        checkpoint(step)

    h.agent.checkpoint = hook


def test_a_turn_whose_lease_was_taken_over_cannot_write_its_refund(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the check before each tool cannot close: B takes the lease between A's check and A's money write.
    The write's ConditionCheck on the lease fails: nothing reserved, nothing refunded, A's turn ends 409."""
    h = harness
    cid, world = _greeted(h)
    real = RefundWriter.direct
    taken: list[str] = []

    def b_takes_over_first(self: RefundWriter, *args: Any, **kwargs: Any) -> Any:
        if not taken:
            taken.append("B")
            h.clock.advance(h.settings.lease_seconds + 1)  # A's lease lapsed: B's turn takes it
            h.agent.llm = RefundModel(ORDER, AMOUNT, greet=True)  # B answers in words: it asks for nothing
            h.turn("hello?", cid)
            h.clock.advance(-(h.settings.lease_seconds + 1))  # back in A's time: its own check still passes
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RefundWriter, "direct", b_takes_over_first)
    with pytest.raises(LeaseLost):
        h.turn("please refund order 1043", cid)
    assert taken == ["B"]
    _after(h, world, cid)


def test_a_turn_whose_lease_lapsed_and_was_taken_runs_no_tool(harness: Harness) -> None:
    """The synchronous path: A's model call overstayed its lease (a slow provider, a pause) and B's turn took the
    lease meanwhile, answering A's stored call "not executed". A's check before the tool cannot renew the lease
    (it is no longer A's): A runs nothing and ends 409; one answer to the call, no refund."""
    h = harness
    cid, world = _greeted(h)

    def b_meanwhile() -> None:
        h.clock.advance(h.settings.lease_seconds + 1)
        h.agent.llm = RefundModel(ORDER, AMOUNT, greet=True)  # B answers in words
        h.turn("hello?", cid)

    _after_write_ahead(h, b_meanwhile)
    with pytest.raises(LeaseLost):
        h.turn("please refund order 1043", cid)
    _after(h, world, cid)


def test_a_lapsed_lease_nobody_took_is_renewed_and_the_turn_goes_on(harness: Harness) -> None:
    """The same overstay with nobody waiting: the lease is still A's, so A renews it before the tool and the
    refund is made once, fenced by the renewed lease."""
    h = harness
    cid, world = _greeted(h)
    _after_write_ahead(h, lambda: h.clock.advance(h.settings.lease_seconds + 1))
    h.turn("please refund order 1043", cid)
    check_turn(world, cid, h.agent.tools.specs)
    assert len(_refund_rows(world)) == 1 and h.order(ORDER).refunded_cents == AMOUNT


def test_the_worker_stops_before_its_tool_once_its_keeper_reports_the_lease_lost(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's path: its keeper found the lease someone else's (`LeaseKeeper.lost`) while the model answered.
    The turn runs no tool and ends failed (409); the lease's new holder repairs the call, no refund was made."""
    h = harness
    model, queue_url, turns, _sweeper, worker = rig(h)
    world = World.of_settings(h.ddb, h.settings)
    keepers: list[Any] = []

    class Keeper(lifecycle.LeaseKeeper):
        def __enter__(self) -> Any:
            keepers.append(self)
            return self  # no renewal thread: the test says when the lease is lost

        def __exit__(self, *_: Any) -> None:
            pass

    monkeypatch.setattr(lifecycle, "LeaseKeeper", Keeper)
    _after_write_ahead(h, lambda: setattr(keepers[-1], "lost", True))
    _turn_id, message = hand_over(h, turns, queue_url)
    assert worker.run(message) == "failed"
    assert _refund_rows(world) == []
    h.clock.advance(h.settings.lease_seconds + 1)
    model.greet = True
    h.turn("hello?", CID)
    _after(h, world, CID)
