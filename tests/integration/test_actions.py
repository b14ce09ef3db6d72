"""Declared actions on the deployed template: cancel_order and update_shipping_address proposed by the model,
decided only by the customer's own Confirm or Decline (actions/proposals.py), under a policy the test controls.

The chat handler runs as API Gateway calls it (tests/integration/conftest.py) with a scripted model; every refund
goes to one simulated Stripe in this process (tests/support/stripe.py), which counts what it refunded. The
proposals are confirmed through the desk the chat function's composition root built (`wiring.chat_services()`),
in the handler's process, as the confirm route does.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from devstack.simulated_stripe import TEST_KEY, Fault
from devstack.stack import Stack
from support_agent import wiring
from support_agent.actions.proposals import ProposalExpired, ProposalNotFound
from support_agent.auth import Principal
from support_agent.clock import iso, parse_iso, utc_now
from support_agent.policy.model import ActionRule, AppliedPolicy, default_policy
from support_agent.refunds.decide import RefundDesk
from support_agent.store.dynamo import from_item, to_item, to_values
from support_agent.store.proposals import ProposalStore
from tests.integration.conftest import Api, deployed_stack
from tests.support.scripted import ScriptedModel, answer, reply, text, tool_use, tools
from tests.support.stripe import BASE, POST, InProcessStripe, duplicates
from tests.support.transport import scripted_transport

DANA = Principal("customer-7", "customer", 7)
SAM = Principal("customer-8", "customer", 8)
_orders = itertools.count(77_001)
NEW_ADDRESS = {"name": "Dana W", "line1": "7 Birch Lane", "city": "Seattle", "postal_code": "98101", "country": "US"}
OLD_ADDRESS = {
    "name": "Dana Whitfield",
    "line1": "41 Alder Street",
    "city": "Portland",
    "postal_code": "97205",
    "country": "US",
}


@dataclass
class PolicyDial:
    """A PolicyReader the test turns: the policy in force, and its version."""

    applied: AppliedPolicy = field(default_factory=lambda: AppliedPolicy(0, default_policy(5000)))

    def current(self) -> AppliedPolicy:
        return self.applied

    def publish(self, version: int, **rules: ActionRule) -> None:
        base = default_policy(5000)
        actions = base.actions.model_copy(update=rules)
        self.applied = AppliedPolicy(version, base.model_copy(update={"actions": actions}))


@dataclass
class StripeApi(Api):
    """The `Api` of conftest, whose every function's payments go to the in-process simulated Stripe."""

    payments: Any = None

    def use_function(self, function: str) -> None:
        if function == self.current:
            return
        super().use_function(function)
        wiring.reset(llm_transport=self.transport, payments_transport=self.payments)


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[Stack, InProcessStripe]]:
    transport = InProcessStripe()
    params = {"PaymentProvider": "stripe", "StripeApiBase": BASE, "Transparency": "verbose", "TurnsPerMinute": "1000"}
    with deployed_stack(params) as stack:
        yield stack, transport
    wiring.reset()


