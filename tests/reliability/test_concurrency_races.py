"""Property 4: races. Threads really run our code at once; moto is made atomic per call, as DynamoDB is.

* parallel turns on one conversation: while one turn runs, every other gets 409 before any model call or
  tool, and nothing interleaves; free-running, every turn either wins or gets 409 and the history holds
  exactly the winners' messages;
* parallel approve and reject of one approval: one outcome, one decision audit row, at most one RefundFlow
  execution name, the reservation released only on reject, no unexpected error;
* parallel refunds on one order (direct and over the threshold, many amounts): never more than the total,
  never more than the threshold refunded without a lead, the money invariant.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from support_agent.approvals.decisions import ApprovalDecisions
from support_agent.auth import Principal
from support_agent.errors import Conflict
from support_agent.llm.base import LlmResponse
from support_agent.messages import Deadline, Usage
from support_agent.store.approvals import ApprovalStore
from support_agent.tools.registry import ToolContext
from tests.reliability.checks import MotoSnapshot, World, check_conversation, check_money
from tests.reliability.conftest import CI, SLOW
from tests.reliability.figures import count
from tests.support.harness import Harness
from tests.support.scripted import FakeModel, Request

_ids = itertools.count(1)
ME = Principal("customer-7", "customer", 7)


def run_all(fns: list[Any], timeout: float = 30) -> list[Any]:
    """Start every function at the same moment; their results or exceptions, in order."""
    barrier = threading.Barrier(len(fns))
    out: list[Any] = [None] * len(fns)

    def go(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fns[i]()
        except BaseException as exc:  # collected and judged by the test
            out[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a thread hung"
    return out


@dataclass
class GateModel(FakeModel):
    """Answers at once, or (gated) holds its first call until the test opens the gate."""

    gate: threading.Event | None = None
    entered: threading.Event = field(default_factory=threading.Event)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def respond(self, request: Request) -> LlmResponse:
        with self.lock:
            self.calls += 1
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30)
        last = request.messages[-1:]
        if any(isinstance(m["content"], list) and m["content"][-1].get("type") == "tool_result" for m in last):
            return LlmResponse("end_turn", [{"type": "text", "text": "Done."}], Usage(10, 5))
        use = {
            "type": "tool_use",
            "id": f"toolu_race{next(_ids):06d}",
            "name": "lookup_order",
            "input": {"order_id": 1042},
        }
        return LlmResponse("tool_use", [use], Usage(10, 5))


def turn(h: Harness, cid: str, text: str) -> Any:
    return h.agent.run_turn(ME, 7, cid, text, f"req-race-{next(_ids)}", Deadline.after(27, h.clock))


def _start(h: Harness, model: GateModel) -> str:
    model.gate = None
    return turn(h, None, "hello").conversation_id  # type: ignore[arg-type]


# -- turns ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 8])
def test_parallel_turns_while_one_runs_all_others_get_409_before_any_work(
    harness: Harness, atomic_moto: None, n: int
) -> None:
    h, model = harness, GateModel()
    h.agent.llm = model
    world = World.of_settings(h.ddb, h.settings)
    cid = _start(h, model)
    model.gate, model.entered = threading.Event(), threading.Event()
    holder: list[Any] = []
    first = threading.Thread(target=lambda: holder.append(turn(h, cid, "the winner")))
    first.start()
    assert model.entered.wait(10)
    calls = model.calls
    others = run_all([lambda i=i: turn(h, cid, f"loser {i}") for i in range(n - 1)])
    assert all(isinstance(o, Conflict) for o in others), others
    assert model.calls == calls, "a refused turn reached the model"
    model.gate.set()
    first.join(10)
    assert holder and holder[0].stop_reason == "end_turn"
    counts = check_conversation(world, cid, h.agent.tools.specs)
    _, messages = world.conversation(cid)
    texts = [b["text"] for m in messages if m["role"] == "user" for b in m["content"] if b.get("type") == "text"]
    assert texts == ["hello", "the winner"], texts
    count("4-concurrency", turns_refused_409=n - 1, turns_won=1, tool_calls=counts["tool_calls"])


def test_free_running_parallel_turns_each_win_or_409_and_nothing_interleaves(
    harness: Harness, atomic_moto: None
) -> None:
    h, model = harness, GateModel()
    h.agent.llm = model
    world = World.of_settings(h.ddb, h.settings)
    for _ in range(3):
        cid = _start(h, model)
        out = run_all([lambda i=i, c=cid: turn(h, c, f"message {i}") for i in range(6)])
        won = [o for o in out if not isinstance(o, BaseException)]
        assert all(isinstance(o, Conflict) for o in out if isinstance(o, BaseException)), out
        check_conversation(world, cid, h.agent.tools.specs)
        _, messages = world.conversation(cid)
        texts = [b["text"] for m in messages if m["role"] == "user" for b in m["content"] if b.get("type") == "text"]
        assert len(texts) == 1 + len(won) and len(set(texts)) == len(texts)
        count("4-concurrency", turns_won=len(won), turns_refused_409=len(out) - len(won))


# -- approve vs reject ------------------------------------------------------------------------------------


@dataclass
class FakeStepFunctions:
    """StartExecution as Step Functions does it: a second start under the same name is refused."""

    names: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start_execution(self, stateMachineArn: str, name: str, input: str) -> dict[str, str]:
        with self.lock:
            if name in self.names:
                raise ClientError({"Error": {"Code": "ExecutionAlreadyExists", "Message": name}}, "StartExecution")
            self.names.append(name)
        return {"executionArn": f"{stateMachineArn}:{name}"}


def _raise_approval(h: Harness, order: int = 1042, amount: int = 18900) -> str:
    ctx = ToolContext(ME, 7, f"conv_race{next(_ids)}", 1, "toolu_r", "req", "2026-12-02T00:00:00.000Z")
    out = h.agent.tools.execute("request_refund", {"order_id": order, "amount_cents": amount, "reason": "r"}, ctx)
    assert out.result["status"] == "PENDING_APPROVAL", out.result
    return str(out.result["approval_id"])


def _approve_reject_property(h: Harness) -> Any:
    world = World.of_settings(h.ddb, h.settings)
    snapshot = MotoSnapshot()
    s = h.settings

    @given(actions=st.lists(st.sampled_from(["approve", "reject"]), min_size=2, max_size=8))
    def prop(actions: list[str]) -> None:
        snapshot.restore()
        aid = _raise_approval(h)
        sfn = FakeStepFunctions()
        store = ApprovalStore(h.ddb, s.approvals_table, s.customer_data_table, s.audit_table)
        decisions = ApprovalDecisions(
            store, sfn, "arn:aws:states:us-east-1:123456789012:stateMachine:RefundFlow", 0, lambda: "now"
        )
        out = run_all(
            [
                (
                    lambda a=a, i=i: (
                        decisions.approve(aid, f"lead-{i}")
                        if a == "approve"
                        else decisions.reject(aid, f"lead-{i}", "no")
                    )
                )
                for i, a in enumerate(actions)
            ]
        )
        unexpected = [o for o in out if isinstance(o, BaseException) and not isinstance(o, Conflict)]
        assert not unexpected, unexpected
        final = store.get(aid)
        assert final is not None and final.status in ("APPROVED", "REJECTED")
        # The approval's stream begins with its request (the tool's reservation); then one decision.
        decided = [r["action"] for r in world.audit_rows(f"approval#{aid}") if r["action"] != "refund_requested"]
        assert len(decided) == 1, f"two outcomes recorded: {decided}"
        order = world.order(7, 1042)
        if final.status == "APPROVED":
            assert decided == ["approval_approved"] and set(sfn.names) == {aid}
            assert order["reserved_cents"] == 18900
            assert all(isinstance(o, Conflict) for o, a in zip(out, actions, strict=True) if a == "reject")
        else:
            assert decided == ["approval_rejected"] and sfn.names == []
            assert order["available_cents"] == order["total_cents"]
            assert all(isinstance(o, Conflict) for o, a in zip(out, actions, strict=True) if a == "approve")
        check_money(world, 7, [1042])
        count(
            "4-concurrency",
            decision_races=1,
            decisions=len(actions),
            decisions_refused_409=sum(isinstance(o, Conflict) for o in out),
        )

    return prop


def test_parallel_approve_and_reject_one_outcome(harness: Harness, atomic_moto: None) -> None:
    settings(parent=CI, max_examples=max(5, CI.max_examples // 4))(_approve_reject_property(harness))()


@pytest.mark.slow
def test_parallel_approve_and_reject_one_outcome_long(harness: Harness, atomic_moto: None) -> None:
    settings(parent=SLOW, max_examples=SLOW.max_examples // 10)(_approve_reject_property(harness))()


# -- refunds on one order ---------------------------------------------------------------------------------


def _refund_property(h: Harness) -> Any:
    world = World.of_settings(h.ddb, h.settings)
    snapshot = MotoSnapshot()

    @given(
        order=st.sampled_from([(1042, 18900), (1043, 2500), (1044, 16000)]),
        amounts=st.lists(
            st.sampled_from([1, 100, 1250, 2500, 2501, 4999, 5000, 5001, 9000, 16000, 18900]), min_size=2, max_size=8
        ),
    )
    def prop(order: tuple[int, int], amounts: list[int]) -> None:
        snapshot.restore()
        oid, total = order

        def refund(amount: int) -> Any:
            ctx = ToolContext(ME, 7, f"conv_par{next(_ids)}", 1, f"toolu_{next(_ids)}", "req", "now")
            return h.agent.tools.execute(
                "request_refund", {"order_id": oid, "amount_cents": amount, "reason": "r"}, ctx
            )

        out = run_all([lambda a=a: refund(a) for a in amounts])
        assert not [o for o in out if isinstance(o, BaseException)], out
        check_money(world, 7, [oid])
        o = world.order(7, oid)
        assert o["refunded_cents"] + o["reserved_cents"] <= total
        assert o["refunded_cents"] <= h.settings.refund_threshold_cents
        outcomes = Counter(
            "error" if r.is_error else str(r.result["status"]) for r in out if not isinstance(r, BaseException)
        )
        count("4-concurrency", refund_races=1, **{f"refunds_{k.lower()}": v for k, v in outcomes.items()})

    return prop


def test_parallel_refunds_on_one_order_never_exceed_total_or_threshold(harness: Harness, atomic_moto: None) -> None:
    settings(parent=CI, max_examples=max(5, CI.max_examples // 3))(_refund_property(harness))()


@pytest.mark.slow
def test_parallel_refunds_on_one_order_long(harness: Harness, atomic_moto: None) -> None:
    settings(parent=SLOW, max_examples=SLOW.max_examples // 10)(_refund_property(harness))()
