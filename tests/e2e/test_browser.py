"""The pages in a real browser: the seed scenario, then everything else a lead does on the console.

The seed scenario: chat as customer 7, see the trace, approve as lead-1, see REFUNDED. Then the lead console's
other flows: reject a PENDING refund; a refund that FAILS for real (part of the payment was refunded in Stripe's
dashboard, so the simulated Stripe refuses the amount), retried until REFUNDED; another FAILED one found under
the "Failed" filter and released; a hand-off a customer asked for in the chat, closed; and the audit panel (a
conversation's trail and a customer's). After each action the test checks what the page shows and the state read
back through the API (and the order's money in the table).

Drives the pages `make dev` serves (web/index.html + chat.js, web/lead.html + lead.js) against the local stack
with the simulated model; approvals run the refund state machine in moto. Screenshots of each step go to
tests/e2e/artifacts/ (not committed).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.local import REGION, LocalStack
from devstack.simulated_stripe import SimulatedStripe

MESSAGE = "Where is my order 1042? Also refund it."
REPLY_TIMEOUT_MS = 45_000  # two model turns and the tool calls through the worker processes
REFUND_TIMEOUT_MS = 45_000  # the Step Functions flow in moto, polled by the page every second


def test_chat_then_lead_approves_refund(
    local_stack: LocalStack,
    page: tuple[Any, Any],
    screenshot: Callable[[Any, str], Path],
) -> None:
    from playwright.sync_api import expect

    pg, watch = page
    assert local_stack.tokens["simulatedModel"] is True

    # ---- chat page: the simulated-model banner, then sign in as customer 7
    pg.goto(f"{local_stack.url}/")
    expect(pg.locator("#signin-customer-7")).to_be_visible()
    banner = pg.locator("#simulated-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Simulated model")
    screenshot(pg, "01-chat-signin")

    pg.click("#signin-customer-7")
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("#whoami-name")).to_contain_text("customer 7")

    # ---- the seed message: lookup_order, then request_refund held for approval
    pg.fill("#message", MESSAGE)
    pg.click("#send")
    reply = pg.locator(".reply").last
    expect(reply).to_be_visible(timeout=REPLY_TIMEOUT_MS)
    expect(pg.locator("#send")).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
    reply_text = reply.locator(".reply-text").inner_text()
    assert reply_text.startswith("[simulated model]"), reply_text
    assert re.search(r"approv", reply_text, re.IGNORECASE), reply_text
    assert "1042" in reply_text, reply_text

    lookup = pg.locator('.trace-call[data-tool="lookup_order"]')
    refund = pg.locator('.trace-call[data-tool="request_refund"]')
    expect(lookup.first).to_be_visible()
    expect(refund.first).to_be_visible()
    expect(refund.first.locator(".trace-result")).to_contain_text("PENDING_APPROVAL")
    expect(pg.locator('.trace-call[data-error="true"]')).to_have_count(0)
    tools = pg.locator(".trace-call").evaluate_all("els => els.map(e => e.dataset.tool)")
    assert tools.index("lookup_order") < tools.index("request_refund"), tools

    conversation_id = pg.locator("#conversation-id").inner_text()
    assert conversation_id.startswith("conv_"), conversation_id
    expect(pg.locator(f'.conversation-item[data-conversation-id="{conversation_id}"]')).to_have_attribute(
        "aria-current", "true"
    )
    pending_refund = pg.locator('#refunds .refund[data-order-id="1042"]')
    expect(pending_refund).to_have_attribute("data-status", "PENDING_APPROVAL")
    screenshot(pg, "02-chat-reply-and-trace")
    watch.settle(pg)  # navigate with no call in flight (an aborted call is a broken pipe in the server's log)

    # ---- lead console: sign in as lead-1, approve the pending refund of order 1042
    pg.goto(f"{local_stack.url}/lead")
    expect(pg.locator("#simulated-banner")).to_be_visible()
    pg.click("#signin-lead-1")
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("#status-filter")).to_have_value("PENDING")

    row = pg.locator("tr.approval-row").filter(has=pg.locator(".approval-order", has_text=re.compile(r"^1042$")))
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-status", "PENDING")
    expect(row.locator(".approval-customer")).to_have_text("7")
    expect(row.locator(".approval-conversation")).to_contain_text(conversation_id)
    expect(row.locator(".approval-amount")).to_contain_text("189.00")
    approval_id = row.get_attribute("data-approval-id")
    assert approval_id, "the approval row has no data-approval-id"
    screenshot(pg, "03-lead-pending")

    row.locator("button.approve").click()
    expect(row.locator(".approval-status")).to_have_text("REFUNDED", timeout=REFUND_TIMEOUT_MS)
    outcome = pg.locator(f'.decision-outcome[data-approval-id="{approval_id}"]')
    expect(outcome).to_have_attribute("data-status", "REFUNDED")
    expect(outcome).to_contain_text("189.00")
    expect(pg.locator("#lead-error")).to_be_hidden()
    screenshot(pg, "04-lead-refunded")
    watch.settle(pg)

    # ---- back on the chat page (same tab: the session is remembered): the refund shows REFUNDED
    pg.goto(f"{local_stack.url}/")
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("#conversation-id")).to_have_text(conversation_id)
    done = pg.locator('#refunds .refund[data-order-id="1042"]')
    expect(done).to_have_attribute("data-status", "REFUNDED")
    expect(pg.locator(".trace-call[data-tool]").first).to_be_visible()  # the trace is rebuilt from history
    screenshot(pg, "05-chat-refunded")
    watch.settle(pg)

    # ---- sign out; a lead's token is then refused by the chat page before any call
    pg.click("#signout")
    expect(pg.locator("#signin")).to_be_visible()
    expect(pg.locator("#app")).to_be_hidden()
    pg.fill("#token-input", local_stack.tokens["leads"][0]["token"])
    pg.click("#token-signin")
    expect(pg.locator("#signin-error")).to_contain_text("needs a customer token")
    expect(pg.locator("#app")).to_be_hidden()
    pg.click("#signin-customer-7")  # and a customer's opens the chat again
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("#whoami-name")).to_contain_text("customer 7")

    assert watch.errors == [], watch.errors


# ------------------------------------------------------------------ the rest of the lead console
#
# Each test below raises its own approvals through the API (POST /api/chat as the customer), drives the lead console
# in the browser, then reads the state back: the approval through the lead API, the refund through the customer's
# conversation view, and the order's money straight from the table in moto (the API has no order endpoint).

LEAD_TIMEOUT_MS = 45_000  # approve/retry answer after at most APPROVAL_WAIT_SECONDS, then the page polls


class Backend:
    """The local stack seen from outside the browser: its API (as a customer or lead-1) and its tables in moto."""

    def __init__(self, local: LocalStack) -> None:
        import boto3
        import httpx

        self.local = local
        self.http = httpx.Client(base_url=local.url, timeout=60)
        self.lead = {"Authorization": f"Bearer {local.tokens['leads'][0]['token']}"}
        session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
        self.ddb = session.client("dynamodb", endpoint_url=local.moto_url)
        self.customer_table = local.stack.physical_ids["CustomerDataTable"]

    def customer(self, customer_id: int) -> dict[str, str]:
        (token,) = [c["token"] for c in self.local.tokens["customers"] if c["customerId"] == customer_id]
        return {"Authorization": f"Bearer {token}"}

    def chat(self, customer_id: int, message: str) -> dict[str, Any]:
        resp = self.http.post("/api/chat", json={"message": message}, headers=self.customer(customer_id))
        assert resp.status_code == 200, resp.text
        return resp.json()

    def raise_approval(self, customer_id: int, order_id: int) -> tuple[str, str]:
        """A customer asks for a full refund of an order above the threshold: (approval id, conversation id)."""
        turn = self.chat(customer_id, f"Please refund order {order_id}.")
        results = [c["result"] for it in turn["trace"] for c in it["toolCalls"] if c["name"] == "request_refund"]
        assert len(results) == 1 and results[0]["status"] == "PENDING_APPROVAL", turn
        return results[0]["approval_id"], turn["conversationId"]

    def approval(self, approval_id: str) -> dict[str, Any]:
        resp = self.http.get(f"/api/approvals/{approval_id}", headers=self.lead)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def refunds(self, customer_id: int, conversation_id: str) -> list[dict[str, Any]]:
        resp = self.http.get(f"/api/conversations/{conversation_id}", headers=self.customer(customer_id))
        assert resp.status_code == 200, resp.text
        return resp.json()["refunds"]

    def lead_get(self, path: str) -> dict[str, Any]:
        resp = self.http.get(path, headers=self.lead)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def _order_key(self, customer_id: int, order_id: int) -> dict[str, Any]:
        return {"customer_id": {"N": str(customer_id)}, "sk": {"S": f"ORDER#{order_id}"}}

    def money(self, customer_id: int, order_id: int) -> tuple[int, int, int]:
        """(available, reserved, refunded) of the order, read consistently from the table."""
        item = self.ddb.get_item(
            TableName=self.customer_table, Key=self._order_key(customer_id, order_id), ConsistentRead=True
        )["Item"]
        available, reserved, refunded = (int(item[f"{k}_cents"]["N"]) for k in ("available", "reserved", "refunded"))
        return available, reserved, refunded

    @property
    def stripe(self) -> SimulatedStripe:
        """The simulated Stripe the functions refund through (make dev's, as STRIPE_* are not set here)."""
        assert self.local.stripe is not None
        return self.local.stripe.stripe


@pytest.fixture
def backend(local_stack: LocalStack) -> Iterator[Backend]:
    b = Backend(local_stack)
    try:
        yield b
    finally:
        b.http.close()


def open_lead_console(pg: Any, local: LocalStack) -> None:
    from playwright.sync_api import expect

    pg.goto(f"{local.url}/lead")
    pg.click("#signin-lead-1")
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("#whoami-name")).to_have_text("Morgan (lead-1)")  # the name claim, then the sub


