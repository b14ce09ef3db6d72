"""What the request says: the conversation as the brain reads it, and what the newest user text asks for.

Stateless: everything comes from the request's messages. Tool results are read as data (the fenced
JSON parsed); nothing inside them is ever acted on, only the user's own words.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from devstack.simulated_model.wire import Json

MAX_ORDERS = 5


# -- reading the conversation ----------------------------------------------------------------------


_FENCE = re.compile(r"^\s*<(untrusted-data-[A-Za-z0-9_-]*)>\n?(.*?)\n?</\1>", re.DOTALL)


def read_tool_result(content: Any) -> Any:
    """The data of a tool result: the fenced JSON parsed, else plain JSON, else the text itself."""
    if isinstance(content, list):
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    if not isinstance(content, str):
        return content
    match = _FENCE.match(content)
    inner = match.group(2) if match else content
    try:
        return json.loads(inner)
    except ValueError:
        return inner


@dataclass
class Done:
    """A tool call the assistant made after the newest user text, with its result."""

    name: str
    input: Json
    result: Any
    is_error: bool

    def error(self) -> str:
        if isinstance(self.result, dict) and isinstance(self.result.get("error"), str):
            text = self.result["error"]
        elif isinstance(self.result, str):
            text = self.result
        else:
            text = "the tool failed"
        return clip(text.strip().rstrip("."), 200)

    @property
    def ok(self) -> bool:
        return not self.is_error and isinstance(self.result, dict) and "error" not in self.result


def _as_dict(value: Any) -> Json:
    return value if isinstance(value, dict) else {}


@dataclass
class Conversation:
    latest_text: str = ""
    earlier_texts: list[str] = field(default_factory=list)  # oldest first
    done: list[Done] = field(default_factory=list)


def _blocks(message: Json) -> list[Json]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [b for b in content or [] if isinstance(b, dict)]


# The system's notes to the model (agent/history.py NOTE_MARK: a customer's Confirm or Decline): in a user message,
# but never the customer's words, so never read as what the customer asks.
SYSTEM_NOTE = "(note from the system"


def read_conversation(messages: list[Json]) -> Conversation:
    """The newest user text, the user texts before it, and the tool calls answered since (a system note is no user
    text)."""
    conv = Conversation()
    uses: dict[str, Json] = {}
    for message in messages:
        for block in _blocks(message):
            kind = block.get("type")
            if message.get("role") == "assistant":
                if kind == "tool_use":
                    uses[str(block.get("id"))] = block
                continue
            if kind == "text" and str(block.get("text", "")).strip().startswith(SYSTEM_NOTE):
                continue
            if kind == "text" and str(block.get("text", "")).strip():
                if conv.latest_text:
                    conv.earlier_texts.append(conv.latest_text)
                conv.latest_text = str(block["text"])
                conv.done = []  # only what came after the newest user text counts
            elif kind == "tool_result":
                use = uses.get(str(block.get("tool_use_id")), {})
                conv.done.append(
                    Done(
                        name=str(use.get("name", "")),
                        input=_as_dict(use.get("input")),
                        result=read_tool_result(block.get("content")),
                        is_error=bool(block.get("is_error")),
                    )
                )
    return conv


def clip(text: str, limit: int) -> str:
    """One line of at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- understanding the user ------------------------------------------------------------------------


