"""``POST /webhooks/stripe`` on the deployed template: signed Stripe events applied once, never backwards.

Refunds are made the way the code makes them — a direct one through the refund tool, an approved one by
RefundFlow's writes (`begin_approved`, then `RefundSettler.settle`) — at the in-process simulated Stripe,
which sends its events (``refund.updated`` and ``charge.refund.updated``, plus ``refund.failed``) to the
route the template declares, through PaymentsWebhookFunction's handler with its deployed environment.
After every delivery the ledger is compared with the provider (tests/support/stripe.py `ledger_problems`:
``available + reserved + refunded = total``, ``refunded`` is what the provider refunded, no refund key with
two live refunds).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from devstack.simulated_stripe import TEST_KEY, Fault
from devstack.simulated_stripe.webhooks import sign
from support_agent.auth import Principal
from support_agent.clock import utc_now
from support_agent.config import load_settings
from support_agent.ids import new_approval_id, new_conversation_id
from support_agent.mcp.our_tools import McpServices, call_tool
from support_agent.refunds import keys as refund_keys
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.refunds.provider.port import RefundAttempt
from support_agent.refunds.reconcile import Reconciler
from support_agent.refunds.sweep import PaymentSweeper
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import from_item, to_item, to_values
from support_agent.tools.registry import ToolContext, ToolOutcome
from support_agent.wiring import build_registry, build_settler
from tests.integration.conftest import EVENTS, Api
from tests.support.approvals import put_pending_approval
from tests.support.stripe import POST, InProcessStripe, ledger_problems, provider_for

# A customer of its own per test (nothing else touches its orders): each test's simulated Stripe numbers its
# refunds from re_sim_00000001, and the dedupe items live under the customer.
_customers = itertools.count(76_000)
SECRET = "whsec_integration_test_0123456789"
ROUTE = "/webhooks/stripe"
_orders = itertools.count(76_001)


class World:
    """The deployed tables, a fresh simulated Stripe whose webhooks go to the route, and what was delivered."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.customer = next(_customers)
        api.overrides = {"STRIPE_WEBHOOK_SECRET": SECRET}
        self.env = api.stack.function_env("ChatFunction")
        cfg = load_settings({**self.env, "STRIPE_API_KEY": TEST_KEY})
        self.ddb = boto3.client("dynamodb")
        self.transport = InProcessStripe()
        self.stripe = self.transport.stripe
        payments = provider_for(self.transport)
        self.registry = build_registry(cfg, self.ddb, boto3.client("sqs"), payments)
        self.settler = build_settler(cfg, self.ddb, payments)
        self.ledger = self.settler.ledger
        self.approvals = ApprovalStore(
            self.ddb, self.env["APPROVALS_TABLE"], self.env["CUSTOMER_DATA_TABLE"], self.env["AUDIT_TABLE"]
        )
        self.audit = AuditStore(self.ddb, self.env["AUDIT_TABLE"])
        self.sender = self.stripe.webhooks
        self.sender.configure(self.post, SECRET, background=False)
        self.sender.max_attempts, self.sender.backoff_seconds = 1, 0.0
        self.answers: list[tuple[int, Any]] = []
        self.orders: list[int] = []
        self.checking = True  # off while running under the function's own role (the checks read as the test)

    # -- the route -------------------------------------------------------------------------------------------------

    def post(self, body: bytes, headers: dict[str, str]) -> int:
        """One delivery through the template's route; the money invariant is checked after it."""
        status, answer, _ = self.api.call(
            "POST", ROUTE, raw_body=body.decode(), token=None, headers={k.lower(): v for k, v in headers.items()}
        )
        self.answers.append((status, answer))
        if self.checking:
            self.check()
        return status

    def deliver(self) -> list[str]:
        """Send what the simulated Stripe queued; the outcomes, in order."""
        before = len(self.answers)
        self.sender.send_pending()
        return [a["outcome"] if s == 200 else str(s) for s, a in self.answers[before:]]

    # -- refunds made the way the code makes them ------------------------------------------------------------------

    def order(self, total: int) -> int:
        order_id = next(_orders)
        self.put_order(order_id, total)
        return order_id

    def put_order(self, order_id: int, total: int) -> None:
        intent = f"pi_wh_{order_id}"
        put_order(self.ddb, self.env["CUSTOMER_DATA_TABLE"], self.customer, order_id, total, payment_intent=intent)
        self.stripe.add_payment_intent(intent, total, "usd")
        self.orders.append(order_id)

    def direct(self, amount: int = 2000, *, pending: bool = False) -> LedgerRow:
        """A direct refund through the refund tool (the chat's path): the provider says succeeded or pending."""
        order_id = self.order(4000)
        self.stripe.new_refund_status = "pending" if pending else "succeeded"
        out, sk = self.ask_refund(order_id, amount, "arrived broken")
        assert out.result["status"] == ("REFUND_IN_PROGRESS" if pending else "REFUNDED"), out.result
        return self.row(sk)

    def ask_refund(self, order_id: int, amount: int, reason: str) -> tuple[ToolOutcome, str]:
        """The customer's refund tool called, in a new conversation: its outcome, and its ledger row's key."""
        conversation, tool_use = new_conversation_id(), f"toolu_{order_id}"
        ctx = ToolContext(
            Principal(f"customer-{self.customer}", "customer", self.customer),
            self.customer,
            conversation,
            1,
            tool_use,
            "req",
            utc_now(),
        )
        args = {"order_id": order_id, "amount_cents": amount, "reason": reason}
        return self.registry.execute("request_refund", args, ctx), refund_keys.request_sk(conversation, 1, tool_use)

    def approved(self, amount: int = 18_900, *, pending: bool = False) -> LedgerRow:
        """An approved refund as RefundFlow makes it: approved by a lead, APPROVED -> SETTLING, one provider call."""
        order_id = next(_orders)
        approval_id = put_pending_approval(self.ddb, self.env, self.customer, order_id, amount, utc_now(), "broken")
        self.ddb.update_item(
            TableName=self.env["CUSTOMER_DATA_TABLE"],
            Key=to_item({"customer_id": self.customer, "sk": f"ORDER#{order_id}"}),
            UpdateExpression="SET payment_intent = :pi",
            ExpressionAttributeValues=to_values({":pi": f"pi_wh_{order_id}"}),
        )
        self.stripe.add_payment_intent(f"pi_wh_{order_id}", amount, "usd")
        self.orders.append(order_id)
        self.approvals.approve(approval_id, "lead-1", utc_now())
        approval = self.approvals.get(approval_id)
        assert approval is not None
        row = self.ledger.begin_approved(approval, "stripe", utc_now(), "refund-flow")
        self.stripe.new_refund_status = "pending" if pending else "succeeded"
        return self.settler.settle(row, actor="refund-flow").row

    # -- what the tables hold --------------------------------------------------------------------------------------

    def row(self, sk: str) -> LedgerRow:
        row = self.ledger.get(self.customer, sk)
        assert row is not None
        return row

    def items(self, prefix: str) -> list[dict[str, Any]]:
        out = self.ddb.query(
            TableName=self.env["CUSTOMER_DATA_TABLE"],
            KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_values({":c": self.customer, ":p": prefix}),
            ConsistentRead=True,
        )
        return [from_item(i) for i in out["Items"]]

    def money(self, order_id: int) -> tuple[int, int, int]:
        """(available, reserved, refunded)."""
        (order,) = [o for o in self.items(f"ORDER#{order_id}") if o["order_id"] == order_id]
        return int(order["available_cents"]), int(order["reserved_cents"]), int(order["refunded_cents"])

    def approval(self, approval_id: str) -> Approval:
        item = self.approvals.get(approval_id)
        assert item is not None
        return item

    def webhook_audit(self, row: LedgerRow) -> list[dict[str, Any]]:
        return [a for a in self.audit.list_stream(f"refund#{row.refund_key}") if a["actor"] == "stripe-webhook"]

    def dedupe(self, refund_id: str) -> list[str]:
        return sorted(i["sk"] for i in self.items(f"WEBHOOK#{refund_id}#"))

    def check(self) -> None:
        orders = [o for o in self.items("ORDER#") if o["order_id"] in self.orders]
        rows = [r for r in self.items("REFUND#") if "refund_key" in r and r["order_id"] in self.orders]
        problems = ledger_problems(rows, orders, self.stripe)
        assert not problems, problems