def approval_row(pg: Any, approval_id: str) -> Any:
    return pg.locator(f'tr.approval-row[data-approval-id="{approval_id}"]')


def outcome(pg: Any, approval_id: str) -> Any:
    """The newest announcement of the approval's outcome (announcements are prepended)."""
    return pg.locator(f'#outcome .decision-outcome[data-approval-id="{approval_id}"]').first


def audit_rows(pg: Any) -> list[dict[str, str]]:
    """The audit panel's rows as the page shows them."""
    return pg.locator("#audit tr.audit-row").evaluate_all(
        """rows => rows.map(r => ({
            eventId: r.dataset.eventId,
            action: r.querySelector('.audit-action').innerText.trim(),
            actor: r.querySelector('.audit-actor').innerText.trim(),
            tool: r.querySelector('.audit-tool').innerText.trim(),
            outcome: r.querySelector('.audit-outcome').innerText.trim(),
            conversation: r.querySelector('.audit-conversation [data-conversation-id]')?.dataset.conversationId ?? null,
        }))"""
    )


@dataclass
class Console:
    """A lead's page on the local stack (watched: see PageWatch), and the stack as the tests read it behind it."""

    pg: Any
    watch: Any
    local: LocalStack
    backend: Backend
    screenshot: Callable[[Any, str], Path]

    def pending(self, customer_id: int, order_id: int, total: int) -> tuple[str, str, Any]:
        """A customer's full refund of an order held for a lead (all of it reserved), and the lead console open:
        (approval id, conversation id, the approval's row)."""
        approval_id, conversation_id = self.backend.raise_approval(customer_id, order_id)
        assert self.backend.money(customer_id, order_id) == (0, total, 0)
        open_lead_console(self.pg, self.local)
        return approval_id, conversation_id, approval_row(self.pg, approval_id)

    def decided(self, row: Any, approval_id: str, status: str, says: str, timeout: float | None = None) -> None:
        """The lead's last action on ``row`` ended ``status``: the row says so, the newest announcement too (with
        ``says``), no retry or release is left to do, and no error is shown."""
        from playwright.sync_api import expect

        expect(row.locator(".approval-status")).to_have_text(status, timeout=timeout)
        expect(outcome(self.pg, approval_id)).to_have_attribute("data-status", status)
        expect(outcome(self.pg, approval_id)).to_contain_text(says)
        expect(row.locator("button.retry, button.release")).to_have_count(0)
        expect(self.pg.locator("#lead-error")).to_be_hidden()

    def trail(self, opener: Any, conversation_id: str) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
        """Opens a conversation's audit trail with ``opener``: its rows as the page shows them and as the API has
        them, the same rows in the same order."""
        from playwright.sync_api import expect

        opener.click()
        expect(self.pg.locator("#audit-summary")).to_contain_text(f"for {conversation_id}")
        records = self.backend.lead_get(f"/api/audit?conversationId={conversation_id}")["records"]
        shown = audit_rows(self.pg)
        assert [r["eventId"] for r in shown] == [r["eventId"] for r in records]
        return shown, records