@dataclass
class Shop:
    api: StripeApi
    stripe: InProcessStripe
    policy: PolicyDial

    @property
    def env(self) -> dict[str, str]:
        return self.api.stack.function_env("ChatFunction")

    @property
    def ddb(self) -> Any:
        return boto3.client("dynamodb")

    def order(self, status: str = "PROCESSING", total: int = 3000, **fields: Any) -> int:
        order_id = next(_orders)
        intent = f"pi_act_{order_id}"
        put_order(
            self.ddb,
            self.env["CUSTOMER_DATA_TABLE"],
            7,
            order_id,
            total,
            status=status,
            payment_intent=intent,
            shipping_address=OLD_ADDRESS,
            **fields,
        )
        self.stripe.stripe.add_payment_intent(intent, total, "usd")
        return order_id

    def get_order(self, order_id: int, customer_id: int = 7) -> dict[str, Any]:
        key = to_item({"customer_id": customer_id, "sk": f"ORDER#{order_id}"})
        return from_item(
            self.ddb.get_item(TableName=self.env["CUSTOMER_DATA_TABLE"], Key=key, ConsistentRead=True)["Item"]
        )

    def money(self, order_id: int) -> tuple[int, int, int]:
        o = self.get_order(order_id)
        parts = (o["available_cents"], o["reserved_cents"], o["refunded_cents"])
        assert sum(parts) == o["total_cents"] and min(parts) >= 0, o
        return parts

    def refunds(self, order_id: int) -> list[dict[str, Any]]:
        return self.stripe.stripe.refunds(f"pi_act_{order_id}")

    def propose(self, name: str, args: dict[str, Any], cid: str | None = None) -> tuple[str, dict[str, Any]]:
        """A turn in which the model calls ``name`` once: the conversation and the call as the trace shows it."""
        self.api.model.script = [tools(tool_use(name, args)), answer("Please confirm with the button.")]
        status, body, _ = self.api.call("POST", "/api/chat", {"conversationId": cid, "message": "please"})
        assert status == 200, body
        (call,) = [c for it in body["trace"] for c in it["toolCalls"]]
        return body["conversationId"], call

    def desk(self) -> Any:
        self.api.use_function("ChatFunction")
        return wiring.chat_services().proposals

    def confirm(self, cid: str, pid: str, who: Principal = DANA, now: str | None = None) -> Any:
        return self.desk().confirm(who, cid, pid, now or utc_now())

    def decline(self, cid: str, pid: str, who: Principal = DANA, now: str | None = None) -> Any:
        return self.desk().decline(who, cid, pid, now or utc_now())

    def rows(self, stream: str) -> list[dict[str, Any]]:
        out = self.ddb.query(
            TableName=self.env["AUDIT_TABLE"],
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "stream"},
            ExpressionAttributeValues=to_values({":s": stream}),
            ConsistentRead=True,
        )
        return [from_item(i) for i in out["Items"]]

    def notes(self, cid: str) -> list[dict[str, Any]]:
        out = self.ddb.query(
            TableName=self.env["CONVERSATIONS_TABLE"],
            KeyConditionExpression="conversation_id = :c AND seq > :z",
            ExpressionAttributeValues=to_values({":c": f"note#{cid}", ":z": 0}),
            ConsistentRead=True,
        )
        return [from_item(i) for i in out["Items"]]

    def customer_rows(self, prefix: str, customer_id: int = 7) -> list[dict[str, Any]]:
        out = self.ddb.query(
            TableName=self.env["CUSTOMER_DATA_TABLE"],
            KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_values({":c": customer_id, ":p": prefix}),
            ConsistentRead=True,
        )
        return [from_item(i) for i in out["Items"]]


