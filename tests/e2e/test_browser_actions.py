"""An action the customer confirms, in a real browser (issue 33): propose → Confirm → the outcome in the chat.

Dana (customer 7) asks to cancel her order 1045, which has not shipped (PROCESSING): the simulated model calls
cancel_order, which only proposes. The chat shows a card with the summary, the expiry and Confirm / Decline. Typing
"yes, confirmed" in the chat confirms nothing: the card still waits. She presses Confirm: the page POSTs
/api/conversations/{id}/proposals/{pid}/confirm with her token, and the card shows the outcome — the order
cancelled and refunded, once, at the simulated Stripe. Her page reloaded shows the decided card from the
conversation view, without buttons; a lookup of 1045 says it was cancelled. Then she asks to change the address
of 1043, which has shipped: the tool refuses, and the chat says why (no card). Screenshots go to
tests/e2e/artifacts/.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from devstack.local import LocalStack
from tests.e2e.conftest import PageWatch

REPLY_TIMEOUT_MS = 45_000  # a model turn through the worker processes
CANCEL = "Please cancel my order 1045."
TYPED_YES = "yes, confirmed"
ADDRESS = "Please change the address of order 1043 to Dana Whitfield, 5 Harbour Road, Leeds, LS1 4AB, GB"


def is_decision(response: Any) -> bool:
    return response.request.method == "POST" and "/proposals/" in response.url


def test_dana_cancels_an_unshipped_order_by_confirming_it(
    local_stack: LocalStack, page: tuple[Any, PageWatch], screenshot: Callable[[Any, str], Path]
) -> None:
    from playwright.sync_api import expect

    chat, watch = page
    assert local_stack.model is not None, "the simulated model"
    stripe = local_stack.stripe.stripe if local_stack.stripe is not None else None
    refunds_before = len(stripe.refunds()) if stripe is not None else 0

    # ---- Dana asks to cancel 1045: the model proposes; the card waits for her
    chat.goto(f"{local_stack.url}/")
    chat.click("#signin-customer-7")
    expect(chat.locator("#app")).to_be_visible()
    expect(chat.locator("body")).to_have_attribute("data-live", "socket")  # followed over the WebSocket
    chat.fill("#message", CANCEL)
    chat.click("#send")
    expect(chat.locator(".reply").last.locator(".reply-text")).to_contain_text("Confirm", timeout=REPLY_TIMEOUT_MS)
    expect(chat.locator('.trace-call[data-tool="cancel_order"]')).to_have_count(1)
    card = chat.locator(".proposal-card")
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-status", "PROPOSED")
    expect(card).to_have_attribute("data-action", "cancel_order")
    expect(card.locator(".proposal-summary")).to_contain_text("1045")
    expect(card.locator(".proposal-expiry time")).to_have_count(1)
    expect(card.locator("button.proposal-confirm")).to_be_enabled()
    expect(card.locator("button.proposal-decline")).to_be_enabled()
    proposal_id = card.get_attribute("data-proposal-id")
    assert proposal_id and proposal_id.startswith("prp_"), proposal_id
    conversation_id = chat.locator("#conversation-id").inner_text()
    screenshot(chat, "01-proposed")

    # ---- "yes, confirmed" typed in the chat confirms nothing: the card still waits, nothing refunded
    chat.fill("#message", TYPED_YES)
    chat.click("#send")
    expect(chat.locator(".reply")).to_have_count(2, timeout=REPLY_TIMEOUT_MS)
    expect(card).to_have_attribute("data-status", "PROPOSED")
    dana = {"Authorization": f"Bearer {local_stack.tokens['customers'][0]['token']}"}
    view = httpx.get(f"{local_stack.url}/api/conversations/{conversation_id}", headers=dana, timeout=30).json()
    assert [(p["proposalId"], p["status"]) for p in view["proposals"]] == [(proposal_id, "PROPOSED")], view
    if stripe is not None:
        assert len(stripe.refunds()) == refunds_before

    # ---- Confirm: the answer updates the card with the outcome, once
    with chat.expect_response(is_decision) as decided:
        card.locator("button.proposal-confirm").click()
    assert decided.value.url.endswith(f"/api/conversations/{conversation_id}/proposals/{proposal_id}/confirm")
    assert decided.value.status == 200, decided.value.text()
    body = decided.value.json()
    assert (body["proposalId"], body["status"], body["action"]) == (proposal_id, "CONFIRMED", "cancel_order"), body
    assert isinstance(body["decidedPolicyVersion"], int) and body["outcome"], body
    expect(card).to_have_attribute("data-status", "CONFIRMED")
    expect(card.locator(".proposal-outcome")).to_be_visible()
    expect(card.locator(".proposal-outcome")).not_to_contain_text("Not done")
    expect(card.locator("button")).to_have_count(0)
    screenshot(chat, "02-confirmed")
    if stripe is not None:
        made = stripe.refunds()[refunds_before:]
        assert len(made) == 1 and made[0]["amount"] == 3200, made  # the order's total, refunded once
    # A second confirm (another tab, a resend) gets the first's outcome; nothing runs twice.
    again = httpx.post(decided.value.url, headers=dana, timeout=30)
    assert again.status_code == 200 and again.json()["outcome"] == body["outcome"], again.text
    if stripe is not None:
        assert len(stripe.refunds()) == refunds_before + 1

    # ---- reloaded: the decided card from the conversation view, no buttons; the model knows the order is cancelled
    watch.settle(chat)
    chat.reload()
    expect(chat.locator("#conversation-id")).to_have_text(conversation_id)
    expect(card).to_have_count(1)
    expect(card).to_have_attribute("data-status", "CONFIRMED")
    expect(card.locator("button")).to_have_count(0)
    chat.fill("#message", "Where is my order 1045 now?")
    chat.click("#send")
    expect(chat.locator(".reply").last.locator(".reply-text")).to_contain_text("cancelled", timeout=REPLY_TIMEOUT_MS)

    # ---- the address of 1043, which has shipped: refused, and the chat says why; no card
    chat.fill("#message", ADDRESS)
    chat.click("#send")
    last = chat.locator(".reply").last.locator(".reply-text")
    expect(last).to_contain_text("can't change the shipping address of order 1043", timeout=REPLY_TIMEOUT_MS)
    expect(chat.locator('.trace-call[data-tool="update_shipping_address"][data-error="true"]')).to_have_count(1)
    expect(card).to_have_count(1)
    screenshot(chat, "03-address-refused")
    assert watch.errors == [], watch.errors
