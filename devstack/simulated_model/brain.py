"""The deterministic brain: from what the request says, the tool calls a sensible support agent makes next,
or the answer once there is nothing left to call.

The rules (a refusal first; a person; orders, refunds and invoices; then an answer) are listed in the
package's docstring. Every text starts with ``LABEL`` so nobody mistakes it for a real model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devstack.simulated_model import actions
from devstack.simulated_model.reading import Done, Intent, clip, read_conversation, understand
from devstack.simulated_model.wire import Json

LABEL = "[simulated model] "
REFUND_REASON = "customer request"
# An outside carrier's tracking tool, as the MCP client offers it: ``<server>__track_parcel``.
TRACKER_SUFFIX = "__track_parcel"


# -- deciding ----------------------------------------------------------------------------------------


@dataclass
class Call:
    name: str
    input: Json


def _find(done: list[Done], name: str, order_id: int | None) -> Done | None:
    for d in reversed(done):
        if d.name == name and d.input.get("order_id") == order_id:
            return d
    return None


def _tracked(done: list[Done], name: str, number: str) -> Done | None:
    return next((d for d in reversed(done) if d.name == name and d.input.get("tracking_number") == number), None)


def plan(
    intent: Intent, done: list[Done], tracker: str | None = None, schemas: dict[str, Json] | None = None
) -> list[Call]:
    """The tool calls still wanted whose prerequisites are met (empty: time to answer); ``tracker``: the
    offered ``<server>__track_parcel``, called for each tracking number of a parcel question; ``schemas``: the
    offered tools' input schemas (an action's input is built to its schema: actions.py)."""
    if intent.refusal:
        return []
    if intent.human:
        if any(d.name == "escalate_to_human" for d in done):
            return []
        return [Call("escalate_to_human", {"reason": clip(f"Customer asked for a person: {intent.text}", 500)})]
    if intent.cancel or intent.address_change:
        return [Call(name, given) for name, given in actions.calls(intent, done, schemas or {})]
    calls: list[Call] = []
    if tracker is not None:
        for number in intent.tracking_numbers:
            if _tracked(done, tracker, number) is None:
                calls.append(Call(tracker, {"tracking_number": number}))
    single = len(intent.orders) == 1
    for order in intent.orders:
        if not intent.refund and intent.invoice:
            break  # only the invoices were asked about
        looked = _find(done, "lookup_order", order)
        if looked is None:
            calls.append(Call("lookup_order", {"order_id": order}))
            continue
        if not intent.refund or not looked.ok or _find(done, "request_refund", order) is not None:
            continue
        amount = intent.amount_cents if (intent.amount_cents and single) else looked.result.get("refundable_cents")
        if isinstance(amount, int) and not isinstance(amount, bool) and amount > 0:
            calls.append(Call("request_refund", {"order_id": order, "amount_cents": amount, "reason": REFUND_REASON}))
    if intent.invoice:
        scopes: list[int | None] = list(intent.orders) if intent.orders and not intent.invoice_ids else [None]
        for scope in scopes:
            if _find(done, "list_invoices", scope) is None:
                calls.append(Call("list_invoices", {} if scope is None else {"order_id": scope}))
    return calls


# -- answering -----------------------------------------------------------------------------------------


HELP = (
    "Hello! I'm the shop's support assistant (a simulated model for local development). I can check "
    'an order\'s status (for example "Where is my order 1042?"), list your invoices, request a refund, '
    "or hand you over to a human teammate. What can I do for you?"
)
THANKS = "You're welcome! Is there anything else I can help with: an order, an invoice or a refund?"
REFUSAL = (
    "Sorry, I can't help with that. I can only help with your own orders, invoices and refunds, and "
    "I keep to my instructions. Is there something about your own account I can help with?"
)
ASK_ORDER = "Which order do you mean? Please give me its order number (for example 1042)."
ASK_TRACKING = (
    "Which parcel do you mean? Please give me its tracking number (for example CR10430001), "
    "or the order number it belongs to."
)
ASK_REFUND_ORDER = "Which order should I refund? Please give me its order number (for example 1042)."
UNFINISHED = "I couldn't finish checking everything in this message; please ask me again."
_STATUS = {
    "DELIVERED": "was delivered",
    "SHIPPED": "has shipped and is on its way",
    "PROCESSING": "is being processed and hasn't shipped yet",
    "CANCELLED": "was cancelled",
    "CANCELED": "was cancelled",
}


def money(cents: Any, currency: Any = "USD") -> str:
    if isinstance(cents, bool) or not isinstance(cents, int):
        return "an unknown amount"
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d} {currency if isinstance(currency, str) else 'USD'}"


def _order_sentence(order_id: Any, r: Json) -> str:
    status = str(r.get("status", "UNKNOWN"))
    phrase = _STATUS.get(status.upper(), f"has status {status}")
    names = [str(i.get("name", "")) for i in r.get("items", []) if isinstance(i, dict) and i.get("name")]
    items = f" ({clip(', '.join(names[:3]), 80)})" if names else ""
    currency = r.get("currency", "USD")
    text = (
        f"Order {r.get('order_id', order_id)}{items} {phrase}; the total was {money(r.get('total_cents'), currency)}."
    )
    if r.get("refunded_cents"):
        text += f" {money(r['refunded_cents'], currency)} has already been refunded."
    if r.get("pending_refund_cents"):
        text += f" A refund of {money(r['pending_refund_cents'], currency)} is waiting for approval."
    return text


def _refund_sentence(d: Done) -> str:
    order = d.input.get("order_id")
    if not d.ok:
        return f"I couldn't request the refund on order {order}: {d.error()}."
    r = d.result
    amount = money(r.get("amount_cents", d.input.get("amount_cents")), r.get("currency", "USD"))
    status = str(r.get("status", ""))
    if status == "REFUNDED":
        return f"I've refunded {amount} on order {order}; it goes back to your original payment method."
    if status == "PENDING_APPROVAL":
        ref = f" (reference {r['approval_id']})" if isinstance(r.get("approval_id"), str) else ""
        return (
            f"The refund of {amount} on order {order} needs a teammate's approval{ref}; "
            "you'll be told the outcome once a support lead has decided."
        )
    if status == "REFUND_IN_PROGRESS":
        return f"The refund of {amount} on order {order} is with the payment provider and will complete shortly."
    return f"The refund request of {amount} on order {order} came back with status {status or 'unknown'}."


def _invoice_sentence(d: Done, intent: Intent) -> str:
    order = d.input.get("order_id")
    if not d.ok:
        return f"I couldn't list the invoices: {d.error()}."
    invoices = [i for i in d.result.get("invoices", []) if isinstance(i, dict)]
    parts: list[str] = []
    if intent.invoice_ids:
        by_id = {i.get("invoice_id"): i for i in invoices}
        invoices = [by_id[n] for n in intent.invoice_ids if n in by_id]
        parts += [f"I couldn't find invoice {n}." for n in intent.invoice_ids if n not in by_id]
        if not invoices:
            return " ".join(parts)
    scope = f" for order {order}" if order is not None else ""
    if not invoices:
        return f"I found no invoices{scope}." if scope else "You have no invoices yet."
    listed = "; ".join(
        f"#{i.get('invoice_id')} for order {i.get('order_id')}: "
        + money(i.get("amount_cents"), i.get("currency", "USD"))
        + (f", {str(i['status']).lower()}" if i.get("status") else "")
        + (f", issued {str(i['issued_at'])[:10]}" if i.get("issued_at") else "")
        for i in invoices
    )
    noun = "invoice" if len(invoices) == 1 else "invoices"
    return " ".join([f"I found {len(invoices)} {noun}{scope}: {listed}.", *parts])


_PARCEL_STATUS = {
    "LABEL_CREATED": "has a shipping label but hasn't been handed to the carrier yet",
    "IN_TRANSIT": "is on its way",
    "OUT_FOR_DELIVERY": "is out for delivery",
    "DELIVERED": "was delivered",
    "CANCELLED": "was cancelled",
    "EXCEPTION": "is held up at the carrier",
}


def parcel_of(result: Any) -> Json | None:
    """The carrier's answer as a dict: the structured payload, or the JSON of its text (as the client may
    pass the whole MCP result, or its text content, through the fence)."""
    if isinstance(result, dict) and isinstance(result.get("structuredContent"), dict):
        return dict(result["structuredContent"])
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        result = "".join(str(b.get("text", "")) for b in result["content"] if isinstance(b, dict))
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            return None
    return result if isinstance(result, dict) else None


def _parcel_sentence(d: Done) -> str:
    """What the carrier said, from the fields a tracking answer has; anything else in it is not repeated."""
    number = clip(str(d.input.get("tracking_number", "")), 40)
    parcel = parcel_of(d.result)
    if parcel is None or d.is_error or "error" in parcel:
        error = clip(str(parcel.get("error")), 200) if parcel and parcel.get("error") else d.error()
        if "no parcel" in error.lower() or "not found" in error.lower():
            return f"I couldn't find parcel {number} on your account; please check the tracking number."
        return f"I couldn't track parcel {number} just now: {error}."
    status = str(parcel.get("status", "UNKNOWN"))
    order = f" (order {parcel['order_id']})" if isinstance(parcel.get("order_id"), int) else ""
    text = f"Parcel {number}{order} {_PARCEL_STATUS.get(status.upper(), f'has carrier status {clip(status, 40)}')}"
    last = parcel.get("last_event")
    event: Json = last if isinstance(last, dict) else {}
    if status.upper() == "DELIVERED" and parcel.get("delivered_on"):
        text += f" on {clip(str(parcel['delivered_on']), 20)}"
    elif event.get("description"):
        where = f" in {clip(str(event['location']), 60)}" if event.get("location") else ""
        when = f" on {str(event['at'])[:10]}" if event.get("at") else ""
        text += f"; last scan: {clip(str(event['description']).rstrip('.'), 80)}{where}{when}"
    if status.upper() != "DELIVERED" and parcel.get("estimated_delivery"):
        text += f"; expected delivery {clip(str(parcel['estimated_delivery']), 20)}"
    return text + "."


def _done_sentence(d: Done, intent: Intent) -> str:
    if d.name.endswith(TRACKER_SUFFIX):
        return _parcel_sentence(d)
    if d.name == "lookup_order":
        order = d.input.get("order_id")
        if d.ok:
            return _order_sentence(order, d.result)
        error = d.error()
        if "not found" in error.lower():
            return f"I couldn't find order {order} on your account."
        return f"I couldn't look up order {order}: {error}."
    if d.name == "request_refund":
        return _refund_sentence(d)
    if d.name in (actions.CANCEL, actions.ADDRESS):
        return actions.sentence(d)
    if d.name == "list_invoices":
        return _invoice_sentence(d, intent)
    if d.name == "escalate_to_human":
        if not d.ok:
            return f"I couldn't reach a teammate just now ({d.error()}); please try again shortly."
        if d.result.get("status") == "HANDOFF_ALREADY_OPEN":
            return "A support teammate already has this conversation and will follow up with you here."
        return "I've passed this conversation to a support teammate; they will follow up with you here."
    return f"The {d.name or 'unknown'} step failed: {d.error()}." if not d.ok else f"I ran {d.name}."


def answer(intent: Intent, done: list[Done], unfinished: bool) -> str:
    if intent.refusal and not done:
        return LABEL + REFUSAL
    sentences = [_done_sentence(d, intent) for d in done]
    if intent.refund:
        for order in intent.orders:
            looked = _find(done, "lookup_order", order)
            if (
                looked is not None
                and looked.ok
                and _find(done, "request_refund", order) is None
                and not looked.result.get("refundable_cents")
            ):
                sentences.append(f"There is nothing left to refund on order {order}.")
    if unfinished:
        sentences.append(UNFINISHED)
    if not sentences and actions.missing(intent):
        sentences.append(str(actions.missing(intent)))
    if not sentences:
        if intent.refund and not intent.orders:
            sentences.append(ASK_REFUND_ORDER)
        elif intent.parcel and not intent.orders and not intent.tracking_numbers:
            sentences.append(ASK_TRACKING)
        elif intent.orderish and not intent.orders and not intent.invoice:
            sentences.append(ASK_ORDER)
        elif intent.thanks:
            sentences.append(THANKS)
        else:
            sentences.append(HELP)
    return LABEL + " ".join(sentences)


def _preface(calls: list[Call]) -> str:
    said: list[str] = []
    for call in calls:
        if call.name == "lookup_order":
            said.append(f"Let me look up order {call.input['order_id']}.")
        elif call.name == "request_refund":
            said.append(
                f"I'll request a refund of {money(call.input['amount_cents'])} on order {call.input['order_id']}."
            )
        elif call.name == "list_invoices":
            order = call.input.get("order_id")
            said.append(f"Let me check the invoices for order {order}." if order else "Let me check your invoices.")
        elif call.name in (actions.CANCEL, actions.ADDRESS):
            said.append(actions.preface(call.name, call.input))
        elif call.name == "escalate_to_human":
            said.append("I'll hand this over to a support teammate.")
        elif call.name.endswith(TRACKER_SUFFIX):
            said.append(f"Let me track parcel {call.input['tracking_number']}.")
    return LABEL + " ".join(dict.fromkeys(said))


def decide(body: Json) -> tuple[str, list[Call]]:
    """What the model says and which tools it calls, from the request alone."""
    conv = read_conversation([m for m in body["messages"] if isinstance(m, dict)])
    offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    schemas = {
        str(t.get("name")): t.get("input_schema") or {}
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("input_schema") or {}, dict)
    }
    tracker = next((n for n in sorted(offered, key=str) if isinstance(n, str) and n.endswith(TRACKER_SUFFIX)), None)
    intent = understand(conv, tracker=tracker is not None)
    choice = body.get("tool_choice") or {}
    wanted = plan(intent, conv.done, tracker, schemas)
    if choice.get("type") == "none":
        allowed: list[Call] = []
    else:
        allowed = [c for c in wanted if c.name in offered]
        if choice.get("type") == "tool":
            allowed = [c for c in allowed if c.name == choice.get("name")]
        if choice.get("disable_parallel_tool_use"):
            allowed = allowed[:1]
    if allowed:
        return _preface(allowed), allowed
    return answer(intent, conv.done, unfinished=bool(wanted)), []
