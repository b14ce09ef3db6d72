"""`make demo`: the seed scenario against the real local stack (simulated model unless a key is set).

Prints each step the way a person would follow it: the chat turn with its tool calls, then the
lead's approval and its outcome, and the refund the payment provider made (the simulated Stripe's
``re_…`` id unless STRIPE_API_BASE and STRIPE_API_KEY name a real one). Then a person takes over a
conversation (``takeover``): Dana asks for a person, Riley (support staff) claims it and replies, Dana's
answer is kept for Riley (no model call), Riley hands back, and the model answers again. Then an action the
customer confirms (``actions``): Dana asks to cancel her unshipped order 1045, the model proposes it, her Confirm
(the request her own token makes, never the model) cancels it and refunds it once at the simulated Stripe; she asks
to change the address of 1043, which has shipped, and is told why not.
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


CANCEL = "Please cancel my order 1045."
NEW_ADDRESS = "Please change the address of order 1043 to Dana Whitfield, 5 Harbour Road, Leeds, LS1 4AB, GB"


def _calls(turn: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [c for it in turn.get("trace") or [] for c in it["toolCalls"] if c["name"] == name]


def actions(local: LocalStack, out: Any = print) -> dict[str, Any]:
    """Propose → Confirm over HTTP, as the chat page's buttons make it (docs/API.md, proposals); then an action the
    policy refuses (the address of a shipped order)."""
    customer = local.tokens["customers"][0]
    dana = {"Authorization": f"Bearer {customer['token']}"}
    client = httpx.Client(base_url=local.url, timeout=60)
    stripe = local.stripe.stripe if local.stripe is not None else None
    refunds_before = len(stripe.refunds()) if stripe is not None else 0

    def say(message: str, conversation_id: str | None) -> dict[str, Any]:
        resp = client.post("/api/chat", json={"conversationId": conversation_id, "message": message}, headers=dana)
        turn = resp.json()
        out(f"customer {customer['customerId']}: {message!r} -> {resp.status_code} {_short(turn.get('reply'), 300)}")
        return turn

    asked = say(CANCEL, None)
    cid = asked.get("conversationId")
    proposed = [c["result"] for c in _calls(asked, "cancel_order") if isinstance(c["result"], dict)]
    result: dict[str, Any] = {"proposed": proposed[0] if proposed else None, "confirmed": None, "again": None}
    if not proposed or proposed[0].get("status") != "PROPOSED":
        out(f"the model did not propose the cancellation: {_short(proposed, 300)}")
        return {**result, "refunds": [], "address": {}}
    out(f"proposed {proposed[0]['proposal_id']}: {proposed[0].get('summary')} (until {proposed[0].get('expires_at')})")
    path = f"/api/conversations/{cid}/proposals/{proposed[0]['proposal_id']}/confirm"
    for key in ("confirmed", "again"):  # the second confirm is answered with the first's outcome
        resp = client.post(path, headers=dana)
        result[key] = resp.json()
        out(f"POST {path} -> {resp.status_code} {_short(result[key], 400)}")
    made = stripe.refunds()[refunds_before:] if stripe is not None else []
    for refund in made:
        out(f"simulated Stripe holds {refund['id']}: {refund['amount']} {refund['currency']} ({refund['status']})")
    address = say(NEW_ADDRESS, cid)
    for call in _calls(address, "update_shipping_address"):
        out(f"  update_shipping_address {_short(call['input'])} -> {_short(call['result'], 300)}")
    # Every decision names the policy version it applied: the tool calls' rows and the proposal's own stream.
    lead = {"Authorization": f"Bearer {local.tokens['leads'][0]['token']}"}
    rows = client.get("/api/audit", params={"conversationId": cid}, headers=lead).json().get("records", [])
    decisions = [r for r in rows if r.get("action") == "tool_call" or r.get("proposalId")]
    versions = sorted({r.get("policyVersion") for r in decisions}, key=str)
    out(f"audit: {len(decisions)} decision rows, policy versions {versions}")
    return {**result, "refunds": made, "address": address, "stripe": stripe is not None, "decisions": decisions}


def acted(outcome: dict[str, Any]) -> bool:
    """The cancellation confirmed and done (not refused), a second confirm answered alike, refunded once at the
    simulated Stripe (when it runs), and the shipped order's address change refused with a reason."""
    confirmed, again = outcome["confirmed"] or {}, outcome["again"] or {}
    changed = _calls(outcome["address"], "update_shipping_address")
    return (
        confirmed.get("status") == "CONFIRMED"
        and (confirmed.get("outcome") or {}).get("status") != "REFUSED"
        and again.get("outcome") == confirmed.get("outcome")
        and (not outcome.get("stripe") or len(outcome["refunds"]) == 1)
        and bool(changed)
        and all(c["isError"] for c in changed)
        and "can't change" in str(outcome["address"].get("reply", ""))
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
        print("\nan action the customer confirms: cancel an unshipped order; then an address change refused:")
        if not acted(actions(local)):
            ok = False
            print("\nthe cancellation was not confirmed and refunded once, or the address change was not refused")
    finally:
        local.stop()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
