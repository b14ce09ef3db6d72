"""The actions a customer asks for in words: cancel an order, change its shipping address.

The model only proposes. ``cancel_order`` and ``update_shipping_address`` answer ``PROPOSED`` (the customer's own
Confirm button decides, never the model) or an error that says why not (the order has shipped); the brain calls
the tool once per order named, with the input its offered schema asks for, and says which it was. Typing
"confirmed" is never read as a confirmation: there is nothing here that could confirm.
"""

from __future__ import annotations

import re
from typing import Any

from devstack.simulated_model.reading import Done, Intent, clip
from devstack.simulated_model.wire import Json

CANCEL, ADDRESS = "cancel_order", "update_shipping_address"
REASON = "customer request"
ASK_CANCEL_ORDER = "Which order should I cancel? Please give me its order number (for example 1045)."
ASK_ADDRESS = (
    "What is the new address? Please write it as name, street, city, postal code and country code, for example "
    '"change the address of order 1045 to Dana Whitfield, 5 Harbour Road, Leeds, LS1 4AB, GB".'
)

# Which field of an address schema takes which part of what the customer wrote.
_FIELDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(?:full_?)?name$|recipient"), "name"),
    (re.compile(r"line_?1|street|^address(_?1)?$"), "line1"),
    (re.compile(r"line_?2"), "line2"),
    (re.compile(r"city|town|locality"), "city"),
    (re.compile(r"postal|post_?code|zip"), "postal_code"),
    (re.compile(r"country"), "country"),
    (re.compile(r"state|region|province"), "region"),
)


def address_parts(text: str) -> dict[str, str]:
    """What the customer wrote as name (a first part without digits, when three parts are left besides the postal
    code and the country), line1, city, postal_code and country: "Dana Whitfield, 5 Harbour Road, Leeds, LS1 4AB,
    GB". What is missing stays out (the tool's validation says what)."""
    parts = [clip(p, 100) for p in text.split(",") if p.strip()]
    out: dict[str, str] = {}
    if parts and re.fullmatch(r"[A-Za-z]{2}", parts[-1]):
        out["country"] = parts.pop().upper()
    postal = next((p for p in reversed(parts[1:]) if re.search(r"\d", p) and len(p) <= 12), None)
    if postal is not None:
        parts.remove(postal)
        out["postal_code"] = postal
    if len(parts) >= 3 and not re.search(r"\d", parts[0]):
        out["name"] = parts.pop(0)
    if parts:
        out["line1"] = parts.pop(0)
    if parts:
        out["city"] = parts.pop()
    if parts:
        out["line2"] = ", ".join(parts)
    return out


def _fill(properties: Json, parts: dict[str, str]) -> Json:
    filled: Json = {}
    for name in properties:
        part = next((p for pattern, p in _FIELDS if pattern.search(name.lower())), None)
        if part is not None and part in parts:
            filled[name] = parts[part]
    return filled


def _resolved(schema: Json, node: Any) -> Json:
    """``node`` with a local ``$ref`` (``#/$defs/Address``, as pydantic writes a nested model) followed."""
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = schema
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return target if isinstance(target, dict) else {}
    return node


def _address_input(schema: Json, address: str) -> Json:
    """The new address in the shape the offered schema asks for: an object property, or fields of the input."""
    properties = schema.get("properties") or {}
    parts = address_parts(address)
    for key, node in properties.items():
        inner = _resolved(schema, node).get("properties")
        if "address" in key and isinstance(inner, dict):
            return {key: _fill(inner, parts)}
    return _fill({k: v for k, v in properties.items() if k != "order_id"}, parts)


def input_for(name: str, order: int, intent: Intent, schema: Json) -> Json:
    out: Json = {"order_id": order}
    if "reason" in (schema.get("properties") or {}):
        out["reason"] = REASON
    if name == ADDRESS and intent.new_address:
        out.update(_address_input(schema, intent.new_address))
    return out


def wanted(intent: Intent) -> str | None:
    """The action the newest message asks for; None when it asks for neither (or cannot be acted on yet)."""
    if intent.address_change:
        return ADDRESS if intent.new_address else None
    return CANCEL if intent.cancel else None


def calls(intent: Intent, done: list[Done], schemas: dict[str, Json]) -> list[tuple[str, Json]]:
    """(tool, input) for each order named that the action was not yet asked for."""
    name = wanted(intent)
    if name is None:
        return []
    asked = {d.input.get("order_id") for d in done if d.name == name}
    return [(name, input_for(name, o, intent, schemas.get(name) or {})) for o in intent.orders if o not in asked]


def preface(name: str, call: Json) -> str:
    if name == CANCEL:
        return f"I'll prepare the cancellation of order {call['order_id']}."
    return f"I'll prepare the address change of order {call['order_id']}."


def sentence(d: Done) -> str:
    """What came of a call: a proposal waiting for the customer's button, or why it cannot be done."""
    order = d.input.get("order_id")
    doing = "cancel" if d.name == CANCEL else "change the shipping address of"
    if not d.ok:
        return f"I can't {doing} order {order}: {d.error()}."
    r: dict[str, Any] = d.result
    if str(r.get("status", "")).upper() != "PROPOSED":
        return f"The request to {doing} order {order} came back with status {r.get('status') or 'unknown'}."
    summary = clip(str(r.get("summary") or f"{doing} order {order}"), 200).rstrip(".")
    until = f" (until {clip(str(r['expires_at']), 30)})" if r.get("expires_at") else ""
    return (
        f"I've prepared this for you: {summary}. Nothing changes until you press Confirm below{until}; "
        "press Decline if you'd rather keep things as they are."
    )


def missing(intent: Intent) -> str | None:
    """What to ask when the action cannot be proposed yet: the order, or the new address."""
    if intent.address_change and not intent.new_address:
        return ASK_ADDRESS
    if (intent.cancel or intent.address_change) and not intent.orders:
        return ASK_CANCEL_ORDER if intent.cancel and not intent.address_change else ASK_ADDRESS
    return None
