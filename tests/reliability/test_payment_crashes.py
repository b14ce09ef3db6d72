"""Property 3, payments: a refund reaches the payment provider once, whatever crashes, faults or replays.

Real stores on moto tables from template.yaml, ``PAYMENT_PROVIDER=stripe`` on the real Stripe adapter,
and the simulated Stripe in-process (tests/support/stripe.py), so its idempotency (a first answer saved
and replayed, a 409 while a key is in flight, keys forgotten after 24 hours) is what our retries meet.

* Direct refunds (a chat turn → request_refund → the REQUESTED row with its reservation → the provider
  call → `RefundLedger.record`): the process dies before the call, after it before the record, or after
  the record, crossed with every fault the simulated Stripe injects (and a refused connection); then the
  next turn's repair (the tool's ``recorded`` asks again with the same attempt key) and later retries.
* Approved refunds, at `RefundStep` (PaymentsFunction's step): the same crashes and faults, then the step
  run again as a Step Functions retry or a replayed execution would; ten executions of one approval at
  once; a definitive refusal (FAILED), then a lead's retry with attempt 2.

After every step: no refund key with two live provider refunds; every SUCCEEDED row has exactly its
provider refund (same id and amount), a FAILED row none; per order ``available + reserved + refunded =
total`` and ``refunded`` equals the provider's succeeded refunds; one ``payment_refund`` audit row per
provider call whose answer reached the process. The counts go to RELIABILITY.md's "Payments" figures.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from moto import mock_aws

from devstack.simulated_stripe import Fault
from support_agent import wiring
from support_agent.auth import Principal
from support_agent.clock import utc_now
from support_agent.llm.base import LlmResponse
from support_agent.messages import Deadline, Usage
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.refunds.provider.port import (
    PaymentError,
    PaymentProvider,
    ProviderRefund,
    ProviderRefused,
    RefundAttempt,
)
from support_agent.refunds.step import ApprovalNotApproved, PaymentOutcomeUnknown, RefundStep
from support_agent.refunds.sweep import PaymentSweeper
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.dynamo import to_item, to_values
from support_agent.tools.registry import ToolContext
from support_agent.wiring import build_registry, build_settler
from tests.reliability.checks import MotoSnapshot, World
from tests.reliability.figures import count
from tests.support.harness import Harness, make_harness
from tests.support.scripted import FakeModel, Request
from tests.support.stripe import POST, InProcessStripe, duplicates, ledger_problems, live, provider_for, stripe_env
from tests.support.threads import run_together

CUSTOMER = 7
DIRECT_ORDER, DIRECT_AMOUNT = 1043, 2500  # within the threshold: refunded in the turn
APPROVED_ORDER, APPROVED_AMOUNT = 1042, 18900  # above it: a lead approves, RefundFlow refunds
CONNECT = "connect"  # a fault of ours: the connection is refused, nothing reaches Stripe
FIGURES = "3-payments"


class Died(BaseException):
    """The process died here: no `except Exception` runs, nothing after it happens."""


# -- the provider as the process sees it: crash points and counts --------------------------------------------


@dataclass
class Payments:
    """The Stripe adapter with the process's crash points around its refund call, counting the calls.

    ``answered``: calls whose answer reached the process (each must leave one ``payment_refund`` audit row).
    """

    provider: PaymentProvider
    crash: str = ""  # "before_call" | "after_call": the next refund call dies there
    calls: int = 0
    answered: int = 0
    name: str = "stripe"
    _lookup_follows: bool = False

    def refund(self, attempt: RefundAttempt, *, deadline: Deadline | None = None) -> ProviderRefund:
        self.calls += 1
        if self.crash == "before_call":
            self.crash = ""
            raise Died("before the provider call")
        try:
            refund = self.provider.refund(attempt, deadline=deadline)
        except PaymentError as exc:
            self._lookup_follows = isinstance(exc, ProviderRefused)  # the settler looks the refund up next
            self._answer()
            raise
        self._answer()
        return refund

    def _answer(self) -> None:
        if self.crash == "after_call":
            self.crash = ""
            raise Died("after the provider call, before the record")
        self.answered += 1

    def find(self, refund_key: str, payment_intent: str, *, deadline: Deadline | None = None) -> ProviderRefund | None:
        """After a refusal, part of that call; alone (an old attempt looked up first), a call of its own."""
        if self._lookup_follows:
            self._lookup_follows = False
            return self.provider.find(refund_key, payment_intent, deadline=deadline)
        try:
            return self.provider.find(refund_key, payment_intent, deadline=deadline)
        finally:
            self._answer()

    def retrieve(self, refund_id: str, *, deadline: Deadline | None = None) -> ProviderRefund:
        return self.provider.retrieve(refund_id, deadline=deadline)


def _dying(method: Any) -> Any:
    armed = [True]

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        if armed[0]:
            armed[0] = False
            raise Died(f"after {method.__name__}")
        return out

    return wrapper


# -- faults -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inject:
    """Faults queued before the refund: ``(route, fault, times)``; what the ledger ends as once asked again."""

    name: str
    plan: tuple[tuple[str, str, int], ...] = ()
    final: str = "SUCCEEDED"
    pending: bool = False  # Stripe makes refunds ``pending``: they stay SETTLING (webhooks are the next issue)
    known_intent: bool = True  # False: Stripe has no such payment intent (a definitive refusal)


LIST = "GET /v1/refunds"
INJECTIONS = [
    Inject("none"),
    Inject("429", ((POST, Fault.RATE_LIMIT, 1),)),
    Inject("429_every_retry", ((POST, Fault.RATE_LIMIT, 3),)),
    Inject("500_at_the_edge", ((POST, Fault.ERROR_UNSAVED, 3),)),
    # 500 saved before the refund: every repeat replays it and `find` finds nothing: unknown, stays SETTLING
    # (until the key is forgotten; see the retries).
    Inject("500_before_refund", ((POST, Fault.ERROR_BEFORE, 1),), final="SETTLING"),
    Inject("500_after_refund", ((POST, Fault.ERROR_AFTER, 1),)),
    Inject("500_after_refund_and_list_down", ((POST, Fault.ERROR_AFTER, 1), (LIST, Fault.ERROR_BEFORE, 3))),
    Inject("timeout_after_refund", ((POST, Fault.TIMEOUT_AFTER, 1),)),
    Inject("reset_after_refund", ((POST, Fault.DROP_AFTER, 1),)),
    Inject("slow", ((POST, Fault.SLOW, 1),)),
    Inject("connection_refused", ((POST, CONNECT, 1),)),
    Inject("connection_refused_every_retry", ((POST, CONNECT, 3),)),
    Inject("pending", pending=True, final="SETTLING"),
    Inject("refused_no_such_intent", known_intent=False, final="FAILED"),
]
CRASHES = ["none", "before_call", "after_call", "after_record"]


def arm(transport: InProcessStripe, inject: Inject) -> None:
    for route, fault, times in inject.plan:
        if fault == CONNECT:
            transport.refuse_connections(times)
        else:
            transport.stripe.inject(route, fault, times, hold_seconds=0.01)
    if inject.pending:
        transport.stripe.new_refund_status = "pending"


def injected(transport: InProcessStripe) -> int:
    """Faults that met a request so far."""
    return sum(1 for r in transport.stripe.requests if r.fault is not None) + transport.connect_errors


# -- the world --------------------------------------------------------------------------------------------------


@dataclass
class Scenario:
    h: Harness
    transport: InProcessStripe
    payments: Payments
    world: World
    steps: list[str] = field(default_factory=list)
    others: list[Payments] = field(default_factory=list)  # other processes' providers (the payment sweep's)

    @property
    def stripe(self) -> Any:
        return self.transport.stripe

    def rows(self) -> list[dict[str, Any]]:
        return [r for r in self.world.customer_rows(CUSTOMER, "REFUND#") if "refund_key" in r]

    def row(self, order_id: int) -> dict[str, Any]:
        rows = [r for r in self.rows() if int(r["order_id"]) == order_id]
        assert len(rows) == 1, f"{len(rows)} ledger rows for order {order_id}: {rows}"
        return rows[0]

    def orders(self) -> list[dict[str, Any]]:
        return [o for o in self.world.customer_rows(CUSTOMER, "ORDER#")]

    def check(self, step: str, audit_stream: str) -> None:
        """The ledger against the provider, the money, and one audit row per answered provider call."""
        self.steps.append(step)
        problems = ledger_problems(self.rows(), self.orders(), self.stripe)
        assert not problems, f"after {step}: {problems}"
        # Provider calls are audited on their refund key's own stream (the ledger row owns it).
        streams = {audit_stream} | {f"refund#{r['refund_key']}" for r in self.rows()}
        audited = [r for s in sorted(streams) for r in self.world.audit_rows(s) if r["action"] == "payment_refund"]
        answered = self.payments.answered + sum(p.answered for p in self.others)
        assert len(audited) == answered, f"after {step}: {len(audited)} payment_refund rows, {answered} answered calls"

    def settler_row(self, order_id: int) -> LedgerRow:
        return LedgerRow.from_item(self.row(order_id))


@pytest.fixture(scope="module")
def seeded() -> Iterator[tuple[Harness, MotoSnapshot]]:
    """One harness (moto tables from template.yaml, the demo data) per module, put back before each test."""
    with pytest.MonkeyPatch.context() as m, mock_aws():
        m.setenv("AWS_DEFAULT_REGION", "us-east-1")
        yield make_harness(**stripe_env()), MotoSnapshot()


@pytest.fixture
def fresh(seeded: tuple[Harness, MotoSnapshot]) -> Harness:
    h, snapshot = seeded
    snapshot.restore()
    return h


def make_world(h: Harness, inject: Inject) -> Scenario:
    transport = InProcessStripe()
    payments = Payments(provider_for(transport))
    h.agent.tools = build_registry(h.settings, h.ddb, h.sqs, payments)
    if not inject.known_intent:
        for order_id in (DIRECT_ORDER, APPROVED_ORDER):
            h.ddb.update_item(
                TableName=h.settings.customer_data_table,
                Key=to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{order_id}"}),
                UpdateExpression="SET payment_intent = :pi",
                ExpressionAttributeValues=to_values({":pi": f"pi_elsewhere_{order_id}"}),
            )
    arm(transport, inject)
    return Scenario(h, transport, payments, World.of_settings(h.ddb, h.settings))


def tally(w: Scenario, **more: int) -> None:
    made = len(w.stripe.refunds())
    assert not duplicates(w.stripe)
    count(
        FIGURES, faults_injected=injected(w.transport), refunds_made=made, duplicates=len(duplicates(w.stripe)), **more
    )


# -- 1. direct refunds in the chat turn -------------------------------------------------------------------------


@dataclass
class RefundOnce(FakeModel):
    """An honest model: asks for the refund once; answers in words once any refund result is in the history."""

    greet: bool = True
    amount: int = DIRECT_AMOUNT

    def respond(self, request: Request) -> LlmResponse:
        answered = any(
            b.get("type") == "tool_result"
            for m in request.messages
            for b in (m["content"] if isinstance(m["content"], list) else [])
        )
        if self.greet or answered or request.tool_choice == {"type": "none"}:
            self.greet = False
            return LlmResponse("end_turn", [{"type": "text", "text": "Done."}], Usage(10, 5))
        use = {
            "type": "tool_use",
            "id": "toolu_pay00001",
            "name": "request_refund",
            "input": {"order_id": DIRECT_ORDER, "amount_cents": self.amount, "reason": "broken"},
        }
        return LlmResponse("tool_use", [use], Usage(10, 5))


def retry_later(w: Scenario, order_id: int, stream: str, times: int = 3) -> LedgerRow:
    """What the payment sweep of the next issue does: ask again with the row's attempt key, while unsettled."""
    settler = build_settler(w.h.settings, w.h.ddb, w.payments)
    row = w.settler_row(order_id)
    for i in range(times):
        if row.settled:
            break
        row = settler.settle(row, actor="system:test-retry").row
        w.check(f"retry {i + 1}", stream)
    return row