@pytest.fixture
def console(
    local_stack: LocalStack, page: tuple[Any, Any], screenshot: Callable[[Any, str], Path], backend: Backend
) -> Console:
    pg, watch = page
    return Console(pg, watch, local_stack, backend, screenshot)


def test_lead_rejects_a_pending_refund_and_reads_its_trail(console: Console) -> None:
    from playwright.sync_api import expect

    pg, watch, backend, screenshot = console.pg, console.watch, console.backend, console.screenshot
    approval_id, conversation_id, row = console.pending(8, 2001, 7400)
    expect(row).to_have_attribute("data-status", "PENDING")
    expect(row.locator(".approval-customer")).to_have_text("8")
    expect(row.locator(".approval-amount")).to_contain_text("74.00")
    row.locator("input.reject-reason").fill("store credit given instead")
    row.locator("button.reject").click()

    expect(row.locator(".approval-status")).to_have_text("REJECTED")
    expect(row.locator(".decided-by")).to_contain_text("lead-1")
    expect(row.locator("button.approve, button.reject, button.retry, button.release")).to_have_count(0)
    expect(outcome(pg, approval_id)).to_have_attribute("data-status", "REJECTED")
    expect(outcome(pg, approval_id)).to_contain_text("reservation is released")
    expect(pg.locator("#lead-error")).to_be_hidden()
    screenshot(pg, "01-rejected")

    approval = backend.approval(approval_id)
    assert (approval["status"], approval["decidedBy"]) == ("REJECTED", "lead-1"), approval
    assert backend.money(8, 2001) == (7400, 0, 0)  # the reservation went back to the order
    assert backend.refunds(8, conversation_id) == [
        {
            "approvalId": approval_id,
            "refundId": None,
            "orderId": 2001,
            "amountCents": 7400,
            "currency": "USD",
            "status": "REJECTED",
        }
    ]

    # ---- the conversation's audit trail, opened from the row: the tool calls, the request, the rejection
    shown, records = console.trail(row.locator("button.open-audit"), conversation_id)
    assert sorted((r["action"], r["tool"]) for r in shown) == [
        ("approval_rejected", "—"),
        ("refund_requested", "request_refund"),
        ("tool_call", "lookup_order"),
        ("tool_call", "request_refund"),
    ], shown
    (rejected,) = [r for r in records if r["action"] == "approval_rejected"]
    assert (rejected["actor"], rejected["outcome"], rejected["approvalId"]) == ("lead-1", "REJECTED", approval_id)
    assert rejected["input"] == {"reason": "store credit given instead"}
    rejected_row = pg.locator(f'#audit tr.audit-row[data-event-id="{rejected["eventId"]}"]')
    expect(rejected_row.locator(".audit-input")).to_contain_text("store credit given instead")
    screenshot(pg, "02-conversation-trail")
    watch.assert_clean(pg)


