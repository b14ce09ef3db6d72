"""A simulated model for the local stack: a small HTTP server speaking the Anthropic Messages API.

``make dev`` starts it when no ``ANTHROPIC_API_KEY`` is set, and points the real
``AnthropicClient`` at it, so the whole path (HTTP, headers, blocks, stop reasons, usage) runs
locally with no key and no network. It is *not* a language model: a few deterministic rules read
the request and decide what a sensible support agent would do next. Every text it writes starts
with ``[simulated model]`` so nobody mistakes it for the real thing.

The wire format follows the Messages API: ``POST /v1/messages`` with an API key (``x-api-key``,
or ``Authorization: Bearer``, which the official SDK sends) and an ``anthropic-version`` header;
a ``Message`` JSON answer, or with ``"stream": true`` the same message as server-sent events
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``);
errors as ``{"type": "error", "error": {"type", "message"}}``.
The official SDK parses all of it (``tests/unit/test_simulated_model.py``).

The rules (stateless: everything comes from the request's messages):

* It reads the newest user text and the tool results that came after it. Tool results are read as
  data (the fenced JSON is parsed); nothing inside them is ever acted on, only the user's words.
* A refusal comes first: someone else's account, or attempts to change its instructions.
* "human", "person", "agent", "representative"… → ``escalate_to_human``, then "a teammate will
  follow up".
* An order number ("order 1042", "#1042", any 4-digit number; in a follow-up without one, the
  order last named in an earlier user message) → ``lookup_order``; with "refund", "money back" or
  "return" → then ``request_refund`` for the stated amount ("$25", "25 dollars") or the order's
  ``refundable_cents``, reason "customer request".
* "invoice", "billing", "charge"… → ``list_invoices`` (for the order, if one was named).
* When there is nothing left to call: a text answer summarising the tool results. Anything else:
  a polite text saying what it can help with.
* Tools are only called when the request offers them, never with ``tool_choice`` ``none``.

It also speaks OpenAI chat completions (``POST /v1/chat/completions``, ``Authorization: Bearer``)
through a translation layer in front of the same rules, so the local stack runs with
``LLM_PROVIDER=openai`` too (``OPENAI_BASE_URL={url}/v1``).

Run it standalone with ``python -m devstack.simulated_model [--host H] [--port P]``.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

LABEL = "[simulated model] "
MAX_CACHE_CONTROL = 4
MAX_ORDERS = 5
REFUND_REASON = "customer request"
ALL_TOOLS = ("lookup_order", "list_invoices", "request_refund", "escalate_to_human")

Json = dict[str, Any]


# -- errors ------------------------------------------------------------------------------------


class ApiError(Exception):
    """An error answer in the Messages API's shape."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def body(self) -> Json:
        return {"type": "error", "error": {"type": self.error_type, "message": self.message}}


def _invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


# -- request validation --------------------------------------------------------------------------


def check_headers(headers: Mapping[str, str]) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    scheme, _, token = lowered.get("authorization", "").partition(" ")
    bearer = scheme.lower() == "bearer" and token.strip()
    if not lowered.get("x-api-key", "").strip() and not bearer:
        raise ApiError(401, "authentication_error", "x-api-key header is required")
    if not lowered.get("anthropic-version", "").strip():
        raise _invalid("anthropic-version: header is required")


def parse_body(raw: bytes) -> Json:
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _invalid(f"There was an issue with your request body: {exc}") from None
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.")
    validate(body)
    return body


