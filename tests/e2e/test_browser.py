"""The seed scenario in a real browser: chat as customer 7, see the trace, approve as lead-1, see REFUNDED.

Drives the pages `make dev` serves (web/index.html + chat.js, web/lead.html + lead.js) against the local stack
with the simulated model; the approval runs the refund state machine in moto. Screenshots of each step go to
tests/e2e/artifacts/ (not committed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devstack.local import LocalStack

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
    expect(pending_refund).to_have_attribute("data-status", "PENDING")
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