def test_failed_refund_retried_until_refunded(console: Console) -> None:
    from playwright.sync_api import expect

    pg, watch, backend, screenshot = console.pg, console.watch, console.backend, console.screenshot
    approval_id, conversation_id, row = console.pending(7, 1044, 16000)
    # Someone refunded 1.00 of the payment in Stripe's dashboard (still pending there): Stripe refuses the
    # approval's 160.00 (amount_too_large) on every attempt, no refund of ours exists, the approval ends FAILED.
    outside = backend.stripe.refund_outside("pi_demo_1044", 100, status="pending")
    announced = pg.locator(f'#outcome .decision-outcome[data-approval-id="{approval_id}"]')
    row.locator("button.approve").click()
    expect(row.locator(".approval-status")).to_have_text("FAILED", timeout=LEAD_TIMEOUT_MS)
    expect(outcome(pg, approval_id)).to_have_attribute("data-status", "FAILED")
    expect(outcome(pg, approval_id)).to_contain_text("retry or release")
    expect(row.locator("button.retry")).to_be_enabled()
    expect(row.locator("button.release")).to_be_enabled()
    screenshot(pg, "01-failed")
    assert backend.approval(approval_id)["status"] == "FAILED"
    assert backend.money(7, 1044) == (0, 16000, 0)  # nothing moved: still reserved, for the lead to decide
    assert backend.refunds(7, conversation_id)[0]["status"] == "FAILED"

    # ---- retry while the order is still wrong: it fails again (execution <id>-r1)
    row.locator("button.retry").click()
    expect(announced).to_have_count(2, timeout=LEAD_TIMEOUT_MS)
    expect(outcome(pg, approval_id)).to_have_attribute("data-status", "FAILED")
    expect(row.locator(".approval-status")).to_have_text("FAILED")
    expect(row.locator("button.retry")).to_be_enabled()
    assert backend.approval(approval_id)["status"] == "FAILED"
    assert backend.money(7, 1044) == (0, 16000, 0)

    # ---- the dashboard refund fails (its 1.00 is refundable again); the second retry (<id>-r2) refunds
    backend.stripe.settle(outside["id"], "failed")
    row.locator("button.retry").click()
    console.decided(row, approval_id, "REFUNDED", "160.00 USD refunded", timeout=LEAD_TIMEOUT_MS)
    expect(announced).to_have_count(3)
    screenshot(pg, "02-refunded")
    approval = backend.approval(approval_id)
    assert approval["status"] == "REFUNDED"
    assert backend.money(7, 1044) == (0, 0, 16000)
    assert backend.refunds(7, conversation_id)[0]["status"] == "REFUNDED"
    # Stripe made one refund of ours, on the third attempt (each FAILED one started the next).
    ours = [r for r in backend.stripe.refunds("pi_demo_1044") if r["metadata"].get("refund_key") == approval_id]
    assert [(r["id"], r["amount"], r["metadata"]["attempt"]) for r in ours] == [
        (approval["refund"]["refundId"], 16000, "3")
    ]

    # ---- the trail: approved once; three attempts at Stripe (failed, failed, succeeded), two of them retries
    shown, records = console.trail(row.locator("button.open-audit"), conversation_id)
    flow = sorted((r["action"], r["actor"], r["outcome"]) for r in shown if r["action"] != "tool_call")
    assert flow == [
        ("approval_approved", "lead-1", "APPROVED"),
        ("payment_refund", "refund-flow", "FAILED"),
        ("payment_refund", "refund-flow", "FAILED"),
        ("payment_refund", "refund-flow", "SUCCEEDED"),
        ("refund_requested", "customer-7", "PENDING_APPROVAL"),
        ("refund_retried", "lead-1", "APPROVED"),
        ("refund_retried", "lead-1", "APPROVED"),
        ("refund_started", "refund-flow", "SETTLING"),
        ("refund_started", "refund-flow", "SETTLING"),
        ("refund_started", "refund-flow", "SETTLING"),
    ], flow
    calls = [r for r in records if r["action"] == "payment_refund"]
    assert [(r["requestId"], r["output"]["attempt_key"], r["output"]["refund_id"]) for r in calls] == [
        (approval_id, f"{approval_id}#1", None),
        (f"{approval_id}-r1", f"{approval_id}#2", None),
        (f"{approval_id}-r2", f"{approval_id}#3", approval["refund"]["refundId"]),
    ], calls
    screenshot(pg, "03-conversation-trail")
    watch.assert_clean(pg)


def test_failed_refund_released(console: Console) -> None:
    from playwright.sync_api import expect

    pg, watch, backend, screenshot = console.pg, console.watch, console.backend, console.screenshot
    approval_id, conversation_id, row = console.pending(8, 2001, 7400)
    backend.stripe.refund_outside("pi_demo_2001", 100)  # refunded in Stripe's dashboard: Stripe refuses 74.00
    row.locator("button.approve").click()
    expect(row.locator(".approval-status")).to_have_text("FAILED", timeout=LEAD_TIMEOUT_MS)
    assert backend.approval(approval_id)["status"] == "FAILED"

    # ---- a lead arriving later (the page reloaded, the session remembered) finds it under "Failed"
    watch.settle(pg)
    pg.reload()
    expect(pg.locator("#app")).to_be_visible()
    expect(pg.locator("#approvals-updated")).to_contain_text("Updated")
    expect(row).to_have_count(0)  # no longer PENDING, and no longer pinned by this session
    pg.select_option("#status-filter", "FAILED")
    expect(row).to_have_attribute("data-status", "FAILED")
    expect(row.locator(".decided-by")).to_contain_text("lead-1")
    expect(row.locator("button.retry")).to_be_enabled()

    # The lead gives up on this refund: its reservation goes back to the order.
    assert backend.money(8, 2001) == (0, 7400, 0)
    row.locator("button.release").click()
    console.decided(row, approval_id, "RELEASED", "reservation released")
    screenshot(pg, "01-released")
    approval = backend.approval(approval_id)
    assert (approval["status"], approval["decidedBy"]) == ("RELEASED", "lead-1"), approval
    assert backend.money(8, 2001) == (7400, 0, 0)
    assert backend.refunds(8, conversation_id)[0]["status"] == "RELEASED"

    # ---- the customer's audit trail: this approval's rows are all there, as the API has them
    pg.select_option("#audit-by", "customerId")
    pg.fill("#audit-key", "8")
    pg.click("#audit-load")
    expect(pg.locator("#audit-summary")).to_contain_text("for customer 8")
    records = backend.lead_get("/api/audit?customerId=8")["records"]
    assert all(r["customerId"] == 8 for r in records)
    shown = audit_rows(pg)
    assert [r["eventId"] for r in shown] == [r["eventId"] for r in records]
    assert [r["eventId"] for r in shown] == sorted(r["eventId"] for r in shown)  # oldest first, as it says
    mine = sorted((r["action"], r["actor"], r["outcome"]) for r in records if r["approvalId"] == approval_id)
    assert mine == [
        ("approval_approved", "lead-1", "APPROVED"),
        ("approval_released", "lead-1", "RELEASED"),
        ("payment_refund", "refund-flow", "FAILED"),
        ("refund_requested", "customer-8", "PENDING_APPROVAL"),
        ("refund_started", "refund-flow", "SETTLING"),
        ("tool_call", "customer-8", "ok"),  # the call that asked for it names its approval
    ], mine
    # A customer's trail mixes conversations (and here two approvals of order 2001 when the whole module runs):
    # every row names its conversation, and that opens the conversation's own trail.
    expect(pg.locator("#audit-conversation-head")).to_be_visible()
    assert [r["conversation"] for r in shown] == [r["conversationId"] for r in records]
    (released,) = [r for r in records if r["action"] == "approval_released"]
    assert released["conversationId"] == conversation_id
    screenshot(pg, "02-customer-trail")
    opener = pg.locator(f'#audit tr.audit-row[data-event-id="{released["eventId"]}"] button.open-audit')
    _, conversation = console.trail(opener, conversation_id)
    expect(pg.locator("#audit-conversation-head")).to_be_hidden()
    assert released["eventId"] in [r["eventId"] for r in conversation]
    watch.assert_clean(pg)