@pytest.fixture
def shop(world: tuple[Stack, InProcessStripe], monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    stack, transport = world
    dial = PolicyDial()
    monkeypatch.setattr(wiring, "build_policy_reader", lambda _settings: dial)
    saved = dict(os.environ)
    model = ScriptedModel()
    api = StripeApi(stack, model, transport=scripted_transport(model), payments=transport)
    api.overrides = {"STRIPE_API_KEY": TEST_KEY, "STRIPE_MAX_RETRIES": "1"}
    api.use_function("ChatFunction")
    yield Shop(api, transport, dial)
    transport.stripe.faults.clear()
    os.environ.clear()
    os.environ.update(saved)
    wiring.reset()


# -- cancel_order ------------------------------------------------------------------------------------------------


def test_cancel_before_shipment_is_proposed_then_confirmed_once(shop: Shop) -> None:
    order_id = shop.order(total=3000)
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "changed my mind"})
    result = call["result"]
    assert not call["isError"] and result["status"] == "PROPOSED" and result["policy_version"] == 0
    assert result["summary"] == f"Cancel order {order_id} and refund 30.00 USD to the original payment."
    pid = result["proposal_id"]
    # Proposed: nothing happened yet.
    assert shop.get_order(order_id)["status"] == "PROCESSING" and shop.refunds(order_id) == []

    done = shop.confirm(cid, pid)
    assert (done.status, done.decided_policy_version) == ("CONFIRMED", 0)
    assert done.outcome["status"] == "CANCELLED" and done.outcome["refund"]["status"] == "REFUNDED"
    assert done.after_seq is not None and done.after_seq >= 3
    order = shop.get_order(order_id)
    assert (order["status"], order["cancelled_by"]) == ("CANCELLED", pid)
    assert shop.money(order_id) == (0, 0, 3000)
    assert [(r["amount"], r["status"]) for r in shop.refunds(order_id)] == [(3000, "succeeded")]

    # A second confirm answers the first outcome; a decline after it, too. Still one refund.
    again = shop.confirm(cid, pid)
    assert (again.status, again.outcome) == ("CONFIRMED", done.outcome)
    assert shop.decline(cid, pid).outcome == done.outcome
    assert len(shop.refunds(order_id)) == 1 and not duplicates(shop.stripe.stripe)

    # Every row names the policy version: the tool call's, the proposal's, the refund's ledger row.
    (tool_row,) = [r for r in shop.rows(cid) if r["action"] == "tool_call"]
    assert (tool_row["policy_version"], tool_row["proposal_id"]) == (0, pid)
    proposal_rows = shop.rows(f"proposal#{pid}")
    assert [r["action"] for r in sorted(proposal_rows, key=lambda r: r["n"])] == [
        "proposal_created",
        "proposal_confirmed",
        "order_cancelled",
        "proposal_completed",
    ]
    assert all(r["policy_version"] == 0 for r in proposal_rows)
    (ledger,) = [r for r in shop.customer_rows(f"REFUND#{cid}#") if r.get("kind") == "direct"]
    assert (ledger["policy_version"], ledger["amount_cents"], ledger["status"]) == (0, 3000, "SUCCEEDED")
    # The feed heard of it.
    kinds = [n["type"] for n in sorted(shop.notes(cid), key=lambda n: n["seq"])]
    assert kinds == ["proposal.created", "proposal.confirmed"]
    # The next turn tells the model what the customer decided: a note from the system in the customer's message.
    shop.api.model.script = [answer("Your order is cancelled and refunded.")]
    status, _, _ = shop.api.call("POST", "/api/chat", {"conversationId": cid, "message": "thanks"})
    assert status == 200
    last = shop.api.model.requests[-1].messages[-1]
    texts = [b["text"] for b in last["content"] if b.get("type") == "text"]
    assert last["role"] == "user" and texts[-1] == "thanks", last
    (note,) = [t for t in texts if t.startswith("(note from the system, not the customer:")]
    assert f"the customer CONFIRMED proposal {pid}" in note and '"status":"CANCELLED"' in note, note


def test_cancel_refunds_only_what_was_not_refunded_yet(shop: Shop) -> None:
    order_id = shop.order(total=4000, available_cents=2500, refunded_cents=1500)
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "late"})
    done = shop.confirm(cid, call["result"]["proposal_id"])
    assert done.outcome["refund"]["amount_cents"] == 2500
    assert shop.money(order_id) == (0, 0, 4000)
    assert [r["amount"] for r in shop.refunds(order_id)] == [2500]


def test_cancel_after_shipment_is_an_error_that_says_why(shop: Shop) -> None:
    for status in ("SHIPPED", "DELIVERED", "CANCELLED"):
        order_id = shop.order(status=status)
        cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
        assert call["isError"] and call["result"]["error"] == (
            f"order {order_id} is {status}; only processing orders can be cancelled"
        )
        assert shop.customer_rows(f"PROPOSAL#{cid}#") == []
        assert shop.get_order(order_id)["status"] == status and shop.refunds(order_id) == []


