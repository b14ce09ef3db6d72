"""Property 3: a crash at every step of a turn, then the client tries again.

A probe turn records every AWS call the turn makes (lease, load, write-ahead, the refund transaction, the
approval message, the results write, the release). Then, for each call, the turn is killed just before it
(nothing written) and just after it (written, but the process never learns so), with the process either
alive (exception handlers and `finally` run) or dead (nothing runs after the crash; the lease stays until it
expires); plus each of the loop's own checkpoints, and "after the answer, before the reply". The next
request on the same conversation must then succeed — at once if the process lived and its lease was
released, after the lease expired otherwise — with a valid history, exactly one money effect, the money
invariant and one audit row per tool call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from support_agent.approvals.sweep import ApprovalSweeper
from support_agent.errors import Conflict
from support_agent.llm.base import LlmResponse
from support_agent.messages import Usage
from support_agent.store.approvals import ApprovalStore
from tests.reliability.checks import MotoSnapshot, World, check_turn
from tests.reliability.figures import count
from tests.support.harness import Crash, Harness
from tests.support.scripted import FakeModel, Request

# TOOL_MODE=mcp too: the same turns, history, audit rows and money effects over the MCP protocol (tests/conftest.py).
BOTH_TOOL_MODES = True

WRITES = {"PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem", "SendMessage"}
CHECKPOINTS = ("after_model_call", "after_write_ahead", "after_tool:0", "after_results_write")


@dataclass
class RefundModel(FakeModel):
    """An honest model: refunds once, and answers once it sees the refund went through (or is pending)."""

    order: int = 1043
    amount: int = 2500
    ids: int = 0
    greet: bool = False  # answer the next call with a greeting (a conversation's first turn)

    def respond(self, request: Request) -> LlmResponse:
        done = any(
            (b.get("type") == "tool_result" and not b.get("is_error") and "REFUND" in str(b.get("content")))
            or (b.get("type") == "tool_result" and "PENDING_APPROVAL" in str(b.get("content")))
            for m in request.messages
            for b in (m["content"] if isinstance(m["content"], list) else [])
        )
        if self.greet:
            self.greet = False
            return LlmResponse("end_turn", [{"type": "text", "text": "Hello! How can I help?"}], Usage(10, 5))
        if done or request.tool_choice == {"type": "none"}:
            return LlmResponse("end_turn", [{"type": "text", "text": "Your refund is taken care of."}], Usage(10, 5))
        self.ids += 1
        use = {
            "type": "tool_use",
            "id": f"toolu_crash{self.ids:05d}",
            "name": "request_refund",
            "input": {"order_id": self.order, "amount_cents": self.amount, "reason": "broken"},
        }
        return LlmResponse("tool_use", [use], Usage(10, 5))


class Died(BaseException):
    """The process died: no `except Exception` handler runs, only the stack unwinds (no `finally` is patched)."""


@dataclass
class Faults:
    """Counts the harness's AWS calls; fails the n-th one before or after it reaches AWS.

    `fault` is an `Exception` (a live process: an AWS error or a lost answer, which the code may handle) or
    `Died` (the process is gone).
    """

    calls: list[str] = field(default_factory=list)
    at: int = -1
    when: str = ""
    fault: type[BaseException] = Crash

    def before(self, event_name: str, **_: Any) -> None:
        self.calls.append(event_name.rsplit(".", 1)[-1])
        if len(self.calls) - 1 == self.at and self.when == "before":
            raise self.fault(f"before {self.calls[-1]}")

    def after(self, event_name: str, **_: Any) -> None:
        if len(self.calls) - 1 == self.at and self.when == "after":
            raise self.fault(f"after {self.calls[-1]}")


@contextlib.contextmanager
def faults(h: Harness, f: Faults) -> Iterator[Faults]:
    clients = (h.ddb, h.sqs)
    for c in clients:
        c.meta.events.register("before-call.*.*", f.before, unique_id="rel-before")
        c.meta.events.register("after-call.*.*", f.after, unique_id="rel-after")
    try:
        yield f
    finally:
        for c in clients:
            c.meta.events.unregister("before-call.*.*", unique_id="rel-before")
            c.meta.events.unregister("after-call.*.*", unique_id="rel-after")


def points(h: Harness, model: RefundModel, cid: str) -> list[tuple[int, str, str]]:
    """(index, call, when) for every AWS call of one refund turn: before each, and after each write."""
    probe = Faults()
    with faults(h, probe):
        h.turn("please refund it", cid)
    out = []
    for i, name in enumerate(probe.calls):
        out.append((i, name, "before"))
        if name in WRITES:
            out.append((i, name, "after"))
    return out


def queued(h: Harness) -> set[str]:
    """Approval ids on the approval queue (drained)."""
    ids: set[str] = set()
    while msgs := h.sqs.receive_message(QueueUrl=h.queue_url, MaxNumberOfMessages=10).get("Messages", []):
        for msg in msgs:
            ids.add(json.loads(msg["Body"])["approvalId"])
            h.sqs.delete_message(QueueUrl=h.queue_url, ReceiptHandle=msg["ReceiptHandle"])
    return ids


def verify(h: Harness, world: World, cid: str, model: RefundModel, direct: bool) -> None:
    check_turn(world, cid, h.agent.tools.specs)
    order = world.order(7, model.order)
    rows = [r for r in world.customer_rows(7, "REFUND#") if int(r["order_id"]) == model.order]
    approvals = [a for a in world.scan(world.approvals) if int(a.get("order_id", 0)) == model.order]
    # On the refund key's or the approval's own stream, naming the conversation.
    money = ("refund", "refund_requested")
    money_audit = [r for r in world.scan(world.audit) if r.get("conversation_id") == cid and r["action"] in money]
    assert len(rows) == 1, f"{len(rows)} refund rows: the money effect happened {len(rows)} times"
    assert len(money_audit) == 1, money_audit
    if direct:
        assert order["refunded_cents"] == model.amount and not approvals
    else:
        assert order["reserved_cents"] == model.amount and len(approvals) == 1
        # The leads hear of it: from the turn, or (its message lost) from the sweep an hour later.
        aid = approvals[0]["approval_id"]
        if aid not in queued(h):
            later = datetime.now(UTC) + timedelta(hours=1)
            s = h.settings
            store = ApprovalStore(h.ddb, s.approvals_table, s.customer_data_table, s.audit_table)
            ApprovalSweeper(store, h.ddb, h.sqs, h.queue_url, 168, 300, clock=lambda: later).run()
            assert aid in queued(h), "an approval nobody will ever be told about"
            count("3-crash-everywhere", approvals_requeued_by_the_sweep=1)


def retry_until_served(h: Harness, cid: str, lease_may_remain: bool) -> str:
    """The client's next request: at once; after the lease expired only when the lease may still be held."""
    try:
        h.turn("please refund it", cid)
        return "at_once"
    except Conflict:
        assert lease_may_remain, "a live process that failed left its lease behind: the client gets 409"
    h.clock.advance(h.settings.lease_seconds + 1)
    h.turn("please refund it", cid)
    return "after_lease_expiry"