@pytest.fixture
def world(api: Api) -> Iterator[World]:
    yield World(api)


def signed(event: dict[str, Any], secret: str = SECRET, t: int | None = None) -> tuple[str, dict[str, str]]:
    import time

    body = json.dumps(event)
    return body, {"stripe-signature": sign(body.encode(), secret, int(time.time()) if t is None else t)}


# ------------------------------------------------------------------ the route


def test_the_route_is_the_templates_and_takes_no_jwt(world: World) -> None:
    (route,) = [r for r in world.api.stack.routes if r.path == ROUTE]
    assert (route.method, route.function) == ("POST", "PaymentsWebhookFunction")
    props = world.api.stack.sam_template["Resources"]["PaymentsWebhookFunction"]["Properties"]
    assert "Auth" not in props["Events"]["StripeWebhook"]["Properties"]
    # A lead's token is no signature: refused.
    status, body, _ = world.api.call("POST", ROUTE, raw_body="{}", token=world.api.lead())
    assert (status, body["error"]["code"]) == (400, "bad_request")


# ------------------------------------------------------------------ completion


def test_a_pending_direct_refund_is_refunded_by_its_signed_webhook(world: World) -> None:
    row = world.direct(pending=True)
    assert (row.status, world.money(row.order_id)) == ("SETTLING", (2000, 2000, 0))
    assert world.deliver() == ["unchanged", "duplicate"]  # the creation's `pending`, twice (two kinds)
    world.stripe.settle(row.refund_id, "succeeded")
    assert world.deliver() == ["applied", "unchanged"]  # SUCCEEDED already: the twin finds nothing to do
    after = world.row(row.sk)
    assert (after.status, after.refund_id, after.extra.get("unsettled")) == ("SUCCEEDED", row.refund_id, None)
    assert world.money(row.order_id) == (2000, 0, 2000)
    assert world.dedupe(row.refund_id) == [f"WEBHOOK#{row.refund_id}#pending", f"WEBHOOK#{row.refund_id}#succeeded"]
    audited = world.webhook_audit(row)
    assert [(a["action"], a["outcome"]) for a in audited] == [
        ("payment_refund", "SETTLING"),
        ("payment_refund", "SUCCEEDED"),
    ]