def test_a_saved_provider_500_then_the_sweep_makes_one_refund(shop: Shop) -> None:
    from support_agent.refunds import PaymentSweeper

    order_id = shop.order(total=2000)
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    shop.stripe.stripe.inject(POST, Fault.ERROR_AFTER, 1)  # the refund is made, the answer a saved 500
    pid = call["result"]["proposal_id"]
    done = shop.confirm(cid, pid)
    # Its retry got the saved 500 again: the look-up by refund key found the refund made (or the sweep will).
    assert done.outcome["status"] == "CANCELLED"
    assert done.outcome["refund"]["status"] in ("REFUNDED", "REFUND_IN_PROGRESS")
    assert len(shop.refunds(order_id)) == 1
    assert shop.confirm(cid, pid).outcome == done.outcome and len(shop.refunds(order_id)) == 1
    # The payment sweep asks about the unsettled row by its refund key: the one refund, recorded.
    settler = wiring.build_settler(wiring.chat_services().settings, boto3.client("dynamodb"), wiring.payments())
    sweeper = PaymentSweeper(
        settler.ledger, settler, wiring.payments(), grace_seconds=0, new_attempt_after_seconds=600, limit=50
    )
    sweeper.run()
    assert shop.money(order_id) == (0, 0, 2000)
    assert len(shop.refunds(order_id)) == 1 and not duplicates(shop.stripe.stripe)