@pytest.mark.parametrize("crash", CRASHES)
@pytest.mark.parametrize("inject", INJECTIONS, ids=[i.name for i in INJECTIONS])
def test_direct_refund_crash_and_fault_then_repair_refunds_once(
    fresh: Harness, monkeypatch: pytest.MonkeyPatch, inject: Inject, crash: str
) -> None:
    w = make_world(fresh, inject)
    h = w.h
    h.agent.llm = RefundOnce()
    cid = h.turn("hello").conversation_id
    with monkeypatch.context() as m:
        if crash in ("before_call", "after_call"):
            w.payments.crash = crash
        if crash == "after_record":
            m.setattr(RefundLedger, "record", _dying(RefundLedger.record))
        if crash != "none":  # a dead process runs no `finally`: its lease is left to expire
            m.setattr(h.conversations, "release_lease", lambda *_a, **_k: None)
        try:
            h.turn("please refund order 1043", cid)
            assert crash == "none", "the process was to die in this turn"
            status = "answered"
        except Died:
            assert crash != "none"
            status = "died"
    w.check(f"the turn ({status})", cid)
    h.clock.advance(h.settings.lease_seconds + 1)
    h.turn("did it work?", cid)  # the repair answers the open call: asks the provider again if unsettled
    w.check("the next turn", cid)
    row = retry_later(w, DIRECT_ORDER, cid)
    assert row.status == inject.final, (row, w.steps)
    refunds = w.stripe.refunds("pi_demo_1043")
    if inject.final == "SETTLING" and not inject.pending:
        # Outcome unknown: Stripe replays the saved 500 for 24 hours. Once it forgot the key, the same
        # attempt key asked again makes the refund, once.
        assert refunds == [] and row.refund_id == ""
        w.stripe.clock.advance(24 * 3600 + 1)
        row = retry_later(w, DIRECT_ORDER, cid, times=1)
        assert row.status == "SUCCEEDED", row
        refunds = w.stripe.refunds("pi_demo_1043")
    if row.status == "SUCCEEDED":
        assert [(r["id"], r["amount"], r["status"]) for r in refunds] == [(row.refund_id, DIRECT_AMOUNT, "succeeded")]
        assert refunds[0]["metadata"]["refund_key"] == row.refund_key and refunds[0]["metadata"]["attempt"] == "1"
        assert h.order(DIRECT_ORDER).refunded_cents == DIRECT_AMOUNT
    elif row.status == "SETTLING":  # pending at Stripe
        assert [(r["id"], r["status"]) for r in refunds] == [(row.refund_id, "pending")]
        assert h.order(DIRECT_ORDER).reserved_cents == DIRECT_AMOUNT
    else:
        assert live(refunds) == [] and row.failure_code == "resource_missing"
        assert h.order(DIRECT_ORDER).available_cents == 2500  # the reservation released
    tally(w, direct_scenarios=1, crashes=int(crash != "none"))