def test_an_unknown_outcome_is_settled_by_the_webhook(world: World) -> None:
    """The refund made but its answer lost, then 429s until the retries run out: the tool says in progress
    (outcome unknown, no refund id); the webhook says succeeded."""
    world.stripe.inject(POST, Fault.TIMEOUT_AFTER)
    world.stripe.inject(POST, Fault.RATE_LIMIT, times=2)  # both retries (same key) refused before running
    order_id = world.order(4000)
    out, sk = world.ask_refund(order_id, 1500, "x")
    assert out.result["status"] == "REFUND_IN_PROGRESS", out.result
    row = world.row(sk)
    assert (row.status, row.refund_id) == ("SETTLING", "")
    assert world.deliver() == ["applied", "unchanged"]
    after = world.row(row.sk)
    assert after.status == "SUCCEEDED" and after.refund_id.startswith("re_sim_")
    assert world.money(order_id) == (2500, 0, 1500)


@pytest.mark.parametrize("signing", ["unsigned", "stale", "forged"])
def test_an_unsigned_stale_or_forged_webhook_changes_nothing_and_logs_no_body(world: World, signing: str) -> None:
    row = world.direct(pending=True)
    world.deliver()
    before = (world.row(row.sk), world.money(row.order_id), world.dedupe(row.refund_id), world.webhook_audit(row))
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(json.dumps(record.__dict__, default=str))  # type: ignore[method-assign]
    logging.getLogger("support_agent").addHandler(handler)
    try:
        world.sender.signing = signing  # type: ignore[assignment]
        world.stripe.settle(row.refund_id, "succeeded")
        assert world.deliver() == ["400", "400"]
    finally:
        logging.getLogger("support_agent").removeHandler(handler)
    assert all(status == 400 and body["error"]["code"] == "bad_request" for status, body in world.answers[-2:])
    after = (world.row(row.sk), world.money(row.order_id), world.dedupe(row.refund_id), world.webhook_audit(row))
    assert after == before
    assert lines and all(row.refund_id not in line and "evt_sim_" not in line for line in lines), lines
    # Stripe delivers again, signed: applied.
    world.sender.signing = "valid"
    for event in world.sender.events_for(world.stripe.ledger.retrieve(row.refund_id), "pending"):
        world.sender.send(event)
    assert world.row(row.sk).status == "SUCCEEDED"