def validate(body: Json) -> None:
    """The checks the real API makes that matter for a client of it; 400 on the first failure."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise _invalid("max_tokens: Field required (an integer >= 1)")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _invalid("stream: Input should be a valid boolean")
    system = body.get("system")
    system_ok = system is None or isinstance(system, str)
    if not system_ok and isinstance(system, list):
        system_ok = all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in system
        )
    if not system_ok:
        raise _invalid("system: Input should be a string or a list of text blocks")
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list):
            raise _invalid("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
                raise _invalid(f"tools.{i}.name: Field required")
            if tool["name"] in names:
                raise _invalid(f"tools: Tool names must be unique (duplicate: {tool['name']})")
            names.add(tool["name"])
            if "type" not in tool and not isinstance(tool.get("input_schema"), dict):
                raise _invalid(f"tools.{i}.input_schema: Field required")
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            raise _invalid("tool_choice: Input tag must be one of 'auto', 'any', 'tool', 'none'")
        if choice["type"] == "tool" and choice.get("name") not in names:
            raise _invalid("tool_choice.name: Tool not found in tools")
    _validate_messages(body.get("messages"))
    marks = sum(_count_cache_marks(body.get(k)) for k in ("system", "tools", "messages"))
    if marks > MAX_CACHE_CONTROL:
        raise _invalid(f"A maximum of {MAX_CACHE_CONTROL} blocks with cache_control may be provided. Found {marks}.")


def _validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages: Field required (a non-empty list)")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        last_assistant = i == len(messages) - 1 and message["role"] == "assistant"
        if isinstance(content, str):
            if not content and not last_assistant:
                raise _invalid(
                    f"messages.{i}: all messages must have non-empty content except for the optional final "
                    "assistant message"
                )
            continue
        if not isinstance(content, list):
            raise _invalid(f"messages.{i}.content: Input should be a valid string or list")
        if not content and not last_assistant:
            raise _invalid(
                f"messages.{i}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        for j, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _invalid(f"messages.{i}.content.{j}: Input should be a content block")
            kind = block["type"]
            if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
                raise _invalid(f"messages.{i}.content.{j}: text content blocks must be non-empty")
            if kind == "tool_use" and (
                message["role"] != "assistant"
                or not isinstance(block.get("id"), str)
                or not isinstance(block.get("name"), str)
                or not isinstance(block.get("input"), dict)
            ):
                raise _invalid(f"messages.{i}.content.{j}: invalid tool_use block")
            if kind == "tool_result" and (message["role"] != "user" or not isinstance(block.get("tool_use_id"), str)):
                raise _invalid(f"messages.{i}.content.{j}: invalid tool_result block")
    # Every tool_use is answered in the next message, and every tool_result answers the one before.
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        if message["role"] == "assistant":
            uses = [b["id"] for b in content if b["type"] == "tool_use"]
            if not uses:
                continue
            nxt = messages[i + 1]["content"] if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in nxt if isinstance(nxt, list) and b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                raise _invalid(
                    f"messages.{i + 1 if i + 1 < len(messages) else i}: `tool_use` ids were found without "
                    f"`tool_result` blocks immediately after: {', '.join(missing)}. Each `tool_use` block must "
                    "have a corresponding `tool_result` block in the next message."
                )
        else:
            prev = messages[i - 1] if i > 0 else None
            prev_content = prev["content"] if prev is not None and isinstance(prev["content"], list) else []
            known = {b.get("id") for b in prev_content if b.get("type") == "tool_use"}
            for j, block in enumerate(content):
                if block["type"] == "tool_result" and block["tool_use_id"] not in known:
                    raise _invalid(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block['tool_use_id']}. Each `tool_result` block must have a corresponding `tool_use` "
                        "block in the previous message."
                    )


def _count_cache_marks(value: Any) -> int:
    if isinstance(value, list):
        return sum(_count_cache_marks(v) for v in value)
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") is not None else 0
        return own + sum(_count_cache_marks(v) for k, v in value.items() if k != "cache_control")
    return 0


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
        return _clip(text.strip().rstrip("."), 200)

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


def read_conversation(messages: list[Json]) -> Conversation:
    """The newest user text, the user texts before it, and the tool calls answered since."""
    conv = Conversation()
    uses: dict[str, Json] = {}
    for message in messages:
        for block in _blocks(message):
            kind = block.get("type")
            if message.get("role") == "assistant":
                if kind == "tool_use":
                    uses[str(block.get("id"))] = block
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
_INVOICE = re.compile(r"\binvoice|\bbilling|\bbill(?:s|ed)?\b|\bcharge|\breceipt", re.IGNORECASE)
_ORDERISH = re.compile(
    r"\b(?:orders?|package|parcel|deliver|shipping|shipped|shipment|track|arriv|status|where)", re.IGNORECASE
)
_REFERS_BACK = re.compile(r"\b(?:it|its|that|this|them)\b", re.IGNORECASE)
_ALL = re.compile(r"\b(?:all|every)\b", re.IGNORECASE)
_THANKS = re.compile(r"\b(?:thanks|thank you|thx|cheers)\b", re.IGNORECASE)


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


def understand(conv: Conversation) -> Intent:
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
    refers_back = bool(_REFERS_BACK.search(text)) and not _ALL.search(text)
    if not intent.orders and (intent.refund or intent.orderish or (intent.invoice and refers_back)):
        # A follow-up ("refund it"): the order named most recently in an earlier user message.
        for earlier in reversed(conv.earlier_texts):
            ids = order_ids(earlier)
            if ids:
                intent.orders = [ids[-1]]
                break
    return intent


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


def plan(intent: Intent, done: list[Done]) -> list[Call]:
    """The tool calls still wanted whose prerequisites are met (empty: time to answer)."""
    if intent.refusal:
        return []
    if intent.human:
        if any(d.name == "escalate_to_human" for d in done):
            return []
        return [Call("escalate_to_human", {"reason": _clip(f"Customer asked for a person: {intent.text}", 500)})]
    calls: list[Call] = []
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
ASK_REFUND_ORDER = "Which order should I refund? Please give me its order number (for example 1042)."
UNFINISHED = "I couldn't finish checking everything in this message; please ask me again."
_STATUS = {
    "DELIVERED": "was delivered",
    "SHIPPED": "has shipped and is on its way",
    "PROCESSING": "is being processed and hasn't shipped yet",
    "CANCELLED": "was cancelled",
    "CANCELED": "was cancelled",
}


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    items = f" ({_clip(', '.join(names[:3]), 80)})" if names else ""
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


def _done_sentence(d: Done, intent: Intent) -> str:
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
    if not sentences:
        if intent.refund and not intent.orders:
            sentences.append(ASK_REFUND_ORDER)
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
        elif call.name == "escalate_to_human":
            said.append("I'll hand this over to a support teammate.")
    return LABEL + " ".join(dict.fromkeys(said))


def decide(body: Json) -> tuple[str, list[Call]]:
    """What the model says and which tools it calls, from the request alone."""
    conv = read_conversation([m for m in body["messages"] if isinstance(m, dict)])
    intent = understand(conv)
    offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    choice = body.get("tool_choice") or {}
    wanted = plan(intent, conv.done)
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


# -- the message ------------------------------------------------------------------------------------


def _canonical(body: Json) -> str:
    return json.dumps({k: v for k, v in body.items() if k != "stream"}, separators=(",", ":"), ensure_ascii=False)


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:24]


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _fit(content: list[Json], max_tokens: int) -> tuple[list[Json], bool]:
    """The content cut to ``max_tokens`` (about 4 characters a token); True when it had to be cut.

    A text block is cut mid-sentence; a tool_use that does not fit is kept with the input it had
    so far (none), as the API does when it stops in the middle of the arguments.
    """
    if _tokens(_dumps(content)) <= max_tokens:
        return content, False
    budget = max_tokens * 4
    out: list[Json] = []
    for block in content:
        size = len(block["text"]) if block["type"] == "text" else len(_dumps(block["input"]))
        if size <= budget:
            out.append(block)
            budget -= size
            continue
        if block["type"] == "text":
            out.append({"type": "text", "text": block["text"][: max(1, budget)]})
        else:
            out.append({**block, "input": {}})
        break
    return out, True


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def build_message(body: Json, sequence: int) -> Json:
    """The full Message for a validated request; ``sequence`` makes the ids unique per call."""
    canonical = _canonical(body)
    message_id = "msg_sim_" + _hash(canonical, str(sequence))
    text, calls = decide(body)
    content: list[Json] = [{"type": "text", "text": text}]
    for index, call in enumerate(calls):
        content.append(
            {
                "type": "tool_use",
                "id": "toolu_sim_" + _hash(message_id, str(index)),
                "name": call.name,
                "input": call.input,
            }
        )
    max_tokens = int(body["max_tokens"])
    content, cut = _fit(content, max_tokens)
    stop_reason = "max_tokens" if cut else ("tool_use" if calls else "end_turn")
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": _tokens(canonical),
            "output_tokens": max_tokens if cut else _tokens(_dumps(content)),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _text_pieces(text: str) -> list[str]:
    """A few words per delta, as the real API streams them."""
    words = re.findall(r"\S+\s*|\s+", text)
    return ["".join(words[i : i + 4]) for i in range(0, len(words), 4)] or [""]


def stream_events(message: Json) -> list[tuple[str, Json]]:
    """The SSE events that stream ``message``: the same content, usage and stop reason."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[tuple[str, Json]] = [("message_start", {"type": "message_start", "message": start})]
    events.append(("ping", {"type": "ping"}))
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
                )
            )
            for piece in _text_pieces(block["text"]):
                delta = {"type": "text_delta", "text": piece}
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
            )
            arguments = json.dumps(block["input"], separators=(",", ":"), ensure_ascii=False)
            for piece in [""] + (_chunks(arguments, 12) if block["input"] else []):
                delta = {"type": "input_json_delta", "partial_json": piece}
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
                "usage": dict(usage),
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_sse(events: list[tuple[str, Json]]) -> bytes:
    return "".join(
        f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"
        for name, data in events
    ).encode("utf-8")