@pytest.mark.parametrize(
    ("order", "amount", "direct"), [(1043, 2500, True), (1042, 18900, False)], ids=["direct", "approval"]
)
def test_crash_at_every_step_then_the_next_request_succeeds(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, order: int, amount: int, direct: bool
) -> None:
    h = harness
    model = RefundModel(order, amount)
    h.agent.llm = model
    world = World.of_settings(h.ddb, h.settings)
    snapshot = MotoSnapshot()

    def fresh_conversation() -> str:
        snapshot.restore()
        model.greet = True
        return h.turn("hello, I have a broken order").conversation_id

    cid = fresh_conversation()
    plan = points(h, model, cid)
    release = max(i for i, call, _ in plan if call == "UpdateItem")  # the turn's last write frees the lease
    tried = 0
    for index, _call, when in plan:
        for alive in (True, False):
            if not alive and index == release:
                continue  # a dead process never makes that call
            cid = fresh_conversation()
            with monkeypatch.context() as m:
                if not alive:  # a dead process runs no `finally`: the lease is left to expire
                    m.setattr(h.conversations, "release_lease", lambda *_a: None)
                with faults(h, Faults(at=index, when=when, fault=Crash if alive else Died)):
                    try:
                        h.turn("please refund it", cid)
                        assert alive, "a dead process cannot answer"
                        count("3-crash-everywhere", handled_by_the_turn=1)
                    except (Crash, Died):
                        pass
            how = retry_until_served(h, cid, lease_may_remain=not alive or (index, when) == (release, "before"))
            verify(h, world, cid, model, direct)
            tried += 1
            count("3-crash-everywhere", crashes=1, **{f"next_request_{how}": 1})
    for step in (*CHECKPOINTS, "before_reply"):
        cid = fresh_conversation()
        if step == "before_reply":
            h.turn("please refund it", cid)  # answered, but the reply never reaches the client
        else:
            h.crash_at = {step}
            with pytest.raises(Crash):
                h.turn("please refund it", cid)
        retry_until_served(h, cid, lease_may_remain=False)
        verify(h, world, cid, model, direct)
        tried += 1
        count("3-crash-everywhere", crashes=1)
    assert tried >= len(plan) + len(CHECKPOINTS)
    kind = "direct" if direct else "approval"
    calls = len({i for i, _, _ in plan})
    count("3-crash-everywhere", **{f"{kind}_turn_aws_calls": calls, f"{kind}_turn_points": len(plan)})