def test_a_body_api_gateway_base64_encoded_is_verified_as_sent(world: World) -> None:
    row = world.direct(pending=True)
    world.sender.deliver = False
    (event, *_) = world.sender.events_for(world.stripe.settle(row.refund_id, "succeeded"), "pending")
    body, headers = signed(event)
    raw = json.loads((EVENTS / "chat.json").read_text())
    raw.update(
        routeKey=f"POST {ROUTE}",
        rawPath=ROUTE,
        rawQueryString="",
        headers={"content-type": "application/json; charset=utf-8", **headers},
        body=base64.b64encode(body.encode()).decode(),
        isBase64Encoded=True,
    )
    raw["requestContext"]["http"].update(method="POST", path=ROUTE)
    world.api.use_function("PaymentsWebhookFunction")
    out = world.api.handlers["PaymentsWebhookFunction"](copy.deepcopy(raw), None)
    assert (out["statusCode"], json.loads(out["body"])["outcome"]) == (200, "applied")
    assert world.row(row.sk).status == "SUCCEEDED"


# ------------------------------------------------------------------ orderings and duplicates


def _kept(world: World) -> list[dict[str, Any]]:
    events = list(world.sender.undelivered)
    world.sender.undelivered.clear()
    return events


ORDERINGS = list(itertools.permutations(range(4)))


@pytest.mark.parametrize("order", ORDERINGS, ids=["".join(map(str, o)) for o in ORDERINGS])
def test_every_order_of_both_kinds_of_both_changes_each_delivered_twice(world: World, order: tuple[int, ...]) -> None:
    """A pending refund, then succeeded: 2 changes x 2 kinds, in every order, the whole run twice over.

    However they come, the row ends SUCCEEDED, the money moved once, and one webhook wrote SUCCEEDED.
    """
    world.sender.deliver = False
    row = world.direct(pending=True)
    world.stripe.settle(row.refund_id, "succeeded")
    events = _kept(world)
    assert [(e["type"], e["data"]["object"]["status"]) for e in events] == [
        ("refund.updated", "pending"),
        ("charge.refund.updated", "pending"),
        ("refund.updated", "succeeded"),
        ("charge.refund.updated", "succeeded"),
    ]
    assert len({e["id"] for e in events}) == 4
    outcomes = [_outcome(world, events[i]) for i in order + order]
    assert outcomes.count("applied") == 1, outcomes
    assert world.row(row.sk).status == "SUCCEEDED"
    assert world.money(row.order_id) == (2000, 0, 2000)
    assert [a["outcome"] for a in world.webhook_audit(row)].count("SUCCEEDED") == 1
    assert f"WEBHOOK#{row.refund_id}#succeeded" in world.dedupe(row.refund_id)


def _outcome(world: World, event: dict[str, Any]) -> str:
    delivery = world.sender.send(event)
    status, answer = world.answers[-1]
    assert delivery.status == status == 200, answer
    return str(answer["outcome"])


LATE = list(itertools.permutations(range(3)))