# -- the OpenAI-compatible face ---------------------------------------------------------------------
#
# ``POST /v1/chat/completions`` with the same brain: the request is checked the way OpenAI checks
# what matters to a client (tool messages answer the preceding ``tool_calls``, ``tool_choice`` only
# with tools...), translated to a Messages request with the agent's own translation layer
# (``support_agent.llm.translate``), decided by ``build_message``, and the answer translated back
# into a ``chat.completion``. Errors have OpenAI's shape: ``{"error": {"message", "type", "param",
# "code"}}``.

OPENAI_DEFAULT_MAX_TOKENS = 4096
_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")


class OpenAIError(ApiError):
    def __init__(self, status: int, message: str, error_type: str = "invalid_request_error", param: str = "") -> None:
        super().__init__(status, error_type, message)
        self.param = param

    def body(self) -> Json:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param or None, "code": None}}


def check_openai_headers(headers: Mapping[str, str]) -> None:
    lowered = {k.lower(): v for k, v in headers.items()}
    scheme, _, token = lowered.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise OpenAIError(401, "You didn't provide an API key (Authorization: Bearer).", "invalid_request_error")


def _openai_text_ok(content: Any) -> bool:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    )


def validate_openai(body: Json) -> None:
    """OpenAI's checks that matter for a client of it; 400 on the first failure."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise OpenAIError(400, "you must provide a model parameter", param="model")
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise OpenAIError(400, "max_tokens and max_completion_tokens cannot both be set", param="max_tokens")
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if name in body and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise OpenAIError(400, f"{name} must be an integer >= 1", param=name)
    if body.get("stream"):
        raise OpenAIError(400, "stream is not supported by the simulated model", param="stream")
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            raise OpenAIError(400, "tools must be a non-empty array", param="tools")
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or tool.get("type") != "function" or not function.get("name"):
                raise OpenAIError(400, f"tools[{i}] must be {{type: function, function: {{name}}}}", param="tools")
            if not isinstance(function.get("parameters", {}), dict):
                raise OpenAIError(400, f"tools[{i}].function.parameters must be an object", param="tools")
            names.add(str(function["name"]))
    choice = body.get("tool_choice")
    if choice is not None:
        if not tools:
            raise OpenAIError(400, "tool_choice is only allowed when tools are specified", param="tool_choice")
        named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        if choice not in ("none", "auto", "required") and named not in names:
            raise OpenAIError(400, "tool_choice must be none, auto, required or a known function", param="tool_choice")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "messages must be a non-empty array", param="messages")
    waiting: list[str] = []  # tool_call ids of the last assistant message not yet answered
    answerable: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _OPENAI_ROLES:
            raise OpenAIError(400, f"messages[{i}].role must be one of {', '.join(_OPENAI_ROLES)}", param="messages")
        assert isinstance(m, dict)
        if role != "tool" and waiting:
            raise OpenAIError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(waiting)}",
                param=f"messages.[{i}].role",
            )
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise OpenAIError(400, f"messages[{i}].tool_calls must be an array", param="messages")
            if m.get("content") is None and not calls:
                raise OpenAIError(400, f"messages[{i}]: content is required without tool_calls", param="messages")
            if m.get("content") is not None and not _openai_text_ok(m["content"]):
                raise OpenAIError(400, f"messages[{i}].content must be a string or text parts", param="messages")
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    not isinstance(call.get("id"), str)
                    or call.get("type") != "function"
                    or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)
                    or not isinstance(function.get("arguments"), str)
                ):
                    raise OpenAIError(400, f"messages[{i}].tool_calls: invalid tool call", param="messages")
            waiting = [str(c["id"]) for c in calls]
            answerable = set(waiting)
        elif role == "tool":
            tid = m.get("tool_call_id")
            if tid not in answerable:
                raise OpenAIError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param=f"messages.[{i}].role",
                )
            if not _openai_text_ok(m.get("content")):
                raise OpenAIError(400, f"messages[{i}].content must be a string or text parts", param="messages")
            waiting = [w for w in waiting if w != tid]
        elif not _openai_text_ok(m.get("content")):
            raise OpenAIError(400, f"messages[{i}].content must be a string or text parts", param="messages")
    if waiting:
        raise OpenAIError(400, f"tool_call_ids without response messages: {', '.join(waiting)}", param="messages")


def anthropic_body_from_openai(body: Json) -> Json:
    """The Messages request the brain reads, from a validated chat completions request."""
    from support_agent.llm.translate import canonical_messages

    system, messages = canonical_messages(body["messages"])
    out: Json = {
        "model": body["model"],
        "max_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or OPENAI_DEFAULT_MAX_TOKENS,
        "system": system,
        "messages": messages,
    }
    tools = body.get("tools")
    if tools:
        out["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object"},
            }
            for t in tools
        ]
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            out["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
        elif choice is not None:
            out["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
        if body.get("parallel_tool_calls") is False:
            out.setdefault("tool_choice", {"type": "auto"})["disable_parallel_tool_use"] = True
    return out


def build_completion(body: Json, sequence: int, created: int) -> Json:
    """The ``chat.completion`` for a validated chat completions request."""
    from support_agent.llm.anthropic import parse_response
    from support_agent.llm.translate import openai_completion

    message = build_message(anthropic_body_from_openai(body), sequence)
    for block in message["content"]:  # OpenAI-style ids, as a real endpoint would send
        if block["type"] == "tool_use":
            block["id"] = "call_" + block["id"].removeprefix("toolu_")
    completion_id = "chatcmpl-sim_" + message["id"].removeprefix("msg_sim_")
    completion = openai_completion(parse_response(message), completion_id=completion_id, created=created)
    completion["system_fingerprint"] = "fp_simulated"
    return completion


# -- the server -------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes


class SimulatedModel:
    """The request → reply function, with the per-server call counter behind the ids."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def handle(self, headers: Mapping[str, str], raw: bytes) -> Reply:
        try:
            check_headers(headers)
            body = parse_body(raw)
        except ApiError as exc:
            return Reply(exc.status, "application/json", json.dumps(exc.body()).encode("utf-8"))
        with self._lock:
            sequence = next(self._counter)
        message = build_message(body, sequence)
        if body.get("stream"):
            return Reply(200, "text/event-stream; charset=utf-8", encode_sse(stream_events(message)))
        return Reply(200, "application/json", json.dumps(message, ensure_ascii=False).encode("utf-8"))

    def handle_openai(self, headers: Mapping[str, str], raw: bytes) -> Reply:
        """``POST /v1/chat/completions``: the same brain behind the OpenAI wire format."""
        try:
            check_openai_headers(headers)
            try:
                body = json.loads(raw.decode("utf-8")) if raw else None
            except (UnicodeDecodeError, ValueError) as exc:
                raise OpenAIError(400, f"We could not parse the JSON body of your request: {exc}") from None
            if not isinstance(body, dict):
                raise OpenAIError(400, "The request body must be a JSON object.")
            validate_openai(body)
        except ApiError as exc:
            return Reply(exc.status, "application/json", json.dumps(exc.body()).encode("utf-8"))
        with self._lock:
            sequence = next(self._counter)
        completion = build_completion(body, sequence, int(time.time()))
        return Reply(200, "application/json", json.dumps(completion, ensure_ascii=False).encode("utf-8"))


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    model: SimulatedModel


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "SimulatedModel/1.0"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms stalls
    server: _HttpServer

    def do_POST(self) -> None:
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/chat/completions":
            self._send(self.server.model.handle_openai(dict(self.headers.items()), raw))
            return
        if path != "/v1/messages":
            self._error(ApiError(404, "not_found_error", f"Not found: POST {self.path.split('?', 1)[0]}"))
            return
        reply = self.server.model.handle(dict(self.headers.items()), raw)
        self._send(reply)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] in ("/", "/health"):
            info = {
                "simulated": True,
                "api": "Anthropic Messages API and OpenAI chat completions (simulated)",
                "endpoint": "POST /v1/messages",
                "openaiEndpoint": "POST /v1/chat/completions",
            }
            self._send(Reply(200, "application/json", json.dumps(info).encode("utf-8")))
            return
        self._error(ApiError(404, "not_found_error", f"Not found: GET {self.path.split('?', 1)[0]}"))

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _error(self, exc: ApiError) -> None:
        self._send(Reply(exc.status, "application/json", json.dumps(exc.body()).encode("utf-8")))

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", reply.content_type)
        self.send_header("content-length", str(len(reply.body)))
        self.send_header("request-id", "req_sim_" + _hash(str(id(reply)), self.path)[:16])
        self.send_header("x-simulated-model", "true")
        if reply.content_type.startswith("text/event-stream"):
            self.send_header("cache-control", "no-cache")
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("simulated model: " + format, *args)


class SimulatedModelServer:
    """A running simulated model; ``url`` is the base URL (``ANTHROPIC_BASE_URL``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = _HttpServer((host, port), _Handler)
        self._httpd.model = SimulatedModel()
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="simulated-model", daemon=True
        )
        self._stopped = False

    def start(self) -> SimulatedModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> SimulatedModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(host: str = "127.0.0.1", port: int = 0) -> SimulatedModelServer:
    """Start the simulated model on a background thread (port 0: a free port)."""
    return SimulatedModelServer(host, port).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the simulated Anthropic Messages API model.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4600)
    args = parser.parse_args(argv)
    server = start(args.host, args.port)
    print(
        f"simulated model on {server.url} (POST /v1/messages, POST /v1/chat/completions); "
        f"set ANTHROPIC_BASE_URL={server.url} or OPENAI_BASE_URL={server.url}/v1",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
