"""`make demo`: the seed scenario against the real local stack (simulated model unless a key is set).

Prints each step the way a person would follow it: the chat turn with its tool calls, then the
lead's approval and its outcome, and the refund the payment provider made (the simulated Stripe's
``re_…`` id unless STRIPE_API_BASE and STRIPE_API_KEY name a real one).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from devstack.local import LocalStack, start
from devstack.parameters import from_command_line


def _short(value: Any, limit: int = 140) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run(local: LocalStack, out: Any = print) -> dict[str, Any]:
    customer = local.tokens["customers"][0]
    lead = local.tokens["leads"][0]
    client = httpx.Client(base_url=local.url, timeout=60)
    message = "Where is my order 1042? Also refund it."
    body = {"conversationId": None, "message": message}
    out(f"POST /api/chat {_short(body)}  (customer {customer['customerId']})")
    resp = client.post("/api/chat", json=body, headers={"Authorization": f"Bearer {customer['token']}"})
    turn = resp.json()
    approval_id = None
    for it in turn.get("trace", []):
        calls = it["toolCalls"]
        line = f"[iter {it['iteration']}] stop_reason={it['stopReason']}"
        for call in calls:
            line += f"  {call['name']} {_short(call['input'])} -> {_short(call['result'])}"
            if isinstance(call["result"], dict) and call["result"].get("approval_id"):
                approval_id = call["result"]["approval_id"]
        out(line)
    out(f"{resp.status_code} {_short({k: v for k, v in turn.items() if k != 'trace'}, 400)}")
    result: dict[str, Any] = {"turn": turn, "approval": None}
    if approval_id:
        auth = {"Authorization": f"Bearer {lead['token']}"}
        resp = client.post(f"/api/approvals/{approval_id}/approve", headers=auth)
        approval = resp.json()
        out(f"POST /api/approvals/{approval_id}/approve ({lead['sub']}) -> {resp.status_code} {_short(approval, 300)}")
        deadline = time.monotonic() + 30
        while approval.get("status") not in ("REFUNDED", "FAILED") and time.monotonic() < deadline:
            time.sleep(0.5)
            approval = client.get(f"/api/approvals/{approval_id}", headers=auth).json()
            out(f"GET /api/approvals/{approval_id} -> {approval.get('status')}")
        result["approval"] = approval
        refund = approval.get("refund") or {}
        if refund.get("refundId"):
            out(f"refund at {refund.get('provider')}: {refund['refundId']} ({refund.get('status')})")
        if local.stripe is not None:
            # Its webhooks for the refund go out after the API answer (as Stripe's do): let them land before the
            # stack stops, so the run ends with them delivered rather than refused by a closing gateway.
            webhooks = local.stripe.stripe.webhooks
            webhooks.wait(15)
            delivered = [d for d in webhooks.deliveries if d.delivered]
            out(f"webhooks delivered: {', '.join(f'{d.event_type} ({d.refund_status})' for d in delivered) or 'none'}")
            for made in local.stripe.stripe.refunds():
                amount = f"{made['amount']} {made['currency']}"
                out(f"simulated Stripe holds {made['id']}: {amount} on {made['payment_intent']} ({made['status']})")
    return result


def succeeded(outcome: dict[str, Any], provider: str) -> bool:
    """The demo ends REFUNDED, and with a provider refund id unless refunds are ledger-only."""
    approval = outcome["approval"]
    if approval is None:
        return True
    if approval.get("status") != "REFUNDED":
        return False
    return provider == "none" or bool((approval.get("refund") or {}).get("refundId"))


def main(argv: list[str] | None = None) -> None:
    parameters = from_command_line(argv, "python -m devstack.demo")
    local = start(
        port=int(os.environ.get("DEMO_PORT", "0")),
        moto_port=int(os.environ.get("DEMO_MOTO_PORT", "0")),
        parameters=parameters,
    )
    try:
        if local.simulated:
            print("(model: SIMULATED — set ANTHROPIC_API_KEY to use Claude)\n")
        outcome = run(local)
        ok = succeeded(outcome, local.stack.parameters.get("PaymentProvider", "none"))
        if not ok:
            print("\nthe demo did not end REFUNDED with the provider's refund id", flush=True)
    finally:
        local.stop()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
