"""`make demo`: the seed scenario against the real local stack (simulated model unless a key is set).

Prints each step the way a person would follow it: the chat turn with its tool calls, then the
lead's approval and its outcome, and the refund the payment provider made (the simulated Stripe's
``re_…`` id unless STRIPE_API_BASE and STRIPE_API_KEY name a real one). Then a person takes over a
conversation (``takeover``): Dana asks for a person, Riley (support staff) claims it and replies, Dana's
answer is kept for Riley (no model call), Riley hands back, and the model answers again.
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


def takeover(local: LocalStack, out: Any = print) -> dict[str, Any]:
    """The hand-off round trip over HTTP, as the chat page and the console make it (docs/API.md, hand-offs)."""
    customer, staff = local.tokens["customers"][0], local.tokens["staff"][0]
    dana = {"Authorization": f"Bearer {customer['token']}"}
    riley = {"Authorization": f"Bearer {staff['token']}"}
    client = httpx.Client(base_url=local.url, timeout=60)

    def say(message: str, conversation_id: str | None) -> dict[str, Any]:
        resp = client.post("/api/chat", json={"conversationId": conversation_id, "message": message}, headers=dana)
        body = resp.json()
        shown = body.get("reply") or {k: v for k, v in body.items() if k != "trace"}
        out(f"customer {customer['customerId']}: {message!r} -> {resp.status_code} {_short(shown, 200)}")
        return {**body, "httpStatus": resp.status_code}

    def act(verb: str, handoff_id: str, body: dict[str, Any] | None = None, key: str | None = None) -> Any:
        headers = {**riley, **({"Idempotency-Key": key} if key else {})}
        resp = client.post(f"/api/handoffs/{handoff_id}/{verb}", json=body or {}, headers=headers)
        out(f"POST /api/handoffs/{handoff_id}/{verb} ({staff['sub']}, {staff['name']}) -> {resp.status_code}")
        resp.raise_for_status()
        return resp.json()

    asked = say("Can I talk to a person, please?", None)
    cid = asked["conversationId"]
    queue = client.get("/api/handoffs?status=OPEN", headers=riley).json()["handoffs"]
    handoff_id = next((h["handoffId"] for h in queue if h["conversationId"] == cid), None)
    if handoff_id is None:  # a real model may answer instead of escalating
        out("the model did not hand the conversation to a person")
        return {"conversationId": cid, "handoffId": None, "kept": {"httpStatus": 0}, "after": {"httpStatus": 0}}
    act("claim", handoff_id)
    act("messages", handoff_id, {"message": "Hi, this is Riley from support. How can I help?"}, f"demo-{handoff_id}")
    kept = say("My socks from order 1043 arrived with a hole.", cid)
    handed = act("return", handoff_id, {"note": "A replacement for order 1043 is on its way."})
    after = say("Where is my order 1043?", cid)
    return {"conversationId": cid, "handoffId": handoff_id, "kept": kept, "handoff": handed, "after": after}


def handed_back(outcome: dict[str, Any]) -> bool:
    """The takeover ended as it should: the message to the person kept (202, no turn), the model answering after."""
    kept, after = outcome["kept"], outcome["after"]
    return (
        (kept["httpStatus"], kept.get("owner")) == (202, "person")
        and after["httpStatus"] == 200
        and bool(after["reply"])
    )


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
        print("\na person takes over a conversation, then hands it back:")
        if not handed_back(takeover(local)):
            ok = False
            print(
                "\nthe takeover did not keep the message for the person, or the model did not answer after", flush=True
            )
    finally:
        local.stop()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