def test_customer_asks_for_a_person_and_a_lead_closes_the_handoff(console: Console) -> None:
    from playwright.sync_api import expect

    pg, watch, backend, screenshot = console.pg, console.watch, console.backend, console.screenshot
    pg.goto(f"{console.local.url}/")
    pg.click("#signin-customer-8")
    expect(pg.locator("#app")).to_be_visible()
    pg.fill("#message", "Can I talk to a person, please?")
    pg.click("#send")
    reply = pg.locator(".reply").last
    expect(reply).to_be_visible(timeout=REPLY_TIMEOUT_MS)
    expect(pg.locator("#send")).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
    expect(reply.locator(".reply-text")).to_contain_text("teammate")
    escalation = pg.locator('.trace-call[data-tool="escalate_to_human"]')
    expect(escalation).to_have_count(1)
    expect(escalation.locator(".trace-result")).to_contain_text("hof_")
    conversation_id = pg.locator("#conversation-id").inner_text()
    assert conversation_id.startswith("conv_"), conversation_id
    screenshot(pg, "01-chat-handoff")
    watch.settle(pg)

    open_lead_console(pg, console.local)
    hrow = pg.locator("tr.handoff-row").filter(
        has=pg.locator(f'.handoff-conversation [data-conversation-id="{conversation_id}"]')
    )
    expect(hrow).to_have_count(1)
    expect(hrow).to_have_attribute("data-status", "OPEN")
    expect(hrow.locator(".handoff-customer")).to_have_text("8")
    expect(hrow.locator(".handoff-reason")).to_contain_text("asked for a person")
    handoff_id = hrow.get_attribute("data-handoff-id")
    assert handoff_id and handoff_id.startswith("hof_"), handoff_id
    open_ids = [h["handoffId"] for h in backend.lead_get("/api/handoffs?status=OPEN")["handoffs"]]
    assert handoff_id in open_ids

    hrow.locator("input.close-note").fill("called the customer back")
    hrow.locator("button.close-handoff").click()
    expect(hrow).to_have_attribute("data-status", "CLOSED")
    expect(hrow.locator(".handoff-status")).to_have_text("CLOSED")
    expect(hrow).to_contain_text("closed by lead-1")
    expect(pg.locator(f'#outcome .handoff-outcome[data-handoff-id="{handoff_id}"]')).to_be_visible()
    expect(pg.locator("#lead-error")).to_be_hidden()
    screenshot(pg, "02-handoff-closed")

    assert handoff_id not in [h["handoffId"] for h in backend.lead_get("/api/handoffs?status=OPEN")["handoffs"]]
    pg.click("#refresh-handoffs")
    expect(hrow).to_have_count(0)  # the Open list, reloaded, no longer has it
    (closed,) = [h for h in backend.lead_get("/api/handoffs?status=CLOSED")["handoffs"] if h["handoffId"] == handoff_id]
    assert (closed["status"], closed["closedBy"], closed["customerId"]) == ("CLOSED", "lead-1", 8), closed

    # ---- the Closed filter lists it; its conversation's trail has the opening and the closing
    pg.select_option("#handoff-filter", "CLOSED")
    closed_row = pg.locator(f'tr.handoff-row[data-handoff-id="{handoff_id}"]')
    expect(closed_row).to_have_attribute("data-status", "CLOSED")
    shown, records = console.trail(closed_row.locator("button.open-audit"), conversation_id)
    assert sorted((r["action"], r["actor"], r["outcome"]) for r in shown) == [
        ("handoff_closed", "lead-1", "CLOSED"),
        ("handoff_opened", "customer-8", "OPEN"),
        ("tool_call", "customer-8", "ok"),
    ], shown
    (closing,) = [r for r in records if r["action"] == "handoff_closed"]
    note = "called the customer back"  # a person's words are audited by hash and length (erasure keeps the chain)
    assert closing["input"] == {"note": {"sha256": hashlib.sha256(note.encode()).hexdigest(), "length": len(note)}}
    assert closing["output"] == {"handoff_id": handoff_id}
    screenshot(pg, "03-handoff-trail")
    watch.assert_clean(pg)


# ------------------------------------------------------------------ the conversation's event feed (issue 18)
#
# The chat page follows GET /api/conversations/{id}/events (a long poll) while a turn runs or a refund is pending:
# a turn handed to the worker (202) shows its tool calls as they happen, then its answer; a lead's decision reaches
# the open page; the feed's text is only ever text; and the page stops polling when nothing is under way.

# The first model call outlasts SyncTurnSeconds (20) minus ModelCallBudgetSeconds (8): the turn goes to the worker
# (202) before its second call. The worker's calls are slower than the feed's longest pause between reads (2 s), so
# each step shows before the answer.
FIRST_CALL_SECONDS = 12.5
WORKER_CALL_SECONDS = 3.0
LONG_TURN_TIMEOUT_MS = 60_000