@pytest.mark.parametrize("kind", ["direct", "approved"])
@pytest.mark.parametrize("order", LATE, ids=["".join(map(str, o)) for o in LATE])
def test_a_late_failure_after_success_in_every_order_twice(world: World, kind: str, order: tuple[int, ...]) -> None:
    """Stripe fails a refund it had made: refunded -> available (direct) or -> reserved with the approval
    REFUNDED -> FAILED and the provider's reason (approved), once, whatever the order of its three events."""
    row = world.direct() if kind == "direct" else world.approved()
    world.deliver()  # the creation's `succeeded`: nothing new
    assert world.row(row.sk).status == "SUCCEEDED"
    world.sender.deliver = False
    world.stripe.fail_late(row.refund_id, "expired_or_canceled_card")
    events = _kept(world)
    assert sorted(e["type"] for e in events) == ["charge.refund.updated", "refund.failed", "refund.updated"]
    outcomes = [_outcome(world, events[i]) for i in order + order]
    assert outcomes.count("applied") == 1 and set(outcomes) <= {"applied", "unchanged", "duplicate"}, outcomes
    after = world.row(row.sk)
    assert (after.status, after.failure_code) == ("FAILED", "expired_or_canceled_card")
    if kind == "direct":
        assert world.money(row.order_id) == (4000, 0, 0)
    else:
        assert world.money(row.order_id) == (0, 18_900, 0)
        approval = world.approval(row.approval_id)
        assert (approval.status, approval.failure_error) == ("FAILED", "expired_or_canceled_card")
    assert [a["action"] for a in world.webhook_audit(row)] == ["refund_failed_late"]


def test_a_pending_approved_refund_that_fails_keeps_the_reservation_for_the_lead(world: World) -> None:
    row = world.approved(pending=True)
    assert world.approval(row.approval_id).status == "SETTLING"
    world.deliver()
    world.stripe.settle(row.refund_id, "failed")
    assert world.deliver() == ["applied", "unchanged", "unchanged"]
    approval = world.approval(row.approval_id)
    assert (approval.status, approval.failure_error) == ("FAILED", "unknown")
    assert world.money(row.order_id) == (0, 18_900, 0)
    # A stale `pending` for the same refund cannot move it back.
    world.sender.send(
        world.sender.events_for({**world.stripe.ledger.retrieve(row.refund_id), "status": "pending"}, None)[0]
    )
    assert world.row(row.sk).status == "FAILED"


def test_a_late_pending_does_not_undo_success(world: World) -> None:
    world.sender.deliver = False
    row = world.direct(pending=True)
    world.stripe.settle(row.refund_id, "succeeded")
    pending, _, succeeded, _ = _kept(world)
    assert _outcome(world, succeeded) == "applied"
    assert _outcome(world, pending) == "unchanged"
    assert world.row(row.sk).status == "SUCCEEDED"


# ------------------------------------------------------------------ what is not ours


def test_a_refund_the_ledger_does_not_know_is_a_200_and_changes_nothing(world: World) -> None:
    order_id = world.order(5000)
    before = (world.money(order_id), world.items("WEBHOOK#"))
    world.stripe.refund_outside(f"pi_wh_{order_id}", 700)  # a person in Stripe's dashboard
    assert world.deliver() == ["unknown_refund", "unknown_refund"]
    # Metadata naming a row that does not exist, with a valid signature.
    refund = {
        **world.stripe.refund_outside(f"pi_wh_{order_id}", 300),
        "metadata": {"customer_id": str(world.customer), "refund_key": new_approval_id(), "attempt": "1"},
    }
    world.deliver()
    world.sender.send(world.sender.events_for(refund, None)[0])
    assert world.answers[-1] == (200, {**world.answers[-1][1], "outcome": "unknown_refund"})
    assert (world.money(order_id), world.items("WEBHOOK#")) == before