@pytest.mark.parametrize("step", ["refund", "end"])
def test_a_crash_between_the_steps_resumes_with_one_refund(
    shop: Shop, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    order_id = shop.order(total=2200)
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    pid = call["result"]["proposal_id"]

    class Crash(Exception):
        pass

    if step == "refund":  # the order is cancelled, then the process dies before the refund is asked
        original = RefundDesk.request

        def dies(self: RefundDesk, *args: Any, **kwargs: Any) -> Any:
            raise Crash

    else:  # the refund is made, then the process dies before the proposal's end is written
        original = ProposalStore.move

        def dies(self: ProposalStore, proposal: Any, sets: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if sets.get("status") == "CONFIRMED":
                raise Crash
            return original(self, proposal, sets, *args, **kwargs)

    target = RefundDesk if step == "refund" else ProposalStore
    attribute = "request" if step == "refund" else "move"
    monkeypatch.setattr(target, attribute, dies)
    with pytest.raises(Crash):
        shop.confirm(cid, pid)
    assert shop.get_order(order_id)["status"] == "CANCELLED"
    assert len(shop.refunds(order_id)) == (0 if step == "refund" else 1)
    monkeypatch.setattr(target, attribute, original)

    done = shop.confirm(cid, pid)
    assert done.status == "CONFIRMED" and done.outcome["refund"]["status"] == "REFUNDED"
    assert shop.money(order_id) == (0, 0, 2200)
    assert len(shop.refunds(order_id)) == 1 and not duplicates(shop.stripe.stripe)


def test_a_cancel_over_the_threshold_waits_for_a_lead_and_a_rejection_opens_a_hand_off(shop: Shop) -> None:
    order_id = shop.order(total=9000)
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    done = shop.confirm(cid, call["result"]["proposal_id"])
    refund = done.outcome["refund"]
    assert refund["status"] == "PENDING_APPROVAL"
    assert shop.get_order(order_id)["status"] == "CANCELLED" and shop.money(order_id) == (0, 9000, 0)
    approvals_table = shop.env["APPROVALS_TABLE"]
    key = to_item({"approval_id": refund["approval_id"]})
    approval = from_item(shop.ddb.get_item(TableName=approvals_table, Key=key, ConsistentRead=True)["Item"])
    assert (approval["action"], approval["policy_version"]) == ("cancel_order", 0)

    shop.api.use_function("ApprovalsFunction")
    wiring.lead_services().decisions.reject(refund["approval_id"], "lead-1", "not this one")
    wiring.lead_services().decisions.reject(refund["approval_id"], "lead-1", "again")  # once is enough
    assert shop.get_order(order_id)["status"] == "CANCELLED" and shop.money(order_id) == (9000, 0, 0)
    assert shop.refunds(order_id) == []
    header = from_item(
        shop.ddb.get_item(
            TableName=shop.env["CONVERSATIONS_TABLE"],
            Key=to_item({"conversation_id": cid, "seq": 0}),
            ConsistentRead=True,
        )["Item"]
    )
    assert header.get("open_handoff_id", "").startswith("hof_")
    tickets = [
        from_item(i)
        for i in shop.ddb.scan(TableName=approvals_table)["Items"]
        if i.get("entity", {}).get("S") == "HANDOFF" and i.get("conversation_id", {}).get("S") == cid
    ]
    assert len(tickets) == 1 and str(order_id) in tickets[0]["reason"]


# -- update_shipping_address ---------------------------------------------------------------------------------------


def test_address_change_before_shipment(shop: Shop) -> None:
    order_id = shop.order()
    cid, call = shop.propose("update_shipping_address", {"order_id": order_id, "address": NEW_ADDRESS})
    result = call["result"]
    assert result["status"] == "PROPOSED" and "7 Birch Lane" in result["summary"]
    assert shop.get_order(order_id)["shipping_address"] == OLD_ADDRESS
    done = shop.confirm(cid, result["proposal_id"])
    assert done.outcome["status"] == "ADDRESS_UPDATED"
    assert "Birch" not in str(done.outcome) and "Alder" not in str(done.outcome)  # the customer's view: neither
    assert shop.get_order(order_id)["shipping_address"] == NEW_ADDRESS
    (end,) = [r for r in shop.rows(f"proposal#{result['proposal_id']}") if r["action"] == "proposal_completed"]
    assert '"old_address"' in end["input"] and "Alder" in end["input"] and "Birch" in end["input"]
    assert shop.confirm(cid, result["proposal_id"]).outcome == done.outcome


def test_address_change_after_shipment_or_abroad_is_refused(shop: Shop) -> None:
    shipped = shop.order(status="SHIPPED")
    _, call = shop.propose("update_shipping_address", {"order_id": shipped, "address": NEW_ADDRESS})
    assert call["isError"] and "only the address of processing orders can be changed" in call["result"]["error"]
    order_id = shop.order()
    _, call = shop.propose(
        "update_shipping_address", {"order_id": order_id, "address": {**NEW_ADDRESS, "country": "JP"}}
    )
    assert call["isError"] and call["result"]["error"].startswith("we do not ship to JP")
    # Shipped between the proposal and the confirmation: refused, the address unchanged.
    cid, call = shop.propose("update_shipping_address", {"order_id": order_id, "address": NEW_ADDRESS})
    shop.ddb.update_item(
        TableName=shop.env["CUSTOMER_DATA_TABLE"],
        Key=to_item({"customer_id": 7, "sk": f"ORDER#{order_id}"}),
        UpdateExpression="SET #st = :s",
        ExpressionAttributeNames={"#st": "status"},
        ExpressionAttributeValues=to_values({":s": "SHIPPED"}),
    )
    done = shop.confirm(cid, call["result"]["proposal_id"])
    assert done.status == "CONFIRMED" and done.outcome["status"] == "REFUSED"
    assert "SHIPPED" in done.outcome["error"] and shop.get_order(order_id)["shipping_address"] == OLD_ADDRESS


# -- who decides, and when --------------------------------------------------------------------------------------


def test_another_customer_or_conversation_finds_no_proposal(shop: Shop) -> None:
    order_id = shop.order()
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    pid = call["result"]["proposal_id"]
    other_cid, _ = shop.propose("lookup_order", {"order_id": order_id})
    for who, conversation in ((SAM, cid), (DANA, other_cid), (Principal("lead-1", "support_lead"), cid)):
        with pytest.raises(ProposalNotFound):
            shop.confirm(conversation, pid, who)
        with pytest.raises(ProposalNotFound):
            shop.decline(conversation, pid, who)
    with pytest.raises(ProposalNotFound):
        shop.confirm(cid, "prp_" + "0" * 32)
    assert shop.get_order(order_id)["status"] == "PROCESSING"


def test_an_expired_proposal_cannot_be_confirmed(shop: Shop) -> None:
    order_id = shop.order()
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    result = call["result"]
    created = parse_iso(result["expires_at"]) - timedelta(seconds=900)  # the policy's TTL
    late = iso(parse_iso(result["expires_at"]) + timedelta(seconds=1))
    assert shop.desk().list(7, cid)[0].created_at == iso(created)
    for _ in range(2):
        with pytest.raises(ProposalExpired):
            shop.confirm(cid, result["proposal_id"], now=late)
    with pytest.raises(ProposalExpired):
        shop.decline(cid, result["proposal_id"], now=late)
    assert shop.get_order(order_id)["status"] == "PROCESSING" and shop.refunds(order_id) == []
    assert [n["type"] for n in shop.notes(cid)].count("proposal.expired") == 1


def test_a_proposal_left_past_its_expiry_is_expired_and_told_on_the_next_turn(shop: Shop) -> None:
    """Nobody pressed anything: the next turn ends it EXPIRED (written, in the feed) and the model is told."""
    order_id = shop.order()
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    pid = call["result"]["proposal_id"]
    shop.ddb.update_item(  # its time ran out
        TableName=shop.env["CUSTOMER_DATA_TABLE"],
        Key=to_item({"customer_id": 7, "sk": f"PROPOSAL#{cid}#{pid}"}),
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues=to_values({":past": "2020-01-01T00:00:00.000Z"}),
    )
    shop.api.model.script = [answer("That proposal expired; shall I propose it again?")]
    status, _, _ = shop.api.call("POST", "/api/chat", {"conversationId": cid, "message": "hello?"})
    assert status == 200
    assert [p.status for p in shop.desk().list(7, cid)] == ["EXPIRED"]
    assert [n["type"] for n in shop.notes(cid)].count("proposal.expired") == 1
    texts = [b.get("text", "") for b in shop.api.model.requests[-1].messages[-1]["content"]]
    assert any(f"proposal {pid}" in t and "EXPIRED" in t for t in texts), texts
    assert shop.get_order(order_id)["status"] == "PROCESSING" and shop.refunds(order_id) == []


def test_the_model_saying_confirmed_does_nothing(shop: Shop) -> None:
    order_id = shop.order()
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    # The model claims the customer confirmed, and calls the tool again: a new proposal, nothing executed.
    shop.api.model.script = [
        reply(
            "tool_use",
            text("The customer confirmed."),
            tool_use("cancel_order", {"order_id": order_id, "reason": "confirmed"}),
        ),
        answer("Confirmed! Your order is cancelled."),
    ]
    status, body, _ = shop.api.call("POST", "/api/chat", {"conversationId": cid, "message": "yes, I confirm"})
    assert status == 200 and body["reply"].startswith("Confirmed!")
    again = body["trace"][0]["toolCalls"][0]["result"]
    assert again["status"] == "PROPOSED" and again["proposal_id"] != call["result"]["proposal_id"]
    assert {p.status for p in shop.desk().list(7, cid)} == {"PROPOSED"}
    assert shop.get_order(order_id)["status"] == "PROCESSING" and shop.refunds(order_id) == []


def test_a_policy_change_between_proposal_and_confirmation_is_applied(shop: Shop) -> None:
    order_id = shop.order(total=2600)
    cid, call = shop.propose("cancel_order", {"order_id": order_id, "reason": "x"})
    assert call["result"]["policy_version"] == 0
    # Version 7 still allows it (with a lower threshold, for a lead): confirmed under 7, recorded as 7.
    shop.policy.publish(
        7, cancel_order=ActionRule(statuses=("PROCESSING",), needs_confirmation=True, approval_threshold_cents=1000)
    )
    done = shop.confirm(cid, call["result"]["proposal_id"])
    assert (done.policy_version, done.decided_policy_version, done.outcome["policy_version"]) == (0, 7, 7)
    assert done.outcome["refund"]["status"] == "PENDING_APPROVAL"  # 2600 > version 7's 1000
    # Version 8 no longer allows cancelling PROCESSING orders: a proposal made before is refused, nothing done.
    other = shop.order()
    cid2, call2 = shop.propose("cancel_order", {"order_id": other, "reason": "x"})
    assert call2["result"]["policy_version"] == 7
    shop.policy.publish(
        8, cancel_order=ActionRule(statuses=("SHIPPED",), needs_confirmation=True, approval_threshold_cents=1000)
    )
    refused = shop.confirm(cid2, call2["result"]["proposal_id"])
    assert refused.outcome == {
        "status": "REFUSED",
        "error": f"order {other} is PROCESSING; only shipped orders can be cancelled",
        "policy_version": 8,
    }
    assert refused.decided_policy_version == 8 and shop.get_order(other)["status"] == "PROCESSING"


def test_over_mcp_actions_that_need_confirmation_are_not_offered(shop: Shop) -> None:
    from support_agent.mcp.our_tools import call_tool, tool_definitions

    shop.api.use_function("McpFunction")
    services = wiring.mcp_services()
    names = [d["name"] for d in tool_definitions(services.registry, services.hidden())]
    assert names == ["lookup_order", "list_invoices", "request_refund", "escalate_to_human"]
    order_id = shop.order()
    outcome = call_tool(services, DANA, "cancel_order", {"order_id": order_id, "reason": "x"}, "k-1", "test")
    assert outcome.is_error and "confirmation" in outcome.result["error"]
    assert shop.get_order(order_id)["status"] == "PROCESSING"
    # A policy that asks no confirmation for it offers it (and a call then runs it at once).
    shop.policy.publish(
        2, cancel_order=ActionRule(statuses=("PROCESSING",), needs_confirmation=False, approval_threshold_cents=5000)
    )
    assert "cancel_order" in [d["name"] for d in tool_definitions(services.registry, services.hidden())]


def test_erasure_removes_what_a_proposal_would_have_changed(shop: Shop) -> None:
    """A customer's erasure blanks their proposals' input (an address) and summary (it quotes it): the status,
    the versions and the outcome stay, as the audit trail does (docs/RETENTION.md)."""
    order_id = next(_orders)
    put_order(shop.ddb, shop.env["CUSTOMER_DATA_TABLE"], 9, order_id, 1000, status="PROCESSING")
    riley = shop.api.token("customer-9", "customer", 9)
    shop.api.model.script = [
        tools(tool_use("update_shipping_address", {"order_id": order_id, "address": NEW_ADDRESS})),
        answer("Please confirm."),
    ]
    status, body, _ = shop.api.call("POST", "/api/chat", {"conversationId": None, "message": "move it"}, token=riley)
    assert status == 200, body
    cid = body["conversationId"]
    (proposal,) = ProposalStore(shop.ddb, shop.env["CUSTOMER_DATA_TABLE"], "", "").list(9, cid)
    assert "Birch" in proposal.summary and proposal.input["address"]["line1"] == "7 Birch Lane"

    status, erased, _ = shop.api.call("POST", "/api/customers/9/erase", {}, token=shop.api.lead())
    assert status == 200 and erased["complete"], erased
    (after,) = ProposalStore(shop.ddb, shop.env["CUSTOMER_DATA_TABLE"], "", "").list(9, cid)
    assert (after.input, after.summary, after.status) == ({}, "[erased]", "PROPOSED")
    status, view, _ = shop.api.call("GET", f"/api/conversations/{cid}", token=riley)
    assert status == 200 and "Birch" not in str(view), view