def _died_refunding_part(w: Scenario, monkeypatch: pytest.MonkeyPatch, crash: str) -> str:
    """Customer 7 asks for part of order 1043 (1000 of 2500: Stripe would take a second refund) and the process dies
    at ``crash``, its lease left to expire: the conversation's id."""
    h = w.h
    h.agent.llm = RefundOnce(amount=1000)
    cid = h.turn("hello").conversation_id
    w.payments.crash = crash
    with monkeypatch.context() as m:
        m.setattr(h.conversations, "release_lease", lambda *_a, **_k: None)
        with pytest.raises(Died):
            h.turn("please refund order 1043", cid)
    return cid


def test_a_repair_days_later_looks_the_refund_up_before_asking_again(
    fresh: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refund was made, the process died before recording it, and the customer comes back after Stripe
    forgot the attempt key (24 h): asking again with the key would make a second refund. The repair finds
    the refund by its refund key first."""
    w = make_world(fresh, INJECTIONS[0])
    h = w.h
    cid = _died_refunding_part(w, monkeypatch, "after_call")
    assert len(w.stripe.refunds()) == 1
    later = datetime.now(UTC) + timedelta(days=2)
    w.stripe.clock.advance(2 * 24 * 3600)
    h.clock.advance(2 * 24 * 3600)
    monkeypatch.setattr(wiring, "utc_now", lambda: later.isoformat(timespec="milliseconds").replace("+00:00", "Z"))
    h.agent.tools = build_registry(h.settings, h.ddb, h.sqs, w.payments)
    h.turn("did it work?", cid)
    w.check("the repair two days later", cid)
    row = w.settler_row(DIRECT_ORDER)
    assert row.status == "SUCCEEDED" and len(w.stripe.refunds()) == 1, w.stripe.refunds()
    tally(w, direct_scenarios=1, crashes=1)


# -- 2. approved refunds: RefundFlow's refund step -----------------------------------------------------------


def approval_world(h: Harness, inject: Inject) -> tuple[Scenario, RefundStep, ApprovalStore, str]:
    """An approval raised by request_refund (the amount reserved) and approved by a lead."""
    w = make_world(h, inject)
    h, s = w.h, w.h.settings
    ctx = ToolContext(
        Principal("customer-7", "customer", CUSTOMER), CUSTOMER, "conv_pay1", 1, "toolu_a1", "r", utc_now()
    )
    out = h.agent.tools.execute(
        "request_refund", {"order_id": APPROVED_ORDER, "amount_cents": APPROVED_AMOUNT, "reason": "late"}, ctx
    )
    assert out.result["status"] == "PENDING_APPROVAL", out.result
    approvals = ApprovalStore(h.ddb, s.approvals_table, s.customer_data_table, s.audit_table)
    approval_id = out.result["approval_id"]
    approvals.approve(approval_id, "lead-1", utc_now())
    step = RefundStep(approvals, build_settler(s, h.ddb, w.payments), "stripe", utc_now)
    return w, step, approvals, approval_id


def execution(step: RefundStep, approval_id: str, name: str, retries: int = 3) -> dict[str, Any] | None:
    """One execution's refund step under Step Functions' Retry on PaymentOutcomeUnknown; None when the
    retries ran out (the execution ends with the approval SETTLING)."""
    for _ in range(retries + 1):
        try:
            return step.run(approval_id, name)
        except PaymentOutcomeUnknown:
            continue
        except ApprovalNotApproved:  # FAILED (or released): the execution fails, nothing was changed
            return None
    return None


def check_approval(w: Scenario, approvals: ApprovalStore, approval_id: str, step_name: str) -> Approval:
    w.check(step_name, f"approval#{approval_id}")
    approval = approvals.get(approval_id)
    assert approval is not None
    row = w.row(APPROVED_ORDER)
    expected = {"SUCCEEDED": "REFUNDED", "FAILED": "FAILED"}.get(row["status"], "SETTLING")
    assert approval.status == expected, (step_name, approval.status, row["status"])
    order = w.h.order(APPROVED_ORDER)
    held = APPROVED_AMOUNT if approval.status != "REFUNDED" else 0
    assert order.reserved_cents == held, (step_name, order)
    return approval


@pytest.mark.parametrize("crash", ["none", "after_begin", "before_call", "after_call", "after_record"])
@pytest.mark.parametrize("inject", INJECTIONS, ids=[i.name for i in INJECTIONS])
def test_refund_step_crash_and_fault_then_rerun_refunds_once(
    fresh: Harness, monkeypatch: pytest.MonkeyPatch, inject: Inject, crash: str
) -> None:
    w, step, approvals, approval_id = approval_world(fresh, inject)
    with monkeypatch.context() as m:
        if crash in ("before_call", "after_call"):
            w.payments.crash = crash
        elif crash == "after_record":
            m.setattr(RefundLedger, "record", _dying(RefundLedger.record))
        elif crash == "after_begin":
            m.setattr(RefundLedger, "begin_approved", _dying(RefundLedger.begin_approved))
        try:
            execution(step, approval_id, approval_id)
            assert crash == "none"
        except Died:
            assert crash != "none"
    check_approval(w, approvals, approval_id, "the first execution")
    # Step Functions retries the task (a Lambda that died is a Lambda.Unknown / timeout error), or the
    # execution is replayed under another name: either way the step runs again.
    for n in range(1, 3):
        execution(step, approval_id, f"{approval_id}-x{n}")
        approval = check_approval(w, approvals, approval_id, f"replay {n}")
    row = w.settler_row(APPROVED_ORDER)
    assert row.status == inject.final and row.attempt == 1, row
    refunds = w.stripe.refunds("pi_demo_1042")
    if inject.final == "SETTLING" and not inject.pending:
        assert refunds == [] and approval.status == "SETTLING"  # never FAILED on an unknown outcome
    elif row.status == "SUCCEEDED":
        assert [(r["id"], r["amount"]) for r in refunds] == [(row.refund_id, APPROVED_AMOUNT)]
        assert approval.refund_id == row.refund_id and refunds[0]["metadata"]["approval_id"] == approval_id
    elif row.status == "FAILED":
        assert live(refunds) == [] and approval.failure_error == "resource_missing"
    audit = [r["action"] for r in w.world.audit_rows(f"refund#{approval_id}")]  # the refund key's stream
    assert audit.count("refund_started") == 1, audit
    tally(w, approved_scenarios=1, crashes=int(crash != "none"), replayed_executions=2)


@pytest.mark.parametrize(
    "inject",
    [Inject("none"), Inject("first_request_slow", ((POST, Fault.SLOW, 1),))],
    ids=["none", "first_request_slow"],
)
def test_ten_concurrent_executions_of_one_approval_make_one_refund(
    fresh: Harness, atomic_moto: None, inject: Inject
) -> None:
    w, step, approvals, approval_id = approval_world(fresh, Inject("none"))
    if inject.plan:  # the first request held while the others arrive: they meet 409 key-in-use
        w.transport.stripe.inject(POST, Fault.SLOW, hold_seconds=0.3)
    outcomes: list[str] = []
    lock = threading.Lock()

    def run(n: int) -> None:
        try:
            out = step.run(approval_id, f"{approval_id}-c{n}")
            status = str(out["status"])
        except PaymentOutcomeUnknown:
            status = "unknown"
        with lock:
            outcomes.append(status)

    run_together([lambda n=n: run(n) for n in range(10)])
    assert len(outcomes) == 10 and "FAILED" not in outcomes, outcomes
    check_approval(w, approvals, approval_id, "ten at once")
    execution(step, approval_id, f"{approval_id}-after")  # a Step Functions retry of the unknown ones
    approval = check_approval(w, approvals, approval_id, "then retried")
    assert approval.status == "REFUNDED"
    assert len(w.stripe.refunds()) == 1
    conflicts = sum(1 for r in w.stripe.requests if r.status == 409)
    tally(w, concurrent_executions=10, key_in_use_409=conflicts)


def test_failed_only_after_a_definitive_refusal_then_a_lead_retry_uses_attempt_two(fresh: Harness) -> None:
    inject = Inject("refused_no_such_intent", known_intent=False, final="FAILED")
    w, step, approvals, approval_id = approval_world(fresh, inject)
    assert execution(step, approval_id, approval_id) is not None
    approval = check_approval(w, approvals, approval_id, "refused")
    assert approval.status == "FAILED" and w.stripe.refunds() == []
    # The lead retries once the payment is at this account (say, a migration finished).
    w.stripe.add_payment_intent(f"pi_elsewhere_{APPROVED_ORDER}", 18900)
    approvals.mark_retry(approval_id, "lead-1", utc_now())
    for name in (f"{approval_id}-r1", f"{approval_id}-r1", f"{approval_id}-r1-x"):  # and replayed
        execution(step, approval_id, name)
        approval = check_approval(w, approvals, approval_id, name)
    row = w.settler_row(APPROVED_ORDER)
    assert (row.status, row.attempt, approval.status) == ("SUCCEEDED", 2, "REFUNDED")
    refunds = w.stripe.refunds()
    assert len(refunds) == 1 and refunds[0]["metadata"]["attempt"] == "2"
    posts = [r for r in w.stripe.requests if r.method == "POST"]
    assert {r.headers["idempotency-key"] for r in posts} == {f"{approval_id}#1", f"{approval_id}#2"}
    tally(w, approved_scenarios=1, lead_retries=1)


# -- 3. a resend of attempt n racing the payment sweep (second review, finding 1) ------------------------------


OLD_ATTEMPT = 1_000  # seconds: past the sweep's grace and PAYMENT_NEW_ATTEMPT_AFTER_SECONDS (900)


class SweepPayments(Payments):
    """The payment sweep's provider, counted apart: its look-ups (`find`, `retrieve`) are reads it audits only
    through what it records, so only its refund calls must each leave a ``payment_refund`` row."""

    def find(self, refund_key: str, payment_intent: str, *, deadline: Deadline | None = None) -> ProviderRefund | None:
        self._lookup_follows = False
        return self.provider.find(refund_key, payment_intent, deadline=deadline)


def sweeper_for(w: Scenario) -> PaymentSweeper:
    """The payment sweep as PaymentSweepFunction builds it, on the real clock, with a provider of its own."""
    s = w.h.settings
    payments = SweepPayments(provider_for(w.transport))
    w.others.append(payments)
    settler = build_settler(s, w.h.ddb, payments)
    return PaymentSweeper(
        settler.ledger,
        settler,
        payments,
        grace_seconds=s.payment_sweep_grace_seconds,
        new_attempt_after_seconds=max(600, s.payment_new_attempt_after_seconds),
        limit=10,
    )


@pytest.mark.parametrize("first", ["racer", "sweep"])
@pytest.mark.parametrize("slow", [0.0, 1.0], ids=["provider_fast", "provider_slow"])
@pytest.mark.parametrize("racer", ["repair", "resend"])
def test_a_resend_of_an_old_attempt_racing_the_payment_sweep_refunds_once(
    fresh: Harness, monkeypatch: pytest.MonkeyPatch, atomic_moto: None, racer: str, slow: float, first: str
) -> None:
    """A partial direct refund (1000 of 2500) whose turn died before the provider call, 1000 s ago. Then the
    customer's next turn repairs it (``repair``), or RefundFlow/an MCP client sends its key again (``resend``,
    the settler on the row), while the payment sweep runs; the provider answers at once or after ``slow`` s.
    Whoever starts first, the second starts once the first's request reached the provider. One refund, and
    the ledger equals the provider after every step."""
    w = make_world(fresh, INJECTIONS[0])
    h = w.h
    cid = _died_refunding_part(w, monkeypatch, "before_call")
    row = w.settler_row(DIRECT_ORDER)
    long_ago = (datetime.now(UTC) - timedelta(seconds=OLD_ATTEMPT)).isoformat(timespec="milliseconds")
    h.ddb.update_item(  # the crash happened long ago: attempt 1 began then, and nothing was sent since
        TableName=h.settings.customer_data_table,
        Key=to_item({"customer_id": CUSTOMER, "sk": row.sk}),
        UpdateExpression="SET attempt_started_at = :t, created_at = :t",
        ExpressionAttributeValues=to_values({":t": long_ago.replace("+00:00", "Z")}),
    )
    w.check("the turn died before the call", cid)
    h.clock.advance(h.settings.lease_seconds + 1)
    if slow:
        w.stripe.inject(POST, Fault.SLOW, 1, hold_seconds=slow)

    def run_racer() -> None:
        if racer == "repair":
            h.turn("did it work?", cid)
        else:
            build_settler(h.settings, h.ddb, w.payments).settle(w.settler_row(DIRECT_ORDER), actor="refund-flow")

    errors: list[BaseException] = []

    def guarded(target: Any) -> Any:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the test, not lost in the thread
                errors.append(exc)

        return run

    sweep_result: list[Any] = []
    actors = {"racer": run_racer, "sweep": lambda: sweep_result.append(sweeper_for(w).run())}
    second = "sweep" if first == "racer" else "racer"
    requests_before = len(w.stripe.requests)
    t1 = threading.Thread(target=guarded(actors[first]))
    t1.start()
    until = datetime.now(UTC) + timedelta(seconds=10)
    while (w.stripe.faults.pending(POST) if slow else t1.is_alive()) and datetime.now(UTC) < until:
        threading.Event().wait(0.01)  # the first one's request is at the provider (or it is done)
    t2 = threading.Thread(target=guarded(actors[second]))
    t2.start()
    t1.join(30)
    t2.join(30)
    assert not errors, errors
    w.check(f"{first} first, then the {second}", cid)
    for i in range(3):  # whatever is left unknown settles by asking again: still one refund
        settled = retry_later(w, DIRECT_ORDER, cid, times=1)
        w.check(f"asked again {i + 1}", cid)
    assert settled.status == "SUCCEEDED", settled
    refunds = w.stripe.refunds("pi_demo_1043")
    assert [(r["amount"], r["status"]) for r in refunds] == [(1000, "succeeded")], refunds
    assert h.order(DIRECT_ORDER).refunded_cents == 1000
    assert len(w.stripe.requests) > requests_before
    tally(w, sweep_races=1, sweep_new_attempts=sum(r.new_attempts for r in sweep_result))