def test_other_event_types_are_ignored(world: World) -> None:
    body, headers = signed(
        {"id": "evt_x", "object": "event", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_1"}}}
    )
    status, answer, _ = world.api.call("POST", ROUTE, raw_body=body, token=None, headers=headers)
    assert (status, answer) == (200, {"received": True, "outcome": "ignored", "eventId": "evt_x"})


# ------------------------------------------------------------------ the sender, as make dev runs it


def test_the_simulated_stripe_delivers_on_a_background_thread_after_its_answer() -> None:
    transport = InProcessStripe()
    got: list[tuple[str, dict[str, Any], str]] = []
    done = threading.Event()

    def endpoint(body: bytes, headers: dict[str, str]) -> int:
        got.append((threading.current_thread().name, json.loads(body), headers["Stripe-Signature"]))
        if len(got) == 4:
            done.set()
        return 200

    transport.stripe.webhooks.configure(endpoint, SECRET)
    transport.stripe.webhooks.delay_seconds = 0.0
    transport.stripe.webhooks.duplicate = True
    refund = provider_for(transport).refund(RefundAttempt("apr_x#1", "pi_demo_1042", 1000, "usd", {"customer_id": "7"}))
    assert done.wait(5), got
    assert transport.stripe.webhooks.wait(5)
    assert {name for name, _, _ in got} == {"simulated-stripe-webhooks"}
    assert [e["type"] for _, e, _ in got] == ["refund.updated", "charge.refund.updated"] * 2
    for _, event, header in got:
        assert event["data"]["object"]["id"] == refund.id and event["id"].startswith("evt_")
        assert {"api_version", "created", "livemode", "object"} <= set(event)
        assert header.startswith("t=") and ",v1=" in header
    transport.stripe.webhooks.stop()


# ------------------------------------------------------------------ least privilege, at runtime


def test_the_webhook_function_under_its_own_role(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its handler, with moto enforcing the deployed role: every call allowed and within what the template
    grants (tests/unit/test_template.py's evaluator), every grant used, and nothing else allowed."""
    from tests.reliability.test_least_privilege_runtime import Recorder, as_function, credentials_for, denied
    from tests.unit.test_template import granted_pairs

    stack = world.api.stack
    world.sender.deliver = False
    direct = world.direct(pending=True)
    world.stripe.settle(direct.refund_id, "succeeded")
    approved = world.approved()
    world.stripe.fail_late(approved.refund_id, "lost_or_stolen_card")
    events = _kept(world)
    recorder = Recorder(stack)
    creds = credentials_for(stack, "PaymentsWebhookFunction")
    world.checking = False
    with as_function(world.api, "PaymentsWebhookFunction", creds, recorder, monkeypatch):
        outcomes = [_outcome(world, event) for event in events]
        used = set(recorder.pairs)
        ddb, table = boto3.client("dynamodb"), stack.physical_ids["CustomerDataTable"]
        key = to_item({"customer_id": world.customer, "sk": f"ORDER#{direct.order_id}"})
        forbidden = {
            "DeleteItem": lambda: ddb.delete_item(TableName=table, Key=key),
            "Query": lambda: ddb.query(
                TableName=table,
                KeyConditionExpression="customer_id = :c",
                ExpressionAttributeValues=to_values({":c": world.customer}),
            ),
            "Scan": lambda: ddb.scan(TableName=table),
            # (moto authorises per action against "*": which table an action may touch is the static evaluator's.)
            "SendMessage": lambda: boto3.client("sqs").send_message(
                QueueUrl=stack.physical_ids["ApprovalQueue"], MessageBody="{}"
            ),
            "StartExecution": lambda: boto3.client("stepfunctions").start_execution(
                stateMachineArn=stack.physical_ids["RefundFlow"], name="x", input="{}"
            ),
            "GetSecretValue": lambda: boto3.client("secretsmanager").get_secret_value(SecretId="stripe-api-key"),
        }
        refused = {name: denied(call) for name, call in forbidden.items()}
    world.checking = True
    world.check()
    assert outcomes.count("applied") == 2, outcomes  # pending -> succeeded; the late failure
    assert world.row(direct.sk).status == "SUCCEEDED" and world.row(approved.sk).status == "FAILED"
    assert all(refused.values()), refused
    granted = granted_pairs(stack.template, "PaymentsWebhookFunction")
    assert used <= granted, sorted(used - granted)
    # Only with StripeWebhookSecretArn set (this stack gives the secret in STRIPE_WEBHOOK_SECRET).
    assert granted - used == {("secretsmanager:GetSecretValue", "param:StripeWebhookSecretArn")}


# ------------------------------------------------------------------ every origin of a refund (second review, 3)


def _mcp_refund(world: World, amount: int, *, keyed: bool) -> LedgerRow:
    """A refund through the MCP server's tool call (mcp/our_tools.py `call_tool`): with the client's idempotency key
    it is direct (refund key ``mcp:<customer>:<sha256>``); without one it is held for a lead, who approves it,
    and RefundFlow's writes make it (refund key: the approval id)."""
    order_id = world.order(4000)
    services = McpServices(world.registry, world.ddb, world.env["CONVERSATIONS_TABLE"], world.env["AUDIT_TABLE"])
    principal = Principal(f"customer-{world.customer}", "customer", world.customer)
    args = {"order_id": order_id, "amount_cents": amount, "reason": "arrived broken"}
    outcome = call_tool(services, principal, "request_refund", args, f"key-{order_id}" if keyed else None, "test")
    assert not outcome.is_error, outcome.result
    if keyed:
        (row,) = [LedgerRow.from_item(i) for i in world.items("REFUND#mcp#") if i["order_id"] == order_id]
        return row
    approval_id = str(outcome.result["approval_id"])
    world.approvals.approve(approval_id, "lead-1", utc_now())
    approval = world.approvals.get(approval_id)
    assert approval is not None
    row = world.ledger.begin_approved(approval, "stripe", utc_now(), "refund-flow")
    return world.settler.settle(row, actor="refund-flow").row


def _refund_from(world: World, origin: str, *, pending: bool) -> LedgerRow:
    world.stripe.new_refund_status = "pending" if pending else "succeeded"
    if origin == "chat_direct":
        return world.direct(pending=pending)
    if origin == "approved":
        return world.approved(pending=pending)
    return _mcp_refund(world, 2000, keyed=origin == "mcp_keyed")


ORIGINS = ["chat_direct", "approved", "mcp_keyed", "mcp_held"]


@pytest.mark.parametrize("origin", ORIGINS)
def test_a_refund_of_every_origin_is_found_by_webhooks_the_sweep_reconciliation_and_its_audit_trail(
    world: World, origin: str
) -> None:
    """Second review, finding 3: the webhook parsed the refund key itself and knew only ``conv_…`` and approval
    ids, so every event of an MCP refund was ``unknown_refund`` (the ledger kept SUCCEEDED after the provider
    failed it). Every reader now takes the grammar from support_agent/refunds/keys.py."""
    row = _refund_from(world, origin, pending=True)
    assert row.status == "SETTLING" and row.refund_id, row
    assert refund_keys.parse(row.refund_key) is not None and refund_keys.ledger_sk(row.refund_key) == row.sk
    world.deliver()  # the creation's `pending` events: nothing new
    # Webhooks: pending -> succeeded, then Stripe fails it late.
    world.stripe.settle(row.refund_id, "succeeded")
    assert world.deliver().count("applied") == 1
    assert world.row(row.sk).status == "SUCCEEDED"
    world.stripe.fail_late(row.refund_id, "expired_or_canceled_card")
    assert world.deliver().count("applied") == 1
    assert world.row(row.sk).status == "FAILED"
    heard = [a["action"] for a in world.webhook_audit(row)]
    assert heard[-1] == "refund_failed_late" and set(heard) == {"payment_refund", "refund_failed_late"}, heard

    # The payment sweep: another refund of this origin, settled at the provider with no webhook delivered.
    world.sender.deliver = False
    other = _refund_from(world, origin, pending=True)
    world.stripe.settle(other.refund_id, "succeeded")
    sweep = PaymentSweeper(
        world.ledger, world.settler, world.settler.provider, grace_seconds=0, new_attempt_after_seconds=600, limit=50
    )
    sweep.run()
    assert world.row(other.sk).status == "SUCCEEDED"
    world.check()

    # Reconciliation: nothing to say of either refund.
    report = Reconciler(world.ledger, world.settler.provider).run()
    named = [d for d in report.differences if d.refund_key in (row.refund_key, other.refund_key)]
    assert named == [], named

    # The audit trail: each refund's stream verifies against the head its ledger row holds.
    env = world.env
    audit = AuditStore(
        world.ddb, env["AUDIT_TABLE"], env["CONVERSATIONS_TABLE"], env["APPROVALS_TABLE"], env["CUSTOMER_DATA_TABLE"]
    )
    for r in (row, other):
        answer = audit.verify_stream(f"refund#{r.refund_key}")
        assert (answer["status"], answer["rows"] > 0) == ("ok", True), answer