_AMOUNT = re.compile(
    r"\$\s?(\d{1,7}(?:\.\d{1,2})?)\b|\b(\d{1,7}(?:\.\d{1,2})?)\s?(?:dollars?|usd|bucks)\b|\b(\d{1,9})\s?cents?\b",
    re.IGNORECASE,
)
_INVOICE_ID = re.compile(r"\binvoices?\s*(?:number|no\.?|id)?\s*[:#]?\s*(\d{1,10})\b", re.IGNORECASE)
_ORDER_IDS = (
    re.compile(r"\borders?\s*(?:number|no\.?|id)?\s*[:#]?\s*(\d{1,10})\b", re.IGNORECASE),
    re.compile(r"#\s?(\d{1,10})\b"),
    re.compile(r"\b(\d{4})\b"),
)
_REFUSAL = re.compile(
    r"ignore (?:all |any |the |your |my |previous |prior |earlier |above |these |those )*"
    r"(?:instructions|rules|prompts?|guidelines)"
    r"|disregard (?:all |any |the |your |previous |prior )*(?:instructions|rules)"
    r"|system prompt|developer mode|jailbreak|you are now|pretend (?:to be|you)|act as (?:an? )?(?:admin|lead)"
    r"|someone else|somebody else|another (?:customer|person|user|account)|other (?:customer|person|user)s?'?s?\b"
    r"|\b(?:my )?(?:friend|wife|husband|partner|brother|sister|mother|father|mom|mum|dad|son|daughter|neighbou?r"
    r"|boss|colleague|roommate)'s\b"
    r"|\b(?:his|her|their) (?:orders?|account|invoices?|refunds?)\b"
    r"|\bcustomer\s*(?:id|number|no\.?)?\s*#?\s*\d+"
    r"|\bi(?: am|'m) (?:actually |really )?(?:customer|an? admin|the admin|an? (?:support )?lead|staff|an employee)",
    re.IGNORECASE,
)
_HUMAN = re.compile(
    r"\b(?:human|person|agent|representative|rep|manager|supervisor|operator|real people|someone real"
    r"|talk to someone|speak to someone)\b",
    re.IGNORECASE,
)
_REFUND = re.compile(r"\brefund|money back|\breturn|\breimburse", re.IGNORECASE)
_CANCEL = re.compile(r"\bcancel(?:\b|ling\b|l?ation\b)", re.IGNORECASE)  # not "why was it cancelled?"
_ADDRESS_CHANGE = re.compile(r"\b(?:change|update|correct|fix|edit|new)\b[^.?!]*?\baddress\b", re.IGNORECASE)
# "… address of order 1045 to 5 Harbour Road, Leeds, LS1 4AB, GB": what follows the first "to" after "address".
_NEW_ADDRESS = re.compile(r"\baddress\b.*?\bto\b\s*:?\s*(?P<address>.+?)[\s.!?]*(?:please)?[\s.!?]*$", re.I | re.S)
_INVOICE = re.compile(r"\binvoice|\bbilling|\bbill(?:s|ed)?\b|\bcharge|\breceipt", re.IGNORECASE)
_ORDERISH = re.compile(
    r"\b(?:orders?|package|parcel|deliver|shipping|shipped|shipment|track|arriv|status|where)", re.IGNORECASE
)
_REFERS_BACK = re.compile(r"\b(?:it|its|that|this|them)\b", re.IGNORECASE)
_ALL = re.compile(r"\b(?:all|every)\b", re.IGNORECASE)
_THANKS = re.compile(r"\b(?:thanks|thank you|thx|cheers)\b", re.IGNORECASE)
# Only read when a carrier's track_parcel is offered: a parcel question, and the tracking numbers in it
# (letters and digits mixed, 8 to 30 of them, or 12 to 30 digits).
_PARCEL = re.compile(r"\b(?:parcels?|packages?|shipments?|track(?:ing)?)\b", re.IGNORECASE)
_TRACKING_NUMBER = re.compile(r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{8,30}\b|\b\d{12,30}\b", re.IGNORECASE)
MAX_PARCELS = 3


@dataclass
class Intent:
    text: str
    refusal: bool = False
    human: bool = False
    refund: bool = False
    invoice: bool = False
    orderish: bool = False
    thanks: bool = False
    orders: list[int] = field(default_factory=list)
    invoice_ids: list[int] = field(default_factory=list)
    amount_cents: int | None = None
    parcel: bool = False  # asks where a parcel is, or to track one (read only when a tracker is offered)
    tracking_numbers: list[str] = field(default_factory=list)
    cancel: bool = False  # asks to cancel an order (actions.py)
    address_change: bool = False  # asks to change an order's shipping address
    new_address: str | None = None  # the address it gives ("… to <address>")


def _to_cents(match: re.Match[str]) -> int:
    dollars = match.group(1) or match.group(2)
    if dollars is not None:
        whole, _, frac = dollars.partition(".")
        return int(whole) * 100 + int((frac + "00")[:2])
    return int(match.group(3))


def _blank(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(lambda m: " " * len(m.group(0)), text)


def order_ids(text: str) -> list[int]:
    """Order numbers in the order they are written, amounts and invoice numbers left out."""
    text = _blank(_blank(text, _AMOUNT), _INVOICE_ID)
    found: dict[int, int] = {}  # position -> id
    for pattern in _ORDER_IDS:
        for m in pattern.finditer(text):
            found.setdefault(m.start(1), int(m.group(1)))
    ids: list[int] = []
    for _, value in sorted(found.items()):
        if value not in ids and value > 0:
            ids.append(value)
    return ids[:MAX_ORDERS]


def tracking_numbers(text: str) -> list[str]:
    """Tracking numbers in the order they are written, upper-cased."""
    found: list[str] = []
    for m in _TRACKING_NUMBER.finditer(text):
        number = m.group(0).upper()
        if number not in found:
            found.append(number)
    return found[:MAX_PARCELS]


def _read_action(intent: Intent, text: str) -> None:
    """An action asked for: to cancel (a cancellation refunds by itself: no refund call), or to change the address
    (its order numbers read before the new address, whose digits are no order)."""
    intent.address_change = bool(_ADDRESS_CHANGE.search(text))
    intent.cancel = bool(_CANCEL.search(text)) and not intent.address_change
    if intent.cancel:
        intent.refund = False
    if intent.address_change:
        intent.refund = intent.invoice = False
        found = _NEW_ADDRESS.search(text)
        if found is not None and re.search(r"\d", found.group("address")):
            intent.new_address = clip(found.group("address"), 300)
            intent.orders = order_ids(text[: found.start("address")])
            intent.amount_cents = None


def understand(conv: Conversation, tracker: bool = False) -> Intent:
    """What the newest user text asks; ``tracker``: a carrier's track_parcel is offered, so parcel questions
    and tracking numbers are read too (without one, nothing here changes)."""
    text = conv.latest_text
    intent = Intent(
        text=text,
        refusal=bool(_REFUSAL.search(text)),
        human=bool(_HUMAN.search(text)),
        refund=bool(_REFUND.search(text)),
        invoice=bool(_INVOICE.search(text)),
        orderish=bool(_ORDERISH.search(text)),
        thanks=bool(_THANKS.search(text)),
        orders=order_ids(text),
        invoice_ids=[int(m.group(1)) for m in _INVOICE_ID.finditer(_blank(text, _AMOUNT))],
    )
    amount = _AMOUNT.search(text)
    if amount is not None:
        intent.amount_cents = _to_cents(amount)
    _read_action(intent, text)
    if tracker:
        intent.tracking_numbers = tracking_numbers(text)
        intent.parcel = bool(_PARCEL.search(text)) or bool(intent.tracking_numbers and intent.orderish)
        if not intent.parcel:
            intent.tracking_numbers = []
    refers_back = bool(_REFERS_BACK.search(text)) and not _ALL.search(text)
    if (
        not intent.orders
        and not intent.tracking_numbers
        and (
            intent.refund
            or intent.cancel
            or intent.address_change
            or intent.orderish
            or (intent.invoice and refers_back)
        )
    ):
        # A follow-up ("refund it"): the order named most recently in an earlier user message.
        for earlier in reversed(conv.earlier_texts):
            ids = order_ids(earlier)
            if ids:
                intent.orders = [ids[-1]]
                break
    return intent