# Records, in the page, every tool step seen in a turn still running (a step can show and finish between two of the
# test's looks at the page).
SEEN_WHILE_RUNNING = """() => {
    window.__seenWhileRunning = [];
    const look = () => document.querySelectorAll('.live-turn[data-state="running"] .progress-step').forEach(s => {
        const key = s.dataset.tool + ':' + s.dataset.state;
        if (!window.__seenWhileRunning.includes(key)) window.__seenWhileRunning.push(key);
    });
    new MutationObserver(look).observe(document.getElementById('transcript'),
        {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def is_chat_post(response: Any) -> bool:
    return response.request.method == "POST" and response.url.endswith("/api/chat")


def test_a_long_turn_shows_its_tool_calls_as_they_happen_then_its_answer(
    local_stack: LocalStack, page: tuple[Any, Any], screenshot: Callable[[Any, str], Path]
) -> None:
    from playwright.sync_api import expect

    pg, watch = page
    pg.add_init_script("window.SUPPORT_AGENT_WEBSOCKET = false")  # the long poll is what this tests
    assert local_stack.model is not None, "the simulated model"
    model = local_stack.model.model
    urls: list[str] = []
    pg.on("request", lambda r: urls.append(r.url))

    pg.goto(f"{local_stack.url}/")
    pg.click("#signin-customer-7")
    expect(pg.locator("#app")).to_be_visible()
    pg.evaluate("window.__sameDocument = true")  # gone if the page reloads
    pg.evaluate(SEEN_WHILE_RUNNING)

    calls = model.requests
    model.delay_seconds = FIRST_CALL_SECONDS
    try:
        pg.fill("#message", "Where is my order 1043? Also refund it.")
        with pg.expect_response(is_chat_post, timeout=LONG_TURN_TIMEOUT_MS) as answered:
            pg.click("#send")
            until = time.monotonic() + 10
            while model.requests == calls and time.monotonic() < until:
                time.sleep(0.05)
            assert model.requests > calls, "the turn's first model call never came"
            model.delay_seconds = WORKER_CALL_SECONDS  # the calls after it, in the worker
        response = answered.value
        assert response.status == 202, response.text()
        running = response.json()
        turn_id, conversation_id = running["turnId"], running["conversationId"]
        expect(pg.locator("#chat-status")).to_contain_text("long turn")
        expect(pg.locator("#conversation-id")).to_have_text(conversation_id)

        # The turn, still running: the lookup done in the chat function, then the refund the worker requests.
        live = pg.locator(f'.live-turn[data-turn-id="{turn_id}"]')
        expect(live.locator('.progress-step[data-tool="lookup_order"]')).to_have_attribute("data-state", "ok")
        expect(live.locator('.progress-step[data-tool="lookup_order"] .progress-label')).to_have_text(
            "Looked up order 1043"
        )
        screenshot(pg, "01-running")

        # Then the answer, in place of the live view (once), with the steps it showed.
        reply = pg.locator(f'.reply[data-turn-id="{turn_id}"]')
        expect(reply).to_have_count(1, timeout=LONG_TURN_TIMEOUT_MS)
        expect(pg.locator("#send")).to_be_enabled()
    finally:
        model.delay_seconds = 0.0
    expect(reply.locator(".reply-text")).to_contain_text("1043")
    reply_text = reply.locator(".reply-text").inner_text()
    assert reply_text.startswith("[simulated model]") and "refund" in reply_text, reply_text
    assert "Let me look up" not in reply_text  # the narration before a tool call is a step, not the answer
    expect(reply).to_have_attribute("data-iterations", "3")
    expect(reply).to_have_attribute("data-stop-reason", "end_turn")
    expect(pg.locator(f'[data-turn-id="{turn_id}"]')).to_have_count(1)  # not shown twice
    expect(pg.locator(".live-turn")).to_have_count(0)
    steps = reply.locator(".progress-step")
    assert steps.evaluate_all("els => els.map(e => [e.dataset.tool, e.dataset.state])") == [
        ["lookup_order", "ok"],
        ["request_refund", "ok"],
    ]
    expect(steps.nth(1).locator(".progress-label")).to_have_text("Requested a refund of $25.00 for order 1043")
    # Seen while the turn ran, before its answer existed: each step (a fast tool's request and result may come in one
    # read of the feed, so the refund step may have shown "ok" at once).
    seen = pg.evaluate("window.__seenWhileRunning")
    assert "lookup_order:ok" in seen, seen
    assert {"request_refund:running", "request_refund:ok"} & set(seen), seen
    # The trace panel has both calls with their results (the stack runs verbose).
    refund_call = pg.locator('.trace-call[data-tool="request_refund"]')
    expect(refund_call).to_have_count(1)
    expect(refund_call).to_have_attribute("data-state", "ok")
    expect(refund_call.locator(".trace-result")).to_contain_text("1043")
    expect(pg.locator('#refunds .refund[data-order-id="1043"]')).to_be_visible()
    screenshot(pg, "02-answered")

    assert pg.evaluate("window.__sameDocument") is True  # no reload
    assert any(f"/api/conversations/{conversation_id}/events?" in u for u in urls), urls
    assert not any("/turns/" in u for u in urls), "the page polled the turn record instead of following the feed"
    watch.assert_clean(pg)


def test_a_leads_decision_reaches_the_open_chat_and_no_one_else(
    local_stack: LocalStack,
    browser: Any,
    page: tuple[Any, Any],
    screenshot: Callable[[Any, str], Path],
    backend: Backend,
) -> None:
    from playwright.sync_api import expect

    pg, watch = page
    pg.add_init_script("window.SUPPORT_AGENT_WEBSOCKET = false")  # the long poll is what this tests
    feed_in_flight: list[str] = []
    pg.on("request", lambda r: feed_in_flight.append(r.url) if "/events?" in r.url else None)
    pg.on("requestfinished", lambda r: feed_in_flight.remove(r.url) if r.url in feed_in_flight else None)
    pg.on("requestfailed", lambda r: feed_in_flight.remove(r.url) if r.url in feed_in_flight else None)

    # ---- customer 8 asks for a refund over the threshold: it waits for a lead, and the page follows the feed.
    # $60 of order 2001: over the threshold whether this runs alone (the seed data) or after the tests above (which
    # left 2001's reservations released, and $1.00 of its payment refunded at Stripe).
    pg.goto(f"{local_stack.url}/")
    pg.click("#signin-customer-8")
    expect(pg.locator("#app")).to_be_visible()
    pg.evaluate("window.__sameDocument = true")
    pg.fill("#message", "Please refund $60 of order 2001.")
    pg.click("#send")
    expect(pg.locator(".reply").last).to_be_visible(timeout=REPLY_TIMEOUT_MS)
    expect(pg.locator("#send")).to_be_enabled(timeout=REPLY_TIMEOUT_MS)
    pending = pg.locator('#refunds .refund[data-order-id="2001"]')
    expect(pending).to_have_attribute("data-status", "PENDING_APPROVAL")
    approval_id = pending.get_attribute("data-approval-id")
    assert approval_id and approval_id.startswith("apr_"), approval_id
    conversation_id = pg.locator("#conversation-id").inner_text()
    deadline = time.monotonic() + 10
    while not feed_in_flight and time.monotonic() < deadline:
        pg.wait_for_timeout(100)
    assert feed_in_flight, "the page does not follow the conversation while its refund is pending"

    # ---- customer 7, in a browser context of its own, signed in at the same time
    other = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        pg7 = other.new_page()
        urls7: list[str] = []
        pg7.on("request", lambda r: urls7.append(r.url))
        pg7.goto(f"{local_stack.url}/")
        pg7.click("#signin-customer-7")
        expect(pg7.locator("#app")).to_be_visible()
        expect(pg7.locator("#conversation-id")).to_have_text("new")

        # ---- the lead approves (through the API); the open chat shows it without a reload
        resp = backend.http.post(f"/api/approvals/{approval_id}/approve", headers=backend.lead)
        assert resp.status_code == 200, resp.text
        line = pg.locator(f'.refund-update[data-approval-id="{approval_id}"]')
        expect(line).to_have_count(1, timeout=REFUND_TIMEOUT_MS)
        expect(line).to_have_attribute("data-status", "REFUNDED")
        expect(line.locator(".refund-update-text")).to_have_text(
            "Your refund of $60.00 for order 2001 was approved and refunded."
        )
        expect(pending).to_have_attribute("data-status", "REFUNDED")
        expect(pending.locator(".refund-id")).to_contain_text("re_")  # the conversation read again once
        assert pg.evaluate("window.__sameDocument") is True
        screenshot(pg, "01-customer-8-sees-the-decision")

        # ---- nothing left pending: the page stops following
        deadline = time.monotonic() + 5
        while feed_in_flight and time.monotonic() < deadline:
            pg.wait_for_timeout(100)
        assert feed_in_flight == [], feed_in_flight

        # ---- customer 7 saw none of it, and its own token cannot follow that conversation
        expect(pg7.locator(".refund-update")).to_have_count(0)
        expect(pg7.locator(f'.conversation-item[data-conversation-id="{conversation_id}"]')).to_have_count(0)
        expect(pg7.locator("#transcript")).not_to_contain_text("2001")
        expect(pg7.locator("#refunds .refund")).to_have_count(0)
        assert not any(conversation_id in u for u in urls7), urls7
        status = pg7.evaluate(
            """async (cid) => {
                const token = sessionStorage.getItem('supportAgent.customerToken');
                const r = await fetch('/api/conversations/' + cid + '/events?waitSeconds=0',
                                      {headers: {Authorization: 'Bearer ' + token}});
                return [r.status, (await r.json()).error.code];
            }""",
            conversation_id,
        )
        assert status == [404, "not_found"], status
        screenshot(pg7, "02-customer-7-sees-nothing")
    finally:
        other.close()
    watch.assert_clean(pg)


FAKE_CONVERSATION = "conv_01JFEEDTEST0000000000000000"
HOSTILE_USER_TEXT = '<img src=x onerror="window.__pwned = 1">'
HOSTILE_REPLY_TEXT = "<b>bold</b> & <script>window.__pwned = 2</script> done"


def _event(kind: str, n: int, turn_id: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"cursor": f"c{n}", "type": kind, "at": f"2026-01-01T00:00:{n:02d}.000Z", "turnId": turn_id, **fields}


def _refund(approval_id: str | None, order_id: int, cents: int, status: str) -> dict[str, Any]:
    return {
        "approvalId": approval_id,
        "refundId": None,
        "orderId": order_id,
        "amountCents": cents,
        "currency": "USD",
        "status": status,
    }


def test_feed_text_quiet_tool_calls_every_decision_and_backoff(
    local_stack: LocalStack, page: tuple[Any, Any], screenshot: Callable[[Any, str], Path]
) -> None:
    """The page against a scripted feed (the rest of the API is the stack's): an old turn caught up is not shown
    again; a 429 waits its Retry-After; a turn from elsewhere with quiet tool calls (names only) and hostile text
    (shown as text); each decision's wording; and no poll once nothing is pending."""
    from playwright.sync_api import Route, expect

    pg, watch = page
    pg.add_init_script("window.SUPPORT_AGENT_WEBSOCKET = false")  # the long poll is what this tests
    refunds = [
        ("apr_A", 1042, 12000, "REFUNDED"),
        ("apr_B", 1044, 16000, "REJECTED"),
        ("apr_C", 1042, 6000, "EXPIRED"),
        ("apr_D", 1044, 7000, "FAILED"),
        ("apr_E", 1043, 5100, "RELEASED"),
    ]
    pending = [_refund(a, o, c, "PENDING_APPROVAL") for a, o, c, _ in refunds] + [
        _refund(None, 1043, 2500, "REFUND_IN_PROGRESS")
    ]
    final = [_refund(a, o, c, s) for a, o, c, s in refunds] + [_refund(None, 1043, 2500, "REFUNDED")]
    views = 0
    old, other = "turn_01OLD", "turn_01ELSEWHERE"
    pages: list[tuple[int, dict[str, Any]]] = [
        # the catch-up: a turn of the history (not shown again), then nothing more
        (
            200,
            {
                "events": [
                    _event("turn.started", 1, old),
                    _event("message", 1, old, role="user", text="Please refund my orders."),
                    _event("message", 2, old, role="assistant", text="They need a lead's approval."),
                    _event("turn.completed", 3, old, stopReason="end_turn", iterations=1),
                ],
                "nextCursor": "c3",
            },
        ),
        (200, {"events": [], "nextCursor": "c3"}),
        # live: rate limited once
        (429, {"error": {"code": "rate_limited", "message": "too many reads"}}),
        # a turn sent from another device, quiet (no tool input or result), with hostile text; a decision
        (
            200,
            {
                "events": [
                    _event("turn.started", 4, other),
                    _event("message", 4, other, role="user", text=HOSTILE_USER_TEXT),
                    # quiet: no tool name, input or result (feed.py QUIET_HIDES)
                    _event("tool.requested", 5, other, toolUseId="toolu_1"),
                    _event("tool.finished", 6, other, toolUseId="toolu_1", isError=False),
                    _event("message", 7, other, role="assistant", text=HOSTILE_REPLY_TEXT),
                    _event("turn.completed", 8, other, stopReason="end_turn", iterations=2, inputTokens=10),
                    _event(
                        "approval.decided",
                        9,
                        None,
                        approvalId="apr_A",
                        orderId=1042,
                        amountCents=12000,
                        status="REFUNDED",
                    ),
                ],
                "nextCursor": "c9",
            },
        ),
        # the other decisions, and a direct refund settled
        (
            200,
            {
                "events": [
                    _event("approval.decided", 10 + i, None, approvalId=a, orderId=o, amountCents=c, status=s)
                    for i, (a, o, c, s) in enumerate(refunds[1:])
                ]
                + [_event("refund.settled", 20, None, orderId=1043, amountCents=2500, status="REFUNDED")],
                "nextCursor": "c20",
            },
        ),
    ]
    polls: list[tuple[float, str]] = []

    def feed(route: Route) -> None:
        polls.append((time.monotonic(), route.request.url))
        status, body = pages.pop(0) if pages else (200, {"events": [], "nextCursor": "c20"})
        headers = {"Retry-After": "1"} if status == 429 else {}
        route.fulfill(status=status, json=body, headers=headers)

    def conversation(route: Route) -> None:
        nonlocal views
        views += 1
        view = {
            "conversationId": FAKE_CONVERSATION,
            "createdAt": "2026-01-01T00:00:00.000Z",
            "messages": [
                {"seq": 1, "role": "user", "createdAt": "2026-01-01T00:00:01.000Z", "text": "Please refund my orders."},
                {
                    "seq": 2,
                    "role": "assistant",
                    "createdAt": "2026-01-01T00:00:02.000Z",
                    "text": "They need a lead's approval.",
                },
            ],
            "refunds": pending if views == 1 else final,
        }
        route.fulfill(json=view)

    pg.route(re.compile(rf"/api/conversations/{FAKE_CONVERSATION}/events\?"), feed)
    pg.route(re.compile(rf"/api/conversations/{FAKE_CONVERSATION}$"), conversation)
    pg.goto(f"{local_stack.url}/")
    pg.evaluate(f"sessionStorage.setItem('supportAgent.conversationId', '{FAKE_CONVERSATION}')")
    pg.click("#signin-customer-7")
    expect(pg.locator("#conversation-id")).to_have_text(FAKE_CONVERSATION)

    lines = pg.locator(".refund-update")
    expect(lines).to_have_count(6)
    assert lines.evaluate_all(
        "els => els.map(e => [e.dataset.event, e.dataset.status, e.innerText.split('\\n').pop()])"
    ) == [
        ["approval.decided", "REFUNDED", "Your refund of $120.00 for order 1042 was approved and refunded."],
        [
            "approval.decided",
            "REJECTED",
            "Your refund of $160.00 for order 1044 was not approved; nothing was refunded.",
        ],
        [
            "approval.decided",
            "EXPIRED",
            "Your refund of $60.00 for order 1042 expired before a support lead decided; nothing was refunded.",
        ],
        [
            "approval.decided",
            "FAILED",
            "Your refund of $70.00 for order 1044 was approved, but the payment provider could not refund it; "
            "a support lead will retry or release it.",
        ],
        [
            "approval.decided",
            "RELEASED",
            "Your refund of $51.00 for order 1043 was released; "
            "nothing was refunded and the amount is available again.",
        ],
        [
            "refund.settled",
            "REFUNDED",
            "Your refund of $25.00 for order 1043 is complete: the payment provider refunded it.",
        ],
    ]
    expect(
        pg.locator(
            '#refunds .refund[data-status="PENDING_APPROVAL"], #refunds .refund[data-status="REFUND_IN_PROGRESS"]'
        )
    ).to_have_count(0)

    # The old turn once (from the history); the turn from elsewhere: its message, its quiet step, its answer.
    expect(pg.locator(".message.user")).to_have_count(2)
    expect(pg.locator(".message.user .message-text").last).to_have_text(HOSTILE_USER_TEXT)
    reply = pg.locator(f'.reply[data-turn-id="{other}"]')
    expect(reply.locator(".reply-text")).to_have_text(HOSTILE_REPLY_TEXT)
    step = reply.locator('.progress-step[data-tool-use-id="toolu_1"]')
    expect(step).to_have_attribute("data-state", "ok")
    expect(step.locator(".progress-label")).to_have_text("Ran a tool")
    expect(step.locator(".tool-name")).to_have_count(0)  # quiet: no name, and no "?" standing in for one
    quiet_call = pg.locator('.trace-call[data-tool-use-id="toolu_1"]')
    expect(quiet_call).to_have_count(1)
    expect(quiet_call.locator(".trace-input, .trace-result")).to_have_count(0)
    expect(quiet_call.locator(".tool-name")).to_have_text("a tool")
    assert pg.locator("#transcript img, #transcript b, #transcript script").count() == 0
    assert pg.evaluate("window.__pwned") is None
    screenshot(pg, "01-scripted-feed")

    # The 429 was waited out (Retry-After: 1); the catch-up asked without waiting, the live polls with 20 s.
    assert len(polls) == 5, polls
    assert polls[3][0] - polls[2][0] >= 0.95, polls
    assert ["waitSeconds=0" in url for _, url in polls] == [True, True, False, False, False], polls
    assert "after=c3" in polls[2][1] and "after=c9" in polls[4][1], polls
    # Nothing pending any more: no further poll.
    pg.wait_for_timeout(1500)
    assert len(polls) == 5, polls
    watch.settle(pg)
    rate_limited = [e for e in watch.errors if "status of 429" in e]  # the browser's own log line for the 429
    assert [e for e in watch.errors if e not in rate_limited] == [], watch.errors
